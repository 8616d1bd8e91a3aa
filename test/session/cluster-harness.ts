/**
 * What the tests of durable sessions on a cluster of processes share: runner
 * processes on a local PostgreSQL (test/session/durable-runner.ts), a
 * database of a test's own, and waits bounded in time.
 */
import { assert } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Schedule, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { Agent, Message } from "effect-agent"
import { DurableSession } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { assertValidTranscript, recorder } from "../support.ts"
import { database, type EngineKind, script, textOf, tools } from "./cluster-fixture.ts"
import * as Postgres from "./postgres.ts"
import { childScript } from "../children.ts"

export const root = fileURLToPath(new URL("../..", import.meta.url))
export const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the cluster tests: ${available.unavailable}`)
export const kills = Number(process.env.EFFECT_AGENT_DURABLE_KILLS ?? "3")

/**
 * A runner's process (`durable-runner.ts`, bundled: see test/children.ts), with `sharding` over the fixture's
 * settings (`EFFECT_AGENT_SHARDING`).
 */
export const runnerProcess = (
  script: string,
  url: string,
  port: number,
  logDir: string,
  sharding: Record<string, string>,
  kind: EngineKind = "cluster"
) =>
  ChildProcess.make(
    process.execPath,
    [script, url, String(port), logDir, kind],
    {
      cwd: root,
      forceKillAfter: "2 seconds",
      stderr: "inherit",
      extendEnv: true,
      env: { EFFECT_AGENT_SHARDING: JSON.stringify({ ...JSON.parse(process.env.EFFECT_AGENT_SHARDING ?? "{}"), ...sharding }) }
    }
  )

/** Starts a runner and waits until it says `ready`; answers its handle. */
export const startRunner = (
  url: string,
  port: number,
  logDir: string,
  sharding: Record<string, string> = {},
  kind: EngineKind = "cluster"
) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const script = yield* Effect.promise(() => childScript("test/session/durable-runner.ts"))
    const handle = yield* spawner.spawn(runnerProcess(script, url, port, logDir, sharding, kind))
    const ready = yield* handle.stdout.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.takeUntil((line) => line === "ready"),
      Stream.runLast,
      Effect.timeout("60 seconds")
    )
    assert.deepStrictEqual(ready, Option.some("ready"))
    return handle
  })

export const lines = (file: string): Array<string> =>
  fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((line) => line.length > 0) : []

export const counts = (items: ReadonlyArray<string>): Map<string, number> => {
  const map = new Map<string, number>()
  for (const item of items) map.set(item, (map.get(item) ?? 0) + 1)
  return map
}

/**
 * A charge happens at most once. It happened, unless the runner died (or the database went away) between its
 * intent record and the handler: then the model was told that the outcome is unknown.
 */
export const checkCharge = (
  sessionId: string,
  turn: number,
  messages: ReadonlyArray<Message.Message>,
  tools: Map<string, number>
) => {
  const charges = tools.get(`charge ${sessionId}/${turn}`) ?? 0
  const answer = messages.find((m) => m.role === "toolResult" && m.toolCallId === `c${turn}`)
  assert(answer !== undefined && answer.role === "toolResult", `c${turn} of ${sessionId} is answered`)
  assert.isAtMost(charges, 1, `charge ${sessionId}/${turn}`)
  if (answer.isError) assert.include(textOf(answer), "outcome is unknown")
  else assert.strictEqual(charges, 1, `charge ${sessionId}/${turn}`)
}

/** Polls until every session has finished (bounded); a poll the database does not answer is made again. */
export const allFinished = (ids: ReadonlyArray<string>, within: Duration.Input) =>
  Effect.forEach(ids, (sessionId) => Effect.retry(DurableSession.poll(sessionId), ridingOut)).pipe(
    Effect.repeat({
      // a session that died ends too: its assertion then shows the defect, rather than the wait running out
      until: (statuses) =>
        statuses.every((status) => status._tag === "Finished" || status._tag === "Failed" || status._tag === "Died"),
      schedule: Schedule.spaced("250 millis")
    }),
    Effect.timeout(within)
  )

/**
 * A session that waited for approval while no runner ran, was approved and steered with `steering` then: it
 * finishes (bounded) `Completed`, its steering delivered once and its approval asked once.
 */
export const finishedApprovedAndSteered = (sessionId: string, steering: string) =>
  Effect.gen(function*() {
    const [status] = yield* allFinished([sessionId], "120 seconds")
    assert(status !== undefined && status._tag === "Finished", status?._tag)
    const { messages, outcome } = status.result
    assert.deepStrictEqual(outcome, { _tag: "Completed" })
    assertValidTranscript(messages)
    assert.strictEqual(messages.filter((m) => m.role === "user" && textOf(m) === steering).length, 1)
    const events = (yield* DurableSession.events(sessionId)).map((entry) => entry.event._tag)
    assert.strictEqual(events.filter((tag) => tag === "SteeringDelivered").length, 1)
    assert.strictEqual(events.filter((tag) => tag === "ApprovalRequested").length, 1)
  })

/** Retries what meets the database while it is away (a `StoreError`), for a bounded while. */
export const ridingOut = {
  while: (error: { readonly _tag: string }) => error._tag === "DurableStoreError",
  schedule: Schedule.spaced("250 millis"),
  times: 400
}

/** How many times the database is restarted under the lone runner (`EFFECT_AGENT_PG_RESTARTS`). */
export const restarts = Number(process.env.EFFECT_AGENT_PG_RESTARTS ?? "3")

/**
 * How many sessions start before each restart (`EFFECT_AGENT_PG_SESSIONS`, up to 10), and their turns
 * (`EFFECT_AGENT_PG_TURNS`). More, and longer, catch more calls in flight: 5 sessions of 20 turns and 6 restarts
 * left sessions `Suspended` in 1 run of 3 before the fix of an activity aborted by a given-up run's interrupt.
 */
export const perWave = Math.min(10, Number(process.env.EFFECT_AGENT_PG_SESSIONS ?? "2"))
export const waveTurns = Number(process.env.EFFECT_AGENT_PG_TURNS ?? "10")

/** The session run in this process by `Agent.run`, with the same script and tools: its transcript and events. */
export const inProcess = (sessionId: string) =>
  Effect.gen(function*() {
    const logDir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-inprocess-"))
    const { events, plugin } = recorder()
    const result = yield* Agent.run({ prompt: sessionId, plugins: [plugin] }).pipe(
      Effect.provide(Layer.merge(ScriptedModel.layer(script(logDir), { record: false }), tools(logDir))),
      Effect.ensuring(Effect.sync(() => fs.rmSync(logDir, { recursive: true, force: true })))
    )
    return { messages: result.messages, events: events.map((event) => event._tag) }
  })

/** The time from `up` to the first model call after it (ms), from the runners' log; none when none was made. */
export const stallAfter = (up: number, modelLog: string): number | undefined => {
  const after = lines(modelLog).map((line) => Number(line.split(" ")[2])).filter((at) => at >= up)
  return after.length === 0 ? undefined : Math.min(...after) - up
}

/** A database, two runners, a log directory: for the scope. */
/** A PostgreSQL of the test's own with the tables made, and a directory for the runners' logs (both gone after). */
export const scratch = Effect.gen(function*() {
  const pg = yield* Postgres.scoped
  const logDir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-cluster-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(logDir, { recursive: true, force: true })))
  yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
  return { pg, logDir }
})

export const cluster = Effect.gen(function*() {
  const { logDir, pg } = yield* scratch
  const ports = [yield* Effect.promise(Postgres.freePort), yield* Effect.promise(Postgres.freePort)]
  const runners = [yield* startRunner(pg.url, ports[0]!, logDir), yield* startRunner(pg.url, ports[1]!, logDir)]
  return { pg, logDir, ports, runners }
})

/** The text deltas among published events, in order. */
export const deltasOf = (events: ReadonlyArray<DurableSession.Published>): ReadonlyArray<string> =>
  events.flatMap((entry) =>
    entry.event._tag === "MessageUpdate" && entry.event.delta.type === "text" ? [entry.event.delta.delta] : []
  )

/** Polls (bounded) until the session has published an event of `tag`. */
export const waitForEvent = (sessionId: string, tag: string) =>
  DurableSession.events(sessionId).pipe(
    Effect.repeat({
      until: (events) => events.some((entry) => entry.event._tag === tag),
      schedule: Schedule.spaced("200 millis")
    }),
    Effect.timeout("120 seconds")
  )

