/**
 * A session whose agent runs a sub-agent, killed (SIGKILL) while the
 * sub-agent's tool runs, then resumed in a new process: the sub-agent
 * continues from its last checkpoint, not from the start.
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

/** The child script, bundled (see test/children.ts): set before the first test. */
let script = ""
beforeAll(async () => {
  script = await childScript("test/session/subagent-child.ts")
})

const child = (mode: "run" | "resume", dir: string, ms: number) =>
  ChildProcess.make(
    process.execPath,
    [script, mode, dir, String(ms)],
    { cwd: root, forceKillAfter: "2 seconds" }
  )

const lines = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.splitLines)

describe("a session killed while its sub-agent runs", () => {
  it.live("resumes the sub-agent from its last completed turn, in a new process", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner

      const first = yield* spawner.spawn(child("run", dir, 60_000))
      const printed = yield* lines(first.stdout).pipe(
        Stream.takeUntil((line) => line === "started slow"),
        Stream.runCollect,
        Effect.timeout("30 seconds")
      )
      assert.strictEqual(printed.at(-1), "started slow")
      yield* first.kill({ killSignal: "SIGKILL", forceKillAfter: "10 seconds" })
      assert.strictEqual((yield* Effect.exit(first.exitCode))._tag, "Failure", "killed outright")

      // what the killed process left: the researcher's state inside the session's, under the open call
      const saved = yield* (yield* CheckpointStore.fileSystem(dir)).load("nested")
      const inner = saved.state.pluginState["subAgents"] as Record<string, { agent: string; state: { turn: number } }>
      assert.deepStrictEqual(Object.keys(inner), ["r1"])
      assert.deepStrictEqual([inner["r1"]!.agent, inner["r1"]!.state.turn], ["researcher", 1])

      const second = yield* spawner.spawn(child("resume", dir, 1))
      const [out, err, code] = yield* Effect.all(
        [Stream.runCollect(lines(second.stdout)), Stream.mkString(Stream.decodeText(second.stderr)), second.exitCode],
        { concurrency: 3 }
      ).pipe(Effect.timeout("30 seconds"))
      assert.strictEqual(code, 0, err)
      const final: {
        outcome: string
        parentModelCalls: number
        childModelCalls: number
        ran: Array<string>
        childRuns: Array<string>
      } = JSON.parse(out.at(-1)!)
      // the researcher redid only its slow call (replay safe, started) and its last turn: one model call;
      // the parent made its last model call only
      assert.deepStrictEqual(
        [final.outcome, final.parentModelCalls, final.childModelCalls, final.ran],
        ["Completed", 1, 1, ["slow"]]
      )

      const { state } = yield* (yield* CheckpointStore.fileSystem(dir)).load("nested")
      assertValidTranscript(state.messages)
      assert.deepStrictEqual(state.messages.map(Message.textOf), ["research x", "", "all done", "parent done"])
      assert.deepStrictEqual(state.pluginState["subAgents"], undefined)

      // the trajectory: the same researcher run before the kill and after the resume
      const path = yield* Path.Path
      const trajectory = yield* Effect.forEach(
        (yield* fs.readFileString(path.join(dir, "trajectory.ndjson"))).split("\n").filter((line) => line !== ""),
        (line) => AgentEvent.decodeJson(JSON.parse(line))
      )
      const nestedRuns = new Set(trajectory.flatMap((e) => e._tag === "Nested" ? [e.event.runId] : []))
      assert.strictEqual(nestedRuns.size, 1)
      assert.deepStrictEqual(final.childRuns, [...nestedRuns])
      const resumedAt = trajectory.findIndex((e) => e._tag === "SessionResumed")
      assert.isTrue(trajectory.slice(resumedAt).some((e) => e._tag === "Nested" && e.event._tag === "TurnEnd"))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 90_000)
})
