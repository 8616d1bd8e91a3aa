/**
 * Durable sessions on a cluster (`DurableSession` on `effect/cluster` with
 * PostgreSQL), from the command line:
 *
 * - `effect-agent runner --pg URL [--port P] [--host H]`: a runner process,
 *   its model and tools chosen by the flags of `run`; it creates the tables
 *   when missing and resumes sessions that suspended on a failure.
 * - `effect-agent run --pg URL --task …`: submits a session to the cluster
 *   and follows its events until it ends (the runners run it).
 *
 * @since 0.1.0
 */
import { NodeClusterSocket } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Context, Effect, Layer, Option, Path, Redacted, Result, Schedule, Schema } from "effect"
import { LanguageModel } from "effect/ai"
import { Flag } from "effect/cli"
import { ClusterWorkflowEngine, RunnerAddress, type ShardingConfig } from "effect/cluster"
import * as Approvals from "../../Approvals.ts"
import * as Message from "../../Message.ts"
import * as Provider from "../../providers/Provider.ts"
import * as CheckpointStore from "../../session/CheckpointStore.ts"
import * as DurableSession from "../../session/DurableSession.ts"
import * as StorageFailure from "../../session/internal/durable/storageFailure.ts"
import * as ToolRegistry from "../../ToolRegistry.ts"
import { codes, ExitWith, fromOutcome, OnInterrupt } from "../ExitCode.ts"
import { configError, Failure } from "./Failure.ts"
import * as Flags from "./Flags.ts"
import { Io } from "./Io.ts"
import * as Runner from "./Runner.ts"
import * as Settings from "./Settings.ts"
import { Approve } from "./Target.ts"
import * as View from "./View.ts"

const describe = <A>(flag: Flag.Flag<A>, text: string) => Flag.withDescription(flag, text)

// `run`'s flags that choose the model and the tools (a session's task, prompt and limits are the client's). Not
// those of a supervised run (a runner runs none), nor --quiet (it shows no progress) or --otlp (it exports no
// traces): a flag a runner would ignore is not taken, so that giving it is an error (exit 22), not a silent no-op.
const {
  task: _task,
  system: _system,
  resume: _resume,
  sessionDir: _sessionDir,
  emitJsonl: _emitJsonl,
  json: _json,
  stdinEof: _stdinEof,
  maxTurns: _maxTurns,
  maxTokens: _maxTokens,
  maxCost: _maxCost,
  maxWall: _maxWall,
  pg: _pg,
  sessionId: _sessionId,
  quiet: _quiet,
  otlp: _otlp,
  check: _check,
  verifier: _verifier,
  plan: _plan,
  maxPlanIterations: _maxPlanIterations,
  approveTurns: _approveTurns,
  worker: _worker,
  approve: _approve,
  ...modelFlags
} = Flags.flags

/**
 * The flags of `effect-agent runner`.
 *
 * @since 0.1.0
 */
export const runnerFlags = {
  ...modelFlags,
  approve: describe(
    Flag.optional(Flag.Literals("approve", Approve.literals)),
    "Calls that need approval: ask (default: each waits for DurableSession.approve, from any process), all, none"
  ),
  pg: describe(Flag.String("pg"), "The PostgreSQL URL the cluster keeps its sessions in"),
  port: describe(Flag.withDefault(Flag.Int("port"), 34431), "The port runners reach this one on (default 34431)"),
  host: describe(
    Flag.withDefault(Flag.String("host"), "127.0.0.1"),
    "The address other runners reach this one at (default 127.0.0.1)"
  )
}

/**
 * The flags of `effect-agent runner`, as parsed.
 *
 * @since 0.1.0
 */
export type RunnerFlags = {
  readonly [K in keyof typeof runnerFlags]: typeof runnerFlags[K] extends Flag.Flag<infer A> ? A : never
}

/**
 * Failover settings: a dead runner's sessions move once a health check
 * (every 5 s; about 37 s with effect's defaults) finds it gone; a shard that
 * moves waits up to `entityTerminationTimeout` for a call in flight. A lock
 * refresh slower than its interval gives up all of a runner's shards (their
 * calls in flight are made again): 10 s copes with a loaded database.
 */
const sharding = (address?: { readonly host: string; readonly port: number }) => {
  const config: Partial<ShardingConfig.ShardingConfig["Service"]> = {
    shardLockExpiration: "35 seconds",
    shardLockRefreshInterval: "10 seconds",
    runnerHealthCheckInterval: "5 seconds",
    entityTerminationTimeout: "2 minutes"
  }
  if (address === undefined) return config
  const runner = RunnerAddress.make(address.host, address.port)
  return { ...config, runnerAddress: Option.some(runner), runnerListenAddress: Option.some(runner) }
}

const database = (url: string) => PgClient.layer({ url: Redacted.make(url) })

/**
 * A database that is away when a command starts, or while `run --pg`
 * follows its session (it restarts, a connection drops), is waited for:
 * the step is made again, backing off from 200 ms to 5 s between tries, for
 * up to 5 minutes (saying so once); then the command exits 22 with the
 * reason. One that refuses the command (its credentials) is no wait.
 */
const waitingForTheDatabase = (note: (text: string) => void) =>
  StorageFailure.waitingForTheDatabase({
    onWait: (failure) =>
      note(`cannot reach the database (${StorageFailure.detailOf(failure)}); trying again for up to 5 minutes`),
    onGiveUp: (failure) => configError(`--pg: cannot reach the database: ${StorageFailure.detailOf(failure)}`)
  })

/** What cannot reach or use the cluster (the database, the runner's port) is a config error, with its reason. */
const asFailure = <E extends { readonly message: string }>(what: string) => (error: E): Failure | ExitWith =>
  error instanceof Failure || error instanceof ExitWith ? error : configError(`${what}: ${error.message}`)

/**
 * Runs `effect-agent runner` until it is interrupted.
 *
 * @since 0.1.0
 */
export const runner = (flags: RunnerFlags) =>
  Effect.gen(function*() {
    const io = yield* Io
    ;(yield* OnInterrupt).code = codes.ok
    const note = (text: string) => io.stderr.write(`effect-agent runner: ${text}\n`)
    const approve = Option.orElse(flags.approve, () => Option.some("ask" as const))
    const path = yield* Path.Path
    const target = yield* Settings.target({ ...flags, approve }, undefined, { cwd: io.cwd, env: io.env }, path)
    const key = Settings.apiKey(target, io.env)
    if (Result.isFailure(key)) return yield* configError(key.failure)
    const languageModel = yield* Layer.build(
      Runner.providerLayer(target, key.success, { maxRetries: Provider.defaultRetryPolicy.maxRetries })
    ).pipe(
      Effect.map((context) => Context.get(context, LanguageModel.LanguageModel)),
      Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord({ ...io.env })),
      Effect.mapError((error) => configError(`cannot set up the ${target.provider} provider: ${error.message}`))
    )
    const registry = yield* Runner.tools(target, note)
    const tools = Context.make(LanguageModel.LanguageModel, languageModel).pipe(
      Context.add(ToolRegistry.ToolRegistry, registry)
    )
    // --approve none: a policy that denies what needs approval (all: the tools need none; ask: each call waits)
    const services: Context.Context<LanguageModel.LanguageModel | ToolRegistry.ToolRegistry> =
      target.approve === "none"
        ? Context.add(
          tools,
          Approvals.Approvals,
          Approvals.denyAll("this call needs approval, and the runner was started with --approve none")
        )
        : tools
    const nodeLayer = DurableSession.layer().pipe(
      Layer.provideMerge(Layer.merge(Layer.succeedContext(services), DurableSession.layerSqlStore)),
      Layer.provideMerge(ClusterWorkflowEngine.layer),
      Layer.provideMerge(
        NodeClusterSocket.layer({ storage: "sql", shardingConfig: sharding({ host: flags.host, port: flags.port }) })
      )
    )
    // The database may be away when the runner starts (it restarts): the runner waits for it.
    const context = yield* Effect.gen(function*() {
      const sql = yield* Layer.build(database(flags.pg))
      yield* DurableSession.migrateSql.pipe(Effect.provideContext(sql))
      return yield* Layer.build(nodeLayer).pipe(Effect.provideContext(sql))
    }).pipe(waitingForTheDatabase(note))
    note(`running sessions on ${flags.host}:${flags.port}`)
    io.stdout.write(JSON.stringify({ runner: `${flags.host}:${flags.port}` }) + "\n")
    // Once running, the runner outlives the database going away: its sharding reconnects, and the supervisor
    // survives a pass that fails and resumes the sessions that suspended meanwhile.
    return yield* DurableSession.supervise().pipe(Effect.provideContext(context))
  }).pipe(Effect.scoped, Effect.mapError(asFailure("cannot run sessions")))

/**
 * `effect-agent run --pg URL`: submits the session and follows its events
 * (a line per turn, call and message on stderr; the answer on stdout) until
 * it ends; exits as `run` does for its outcome.
 *
 * @since 0.1.0
 */
export const submit = (flags: Flags.Flags, url: string) =>
  Effect.gen(function*() {
    const io = yield* Io
    const { config, warnings } = yield* Settings.limits(flags, false)
    for (const warning of warnings) io.stderr.write(`effect-agent: ${warning}\n`)
    const task = Option.getOrUndefined(flags.task)
    if (task === undefined) return yield* configError("--pg needs --task: the task of the session to submit")
    const sessionId = Option.getOrElse(flags.sessionId, () => globalThis.crypto.randomUUID())
    yield* Schema.decodeUnknownEffect(CheckpointStore.SessionId)(sessionId).pipe(
      Effect.mapError((error) => configError(`--session-id ${JSON.stringify(sessionId)}: ${error.message}`))
    )
    const system = Option.getOrUndefined(flags.system)
    const client = DurableSession.layerClient.pipe(
      Layer.provideMerge(DurableSession.layerSqlStore),
      Layer.provideMerge(ClusterWorkflowEngine.layer),
      Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: sharding() })),
      Layer.provideMerge(database(url))
    )
    const waiting = waitingForTheDatabase((text) => io.stderr.write(`effect-agent: ${text}\n`))
    const context = yield* waiting(Layer.build(client))
    return yield* Effect.gen(function*() {
      // Starting a session again joins it, so a start the database did not answer is made again.
      yield* waiting(DurableSession.start({ sessionId, prompt: task, system, config }))
      io.stderr.write(`effect-agent: session ${sessionId} submitted\n`)
      let seen = 0
      const follow = Effect.gen(function*() {
        for (const { event, seq } of yield* DurableSession.events(sessionId, seen)) {
          seen = seq
          if (event._tag === "TurnStart") io.stderr.write(`── turn ${event.turn}\n`)
          else if (event._tag === "ToolExecutionStart") io.stderr.write(`⚙ ${event.toolName}\n`)
          else if (event._tag === "ApprovalRequested") {
            io.stderr.write(`? ${event.toolName} waits for approval (call ${event.toolCallId})\n`)
          }
        }
        return yield* DurableSession.poll(sessionId)
      }).pipe(waiting)
      const status = yield* follow.pipe(
        Effect.repeat({
          until: (status) => status._tag === "Finished" || status._tag === "Failed" || status._tag === "Died",
          schedule: Schedule.spaced("500 millis")
        })
      )
      if (status._tag !== "Finished") {
        const why = status._tag === "Failed" ? status.error.message : status._tag
        io.stderr.write(`effect-agent: session ${sessionId}: ${why}\n`)
        return yield* Effect.fail(new ExitWith({ code: codes.unexpected }))
      }
      const last = status.result.messages.at(-1)
      const answer = last === undefined ? "" : Message.textOf(last)
      if (answer !== "") io.stdout.write(`${View.answer(answer, io.stdout.isTerminal)}\n`)
      const code = fromOutcome(status.result.outcome)
      if (code !== codes.ok) return yield* Effect.fail(new ExitWith({ code }))
    }).pipe(Effect.provideContext(context))
  }).pipe(Effect.scoped, Effect.mapError(asFailure("--pg")))
