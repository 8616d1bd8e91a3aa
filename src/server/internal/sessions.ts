/**
 * The server's sessions: starting them as durable sessions (a `Session`, or
 * a `SupervisedSession` under one of the server's supervisors), following
 * their events into their logs, applying control commands, describing them,
 * and resuming the unfinished ones when the server starts.
 *
 * A session's run is a fiber in the server's scope. When the server stops,
 * the runs are interrupted: each saves its checkpoint and its record still
 * says `running`, so the next server on the same store resumes it (as it
 * does after a crash, from the last checkpoint).
 *
 * @internal
 */
import { Cause, Clock, Context, Effect, Exit, Fiber, Option, Schema, Scope, Semaphore, type Stream } from "effect"
import type { HttpApiError } from "effect/http-api"
import type * as Agent from "../../Agent.ts"
import * as AgentConfig from "../../AgentConfig.ts"
import { type AgentError, ConfigError } from "../../AgentError.ts"
import type * as AgentEvent from "../../AgentEvent.ts"
import * as Approvals from "../../Approvals.ts"
import * as Control from "../../protocol/Control.ts"
import * as UntrustedConfig from "../../protocol/UntrustedConfig.ts"
import type * as Hooks from "../../Hooks.ts"
import * as Message from "../../Message.ts"
import type * as Outcome from "../../Outcome.ts"
import type * as Output from "../../Output.ts"
import type * as SubAgent from "../../SubAgent.ts"
import * as CheckpointStore from "../../session/CheckpointStore.ts"
import * as Session from "../../session/Session.ts"
import * as Steering from "../../Steering.ts"
import * as SupervisedSession from "../../supervisor/SupervisedSession.ts"
import * as SupervisorEvent from "../../supervisor/SupervisorEvent.ts"
import * as SupervisorOutcome from "../../supervisor/SupervisorOutcome.ts"
import type * as Worker from "../../supervisor/Worker.ts"
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

interface Run {
  readonly steering: Steering.Service
  fiber: Fiber.Fiber<void> | undefined
  /** Its `AgentEnd` has been seen: messages given now go to the next run. */
  ended: boolean
  cancelled: boolean
}

interface Entry {
  record: Store.Record
  log: EventLog.EventLog | undefined
  readonly approvals: Approvals.Interactive
  run: Run | undefined
  /**
   * Held while the session's run is looked at and changed (started, queued to, ended): one run at a time,
   * whatever the interleaving of requests and of a run's end. A check of `run` and the start of a new one with
   * a wait between them (opening the log, saving the record) would otherwise let two requests both find no run.
   */
  readonly lock: Semaphore.Semaphore
  /** Its events streams now. */
  streams: number
}

/** A message for a run, of its kind. */
interface Queued {
  readonly kind: "steer" | "followUp"
  readonly message: Message.Message
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
  // A lowered turn cap may leave no room for the grace window: the cap's own default window applies then.
  const graceFits = maxTurns === null || config.graceTurns < maxTurns
  return { ...config, ...limits, ...(graceFits ? {} : { graceTurns: undefined }), budgets }
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

/** Why a run could not go on: the run's errors, the store's, a supervised run's worker's. */
type RunError = AgentError | CheckpointStore.CheckpointError | Worker.WorkerError

/** How a run ended, whatever ran it: what the session's record keeps. */
interface Ended {
  readonly outcome: Outcome.Outcome
  readonly turns: number
  readonly usage: Message.Usage
  /** The typed answer in its JSON form, when the session asked for one and the run gave it. */
  readonly answer: unknown
}

/** What a run is given by the server: its steering, and where its events go (the log, the record's figures). */
interface RunInput {
  readonly steering: Steering.Service
  readonly observe: (event: AgentEvent.AgentEvent) => void
}

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

/** A value of a Schema in its JSON form (`undefined` when there is none, or it does not encode). */
const encoded = (schema: Schema.Codec<unknown, unknown> | undefined, value: unknown) =>
  schema === undefined || value === undefined
    ? Effect.succeed(undefined)
    : Schema.encodeUnknownEffect(Schema.toCodecJson(schema))(value).pipe(
      Effect.catch(() => Effect.succeed(undefined))
    )

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
const failureOf = (cause: Cause.Cause<RunError | Store.StorageError>) => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) return { _tag: error.value._tag, message: error.value.message }
  const defect = cause.reasons.find(Cause.isDieReason)
  return { _tag: "Defect", message: defect === undefined ? Cause.pretty(cause) : String(defect.defect) }
}

export const make = <R>(
  options: Options<R>
): Effect.Effect<Sessions, Store.StorageError, Scope.Scope | Agent.Requirements | R> =>
  Effect.gen(function*() {
    const scope = yield* Scope.Scope
    const services = yield* Effect.context<Agent.Requirements | R>()
    const { store } = options
    const entries = new Map<string, Entry>()
    const reserving = new Set<string>()
    let stopping = false
    /** Runs started and not ended; runs admitted and not started yet; events streams open. */
    let runCount = 0
    let startCount = 0
    let streamCount = 0

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

    const info = (entry: Entry): Effect.Effect<Info> =>
      Effect.gen(function*() {
        const running = entry.run !== undefined && entry.record.status === "running"
        const pending = running ? yield* entry.approvals.pending : []
        const plan = running ? yield* entry.approvals.pendingPlan : undefined
        const turn = running ? yield* entry.approvals.pendingTurn : undefined
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

    /**
     * What sees every event of a run: its log, and the record's figures (a supervised session counts its act
     * turns, which its own events carry).
     */
    const observer = (entry: Entry, log: EventLog.EventLog, run: Run) => (event: AgentEvent.AgentEvent) => {
      log.append(event)
      const supervised = entry.record.supervisor !== undefined
      if (event._tag === "BudgetSnapshot") {
        const { turns, usage } = event.figures
        entry.record = supervised ? { ...entry.record, usage } : { ...entry.record, turns, usage }
      } else if (event._tag === "AgentEnd") {
        run.ended = true
      } else if (supervised && isSupervisorEvent(event)) {
        entry.record = { ...entry.record, turns: event.turn }
      }
    }

    /** Runs the session from the start or from its checkpoint, giving how it ended. */
    type Start = (run: RunInput) => Effect.Effect<Ended, RunError, SupervisedSession.Requirements | R>

    /** The Schema of the typed output a record names: the server's, or a `ConfigError` when it lists it no more. */
    const outputOf = (record: Store.Record) =>
      Effect.suspend(() => {
        const name = record.output?.name
        if (name === undefined) return Effect.succeed(undefined)
        const schema = options.outputs !== undefined && Object.hasOwn(options.outputs, name)
          ? options.outputs[name]
          : undefined
        return schema !== undefined ? Effect.succeed(schema) : Effect.fail(
          new ConfigError({ field: "output", rule: `the server lists no output ${JSON.stringify(name)} any more` })
        )
      })

    /** The supervisor a record names: the server's, or a `ConfigError` when it lists it no more. */
    const supervisionOf = (record: Store.Record) =>
      Effect.suspend(() => {
        const name = record.supervisor ?? ""
        const supervision = options.supervisors !== undefined && Object.hasOwn(options.supervisors, name)
          ? options.supervisors[name]
          : undefined
        return supervision !== undefined ? Effect.succeed(supervision) : Effect.fail(
          new ConfigError({ field: "supervisor", rule: `the server lists no supervisor ${JSON.stringify(name)} any more` })
        )
      })

    /** A plain session's run: `Session.run` when it is new (`task`, `config`), else `Session.resume`. */
    const plain = (
      entry: Entry,
      fresh?: { readonly task: string; readonly config: AgentConfig.AgentConfig }
    ): Start =>
    ({ observe, steering }) =>
      Effect.gen(function*() {
        const output = yield* outputOf(entry.record)
        const plugin: Hooks.Plugin = { name: "agent-server", observe }
        const given = {
          plugins: [...(options.plugins ?? []), plugin],
          steering,
          name: options.name,
          output,
          outputRetries: options.outputRetries,
          outputMode: options.outputMode
        }
        const { outcome, state } = fresh === undefined
          ? yield* Session.resume<R, unknown>(entry.record.id, { ...given, agents: options.agents })
          : yield* Session.run<R, unknown>({
            ...given,
            id: entry.record.id,
            prompt: fresh.task,
            system: options.system,
            config: fresh.config
          })
        const ended: Ended = { outcome, turns: state.turn, usage: state.usage, answer: state.output?.value }
        return ended
      })

    /**
     * A supervised session's run under the supervisor its record names: `SupervisedSession.run` when it is new
     * (`task`), else `SupervisedSession.resume`. The worker runs with the server's system prompt, plugins and
     * name, and the config the session was started with.
     */
    const supervised = (entry: Entry, task?: string): Start => ({ observe, steering }) =>
      Effect.gen(function*() {
        const { readOnlyTools, ...supervision } = yield* supervisionOf(entry.record)
        const output = yield* outputOf(entry.record)
        const given = {
          ...supervision,
          id: entry.record.id,
          agent: {
            system: options.system,
            config: entry.record.config,
            plugins: options.plugins,
            name: options.name,
            outputRetries: options.outputRetries,
            outputMode: options.outputMode,
            agents: options.agents,
            readOnlyTools
          },
          output,
          steering,
          onEvent: (event: AgentEvent.AgentEvent) => Effect.sync(() => observe(event))
        }
        const result = task === undefined
          ? yield* SupervisedSession.resume<R, unknown, unknown>(given)
          : yield* SupervisedSession.run<R, unknown, unknown>({ ...given, task })
        const ended: Ended = {
          outcome: SupervisorOutcome.toOutcome(result.outcome),
          turns: result.turns,
          usage: result.usage,
          answer: yield* encoded(output, result.output)
        }
        return ended
      })

    /** A session's run from its checkpoint, as its record says it runs. */
    const resumed = (entry: Entry): Start =>
      entry.record.supervisor === undefined ? plain(entry) : supervised(entry)

    /** Starts a run of the session in the server's scope; the log is open to subscribers at once. */
    const launch = (entry: Entry, start: Start, steering: Steering.Service): Effect.Effect<void, Store.StorageError> =>
      Effect.gen(function*() {
        if (stopping) return
        const log = yield* logOf(entry)
        // Saved before the run is the session's: a store that fails leaves it without a run, not with one that
        // never started.
        if (entry.record.status !== "running") yield* save(entry, { status: "running" })
        const run: Run = { steering, fiber: undefined, ended: false, cancelled: false }
        entry.run = run
        runCount++
        log.open()
        const approvals = options.approvals ?? entry.approvals
        const body = start({ steering, observe: observer(entry, log, run) }).pipe(
          Effect.provideContext(
            Context.add(services, Approvals.Approvals, approvals).pipe(
              Context.add(CheckpointStore.CheckpointStore, store.checkpoints)
            )
          ),
          Effect.exit,
          Effect.flatMap((exit) => finish(entry, run, exit))
        )
        run.fiber = yield* Effect.forkIn(body, scope, { startImmediately: true })
      })

    /** What the record says of a run that ended: its outcome and figures (with the typed answer), or its error. */
    const endingOf = (entry: Entry, exit: Exit.Exit<Ended, RunError>): Partial<Store.Record> => {
      if (Exit.isFailure(exit)) return { status: "failed", error: failureOf(exit.cause) }
      const { answer, outcome, turns, usage } = exit.value
      const output = entry.record.output
      return {
        status: "finished",
        outcome,
        turns,
        usage,
        ...(output === undefined ? {} : { output: { name: output.name, ...answerRecord(answer) } })
      }
    }

    /** Records how a run ended, and starts the next one when messages came while it was ending. */
    const finish = (entry: Entry, run: Run, exit: Exit.Exit<Ended, RunError>): Effect.Effect<void> =>
      Effect.gen(function*() {
        // Interrupted (the server is stopping): the record keeps `running`, so the next server resumes it.
        if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) {
          entry.log?.close()
          return
        }
        // Described as ended before its events stream ends (a client that reads it then finds it so); saved next.
        const ending = endingOf(entry, exit)
        entry.record = { ...entry.record, ...ending }
        entry.log?.close()
        yield* entry.lock.withPermit(ended(entry, run, ending))
      }).pipe(
        Effect.catch((error) => Effect.logWarning(`agent server: session ${entry.record.id}: ${error.message}`))
      )

    /**
     * The end of a run, under the session's lock: no message is queued to the run nor a run started meanwhile,
     * so what its queue holds now is all that came too late for it, and goes to the one next run.
     */
    const ended = (entry: Entry, run: Run, ending: Partial<Store.Record>) =>
      Effect.gen(function*() {
        entry.run = undefined
        runCount--
        // Its log is opened again when it is read or written: an ended session holds no descriptor.
        entry.log?.release()
        entry.log = undefined
        yield* save(entry, ending)
        // Messages that came while the run was ending are still in its queue: they go to the next run.
        const leftover = [
          ...(yield* run.steering.takeSteering).map((message) => ({ kind: "steer" as const, message })),
          ...(yield* run.steering.takeFollowUps).map((message) => ({ kind: "followUp" as const, message }))
        ]
        if (leftover.length === 0 || run.cancelled) return
        yield* restart(entry, leftover)
      })

    /**
     * A new run of a session that is not running, with messages for it (each becomes a follow-up when finished).
     * Fails with `SteeringFull` (nothing started) when the messages do not fit a run's queue. Called with the
     * session's lock held.
     */
    const restart = (entry: Entry, messages: ReadonlyArray<Queued>) =>
      Effect.gen(function*() {
        const steering = yield* Steering.make()
        const finished = entry.record.status === "finished"
        for (const { kind, message } of messages) {
          yield* kind === "steer" && !finished ? steering.steer(message) : steering.followUp(message)
        }
        // The last run's ending (and answer) no longer describe it.
        const { error: _error, outcome: _outcome, output, ...rest } = entry.record
        entry.record = output === undefined ? rest : { ...rest, output: { name: output.name } }
        yield* launch(entry, resumed(entry), steering)
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
      Effect.map(Approvals.interactive(), (approvals) => {
        const entry: Entry = {
          record,
          log: undefined,
          approvals,
          run: undefined,
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
        const steering = yield* Steering.make()
        yield* entry.lock.withPermit(launch(entry, resumed(entry), steering))
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
          // A supervised run's checkpoint keeps no config: the record does, for the run to resume with.
          ...(supervisor === undefined ? {} : { supervisor, config }),
          ...(output === undefined ? {} : { output: { name: output } })
        }, false)
        yield* store.save(entry.record)
        const steering = yield* Steering.make()
        const run = supervisor === undefined ? plain(entry, { task, config }) : supervised(entry, task)
        yield* launch(entry, run, steering).pipe(Effect.ensuring(Effect.sync(() => entries.set(id, entry))))
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
        const waiting = entry.run === undefined ? undefined : (yield* entry.approvals.pending)
          .find((request) => request.approvalId === id)
        const answered = waiting !== undefined && (command.type === "approve"
          ? yield* entry.approvals.approve(id)
          : yield* entry.approvals.deny(id, command.reason ?? "denied over HTTP"))
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
        const run = entry.run
        if (command.type === "cancel") {
          if (run === undefined || run.ended) return yield* rejected(id, "the session is not running")
          run.cancelled = true
          yield* run.steering.cancel(command.reason ?? "cancelled over HTTP")
          return result("applied")
        }
        if (command.type !== "steer" && command.type !== "follow_up") return yield* decideSupervised(entry, command)
        const refused = yield* messagesRefused(entry)
        if (refused !== undefined) return yield* rejected(id, `${command.type}: ${refused}`)
        return yield* entry.lock.withPermit(message(entry, command.type, command.text))
      })

    /** Why a session takes no steering or follow-ups, when it does not: its supervisor's worker is not our loop. */
    const messagesRefused = (entry: Entry) =>
      entry.record.supervisor === undefined ? Effect.succeed(undefined) : Effect.map(
        Effect.option(supervisionOf(entry.record)),
        (supervision) => {
          const worker = Option.getOrUndefined(supervision)?.worker
          return worker === undefined || ("_tag" in worker && worker._tag === "AgentWorker")
            ? undefined
            : `the ${worker.name} worker takes no steering or follow-ups, only cancel`
        }
      )

    /**
     * A decision on a supervised session's plan or feedback answers the question it names (the plan `iteration`,
     * the act `turn`: without one it is a 400, as an approval without its id is, since several clients may decide)
     * if that question waits now (`applied`); otherwise (not asked yet, answered already, revised since, a session
     * that is not supervised or not running) a 409, and nothing is kept. Under the session's lock, so that the
     * question read is the question answered.
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
        const running = entry.run !== undefined && !entry.run.ended
        const plan = running ? yield* entry.approvals.pendingPlan : undefined
        const turn = running ? yield* entry.approvals.pendingTurn : undefined
        const mismatch = Control.decisionMismatch(command, { plan, turn })
        if (mismatch !== undefined) return yield* rejected(sessionId, mismatch)
        const answered = answer._tag === "plan"
          ? yield* entry.approvals.decidePlanWith(answer.decision)
          : yield* entry.approvals.decideTurnWith(answer.decision)
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
        const run = entry.run
        const result = (status: ControlResult["status"]): ControlResult => ({ sessionId: id, type, status })
        const kind = type === "steer" ? "steer" as const : "followUp" as const
        const full = (error: Steering.SteeringFull) =>
          new QueueFull({ sessionId: id, queued: error.queued, bytes: error.bytes, detail: error.message })
        if (run !== undefined) {
          // Into the run's queue, bounded; a run that is ending leaves it to the next run, which its end starts.
          yield* Effect.mapError(
            kind === "steer" ? run.steering.steer(text) : run.steering.followUp(text),
            full
          )
          return result("queued")
        }
        if (kind === "steer" && entry.record.status === "finished") {
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
        yield* Effect.mapError(admitted(restart(entry, [{ kind, message: Message.user(text) }])), (error) =>
          error._tag === "SteeringFull" ? full(error) : error)
        return result("restarted")
      })

    /** Counts a client of the session's events until the scope closes, if one more fits; else `TooManyStreams`. */
    const follow = (entry: Entry) =>
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
        yield* follow(entry)
        const log = yield* logOf(entry)
        return yield* Effect.mapError(log.subscribe(after, idleMs), (count) =>
          badRequest(
            ["headers", "last-event-id"],
            `must be at most ${count - 1}`,
            `Last-Event-ID ${after} is past the session's last event (${count - 1})`
          ))
      })

    const stop = Effect.suspend(() => {
      stopping = true
      const fibers: Array<Fiber.Fiber<void>> = []
      for (const entry of entries.values()) if (entry.run?.fiber !== undefined) fibers.push(entry.run.fiber)
      return Fiber.interruptAll(fibers)
    }).pipe(Effect.andThen(Effect.sync(() => entries.forEach((entry) => entry.log?.release()))))
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
