/**
 * The server's sessions: starting them as durable sessions, following their
 * events into their logs, applying control commands, describing them, and
 * resuming the unfinished ones when the server starts.
 *
 * A session's run is a fiber in the server's scope. When the server stops,
 * the runs are interrupted: each saves its checkpoint and its record still
 * says `running`, so the next server on the same store resumes it (as it
 * does after a crash, from the last checkpoint).
 *
 * @internal
 */
import { Cause, Clock, Context, Effect, Exit, Fiber, Option, Scope, Semaphore, type Stream } from "effect"
import type { HttpApiError } from "effect/http-api"
import type * as Agent from "../../Agent.ts"
import * as AgentConfig from "../../AgentConfig.ts"
import type { AgentError } from "../../AgentError.ts"
import * as Approvals from "../../Approvals.ts"
import type * as Control from "../../protocol/Control.ts"
import * as UntrustedConfig from "../../protocol/UntrustedConfig.ts"
import type * as Hooks from "../../Hooks.ts"
import * as Message from "../../Message.ts"
import type * as RunState from "../../RunState.ts"
import * as CheckpointStore from "../../session/CheckpointStore.ts"
import * as Session from "../../session/Session.ts"
import * as Steering from "../../Steering.ts"
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

/** What the server tells about a session. */
export interface Info extends Omit<Store.Record, "status"> {
  readonly status: Store.Record["status"] | "waiting"
  readonly pendingApprovals: ReadonlyArray<PendingApproval>
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
}


export interface Options<R> {
  readonly store: Store.Store
  /** The agent's name, in its runs' spans and the sessions' descriptions. */
  readonly name?: string | undefined
  readonly system?: string | undefined
  readonly config?: AgentConfig.Input | undefined
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /** A policy instead of decisions over HTTP. */
  readonly approvals?: Approvals.Service | undefined
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

/** What a failed run failed with, in words. */
const failureOf = (cause: Cause.Cause<AgentError | CheckpointStore.CheckpointError | Store.StorageError>) => {
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
      Effect.map(entry.approvals.pending, (pending) => {
        const running = entry.run !== undefined && entry.record.status === "running"
        return {
          ...entry.record,
          status: running && pending.length > 0 ? "waiting" : entry.record.status,
          pendingApprovals: running
            ? pending.map((request) => ({
              toolCallId: request.toolCallId,
              approvalId: request.approvalId,
              toolName: request.toolName,
              params: request.params,
              ...(request.reason === undefined ? {} : { reason: request.reason })
            }))
            : [],
          ...(options.name === undefined ? {} : { agent: options.name })
        }
      })

    /** The plugin that logs a run's events and keeps the record's figures. */
    const observer = (entry: Entry, log: EventLog.EventLog, run: Run): Hooks.Plugin => ({
      name: "agent-server",
      observe: (event) => {
        log.append(event)
        if (event._tag === "BudgetSnapshot") {
          entry.record = { ...entry.record, turns: event.figures.turns, usage: event.figures.usage }
        } else if (event._tag === "AgentEnd") {
          run.ended = true
          // Described as ended as soon as its stream ends (`finish` saves it); unless the server is stopping it.
          if (!stopping) {
            entry.record = event.outcome !== undefined
              ? { ...entry.record, status: "finished", outcome: event.outcome }
              : { ...entry.record, status: "failed", error: event.error !== undefined
                ? { _tag: event.error._tag, message: event.error.message }
                : { _tag: "Defect", message: event.defect ?? "" } }
          }
          log.close()
        }
      }
    })

    type Start = (run: {
      readonly plugins: ReadonlyArray<Hooks.PluginInput<R>>
      readonly steering: Steering.Service
    }) => Effect.Effect<RunState.RunResult, AgentError | CheckpointStore.CheckpointError, Session.Requirements | R>

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
        const plugins = [...(options.plugins ?? []), observer(entry, log, run)]
        const approvals = options.approvals ?? entry.approvals
        const body = start({ plugins, steering }).pipe(
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

    /** Records how a run ended, and starts the next one when messages came while it was ending. */
    const finish = (
      entry: Entry,
      run: Run,
      exit: Exit.Exit<RunState.RunResult, AgentError | CheckpointStore.CheckpointError>
    ): Effect.Effect<void> =>
      Effect.gen(function*() {
        entry.log?.close()
        // Interrupted (the server is stopping): the record keeps `running`, so the next server resumes it.
        if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) return
        yield* entry.lock.withPermit(ended(entry, run, exit))
      }).pipe(
        Effect.catch((error) => Effect.logWarning(`agent server: session ${entry.record.id}: ${error.message}`))
      )

    /**
     * The end of a run, under the session's lock: no message is queued to the run nor a run started meanwhile,
     * so what its queue holds now is all that came too late for it, and goes to the one next run.
     */
    const ended = (
      entry: Entry,
      run: Run,
      exit: Exit.Exit<RunState.RunResult, AgentError | CheckpointStore.CheckpointError>
    ) =>
      Effect.gen(function*() {
        entry.run = undefined
        runCount--
        // Its log is opened again when it is read or written: an ended session holds no descriptor.
        entry.log?.release()
        entry.log = undefined
        if (Exit.isSuccess(exit)) {
          const { state, outcome } = exit.value
          yield* save(entry, { status: "finished", outcome, turns: state.turn, usage: state.usage })
        } else {
          yield* save(entry, { status: "failed", error: failureOf(exit.cause) })
        }
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
        const { error: _error, outcome: _outcome, ...rest } = entry.record
        entry.record = rest
        yield* launch(
          entry,
          ({ plugins, steering }) =>
            Session.resume<R>(entry.record.id, { plugins, steering, name: options.name }),
          steering
        )
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

    const recover = (entry: Entry) =>
      Effect.gen(function*() {
        const id = entry.record.id
        const checkpoint = yield* Effect.result(store.checkpoints.load(id))
        if (checkpoint._tag === "Failure") {
          const { _tag, message } = checkpoint.failure
          return yield* save(entry, { status: "failed", error: { _tag, message } })
        }
        const { finished, state } = checkpoint.success
        if (finished !== undefined) {
          const { outcome } = finished
          return yield* save(entry, { status: "finished", outcome, turns: state.turn, usage: state.usage })
        }
        const steering = yield* Steering.make()
        yield* entry.lock.withPermit(launch(entry, ({ plugins, steering }) =>
          Session.resume<R>(id, { plugins, steering, name: options.name }), steering))
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

    const create: Sessions["create"] = (input) =>
      Effect.gen(function*() {
        const config = yield* Effect.mapError(
          sessionConfig(options.config, input.config),
          (error) => badRequest(["payload", "config", ...error.field.split(".")], error.rule, error.message)
        )
        const id = input.id ?? globalThis.crypto.randomUUID()
        // Taken at once (two requests for one id race): released when this one fails.
        const reserved = yield* Effect.sync(() => {
          if (entries.has(id) || reserving.has(id)) return false
          reserving.add(id)
          return true
        })
        if (!reserved) return yield* exists(id)
        return yield* admitted(start(id, input.task, config)).pipe(
          Effect.ensuring(Effect.sync(() => reserving.delete(id)))
        )
      })

    const start = (id: string, task: string, config: AgentConfig.AgentConfig) =>
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
          usage: Message.emptyUsage
        }, false)
        yield* store.save(entry.record)
        const steering = yield* Steering.make()
        yield* launch(entry, ({ plugins, steering }) =>
          Session.run<R>({
            id,
            prompt: task,
            system: options.system,
            config,
            plugins,
            steering,
            name: options.name
          }), steering).pipe(Effect.ensuring(Effect.sync(() => entries.set(id, entry))))
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
        if (command.type !== "steer" && command.type !== "follow_up") {
          return yield* rejected(id, `${command.type}: decisions for supervised runs, which are not served`)
        }
        return yield* entry.lock.withPermit(message(entry, command.type, command.text))
      })

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
