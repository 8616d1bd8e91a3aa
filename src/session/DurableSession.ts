/**
 * An agent session as a durable workflow (`effect/workflow`): it survives a
 * crashed process and, on `effect/cluster` with SQL storage, a crashed
 * machine, a deploy and a scale-up.
 *
 * The session's body is the agent loop itself (the same code path as
 * `Agent.run`); every step that is not deterministic is an activity with a
 * stable name, whose result the engine stores: the start (run id, clock),
 * each poll of the inbox (steering and follow-ups), each turn's model call,
 * each tool call (the calls of a batch as concurrent activities, within the
 * config's cap). When the body runs again (another runner took the session
 * over, or it was resumed) the completed activities answer from storage and
 * the transcript is rebuilt from them.
 *
 * - Activities run at least once: a call of a tool that is not `ReplaySafe`
 *   writes an intent record before it acts, and a call run again finds it
 *   and answers "outcome unknown" (the rule of the file store's `Session`).
 * - Approvals: the application's `Approvals` policy, when the runner is
 *   given one, decides each call (once: its decision is an activity's
 *   result, or for a sub-agent's call in the activity of the call that runs
 *   the sub-agent); otherwise (none, or an `Approvals.interactive()` handle,
 *   which lives in one process) each call waits on a durable deferred, which
 *   {@link approve} resolves from any process. A sub-agent's call that waits
 *   stops the session's call that runs the sub-agent; the decision continues
 *   it, the sub-agent going on from where it was. Steering, follow-ups and
 *   cancels go through the store's inbox ({@link steer}, {@link followUp},
 *   {@link cancel}: the run ends `Cancelled` at its next step); with `idle`, a
 *   session whose run ended (however the loop ended it) waits (on durable
 *   time) for a follow-up instead of finishing.
 * - Events are published from inside activities only, each with a sequence
 *   number within its session by which the store dedupes it ({@link events}).
 * - A session suspends on failure (a storage error, a model error): it is
 *   never lost; {@link supervise} resumes suspended sessions with backoff.
 *
 * Which engine runs it is the application's choice of layers: the in-memory
 * `WorkflowEngine.layerMemory` for tests; {@link layerSqlEngine}, the sessions'
 * own engine on PostgreSQL, for one process or several (a turn in one or two
 * writes); or `ClusterWorkflowEngine`, on a `SingleRunner` for one process or
 * on socket runners with `@effect/sql-pg` for several (see docs/sessions.md).
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type * as LanguageModel from "effect/ai/LanguageModel"
import {
  ClusterSchema,
  EntityAddress,
  EntityId,
  EntityType,
  MessageStorage,
  Sharding
} from "effect/cluster"
import type { SqlClient } from "effect/sql"
import { DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"
import * as AgentConfig from "../AgentConfig.ts"
import { AgentError as AgentErrorSchema, ConfigError } from "../AgentError.ts"
import type { AgentError } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Approvals from "../Approvals.ts"
import * as Message from "../Message.ts"
import type * as RunState from "../RunState.ts"
import type * as Steering from "../Steering.ts"
import type { ToolRegistry } from "../ToolRegistry.ts"
import * as Body from "./internal/durable/body.ts"
import * as SqlEngine from "./internal/durable/sqlEngine.ts"
import * as SqlStore from "./internal/durable/sqlStore.ts"
import * as StorageFailure from "./internal/durable/storageFailure.ts"
import * as StoreModule from "./internal/durable/store.ts"
import { CheckpointMissing, type InvalidSessionId } from "./internal/errors.ts"
import * as SessionIdRule from "./internal/sessionId.ts"
import * as Sessions from "./Sessions.ts"

/**
 * The store beside the engine's: inbox, intent records, events, sessions.
 *
 * @since 0.1.0
 * @category services
 */
export const Store = StoreModule.Store

/**
 * @since 0.1.0
 * @category services
 */
export type Store = StoreModule.Store

/**
 * @since 0.1.0
 * @category errors
 */
export const StoreError = StoreModule.StoreError

/**
 * @since 0.1.0
 * @category errors
 */
export type StoreError = StoreModule.StoreError

/**
 * What `Store.claimDecision` answers: whether this decision was kept (the
 * first for its call), and the decision kept.
 *
 * @since 0.1.0
 * @category models
 */
export type Claimed = StoreModule.Claimed

/**
 * A store in memory, to use or to wrap.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeMemoryStore: () => Store["Service"] = () => StoreModule.validated(StoreModule.makeMemory())

/**
 * A store in memory (for tests, and one-process engines that need not survive the process).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMemoryStore: Layer.Layer<Store> = Layer.sync(Store, makeMemoryStore)

/**
 * The store on PostgreSQL, through `effect/sql`'s `SqlClient` (e.g.
 * `PgClient.layer` from `@effect/sql-pg`). Its tables are made by
 * {@link migrateSql}, a deploy step.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerSqlStore: Layer.Layer<Store, never, SqlClient.SqlClient> = Layer.effect(
  Store,
  Effect.map(SqlStore.make, StoreModule.validated)
)

/**
 * Creates the SQL store's tables when missing (safe to run again): run it once per deploy, before the runners.
 *
 * @since 0.1.0
 * @category layers
 */
export const migrateSql: Effect.Effect<void, StoreError, SqlClient.SqlClient> = Effect.andThen(
  SqlStore.migrate,
  SqlEngine.migrate.pipe(Effect.mapError((error) => new StoreError({ operation: "migrate", detail: error.message })))
)

/**
 * Options of {@link layerSqlEngine}.
 *
 * @since 0.1.0
 * @category models
 */
export interface SqlEngineOptions {
  /**
   * Whether this process runs sessions (default `true`). `false`: it only starts, follows and answers them
   * (a client), and the runners take its sessions up at their next poll.
   */
  readonly runner?: boolean | undefined
  /**
   * How long a runner's lease lasts without renewal (default 15 seconds; renewed every third of it): the
   * sessions of a runner that died move to another this long after.
   */
  readonly lease?: Duration.Input | undefined
  /**
   * How often a runner looks for sessions to take up (woken in another process, or left by a runner that died)
   * and for durable clocks that are due (default 200 ms).
   */
  readonly poll?: Duration.Input | undefined
}

/**
 * The sessions' own workflow engine on PostgreSQL (through `effect/sql`'s `SqlClient`, e.g. `PgClient.layer`
 * from `@effect/sql-pg`), in the store's database: its tables are made by {@link migrateSql}. A turn is two
 * writes: each activity's result goes with the events it emitted in one statement, fenced by the runner's
 * ownership of the session. Runners share the database and nothing else: each keeps a lease, and the sessions
 * of one whose lease ran out are taken up by the next that polls (their completed activities answer from the
 * database, as on the cluster). Closing the layer hands this runner's sessions back.
 *
 * @example
 * ```ts
 * import { PgClient } from "@effect/sql-pg"
 * import { Layer, Redacted } from "effect"
 * import { DurableSession } from "effect-agent/session"
 *
 * const database = PgClient.layer({ url: Redacted.make("postgres://localhost/agents") })
 * // a runner: the sessions' workflow on the engine and the store, both in one database
 * const runner = DurableSession.layer().pipe(
 *   Layer.provideMerge(Layer.merge(DurableSession.layerSqlEngine(), DurableSession.layerSqlStore)),
 *   Layer.provideMerge(database)
 * )
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layerSqlEngine = (
  options: SqlEngineOptions = {}
): Layer.Layer<WorkflowEngine.WorkflowEngine, never, SqlClient.SqlClient> =>
  Layer.effect(WorkflowEngine.WorkflowEngine, SqlEngine.make(options))

/**
 * The workflow engine dies when its storage fails (see `StorageFailure`):
 * here that is the `StoreError` it is, which a caller can retry; any other
 * defect stays one.
 */
const storageFailure = (operation: string) => <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | StoreError, R> =>
  Effect.catchCauseIf(
    effect,
    (cause) => StorageFailure.storageFailureOf(cause) !== undefined,
    (cause) =>
      Effect.fail(
        new StoreError({ operation, detail: StorageFailure.detailOf(StorageFailure.storageFailureOf(cause)) })
      )
  )

/**
 * The workflow of a session: payload `{ sessionId, version, request }`, the
 * session id its idempotency key; it suspends on failure.
 *
 * @since 0.1.0
 * @category workflow
 */
export const SessionWorkflow = Workflow.make(StoreModule.workflowName, {
  payload: Body.Payload,
  success: Body.Result,
  error: AgentErrorSchema,
  idempotencyKey: (payload) => payload.sessionId
}).annotate(Workflow.SuspendOnFailure, true)

/**
 * What the runners of sessions are given besides the model and the tools:
 * the agent's parts every layer of `Sessions` takes (their plugins' hooks run
 * again when a session replays; a session handed off to an agent not listed
 * finishes rather than wait for a follow-up), and how long a session waits
 * idle.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<R = never> extends Sessions.AgentOptions<R> {
  /**
   * How long a session whose run ended waits for a follow-up (on durable time), whatever ended it (it
   * completed, a guardrail tripped, a budget ran out, it was cancelled): a follow-up continues it as
   * `Agent.runContinue` would. Without it, the session finishes when its run ends.
   */
  readonly idle?: Duration.Input | undefined
  /**
   * The supervisors a session may run under, by name (`Sessions.StartOptions.supervisor`), each made by
   * `SupervisedSession.supervisor`: a session that names one the runner lacks ends failed with `ConfigError`.
   * Its worker's model and tool calls are activities as a plain session's are, and so is each check's run
   * (`checks/<turn>/<i>`): a replay runs no check again. A plan or a turn's feedback waiting for the operator
   * waits durably, answered by `decidePlan` / `decideTurn` from any process (unless an `Approvals` policy
   * given to the runner answers it). Its checkpoints are its workflow's records (no `CheckpointSaved` event).
   */
  readonly supervisors?: Readonly<Record<string, Sessions.Supervisor<R>>> | undefined
}

/**
 * Registers the session workflow with the engine: where this layer runs,
 * sessions run (a runner). An `Approvals` policy provided to it decides the
 * calls that need approval; without one (or with an interactive handle)
 * they wait for {@link approve}.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <R = never>(
  options: Options<R> = {}
): Layer.Layer<
  never,
  never,
  WorkflowEngine.WorkflowEngine | Store | LanguageModel.LanguageModel | ToolRegistry | R
> => SessionWorkflow.toLayer(Body.make(options))

/**
 * Registers the session workflow on a node that only submits and follows
 * sessions (a cluster client: `NodeClusterSocket.layer({ clientOnly: true })`).
 * Sessions never run there: a client holds no shards, so the body it
 * registers is never called; if one ever were, it dies saying so.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerClient: Layer.Layer<never, never, WorkflowEngine.WorkflowEngine> = SessionWorkflow.toLayer(() =>
  Effect.die("effect-agent: a session ran on a client-only node; sessions run on runners (DurableSession.layer)")
)

/**
 * A session to start.
 *
 * @since 0.1.0
 * @category models
 */
export interface StartOptions extends Sessions.StartOptions {}

/**
 * How often {@link layerSessions}'s `result` and `watch` read a session's
 * events while they wait for more.
 */
const resultPollInterval = Duration.millis(200)

/**
 * The `Sessions` service over this module: sessions run as workflows on the
 * engine (a runner in this process, `layer`, or the cluster's runners, for a
 * client: `layerClient`), kept in the durable `Store`. `result` reads the
 * session's published events until its run's ending is among them (every
 * 200 ms). A follow-up continues a session whose run has ended when the
 * runners keep sessions `idle`.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { WorkflowEngine } from "effect/workflow"
 * import { DurableSession } from "effect-agent/session"
 *
 * // a runner in this process, on the in-memory engine and store (the model and the tools are the app's)
 * const sessions = DurableSession.layerSessions.pipe(
 *   Layer.provideMerge(DurableSession.layer({ idle: "10 minutes" })),
 *   Layer.provideMerge(Layer.merge(WorkflowEngine.layerMemory, DurableSession.layerMemoryStore))
 * )
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layerSessions: Layer.Layer<Sessions.Sessions, never, WorkflowEngine.WorkflowEngine | Store> = Layer
  .effect(
    Sessions.Sessions,
    Effect.map(Effect.context<WorkflowEngine.WorkflowEngine | Store>(), (context) => {
      const provided = Effect.provideContext(context)
      /** The session the store knows (else `CheckpointMissing`, as the in-process layer answers). */
      const known = (sessionId: string) =>
        Effect.gen(function*() {
          yield* SessionIdRule.validate(sessionId)
          const store = yield* Store
          if ((yield* store.session(sessionId)) === undefined) {
            return yield* Effect.fail(new CheckpointMissing({ sessionId }))
          }
        })
      const result = (
        sessionId: string,
        after?: number
      ): Effect.Effect<RunState.RunResult, Sessions.SessionsError | AgentError> =>
        Effect.gen(function*() {
          yield* known(sessionId)
          let read = Sessions.position(after)
          while (true) {
            for (const { event, seq } of yield* events(sessionId, read)) {
              read = seq
              if (Sessions.isEnding(event)) return yield* Sessions.resultOf(event)
            }
            // A session that ended without publishing an ending after `after` (it failed before its run began,
            // was interrupted, or its last ending came before `after` and it takes no follow-up): its status says
            // how. One that suspended (a model or storage error) waits for `supervise` to resume it.
            const status = yield* poll(sessionId)
            if (status._tag === "Failed") return yield* Effect.fail(status.error)
            if (status._tag === "Interrupted") {
              return yield* Effect.fail(new Sessions.SessionEnded({ sessionId, reason: "interrupted" }))
            }
            if (status._tag === "Died") return yield* Effect.die(status.defect)
            if (status._tag === "Finished") return status.result
            yield* Effect.sleep(resultPollInterval)
          }
        }).pipe(provided)
      return Sessions.Sessions.of({
        start: (options) =>
          Effect.gen(function*() {
            yield* start(options)
            if (options.steer !== undefined) yield* steer(options.sessionId, options.steer)
            if (options.followUp !== undefined) yield* followUp(options.sessionId, options.followUp)
          }).pipe(provided),
        steer: (sessionId, message) => steer(sessionId, message).pipe(provided),
        followUp: (sessionId, message) => followUp(sessionId, message).pipe(provided),
        approve: (sessionId, approvalId, decision) =>
          Effect.andThen(known(sessionId), approve(sessionId, approvalId, decision)).pipe(provided),
        interrupt: (sessionId) => Effect.andThen(known(sessionId), interrupt(sessionId)).pipe(provided),
        pending: (sessionId) =>
          Effect.gen(function*() {
            yield* known(sessionId)
            // an ended session has no call waiting, whatever its events say
            const status = yield* statusOf(sessionId)
            if (status._tag !== "Unknown" && status._tag !== "Suspended") return { approvals: [] }
            const published = yield* events(sessionId)
            const store = yield* Store
            let plan: Approvals.PlanRequest | undefined
            let turn: Approvals.TurnRequest | undefined
            for (const { question } of yield* store.questions(sessionId)) {
              if ("plan" in question) plan = question.plan
              else turn = question.turn
            }
            return {
              approvals: Sessions.waitingApprovals(published.map(({ event }) => event)),
              ...(plan === undefined ? {} : { plan }),
              ...(turn === undefined ? {} : { turn })
            }
          }).pipe(provided),
        decidePlan: (sessionId, iteration, decision) =>
          Effect.andThen(known(sessionId), decidePlan(sessionId, iteration, decision)).pipe(provided),
        decideTurn: (sessionId, turn, decision) =>
          Effect.andThen(known(sessionId), decideTurn(sessionId, turn, decision)).pipe(provided),
        cancel: (sessionId, reason) => Effect.andThen(known(sessionId), cancel(sessionId, reason)).pipe(provided),
        events: (sessionId, after) =>
          Effect.andThen(known(sessionId), events(sessionId, Sessions.position(after))).pipe(provided),
        watch: (sessionId, after) =>
          Stream.unwrap(Effect.as(known(sessionId), Stream.paginate(Sessions.position(after), (read) =>
            Effect.gen(function*() {
              while (true) {
                const fresh = yield* events(sessionId, read)
                if (fresh.length > 0) return [fresh, Option.some(fresh[fresh.length - 1]!.seq)] as const
                yield* Effect.sleep(resultPollInterval)
              }
            })))).pipe(Stream.provideContext(context)),
        result
      })
    })
  )


const payloadOf = Effect.fnUntraced(function*(options: StartOptions) {
  yield* SessionIdRule.validate(options.sessionId)
  const config = yield* AgentConfig.make(options.config)
  const request: Body.Request = {
    prompt: options.prompt,
    config,
    ...(options.system === undefined ? {} : { system: options.system }),
    ...(options.output === undefined ? {} : { output: options.output }),
    ...(options.supervisor === undefined ? {} : { supervisor: options.supervisor })
  }
  if (options.supervisor !== undefined && typeof options.prompt !== "string") {
    return yield* new ConfigError({ field: "prompt", rule: "a supervised session's task is text" })
  }
  const payload: Body.Payload = { sessionId: options.sessionId, version: Body.version, request }
  return payload
})

/** The execution id of a session (the idempotency key is the session id alone). */
const executionIdOf = (sessionId: string): Effect.Effect<string> =>
  SessionWorkflow.executionId({ sessionId, version: Body.version, request: { prompt: "" } })

/** The workflow's payload as the store keeps it until the workflow begins (JSON). */
const PayloadJson = Schema.fromJsonString(Schema.toCodecJson(Body.Payload))

/**
 * Records the session in the store, with its payload, before its workflow
 * is submitted: a session that suspends before its first activity has
 * stored anything (the database went away), or whose submit is lost (the
 * client dies, the database goes away between the two), is then still one
 * {@link supervise} finds, and resumes or submits again.
 */
const submitted = (payload: Body.Payload) =>
  Effect.gen(function*() {
    const store = yield* Store
    const json = yield* Schema.encodeEffect(PayloadJson)(payload).pipe(Effect.orDie)
    yield* store.submit(payload.sessionId, yield* Effect.clockWith((clock) => clock.currentTimeMillis), json)
    return payload
  })

/**
 * Runs a session to its end and answers its result (joining it when it runs
 * already). A session that suspends is waited for. An id that breaks the rule
 * (`CheckpointStore.SessionId`) is refused with `InvalidSessionId`, and a
 * storage failure is a `StoreError` (retry it: starting a session again joins it).
 *
 * @since 0.1.0
 * @category running
 */
export const run = (
  options: StartOptions
): Effect.Effect<
  RunState.RunResult,
  AgentError | StoreError | InvalidSessionId,
  WorkflowEngine.WorkflowEngine | Store
> =>
  Effect.flatMap(Effect.flatMap(payloadOf(options), submitted), (payload) =>
    Effect.flatMap(storageFailure("run")(SessionWorkflow.execute(payload)), (result) =>
      result._tag === "Finished"
        ? Effect.succeed(result.result)
        : result._tag === "Failed"
        ? Effect.fail(result.error)
        : Effect.die(result.defect)))

/**
 * Starts a session and answers its execution id at once. It records the
 * session in the store first (so the supervisor finds it whatever happens
 * next). An id that breaks the rule (`CheckpointStore.SessionId`) is refused
 * with `InvalidSessionId`, and a storage failure is a `StoreError` (retry it:
 * starting a session again joins it).
 *
 * @since 0.1.0
 * @category running
 */
export const start = (
  options: StartOptions
): Effect.Effect<string, ConfigError | StoreError | InvalidSessionId, WorkflowEngine.WorkflowEngine | Store> =>
  Effect.flatMap(
    Effect.flatMap(payloadOf(options), submitted),
    (payload) => storageFailure("start")(SessionWorkflow.execute(payload, { discard: true }))
  )

/**
 * Where a session is: running or suspended, or complete with its result.
 *
 * @since 0.1.0
 * @category models
 */
export type Status =
  | { readonly _tag: "Unknown" }
  | { readonly _tag: "Suspended"; readonly failed: boolean }
  | { readonly _tag: "Finished"; readonly result: RunState.RunResult }
  | { readonly _tag: "Failed"; readonly error: AgentError }
  | { readonly _tag: "Died"; readonly defect: string }
  /** Interrupted (`interrupt`): it ended for good. */
  | { readonly _tag: "Interrupted" }

/** {@link poll} of an id known to be valid. */
const statusOf = (sessionId: string): Effect.Effect<Status, StoreError, WorkflowEngine.WorkflowEngine> =>
  Effect.flatMap(executionIdOf(sessionId), (executionId) =>
    Effect.map(storageFailure("poll")(SessionWorkflow.poll(executionId)), (result): Status => {
      if (Option.isNone(result)) return { _tag: "Unknown" }
      const value = result.value
      if (value._tag === "Suspended") return { _tag: "Suspended", failed: value.failed === true }
      const exit = value.exit
      if (exit._tag === "Success") {
        const ended = exit.value
        if (ended._tag === "Died") return { _tag: "Died", defect: ended.defect }
        return ended._tag === "Finished"
          ? { _tag: "Finished", result: ended.result }
          : { _tag: "Failed", error: ended.error }
      }
      return Cause.hasInterruptsOnly(exit.cause) ? { _tag: "Interrupted" } : { _tag: "Died", defect: String(exit.cause) }
    }))

/**
 * Where a session is. `Unknown`: never started here, or running (the engine tells these apart only by
 * their result). A storage failure (the database restarts) is a `StoreError`: ask again.
 *
 * @since 0.1.0
 * @category running
 */
export const poll = (
  sessionId: string
): Effect.Effect<Status, StoreError | InvalidSessionId, WorkflowEngine.WorkflowEngine> =>
  Effect.flatMap(SessionIdRule.validate(sessionId), statusOf)

/** {@link resume} of an id known to be valid. */
const resumeValid = (sessionId: string): Effect.Effect<void, StoreError, WorkflowEngine.WorkflowEngine> =>
  Effect.flatMap(executionIdOf(sessionId), (executionId) =>
    storageFailure("resume")(SessionWorkflow.resume(executionId)))

/**
 * Resumes a suspended session.
 *
 * @since 0.1.0
 * @category running
 */
export const resume = (
  sessionId: string
): Effect.Effect<void, StoreError | InvalidSessionId, WorkflowEngine.WorkflowEngine> =>
  Effect.flatMap(SessionIdRule.validate(sessionId), resumeValid)

/**
 * Interrupts a session (durably: it ends wherever it runs).
 *
 * @since 0.1.0
 * @category running
 */
export const interrupt = (
  sessionId: string
): Effect.Effect<void, StoreError | InvalidSessionId, WorkflowEngine.WorkflowEngine | Store> =>
  Effect.flatMap(SessionIdRule.validate(sessionId), () =>
    Effect.gen(function*() {
      const executionId = yield* executionIdOf(sessionId)
      yield* storageFailure("interrupt")(SessionWorkflow.interrupt(executionId))
      // It has ended for good: the store says so, so that the supervisor neither submits again one whose submit
      // was lost nor polls it for ever, messages to it are refused, and `reap` forgets it in time.
      const store = yield* Store
      if ((yield* store.session(sessionId)) !== undefined) {
        yield* store.finish(sessionId, yield* Effect.clockWith((clock) => clock.currentTimeMillis))
      }
    }))

const toMessage = (message: string | Message.Message): Message.Message =>
  typeof message === "string" ? Message.user(message) : message

/**
 * Queues a steering message: delivered once, before the session's next model
 * call, whichever runner holds it (or when one takes it up).
 *
 * @since 0.1.0
 * @category control
 */
export const steer = (
  sessionId: string,
  message: string | Message.Message
): Effect.Effect<
  void,
  StoreError | InvalidSessionId | CheckpointMissing | Sessions.SessionEnded | Steering.SteeringFull,
  Store | WorkflowEngine.WorkflowEngine
> =>
  Effect.gen(function*() {
    yield* open(sessionId)
    const store = yield* Store
    // A session whose run ended waits idle for a follow-up and reads no steering: a steer to it is the
    // follow-up that continues it (as the in-process layer takes one to a run that has ended).
    if ((yield* store.waiting(sessionId)) !== undefined) return yield* deliverFollowUp(sessionId, message)
    yield* store.appendInbox(sessionId, "steering", toMessage(message))
  })

/**
 * Checks that a session takes messages: the store knows it (else
 * `CheckpointMissing`: a message sent to an id no session has yet would be
 * read by whoever starts it), and it has not ended for good (`SessionEnded`:
 * interrupted, or finished with no idle wait, it would never read it).
 */
const open = (
  sessionId: string
): Effect.Effect<
  void,
  StoreError | InvalidSessionId | CheckpointMissing | Sessions.SessionEnded,
  Store | WorkflowEngine.WorkflowEngine
> =>
  Effect.gen(function*() {
    yield* SessionIdRule.validate(sessionId)
    const store = yield* Store
    const record = yield* store.session(sessionId)
    if (record === undefined) return yield* Effect.fail(new CheckpointMissing({ sessionId }))
    const status = yield* statusOf(sessionId)
    if (status._tag === "Interrupted") {
      return yield* Effect.fail(new Sessions.SessionEnded({ sessionId, reason: "interrupted" }))
    }
    if (status._tag === "Failed" || status._tag === "Died") {
      return yield* Effect.fail(new Sessions.SessionEnded({ sessionId, reason: "failed" }))
    }
    if (status._tag === "Finished" || record.status === "finished") {
      // (finished in the store alone: interrupted before its workflow began)
      return yield* Effect.fail(
        new Sessions.SessionEnded({ sessionId, reason: status._tag === "Finished" ? "finished" : "interrupted" })
      )
    }
  })

/**
 * Queues a follow-up: delivered at the session's next natural stop, and wakes
 * a session that waits idle for one.
 *
 * @since 0.1.0
 * @category control
 */
export const followUp = (
  sessionId: string,
  message: string | Message.Message
): Effect.Effect<
  void,
  StoreError | InvalidSessionId | CheckpointMissing | Sessions.SessionEnded | Steering.SteeringFull,
  Store | WorkflowEngine.WorkflowEngine
> =>
  Effect.andThen(open(sessionId), deliverFollowUp(sessionId, message))

/** Queues a follow-up to a session known to take it, and wakes it if it waits idle. */
const deliverFollowUp = (sessionId: string, message: string | Message.Message) =>
  Effect.gen(function*() {
    const store = yield* Store
    yield* store.appendInbox(sessionId, "followUp", toMessage(message))
    // The session records its wait before it reads the inbox, and this reads the wait after the append:
    // either the session sees the message, or this sees the wait.
    const wait = yield* store.waiting(sessionId)
    if (wait === undefined) return
    yield* complete(sessionId, Body.wakeOf(wait), undefined, "followUp")
  })

/**
 * Completes one of a session's durable deferreds, from any process. The first completion of a deferred is the
 * one it keeps: delivering a kept value again changes nothing.
 */
const complete = <A, E>(
  sessionId: string,
  deferred: DurableDeferred.DurableDeferred<Schema.Codec<A, unknown>, Schema.Codec<E, unknown>>,
  value: A,
  operation: string
) =>
  Effect.flatMap(executionIdOf(sessionId), (executionId) =>
    storageFailure(operation)(DurableDeferred.succeed(deferred, {
      token: DurableDeferred.tokenFromExecutionId(deferred, { workflow: SessionWorkflow, executionId }),
      value
    })))

/**
 * Answers a call waiting for approval, from any process: `approvalId` is the
 * one its `ApprovalRequested` event carries (a call's own id at the top of
 * the run, `c2/c1` for a sub-agent's). The call is found among the session's
 * published events, so a call id the model (or a sub-agent's model, in its
 * next turn) used again answers only the call waiting now. Succeeds with
 * `true` when this decision answered that call, and with `false`, answering
 * nothing and keeping nothing, when no call of that id waits (not yet asked,
 * or already decided: of two decisions for one call, sent at once or one
 * after the other, the first is kept and the second returns `false`).
 *
 * The store keeps the decision (`Store.claimDecision`) before it is
 * delivered: an `approve` that finds a decision kept for the call delivers
 * that one again, so a decision whose delivery failed (a `StoreError`: the
 * database went away) reaches the call with the next `approve` of it, which
 * returns `false`.
 *
 * @since 0.1.0
 * @category control
 */
export const approve = (
  sessionId: string,
  approvalId: string,
  decision: Approvals.Decision
): Effect.Effect<boolean, StoreError | InvalidSessionId, Store | WorkflowEngine.WorkflowEngine> =>
  Effect.gen(function*() {
    const key = waitingKey(yield* events(sessionId), approvalId)
    if (key === undefined) return false
    // A session that ended (interrupted, finished) has no call waiting: a decision would answer nothing.
    const status = yield* statusOf(sessionId)
    if (status._tag !== "Unknown" && status._tag !== "Suspended") return false
    return yield* decide(sessionId, key, decision, "approve")
  })

/**
 * Keeps `decision` for the call `key` unless one is kept already, and
 * delivers the kept one to the call's deferred: whether `decision` was kept.
 */
const decide = (sessionId: string, key: string, decision: Approvals.Decision, operation: string) =>
  Effect.gen(function*() {
    const store = yield* Store
    const kept = yield* store.claimDecision(sessionId, key, decision)
    yield* complete(sessionId, Body.approvalOf(key), kept.decision, operation)
    return kept.claimed
  })

/**
 * Decides a supervised session's plan waiting for the operator, from any
 * process, if it is plan `iteration`: succeeds with `true` when this decision
 * answered it, and with `false`, answering nothing, when no such plan waits
 * (not proposed yet, decided already: of two decisions the first is kept, or
 * its run ended). As `approve`, the store keeps the decision before it is
 * delivered.
 *
 * @since 0.1.0
 * @category control
 */
export const decidePlan = (
  sessionId: string,
  iteration: number,
  decision: Approvals.PlanDecision
): Effect.Effect<boolean, StoreError | InvalidSessionId, Store | WorkflowEngine.WorkflowEngine> =>
  answer(sessionId, (question) => "plan" in question && question.plan.iteration === iteration, { plan: decision })

/**
 * Decides the feedback of a supervised session's act turn `turn` waiting for
 * the operator (`approveTurns`), as {@link decidePlan} does. `Interrupt` ends
 * the run `Cancelled` ("interrupted by the operator"), as a cancel does: the
 * session stays (in process the run is interrupted, and starting the session
 * again resumes it).
 *
 * @since 0.1.0
 * @category control
 */
export const decideTurn = (
  sessionId: string,
  turn: number,
  decision: Approvals.TurnDecision
): Effect.Effect<boolean, StoreError | InvalidSessionId, Store | WorkflowEngine.WorkflowEngine> =>
  answer(sessionId, (question) => "turn" in question && question.turn.turn === turn, { turn: decision })

/** Answers the question waiting that `asked` finds (the latest such), if any. */
const answer = (sessionId: string, asked: (question: StoreModule.Question) => boolean, given: StoreModule.Answer) =>
  Effect.gen(function*() {
    yield* SessionIdRule.validate(sessionId)
    // A session that ended (interrupted, finished) has no question waiting: an answer would answer nothing.
    const status = yield* statusOf(sessionId)
    if (status._tag !== "Unknown" && status._tag !== "Suspended") return false
    const store = yield* Store
    let key: string | undefined
    for (const waiting of yield* store.questions(sessionId)) if (asked(waiting.question)) key = waiting.key
    if (key === undefined) return false
    return yield* deliverAnswer(sessionId, key, given)
  })

/** Keeps the first answer to the question `key` and delivers it: whether it was this one. */
const deliverAnswer = (sessionId: string, key: string, given: StoreModule.Answer) =>
  Effect.gen(function*() {
    const store = yield* Store
    const kept = yield* store.answer(sessionId, key, given)
    if (kept === undefined) return false
    yield* complete(sessionId, Body.answerOf(key), kept.answer, "answer")
    return kept.claimed
  })

/**
 * Cancels the session's run in flight, from any process: it ends `Cancelled`
 * with `reason` at its next step, before its next model call or tool call
 * (the run's next steering take reads the cancel from the store's inbox, in
 * every replay at the same take). A model call or a tool call in flight
 * finishes first (a sub-agent's run in it too): an activity is not cut short.
 * A call of the run waiting for approval is cut as in process (answered
 * "cancelled before it started"), and a supervised run's plan or feedback
 * waiting for the operator ends there; a sub-agent's call waiting is denied
 * (`"the run was cancelled: <reason>"`). A decision kept first stands. What was queued to the run and not
 * delivered waits in its state, and the next follow-up delivers it first; the
 * session stays, and a follow-up goes on with it (where the runners keep
 * sessions `idle`).
 *
 * A session with no run in flight is left as it is: one that waits idle for a
 * follow-up, or has ended, keeps nothing, so a cancel never reaches the
 * session's next run. The store keeps one cancel at most per session (a second
 * while one is under way changes nothing: the first reason stands), its reason
 * cut to 4096 characters.
 *
 * @example
 * ```ts
 * import { DurableSession } from "effect-agent/session"
 *
 * // from any process of the cluster (a runner, or a client)
 * const stop = (sessionId: string) => DurableSession.cancel(sessionId, "the user pressed stop")
 * ```
 *
 * @since 0.1.0
 * @category control
 */
export const cancel = (
  sessionId: string,
  reason = "cancelled"
): Effect.Effect<void, StoreError | InvalidSessionId, Store | WorkflowEngine.WorkflowEngine> =>
  Effect.gen(function*() {
    yield* SessionIdRule.validate(sessionId)
    // A session whose workflow ended has no run to cancel.
    const status = yield* statusOf(sessionId)
    if (status._tag !== "Unknown" && status._tag !== "Suspended") return
    const store = yield* Store
    // Kept unless the session waits idle or has finished (then it has no run in flight).
    if (!(yield* store.appendCancel(sessionId, reason))) return
    // The calls waiting for approval now are denied with it; one that asks later finds the cancel in the inbox.
    const published = yield* store.events(sessionId, 0)
    const denial = Body.cancelDenialOf(StoreModule.cancelReason(reason))
    for (const { approvalId } of Sessions.waitingApprovals(published.map(({ event }) => event))) {
      const key = waitingKey(published, approvalId)
      if (key !== undefined) yield* decide(sessionId, key, denial, "cancel")
    }
    // a supervised run's plan or feedback waiting for the operator: the run ends `Cancelled` there
    for (const { key } of yield* store.questions(sessionId)) {
      yield* deliverAnswer(sessionId, key, { cancelled: StoreModule.cancelReason(reason) })
    }
  })

/**
 * The approval key (`Body.approvalKey`) of the call `approvalId` that was
 * asked for and not yet decided, if any (the latest). A sub-agent's call
 * comes in a `Nested` event (a grandchild's in one nested again), stamped
 * with the session's turn; the event inside is stamped with the sub-agent's
 * turn and carries the call's tool and arguments.
 */
const waitingKey = (published: ReadonlyArray<Published>, approvalId: string): string | undefined => {
  let key: string | undefined
  // The session's runs count their turns from 1 again after each handoff (their `AgentEnd` says `HandedOff`).
  let hop = 0
  for (const { event: outer } of published) {
    if (outer._tag === "AgentEnd" && outer.outcome?._tag === "HandedOff") hop++
    let event: AgentEvent.AgentEvent = outer
    while (event._tag === "Nested") event = event.event
    if (event._tag !== "ApprovalRequested" && event._tag !== "ApprovalResolved") continue
    if ((event.approvalId ?? event.toolCallId) !== approvalId) continue
    key = event._tag === "ApprovalRequested"
      ? Body.approvalKey(Body.turnKey(hop, outer.turn), {
        approvalId,
        turn: event.turn,
        toolName: event.toolName,
        params: event.params
      })
      : undefined
  }
  return key
}

/**
 * A published event: `id` identifies it within its session (the store keeps
 * the first publish of an id), `seq` orders the session's events.
 *
 * @since 0.1.0
 * @category models
 */
export type Published = StoreModule.Published

/**
 * The published events of a session whose `seq` is after `after` (all by default), in order.
 *
 * @since 0.1.0
 * @category events
 */
export const events = (
  sessionId: string,
  after = 0
): Effect.Effect<ReadonlyArray<Published>, StoreError | InvalidSessionId, Store> =>
  Effect.gen(function*() {
    yield* SessionIdRule.validate(sessionId)
    const store = yield* Store
    return yield* store.events(sessionId, after)
  })

/**
 * The sessions that are suspended: waiting (for an approval, a follow-up) or,
 * `failed`, stopped by a failure until they are resumed. A session that keeps
 * failing after resumes is one for a person to look at.
 *
 * @since 0.1.0
 * @category supervision
 */
export const suspended: Effect.Effect<
  ReadonlyArray<{ readonly sessionId: string; readonly failed: boolean }>,
  StoreError,
  Store | WorkflowEngine.WorkflowEngine
> = Effect.gen(function*() {
  const store = yield* Store
  const found: Array<{ readonly sessionId: string; readonly failed: boolean }> = []
  for (const session of yield* store.sessions) {
    // (an id that breaks the rule was never run: a store of an older version may hold one)
    if (session.status === "finished" || !SessionIdRule.isValid(session.sessionId)) continue
    const status = yield* statusOf(session.sessionId)
    if (status._tag === "Suspended") found.push({ sessionId: session.sessionId, failed: status.failed })
  }
  return found
})

/**
 * Makes `effect` again while it ends because the database is away (it
 * restarts, a connection drops), backing off from 200 ms to 5 s between
 * tries, for up to 5 minutes; then fails with `onGiveUp` of what the last
 * try met, in a line. `onWait` is told of the first, once (to say that the
 * program waits). A database that refuses (its credentials) is no wait: that
 * exit is the effect's, as any other. For a program that starts a runner or
 * a client while the database may be away (`effect-agent runner` and
 * `run --pg` do).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { DurableSession } from "effect-agent/session"
 *
 * const starting = (build: Effect.Effect<void>) =>
 *   build.pipe(DurableSession.waitingForTheDatabase({
 *     onWait: (detail) => console.error(`cannot reach the database (${detail}); trying again`),
 *     onGiveUp: (detail) => new Error(`cannot reach the database: ${detail}`)
 *   }))
 * ```
 *
 * @since 0.1.0
 * @category supervision
 */
export const waitingForTheDatabase = <E2>(options: {
  readonly onGiveUp: (detail: string) => E2
  readonly onWait?: ((detail: string) => void) | undefined
}): <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | E2, R> =>
  StorageFailure.waitingForTheDatabase({
    onGiveUp: (failure) => options.onGiveUp(StorageFailure.detailOf(failure)),
    onWait: (failure) => options.onWait?.(StorageFailure.detailOf(failure))
  })

/**
 * How long a session may stay `submitted` (recorded by its client, its
 * workflow not begun) before the supervisor takes its submit for lost and
 * makes it again (submitting again joins a workflow that did begin).
 */
const lostSubmitAfter = Duration.seconds(10)

/**
 * Submits again, once, the sessions whose submit was lost: recorded by a
 * client (with their payload) longer ago than {@link lostSubmitAfter}, their
 * workflow unknown to the engine. Answers their ids.
 */
const resubmitLost = Effect.gen(function*() {
  const store = yield* Store
  const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
  const submitted: Array<string> = []
  for (const session of yield* store.sessions) {
    if (session.status !== "submitted" || session.payload === undefined) continue
    if (now - session.updatedAt < Duration.toMillis(lostSubmitAfter) || !SessionIdRule.isValid(session.sessionId)) {
      continue
    }
    if ((yield* statusOf(session.sessionId))._tag !== "Unknown") continue
    const payload = yield* Schema.decodeEffect(PayloadJson)(session.payload).pipe(Effect.option)
    // A payload that does not decode (written by another version) is left for the operator: it is not guessed at.
    if (Option.isNone(payload) || payload.value.sessionId !== session.sessionId) continue
    yield* storageFailure("resubmit")(SessionWorkflow.execute(payload.value, { discard: true }))
    submitted.push(session.sessionId)
  }
  return submitted
})

/**
 * Resumes the sessions that suspended on a failure, and submits again those
 * whose submit was lost (their client died or the database went away
 * between recording a session and submitting it), once: answers the ids it
 * resumed or submitted. {@link supervise} runs it on a schedule.
 *
 * @since 0.1.0
 * @category supervision
 */
export const resumeSuspended: Effect.Effect<
  ReadonlyArray<string>,
  StoreError,
  Store | WorkflowEngine.WorkflowEngine
> = Effect.gen(function*() {
  const resumed: Array<string> = []
  for (const { failed, sessionId } of yield* suspended) {
    if (!failed) continue
    yield* resumeValid(sessionId)
    resumed.push(sessionId)
  }
  resumed.push(...yield* resubmitLost)
  return resumed
})

/**
 * Resumes suspended sessions, and submits again those whose submit was lost
 * (see {@link resumeSuspended}), every `every` (5 seconds by default) until
 * interrupted. A pass that fails, or dies (the database restarts under it:
 * the engine dies on a storage failure), is logged and retried with
 * exponential backoff (200 ms, up to 30 s between tries): the supervisor,
 * and a runner that runs it, outlive the database going away.
 *
 * @since 0.1.0
 * @category supervision
 */
export const supervise = (
  options: { readonly every?: Duration.Input | undefined } = {}
): Effect.Effect<never, never, Store | WorkflowEngine.WorkflowEngine> =>
  resumeSuspended.pipe(
    Effect.sandbox,
    Effect.tapError((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.void
        : Effect.logWarning("effect-agent: a pass of DurableSession.supervise failed; retrying", cause)
    ),
    Effect.retry({
      while: (cause) => !Cause.hasInterruptsOnly(cause),
      schedule: Schedule.min([Schedule.exponential("200 millis"), Schedule.spaced("30 seconds")])
    }),
    Effect.ignore,
    Effect.repeat(Schedule.spaced(options.every ?? "5 seconds")),
    Effect.andThen(Effect.never)
  )

/** Forgets a session whose id is valid (the callers skip the others: there is no invalid id to report). */
const forget = (store: Store["Service"], sessionId: string): Effect.Effect<void, StoreError> =>
  Effect.catchTag(store.forget(sessionId), "InvalidSessionId", () => Effect.void)

/**
 * Forgets what the store holds for finished sessions older than `retention`:
 * answers the ids. On the cluster, {@link reapCluster} clears the cluster's
 * own rows of those sessions too.
 *
 * @since 0.1.0
 * @category supervision
 */
export const reap = (retention: Duration.Input): Effect.Effect<ReadonlyArray<string>, StoreError, Store> =>
  Effect.gen(function*() {
    const store = yield* Store
    const cutoff = Date.now() - Duration.toMillis(Duration.fromInputUnsafe(retention))
    const reaped: Array<string> = []
    for (const session of yield* store.sessions) {
      if (session.status === "finished" && session.updatedAt <= cutoff && SessionIdRule.isValid(session.sessionId)) {
        yield* forget(store, session.sessionId)
        reaped.push(session.sessionId)
      }
    }
    return reaped
  })

/**
 * How long a finished execution may stay in a runner's memory (the engine
 * keeps an idle workflow entity 10 seconds): {@link reapCluster} clears the
 * rows of sessions finished longer ago than this, whatever the retention.
 */
const residentFor = Duration.minutes(1)

/** The addresses under which the cluster stores an execution's messages: its workflow's, its clock's. */
const addressesOf = (sharding: Sharding.Sharding["Service"], executionId: string) => {
  const entityId = EntityId.make(executionId)
  const group = Context.get(SessionWorkflow.annotations, ClusterSchema.ShardGroup)(entityId)
  const shardId = sharding.getShardId(entityId, group)
  return [`Workflow/${SessionWorkflow._tag}`, "Workflow/-/DurableClock"].map((type) =>
    EntityAddress.make({ entityType: EntityType.make(type), entityId, shardId })
  )
}

/**
 * {@link reap}, and the cluster's own rows too (effect 4.1 never deletes
 * them): for each session finished longer ago than `retention` (and than a
 * minute: a runner may hold a finished execution in memory a while), whose
 * run has its final reply, the messages and replies of its workflow and of
 * its durable clock (`MessageStorage.clearAddress`), then the store's rows.
 * Answers the ids. A reaped session is forgotten: starting its id again
 * starts a new session. Run it from any node of the cluster (a runner or a
 * client), e.g. on a schedule.
 *
 * @since 0.1.0
 * @category supervision
 */
export const reapCluster = (
  retention: Duration.Input
): Effect.Effect<
  ReadonlyArray<string>,
  StoreError,
  Store | WorkflowEngine.WorkflowEngine | MessageStorage.MessageStorage | Sharding.Sharding
> =>
  Effect.gen(function*() {
    const store = yield* Store
    const storage = yield* MessageStorage.MessageStorage
    const sharding = yield* Sharding.Sharding
    const age = Duration.max(Duration.fromInputUnsafe(retention), residentFor)
    const cutoff = Date.now() - Duration.toMillis(age)
    const reaped: Array<string> = []
    for (const session of yield* store.sessions) {
      if (session.status !== "finished" || session.updatedAt > cutoff) continue
      if (!SessionIdRule.isValid(session.sessionId)) continue
      // A run whose reply is not stored yet (it is finishing) keeps its rows.
      const status = yield* statusOf(session.sessionId)
      if (status._tag === "Unknown" || status._tag === "Suspended") continue
      const executionId = yield* executionIdOf(session.sessionId)
      for (const address of addressesOf(sharding, executionId)) {
        yield* storage.clearAddress(address).pipe(
          Effect.mapError((error) => new StoreError({ operation: "reapCluster", detail: error.message }))
        )
      }
      yield* forget(store, session.sessionId)
      reaped.push(session.sessionId)
    }
    return reaped
  })

/**
 * The schema of a session's payload.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Payload = Body.Payload

/**
 * The schema of a session's result.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Result = Body.Result

/**
 * @since 0.1.0
 * @category schemas
 */
export const Decision: Schema.Codec<Approvals.Decision, unknown> = Body.Decision
