/**
 * Durable sessions across real processes: runner processes on PostgreSQL
 * (started here as a local server), this process a client of the cluster.
 * Runners are SIGKILLed at random moments (a few times by default, at least
 * 20 with `EFFECT_AGENT_DURABLE_KILLS=20`), and the database is restarted
 * mid-run. The tests skip, saying why, where PostgreSQL cannot be had.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer, Option, Random, Schedule, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { SqlClient } from "effect/sql"
import { WorkflowEngine } from "effect/workflow"
import { Agent, Message } from "effect-agent"
import { DurableSession } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { assertValidTranscript, recorder } from "../support.ts"
import { database, node, script, streamedText, textOf, tools, turnsOf } from "./cluster-fixture.ts"
import { followTranscript, toolsLayer, usage } from "./fixture.ts"
import * as Postgres from "./postgres.ts"
import { storeCancels } from "./store-cancels.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))
const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the cluster tests: ${available.unavailable}`)
const kills = Number(process.env.EFFECT_AGENT_DURABLE_KILLS ?? "3")

/** A runner's process, with `sharding` over the fixture's settings (`EFFECT_AGENT_SHARDING`). */
const runnerProcess = (url: string, port: number, logDir: string, sharding: Record<string, string>) =>
  ChildProcess.make(
    process.execPath,
    ["--conditions=effect-agent-source", "test/session/durable-runner.ts", url, String(port), logDir],
    {
      cwd: root,
      forceKillAfter: "2 seconds",
      stderr: "inherit",
      extendEnv: true,
      env: { EFFECT_AGENT_SHARDING: JSON.stringify({ ...JSON.parse(process.env.EFFECT_AGENT_SHARDING ?? "{}"), ...sharding }) }
    }
  )

/** Starts a runner and waits until it says `ready`; answers its handle. */
const startRunner = (url: string, port: number, logDir: string, sharding: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(runnerProcess(url, port, logDir, sharding))
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

const lines = (file: string): Array<string> =>
  fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((line) => line.length > 0) : []

const counts = (items: ReadonlyArray<string>): Map<string, number> => {
  const map = new Map<string, number>()
  for (const item of items) map.set(item, (map.get(item) ?? 0) + 1)
  return map
}

/**
 * A charge happens at most once. It happened, unless the runner died (or the database went away) between its
 * intent record and the handler: then the model was told that the outcome is unknown.
 */
const checkCharge = (
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
const allFinished = (ids: ReadonlyArray<string>, within: Duration.Input) =>
  Effect.forEach(ids, (sessionId) => Effect.retry(DurableSession.poll(sessionId), ridingOut)).pipe(
    Effect.repeat({
      // a session that died ends too: its assertion then shows the defect, rather than the wait running out
      until: (statuses) =>
        statuses.every((status) => status._tag === "Finished" || status._tag === "Failed" || status._tag === "Died"),
      schedule: Schedule.spaced("250 millis")
    }),
    Effect.timeout(within)
  )

/** Retries what meets the database while it is away (a `StoreError`), for a bounded while. */
const ridingOut = {
  while: (error: { readonly _tag: string }) => error._tag === "DurableStoreError",
  schedule: Schedule.spaced("250 millis"),
  times: 400
}

/** How many times the database is restarted under the lone runner (`EFFECT_AGENT_PG_RESTARTS`). */
const restarts = Number(process.env.EFFECT_AGENT_PG_RESTARTS ?? "3")

/**
 * How many sessions start before each restart (`EFFECT_AGENT_PG_SESSIONS`, up to 10), and their turns
 * (`EFFECT_AGENT_PG_TURNS`). More, and longer, catch more calls in flight: 5 sessions of 20 turns and 6 restarts
 * left sessions `Suspended` in 1 run of 3 before the fix of an activity aborted by a given-up run's interrupt.
 */
const perWave = Math.min(10, Number(process.env.EFFECT_AGENT_PG_SESSIONS ?? "2"))
const waveTurns = Number(process.env.EFFECT_AGENT_PG_TURNS ?? "10")

/** The session run in this process by `Agent.run`, with the same script and tools: its transcript and events. */
const inProcess = (sessionId: string) =>
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
const stallAfter = (up: number, modelLog: string): number | undefined => {
  const after = lines(modelLog).map((line) => Number(line.split(" ")[2])).filter((at) => at >= up)
  return after.length === 0 ? undefined : Math.min(...after) - up
}

/** A database, two runners, a log directory: for the scope. */
/** A PostgreSQL of the test's own with the tables made, and a directory for the runners' logs (both gone after). */
const scratch = Effect.gen(function*() {
  const pg = yield* Postgres.scoped
  const logDir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-cluster-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(logDir, { recursive: true, force: true })))
  yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
  return { pg, logDir }
})

const cluster = Effect.gen(function*() {
  const { logDir, pg } = yield* scratch
  const ports = [yield* Effect.promise(Postgres.freePort), yield* Effect.promise(Postgres.freePort)]
  const runners = [yield* startRunner(pg.url, ports[0]!, logDir), yield* startRunner(pg.url, ports[1]!, logDir)]
  return { pg, logDir, ports, runners }
})

/** The text deltas among published events, in order. */
const deltasOf = (events: ReadonlyArray<DurableSession.Published>): ReadonlyArray<string> =>
  events.flatMap((entry) =>
    entry.event._tag === "MessageUpdate" && entry.event.delta.type === "text" ? [entry.event.delta.delta] : []
  )

/** Polls (bounded) until the session has published an event of `tag`. */
const waitForEvent = (sessionId: string, tag: string) =>
  DurableSession.events(sessionId).pipe(
    Effect.repeat({
      until: (events) => events.some((entry) => entry.event._tag === tag),
      schedule: Schedule.spaced("200 millis")
    }),
    Effect.timeout("120 seconds")
  )

describe.skipIf("unavailable" in available)("DurableSession on a cluster of processes and PostgreSQL", () => {
  it.live(
    `runners SIGKILLed at random moments (${kills} kills): every session completes, no model call or charge twice`,
    () =>
      Effect.gen(function*() {
        const { logDir, pg } = yield* scratch
        const ports = [yield* Effect.promise(Postgres.freePort), yield* Effect.promise(Postgres.freePort)]
        const runners = [yield* startRunner(pg.url, ports[0]!, logDir), yield* startRunner(pg.url, ports[1]!, logDir)]
        // the longer variant has longer sessions, so that every kill lands while they run
        const ids = Array.from({ length: Math.max(6, kills) }, (_, i) => `k${i}-t${4 + (i % 3) + (kills > 3 ? 8 : 0)}`)
        const statuses = yield* Effect.gen(function*() {
          for (const sessionId of ids) yield* DurableSession.start({ sessionId, prompt: sessionId })
          // Kill a runner at random moments, and start it again on its address.
          for (let k = 0; k < kills; k++) {
            yield* Effect.sleep(Duration.millis(800 + (yield* Random.nextIntBetween(0, 2000))))
            const which = (yield* Random.nextIntBetween(0, 1000)) % 2
            yield* runners[which]!.kill({ killSignal: "SIGKILL" })
            runners[which] = yield* startRunner(pg.url, ports[which]!, logDir)
          }
          return yield* allFinished(ids, "180 seconds")
        }).pipe(Effect.provide(node(pg.url, undefined, logDir)))
        const modelLines = lines(path.join(logDir, "model.log"))
        const modelCalls = counts(modelLines.map((line) => line.split(" ").slice(0, 2).join(" ")))
        const tools = counts(lines(path.join(logDir, "tools.log")))
        let extraModelCalls = 0
        for (const [i, status] of statuses.entries()) {
          const sessionId = ids[i]!
          assert(
            status._tag === "Finished",
            `${sessionId}: ${status._tag}${status._tag === "Died" ? `: ${status.defect}` : ""}`
          )
          const { messages, outcome } = status.result
          assert.deepStrictEqual(outcome, { _tag: "Completed" })
          assertValidTranscript(messages)
          const turns = turnsOf(sessionId)
          // each completed turn's model call appears once in the transcript
          assert.strictEqual(messages.filter((message) => message.role === "assistant").length, turns + 1)
          for (let turn = 0; turn < turns; turn++) {
            checkCharge(sessionId, turn, messages, tools)
            extraModelCalls += (modelCalls.get(`${sessionId} ${turn}`) ?? 0) - 1
          }
        }
        const unknown = statuses.flatMap((status) =>
          status._tag === "Finished"
            ? status.result.messages.filter((m) => m.role === "toolResult" && m.isError)
            : []
        ).length
        console.log(`${kills} kills: ${extraModelCalls} model calls again, ${unknown} calls answered "outcome unknown"`)
        // the model was called at most once more than the turns completed, per kill
        assert.isAtMost(extraModelCalls, kills)
        for (const runner of runners) yield* Effect.ignore(runner.kill({ killSignal: "SIGKILL" }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 240_000 + kills * 30_000 }
  )

  it.live(
    "a session waiting for approval outlives its runners; steering sent while no runner runs is delivered once",
    () =>
      Effect.gen(function*() {
        const { logDir, pg, ports, runners } = yield* cluster
        const sessionId = "ap-a-t2"
        yield* Effect.gen(function*() {
          yield* DurableSession.start({ sessionId, prompt: sessionId })
          yield* waitForEvent(sessionId, "ApprovalRequested")
          // No runner holds the session now.
          for (const runner of runners) yield* Effect.ignore(runner.kill({ killSignal: "SIGKILL" }))
          yield* DurableSession.steer(sessionId, "mind the gap")
          yield* DurableSession.approve(sessionId, "d0", { approved: true })
          // The runners come back, each on its address. (One alone on a new address waits, now and then, some
          // 30 s for the cluster to give up the two that are gone.)
          runners[0] = yield* startRunner(pg.url, ports[0]!, logDir)
          runners[1] = yield* startRunner(pg.url, ports[1]!, logDir)
          const [status] = yield* allFinished([sessionId], "120 seconds")
          assert(status !== undefined && status._tag === "Finished", status?._tag)
          const { messages, outcome } = status.result
          assert.deepStrictEqual(outcome, { _tag: "Completed" })
          assertValidTranscript(messages)
          assert.strictEqual(messages.filter((m) => m.role === "user" && textOf(m) === "mind the gap").length, 1)
          const events = (yield* DurableSession.events(sessionId)).map((entry) => entry.event._tag)
          assert.strictEqual(events.filter((tag) => tag === "SteeringDelivered").length, 1)
          assert.strictEqual(events.filter((tag) => tag === "ApprovalRequested").length, 1)
        }).pipe(Effect.provide(node(pg.url, undefined, logDir)))
        const tools = counts(lines(path.join(logDir, "tools.log")))
        assert.strictEqual(tools.get(`deploy ${sessionId}/0`), 1)
        assert.strictEqual(tools.get(`charge ${sessionId}/1`), 1)
        for (const runner of runners) yield* Effect.ignore(runner.kill({ killSignal: "SIGKILL" }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 300_000 }
  )

  it.live(
    "a model call streams its deltas as they arrive; killed mid-stream, its re-run publishes none of them twice",
    () =>
      Effect.gen(function*() {
        const { logDir, pg, ports, runners } = yield* cluster
        const sessionId = "ms-m-t1"
        yield* Effect.gen(function*() {
          yield* DurableSession.start({ sessionId, prompt: sessionId })
          // The model hangs mid-stream: what a consumer sees now was published while the call ran.
          const during = yield* DurableSession.events(sessionId).pipe(
            Effect.repeat({
              until: (events) => deltasOf(events).join("") === streamedText(sessionId),
              schedule: Schedule.spaced("200 millis")
            }),
            Effect.timeout("120 seconds")
          )
          assert.isFalse(during.some((entry) => entry.event._tag === "TurnEnd"))
          for (const runner of runners) yield* Effect.ignore(runner.kill({ killSignal: "SIGKILL" }))
          runners[0] = yield* startRunner(pg.url, ports[0]!, logDir)
          runners[1] = yield* startRunner(pg.url, ports[1]!, logDir)
          const [status] = yield* allFinished([sessionId], "120 seconds")
          assert(status !== undefined && status._tag === "Finished", status?._tag)
          assertValidTranscript(status.result.messages)
          assert.strictEqual(textOf(status.result.messages[1]!), streamedText(sessionId))
          const events = yield* DurableSession.events(sessionId)
          // the call was made again, and its deltas, published again with the same ids, are there once each
          const calls = lines(path.join(logDir, "model.log")).filter((line) => line.startsWith(`${sessionId} 0 `))
          assert.strictEqual(calls.length, 2)
          const firstTurn = events.filter((entry) => entry.event.turn === 1)
          assert.strictEqual(deltasOf(firstTurn).join(""), streamedText(sessionId))
          assert.strictEqual(new Set(events.map((entry) => entry.id)).size, events.length)
          assert.strictEqual(events.filter((entry) => entry.event._tag === "TurnStart").length, 2)
        }).pipe(Effect.provide(node(pg.url, undefined, logDir)))
        for (const runner of runners) yield* Effect.ignore(runner.kill({ killSignal: "SIGKILL" }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 300_000 }
  )

  // Before, a decision for a call whose ApprovalResolved was not published yet returned true however many came: a
  // client that retried until true took a duplicate for the answer to the next call under the same id.
  it.live(
    "the store on PostgreSQL: of decisions sent at once exactly one is kept; a call id reused across turns, each " +
      "approved as it asks, completes",
    () =>
      Effect.gen(function*() {
        const pg = yield* Postgres.scoped
        yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
        const turns: ReadonlyArray<ScriptedModel.Turn> = [
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "staging" } }], usage },
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
          { text: "both deployed", usage }
        ]
        const ran: Array<string> = []
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.mergeAll(
            ScriptedModel.layer(followTranscript(turns)),
            toolsLayer(ran),
            DurableSession.layerSqlStore
          )),
          // The engine in this process: what is PostgreSQL's here is the store, which keeps the decisions. (With a
          // cluster runner in the test process instead, the next cluster test of the file timed out; not understood.)
          Layer.provideMerge(Layer.merge(WorkflowEngine.layerMemory, database(pg.url)))
        )
        yield* Effect.gen(function*() {
          // The store alone: of claims of one key made at once, one keeps its decision, and all answer it.
          const store = yield* DurableSession.Store
          const claims = yield* Effect.forEach(
            Array.from({ length: 8 }, (_, i) => i),
            (i) => store.claimDecision("claims", "1/d1", { approved: false, reason: `reviewer ${i}` }),
            { concurrency: "unbounded" }
          )
          assert.strictEqual(claims.filter((claim) => claim.claimed).length, 1)
          const kept = claims.find((claim) => claim.claimed)!.decision
          for (const claim of claims) assert.deepStrictEqual(claim.decision, kept)
          // The inbox is bounded (100 waiting): past it, SteeringFull and nothing kept; what was read leaves it.
          for (let i = 1; i <= 100; i++) {
            assert.strictEqual(yield* store.appendInbox("inbox-pg", i % 2 === 0 ? "steering" : "followUp", Message.user(`m${i}`)), i)
          }
          const full = yield* Effect.flip(store.appendInbox("inbox-pg", "steering", Message.user("m101")))
          assert(full._tag === "SteeringFull")
          assert.deepStrictEqual([full.kind, full.queued], ["steer", 100])
          assert.strictEqual((yield* store.readInbox("inbox-pg", "steering", 0)).length, 50)
          // read up to 60: the steering messages 2..60 leave; the place of the next one goes on after 100
          assert.strictEqual((yield* store.readInbox("inbox-pg", "steering", 60)).length, 20)
          assert.strictEqual(yield* store.appendInbox("inbox-pg", "steering", Message.user("m101")), 101)
          assert.strictEqual((yield* store.readInbox("inbox-pg", "followUp", 0)).length, 50)

          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "reused-pg", prompt: "ship it" }))
          yield* waitForEvent("reused-pg", "ApprovalRequested")
          const answered = yield* Effect.all([
            DurableSession.approve("reused-pg", "d1", { approved: true }),
            DurableSession.approve("reused-pg", "d1", { approved: true })
          ], { concurrency: "unbounded" })
          assert.strictEqual(answered.filter((kept) => kept).length, 1, JSON.stringify(answered))
          // The call asked next under d1 (turn 2): a client that tries until an approve answers (bounded).
          const next = yield* DurableSession.approve("reused-pg", "d1", { approved: true }).pipe(
            Effect.repeat({ until: (answered) => answered, schedule: Schedule.spaced("20 millis"), times: 3000 })
          )
          assert.isTrue(next)
          const result = yield* Fiber.join(fiber).pipe(Effect.timeout("60 seconds"))
          assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
          assert.deepStrictEqual(
            result.messages.flatMap((m) => m.role === "toolResult" ? [[m.toolCallId, textOf(m)]] : []),
            [["d1", "deployed to staging"], ["d1", "deployed to prod"]]
          )
        }).pipe(Effect.provide(layer))
        assert.deepStrictEqual(ran, ["deploy", "deploy"])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 180_000 }
  )

  // The store alone: a cancel's append and an idle wait's record are serialized by the session's lock.
  it.live(
    "the store on PostgreSQL keeps a cancel only while a run may be in flight, one at most, atomic with the idle wait",
    () =>
      Effect.gen(function*() {
        const pg = yield* Postgres.scoped
        yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
        yield* Effect.flatMap(Effect.service(DurableSession.Store), (store) => storeCancels(store, "pg")).pipe(
          Effect.provide(DurableSession.layerSqlStore.pipe(Layer.provide(database(pg.url))))
        )
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 120_000 }
  )

  it.live(
    "reapCluster deletes a finished session's rows in the cluster's tables; the cluster works on after it",
    () =>
      Effect.gen(function*() {
        const { logDir, pg, runners } = yield* cluster
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const ids = ["rp1-t2", "rp2-t2"]
          for (const sessionId of ids) yield* DurableSession.start({ sessionId, prompt: sessionId })
          yield* allFinished(ids, "120 seconds")
          const executionOf = (sessionId: string) =>
            DurableSession.SessionWorkflow.executionId({ sessionId, version: 1, request: { prompt: "" } })
          const messagesOf = (sessionId: string) =>
            Effect.flatMap(executionOf(sessionId), (executionId) =>
              sql<{ id: string }>`SELECT id::text AS id FROM cluster_messages WHERE entity_id = ${executionId}`)
          const repliesTo = (requestIds: ReadonlyArray<string>) =>
            Effect.map(
              sql<{ n: string }>`SELECT count(*)::text AS n FROM cluster_replies
                WHERE request_id::text IN ${sql.in(requestIds)}`,
              (rows) => Number(rows[0]!.n)
            )
          const first = (yield* messagesOf("rp1-t2")).map((row) => row.id)
          assert.isAbove(first.length, 10)
          assert.isAbove(yield* repliesTo(first), 10)
          // Just finished: a runner may still hold the execution, so nothing is reaped whatever the retention.
          assert.deepStrictEqual(yield* DurableSession.reapCluster(0), [])
          yield* sql`UPDATE effect_agent_sessions SET updated_at = updated_at - 120000 WHERE session_id = 'rp1-t2'`
          assert.deepStrictEqual(yield* DurableSession.reapCluster(0), ["rp1-t2"])
          assert.strictEqual((yield* messagesOf("rp1-t2")).length, 0)
          assert.strictEqual(yield* repliesTo(first), 0)
          assert.deepStrictEqual(yield* DurableSession.poll("rp1-t2"), { _tag: "Unknown" })
          assert.deepStrictEqual(yield* DurableSession.events("rp1-t2"), [])
          // the other session is untouched
          assert.isAbove((yield* messagesOf("rp2-t2")).length, 10)
          assert.strictEqual((yield* DurableSession.poll("rp2-t2"))._tag, "Finished")
          // The cluster works on: a new session, and the reaped id started again (a new session).
          const again = ["rp3-t2", "rp1-t2"]
          for (const sessionId of again) yield* DurableSession.start({ sessionId, prompt: sessionId })
          const statuses = yield* allFinished(again, "120 seconds")
          for (const [i, status] of statuses.entries()) {
            assert(status._tag === "Finished", `${again[i]}: ${status._tag}`)
            assert.deepStrictEqual(status.result.outcome, { _tag: "Completed" })
            assertValidTranscript(status.result.messages)
          }
        }).pipe(Effect.provide(node(pg.url, undefined, logDir)))
        for (const runner of runners) yield* Effect.ignore(runner.kill({ killSignal: "SIGKILL" }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 300_000 }
  )

  it.live(
    "a runner that joins takes half the shards while their sessions run: each session moves, finishes once, " +
      "with the transcript and the events Agent.run gives",
    () =>
      Effect.gen(function*() {
        const { logDir, pg } = yield* scratch
        const first = yield* startRunner(pg.url, yield* Effect.promise(Postgres.freePort), logDir)
        // Ten sessions long enough to be mid-run when the shards move (on 15 of 30 shards, most move).
        const ids = Array.from({ length: 10 }, (_, i) => `jn${i}-t16`)
        const { published, statuses } = yield* Effect.gen(function*() {
          for (const sessionId of ids) yield* DurableSession.start({ sessionId, prompt: sessionId })
          yield* Effect.forEach(ids, (sessionId) => waitForEvent(sessionId, "TurnEnd"), { discard: true })
          // Held at their next step until the join is done, however long a loaded machine takes to start a runner.
          fs.writeFileSync(path.join(logDir, "hold"), "")
          // The second runner joins: the first hands it half its shards, and their sessions, as they run.
          const second = yield* startRunner(pg.url, yield* Effect.promise(Postgres.freePort), logDir)
          // once both hold shards (each runner's shard locks are advisory locks of its own database session)
          const sql = yield* SqlClient.SqlClient
          yield* sql<{ n: string }>`SELECT count(*)::text AS n FROM pg_locks WHERE locktype = 'advisory' GROUP BY pid`.pipe(
            Effect.repeat({
              until: (rows) => rows.filter((row) => Number(row.n) > 0).length >= 2,
              schedule: Schedule.spaced("200 millis")
            }),
            Effect.timeout("60 seconds")
          )
          yield* Effect.sleep("1 second")
          fs.rmSync(path.join(logDir, "hold"))
          const statuses = yield* allFinished(ids, "150 seconds")
          yield* Effect.ignore(second.kill({ killSignal: "SIGKILL" }))
          const published = yield* Effect.forEach(ids, (sessionId) => DurableSession.events(sessionId))
          return { published, statuses }
        }).pipe(Effect.provide(node(pg.url, undefined, logDir)))
        yield* Effect.ignore(first.kill({ killSignal: "SIGKILL" }))
        const tools = counts(lines(path.join(logDir, "tools.log")))
        for (const [i, status] of statuses.entries()) {
          const sessionId = ids[i]!
          assert(status._tag === "Finished", `${sessionId}: ${status._tag}${"defect" in status ? status.defect : ""}`)
          const expected = yield* inProcess(sessionId)
          assert.deepStrictEqual(status.result.outcome, { _tag: "Completed" })
          assert.deepStrictEqual(status.result.messages, expected.messages, sessionId)
          for (let turn = 0; turn < turnsOf(sessionId); turn++) checkCharge(sessionId, turn, status.result.messages, tools)
          const events = published[i]!
          assert.deepStrictEqual(events.map((entry) => entry.seq), events.map((_, j) => j + 1))
          assert.deepStrictEqual(events.map((entry) => entry.event._tag), expected.events, sessionId)
        }
        // The sessions that moved: their model calls were made by both runners.
        const byRunner = new Map<string, Set<string>>()
        for (const line of lines(path.join(logDir, "model.log"))) {
          const [sessionId, , , pid] = line.split(" ")
          byRunner.set(sessionId!, (byRunner.get(sessionId!) ?? new Set()).add(pid!))
        }
        const moved = ids.filter((sessionId) => (byRunner.get(sessionId)?.size ?? 0) > 1)
        console.log(`a runner joined: ${moved.length} of ${ids.length} sessions moved mid-run`)
        assert.isAbove(moved.length, 0, "no session moved while it ran: the test did not test a handover")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 300_000 }
  )

  it.live(
    `attack: PostgreSQL restarted ${restarts} times at seeded random moments under a lone runner: the runner lives on, ` +
      "every session finishes with the transcript Agent.run gives, no charge twice, each event once",
    () =>
      Effect.gen(function*() {
        const seed = process.env.EFFECT_AGENT_PG_SEED ?? String(Date.now())
        const { logDir, pg } = yield* scratch
        // One runner: nothing else could take its sessions over if it stopped. It refreshes its shard locks every
        // 3 s, so it finds them gone that much sooner after a restart (a refresh that a loaded machine makes late
        // gives the shards up, as a restart does: what this test is about).
        const runner = yield* startRunner(pg.url, yield* Effect.promise(Postgres.freePort), logDir, {
          shardLockRefreshInterval: "3 seconds"
        })
        // Sessions are started in waves, one before each restart, so that some are at their first activities
        // when the database goes away.
        const waves = Array.from(
          { length: restarts },
          (_, k) => Array.from({ length: perWave }, (_, j) => `pr${k}${"abcdefghij"[j]}-t${waveTurns}`)
        )
        const ids = waves.flat()
        const outages: Array<{ readonly down: number; readonly up: number }> = []
        const { published, statuses } = yield* Effect.gen(function*() {
          // A client follows the sessions all along, as `run --pg` does: a poll the database does not answer is
          // a StoreError, asked again.
          const started: Array<string> = []
          let last: ReadonlyArray<DurableSession.Status> = []
          const following = Effect.suspend(() => Effect.forEach([...started], (sessionId) =>
            Effect.retry(DurableSession.poll(sessionId), ridingOut))).pipe(
              Effect.tap((statuses) => Effect.sync(() => void (last = statuses))),
              Effect.repeat({
                until: (statuses) =>
                  statuses.length === ids.length &&
                  statuses.every((status) => status._tag === "Finished" || status._tag === "Failed"),
                schedule: Schedule.spaced("100 millis")
              }),
              // a failure names the seed that replays it, and where each session was
              Effect.timeoutOrElse({
                duration: "240 seconds",
                orElse: () =>
                  Effect.fail(
                    new Error(
                      `the sessions did not finish in 240 s (seed ${seed}; outages ${JSON.stringify(outages)}): ` +
                        last.map((status, i) =>
                          `${ids[i]} ${status._tag}${status._tag === "Suspended" ? ` (failed: ${status.failed})` : ""}`
                        ).join(", ")
                    )
                  )
              })
            )
          const follower = yield* Effect.forkChild(following)
          for (const wave of waves) {
            for (const sessionId of wave) {
              // A start the database does not answer is a StoreError: starting again joins the session.
              yield* DurableSession.start({ sessionId, prompt: sessionId }).pipe(Effect.retry(ridingOut))
              started.push(sessionId)
            }
            yield* Effect.sleep(Duration.millis(yield* Random.nextIntBetween(300, 2500)))
            const downFor = yield* Random.nextIntBetween(200, 2500)
            const down = Date.now()
            pg.down()
            yield* Effect.sleep(Duration.millis(downFor))
            pg.up()
            outages.push({ down, up: Date.now() })
          }
          const statuses = yield* Fiber.join(follower)
          const published = yield* Effect.forEach(ids, (sessionId) =>
            Effect.retry(DurableSession.events(sessionId), ridingOut))
          return { statuses, published }
        }).pipe(Random.withSeed(seed), Effect.provide(node(pg.url, undefined, logDir)))
        // the runner rode the restarts out
        assert.isTrue(yield* runner.isRunning, "the runner is still running")
        const tools = counts(lines(path.join(logDir, "tools.log")))
        let unknown = 0
        for (const [i, status] of statuses.entries()) {
          const sessionId = ids[i]!
          assert(status._tag === "Finished", `${sessionId}: ${status._tag} (seed ${seed})`)
          const { messages, outcome } = status.result
          assert.deepStrictEqual(outcome, { _tag: "Completed" })
          const expected = yield* inProcess(sessionId)
          // A charge cut off by a restart between its intent record and its handler is answered "outcome
          // unknown" (and ran at most once): otherwise the transcript is the one Agent.run gives.
          const seen = messages.map((message, j) => {
            if (message.role !== "toolResult" || !message.isError || !textOf(message).includes("outcome is unknown")) {
              return message
            }
            unknown++
            return expected.messages[j] ?? message
          })
          assert.deepStrictEqual(seen, expected.messages, `${sessionId} (seed ${seed})`)
          for (let turn = 0; turn < turnsOf(sessionId); turn++) checkCharge(sessionId, turn, messages, tools)
          const events = published[i]!
          assert.deepStrictEqual(events.map((entry) => entry.seq), events.map((_, j) => j + 1))
          assert.strictEqual(new Set(events.map((entry) => entry.id)).size, events.length)
          assert.deepStrictEqual(events.map((entry) => entry.event._tag), expected.events, sessionId)
        }
        const stalls = outages.map(({ up }) => stallAfter(up, path.join(logDir, "model.log")))
        console.log(
          `${restarts} restarts (seed ${seed}): down for ${outages.map((o) => `${o.up - o.down} ms`).join(", ")}; ` +
            `sessions made their next model call ${
              stalls.map((ms) => ms === undefined ? "(none left)" : `${(ms / 1000).toFixed(1)} s`).join(", ")
            } after the database was back; ${unknown} charges answered "outcome unknown"`
        )
        yield* Effect.ignore(runner.kill({ killSignal: "SIGKILL" }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 420_000 }
  )
})
