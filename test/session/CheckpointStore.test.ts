import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path, Random, Schema } from "effect"
import { AgentConfig, Message, RunState } from "effect-agent"
import { CheckpointStore } from "effect-agent/session"
import { execFileSync } from "node:child_process"
import * as NodeFs from "node:fs"
import { crc32 } from "node:zlib"
import * as Journal from "../../src/session/internal/journal.ts"
import * as MemoryDisk from "../../src/session/internal/memoryDisk.ts"
import { patience } from "../patience.ts"

const assistant = (id: string): Message.AssistantMessage => ({
  role: "assistant",
  content: [{ type: "text", text: `calling ${id}` }, { type: "tool-call", id, name: "step", params: { n: id } }],
  stopReason: "toolUse",
  usage: { ...Message.emptyUsage, input: 10, output: 2, cost: 0.0001 }
})

/** A transcript of `turns` turns, each an assistant call and its result. */
const transcript = (turns: number, from = 0): Array<Message.Message> => {
  const messages: Array<Message.Message> = from === 0 ? [Message.user("go ✓ — ünïcode")] : []
  for (let i = from; i < from + turns; i++) {
    messages.push(assistant(`c${i}`), Message.toolResult({ toolCallId: `c${i}`, toolName: "step", text: `result ${i}`, isError: false }))
  }
  return messages
}

const stateOf = (messages: ReadonlyArray<Message.Message>, turn = 0): RunState.RunState => ({
  ...RunState.make({ runId: "r1", system: "be brief", messages }),
  turn,
  usage: { ...Message.emptyUsage, input: 10 * turn, output: 2 * turn, cost: 0.0001 * turn },
  elapsedMs: 1234.5,
  steering: [Message.user("later")],
  pluginState: { counter: { calls: 3 } }
})

/** A state saved in the middle of a batch: calls d, e and f asked for, f done, e started, d waiting for approval. */
const midBatch = (): RunState.RunState => {
  const calls: Message.AssistantMessage = {
    role: "assistant",
    content: ["d", "e", "f"].map((id) => ({ type: "tool-call", id, name: "deploy", params: { env: id } })),
    stopReason: "toolUse",
    usage: Message.emptyUsage
  }
  return {
    ...stateOf([...transcript(1), calls], 1),
    partialResults: [Message.toolResult({ toolCallId: "f", toolName: "deploy", text: "deployed f", isError: false })],
    startedCalls: ["e"],
    pendingApprovals: [{ toolCallId: "d", toolName: "deploy", params: { env: "d" }, reason: "production" }]
  }
}

/** The head with its checksum made again, as a writer of that text would have made it. */
const reseal = (head: string): string => {
  const json = `${head.slice(0, head.lastIndexOf(",\"checksum\":\""))}}`
  return `${json.slice(0, -1)},"checksum":"${crc32(json).toString(16).padStart(8, "0")}"}`
}

const config = AgentConfig.makeUnsafe({ maxTurns: 7, budgets: { costUsd: 2 } })

/** A file store in a fresh temp directory, with helpers to look at its files. */
const fileStore = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  const store = yield* CheckpointStore.fileSystem(dir)
  const file = (name: string) => path.join(dir, "s1", name)
  return { fs, dir, store, file, reopen: CheckpointStore.fileSystem(dir) }
})

describe("CheckpointStore", () => {
  it.effect("a checkpoint round-trips: state, config and how a finished session ended, exactly", () =>
    Effect.gen(function*() {
      for (const store of [CheckpointStore.memory(), (yield* fileStore).store]) {
        const state = stateOf(transcript(3), 3)
        yield* store.create("s1", { state, config })
        assert.deepStrictEqual(yield* store.load("s1"), { state, config })
        yield* store.save("s1", { state: midBatch(), config })
        assert.deepStrictEqual(yield* store.load("s1"), { state: midBatch(), config })
        const finished: CheckpointStore.Finished = { outcome: { _tag: "MaxTurns", limit: 3 }, firstMessage: 1 }
        yield* store.save("s1", { state, config, finished })
        assert.deepStrictEqual(yield* store.load("s1"), { state, config, finished })
        // a later save that does not say the session has finished: it has not
        yield* store.save("s1", { state, config })
        assert.deepStrictEqual(yield* store.load("s1"), { state, config })
      }
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("saving a turn appends only that turn's messages to the journal and replaces the small head", () =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      const first = transcript(2)
      yield* store.create("s1", { state: stateOf(first, 2), config })
      const journalBefore = yield* fs.readFile(file("journal-0.ndjson"))
      const turn = transcript(1, 2)
      const saved = yield* store.save("s1", { state: stateOf([...first, ...turn], 3), config })
      const journalAfter = yield* fs.readFile(file("journal-0.ndjson"))
      const head = yield* fs.readFile(file("head.json"))
      const added = new TextEncoder().encode(
        turn.map((m) => JSON.stringify(Schema.encodeSync(Schema.toCodecJson(Message.Message))(m)) + "\n").join("")
      )
      // the journal kept its bytes and grew by exactly the turn's lines; the save wrote those and the head
      assert.deepStrictEqual(journalAfter.subarray(0, journalBefore.length), journalBefore)
      assert.deepStrictEqual(journalAfter.subarray(journalBefore.length), added)
      assert.strictEqual(saved.bytes, added.length + head.length)
      assert.isFalse(yield* fs.exists(file("head.json.tmp")))
      // a store in another process (a new instance) reads it back
      const loaded = yield* (yield* reopen).load("s1")
      assert.deepStrictEqual(loaded.state, stateOf([...first, ...turn], 3))
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a save whose transcript does not extend the saved one writes a new journal and drops the old", () =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(transcript(2), 2) })
      const other = [Message.user("another task"), ...transcript(1, 5)]
      yield* store.save("s1", { state: stateOf(other, 1) })
      assert.isFalse(yield* fs.exists(file("journal-0.ndjson")))
      assert.isTrue(yield* fs.exists(file("journal-1.ndjson")))
      assert.deepStrictEqual((yield* (yield* reopen).load("s1")).state.messages, other)
      // a new instance that never loaded the session compares the saved end before appending
      const fresh = yield* reopen
      yield* fresh.save("s1", { state: stateOf([...other, ...transcript(1, 9)], 2) })
      assert.isTrue(yield* fs.exists(file("journal-1.ndjson")))
      assert.deepStrictEqual((yield* (yield* reopen).load("s1")).state.messages, [...other, ...transcript(1, 9)])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a journal line cut by a crash is ignored, and the next save writes over it", () =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      const first = transcript(1)
      yield* store.create("s1", { state: stateOf(first, 1) })
      // the crash: a turn's lines were being appended, the head was never replaced
      const journal = yield* fs.readFile(file("journal-0.ndjson"))
      const cut = new TextEncoder().encode("{\"role\":\"assistant\",\"content\":[{\"type\":\"te")
      yield* fs.writeFile(file("journal-0.ndjson"), new Uint8Array([...journal, ...cut]))
      const restarted = yield* reopen
      assert.deepStrictEqual((yield* restarted.load("s1")).state, stateOf(first, 1))
      const next = [...first, ...transcript(1, 1)]
      yield* restarted.save("s1", { state: stateOf(next, 2) })
      assert.deepStrictEqual((yield* (yield* reopen).load("s1")).state, stateOf(next, 2))
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("creating an id that exists fails, and ids that could escape the directory are refused", () =>
    Effect.gen(function*() {
      const { store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(transcript(0)) })
      const exists = yield* Effect.flip(store.create("s1", { state: stateOf(transcript(1)) }))
      assert.deepStrictEqual([exists._tag, exists.sessionId], ["CheckpointExists", "s1"])
      for (const id of ["", "..", ".hidden", "a/b", "a\\b", "x".repeat(129)]) {
        const error = yield* Effect.flip(store.load(id))
        assert.strictEqual(error._tag, "InvalidSessionId", id)
      }
      const missing = yield* Effect.flip(store.load("nobody"))
      assert.deepStrictEqual([missing._tag, missing.sessionId], ["CheckpointMissing", "nobody"])
      yield* store.remove("s1")
      assert.strictEqual((yield* Effect.flip(store.load("s1")))._tag, "CheckpointMissing")
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("a corrupt checkpoint", () => {
  /** Saves a checkpoint, damages a file, and returns what loading gives, checking nothing was written. */
  const damaged = (name: "head.json" | "journal-0.ndjson", damage: (bytes: Uint8Array) => Uint8Array) =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(transcript(3), 3), config })
      const bytes = damage(yield* fs.readFile(file(name)))
      yield* fs.writeFile(file(name), bytes)
      const before = yield* fs.readDirectory(file(""))
      const journal = yield* fs.readFile(file("journal-0.ndjson"))
      const head = yield* fs.readFile(file("head.json"))
      const restarted = yield* reopen
      const loadError = yield* Effect.flip(restarted.load("s1"))
      // saving over it is refused too, with the same error
      const saveError = yield* Effect.flip(restarted.save("s1", { state: stateOf(transcript(4), 4) }))
      assert.deepStrictEqual(saveError, loadError)
      // byte for byte unchanged, nothing added or removed
      assert.deepStrictEqual(yield* fs.readFile(file("journal-0.ndjson")), journal)
      assert.deepStrictEqual(yield* fs.readFile(file("head.json")), head)
      assert.deepStrictEqual((yield* fs.readDirectory(file(""))).sort(), before.sort())
      return { error: loadError, path: file(name) }
    }).pipe(Effect.provide(NodeServices.layer))

  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes)
  const journalLength = new TextEncoder().encode(
    transcript(3).map((m) => JSON.stringify(Schema.encodeSync(Schema.toCodecJson(Message.Message))(m)) + "\n").join("")
  ).length
  const bytes = (text: string) => new TextEncoder().encode(text)

  it.effect("an empty head", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", () => new Uint8Array(0))
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointCorrupt({ sessionId: "s1", file: path, problem: "the file is empty" }))
    }))

  it.effect("a truncated head", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", (head) => head.subarray(0, head.length - 20))
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointCorrupt({ sessionId: "s1", file: path, problem: "the file is not JSON" }))
    }))

  it.effect("a garbage head", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", () => new Uint8Array([0xff, 0xfe, 0x00, 0x41]))
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointCorrupt({ sessionId: "s1", file: path, problem: "the file is not UTF-8 text" }))
    }))

  it.effect("a head that is JSON but not a head says what does not decode", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", (head) => bytes(reseal(text(head).replace(/"turn":3/, "\"turn\":\"three\""))))
      assert.strictEqual(error._tag, "CheckpointCorrupt")
      if (error._tag !== "CheckpointCorrupt") return
      assert.strictEqual(error.file, path)
      assert.match(error.problem, /turn/)
    }))

  it.effect("a head of another format version", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", (head) => bytes(reseal(text(head).replace(/^\{"version":2/, "{\"version\":3"))))
      assert.deepStrictEqual(
        error,
        new CheckpointStore.CheckpointVersionMismatch({ sessionId: "s1", file: path, format: "checkpoint", found: 3, expected: 2 })
      )
    }))

  it.effect("a run state of another version", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged(
        "head.json",
        (head) => bytes(reseal(text(head).replace(/"state":\{"version":1/, "\"state\":{\"version\":0")))
      )
      assert.deepStrictEqual(
        error,
        new CheckpointStore.CheckpointVersionMismatch({ sessionId: "s1", file: path, format: "RunState", found: 0, expected: 1 })
      )
    }))

  it.effect("a journal shorter than the head records", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("journal-0.ndjson", (journal) => journal.subarray(0, journal.length - 30))
      assert.strictEqual(error._tag, "CheckpointCorrupt")
      if (error._tag !== "CheckpointCorrupt") return
      assert.strictEqual(error.file, path)
      assert.match(error.problem, /^the journal has \d+ bytes; the head records \d+$/)
    }))

  it.effect("a garbage line in the journal: which line, at which byte", () =>
    Effect.gen(function*() {
      let offset = 0
      const { error, path } = yield* damaged("journal-0.ndjson", (journal) => {
        const lines = text(journal).split("\n")
        offset = bytes(lines.slice(0, 2).join("\n") + "\n").length
        // same length, so only the line's content is wrong
        lines[2] = "x".repeat(bytes(lines[2]!).length)
        return bytes(lines.join("\n"))
      })
      assert.strictEqual(error._tag, "CheckpointCorrupt")
      if (error._tag !== "CheckpointCorrupt") return
      assert.deepStrictEqual([error.file, error.line, error.offset], [path, 3, offset])
    }))

  it.effect("a missing journal", () =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(transcript(1), 1) })
      yield* fs.remove(file("journal-0.ndjson"))
      const error = yield* Effect.flip((yield* reopen).load("s1"))
      assert.deepStrictEqual(
        error,
        new CheckpointStore.CheckpointCorrupt({ sessionId: "s1", file: file("journal-0.ndjson"), problem: "the journal is missing" })
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a bit flip that turns \"config\" into \"konfig\" is refused: the checksum, then the unknown key", () =>
    Effect.gen(function*() {
      // 'c' (0x63) and 'k' (0x6b) are one bit apart: without a checksum the config fell back to the defaults
      const flipped = yield* damaged("head.json", (head) => bytes(text(head).replace("\"config\":", "\"konfig\":")))
      assert.deepStrictEqual(flipped.error, new CheckpointStore.CheckpointCorrupt({
        sessionId: "s1",
        file: flipped.path,
        problem: "the file does not match its checksum"
      }))
      // written that way, with a checksum that matches: an unknown key is still an error
      const written = yield* damaged("head.json", (head) => bytes(reseal(text(head).replace("\"config\":", "\"konfig\":"))))
      assert.strictEqual(written.error._tag, "CheckpointCorrupt")
      assert.match(written.error._tag === "CheckpointCorrupt" ? written.error.problem : "", /konfig/)
    }))

  it.effect("a head without its checksum is refused", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", (head) => bytes(text(head).replace(/,"checksum":"[0-9a-f]{8}"\}$/, "}")))
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointCorrupt({ sessionId: "s1", file: path, problem: "the file has no checksum" }))
    }))

  it.effect("a journal line changed in a way that still decodes is refused by the journal's checksum", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("journal-0.ndjson", (journal) => bytes(text(journal).replace("result 1", "result 7")))
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointCorrupt({
        sessionId: "s1",
        file: path,
        problem: `the journal's first ${journalLength} bytes do not match the checksum the head records`
      }))
    }))

  it.effect("no single-bit flip in the head or the journal loads: each is a typed error (100 random flips)", () =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(transcript(3), 3), config })
      const originals = {
        "head.json": yield* fs.readFile(file("head.json")),
        "journal-0.ndjson": yield* fs.readFile(file("journal-0.ndjson"))
      }
      const loaded: Array<string> = []
      for (let i = 0; i < 100; i++) {
        const name = i % 2 === 0 ? "head.json" : "journal-0.ndjson"
        const flipped = new Uint8Array(originals[name])
        const at = yield* Random.nextIntBetween(0, flipped.length - 1)
        flipped[at] = flipped[at]! ^ (1 << (yield* Random.nextIntBetween(0, 7)))
        yield* fs.writeFile(file(name), flipped)
        const exit = yield* Effect.exit((yield* reopen).load("s1"))
        if (exit._tag === "Success") loaded.push(`${name} byte ${at}`)
        else {
          const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")?.error
          assert.include(["CheckpointCorrupt", "CheckpointVersionMismatch"], error?._tag, String(exit.cause))
        }
        yield* fs.writeFile(file(name), originals[name])
      }
      assert.deepStrictEqual(loaded, [])
    }).pipe(Effect.provide(NodeServices.layer), Random.withSeed("bit flips")))

  /** A checkpoint whose transcript was written as `messages`, the head's checksums matching: what loading gives. */
  const written = (messages: ReadonlyArray<Message.Message>, state: Partial<RunState.RunState> = {}) =>
    Effect.gen(function*() {
      const { file, reopen, store } = yield* fileStore
      yield* store.create("s1", { state: { ...stateOf(messages, 1), ...state } })
      return { error: yield* Effect.flip((yield* reopen).load("s1")), file }
    }).pipe(Effect.provide(NodeServices.layer))

  const loadWritten = (messages: ReadonlyArray<Message.Message>) =>
    Effect.gen(function*() {
      const { reopen, store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(messages, 1) })
      return yield* (yield* reopen).load("s1")
    }).pipe(Effect.provide(NodeServices.layer))

  const lines = (messages: ReadonlyArray<Message.Message>) =>
    messages.map((m) => JSON.stringify(Schema.encodeSync(Schema.toCodecJson(Message.Message))(m)) + "\n")
  const offsetOf = (messages: ReadonlyArray<Message.Message>, index: number) =>
    bytes(lines(messages).slice(0, index).join("")).length

  it.effect("a transcript a run cannot go on from is refused at its line: reordered, duplicate ids, orphan results", () =>
    Effect.gen(function*() {
      const [user, a0, r0, a1, r1] = transcript(2)
      // across messages an id may come again (some servers reuse them): each result answers the message before it
      const reused = [user!, a0!, r0!, a0!, r0!]
      assert.deepStrictEqual((yield* loadWritten(reused)).state.messages, reused)
      const sameIdTwice: Message.AssistantMessage = { ...assistant("c1"), content: [...assistant("c1").content, ...assistant("c1").content] }
      const twoCalls: Message.AssistantMessage = {
        ...assistant("c0"),
        content: [...assistant("c0").content, { type: "tool-call", id: "c9", name: "step", params: {} }]
      }
      const cases: ReadonlyArray<readonly [ReadonlyArray<Message.Message>, number, RegExp]> = [
        // the last two lines swapped: a result before its call
        [[user!, a0!, r0!, r1!, a1!], 3, /^the result of call "c1" answers no call waiting for its result$/],
        // a result between a call and the results before it
        [[user!, a0!, a1!, r0!, r1!], 2, /^an assistant message comes before every call of message 2 has its result$/],
        // the same call id twice in a message
        [[user!, a0!, r0!, sameIdTwice, r1!, r1!], 3, /^the tool call id "c1" appears twice in the message$/],
        // a result for a call that was never made
        [[user!, a0!, r0!, r0!], 3, /^the result of call "c0" answers no call waiting for its result$/],
        // a message in the middle of a batch's results
        [[user!, twoCalls, r0!, user!], 3, /^a user message comes before every call of message 2 has its result$/]
      ]
      for (const [messages, index, problem] of cases) {
        const { error, file } = yield* written(messages)
        assert.strictEqual(error._tag, "CheckpointCorrupt")
        if (error._tag !== "CheckpointCorrupt") continue
        assert.deepStrictEqual([error.file, error.line, error.offset], [file("journal-0.ndjson"), index + 1, offsetOf(messages, index)])
        assert.match(error.problem, problem)
      }
      // a batch's saved results, started calls and approvals are for calls of the last assistant message
      const open = transcript(1).slice(0, 2)
      for (const state of [
        { partialResults: [Message.toolResult({ toolCallId: "zz", toolName: "step", text: "?", isError: false })] },
        { startedCalls: ["c0", "c0"] },
        { pendingApprovals: [{ toolCallId: "c7", toolName: "deploy", params: {} }] }
      ]) {
        const { error, file } = yield* written(open, state)
        assert.strictEqual(error._tag, "CheckpointCorrupt")
        assert.strictEqual(error._tag === "CheckpointCorrupt" && error.file, file("head.json"))
      }
    }))

  it.effect("lines reordered in the journal are refused by its checksum", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("journal-0.ndjson", (journal) => {
        const all = text(journal).split("\n")
        return bytes([all[0], all[3], all[4], all[1], all[2], ...all.slice(5)].join("\n"))
      })
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointCorrupt({
        sessionId: "s1",
        file: path,
        problem: `the journal's first ${journalLength} bytes do not match the checksum the head records`
      }))
    }))

  /**
   * Loads a checkpoint whose `name` was replaced by `make(path)`, under a time limit: a store
   * that opened a FIFO or read a device would hang or fill the memory. A FIFO is opened for
   * writing and closed afterwards, so that a read blocked on it ends.
   */
  const special = (name: string, make: (path: string) => void) =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(transcript(3), 3), config })
      yield* fs.remove(file(name), { recursive: true })
      make(file(name))
      yield* Effect.addFinalizer(() => Effect.sync(() => releaseFifo(file(name))))
      // a bound, not a speed: a load that hangs fails the test (2 s can pass on a loaded machine)
      const exit = yield* Effect.exit((yield* reopen).load("s1").pipe(Effect.timeout(patience)))
      return { exit, path: file(name) }
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer))

  const releaseFifo = (path: string) => {
    try {
      if (!NodeFs.lstatSync(path).isFIFO()) return
      NodeFs.closeSync(NodeFs.openSync(path, NodeFs.constants.O_WRONLY | NodeFs.constants.O_NONBLOCK))
    } catch {
      // no reader waits on it
    }
  }

  const mkfifo = (path: string) => execFileSync("mkfifo", [path])
  const specials: ReadonlyArray<readonly [string, (path: string) => void, RegExp]> = [
    ["a FIFO", mkfifo, /^the file is a FIFO, not a regular file/],
    ["a link to /dev/zero", (path) => NodeFs.symlinkSync("/dev/zero", path), /^the file is a symbolic link, not a regular file/],
    ["a link to /dev/urandom", (path) => NodeFs.symlinkSync("/dev/urandom", path), /^the file is a symbolic link/],
    ["a directory", (path) => NodeFs.mkdirSync(path), /^the file is a directory, not a regular file/]
  ]

  for (const name of ["head.json", "journal-0.ndjson"]) {
    for (const [what, make, problem] of specials) {
      it.live(`${name} that is ${what} fails to load with CheckpointCorrupt, at once`, () =>
        Effect.gen(function*() {
          const { exit, path } = yield* special(name, make)
          const error = exit._tag === "Failure" ? exit.cause.reasons.find((reason) => reason._tag === "Fail")?.error : undefined
          assert.strictEqual(error?._tag, "CheckpointCorrupt", String(exit))
          assert.strictEqual(error?._tag === "CheckpointCorrupt" && error.file, path)
          assert.match(error?._tag === "CheckpointCorrupt" ? error.problem : "", problem)
        }))
    }
  }

  it.effect("a head larger than a head can be is not read; nor is a journal larger than a store reads", () =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      yield* store.create("s1", { state: stateOf(transcript(3), 3), config })
      const head = yield* fs.readFileString(file("head.json"))
      // 65 MiB, without writing them: a sparse file
      NodeFs.truncateSync(file("head.json"), 65 * 1024 * 1024)
      const big = yield* Effect.flip((yield* reopen).load("s1"))
      assert.deepStrictEqual(big, new CheckpointStore.CheckpointCorrupt({
        sessionId: "s1",
        file: file("head.json"),
        problem: "the file has 68157440 bytes; a head has at most 64 MiB"
      }))
      yield* fs.writeFileString(file("head.json"), reseal(head.replace(/"bytes":\d+/, "\"bytes\":4000000000")))
      const huge = yield* Effect.flip((yield* reopen).load("s1"))
      assert.deepStrictEqual(huge, new CheckpointStore.CheckpointCorrupt({
        sessionId: "s1",
        file: file("head.json"),
        problem: "the head records a journal of 4000000000 bytes; a store reads at most 1024 MiB"
      }))
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a save whose head would be larger than a store reads fails with CheckpointTooLarge, writes nothing, and the last checkpoint loads", () =>
    Effect.gen(function*() {
      const files = yield* fileStore
      for (const [store, reopen] of [[CheckpointStore.memory(), undefined], [files.store, files.reopen]] as const) {
        const state = stateOf(transcript(3), 3)
        yield* store.create("s1", { state, config })
        // a steering flood's worth of queue: 65 messages of 1 MiB in the head
        const flooded: RunState.RunState = {
          ...stateOf(transcript(4), 4),
          steering: Array.from({ length: 65 }, (_, i) => Message.user(`${i}`.padEnd(1024 * 1024, "x")))
        }
        const refused = yield* Effect.flip(store.save("s1", { state: flooded, config }))
        assert.strictEqual(refused._tag, "CheckpointTooLarge")
        assert.include(refused._tag === "CheckpointTooLarge" ? refused : {}, {
          sessionId: "s1",
          file: store.headFile("s1"),
          limit: 64 * 1024 * 1024
        })
        assert.isAbove(refused._tag === "CheckpointTooLarge" ? refused.bytes : 0, 65 * 1024 * 1024)
        // nothing was written: this store and a new one on the same files load the last checkpoint
        assert.deepStrictEqual(yield* store.load("s1"), { state, config })
        if (reopen !== undefined) assert.deepStrictEqual(yield* (yield* reopen).load("s1"), { state, config })
        // and the session goes on from it
        yield* store.save("s1", { state: stateOf(transcript(4), 4), config })
        assert.deepStrictEqual((yield* store.load("s1")).state.turn, 4)
      }
    }).pipe(Effect.provide(NodeServices.layer)), { timeout: 240_000 })

  it.effect("a save whose journal would pass what a store reads fails with CheckpointTooLarge before it appends", () =>
    Effect.gen(function*() {
      const store = Journal.make(MemoryDisk.make(), { headBytes: 64 * 1024, journalBytes: 4096 })
      const state = stateOf(transcript(3), 3)
      yield* store.create("s1", { state, config })
      const longer = stateOf(transcript(40), 40)
      const refused = yield* Effect.flip(store.save("s1", { state: longer, config }))
      assert.deepStrictEqual(
        [refused._tag, refused._tag === "CheckpointTooLarge" && [refused.file, refused.limit]],
        ["CheckpointTooLarge", ["memory:s1/journal-0.ndjson", 4096]]
      )
      assert.deepStrictEqual(yield* store.load("s1"), { state, config })
      // a whole new transcript, too: refused before the new journal is written
      const other = stateOf([Message.user("x".repeat(5000))])
      assert.strictEqual((yield* Effect.flip(store.save("s1", { state: other, config })))._tag, "CheckpointTooLarge")
      assert.deepStrictEqual(yield* store.load("s1"), { state, config })
      assert.strictEqual((yield* Effect.flip(store.create("s2", { state: other, config })))._tag, "CheckpointTooLarge")
      assert.strictEqual((yield* Effect.flip(store.load("s2")))._tag, "CheckpointMissing")
    }))

  it.effect("a journal longer than the head records is read only as far as the head records", () =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      const state = stateOf(transcript(3), 3)
      yield* store.create("s1", { state, config })
      NodeFs.truncateSync(file("journal-0.ndjson"), 900 * 1024 * 1024)
      const rss = process.memoryUsage().rss
      assert.deepStrictEqual((yield* (yield* reopen).load("s1")).state, state)
      assert.isBelow(process.memoryUsage().rss - rss, 100 * 1024 * 1024)
      assert.strictEqual((yield* fs.stat(file("journal-0.ndjson"))).size, BigInt(900 * 1024 * 1024))
    }).pipe(Effect.provide(NodeServices.layer)))

  const Damage = Schema.Struct({
    file: Schema.Literals(["head.json", "journal-0.ndjson"]),
    how: Schema.Literals(["replace", "overwrite", "cut", "append"]),
    at: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 2000 })),
    bytes: Schema.Array(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 255 }))).check(Schema.isMaxLength(64))
  })

  it.effect.prop("random damage gives a checkpoint or a typed failure, never a defect, and changes no file", { damage: Damage }, ({ damage }) =>
    Effect.gen(function*() {
      const { file, fs, reopen, store } = yield* fileStore
      const state = stateOf(transcript(2), 2)
      yield* store.create("s1", { state, config })
      const original = yield* fs.readFile(file(damage.file))
      const noise = new Uint8Array(damage.bytes)
      const at = Math.min(damage.at, original.length)
      const changed = damage.how === "replace"
        ? noise
        : damage.how === "overwrite"
        ? new Uint8Array([...original.subarray(0, at), ...noise, ...original.subarray(Math.min(original.length, at + noise.length))])
        : damage.how === "cut"
        ? original.subarray(0, at)
        : new Uint8Array([...original, ...noise])
      yield* fs.writeFile(file(damage.file), changed)
      const exit = yield* Effect.exit((yield* reopen).load("s1"))
      if (exit._tag === "Failure") {
        const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail")
        assert.isDefined(failure, `not a typed failure: ${String(exit.cause)}`)
        assert.include(
          ["CheckpointCorrupt", "CheckpointVersionMismatch"],
          failure!.error._tag
        )
      } else {
        // bytes past the recorded journal are ignored; whatever decodes is a valid checkpoint
        assert.strictEqual(exit.value.state.messages.length, state.messages.length)
      }
      assert.deepStrictEqual(yield* fs.readFile(file(damage.file)), changed)
    }).pipe(Effect.provide(NodeServices.layer)), { timeout: 240_000, arbitrary: { runs: 150 } })
})

describe("links planted in a session directory", () => {
  /**
   * A store in a temp directory and, outside it, decoy files (named as the store's files, so a
   * link to their directory looks like a session) whose bytes must never change.
   */
  const withDecoys = Effect.gen(function*() {
    const { dir, file, fs, reopen, store } = yield* fileStore
    const outside = yield* fs.makeTempDirectoryScoped()
    const decoys = ["decoy.txt", "head.json", "journal-0.ndjson", "journal-1.ndjson"].map((name) => `${outside}/${name}`)
    for (const decoy of decoys) yield* fs.writeFileString(decoy, `precious ${decoy}\n`)
    const snapshot = () => Effect.forEach(decoys, (decoy) => fs.readFileString(decoy))
    const before = yield* snapshot()
    const unchanged = Effect.gen(function*() {
      assert.deepStrictEqual(yield* snapshot(), before)
      assert.deepStrictEqual((yield* fs.readDirectory(outside)).sort(), decoys.map((d) => d.slice(outside.length + 1)).sort())
    })
    return { dir, file, fs, outside, reopen, store, unchanged }
  })

  /** What an operation gives: success, or a typed failure's tag (a defect fails the test). */
  const outcome = <A, E extends { readonly _tag: string }>(effect: Effect.Effect<A, E>) =>
    Effect.map(Effect.exit(effect), (exit) => {
      if (exit._tag === "Success") return "ok"
      const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail")
      assert.isDefined(failure, String(exit.cause))
      return failure!.error._tag
    })

  const first = transcript(2)
  const next = [...first, ...transcript(1, 2)]
  const other = [Message.user("another task"), ...transcript(1, 5)]

  for (const name of ["head.json.tmp", "head.json", "journal-0.ndjson", "journal-1.ndjson"]) {
    it.effect(`${name} as a link out of the store: no byte outside changes, and what cannot go on fails typed`, () =>
      Effect.gen(function*() {
        const { file, fs, outside, reopen, store, unchanged } = yield* withDecoys
        yield* store.create("s1", { state: stateOf(first, 2), config })
        yield* fs.remove(file(name), { force: true })
        yield* fs.symlink(`${outside}/${name === "head.json.tmp" ? "decoy.txt" : name}`, file(name))
        // appending to the journal, replacing the head, and writing a new journal generation
        const appended = yield* outcome(store.save("s1", { state: stateOf(next, 3), config }))
        const fresh = yield* outcome(store.save("s1", { state: stateOf(other, 1), config }))
        const loaded = yield* outcome((yield* reopen).load("s1"))
        yield* unchanged
        // the journal in use refuses its link; a link in place of a file that is written anew is replaced
        assert.deepStrictEqual([appended, fresh, loaded], name === "journal-0.ndjson"
          ? ["CheckpointCorrupt", "ok", "ok"]
          : ["ok", "ok", "ok"])
        if (loaded === "ok") assert.deepStrictEqual((yield* (yield* reopen).load("s1")).state.messages, other)
      }).pipe(Effect.provide(NodeServices.layer)))
  }

  it.effect("a head that is a link is not read through", () =>
    Effect.gen(function*() {
      const { file, fs, outside, reopen, store, unchanged } = yield* withDecoys
      yield* store.create("s1", { state: stateOf(first, 2), config })
      yield* fs.rename(file("head.json"), `${outside}/real-head.json`)
      yield* fs.symlink(`${outside}/real-head.json`, file("head.json"))
      const error = yield* Effect.flip((yield* reopen).load("s1"))
      assert.strictEqual(error._tag, "CheckpointCorrupt")
      yield* fs.remove(`${outside}/real-head.json`)
      yield* unchanged
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a session directory that is a link out of the store is refused by every operation", () =>
    Effect.gen(function*() {
      const { dir, fs, outside, reopen, store, unchanged } = yield* withDecoys
      yield* fs.symlink(outside, `${dir}/s1`)
      const results = [
        yield* outcome(store.create("s1", { state: stateOf(first, 2), config })),
        yield* outcome(store.save("s1", { state: stateOf(next, 3), config })),
        yield* outcome((yield* reopen).load("s1")),
        yield* outcome((yield* reopen).save("s1", { state: stateOf(next, 3), config }))
      ]
      assert.deepStrictEqual(results, ["CheckpointCorrupt", "CheckpointCorrupt", "CheckpointCorrupt", "CheckpointCorrupt"])
      const error = yield* Effect.flip((yield* reopen).load("s1"))
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointCorrupt({
        sessionId: "s1",
        file: `${dir}/s1`,
        problem: "the session directory is a symbolic link, not a directory: a store never follows one"
      }))
      // remove deletes the link, not what it points to
      yield* store.remove("s1")
      assert.isFalse(yield* fs.exists(`${dir}/s1`))
      yield* unchanged
    }).pipe(Effect.provide(NodeServices.layer)))
})
