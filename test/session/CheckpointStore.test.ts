import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path, Schema } from "effect"
import { AgentConfig, CheckpointStore, Message, RunState } from "effect-agent"

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
  pendingApprovals: [{ toolCallId: "d", toolName: "deploy", params: { env: "prod" }, reason: "production" }],
  pluginState: { counter: { calls: 3 } }
})

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
  it.effect("a checkpoint round-trips: state and config, exactly", () =>
    Effect.gen(function*() {
      for (const store of [CheckpointStore.memory(), (yield* fileStore).store]) {
        const state = stateOf(transcript(3), 3)
        yield* store.create("s1", { state, config })
        const loaded = yield* store.load("s1")
        assert.deepStrictEqual(loaded, { state, config })
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
      const { error, path } = yield* damaged("head.json", (head) => bytes(text(head).replace(/"turn":3/, "\"turn\":\"three\"")))
      assert.strictEqual(error._tag, "CheckpointCorrupt")
      if (error._tag !== "CheckpointCorrupt") return
      assert.strictEqual(error.file, path)
      assert.match(error.problem, /turn/)
    }))

  it.effect("a head of another format version", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", (head) => bytes(text(head).replace(/^\{"version":1/, "{\"version\":2")))
      assert.deepStrictEqual(
        error,
        new CheckpointStore.CheckpointVersionMismatch({ sessionId: "s1", file: path, format: "checkpoint", found: 2, expected: 1 })
      )
    }))

  it.effect("a run state of another version", () =>
    Effect.gen(function*() {
      const { error, path } = yield* damaged("head.json", (head) => bytes(text(head).replace(/"state":\{"version":1/, "\"state\":{\"version\":0")))
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
    }).pipe(Effect.provide(NodeServices.layer)), { timeout: 60_000, arbitrary: { runs: 150 } })
})
