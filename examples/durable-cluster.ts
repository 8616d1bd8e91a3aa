/**
 * Agent sessions on several machines: runner processes on `effect/cluster`
 * with PostgreSQL, and a client that submits a session and follows it.
 *
 *   # once per deploy, then on every machine that runs sessions (each with its own port):
 *   node --conditions=effect-agent-source examples/durable-cluster.ts runner postgres://… 34431
 *   # anywhere: submit a session and follow its events until it ends
 *   node --conditions=effect-agent-source examples/durable-cluster.ts run postgres://… trip-1 "Plan a trip to Oslo"
 *
 * The model here is scripted (no keys, no network): put a provider layer in its place.
 */
import { NodeClusterSocket, NodeRuntime } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Option, Redacted, Schedule, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { ClusterWorkflowEngine, RunnerAddress, type ShardingConfig } from "effect/cluster"
import { Message, ToolRegistry } from "effect-agent"
import { DurableSession } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"

const Weather = Tool.make("weather", {
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.String
})
const Tools = Toolkit.make(Weather)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ weather: ({ city }) => Effect.succeed(`4°C and rain in ${city}`) }))
)
const Model = ScriptedModel.layer((_, request) =>
  request.prompt.content.some((message) => message.role === "tool")
    ? { text: "It is 4°C in Oslo: bring a coat." }
    : { toolCalls: [{ name: "weather", params: { city: "Oslo" } }] }
)

/**
 * A dead runner's sessions move once a health check finds it gone; a running call may take
 * `entityTerminationTimeout`; a lock refresh slower than its interval gives up all of a runner's shards.
 */
const sharding = (port?: number): Partial<ShardingConfig.ShardingConfig["Service"]> => ({
  ...(port === undefined ? {} : { runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", port)) }),
  shardLockExpiration: "35 seconds",
  shardLockRefreshInterval: "10 seconds",
  runnerHealthCheckInterval: "5 seconds",
  entityTerminationTimeout: "2 minutes"
})

const database = (url: string) => PgClient.layer({ url: Redacted.make(url) })

const runner = (url: string, port: number) =>
  Effect.gen(function*() {
    // A deploy step; safe to run again.
    yield* DurableSession.migrateSql
    const context = yield* Layer.build(
      DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(Model, ToolsLive, DurableSession.layerSqlStore)),
        Layer.provideMerge(ClusterWorkflowEngine.layer),
        Layer.provideMerge(NodeClusterSocket.layer({ storage: "sql", shardingConfig: sharding(port) }))
      )
    )
    console.log(`runner on 127.0.0.1:${port}`)
    // Resumes the sessions that suspended on a failure (the database was away).
    return yield* DurableSession.supervise().pipe(Effect.provideContext(context))
    // The database outlives the runner's layers (scoped inside it): their stop hands the shards back through it.
  }).pipe(Effect.scoped, Effect.provide(database(url)))

const client = (url: string, sessionId: string, prompt: string) =>
  Effect.gen(function*() {
    yield* DurableSession.start({ sessionId, prompt })
    let seen = 0
    const follow = Effect.gen(function*() {
      for (const { event, seq } of yield* DurableSession.events(sessionId, seen)) {
        seen = seq
        if (event._tag === "MessageUpdate") continue
        console.log(`${event._tag}${event._tag === "MessageEnd" ? `: ${Message.textOf(event.message)}` : ""}`)
      }
      return yield* DurableSession.poll(sessionId)
    }).pipe(
      // The database restarts: a StoreError, asked again (for up to 5 minutes).
      Effect.retry({ while: (error) => error._tag === "DurableStoreError", schedule: Schedule.spaced("1 second"), times: 300 })
    )
    const status = yield* follow.pipe(
      Effect.repeat({
        until: (status) => status._tag === "Finished" || status._tag === "Failed" || status._tag === "Died",
        schedule: Schedule.spaced("500 millis")
      })
    )
    console.log(status._tag === "Finished" ? status.result.outcome._tag : status._tag)
  }).pipe(
    Effect.provide(
      DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(Model, ToolsLive, DurableSession.layerSqlStore)),
        Layer.provideMerge(ClusterWorkflowEngine.layer),
        Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: sharding() })),
        Layer.provideMerge(database(url))
      )
    )
  )

const [mode, url, ...rest] = process.argv.slice(2)
if (mode === "runner" && url !== undefined) NodeRuntime.runMain(runner(url, Number(rest[0] ?? "34431")))
else if (mode === "run" && url !== undefined && rest.length === 2) NodeRuntime.runMain(client(url, rest[0]!, rest[1]!))
else console.error("usage: durable-cluster.ts runner <postgres url> [port] | run <postgres url> <session id> <task>")
