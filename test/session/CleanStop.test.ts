/**
 * Clean stops at random moments: a durable session on a real file store,
 * steered every few milliseconds, is interrupted (what SIGINT and SIGTERM do
 * through `NodeRuntime.runMain`) after a random delay. Its checkpoint must
 * never be older than a checkpoint it had saved, and every steering message
 * given must be in the saved transcript or in the saved queues, once.
 *
 * The same with real processes, fewer of them: a child process runs the
 * session (test/session/crash-child.ts, scenario `steer`) and is sent SIGINT
 * or SIGTERM at a random moment.
 *
 * `SESSION_CLEAN_STOPS=500` runs 500 stops in process instead of the default
 * 30, `SESSION_SIGNAL_STOPS=100` 100 processes instead of 2 (two at a time);
 * `SESSION_CLEAN_STOPS_SEED` replays a run.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Cause, Effect, Fiber, FileSystem, Latch, Layer, Random, Stream } from "effect"
import { Message, type RunState, Steering } from "effect-agent"
import { CheckpointStore, Session, Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { fileURLToPath } from "node:url"
import { assertValidTranscript } from "../support.ts"
import { endless, toolsLayer } from "./fixture.ts"
import { childScript } from "../children.ts"

/** The child script, bundled (see test/children.ts): set before the first test. */
let script = ""
beforeAll(async () => {
  script = await childScript("test/session/crash-child.ts")
})

const stops = Number(process.env.SESSION_CLEAN_STOPS ?? 30)
const signalStops = Number(process.env.SESSION_SIGNAL_STOPS ?? 2)
const seed = process.env.SESSION_CLEAN_STOPS_SEED ?? String(Date.now())

/** A store that records every checkpoint it saved, in the same step as the save. */
const recording = (inner: CheckpointStore.Service) => {
  const saved: Array<RunState.RunState> = []
  const created = Latch.makeUnsafe()
  const store: CheckpointStore.Service = {
    ...inner,
    create: (id, checkpoint) =>
      Effect.uninterruptible(Effect.tap(inner.create(id, checkpoint), () =>
        Effect.sync(() => {
          saved.push(checkpoint.state)
          created.openUnsafe()
        }))),
    save: (id, checkpoint) =>
      Effect.uninterruptible(
        Effect.tap(inner.save(id, checkpoint), () => Effect.sync(() => void saved.push(checkpoint.state)))
      )
  }
  return { created, saved, store }
}

const texts = (messages: ReadonlyArray<Message.Message>) =>
  messages.flatMap((message) => message.role === "user" ? [Message.textOf(message)] : [])

const extendsTranscript = (longer: ReadonlyArray<Message.Message>, shorter: ReadonlyArray<Message.Message>) =>
  longer.length >= shorter.length &&
  shorter.every((message, i) => JSON.stringify(message) === JSON.stringify(longer[i]))

interface Figures {
  stops: number
  rollbacks: number
  lostSteering: number
  duplicatedSteering: number
  steered: number
}

const failures = ({ duplicatedSteering, lostSteering, rollbacks }: Figures) => ({
  rollbacks,
  lostSteering,
  duplicatedSteering
})

/** One session, stopped `stopAfter` ms after it started; adds what went wrong to `figures`. */
const stopOnce = (dir: string, id: string, stopAfter: number, figures: Figures) =>
  Effect.gen(function*() {
    const { created, saved, store } = recording(yield* CheckpointStore.fileSystem(dir))
    const steering = yield* Steering.make()
    const given: Array<string> = []
    const steerer = yield* Effect.forkChild(Effect.forever(Effect.gen(function*() {
      yield* Effect.sleep(`${yield* Random.nextIntBetween(0, 3)} millis`)
      const text = `${id} steer ${given.length}`
      // Given and sent in one step: an interruption between the two counted a message never sent as lost.
      yield* Effect.uninterruptible(Effect.andThen(steering.steer(text), Effect.sync(() => given.push(text))))
    })))
    const session = yield* Effect.forkChild(
      Session.run({
        id,
        prompt: "go",
        steering,
        // the trajectory writes each event to its file before the session's own hook sees it
        plugins: [Trajectory.ndjson(`${dir}/${id}.ndjson`)],
        config: { maxTurns: null, maxRepeatedBatches: null }
      }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(Layer.merge(ScriptedModel.layer(endless), toolsLayer([])))
      )
    )
    yield* created.await
    yield* Effect.sleep(`${stopAfter} millis`)
    yield* Fiber.interrupt(steerer)
    yield* Fiber.interrupt(session)
    const exit = yield* Fiber.await(session)
    assert.isTrue(exit._tag === "Failure" && Cause.hasInterruptsOnly(exit.cause), String(exit))
    // what the run never took from the handle is still there
    const leftover = texts(yield* steering.takeSteering)

    const { state } = yield* (yield* CheckpointStore.fileSystem(dir)).load(id)
    // a checkpoint saved in the middle of a batch ends with the batch's calls, their results still to come
    const last = state.messages.at(-1)
    assertValidTranscript(last?.role === "assistant" ? state.messages.slice(0, -1) : state.messages)
    figures.stops++
    figures.steered += given.length
    // every checkpoint saved extends the one before it, and the last one on disk extends them all
    let rolledBack = false
    for (let i = 0; i < saved.length; i++) {
      if (!extendsTranscript(state.messages, saved[i]!.messages) || state.turn < saved[i]!.turn) rolledBack = true
      if (i > 0 && !extendsTranscript(saved[i]!.messages, saved[i - 1]!.messages)) rolledBack = true
    }
    if (rolledBack) figures.rollbacks++
    const kept = [...texts(state.messages), ...texts(state.steering), ...texts(state.followUps), ...leftover]
    for (const text of given) {
      const copies = kept.filter((k) => k === text).length
      if (copies === 0) figures.lostSteering++
      if (copies > 1) figures.duplicatedSteering++
    }
  })

describe.concurrent("a session stopped cleanly at a random moment", () => {
  it.live(`never rolls its checkpoint back and loses no steering (${stops} stops, seed ${seed})`, () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped({ prefix: "clean-stop-" })
      const figures: Figures = { stops: 0, rollbacks: 0, lostSteering: 0, duplicatedSteering: 0, steered: 0 }
      for (let i = 0; i < stops; i++) {
        yield* stopOnce(dir, `s${i}`, yield* Random.nextIntBetween(0, 60), figures)
      }
      if (stops > 30) console.log(`clean stops (seed ${seed}):`, figures)
      assert.deepStrictEqual(
        failures(figures),
        { rollbacks: 0, lostSteering: 0, duplicatedSteering: 0 },
        `seed ${seed}, ${figures.steered} steering messages given`
      )
    }).pipe(Effect.provide(NodeServices.layer), Random.withSeed(seed)), 60_000 + stops * 500)
})

const root = fileURLToPath(new URL("../..", import.meta.url))

/**
 * One child process, stopped with `signal` `stopAfter` ms after its first checkpoint (or, `afterSteering`, after
 * the first steering message it gives); adds what went wrong.
 */
const signalOnce = (
  dir: string,
  signal: "SIGINT" | "SIGTERM",
  stopAfter: number,
  figures: Figures,
  afterSteering: boolean
) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const child = yield* spawner.spawn(ChildProcess.make(
      process.execPath,
      [script, "run", dir, "steer", "0"],
      { cwd: root, forceKillAfter: "2 seconds" }
    ))
    const lines: Array<string> = []
    const started = Latch.makeUnsafe()
    const reader = yield* Effect.forkChild(child.stdout.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.runForEach((line) =>
        Effect.sync(() => {
          lines.push(line)
          if (line.startsWith(afterSteering ? "steer " : "saved ")) started.openUnsafe()
        })
      )
    ))
    yield* started.await.pipe(Effect.timeout("30 seconds"))
    yield* Effect.sleep(`${stopAfter} millis`)
    yield* child.kill({ killSignal: signal, forceKillAfter: "10 seconds" })
    // NodeRuntime.runMain interrupts the main fiber on the signal and exits with 130
    assert.strictEqual(yield* child.exitCode, 130)
    yield* Fiber.join(reader)

    const { state } = yield* (yield* CheckpointStore.fileSystem(dir)).load("crash")
    const saved = lines.flatMap((line) => line.startsWith("saved ") ? [line.split(" ").slice(1).map(Number)] : [])
    const given = lines.flatMap((line) => line.startsWith("steer ") ? [line] : [])
    figures.stops++
    figures.steered += given.length
    if (saved.some(([messages, turn]) => state.messages.length < messages! || state.turn < turn!)) figures.rollbacks++
    const kept = [...texts(state.messages), ...texts(state.steering), ...texts(state.followUps)]
    for (const text of given) {
      const copies = kept.filter((k) => k === text).length
      if (copies === 0) figures.lostSteering++
      if (copies > 1) figures.duplicatedSteering++
    }
  }).pipe(Effect.scoped)

describe.concurrent("a session process stopped by SIGINT or SIGTERM at a random moment", () => {
  it.live(`never rolls its checkpoint back and loses no steering (${signalStops} processes, seed ${seed})`, () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const figures: Figures = { stops: 0, rollbacks: 0, lostSteering: 0, duplicatedSteering: 0, steered: 0 }
      const delays = yield* Effect.forEach(Array.from({ length: signalStops }), () => Random.nextIntBetween(0, 200))
      yield* Effect.forEach(delays, (delay, i) =>
        Effect.flatMap(
          fs.makeTempDirectoryScoped({ prefix: "signal-stop-" }),
          // The first process is stopped only once it has given steering, so that some is always checked.
          (dir) => signalOnce(dir, i % 2 === 0 ? "SIGINT" : "SIGTERM", delay, figures, i === 0)
        ), { concurrency: 2, discard: true })
      if (signalStops > 2) console.log(`signal stops (seed ${seed}):`, figures)
      assert.isAbove(figures.steered, 0)
      assert.deepStrictEqual(
        failures(figures),
        { rollbacks: 0, lostSteering: 0, duplicatedSteering: 0 },
        `seed ${seed}, ${figures.steered} steering messages given`
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer), Random.withSeed(seed)), 60_000 + signalStops * 5_000)
})
