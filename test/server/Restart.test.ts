/**
 * Runs survive the server: a server process killed with SIGKILL (or stopped
 * with SIGTERM) in the middle of a run, and a new server started on the same
 * directory, resumes the session from its checkpoint; an SSE client that
 * reconnects to the new server with `Last-Event-ID` sees the session finish,
 * with no event lost or repeated (ids are lines of the durable trajectory).
 */
import { NodeServices } from "@effect/platform-node"
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Schema, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { fileURLToPath } from "node:url"
import { readSse, type SseMessage, tagOf } from "./support.ts"
import { childScript } from "../children.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))

/** The child script, bundled (see test/children.ts): set before the first test. */
let script = ""
beforeAll(async () => {
  script = await childScript("test/server/server-child.ts")
})

const server = (dir: string, hangFrom: ReadonlyArray<string>) =>
  ChildProcess.make(
    process.execPath,
    [script, dir, ...hangFrom],
    // whatever happens to the test, the child does not outlive it
    { cwd: root, forceKillAfter: "2 seconds" }
  )

const Started = Schema.fromJsonString(Schema.Struct({ url: Schema.String }))

/** Starts a server process on `dir` (its model silent from a session's `hangFrom`th reply on); its URL. */
const startServer = (dir: string, hangFrom?: number) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(server(dir, hangFrom === undefined ? [] : [String(hangFrom)]))
    const first = yield* handle.stdout.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.take(1),
      Stream.runCollect,
      Effect.timeout("30 seconds")
    )
    const { url } = yield* Schema.decodeUnknownEffect(Started)(first[0])
    return { handle, url }
  })

const eventOf = (message: SseMessage) => JSON.parse(message.data)

const restartMidRun = (signal: "SIGKILL" | "SIGTERM") =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const dir = yield* fs.makeTempDirectoryScoped()
    // the first server's model never gives the fourth reply: the run is mid-way when the server goes
    const a = yield* startServer(dir, 4)
    const created: any = yield* Effect.promise(() =>
      fetch(`${a.url}/sessions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ task: "steps 8 100", id: "survivor" })
      }).then((response) => response.json())
    )
    assert.strictEqual(created.id, "survivor")
    // A client follows the run until its third turn has ended, then the server dies under it.
    let turnsEnded = 0
    const first = yield* Effect.promise(async () =>
      readSse(await fetch(`${a.url}/sessions/survivor/events`), (message) => {
        if (tagOf(message) === "TurnEnd") turnsEnded++
        return turnsEnded === 3
      })
    )
    yield* a.handle.kill({ killSignal: signal, forceKillAfter: "10 seconds" })
    yield* Effect.exit(a.handle.exitCode)

    // A new server on the same directory resumes the session; the client reconnects where it was.
    const b = yield* startServer(dir)
    const lastId = first.messages.at(-1)!.id!
    const rest = yield* Effect.promise(async () =>
      readSse(await fetch(`${b.url}/sessions/survivor/events`, { headers: { "last-event-id": lastId } }))
    )
    const whole = yield* Effect.promise(async () => readSse(await fetch(`${b.url}/sessions/survivor/events`)))
    const info: any = yield* Effect.promise(() =>
      fetch(`${b.url}/sessions/survivor`).then((response) => response.json())
    )
    yield* b.handle.kill({ killSignal: "SIGTERM", forceKillAfter: "10 seconds" })
    return { first: first.messages, rest: rest.messages, whole: whole.messages, info }
  }).pipe(Effect.scoped, Effect.provide(NodeServices.layer))

const check = (result: Effect.Success<ReturnType<typeof restartMidRun>>) => {
  const { first, rest, whole, info } = result
  // nothing lost, nothing twice: the two halves are the whole log, ids 0, 1, 2, …
  assert.deepStrictEqual([...first, ...rest], whole)
  assert.deepStrictEqual(whole.map((message) => Number(message.id)), whole.map((_, i) => i))
  const tags = rest.map(tagOf)
  assert.include(tags, "SessionResumed")
  const end = eventOf(rest.at(-1)!)
  assert.strictEqual(end._tag, "AgentEnd")
  assert.deepStrictEqual(end.outcome, { _tag: "Completed" })
  const answers = end.result.state.messages.filter((message: any) => message.role === "assistant")
  assert.strictEqual(answers.at(-1).content.at(-1).text, "All 8 steps done.")
  // each step ran in the transcript once: the turn in flight was redone, not doubled
  const results = end.result.state.messages.filter((message: any) => message.role === "toolResult")
  assert.deepStrictEqual(
    results.map((message: any) => message.content[0].text),
    [1, 2, 3, 4, 5, 6, 7, 8].map((n) => `step ${n} done`)
  )
  assert.strictEqual(info.status, "finished")
  assert.strictEqual(info.turns, 9)
}

describe("a server restarted mid-run", () => {
  it.live("after SIGKILL, resumes the session; the client reconnects with Last-Event-ID and sees it finish", () =>
    Effect.map(restartMidRun("SIGKILL"), (result) => {
      check(result)
      // killed outright: its run left no AgentEnd before the resumed one
      assert.strictEqual(result.whole.map(tagOf).filter((tag) => tag === "AgentEnd").length, 1)
    }))

  it.live("after SIGTERM, resumes the session it had stopped cleanly", () =>
    Effect.map(restartMidRun("SIGTERM"), (result) => {
      check(result)
      // stopped cleanly: the interrupted run ended its lines with AgentEnd (Cancelled), then the resumed run's
      const ends = result.whole.map(eventOf).filter((event) => event._tag === "AgentEnd")
      assert.strictEqual(ends.length, 2)
      assert.strictEqual(ends[0].outcome._tag, "Cancelled")
    }))
})

/** A supervisor's own event's payload (`SupervisorEvent`, carried as `Custom`), else undefined. */
const own = (message: SseMessage) => {
  const event = eventOf(message)
  return event._tag === "Custom" && event.kind === "effect-agent/supervisor" ? event.payload : undefined
}

describe("a supervised session on a server killed mid-run", () => {
  it.live("is resumed by the next server on the directory in the act turn it was in, and converges", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      // the first server's model never gives a third reply: the session is in its second act turn when it dies
      const a = yield* startServer(dir, 3)
      const created: any = yield* Effect.promise(() =>
        fetch(`${a.url}/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ task: "fix the build", id: "supervised", supervisor: "fix" })
        }).then((response) => response.json())
      )
      assert.strictEqual(created.supervisor, "fix")
      let turns = 0
      const first = yield* Effect.promise(async () =>
        readSse(await fetch(`${a.url}/sessions/supervised/events`), (message) =>
          own(message)?._tag === "WorkerTurnStart" && ++turns === 2)
      )
      yield* a.handle.kill({ killSignal: "SIGKILL", forceKillAfter: "10 seconds" })
      yield* Effect.exit(a.handle.exitCode)

      const b = yield* startServer(dir)
      const rest = yield* Effect.promise(async () =>
        readSse(await fetch(`${b.url}/sessions/supervised/events`, {
          headers: { "last-event-id": first.messages.at(-1)!.id! }
        }))
      )
      const whole = yield* Effect.promise(async () => readSse(await fetch(`${b.url}/sessions/supervised/events`)))
      const info: any = yield* Effect.promise(() =>
        fetch(`${b.url}/sessions/supervised`).then((response) => response.json())
      )
      yield* b.handle.kill({ killSignal: "SIGTERM", forceKillAfter: "10 seconds" })
      const steps = yield* fs.readFileString(`${dir}/steps`)
      // nothing lost, nothing twice
      assert.deepStrictEqual([...first.messages, ...rest.messages], whole.messages)
      assert.include(rest.messages.map(tagOf), "SessionResumed")
      const checks = whole.messages.flatMap((message) => {
        const payload = own(message)
        return payload?._tag === "CheckResult" ? [`${payload.baseline ? "baseline " : ""}${payload.status}`] : []
      })
      assert.deepStrictEqual(
        {
          checks,
          end: eventOf(rest.messages.at(-1)!).outcome,
          info: [info.status, info.supervisor, info.supervisorOutcome, info.turns],
          steps
        },
        {
          checks: ["baseline fail", "fail", "pass"],
          end: { _tag: "Custom", kind: "effect-agent/supervisor", payload: { _tag: "Converged", turns: 2 } },
          info: ["finished", "fix", { _tag: "Converged", turns: 2 }, 2],
          steps: "1\n2\n"
        }
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
