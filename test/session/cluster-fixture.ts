/**
 * What the cluster tests' runner processes (test/session/durable-runner.ts)
 * and the test process (a client of the cluster) share: the sharding
 * settings, the script, the tools and the layers.
 *
 * Each session's prompt is its id; its model replies follow its transcript
 * (so a runner that takes a session over carries on), and every model call
 * and every start of a tool's handler is appended to a log file: the tests
 * count them.
 */
import { NodeClusterSocket } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Option, Redacted, Schedule, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { ClusterWorkflowEngine, RunnerAddress, type ShardingConfig } from "effect/cluster"
import { AgentTool, Message, ToolRegistry } from "effect-agent"
import { DurableSession } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as fs from "node:fs"
import * as path from "node:path"

/**
 * Overrides of the settings below, as JSON in `EFFECT_AGENT_SHARDING` (the benchmark's `--sharding`), e.g.
 * `{"shardLockRefreshInterval":"5 seconds"}`.
 */
const overrides = (): Partial<ShardingConfig.ShardingConfig["Service"]> =>
  JSON.parse(process.env.EFFECT_AGENT_SHARDING ?? "{}")

/** Failover tuned for tests (the defaults wait about 37 s for a dead runner). */
export const sharding = (port?: number): Partial<ShardingConfig.ShardingConfig["Service"]> => ({
  ...(port === undefined ? {} : {
    runnerAddress: Option.some(RunnerAddress.make("127.0.0.1", port)),
    runnerListenAddress: Option.some(RunnerAddress.make("127.0.0.1", port))
  }),
  shardsPerGroup: 30,
  // A refresh of the shard locks that takes longer than the refresh interval (or a third of the expiration)
  // gives up all of the runner's shards: their sessions stop, and the calls they had in flight are made again.
  // A loaded database or runner can take seconds: 2 s lost the locks several times a run on a busy machine.
  // (A dead process's locks go with its connection; failover waits for the health check, not the expiration.)
  shardLockExpiration: "35 seconds",
  shardLockRefreshInterval: "10 seconds",
  runnerHealthCheckInterval: "5 seconds",
  entityTerminationTimeout: "2 seconds",
  entityMessagePollInterval: "300 millis",
  refreshAssignmentsInterval: "1 second",
  ...overrides()
})

const Key = Schema.Struct({ key: Schema.String, ms: Schema.Finite })

/** A step that is safe to run again. */
export const Step = Tool.make("step", { parameters: Key, success: Schema.String })

/** A charge that must never happen twice. */
export const Charge = AgentTool.annotate(Tool.make("charge", { parameters: Key, success: Schema.String }), {
  replaySafe: false
})

/** A deploy that needs a person's approval. */
export const Deploy = Tool.make("deploy", { parameters: Key, success: Schema.String, needsApproval: true })

const Kit = Toolkit.make(Step, Charge, Deploy)

const append = (logDir: string, file: string, line: string) => fs.appendFileSync(path.join(logDir, file), `${line}\n`)

/**
 * While `hold` is in the log directory, a step waits (up to 180 s) before it ends: a test holds its sessions
 * mid-run for as long as it needs, however slowly a loaded machine starts what it waits for. (At load 30, a
 * runner that joined took more than the 60 s this was before to hold its share of the shards.)
 */
const held = (logDir: string) =>
  Effect.sync(() => fs.existsSync(path.join(logDir, "hold"))).pipe(
    Effect.repeat({ until: (holding) => !holding, schedule: Schedule.spaced("50 millis"), times: 3600 })
  )

/** The tools; each start of a handler is logged as `<tool> <key>`. */
export const tools = (logDir: string) =>
  ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
    step: ({ key, ms }) =>
      Effect.sync(() => append(logDir, "tools.log", `step ${key}`)).pipe(
        Effect.andThen(Effect.sleep(`${ms} millis`)),
        Effect.andThen(held(logDir)),
        Effect.as(`step ${key} done`)
      ),
    charge: ({ key, ms }) =>
      Effect.sync(() => append(logDir, "tools.log", `charge ${key}`)).pipe(
        Effect.andThen(Effect.sleep(`${ms} millis`)),
        Effect.as(`charged ${key}`)
      ),
    deploy: ({ key }) => Effect.sync(() => (append(logDir, "tools.log", `deploy ${key}`), `deployed ${key}`))
  })))

/** How many turns a session has: its id ends with `-t<turns>`, `-a` for one that asks for approval first. */
export const turnsOf = (sessionId: string): number => Number(/-t(\d+)/.exec(sessionId)?.[1] ?? "4")

/** The text a session whose id contains `-m` streams in its first turn. */
export const streamedText = (sessionId: string): string => `looking into ${sessionId} one word at a time`

const calledBefore = (logDir: string, sid: string, turn: number): boolean => {
  const file = path.join(logDir, "model.log")
  return fs.existsSync(file) && fs.readFileSync(file, "utf8").split("\n").some((l) => l.startsWith(`${sid} ${turn} `))
}

/**
 * The script: turn i (from 0) of session `sid` calls `step` and `charge`
 * (keys `sid/i`) and sleeps `ms` in each; the last turn answers "done". A
 * session whose id contains `-a` asks for a deploy first. One whose id
 * contains `-m` streams {@link streamedText} in its first turn, word by
 * word, and the first time it is called hangs there (mid-stream, until its
 * runner dies). Every call is logged as `<sid> <i> <time in ms> <pid>`.
 */
export const script = (logDir: string): ScriptedModel.Script => (_index, request) => {
  const first = request.prompt.content.find((message) => message.role === "user")
  const sid = first === undefined
    ? "?"
    : first.content.map((part) => (part.type === "text" ? part.text : "")).join("")
  const i = request.prompt.content.filter((message) => message.role === "assistant").length
  const streams = sid.includes("-m") && i === 0
  const hang = streams && !calledBefore(logDir, sid, i)
  append(logDir, "model.log", `${sid} ${i} ${Date.now()} ${process.pid}`)
  const turns = turnsOf(sid)
  if (i >= turns) return { text: "done", usage: { input: 10, output: 2 } }
  const ms = 40 + ((i * 37) % 120)
  const toolCalls = sid.includes("-a") && i === 0
    ? [{ id: `d${i}`, name: "deploy", params: { key: `${sid}/${i}`, ms } }]
    : [
      { id: `s${i}`, name: "step", params: { key: `${sid}/${i}`, ms } },
      { id: `c${i}`, name: "charge", params: { key: `${sid}/${i}`, ms } }
    ]
  const usage = { input: 10, output: 2 }
  if (streams) return { text: streamedText(sid), toolCalls, usage, hang }
  return modelMs > 0 ? { toolCalls, usage, delay: `${modelMs} millis` } : { toolCalls, usage }
}

/** How long each model call takes (the benchmark's `--model-ms`, through `EFFECT_AGENT_MODEL_MS`). */
const modelMs = Number(process.env.EFFECT_AGENT_MODEL_MS ?? "0")

/** The database. */
export const database = (url: string) =>
  PgClient.layer({ url: Redacted.make(url), maxConnections: 20 })

/** Which engine the sessions run on: effect's cluster, or the sessions' own SQL engine. */
export type EngineKind = "cluster" | "sql"

/** The workflow engine on the cluster: a runner on `port`, or a client when there is none. */
export const engine = (url: string, port: number | undefined) =>
  ClusterWorkflowEngine.layer.pipe(
    Layer.provideMerge(
      port === undefined
        ? NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: sharding() })
        : NodeClusterSocket.layer({ storage: "sql", shardingConfig: sharding(port) })
    ),
    Layer.provideMerge(database(url))
  )

/**
 * The sessions' own SQL engine: a runner, or a client (`runner: false`). Its runners need no address (they share
 * the database alone); a short lease lets the tests see a dead runner's sessions move.
 */
export const sqlEngine = (url: string, runner: boolean) =>
  DurableSession.layerSqlEngine({ runner, lease: "3 seconds", poll: "100 millis" }).pipe(
    Layer.provideMerge(database(url))
  )

/** A runner (with `port`) or a client (without): the session workflow registered, on Postgres. */
export const node = (url: string, port: number | undefined, logDir: string) =>
  DurableSession.layer().pipe(Layer.provideMerge(parts(logDir)), Layer.provideMerge(engine(url, port)))

/** {@link node} on the SQL engine: a runner, or a client (`runner: false`). */
export const sqlNode = (url: string, runner: boolean, logDir: string) =>
  DurableSession.layer().pipe(Layer.provideMerge(parts(logDir)), Layer.provideMerge(sqlEngine(url, runner)))

/** What a node runs sessions with: the script, the tools, the store. */
const parts = (logDir: string) =>
  Layer.mergeAll(ScriptedModel.layer(script(logDir), { record: false }), tools(logDir), DurableSession.layerSqlStore)

/** The text of a message (for the tests' checks). */
export const textOf = (message: Message.Message): string => Message.textOf(message)
