import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FileSystem, Latch, Layer, Logger, Path } from "effect"
import { Agent, AgentEvent } from "effect-agent"
import { CheckpointStore, Session, Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import { captureLogs, recorder } from "../support.ts"
import { followTranscript, threeTurns, toolsLayer } from "./fixture.ts"
import { patience } from "../patience.ts"

const layers = (turns: ReadonlyArray<ScriptedModel.Turn>, onStart?: (name: string) => void) =>
  Layer.mergeAll(ScriptedModel.layer(followTranscript(turns)), toolsLayer([], onStart, 60_000), NodeServices.layer)

const setup = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped()
  const path = (yield* Path.Path).join(dir, "trajectory.ndjson")
  const lines = Effect.map(fs.readFileString(path), (text) => text.split("\n"))
  return { dir, fs, path, lines }
})

const decodeAll = (lines: ReadonlyArray<string>) =>
  Effect.forEach(lines.filter((line) => line !== ""), (line) => AgentEvent.decodeJson(JSON.parse(line)))

describe("Trajectory.ndjson", () => {
  it.live("writes every event of a run, one JSON line each, in order, ending with AgentEnd; a fresh run truncates", () =>
    Effect.gen(function*() {
      const { lines, path } = yield* setup
      const first = recorder()
      yield* Agent.run({ prompt: "go", plugins: [Trajectory.ndjson(path), first.plugin] }).pipe(
        Effect.provide(layers(threeTurns("slow", 1)))
      )
      const written = yield* lines
      assert.strictEqual(written.at(-1), "", "the file ends with a newline")
      assert.deepStrictEqual(yield* decodeAll(written), first.events)
      assert.strictEqual(first.events.at(-1)?._tag, "AgentEnd")

      const second = recorder()
      yield* Agent.run({ prompt: "again", plugins: [Trajectory.ndjson(path), second.plugin] }).pipe(
        Effect.provide(layers([{ text: "hi" }]))
      )
      assert.deepStrictEqual(yield* decodeAll(yield* lines), second.events)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("an interrupted run's trajectory ends with AgentEnd; a resumed session appends after a line cut by a crash", () =>
    Effect.gen(function*() {
      const { dir, fs, lines, path } = yield* setup
      const store = yield* CheckpointStore.fileSystem(dir)
      const started = Latch.makeUnsafe()
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s1", prompt: "go", plugins: [Trajectory.ndjson(path)] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(layers(threeTurns("slow", 60_000), (name) => void started.openUnsafe()))
        )
      )
      yield* started.await
      yield* Fiber.interrupt(fiber)
      const interrupted = yield* decodeAll(yield* lines)
      const end = interrupted.at(-1)
      assert.deepStrictEqual(end?._tag === "AgentEnd" && end.outcome, { _tag: "Cancelled", reason: "interrupted" })

      // a process killed in the middle of writing a line
      yield* fs.writeFileString(path, "{\"_tag\":\"Turn", { flag: "a" })
      const resumed = recorder()
      yield* Session.resume("s1", { plugins: [Trajectory.ndjson(path), resumed.plugin] }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(layers(threeTurns("slow", 1)))
      )
      const all = yield* lines
      assert.strictEqual(all[interrupted.length], "{\"_tag\":\"Turn")
      assert.deepStrictEqual(yield* decodeAll(all.slice(0, interrupted.length)), interrupted)
      assert.deepStrictEqual(yield* decodeAll(all.slice(interrupted.length + 1)), resumed.events)
      assert.deepStrictEqual(resumed.events.slice(0, 2).map((e) => e._tag), ["AgentStart", "SessionResumed"])
      assert.strictEqual(resumed.events.at(-1)?._tag, "AgentEnd")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a trajectory that cannot be written stops writing, says so once, and leaves the run alone", () => {
    const logs = captureLogs()
    return Effect.gen(function*() {
      const { dir } = yield* setup
      const path = `${dir}/missing/dir/t.ndjson`
      const result = yield* Agent.run({ prompt: "go", plugins: [Trajectory.ndjson(path)] }).pipe(
        Effect.provide(layers([{ text: "hi" }]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(logs.lines, [
        `Warn: trajectory ${path}: stopped writing: NotFound: FileSystem.open (${path})`
      ])
    }).pipe(Effect.provide([NodeServices.layer, logs.layer]))
  })

  /** Runs a one-turn agent with a trajectory at `path`, and returns its outcome and the warnings it logged. */
  const runWith = (path: string) =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      const logger = Logger.make((options) => {
        if (options.logLevel === "Warn") warnings.push([options.message].flat().map(String).join(" "))
      })
      const result = yield* Agent.run({ prompt: "go", plugins: [Trajectory.ndjson(path)] }).pipe(
        Effect.provide(Layer.merge(layers([{ text: "hi" }]), Logger.layer([logger])))
      )
      return { outcome: result.outcome, warnings }
    })

  it.live("never writes through a link planted at its path: the file it points to is unchanged", () =>
    Effect.gen(function*() {
      const { dir, path } = yield* setup
      const decoy = `${dir}/decoy.txt`
      Fs.writeFileSync(decoy, "keep me\n")
      Fs.symlinkSync(decoy, path)
      const { outcome, warnings } = yield* runWith(path)
      assert.deepStrictEqual(outcome, { _tag: "Completed" })
      assert.strictEqual(Fs.readFileSync(decoy, "utf8"), "keep me\n")
      assert.isTrue(Fs.lstatSync(path).isSymbolicLink())
      assert.strictEqual(warnings.length, 1)
      assert.match(warnings[0]!, /^trajectory .*: stopped writing: .* is a symbolic link, not a regular file/)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("refuses what is not a regular file (a FIFO, a directory) without hanging, and the run goes on", () =>
    Effect.gen(function*() {
      const { dir, path } = yield* setup
      execFileSync("mkfifo", [path])
      // Whatever happens, a writer blocked on the FIFO gets a reader, so a failure cannot hang the test.
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => Fs.closeSync(Fs.openSync(path, Fs.constants.O_RDONLY | Fs.constants.O_NONBLOCK)))
      )
      const fifo = yield* runWith(path).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(fifo.outcome, { _tag: "Completed" })
      assert.match(fifo.warnings.join("\n"), /stopped writing: .* is a FIFO, not a regular file/)
      Fs.mkdirSync(`${dir}/directory.ndjson`)
      const directory = yield* runWith(`${dir}/directory.ndjson`)
      assert.deepStrictEqual(directory.outcome, { _tag: "Completed" })
      assert.strictEqual(directory.warnings.length, 1)
      assert.match(directory.warnings[0]!, /stopped writing: .* is a directory, not a regular file/)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
