/**
 * Crash tests with real processes: a child process runs a durable session
 * (test/session/crash-child.ts) and is killed in the middle of a turn; a
 * second process resumes it to completion.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path, Stream } from "effect"
import { AgentEvent, Message } from "effect-agent"
import { CheckpointStore } from "effect-agent/session"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { fileURLToPath } from "node:url"
import { assertValidTranscript } from "../support.ts"
import { childScript } from "../children.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))

type Scenario = "slow" | "charge" | "deploy"
type Signal = "SIGKILL" | "SIGTERM" | "SIGINT"

/** The child script, bundled (see test/children.ts): set before the first test. */
let script = ""
beforeAll(async () => {
  script = await childScript("test/session/crash-child.ts")
})

const child = (mode: "run" | "resume", dir: string, scenario: Scenario, ms: number) =>
  ChildProcess.make(
    process.execPath,
    [script, mode, dir, scenario, String(ms)],
    // whatever happens to the test, the child does not outlive it
    { cwd: root, forceKillAfter: "2 seconds" }
  )

const lines = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.splitLines)

/**
 * Runs the session in a child process until `marker` shows that the turn is
 * in flight, kills it with `signal`, and resumes it in a second process.
 */
const crashAndResume = (scenario: Scenario, signal: Signal) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const dir = yield* fs.makeTempDirectoryScoped()
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const marker = scenario === "deploy" ? "approval d1" : `started ${scenario}`

    const first = yield* spawner.spawn(child("run", dir, scenario, 60_000))
    const printed = yield* lines(first.stdout).pipe(
      Stream.takeUntil((line) => line === marker),
      Stream.runCollect,
      Effect.timeout("30 seconds")
    )
    assert.strictEqual(printed.at(-1), marker)
    yield* first.kill({ killSignal: signal, forceKillAfter: "10 seconds" })
    const firstExit = yield* Effect.exit(first.exitCode)

    const second = yield* spawner.spawn(child("resume", dir, scenario, 1))
    const [out, err, secondCode] = yield* Effect.all(
      [Stream.runCollect(lines(second.stdout)), Stream.mkString(Stream.decodeText(second.stderr)), second.exitCode],
      { concurrency: 3 }
    ).pipe(Effect.timeout("30 seconds"))
    assert.strictEqual(secondCode, 0, err)
    const final: { outcome: string; modelCalls: number; ran: Array<string> } = JSON.parse(out.at(-1)!)

    const { state } = yield* (yield* CheckpointStore.fileSystem(dir)).load("crash")
    const path = yield* Path.Path
    const trajectory = yield* Effect.forEach(
      (yield* fs.readFileString(path.join(dir, "trajectory.ndjson"))).split("\n").filter((line) => line !== ""),
      (line) => AgentEvent.decodeJson(JSON.parse(line))
    )
    return { firstExit, printed: out, final, state, trajectory }
  }).pipe(Effect.scoped, Effect.provide(NodeServices.layer))

const tagsOf = (events: ReadonlyArray<AgentEvent.AgentEvent>) => events.map((e) => e._tag)

/** Each tool call appears once in the transcript, and has its result. */
const assertEachTurnOnce = (messages: ReadonlyArray<Message.Message>, calls: ReadonlyArray<string>) => {
  assertValidTranscript(messages)
  const made = messages.flatMap((m) => m.role === "assistant" ? Message.toolCalls(m).map((c) => c.id) : [])
  assert.deepStrictEqual(made, calls)
}

describe.concurrent("a session killed in the middle of a turn resumes in a new process", () => {
  it.live("SIGKILL while a replay-safe tool runs: the turn is redone, with one model call", () =>
    Effect.gen(function*() {
      const { final, firstExit, state, trajectory } = yield* crashAndResume("slow", "SIGKILL")
      assert.strictEqual(firstExit._tag, "Failure", "killed outright")
      assert.deepStrictEqual(final, { outcome: "Completed", modelCalls: 2, ran: ["slow"] })
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user", "assistant", "toolResult", "assistant", "toolResult", "assistant"])
      assertEachTurnOnce(state.messages, ["c1", "c2"])
      assert.strictEqual(Message.textOf(state.messages.at(-1)!), "all done")
      assert.strictEqual(state.turn, 3)
      // the killed run's trajectory stops mid-turn; the resumed run follows it, whole
      const resumedAt = tagsOf(trajectory).lastIndexOf("AgentStart")
      assert.strictEqual(tagsOf(trajectory).slice(0, resumedAt).includes("AgentEnd"), false)
      assert.deepStrictEqual(tagsOf(trajectory).slice(resumedAt, resumedAt + 2), ["AgentStart", "SessionResumed"])
      assert.strictEqual(trajectory.at(-1)?._tag, "AgentEnd")
    }), 90_000)

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it.live(`${signal} stops the run gracefully: its trajectory ends with AgentEnd, and the checkpoint resumes`, () =>
      Effect.gen(function*() {
        const { final, firstExit, state, trajectory } = yield* crashAndResume("slow", signal)
        // NodeRuntime.runMain interrupts the main fiber on the signal and exits with 130
        assert.strictEqual(firstExit._tag === "Success" ? Number(firstExit.value) : undefined, 130)
        assert.deepStrictEqual(final, { outcome: "Completed", modelCalls: 2, ran: ["slow"] })
        assertEachTurnOnce(state.messages, ["c1", "c2"])
        const resumedAt = tagsOf(trajectory).lastIndexOf("AgentStart")
        const stopped = trajectory[resumedAt - 1]
        assert.deepStrictEqual(stopped?._tag === "AgentEnd" && stopped.outcome, { _tag: "Cancelled", reason: "interrupted" })
        assert.strictEqual(trajectory.at(-1)?._tag, "AgentEnd")
      }), 90_000)
  }

  it.live("SIGKILL while a tool that is not ReplaySafe runs: it is not run again, and its result says the outcome is unknown", () =>
    Effect.gen(function*() {
      const { final, state } = yield* crashAndResume("charge", "SIGKILL")
      // the batch is finished without the model: one call, for the last turn
      assert.deepStrictEqual(final, { outcome: "Completed", modelCalls: 1, ran: [] })
      assertEachTurnOnce(state.messages, ["c1", "c2"])
      assert.match(Message.textOf(state.messages[4]!), /^This call to charge had started when the run was interrupted/)
    }), 90_000)

  it.live("SIGTERM while a call waits for approval: the resumed process asks again, and an approval then answers", () =>
    Effect.gen(function*() {
      const { final, state, trajectory } = yield* crashAndResume("deploy", "SIGTERM")
      assert.deepStrictEqual(final, { outcome: "Completed", modelCalls: 1, ran: ["deploy"] })
      assertEachTurnOnce(state.messages, ["d1"])
      assert.strictEqual(Message.textOf(state.messages[2]!), "deployed to prod")
      const resumedAt = tagsOf(trajectory).lastIndexOf("AgentStart")
      assert.deepStrictEqual(tagsOf(trajectory).slice(resumedAt, resumedAt + 3), ["AgentStart", "SessionResumed", "ApprovalRequested"])
    }), 90_000)
})
