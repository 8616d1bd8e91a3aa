/**
 * The smallest reproduction of what an activity costs on `ClusterWorkflowEngine` over SQL storage (effect 4.1),
 * on effect alone: one workflow of N activities that do nothing, on a `SingleRunner` with `@effect/sql-pg`, on a
 * local PostgreSQL. It prints the writing transactions (transaction ids assigned) and the statements per
 * activity, and the statements by count.
 *
 * Each activity is a persisted request to the workflow's entity: its message is inserted; the insert opens the
 * runner's storage read latch (`Sharding`'s `waitUntilRead`), so the storage read loop runs once per message: its
 * poll (an `UPDATE … SET last_read`), the runner's heartbeat and its shard-lock check (`pg_locks`); then the
 * reply and the `processed` mark. Four writing transactions an activity, whatever the activity does, which no
 * setting of `ShardingConfig` changes: issue 33's goal (at most two a turn, a turn being at least two
 * activities) needs an engine that keeps an activity's result in one write.
 *
 *   node --conditions=effect-agent-source bench/durable/activity-cost-repro.ts [N] [--with-transaction]
 */
import { NodeCrypto } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted, Schema } from "effect"
import { ClusterSchema, ClusterWorkflowEngine, SingleRunner } from "effect/cluster"
import { Activity, Workflow } from "effect/workflow"
import * as Postgres from "./postgres.ts"

const activities = Number(process.argv[2] ?? "50")
/** `--with-transaction`: each activity annotated `ClusterSchema.WithTransaction` (its body and reply in one). */
const withTransaction = process.argv.includes("--with-transaction")

const Flow = Workflow.make("activity-cost", {
  payload: { id: Schema.String },
  idempotencyKey: ({ id }) => id
})

const FlowLayer = Flow.toLayer(() =>
  Effect.gen(function*() {
    for (let i = 0; i < activities; i++) {
      const activity = Activity.make({ name: `step/${i}`, execute: Effect.void })
      yield* withTransaction ? activity.annotate(ClusterSchema.WithTransaction, true) : activity
    }
  })
)

const database = "activity_cost"
await Postgres.withDatabase(database, async ({ counters, url }) => {
  const layer = FlowLayer.pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(SingleRunner.layer()),
    Layer.provide(NodeCrypto.layerDigest),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(url) }))
  )
  await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    // a first run makes the tables and warms the runner
    yield* Flow.execute({ id: "warm-up" })
    yield* Effect.promise(() => counters.resetStatements())
    const xid = yield* Effect.promise(() => counters.nextXid())
    yield* Flow.execute({ id: "measured" })
    const writes = (yield* Effect.promise(() => counters.nextXid())) - xid
    const statements = yield* Effect.promise(() => counters.statements(database))
    const top = yield* Effect.promise(() => counters.topStatements(database, 8))
    console.log(`${activities} activities${withTransaction ? " (WithTransaction)" : ""}: ${(writes / activities).toFixed(2)} writing transactions and ` +
      `${(statements / activities).toFixed(2)} statements an activity`)
    for (const { calls, query } of top) {
      console.log(`${(calls / activities).toFixed(2).padStart(6)}  ${query.replace(/\s+/g, " ").slice(0, 110)}`)
    }
  }).pipe(Effect.provide(layer))))
})
