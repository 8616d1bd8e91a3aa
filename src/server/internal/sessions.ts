/**
 * The server's sessions, on the `Sessions` service (`Sessions.layer` in the
 * server's scope, its checkpoints in the server's store, a supervised session
 * under one of the server's supervisors): the service runs them; the server
 * keeps their records and event logs (fed from `Sessions.watch`), applies
 * control commands, describes them, bounds them, and resumes the unfinished
 * ones when it starts.
 *
 * When the server stops, the runs are interrupted: each saves its checkpoint
 * and its record still says `running`, so the next server on the same store
 * resumes it (as it does after a crash, from the last checkpoint).
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import * as Stream from "effect/Stream"
import type { HttpApiError } from "effect/http-api"
import type * as Agent from "../../Agent.ts"
import * as AgentConfig from "../../AgentConfig.ts"
import type * as AgentEvent from "../../AgentEvent.ts"
import * as Approvals from "../../Approvals.ts"
import * as Control from "../../protocol/Control.ts"
import * as UntrustedConfig from "../../protocol/UntrustedConfig.ts"
import type * as Hooks from "../../Hooks.ts"
import * as Message from "../../Message.ts"
import type * as Output from "../../Output.ts"
import type * as SubAgent from "../../SubAgent.ts"
import * as CheckpointStore from "../../session/CheckpointStore.ts"
import * as SessionApi from "../../session/Sessions.ts"
import * as Steering from "../../Steering.ts"
import * as SupervisedSession from "../../supervisor/SupervisedSession.ts"
import * as SupervisorEvent from "../../supervisor/SupervisorEvent.ts"
import * as SupervisorOutcome from "../../supervisor/SupervisorOutcome.ts"
import * as EventLog from "./eventLog.ts"
import {
  badRequest,
  ControlRejected,
  QueueFull,
  SessionExists,
  SessionNotFound,
  TooManyRuns,
  TooManyStreams
} from "./problems.ts"
import type * as Store from "./store.ts"

/** A call waiting for a decision. */
export interface PendingApproval {
  readonly toolCallId: string
  /** What a decision names it by: unique across the run and its sub-agents (`Approvals.Request`). */
  readonly approvalId: string
  readonly toolName: string
  readonly params: unknown
  readonly reason?: string
}

/** A supervised session's plan waiting for a decision. */
export interface PendingPlan {
  readonly iteration: number
  readonly plan: string
}

/** A supervised session's feedback waiting for the operator before it goes to the worker. */
export interface PendingTurn {
  readonly turn: number
  readonly feedback: string
}

/** What the server tells about a session. */
export interface Info extends Omit<Store.Record, "status" | "config"> {
  readonly status: Store.Record["status"] | "waiting"
  readonly pendingApprovals: ReadonlyArray<PendingApproval>
  readonly pendingPlan?: PendingPlan
  readonly pendingTurn?: PendingTurn
  /** A supervised session's ending in the supervisor's words (`outcome` is its core form). */
  readonly supervisorOutcome?: SupervisorOutcome.SupervisorOutcome
  readonly agent?: string
}

/** What a control command did. */
export interface ControlResult {
  readonly sessionId: string
  readonly type: Control.Command["type"]
  /**
   * `applied`: done now (a cancel, a decision for a waiting call);
   * `queued`: kept until the run gets to it (a message); `restarted`: the
   * session was not running and a new run started with it.
   */
  readonly status: "applied" | "queued" | "restarted"
  /** The call a decision answered. */
  readonly toolCallId?: string
  readonly approvalId?: string
  /** The plan iteration a plan decision answered. */
  readonly iteration?: number
  /** The act turn whose feedback a turn decision answered. */
  readonly turn?: number
}

/**
 * What the server's owner sets of a supervised run (a client only names it):
 * `Supervisor.Options` without what the server gives each session (the task,
 * the worker's settings, the typed output, events, steering, checkpoints),
 * and the tools the plan phase may use besides the built-in readers.
 */
export interface Supervision<R> extends SupervisedSession.Supervision<R> {}

/** The largest typed answer a session's record keeps, as JSON in UTF-8: a larger one is told by its size. */
export const maxAnswerBytes = 256 * 1024


export interface Options<R> {
  readonly store: Store.Store
  /** The agent's name, in its runs' spans and the sessions' descriptions. */
  readonly name?: string | undefined
  readonly system?: string | undefined
  readonly config?: AgentConfig.Input | undefined
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /** A policy instead of decisions over HTTP. */
  readonly approvals?: Approvals.Service | undefined
  /** The supervised runs a client may ask for, by name. */
  readonly supervisors?: Readonly<Record<string, Supervision<R>>> | undefined
  /** The typed outputs a client may ask for, by name. */
  readonly outputs?: Readonly<Record<string, Schema.Codec<unknown, unknown>>> | undefined
  readonly outputRetries?: number | undefined
  readonly outputMode?: Output.Mode | undefined
  /** The agents a session may have been handed off to. */
  readonly agents?: ReadonlyArray<SubAgent.Definition<string, SubAgent.InputSchema, unknown>> | undefined
  /** Live events a subscriber may have unread before it is dropped. */
  readonly buffer: number
  /** Resume sessions that were running when the server last stopped. */
  readonly resume: boolean
  /** Runs at once: a request that would start one more is refused (`TooManyRuns`). */
  readonly maxRunning: number
  /** Events streams at once, in all and to one session (`TooManyStreams` past either). */
  readonly maxStreams: number
  readonly maxStreamsPerSession: number
}

export interface Sessions {
  readonly create: (input: {
    readonly task: string
    readonly id?: string | undefined
    readonly config?: unknown
    readonly supervisor?: string | undefined
    readonly output?: string | undefined
  }) => Effect.Effect<Info, SessionExists | TooManyRuns | HttpApiError.BadRequestProblem | Store.StorageError>
  readonly list: Effect.Effect<ReadonlyArray<Info>>
  readonly get: (id: string) => Effect.Effect<Info, SessionNotFound>
  /** A session's events; the stream counts as one of its clients until the scope (the request's) closes. */
  readonly events: (
    id: string,
    after: number,
    idleMs: number
  ) => Effect.Effect<
    Stream.Stream<EventLog.Item>,
    SessionNotFound | TooManyStreams | HttpApiError.BadRequestProblem | Store.StorageError,
    Scope.Scope
  >
  readonly control: (
    id: string,
    command: Control.Command
  ) => Effect.Effect<
    ControlResult,
    | SessionNotFound
    | ControlRejected
    | QueueFull
    | TooManyRuns
    | HttpApiError.BadRequestProblem
    | Store.StorageError
  >
  /**
   * Stops every run (each saves its checkpoint; its record stays `running`,
   * to be resumed by the next server) and ends every event stream.
   */
  readonly stop: Effect.Effect<void>
  /** Whether `stop` has begun. */
  readonly isStopping: () => boolean
}

interface Entry {
  record: Store.Record
  log: EventLog.EventLog | undefined
  /** A run of it is in flight: started by the server, or by messages left over at the end of the last run. */
  active: boolean
  /** The number (in the `Sessions` service) of the last of its events the server has handled. */
  seen: number
  /** Reads its events from the `Sessions` service into its log and record, from its first run on. */
  follower: Fiber.Fiber<void> | undefined
  /** The worker failure the run in flight announced (`WorkerFailed`): its ending says it only in words. */
  workerFailed: string | undefined
  /**
   * Held while the session's run is looked at and started: a check of `active` and the start of a new run with
   * a wait between them (opening the log, saving the record) would otherwise let two requests both find none.
   */
  readonly lock: Semaphore.Semaphore
  /** Its events streams now. */
  streams: number
}

const titleOf = (task: string): string => {
  const line = task.trim().split("\n", 1)[0] ?? ""
  return line.length > 200 ? `${line.slice(0, 199)}…` : line
}

/** An id a client sent, quoted, and cut to a length a problem's detail can show. */
const clip = (id: string): string => JSON.stringify(id.length > 48 ? `${id.slice(0, 47)}…` : id)

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** The fields of `checked` that `given` names (what an untrusted body set, once checked and clamped). */
const given = (input: unknown, checked: object): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  if (isRecord(input)) for (const key of Object.keys(input)) out[key] = Reflect.get(checked, key)
  return out
}

/** The limits a request may lower but never raise past the server's own, when the server sets them. */
const ceilings = ["maxTurns", "maxParallelTools", "maxToolCallsPerTurn", "toolTimeout"] as const
const budgetCeilings = ["tokens", "inputTokens", "outputTokens", "costUsd", "wallClock"] as const

/** The lower of a request's limit and the server's (`null` is no limit). */
const lower = (asked: number | null, server: number | null): number | null =>
  server === null ? asked : asked === null ? server : Math.min(asked, server)

/** `config` with each limit the server sets kept at or under the server's. */
const capped = (config: AgentConfig.AgentConfig, server: AgentConfig.AgentConfig): AgentConfig.Input => {
  const limits = Object.fromEntries(ceilings.map((key) => [key, lower(config[key], server[key])]))
  const budgets = Object.fromEntries(
    budgetCeilings.map((key) => [key, lower(config.budgets[key], server.budgets[key])])
  )
  const maxTurns = lower(config.maxTurns, server.maxTurns)
  // A lowered turn cap takes its own default grace window, unless the config's was chosen and fits under it.
  const graceKept = maxTurns === config.maxTurns || AgentConfig.graceCarriesOver(config, maxTurns)
  return { ...config, ...limits, ...(graceKept ? {} : { graceTurns: undefined }), budgets }
}

/**
 * A config from an untrusted body on top of the server's defaults: each
 * setting the body gives goes through `UntrustedConfig.decode` (rejected
 * or clamped), and replaces the default; the rest are the server's. The
 * server's limits (turns, parallel tools, calls per turn, tool timeout,
 * budgets) are ceilings: a request may lower them, never raise them. A turn
 * cap under the default grace window drops the window (the cap's own default
 * applies).
 */
const sessionConfig = (defaults: AgentConfig.Input | undefined, input: unknown) =>
  Effect.gen(function*() {
    if (input === undefined) return yield* AgentConfig.make(defaults)
    const untrusted = yield* UntrustedConfig.decode(input)
    const { budgets: _budgets, ...chosen } = given(input, untrusted)
    const budgets = given(isRecord(input) ? input.budgets : undefined, untrusted.budgets)
    const base = defaults ?? {}
    const cap = chosen.maxTurns
    const graceFits = typeof cap !== "number" || base.graceTurns === undefined || base.graceTurns < cap
    const merged = yield* AgentConfig.make({
      ...base,
      ...(graceFits ? {} : { graceTurns: undefined }),
      ...chosen,
      budgets: { ...base.budgets, ...budgets }
    })
    return yield* AgentConfig.make(capped(merged, yield* AgentConfig.make(defaults)))
  })

/** How a run ended, as the session's record keeps it. */
type Ending = Partial<Store.Record>

/** Whether an event is one of a supervised run's own (`SupervisorEvent`). */
const isSupervisorEvent = (event: AgentEvent.AgentEvent): boolean =>
  event._tag === "Custom" && event.kind === SupervisorEvent.kind

const encoder = new TextEncoder()

/** A typed answer as the record keeps it: whole when it fits {@link maxAnswerBytes}, else its size. */
const answerRecord = (answer: unknown): { readonly value?: unknown; readonly bytes?: number } => {
  if (answer === undefined) return {}
  const bytes = encoder.encode(JSON.stringify(answer)).length
  return bytes <= maxAnswerBytes ? { value: answer } : { bytes }
}

/** The names a table has, for a message: quoted, in order. */
const namesOf = (table: Readonly<Record<string, unknown>> | undefined): Array<string> =>
  Object.keys(table ?? {}).sort().map((name) => JSON.stringify(name))

/**
 * The ending of a supervised session that a resumed run ends with again at once (`Rejected`: a rejected plan
 * stays rejected, see `Supervisor.Checkpoint.outcome`), so that a message for it would never be delivered; else
 * `undefined`. (A session that ended after an act turn goes on with a follow-up: a new act round.)
 */
const settled = (record: Store.Record): string | undefined => {
  if (record.supervisor === undefined || record.status !== "finished" || record.outcome === undefined) return undefined
  const tag = SupervisorOutcome.fromOutcome(record.outcome)._tag
  return tag === "Rejected" ? tag : undefined
}

/** What a failed run failed with, in words. */
const failureOf = (cause: Cause.Cause<{ readonly _tag: string; readonly message: string }>) => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) return { _tag: error.value._tag, message: error.value.message }
  const defect = cause.reasons.find(Cause.isDieReason)
  return { _tag: "Defect", message: defect === undefined ? Cause.pretty(cause) : String(defect.defect) }
}

/**
 * The server's sessions, on the `Sessions` service (`Sessions.layer`, in the server's scope, its checkpoints
 * in the server's store): the service runs them (their steering, their approvals, a supervised session under
 * the server's supervisor, the run that messages left over at a run's end start); the server keeps their
 * records and event logs, fed from `Sessions.watch`, and its own bounds.
 */
export const make = <R>(
  options: Options<R>
): Effect.Effect<Sessions, Store.StorageError, Scope.Scope | Agent.Requirements | R> =>
  Effect.gen(function*() {
    const scope = yield* Scope.Scope
    const { store } = options
    const entries = new Map<string, Entry>()
    const reserving = new Set<string>()
    let stopping = false
    /** Runs started and not ended; runs admitted and not started yet; events streams open. */
    let runCount = 0
    let startCount = 0
    let streamCount = 0

    // The runs: the one session API in this process, on the server's checkpoints. The server's policy decides
    // the calls when it has one; else each session's calls wait for a decision over HTTP (an `Approvals` the
    // application's layers give is not the server's: it is left out, as before).
    const services = Context.omit(Approvals.Approvals)(yield* Effect.context<Agent.Requirements | R>())
    const given = Context.add(services, CheckpointStore.CheckpointStore, store.checkpoints)
    const withPolicy = options.approvals === undefined ? given : Context.add(given, Approvals.Approvals, options.approvals)
    const supervisors: Record<string, SessionApi.Supervisor<R>> = {}
    for (const [name, supervision] of Object.entries(options.supervisors ?? {})) {
      supervisors[name] = SupervisedSession.supervisor(supervision)
    }
    const layer = SessionApi.layer<R>({
      name: options.name,
      plugins: options.plugins,
      outputs: options.outputs,
      outputRetries: options.outputRetries,
      outputMode: options.outputMode,
      agents: options.agents,
      supervisors,
      // The server reads every event at once into the session's own log (its follower, which the service waits
      // for when it lags): the service keeps little beside it, and forgets the sessions whose runs have ended
      // (the server's records and logs are what describe them; a message takes one up again from its checkpoint).
      maxEvents: 128,
      maxSessions: Math.max(8, options.maxRunning)
    })
    const api = Context.get(
      yield* Layer.buildWithScope(Layer.provide(layer, Layer.succeedContext(withPolicy)), scope),
      SessionApi.Sessions
    )

    /**
     * Runs `start` (which starts a run) if one more run fits under `maxRunning`, counting it as starting
     * meanwhile: the check and the count are one synchronous step, so requests at once never pass it together.
     * A run that ends and starts the next one with what came too late for it is not admitted again: the next
     * takes its place.
     */
    const admitted = <A, E, R>(start: Effect.Effect<A, E, R>): Effect.Effect<A, E | TooManyRuns, R> =>
      Effect.suspend((): Effect.Effect<A, E | TooManyRuns, R> => {
        if (runCount + startCount >= options.maxRunning) {
          return Effect.fail(
            new TooManyRuns({
              limit: options.maxRunning,
              detail: `the server runs ${options.maxRunning} sessions at once already: retry once one has ended`
            })
          )
        }
        startCount++
        return Effect.ensuring(start, Effect.sync(() => void startCount--))
      })

    const logOf = (entry: Entry) =>
      Effect.suspend(() => {
        if (entry.log !== undefined) return Effect.succeed(entry.log)
        return Effect.map(store.openLog(entry.record.id), (storage) => {
          const log = EventLog.make(storage, {
            buffer: options.buffer,
            onWriteFailure: (event, reason) =>
              Effect.runFork(Effect.logWarning(
                `agent server: session ${entry.record.id}: an ${event._tag} event was not logged: ${reason}`
              ))
          })
          entry.log = log
          return log
        })
      })

    const save = (entry: Entry, changes: Partial<Store.Record>) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        entry.record = { ...entry.record, ...changes, updatedAt: now }
        return store.save(entry.record)
      })

    const saved = (entry: Entry, changes: Partial<Store.Record>) =>
      Effect.catch(save(entry, changes), (error) =>
        Effect.logWarning(`agent server: session ${entry.record.id}: ${error.message}`))

    /** What waits for a decision in a session whose run is in flight (nothing when it is not). */
    const pendingOf = (entry: Entry) =>
      entry.active && entry.record.status === "running"
        ? Effect.orElseSucceed(api.pending(entry.record.id), (): SessionApi.Pending => ({ approvals: [] }))
        : Effect.succeed<SessionApi.Pending>({ approvals: [] })

    const info = (entry: Entry): Effect.Effect<Info> =>
      Effect.gen(function*() {
        const { approvals: pending, plan, turn } = yield* pendingOf(entry)
        const { config: _config, ...record } = entry.record
        const waiting = pending.length > 0 || plan !== undefined || turn !== undefined
        return {
          ...record,
          status: waiting ? "waiting" : record.status,
          pendingApprovals: pending.map((request) => ({
            toolCallId: request.toolCallId,
            approvalId: request.approvalId,
            toolName: request.toolName,
            params: request.params,
            ...(request.reason === undefined ? {} : { reason: request.reason })
          })),
          ...(plan === undefined ? {} : { pendingPlan: { iteration: plan.iteration, plan: plan.plan } }),
          ...(turn === undefined ? {} : { pendingTurn: { turn: turn.turn, feedback: turn.feedback } }),
          ...(record.supervisor === undefined || record.outcome === undefined
            ? {}
            : { supervisorOutcome: SupervisorOutcome.fromOutcome(record.outcome) }),
          ...(options.name === undefined ? {} : { agent: options.name })
        }
      })

    /** The record of a run that ended as `end` says (its result, or its error or defect in words). */
    const endingOf = (entry: Entry, end: AgentEvent.Of<"AgentEnd">): Ending => {
      const supervised = entry.record.supervisor !== undefined
      if (end.result !== undefined) {
        const { outcome, state } = end.result
        const output = entry.record.output
        return {
          status: "finished",
          outcome,
          // a supervised session counts its act turns (its own events carry them), not its worker's
          ...(supervised ? {} : { turns: state.turn }),
          usage: end.result.usage,
          ...(output === undefined ? {} : { output: { name: output.name, ...answerRecord(state.output?.value) } })
        }
      }
      if (end.error !== undefined) return { status: "failed", error: { _tag: end.error._tag, message: end.error.message } }
      if (entry.workerFailed !== undefined) {
        return { status: "failed", error: { _tag: "WorkerError", message: entry.workerFailed } }
      }
      return { status: "failed", error: { _tag: "Defect", message: end.defect ?? "the run died" } }
    }

    /** A run has ended (its ending handled, or none came): the server's count, its log, its record. */
    const ended = (entry: Entry, ending: Ending | undefined) =>
      Effect.gen(function*() {
        if (!entry.active) return
        entry.active = false
        runCount--
        entry.workerFailed = undefined
        // Described as ended before its events stream ends (a client that reads it then finds it so); saved next.
        if (ending !== undefined) entry.record = { ...entry.record, ...ending }
        entry.log?.close()
        // Its log is opened again when it is read or written: an ended session holds no descriptor.
        entry.log?.release()
        entry.log = undefined
        if (ending !== undefined) yield* saved(entry, ending)
      })

    /** One of the session's events: into its log and its record's figures; a run's start and its ending. */
    const handle = (entry: Entry) => ({ seq, event }: SessionApi.Published) =>
      Effect.gen(function*() {
        entry.seen = seq
        if (event._tag === "AgentStart" && !entry.active) {
          // started by messages left over at the end of the last run: not admitted, it takes that run's place
          entry.active = true
          runCount++
          const { error: _error, outcome: _outcome, output, ...rest } = entry.record
          entry.record = output === undefined ? rest : { ...rest, output: { name: output.name } }
          if (entry.record.status !== "running") yield* saved(entry, { status: "running" })
        }
        const log = yield* Effect.orElseSucceed(logOf(entry), () => undefined)
        if (event._tag === "AgentStart") log?.open()
        log?.append(event)
        const supervised = entry.record.supervisor !== undefined
        if (event._tag === "BudgetSnapshot") {
          const { turns, usage } = event.figures
          entry.record = supervised ? { ...entry.record, usage } : { ...entry.record, turns, usage }
        } else if (supervised && isSupervisorEvent(event)) {
          entry.record = { ...entry.record, turns: event.turn }
          const own = SupervisorEvent.of(event)
          if (own?._tag === "WorkerFailed") entry.workerFailed = own.message
        }
        if (!SessionApi.isEnding(event)) return
        // Interrupted as the server stops: the record keeps `running`, so the next server resumes it.
        if (stopping) {
          log?.close()
          return
        }
        yield* ended(entry, endingOf(entry, event))
      })

    /**
     * The events that change the record (a run's start by leftover messages, an ending) are handled under the
     * session's lock, as a message's start of a run is: two saves of a record at once would race in the store.
     */
    const handleLocked = (entry: Entry) => (published: SessionApi.Published) => {
      const { event } = published
      const changes = SessionApi.isEnding(event) || (event._tag === "AgentStart" && !entry.active)
      return changes ? entry.lock.withPermit(handle(entry)(published)) : handle(entry)(published)
    }

    /** Follows the session's events from the service into the server's log and record, once started. */
    const follow = (entry: Entry) =>
      Effect.suspend(() => {
        if (entry.follower !== undefined) return Effect.void
        return Effect.map(
          Effect.forkIn(
            api.watch(entry.record.id, entry.seen).pipe(
              Stream.runForEach(handleLocked(entry)),
              Effect.catch((error) =>
                Effect.logWarning(`agent server: session ${entry.record.id}: its events stopped: ${error.message}`)
              )
            ),
            scope
          ),
          (fiber) => void (entry.follower = fiber)
        )
      })

    /**
     * Starts a run of the session with `begin` (`start` on the service, with what it goes on with) in the
     * server's scope, its log open to subscribers at once. A run that publishes no ending (it failed before it
     * began, or answered a stored result) is recorded as it ended. Called with the session's lock held.
     */
    const launch = (entry: Entry, begin: SessionApi.StartOptions) =>
      Effect.gen(function*() {
        if (stopping) return
        const log = yield* logOf(entry)
        // Saved before the run is the session's: a store that fails leaves it without a run, not with one that
        // never started.
        if (entry.record.status !== "running") yield* save(entry, { status: "running" })
        entry.active = true
        runCount++
        log.open()
        const id = entry.record.id
        const mark = yield* Effect.orElseSucceed(Effect.map(api.events(id), (events) => events.at(-1)?.seq ?? 0), () => 0)
        const started = yield* Effect.exit(api.start(begin))
        if (Exit.isFailure(started)) return yield* ended(entry, { status: "failed", error: failureOf(started.cause) })
        yield* follow(entry)
        yield* Effect.forkIn(
          Effect.gen(function*() {
            const exit = yield* Effect.exit(api.result(id, mark))
            if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) return
            // an ending was published: the follower records it
            const published = yield* Effect.orElseSucceed(api.events(id, mark), () => [])
            if (published.some(({ event }) => SessionApi.isEnding(event))) return
            yield* entry.lock.withPermit(ended(
              entry,
              Exit.isSuccess(exit)
                ? { status: "finished", outcome: exit.value.outcome, usage: exit.value.usage }
                : { status: "failed", error: failureOf(exit.cause) }
            ))
          }),
          scope
        )
      })

    /** What the service starts a session with: its record's, and what it goes on with. */
    const startOf = (
      record: Store.Record,
      prompt: SessionApi.StartOptions["prompt"],
      more: Partial<SessionApi.StartOptions> = {}
    ): SessionApi.StartOptions => ({
      sessionId: record.id,
      prompt,
      system: options.system,
      // A supervised run's checkpoint keeps no config: the record does, for the run to resume with.
      config: record.config,
      output: record.output?.name,
      supervisor: record.supervisor,
      ...more
    })

    const notFound = (sessionId: string) => new SessionNotFound({ sessionId, detail: `no session ${sessionId}` })
    const rejected = (sessionId: string, detail: string) => new ControlRejected({ sessionId, detail })
    const exists = (sessionId: string) =>
      new SessionExists({ sessionId, detail: `session ${sessionId} exists already` })

    const find = (id: string) =>
      Effect.suspend(() => {
        const entry = entries.get(id)
        return entry === undefined ? Effect.fail(notFound(id)) : Effect.succeed(entry)
      })

    /** A session's entry; listed (in `entries`) at once unless `listed` is false. */
    const newEntry = (record: Store.Record, listed = true) =>
      Effect.sync(() => {
        const entry: Entry = {
          record,
          log: undefined,
          active: false,
          seen: 0,
          follower: undefined,
          workerFailed: undefined,
          lock: Semaphore.makeUnsafe(1),
          streams: 0
        }
        if (listed) entries.set(record.id, entry)
        return entry
      })

    // -------------------------------------------------------------------------
    // Starting: the sessions the store holds; those that were running resume.
    // -------------------------------------------------------------------------

    /**
     * How far a session's checkpoint says its run got: its ending when it had one (saved before the server
     * could record it), else `undefined` (it goes on); or why it cannot be read.
     */
    const progressOf = (record: Store.Record) =>
      record.supervisor === undefined
        ? Effect.map(store.checkpoints.load(record.id), ({ finished, state }) =>
          finished === undefined
            ? undefined
            : { outcome: finished.outcome, turns: state.turn, usage: state.usage })
        : Effect.map(
          SupervisedSession.load(record.id).pipe(
            Effect.provideService(CheckpointStore.CheckpointStore, store.checkpoints)
          ),
          ({ outcome, turns, usage }) =>
            outcome === undefined ? undefined : { outcome: SupervisorOutcome.toOutcome(outcome), turns, usage }
        )

    const recover = (entry: Entry) =>
      Effect.gen(function*() {
        const progress = yield* Effect.result(progressOf(entry.record))
        if (progress._tag === "Failure") {
          const { _tag, message } = progress.failure
          return yield* save(entry, { status: "failed", error: { _tag, message } })
        }
        if (progress.success !== undefined) return yield* save(entry, { status: "finished", ...progress.success })
        yield* entry.lock.withPermit(launch(entry, startOf(entry.record, [])))
      }).pipe(
        Effect.catch((error) =>
          Effect.logWarning(`agent server: session ${entry.record.id} not resumed: ${error.message}`)
        )
      )

    for (const record of yield* store.records) {
      const entry = yield* newEntry(record)
      if (options.resume && record.status === "running") yield* recover(entry)
    }

    // -------------------------------------------------------------------------
    // The operations
    // -------------------------------------------------------------------------

    /** A name a client gives, checked against the server's own table: a 400 naming the known ones otherwise. */
    const known = (
      field: "supervisor" | "output",
      name: string | undefined,
      table: Readonly<Record<string, unknown>> | undefined
    ) =>
      Effect.suspend(() => {
        if (name === undefined || (table !== undefined && Object.hasOwn(table, name))) return Effect.void
        const names = namesOf(table)
        const what = field === "supervisor" ? "supervisor" : "typed output"
        return Effect.fail(badRequest(
          ["payload", field],
          names.length === 0 ? `this server has no ${what}s` : `must be one of ${names.join(", ")}`,
          names.length === 0
            ? `this server has no ${what}s: ${clip(name)} is not one`
            : `no ${what} is named ${clip(name)}: this server has ${names.join(", ")}`
        ))
      })

    const create: Sessions["create"] = (input) =>
      Effect.gen(function*() {
        const config = yield* Effect.mapError(
          sessionConfig(options.config, input.config),
          (error) => badRequest(["payload", "config", ...error.field.split(".")], error.rule, error.message)
        )
        yield* known("supervisor", input.supervisor, options.supervisors)
        yield* known("output", input.output, options.outputs)
        const id = input.id ?? globalThis.crypto.randomUUID()
        // Taken at once (two requests for one id race): released when this one fails.
        const reserved = yield* Effect.sync(() => {
          if (entries.has(id) || reserving.has(id)) return false
          reserving.add(id)
          return true
        })
        if (!reserved) return yield* exists(id)
        return yield* admitted(start(id, input.task, config, input.supervisor, input.output)).pipe(
          Effect.ensuring(Effect.sync(() => reserving.delete(id)))
        )
      })

    const start = (
      id: string,
      task: string,
      config: AgentConfig.AgentConfig,
      supervisor: string | undefined,
      output: string | undefined
    ) =>
      Effect.gen(function*() {
        const existing = yield* Effect.result(store.checkpoints.load(id))
        if (existing._tag === "Success" || existing.failure._tag !== "CheckpointMissing") return yield* exists(id)
        const now = yield* Clock.currentTimeMillis
        // Listed once its run is started (its id is reserved meanwhile): a message for it before then would find
        // no run, and start one of its own.
        const entry = yield* newEntry({
          id,
          title: titleOf(task),
          status: "running",
          createdAt: now,
          updatedAt: now,
          turns: 0,
          usage: Message.emptyUsage,
          ...(supervisor === undefined ? {} : { supervisor, config }),
          ...(output === undefined ? {} : { output: { name: output } })
        }, false)
        yield* store.save(entry.record)
        yield* entry.lock.withPermit(launch(entry, startOf(entry.record, task, { config }))).pipe(
          Effect.ensuring(Effect.sync(() => entries.set(id, entry)))
        )
        return yield* info(entry)
      })

    /**
     * A decision answers the call waiting now under the `approvalId` it names, and nothing else: without an id
     * (several clients may decide: the oldest waiting may not be the call its sender saw) it is a 400; for no
     * waiting call (not asked yet, answered already, or no such id) a 409, and nothing is kept.
     */
    const decide = (entry: Entry, command: Extract<Control.Command, { readonly type: "approve" | "deny" }>) =>
      Effect.gen(function*() {
        const sessionId = entry.record.id
        if (options.approvals !== undefined) {
          return yield* rejected(sessionId, "this server decides approvals by its own policy")
        }
        const id = command.id
        if (id === undefined) {
          return yield* badRequest(
            ["payload", "id"],
            "is required",
            `${command.type} names the call it answers: give the "approvalId" the session's description lists`
          )
        }
        const waiting = (yield* pendingOf(entry)).approvals.find((request) => request.approvalId === id)
        const decision = command.type === "approve"
          ? Approvals.approved
          : Approvals.denied(command.reason ?? "denied over HTTP")
        const answered = waiting !== undefined &&
          (yield* Effect.orElseSucceed(api.approve(sessionId, id, decision), () => false))
        if (waiting === undefined || !answered) {
          return yield* rejected(sessionId, `no call waits for approval as ${clip(id)}`)
        }
        const result: ControlResult = {
          sessionId,
          type: command.type,
          status: "applied",
          toolCallId: waiting.toolCallId,
          approvalId: id
        }
        return result
      })

    const control: Sessions["control"] = (id, command) =>
      Effect.gen(function*() {
        const entry = yield* find(id)
        const result = (status: ControlResult["status"]): ControlResult => ({
          sessionId: id,
          type: command.type,
          status
        })
        if (command.type === "approve" || command.type === "deny") return yield* decide(entry, command)
        if (command.type === "cancel") {
          if (!entry.active) return yield* rejected(id, "the session is not running")
          yield* Effect.mapError(
            api.cancel(id, command.reason ?? "cancelled over HTTP"),
            (error) => rejected(id, `cancel: ${error.message}`)
          )
          return result("applied")
        }
        if (command.type === "interrupt") {
          // The command's: it stops its own process, leaving the session to resume. A server leaves its runs to
          // resume when it stops; over HTTP a run is ended by cancel.
          return yield* rejected(id, "interrupt: not taken over HTTP (cancel ends a run)")
        }
        if (command.type !== "steer" && command.type !== "follow_up") return yield* decideSupervised(entry, command)
        const refused = messagesRefused(entry)
        if (refused !== undefined) return yield* rejected(id, `${command.type}: ${refused}`)
        return yield* entry.lock.withPermit(message(entry, command.type, command.text))
      })

    /** Why a session takes no steering or follow-ups, when it does not: its supervisor's worker is not our loop. */
    const messagesRefused = (entry: Entry): string | undefined => {
      const name = entry.record.supervisor
      if (name === undefined) return undefined
      const worker = options.supervisors !== undefined && Object.hasOwn(options.supervisors, name)
        ? options.supervisors[name]?.worker
        : undefined
      return worker === undefined || ("_tag" in worker && worker._tag === "AgentWorker")
        ? undefined
        : `the ${worker.name} worker takes no steering or follow-ups, only cancel`
    }

    /**
     * A decision on a supervised session's plan or feedback answers the question it names (the plan `iteration`,
     * the act `turn`: without one it is a 400, as an approval without its id is, since several clients may decide)
     * if that question waits now (`applied`); otherwise (not asked yet, answered already, revised since, a session
     * that is not supervised or not running) a 409, and nothing is kept.
     */
    const decideSupervised = (entry: Entry, command: Control.Decision) =>
      entry.lock.withPermit(Effect.gen(function*() {
        const sessionId = entry.record.id
        const type = command.type
        const answer = Control.planOrTurnDecision(command)
        const named = answer._tag === "plan"
          ? "iteration" in command ? command.iteration : undefined
          : "turn" in command
          ? command.turn
          : undefined
        if (named === undefined) {
          const field = answer._tag === "plan" ? "iteration" : "turn"
          return yield* badRequest(
            ["payload", field],
            "is required",
            `${type} names the ${answer._tag === "plan" ? "plan iteration" : "act turn"} it answers: give the ` +
              `"${field}" the session's description lists (${answer._tag === "plan" ? "pendingPlan" : "pendingTurn"})`
          )
        }
        if (entry.record.supervisor === undefined) return yield* rejected(sessionId, `${type}: the session is not supervised`)
        if (options.approvals !== undefined) {
          return yield* rejected(sessionId, `${type}: this server decides by its own policy`)
        }
        const { plan, turn } = yield* pendingOf(entry)
        const mismatch = Control.decisionMismatch(command, { plan, turn })
        if (mismatch !== undefined) return yield* rejected(sessionId, mismatch)
        const answered = yield* Effect.orElseSucceed(
          answer._tag === "plan"
            ? api.decidePlan(sessionId, named, answer.decision)
            : api.decideTurn(sessionId, named, answer.decision),
          () => false
        )
        if (!answered) {
          return yield* rejected(sessionId, `${type}: no ${answer._tag === "plan" ? "plan" : "feedback"} waits for a decision`)
        }
        const result: ControlResult = answer._tag === "plan"
          ? { sessionId, type, status: "applied", iteration: named }
          : { sessionId, type, status: "applied", turn: named }
        return result
      }))

    /**
     * A message for a session, under its lock: into its run's queue, or a new run with it when none runs (the
     * lock makes the check and the start one step: two messages never both start a run).
     */
    const message = (entry: Entry, type: "steer" | "follow_up", text: string) =>
      Effect.gen(function*() {
        const id = entry.record.id
        const result = (status: ControlResult["status"]): ControlResult => ({ sessionId: id, type, status })
        const full = (error: Steering.SteeringFull) =>
          new QueueFull({ sessionId: id, queued: error.queued, bytes: error.bytes, detail: error.message })
        const refusedBy = (error: Exclude<SessionApi.SessionsError, Steering.SteeringFull>) =>
          rejected(id, `${type}: ${error.message}`)
        if (entry.active) {
          // Into the run's queue, bounded; a run that is ending leaves it to the next run, which its end starts.
          yield* (type === "steer" ? api.steer(id, text) : api.followUp(id, text)).pipe(
            Effect.mapError((error) => error._tag === "SteeringFull" ? full(error) : refusedBy(error))
          )
          return result("queued")
        }
        if (type === "steer" && entry.record.status === "finished") {
          return yield* rejected(id, "the session has finished: send a follow_up to go on")
        }
        const over = settled(entry.record)
        if (over !== undefined) {
          return yield* rejected(
            id,
            `${type}: the supervised session ended ${over}, and resuming it ends it so again: the message would ` +
              "never reach its worker (start a new session)"
          )
        }
        // a message that does not fit a run's queue starts nothing
        yield* Effect.mapError(Effect.flatMap(Steering.make(), (probe) => probe.followUp(text)), full)
        // The last run's ending (and answer) no longer describe it.
        const { error: _error, outcome: _outcome, output, ...rest } = entry.record
        entry.record = output === undefined ? rest : { ...rest, output: { name: output.name } }
        // A steer to a session that has not finished (it failed, or was never resumed) reaches the resumed run
        // before its next model call; anything else goes on as a follow-up.
        const finished = entry.record.status === "finished"
        yield* admitted(launch(entry, startOf(entry.record, [], type === "steer" && !finished ? { steer: text } : { followUp: text })))
        return result("restarted")
      })

    /** Counts a client of the session's events until the scope closes, if one more fits; else `TooManyStreams`. */
    const watching = (entry: Entry) =>
      Effect.acquireRelease(
        Effect.suspend(() => {
          const perSession = entry.streams >= options.maxStreamsPerSession
          if (perSession || streamCount >= options.maxStreams) {
            const limit = perSession ? options.maxStreamsPerSession : options.maxStreams
            return Effect.fail(
              new TooManyStreams({
                sessionId: entry.record.id,
                limit,
                detail: perSession
                  ? `${limit} clients follow session ${entry.record.id} already: reconnect once one has gone`
                  : `${limit} clients follow the server's sessions already: reconnect once one has gone`
              })
            )
          }
          entry.streams++
          streamCount++
          return Effect.void
        }),
        () =>
          Effect.sync(() => {
            entry.streams--
            streamCount--
          })
      )

    const events: Sessions["events"] = (id, after, idleMs) =>
      Effect.gen(function*() {
        const entry = yield* find(id)
        yield* watching(entry)
        const log = yield* logOf(entry)
        return yield* Effect.mapError(log.subscribe(after, idleMs), (count) =>
          badRequest(
            ["headers", "last-event-id"],
            `must be at most ${count - 1}`,
            `Last-Event-ID ${after} is past the session's last event (${count - 1})`
          ))
      })

    /** Interrupts every run (each saves its checkpoint; the record stays `running`), then the followers. */
    const stop = Effect.suspend(() => {
      stopping = true
      const running = Array.from(entries.values()).filter((entry) => entry.active)
      return Effect.forEach(running, (entry) => Effect.ignore(api.interrupt(entry.record.id)), {
        concurrency: "unbounded",
        discard: true
      })
    }).pipe(
      Effect.andThen(Effect.suspend(() => {
        const followers: Array<Fiber.Fiber<void>> = []
        for (const entry of entries.values()) if (entry.follower !== undefined) followers.push(entry.follower)
        return Fiber.interruptAll(followers)
      })),
      Effect.andThen(Effect.sync(() => entries.forEach((entry) => entry.log?.release())))
    )
    yield* Effect.addFinalizer(() => stop)

    return {
      create,
      list: Effect.suspend(() =>
        Effect.forEach(
          Array.from(entries.values()).sort((a, b) => b.record.createdAt - a.record.createdAt),
          info
        )
      ),
      get: (id) => Effect.flatMap(find(id), info),
      events,
      control,
      stop,
      isStopping: () => stopping
    }
  })
