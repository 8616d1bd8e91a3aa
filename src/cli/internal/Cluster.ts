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
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as LanguageModel from "effect/ai/LanguageModel"
import { ClusterWorkflowEngine, RunnerAddress, type ShardingConfig } from "effect/cluster"
import * as Approvals from "../../Approvals.ts"
import * as Message from "../../Message.ts"
import * as Provider from "../../providers/Provider.ts"
import type * as RunState from "../../RunState.ts"
import * as CheckpointStore from "../../session/CheckpointStore.ts"
import * as DurableSession from "../../session/DurableSession.ts"
import * as Sessions from "../../session/Sessions.ts"
import * as ToolRegistry from "../../ToolRegistry.ts"
import { codes, ExitWith, fromOutcome, OnInterrupt } from "../ExitCode.ts"
import { configError, Failure } from "./Failure.ts"
import * as Flags from "./Flags.ts"
import { Io } from "./Io.ts"
import * as PluginEvents from "./PluginEvents.ts"
import * as Runner from "./Runner.ts"
import * as Settings from "./Settings.ts"
import * as View from "./View.ts"

/**
 * Failover settings: a dead runner's sessions move once a health check
 * (every 5 s; about 37 s with effect's defaults) finds it gone; a shard that
 * moves waits up to `entityTerminationTimeout` for a call in flight. A lock
 * refresh slower than its interval gives up all of a runner's shards (their
 * calls in flight are made again): 10 s copes with a loaded database.
 */
const defaults = {
  shardLockExpiration: Duration.seconds(35),
  shardLockRefreshInterval: Duration.seconds(10),
  runnerHealthCheckInterval: Duration.seconds(5),
  entityTerminationTimeout: Duration.minutes(2),
  entityMessagePollInterval: Duration.seconds(10),
  refreshAssignmentsInterval: Duration.seconds(3)
}

/** The settings an operator may tune, by the name effect/cluster gives each. */
type Tuning = { readonly [K in keyof typeof defaults]: Duration.Duration }

/**
 * The failover settings, each of which the environment may change, under
 * effect/cluster's name for it in constant case after `EFFECT_AGENT_CLUSTER_`
 * (`EFFECT_AGENT_CLUSTER_SHARD_LOCK_REFRESH_INTERVAL="5 seconds"`): a
 * cluster on a fast local network fails over sooner, one on a loaded
 * database keeps its locks longer. The same variables reach the runners and
 * `run --pg`. A value that is not a duration is a config error naming it.
 */
const tuning = (env: Readonly<Record<string, string | undefined>>): Effect.Effect<Tuning, Failure> => {
  const provider = ConfigProvider.fromEnvRecord({ ...env }).pipe(
    ConfigProvider.constantCase,
    ConfigProvider.nested("EFFECT_AGENT_CLUSTER")
  )
  const setting = (key: keyof Tuning) => {
    const variable = `EFFECT_AGENT_CLUSTER_${key.replace(/[A-Z]/g, (letter) => `_${letter}`).toUpperCase()}`
    return Config.Duration(key).pipe(Config.withDefault(defaults[key])).parse(provider).pipe(
      Effect.mapError(() => configError(`${variable}: expected a duration, such as "5 seconds"`)),
      Effect.filterOrFail(
        (duration) => Duration.isGreaterThan(duration, Duration.zero),
        () => configError(`${variable}: expected a duration above zero`)
      )
    )
  }
  return Effect.all({
    shardLockExpiration: setting("shardLockExpiration"),
    shardLockRefreshInterval: setting("shardLockRefreshInterval"),
    runnerHealthCheckInterval: setting("runnerHealthCheckInterval"),
    entityTerminationTimeout: setting("entityTerminationTimeout"),
    entityMessagePollInterval: setting("entityMessagePollInterval"),
    refreshAssignmentsInterval: setting("refreshAssignmentsInterval")
  })
}

const sharding = (tuned: Tuning, address?: { readonly host: string; readonly port: number }) => {
  const config: Partial<ShardingConfig.ShardingConfig["Service"]> = tuned
  if (address === undefined) return config
  const runner = RunnerAddress.make(address.host, address.port)
  return { ...config, runnerAddress: Option.some(runner), runnerListenAddress: Option.some(runner) }
}

/**
 * How long a runner's stop may take (in milliseconds) before the process
 * exits anyway: the longest effect's own stop waits (for the sessions it
 * ends, `entityTerminationTimeout`; for the hand-off of its shards, a lock
 * refresh interval), and 10 s more. A stop takes a few seconds: its
 * sessions give their runs up within a second of it.
 */
const stopWithin = (tuned: Tuning) =>
  Duration.toMillis(tuned.entityTerminationTimeout) + Duration.toMillis(tuned.shardLockRefreshInterval) + 10_000

/**
 * `@effect/sql-pg`'s client, loaded when a command of the cluster runs: an
 * optional peer dependency of the package, so that an app that builds on
 * `effect-agent/cli` loads without it, and is told how to install it when a
 * command of the cluster needs it (a config error). The installed command
 * is a bundle that has it inside.
 */
const pgClient: Effect.Effect<typeof PgClient, Failure> = Effect.tryPromise({
  try: () => import("@effect/sql-pg/PgClient"),
  catch: () => configError("the cluster keeps its sessions in PostgreSQL through @effect/sql-pg: npm install @effect/sql-pg")
})

const database = (pg: typeof PgClient, url: string) => pg.layer({ url: Redacted.make(url) })

/**
 * Builds `layer` in a scope of its own under the current one: a build that
 * fails releases what it acquired (a pool that could not connect), so that
 * trying again builds afresh.
 */
const building = <ROut, E, RIn>(layer: Layer.Layer<ROut, E, RIn>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(yield* Effect.scope)
    return yield* Layer.buildWithScope(layer, scope).pipe(
      Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
    )
  })

/**
 * A database that is away when a command starts, or while `run --pg`
 * follows its session (it restarts, a connection drops), is waited for:
 * the step is made again, backing off from 200 ms to 5 s between tries, for
 * up to 5 minutes (saying so once); then the command exits 22 with the
 * reason. One that refuses the command (its credentials) is no wait.
 */
const waitingForTheDatabase = (note: (text: string) => void) =>
  DurableSession.waitingForTheDatabase({
    onWait: (detail) => note(`cannot reach the database (${detail}); trying again for up to 5 minutes`),
    onGiveUp: (detail) => configError(`--pg: cannot reach the database: ${detail}`)
  })

/** What cannot reach or use the cluster (the database, the runner's port) is a config error, with its reason. */
const asFailure = <E extends { readonly message: string }>(what: string) => (error: E): Failure | ExitWith =>
  error instanceof Failure || error instanceof ExitWith ? error : configError(`${what}: ${error.message}`)

/**
 * Runs `effect-agent runner` until SIGINT or SIGTERM stops it: it then takes
 * no new work, hands its sessions back (they go on on the other runners),
 * releases its shards and its runner row, and exits 0. A second signal, or
 * a stop that takes longer than `stopWithin`, exits at once (code 1): its
 * sessions then move when the other runners find it gone, as after a kill.
 *
 * @since 0.1.0
 */
export const runner = (flags: Flags.RunnerFlags) =>
  Effect.gen(function*() {
    const io = yield* Io
    const note = (text: string) => io.stderr.write(`effect-agent runner: ${text}\n`)
    const tuned = yield* tuning(io.env)
    const onInterrupt = yield* OnInterrupt
    onInterrupt.code = codes.ok
    onInterrupt.forced = {
      within: stopWithin(tuned),
      code: codes.unexpected,
      note: "its sessions move to the other runners once their health check finds it gone"
    }
    const pg = yield* pgClient
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
    // The database is the dependency of every other layer: built first (with its tables), closed last. The
    // runner's stop needs it to hand its shards back and to remove its runner row: closed first (as when the
    // database was provided around the runner's body, inside the scope of the layers that use it), it left the
    // stop retrying for ever, the runner holding its shards and their sessions stalled.
    const nodeLayer = DurableSession.layer().pipe(
      Layer.provideMerge(Layer.merge(Layer.succeedContext(services), DurableSession.layerSqlStore)),
      Layer.provideMerge(ClusterWorkflowEngine.layer),
      Layer.provideMerge(
        NodeClusterSocket.layer({ storage: "sql", shardingConfig: sharding(tuned, { host: flags.host, port: flags.port }) })
      ),
      Layer.provideMerge(Layer.effectDiscard(DurableSession.migrateSql).pipe(Layer.provideMerge(database(pg, flags.pg))))
    )
    // The database may be away when the runner starts (it restarts): the runner waits for it.
    const context = yield* waitingForTheDatabase(note)(building(nodeLayer))
    note(`running sessions on ${flags.host}:${flags.port}`)
    io.stdout.write(JSON.stringify({ runner: `${flags.host}:${flags.port}` }) + "\n")
    // Once running, the runner outlives the database going away: its sharding reconnects, and the supervisor
    // survives a pass that fails and resumes the sessions that suspended meanwhile.
    return yield* DurableSession.supervise().pipe(
      Effect.provideContext(context),
      Effect.onInterrupt(() =>
        Effect.sync(() =>
          note(
            `stopping: handing its sessions to the other runners (within ${stopWithin(tuned) / 1000} s; ` +
              "a second signal exits at once)"
          )
        )
      )
    )
  }).pipe(
    Effect.scoped,
    Effect.onInterrupt(() =>
      Effect.flatMap(Io, (io) => Effect.sync(() => io.stderr.write("effect-agent runner: stopped\n")))
    ),
    Effect.mapError(asFailure("cannot run sessions"))
  )

const supervised = "the runners run no supervised sessions yet (effect-agent run does)"
const runnersModel = "the session runs on the runners' model (effect-agent runner --provider …)"
const runnersTools = "the session runs the runners' tools, in their workspace (effect-agent runner --tools …)"
const inTheDatabase = "the cluster keeps the session in PostgreSQL: run --pg --session-id ID follows it again"

/**
 * Those of `run`'s flags that `run --pg` would ignore, given, with why: the
 * runners run the session with their own model, tools, sandbox and
 * approvals. They are refused (exit 22), as `runner` and `serve` refuse
 * theirs. `--stdin-eof` is refused unless `ignore` (stdin is not read).
 */
const ignoredWithPg = (flags: Flags.Flags): ReadonlyArray<string> => {
  const flagged: ReadonlyArray<readonly [string, boolean, string]> = [
    ["--provider", Option.isSome(flags.provider), runnersModel],
    ["--model", Option.isSome(flags.model), runnersModel],
    ["--base-url", Option.isSome(flags.baseUrl), runnersModel],
    ["--api-key-env", Option.isSome(flags.apiKeyEnv), runnersModel],
    ["--script", Option.isSome(flags.script), runnersModel],
    ["--tools", Option.isSome(flags.tools), runnersTools],
    ["--mcp", flags.mcp.length > 0, runnersTools],
    ["--workspace", Option.isSome(flags.workspace), runnersTools],
    ["--sandbox", Option.isSome(flags.sandbox), runnersTools],
    ["--allow-read", flags.allowRead.length > 0, runnersTools],
    ["--allow-write", flags.allowWrite.length > 0, runnersTools],
    [
      "--approve",
      Option.isSome(flags.approve),
      "the runners decide approvals (effect-agent runner --approve …); a call that waits is approved with DurableSession.approve"
    ],
    ["--resume", Option.isSome(flags.resume), inTheDatabase],
    ["--session-dir", Option.isSome(flags.sessionDir), inTheDatabase],
    [
      "--emit-jsonl",
      Option.isSome(flags.emitJsonl) && flags.emitJsonl.value !== "-",
      "run --pg writes the session's events on stdout only (--emit-jsonl -); they are kept in PostgreSQL"
    ],
    [
      "--jsonl-format",
      flags.jsonlFormat !== "events",
      "run --pg writes the session's events as they are kept in PostgreSQL (--jsonl-format events)"
    ],
    ["--otlp", Option.isSome(flags.otlp), "the session runs on the runners: run --pg has no spans to export"],
    ["--stdin-eof", flags.stdinEof !== "ignore", "run --pg reads no stdin"],
    ["--check", flags.check.length > 0, supervised],
    ["--verifier", Option.isSome(flags.verifier), supervised],
    ["--plan", flags.plan, supervised],
    ["--max-plan-iterations", Option.isSome(flags.maxPlanIterations), supervised],
    ["--approve-turns", flags.approveTurns, supervised],
    ["--tolerate-known-failures", flags.tolerateKnownFailures, supervised],
    ["--worker", Option.isSome(flags.worker), supervised],
    ["--worker-command", Option.isSome(flags.workerCommand), supervised]
  ]
  return flagged.filter(([, given]) => given).map(([flag, , why]) => `${flag}: ${why}`)
}

/**
 * `effect-agent run --pg URL`: submits the session and follows its events
 * (in `run`'s log view on stderr, none with `--quiet`; the answer on
 * stdout) until it ends; exits as `run` does for its outcome.
 *
 * @since 0.1.0
 */
export const submit = (flags: Flags.Flags, url: string) =>
  Effect.gen(function*() {
    const io = yield* Io
    const ignored = ignoredWithPg(flags)
    if (ignored.length > 0) {
      return yield* configError(`run --pg does not take flags it would ignore:\n  ${ignored.join("\n  ")}`)
    }
    const { config, warnings } = yield* Settings.limits(flags, false)
    for (const warning of warnings) io.stderr.write(`effect-agent: ${warning}\n`)
    const task = Option.getOrUndefined(flags.task)
    if (task === undefined) return yield* configError("--pg needs --task: the task of the session to submit")
    const pg = yield* pgClient
    const sessionId = Option.getOrElse(flags.sessionId, () => globalThis.crypto.randomUUID())
    yield* Schema.decodeUnknownEffect(CheckpointStore.SessionId)(sessionId).pipe(
      Effect.mapError((error) => configError(`--session-id ${JSON.stringify(sessionId)}: ${error.message}`))
    )
    const system = Option.getOrUndefined(flags.system)
    // The session API over the cluster: a client submits and follows; the runners run the session.
    const client = DurableSession.layerSessions.pipe(
      Layer.provideMerge(DurableSession.layerClient),
      Layer.provideMerge(DurableSession.layerSqlStore),
      Layer.provideMerge(ClusterWorkflowEngine.layer),
      Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: sharding(yield* tuning(io.env)) })),
      Layer.provideMerge(database(pg, url))
    )
    // said once a command: the follower and the wait for the result ride the same outage out together
    let told = false
    const waiting = waitingForTheDatabase((text) => told ? undefined : (told = true, io.stderr.write(`effect-agent: ${text}\n`)))
    const context = yield* waiting(building(client))
    const output = { quiet: flags.quiet, json: flags.json, jsonl: Option.isSome(flags.emitJsonl) }
    return yield* follow({ sessionId, prompt: task, system, config }, output, waiting).pipe(
      Effect.provideContext(context)
    )
  }).pipe(Effect.scoped, Effect.mapError(asFailure("--pg")))

/**
 * Starts a session on the `Sessions` service (whichever layer keeps it) and
 * follows it with `run`'s follower: its events in the log view on stderr
 * (none when `quiet`), the answer on stdout; exits as `run` does for its
 * outcome.
 */
const follow = (
  start: Sessions.StartOptions,
  output: {
    readonly quiet: boolean
    /** `--json`: the report, one object on stdout, at the end. */
    readonly json: boolean
    /** `--emit-jsonl -`: each event, a JSON line on stdout, as it is published. */
    readonly jsonl: boolean
  },
  waiting: ReturnType<typeof waitingForTheDatabase>
) =>
  Effect.gen(function*() {
    const io = yield* Io
    const sessions = yield* Sessions.Sessions
    const { sessionId } = start
    const progress = (text: string) => output.quiet ? undefined : io.stderr.write(text)
    // Starting a session again joins it, so a start the database did not answer is made again.
    yield* waiting(sessions.start(start))
    progress(`effect-agent: session ${sessionId} submitted\n`)
    // the session's events, as run shows its own: the view on stderr, and the JSON lines on stdout
    const view = output.quiet ? View.quiet(io.stderr.write) : View.log(io.stderr.write, {})
    const deliver = yield* PluginEvents.deliverTo(output.jsonl ? [view.plugin, Runner.jsonLines(io.stdout.write)] : [view.plugin])
    const followed = Runner.follower(sessions, sessionId, deliver)
    type Ended =
      | { readonly _tag: "Finished"; readonly result: RunState.RunResult }
      | { readonly _tag: "Failed"; readonly tag: string; readonly why: string }
    const ended = yield* waiting(followed.follow).pipe(
      Effect.map((result): Ended => ({ _tag: "Finished", result })),
      // the database given up on is the command's failure; the run's error (or defect) is the session's
      Effect.catch((error) =>
        error instanceof Failure
          ? Effect.fail(error)
          : Effect.succeed<Ended>({ _tag: "Failed", tag: error._tag, why: error.message })
      ),
      Effect.catchDefect((defect) => Effect.succeed<Ended>({ _tag: "Failed", tag: "Defect", why: `died: ${String(defect)}` }))
    )
    view.close()
    const report = (report: Runner.Report) => output.json ? io.stdout.write(`${JSON.stringify(report)}\n`) : undefined
    if (ended._tag === "Failed") {
      io.stderr.write(`effect-agent: session ${sessionId}: ${View.printable(View.errorText(ended.why))}\n`)
      report({
        exitCode: codes.unexpected,
        outcome: null,
        summary: ended.why,
        answer: null,
        error: { _tag: ended.tag, message: ended.why },
        runId: null,
        turns: 0,
        usage: Message.emptyUsage,
        elapsedMs: 0,
        session: null
      })
      return yield* Effect.fail(new ExitWith({ code: codes.unexpected }))
    }
    const { outcome, state } = ended.result
    const last = ended.result.messages.at(-1)
    const answer = last === undefined ? "" : Message.textOf(last)
    if (answer !== "" && !output.json && !output.jsonl) io.stdout.write(`${View.answer(answer, io.stdout.isTerminal)}\n`)
    const code = fromOutcome(outcome)
    report({
      exitCode: code,
      outcome,
      summary: `${outcome._tag}: ${View.describe(outcome)}`,
      answer: answer === "" ? null : answer,
      error: null,
      runId: state.runId,
      turns: state.turn,
      usage: state.usage,
      elapsedMs: state.elapsedMs,
      session: null
    })
    if (code !== codes.ok) return yield* Effect.fail(new ExitWith({ code }))
  })
