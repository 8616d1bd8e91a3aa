/**
 * One session API, whatever keeps the sessions: start one, steer it, answer
 * its approvals, send it a follow-up (a session whose run ended goes on with
 * it), interrupt it, read its events and wait for how its run ended. Choosing
 * where sessions live is choosing a Layer:
 *
 * - {@link layer}: sessions run in this process, each a `Session` (its
 *   checkpoints in the `CheckpointStore` service: `CheckpointStore.layerMemory`
 *   for tests, `CheckpointStore.layerFileSystem(dir)` to outlive the
 *   process). A session the store holds from an earlier process is resumed
 *   by starting it again.
 * - `DurableSession.layerSessions`: sessions run as workflows on an
 *   `effect/workflow` engine (in memory, or on `effect/cluster` with
 *   PostgreSQL and several runners).
 *
 * Everything a caller gives is data (a prompt, a config, the name of a typed
 * output): the agent itself (the model, the tools, the plugins, the outputs,
 * the agents a session may be handed off to) is the layer's. So the same
 * program runs against either layer, and the conformance matrix runs one
 * catalogue of scenarios through both.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Sessions } from "effect-agent/session"
 *
 * const program = Effect.gen(function*() {
 *   const sessions = yield* Sessions.Sessions
 *   yield* sessions.start({ sessionId: "task-42", prompt: "Tidy up the repository" })
 *   const first = yield* sessions.result("task-42")
 *   // the session goes on with a follow-up: wait for the ending after the events seen so far
 *   const seen = (yield* sessions.events("task-42")).length
 *   yield* sessions.followUp("task-42", "Now write the changelog")
 *   const second = yield* sessions.result("task-42", seen)
 *   return [first.outcome, second.outcome]
 * })
 * ```
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import * as Stream from "effect/Stream"
import { type AgentError, ConfigError } from "../AgentError.ts"
import type * as AgentConfig from "../AgentConfig.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Approvals from "../Approvals.ts"
import * as Hooks from "../Hooks.ts"
import type * as Message from "../Message.ts"
import type * as Output from "../Output.ts"
import type * as RunState from "../RunState.ts"
import * as Steering from "../Steering.ts"
import type * as SubAgent from "../SubAgent.ts"
import * as CheckpointStore from "./CheckpointStore.ts"
import type { StoreError } from "./internal/durable/store.ts"
import * as SessionIdRule from "./internal/sessionId.ts"
import * as Session from "./Session.ts"

// -----------------------------------------------------------------------------
// Models
// -----------------------------------------------------------------------------

/**
 * A session to start: data alone, so that it can be sent to a runner.
 *
 * @since 0.1.0
 * @category models
 */
export interface StartOptions {
  /** The session's id (`CheckpointStore.SessionId`): starting it again joins (or resumes) the session that has it. */
  readonly sessionId: string
  /** The task: text or messages. */
  readonly prompt: string | ReadonlyArray<Message.Message>
  readonly system?: string | undefined
  /** Settings (validated: a bad config is a `ConfigError` before anything starts). */
  readonly config?: AgentConfig.Input | undefined
  /** The typed output the session asks for: the name of one of the layer's `outputs`. */
  readonly output?: string | undefined
  /**
   * The supervisor the session runs under, by name (one of the layer's `supervisors`; on the durable layer, the
   * runners'): its task is worked in turns checked in between (`effect-agent/supervisor`), and its prompt must be
   * text. None: the plain loop.
   */
  readonly supervisor?: string | undefined
  /**
   * A message the session goes on with, as a follow-up, queued before its run starts: a session the store
   * holds unfinished takes it when its resumed run would end, a finished one goes on with it, one in flight
   * (a join) gets it queued. Starting a session and then calling `followUp` could see its run end in between.
   * On the durable layer it is the `followUp` made right after the start.
   */
  readonly followUp?: string | Message.Message | undefined
  /**
   * A steering message queued before the run starts: a session resumed unfinished takes it before its next
   * model call (a finished one goes on with it as a follow-up). On the durable layer it is the `steer` made
   * right after the start.
   */
  readonly steer?: string | Message.Message | undefined
  /**
   * Resume the session from its checkpoint even if it finished: a run that ended on a limit goes on under the
   * config given now (a larger `maxTurns`, a larger budget), one that completed goes on from where it ended and
   * publishes its events. Without it, starting a finished session answers its stored result. (The durable layer
   * resumes its sessions by itself, and takes none.)
   */
  readonly resume?: boolean | undefined
}

/**
 * An event a session published, with its number: later events have higher
 * numbers. On the durable layer a session's events are numbered from 1; in
 * this process numbers increase across the layer, so a session taken up
 * again (after `maxSessions` forgot it) goes on above the numbers it had.
 *
 * @since 0.1.0
 * @category models
 */
export interface Published {
  readonly seq: number
  readonly event: AgentEvent.AgentEvent
}

/**
 * What a call fails with: the session id breaks the rule, the session is not
 * known (`CheckpointMissing`), its checkpoint cannot be used (the other
 * `CheckpointStore` errors), the durable store failed (`DurableStoreError`:
 * retry), the config or output asked for is refused (`ConfigError`), a
 * message does not fit the session's queue (`SteeringFull`: nothing queued),
 * or the session ended for good (`SessionEnded`, the durable layer).
 *
 * @since 0.1.0
 * @category errors
 */
export type SessionsError =
  | CheckpointStore.CheckpointError
  | StoreError
  | ConfigError
  | Steering.SteeringFull
  | SessionEnded

/**
 * The session has ended for good and takes no more messages, nor answers a
 * result: on the durable layer, a session that was interrupted, or that
 * finished where its runners keep no session idle for a follow-up.
 *
 * @since 0.1.0
 * @category errors
 */
export class SessionEnded extends Schema.TaggedError<SessionEnded>()("SessionEnded", {
  sessionId: Schema.String,
  /** `interrupted`, `finished` or `failed`. */
  reason: Schema.String
}) {
  override get message(): string {
    return `session ${this.sessionId} has ended for good (${this.reason}) and takes no more messages`
  }
}

/**
 * The session API.
 *
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /**
   * Starts a session, or joins it when it runs already, or resumes it when
   * its store holds it unfinished (a process stopped under it). Returns once
   * it is started, not when it ends: see `result`.
   */
  readonly start: (options: StartOptions) => Effect.Effect<void, SessionsError>
  /**
   * Queues a steering message, delivered before the session's next model call. To a session whose run has
   * ended it is the follow-up that starts the next run (on the durable layer, while its runners keep it idle).
   */
  readonly steer: (sessionId: string, message: string | Message.Message) => Effect.Effect<void, SessionsError>
  /**
   * Queues a follow-up: delivered when the run would end; a session whose run has ended goes on with it (on the
   * durable layer, while its runners keep it idle: after that it has ended, `SessionEnded`).
   */
  readonly followUp: (sessionId: string, message: string | Message.Message) => Effect.Effect<void, SessionsError>
  /**
   * Answers the call waiting under `approvalId` (the id its `ApprovalRequested` carries). Returns whether a
   * call waited under it and took this decision; when none did, nothing is decided or kept.
   */
  readonly approve: (
    sessionId: string,
    approvalId: string,
    decision: Approvals.Decision
  ) => Effect.Effect<boolean, SessionsError>
  /**
   * Interrupts the session's run where it is. In this process the run ends `Cancelled` and starting the session
   * again resumes it from its checkpoint; on the durable layer the session ends for good (`SessionEnded`).
   */
  readonly interrupt: (sessionId: string) => Effect.Effect<void, SessionsError>
  /**
   * Cancels the session's run in flight: it ends `Cancelled` with `reason`, and the session stays: a follow-up
   * goes on with it (on the durable layer, while its runners keep it idle). In this process at once (the calls it was making are answered "cancelled", so the transcript
   * stays whole). On the durable layer at the run's next step, before its next model call or tool call: the
   * model call or tool call in flight finishes first (an activity is not cut short); a call waiting for approval
   * is cut as in this process (a sub-agent's is denied: "the run was cancelled: <reason>"). What was queued to the run and not delivered waits in
   * its state: the next follow-up delivers it first. A session with no run in flight (waiting for a follow-up, or
   * ended) is left as it is: a cancel never reaches its next run.
   */
  readonly cancel: (sessionId: string, reason?: string) => Effect.Effect<void, SessionsError>
  /**
   * What waits for a decision now: the calls (each by the `approvalId` `approve` takes), and a supervised
   * session's plan or feedback. Nothing when the layer's `Approvals` policy decides, or no run is in flight.
   */
  readonly pending: (sessionId: string) => Effect.Effect<Pending, SessionsError>
  /**
   * Decides the plan waiting, if it is plan `iteration` (a supervised session's, see `Supervisor.Options.plan`):
   * returns whether it was, and took this decision; otherwise nothing is decided or kept.
   */
  readonly decidePlan: (
    sessionId: string,
    iteration: number,
    decision: Approvals.PlanDecision
  ) => Effect.Effect<boolean, SessionsError>
  /** Decides the feedback of act turn `turn` waiting for the operator (`approveTurns`), as `decidePlan` does. */
  readonly decideTurn: (
    sessionId: string,
    turn: number,
    decision: Approvals.TurnDecision
  ) => Effect.Effect<boolean, SessionsError>
  /** The events published after `after` (all by default; see {@link position}), in order. */
  readonly events: (sessionId: string, after?: number) => Effect.Effect<ReadonlyArray<Published>, SessionsError>
  /**
   * The events published after `after`, as they are published: the stream goes on through the session's later
   * runs (follow-ups) and does not end by itself (take from it until `isEnding`, or interrupt it). A reader
   * slower than the session sees what `events` would (past `maxEvents`, the oldest are gone). In this process
   * it is woken by each event; on the durable layer it reads the store every 200 ms.
   */
  readonly watch: (sessionId: string, after?: number) => Stream.Stream<Published, SessionsError>
  /**
   * Waits for the first ending of a run published after the event numbered `after` (0: the session's first
   * run), and answers its result, or fails with the run's error. A handoff is no ending: the agent handed off
   * to ends the run. After a follow-up, pass the number of the last event seen before it. In this process, a
   * session known only from the store (an earlier process ran it) answers its stored result if it finished,
   * and waits for a `start` if not. On the durable layer a run that meets a model or storage error suspends,
   * and this waits for `supervise` to resume it.
   */
  readonly result: (
    sessionId: string,
    after?: number
  ) => Effect.Effect<RunState.RunResult, AgentError | SessionsError>
}

/**
 * What waits for a decision in a session (`pending`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Pending {
  /** The calls waiting for approval, oldest first. */
  readonly approvals: ReadonlyArray<Approvals.Request>
  /** A supervised session's plan waiting for a decision (`decidePlan`). */
  readonly plan?: Approvals.PlanRequest | undefined
  /** A supervised session's feedback waiting for the operator (`decideTurn`). */
  readonly turn?: Approvals.TurnRequest | undefined
}

/**
 * The calls still waiting for approval after `events` (a session's, in
 * order): each `ApprovalRequested` (a sub-agent's inside its `Nested`
 * events) not yet answered by its `ApprovalResolved`; none once the run has
 * ended. The durable layer lists its waiting calls so.
 *
 * @example
 * ```ts
 * import { Sessions } from "effect-agent/session"
 *
 * const asked = { runId: "r", turn: 1, timestamp: 0, toolCallId: "c1", approvalId: "c1", toolName: "deploy", params: {} }
 * console.log(Sessions.waitingApprovals([{ _tag: "ApprovalRequested", ...asked }]).map((request) => request.approvalId))
 * // Output: [ 'c1' ]
 * ```
 *
 * @since 0.1.0
 * @category events
 */
export const waitingApprovals = (events: ReadonlyArray<AgentEvent.AgentEvent>): Array<Approvals.Request> => {
  const waiting = new Map<string, Approvals.Request>()
  for (const outer of events) {
    if (isEnding(outer)) {
      waiting.clear()
      continue
    }
    let event: AgentEvent.AgentEvent = outer
    while (event._tag === "Nested") event = event.event
    if (event._tag !== "ApprovalRequested" && event._tag !== "ApprovalResolved") continue
    const approvalId = event.approvalId ?? event.toolCallId
    if (event._tag === "ApprovalResolved") {
      waiting.delete(approvalId)
      continue
    }
    waiting.set(approvalId, {
      runId: event.runId,
      turn: event.turn,
      toolCallId: event.toolCallId,
      approvalId,
      toolName: event.toolName,
      params: event.params,
      ...(event.reason === undefined ? {} : { reason: event.reason })
    })
  }
  return Array.from(waiting.values())
}

/**
 * The sessions service.
 *
 * @since 0.1.0
 * @category services
 */
export class Sessions extends Context.Service<Sessions, Service>()("effect-agent/session/Sessions") {}

/**
 * The ending a run published, if `event` is one: an `AgentEnd` at the top
 * (not a sub-agent's, which is nested) that is not a handoff. Every layer's
 * `result` reads endings this way.
 *
 * @example
 * ```ts
 * import { Sessions } from "effect-agent/session"
 *
 * console.log(Sessions.isEnding({ _tag: "TurnStart", runId: "r", turn: 1, timestamp: 0 })) // Output: false
 * ```
 *
 * @since 0.1.0
 * @category events
 */
export const isEnding = (event: AgentEvent.AgentEvent): event is AgentEvent.Of<"AgentEnd"> =>
  event._tag === "AgentEnd" && event.outcome?._tag !== "HandedOff"

/**
 * An event number as `events` and `result` read their `after`: a
 * non-negative whole number; anything else (negative, fractional, not
 * finite) is read as 0 (from the first event), rounded down.
 *
 * @example
 * ```ts
 * import { Sessions } from "effect-agent/session"
 *
 * console.log([Sessions.position(12), Sessions.position(-1), Sessions.position(2.5), Sessions.position(NaN)])
 * // Output: [ 12, 0, 2, 0 ]
 * ```
 *
 * @since 0.1.0
 * @category events
 */
export const position = (after: number | undefined): number =>
  after === undefined || !Number.isFinite(after) || after <= 0 ? 0 : Math.floor(after)

/**
 * The result an ending carries, or the run's error. A run that died of a
 * defect dies with it.
 *
 * @since 0.1.0
 * @category events
 */
export const resultOf = (end: AgentEvent.Of<"AgentEnd">): Effect.Effect<RunState.RunResult, AgentError> => {
  if (end.result !== undefined) return Effect.succeed(end.result)
  if (end.error !== undefined) return Effect.fail(end.error)
  return Effect.die(end.defect ?? "effect-agent: a run ended with neither a result nor an error")
}

// -----------------------------------------------------------------------------
// In this process
// -----------------------------------------------------------------------------

/**
 * The agent's parts a layer of sessions runs them with, besides the model
 * and the tools (which are its requirements): what a session cannot carry
 * as data. Every layer takes them (`layer` here, `DurableSession.layer` on
 * the runners).
 *
 * @since 0.1.0
 * @category options
 */
export interface AgentOptions<R = never> {
  /** The agent's name, in its runs' spans and events (see `Agent.run`'s `name`). */
  readonly name?: string | undefined
  /** Plugins every session runs with, after the guards its config installs. */
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /**
   * The typed outputs a session may ask for, by name (`StartOptions.output`; see `Agent.run`'s `output`): the
   * model is offered `final_answer`, and the result's state keeps the answer (read it typed with
   * `Agent.typedResult`). A session that names one the layer lacks is refused with `ConfigError`.
   */
  readonly outputs?: Readonly<Record<string, Schema.Codec<unknown, unknown>>> | undefined
  /** How many invalid final answers the model may correct (default 2). */
  readonly outputRetries?: number | undefined
  /** How the final answer is asked for (see `Output.Mode`). */
  readonly outputMode?: Output.Mode | undefined
  /** The agents a session may be handed off to (`Agent.handoff`): a session goes on in the one that answered. */
  readonly agents?: ReadonlyArray<SubAgent.Definition<string, SubAgent.InputSchema, unknown>> | undefined
}

/**
 * What the in-process layer runs sessions with: the agent's parts, and its bounds.
 *
 * @since 0.1.0
 * @category options
 */
export interface Options<R = never> extends AgentOptions<R> {
  /**
   * How many of a session's latest events `events` answers (default 10,000): the older are dropped, in batches
   * (a session holds at most twice as many), and their numbers are not reused. The checkpoints, not the events,
   * are what a session resumes from.
   */
  readonly maxEvents?: number | undefined
  /**
   * How many sessions the layer keeps in memory (default 1,000): past it, the session least recently started
   * whose run has ended is forgotten here (its events go; its checkpoint stays in the store, and a later call
   * on its id takes it up again from there). A session whose run is in flight is never forgotten.
   */
  readonly maxSessions?: number | undefined
  /**
   * The supervisors a session may run under, by name (`StartOptions.supervisor`): each made by
   * `SupervisedSession.supervisor`. A session that names one the layer lacks is refused with `ConfigError`.
   */
  readonly supervisors?: Readonly<Record<string, Supervisor<R>>> | undefined
}

/**
 * A way of running a session under supervision, for a layer's `supervisors`:
 * made by `SupervisedSession.supervisor` (`effect-agent/supervisor`) from the
 * checks, the worker and the limits. The layer gives it everything else.
 *
 * @since 0.1.0
 * @category options
 */
export interface Supervisor<R = never> {
  /**
   * Runs the session: opened with its task (new, unless the store holds it: then from its checkpoint), or,
   * with no task, resumed from its checkpoint with what `steering` holds (a finished session goes on with a
   * follow-up). Every event, the worker's and the supervisor's, goes to `onEvent`; the last is `AgentEnd`.
   */
  readonly run: (
    session: SupervisedRun<R>
  ) => Effect.Effect<RunState.RunResult, AgentError | CheckpointStore.CheckpointError, Session.Requirements | R>
  /** Whether a stored checkpoint is a run of this kind (the plain loop does not resume it). */
  readonly owns: (checkpoint: CheckpointStore.Checkpoint) => boolean
}

/**
 * What a layer gives a {@link Supervisor} to run a session with.
 *
 * @since 0.1.0
 * @category options
 */
export interface SupervisedRun<R = never> {
  readonly sessionId: string
  /** The supervised run's id, when the layer fixes it (the durable layer: the same in every replay). */
  readonly runId?: string | undefined
  /**
   * How the layer keeps a step of the supervisor's own whose result a replay must not make anew (a check's
   * run): none in this process (the step runs); the durable layer records it as an activity named `name`.
   */
  readonly record?: Recorder | undefined
  /** The task, when the session is opened; none when it is resumed. */
  readonly task: string | undefined
  readonly system: string | undefined
  /** The worker's settings: the session's config. */
  readonly config: AgentConfig.Input | undefined
  readonly name: string | undefined
  readonly output: Schema.Codec<unknown, unknown> | undefined
  readonly outputRetries: number | undefined
  readonly outputMode: Output.Mode | undefined
  readonly agents: AgentOptions["agents"]
  /** The layer's plugins, for the worker's runs. */
  readonly plugins: ReadonlyArray<Hooks.PluginInput<R>>
  readonly steering: Steering.Service
  readonly onEvent: (event: AgentEvent.AgentEvent) => Effect.Effect<void>
}

/**
 * Keeps a step's result under `name` (see {@link SupervisedRun.record}): the step runs once per session, and a
 * replay of the session answers it from what was kept, as `schema` encodes it. A name given again in the session
 * (a later run of it counting its steps anew) is a step of its own.
 *
 * @since 0.1.0
 * @category options
 */
export interface Recorder {
  <A, R>(name: string, schema: Schema.Codec<A, unknown>, step: Effect.Effect<A, never, R>): Effect.Effect<A, never, R>
}

/** A session this process knows. */
interface Entry {
  readonly sessionId: string
  /** What it was started with: the last `start` made while no run of it was in flight (a join takes none). */
  start: StartOptions
  readonly approvals: Approvals.Interactive
  /** Held while the session's run is looked at and changed (started, queued to, ended). */
  readonly lock: Semaphore.Semaphore
  readonly log: Array<Published>
  /** The endings published (kept apart from the log, whose oldest events go past `maxEvents`; at most 1,000). */
  readonly endings: Array<{ readonly seq: number; readonly event: AgentEvent.Of<"AgentEnd"> }>
  seq: number
  /** Made by a `result` that waits; completed (and dropped) when an event is published or a run ends. */
  changed: Deferred.Deferred<void> | undefined
  steering: Steering.Service
  run: Fiber.Fiber<void> | undefined
  /** While its run's end is being handled (and the next run may start): not to be forgotten then. */
  ending: boolean
  /** How the last run ended, when it published no ending (it answered a stored result, or failed first). */
  silent: Exit.Exit<RunState.RunResult, AgentError | CheckpointStore.CheckpointError> | undefined
  /** The `watch` streams reading it, each at the number it has read to: what they have not read is kept. */
  readonly watchers: Set<{ read: number }>
  /** Made by a run that waits for its watchers to read on (they lag too far); completed when one reads. */
  drained: Deferred.Deferred<void> | undefined
}

/** The in-process layer's state: what it runs sessions with, and the sessions it knows. */
interface Registry<R> {
  readonly options: Options<R>
  /** Where the runs are forked: the layer's scope. */
  readonly scope: Scope.Scope
  readonly services: Context.Context<Session.Requirements | R>
  /** The app's policy, if it gave one: it decides every session's calls (nothing waits for `approve`). */
  readonly policy: Approvals.Service | undefined
  readonly entries: Map<string, Entry>
  readonly maxEvents: number
  readonly maxSessions: number
  /** The last event number given, across the layer's sessions. */
  issued: number
  /** Made by a watcher whose session was forgotten; completed when an entry is made (it may be its session's). */
  arrival: Deferred.Deferred<void> | undefined
}

/** How many endings a session keeps (for `result`), apart from its events. */
const maxEndings = 1_000

/** Wakes what waits on the entry, if anything does (an event costs no allocation otherwise). */
const wake = (entry: Entry): void => {
  const changed = entry.changed
  if (changed === undefined) return
  entry.changed = undefined
  Deferred.doneUnsafe(changed, Exit.void)
}

/**
 * Drops the oldest events in a batch (one splice per `maxEvents` events, not one per event; `events` answers the
 * last `maxEvents`), but none a watcher has yet to read. Returns whether the watchers keep more than
 * {@link watchedLag} times `maxEvents`: then the run waits for them.
 */
const trim = <R>(registry: Registry<R>, entry: Entry): boolean => {
  const { log } = entry
  if (log.length < 2 * registry.maxEvents) return false
  let keepAfter = log[log.length - registry.maxEvents - 1]!.seq
  for (const watcher of entry.watchers) keepAfter = Math.min(keepAfter, watcher.read)
  let drop = 0
  while (drop < log.length && log[drop]!.seq <= keepAfter) drop++
  if (drop > 0) log.splice(0, drop)
  return log.length > watchedLag * registry.maxEvents
}

/** How far (in `maxEvents`) a session's watchers may lag before its run waits for them to read on. */
const watchedLag = 4

/**
 * Keeps an event a session's run published, numbered (and its ending apart). A watcher is never skipped past:
 * when the watchers lag too far, the run waits for them, as it waits for a plugin's `onEvent`.
 */
const record = <R>(registry: Registry<R>, entry: Entry) => (event: AgentEvent.AgentEvent): Effect.Effect<void> =>
  Effect.suspend(() => {
    entry.seq = ++registry.issued
    entry.log.push({ seq: entry.seq, event })
    if (isEnding(event)) {
      entry.endings.push({ seq: entry.seq, event })
      if (entry.endings.length > maxEndings) entry.endings.splice(0, entry.endings.length - maxEndings)
    }
    const lagging = trim(registry, entry)
    wake(entry)
    return lagging ? drained(registry, entry) : Effect.void
  })

/** Waits until the watchers have read enough for the log to be trimmed under the lag (or none watches). */
const drained = <R>(registry: Registry<R>, entry: Entry): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (!trim(registry, entry)) return Effect.void
    const signal = entry.drained ??= Deferred.makeUnsafe<void>()
    return Effect.andThen(Deferred.await(signal), drained(registry, entry))
  })

/** Tells a run waiting for its watchers that one has read on. */
const readOn = (entry: Entry): void => {
  const signal = entry.drained
  if (signal === undefined) return
  entry.drained = undefined
  Deferred.doneUnsafe(signal, Exit.void)
}

/** The key of the layer's own part of a session's checkpoint: the names it was started with. */
const sessionsKey = "sessions"

/** The names a session was started with (its typed output, its supervisor), as its checkpoints keep them. */
const Names = Schema.Struct({ output: Schema.optionalKey(Schema.String), supervisor: Schema.optionalKey(Schema.String) })

/** What a checkpoint keeps of a session's names: none when it holds none (an older checkpoint) or they do not decode. */
const decodeNames = (saved: unknown): typeof Names.Type => Option.getOrElse(Schema.decodeUnknownOption(Names)(saved), () => ({}))

/** The state that keeps a session's names in its checkpoints (restored as they are read: `entryOf`). */
const named = (start: StartOptions): Hooks.State => ({
  save: Effect.succeed({
    ...(start.output === undefined ? {} : { output: start.output }),
    ...(start.supervisor === undefined ? {} : { supervisor: start.supervisor })
  }),
  restore: () => Effect.void
})

/** The typed output a session asks for, among the layer's (else `ConfigError`). */
const outputOf = <R>(registry: Registry<R>, start: StartOptions) =>
  Effect.suspend(() => {
    if (start.output === undefined) return Effect.succeed(undefined)
    const outputs = registry.options.outputs
    const schema = outputs?.[start.output]
    return schema === undefined
      ? Effect.fail(
        new ConfigError({
          field: "output",
          rule: `names a typed output this layer does not know (${JSON.stringify(start.output)}); it knows ${
            JSON.stringify(Object.keys(outputs ?? {}))
          }`
        })
      )
      : Effect.succeed(schema)
  })

/** The supervisor a session asks for, among the layer's (else `ConfigError`), and its task, which must be text. */
const supervisorOf = <R>(registry: Registry<R>, start: StartOptions) =>
  Effect.suspend(() => {
    if (start.supervisor === undefined) return Effect.succeed(undefined)
    const supervisors = registry.options.supervisors
    const supervisor = supervisors !== undefined && Object.hasOwn(supervisors, start.supervisor)
      ? supervisors[start.supervisor]
      : undefined
    if (supervisor === undefined) {
      return Effect.fail(
        new ConfigError({
          field: "supervisor",
          rule: `names a supervisor this layer does not know (${JSON.stringify(start.supervisor)}); it knows ${
            JSON.stringify(Object.keys(supervisors ?? {}))
          }`
        })
      )
    }
    return Effect.succeed(supervisor)
  })

/** A supervised session's task: its prompt, which is text (an entry known from the store alone has none). */
const taskOf = (start: StartOptions): Effect.Effect<string | undefined, ConfigError> =>
  typeof start.prompt === "string"
    ? Effect.succeed(start.prompt)
    : start.prompt.length === 0
    ? Effect.succeed(undefined)
    : Effect.fail(new ConfigError({ field: "prompt", rule: "a supervised session's task is text, not messages" }))

/**
 * A checkpoint one of the layer's supervisors runs, which a session started without it must not resume in the
 * plain loop: `ConfigError`, to start it again with its supervisor.
 */
const plainOnly = <R>(registry: Registry<R>, sessionId: string) =>
  Effect.gen(function*() {
    const supervisors = Object.values(registry.options.supervisors ?? {})
    if (supervisors.length === 0) return
    const store = Context.get(registry.services, CheckpointStore.CheckpointStore)
    const checkpoint = yield* Effect.option(store.load(sessionId))
    if (Option.isSome(checkpoint) && supervisors.some((supervisor) => supervisor.owns(checkpoint.value))) {
      return yield* new ConfigError({
        field: "supervisor",
        rule: `session ${sessionId} is a supervised run's: start it again with its supervisor`
      })
    }
  })

/**
 * Runs the session with `steering`, in the layer's scope: opened (started, resumed, or its stored result) or
 * resumed. Called with the session's lock held.
 */
const launch = <R>(registry: Registry<R>, entry: Entry, steering: Steering.Service, resume: boolean) =>
  Effect.gen(function*() {
    const { options } = registry
    const state = named(entry.start)
    const common = {
      plugins: [...(options.plugins ?? []), Hooks.plugin({ name: sessionsKey, onEvent: record(registry, entry), state })],
      steering,
      name: options.name,
      output: yield* outputOf(registry, entry.start),
      outputRetries: options.outputRetries,
      outputMode: options.outputMode,
      agents: options.agents,
      // on resume, over the saved config (a session known from the store alone gives none: the saved one)
      config: entry.start.config
    }
    const supervisor = yield* supervisorOf(registry, entry.start)
    const run = supervisor !== undefined
      ? supervisor.run({
        ...common,
        sessionId: entry.sessionId,
        task: resume ? undefined : yield* taskOf(entry.start),
        system: entry.start.system,
        // the names the session was started with, in its worker's checkpoints too
        plugins: [...(options.plugins ?? []), Hooks.plugin({ name: sessionsKey, state })],
        onEvent: record(registry, entry)
      })
      : Effect.andThen(
        plainOnly(registry, entry.sessionId),
        resume
          ? Session.resume(entry.sessionId, common)
          : Session.open(entry.sessionId, { ...common, prompt: entry.start.prompt, system: entry.start.system })
      )
    const since = entry.seq
    entry.steering = steering
    entry.silent = undefined
    entry.run = yield* run.pipe(
      // inside the layer's context: an interactive handle the app gave does not hide the session's own
      Effect.provideService(Approvals.Approvals, registry.policy ?? entry.approvals),
      Effect.provideContext(registry.services),
      // however it ends, interrupted too
      Effect.onExit((exit) => entry.lock.withPermit(ended(registry, entry, steering, since, exit))),
      // its ending is published (or kept as `silent`): that is where `result` reads it
      Effect.ignore,
      Effect.forkIn(registry.scope, { startImmediately: true })
    )
  })

/**
 * The end of a run, under the session's lock: nothing was queued to it nor a run started meanwhile, so what
 * its handle still holds came too late for it, and goes to the next run (as follow-ups).
 */
const ended = <R>(
  registry: Registry<R>,
  entry: Entry,
  steering: Steering.Service,
  since: number,
  exit: Exit.Exit<RunState.RunResult, AgentError | CheckpointStore.CheckpointError>
): Effect.Effect<void> =>
  Effect.gen(function*() {
    entry.run = undefined
    entry.ending = true
    const interrupted = Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)
    if (!interrupted && !entry.endings.some((ending) => ending.seq > since)) entry.silent = exit
    // An interrupted run's queue goes with it. What a cancelled run left in its handle came after its last take
    // (what it took waits in its state): a follow-up sent as it was ending, which the next run takes.
    if (interrupted) return
    const leftover = [...yield* steering.takeSteering, ...yield* steering.takeFollowUps]
    if (leftover.length === 0) return
    const next = yield* Steering.make()
    // They fit: they came from a queue of the same bounds.
    for (const message of leftover) yield* Effect.orDie(next.followUp(message))
    yield* Effect.ignore(launch(registry, entry, next, true))
  }).pipe(Effect.ensuring(Effect.sync(() => {
    entry.ending = false
    // woken once the next run (if any) is launched: a waiting `result` never sees the gap between the two
    wake(entry)
  })))

/** Whether a watcher of the entry has yet to read its last event. */
const unread = (entry: Entry): boolean => {
  for (const watcher of entry.watchers) if (watcher.read < entry.seq) return true
  return false
}

/** A new entry, known from now on; past `maxSessions`, the oldest whose run has ended is forgotten. */
const remember = <R>(registry: Registry<R>, start: StartOptions) =>
  Effect.gen(function*() {
    const entry: Entry = {
      sessionId: start.sessionId,
      start,
      approvals: yield* Approvals.interactive(),
      lock: Semaphore.makeUnsafe(1),
      log: [],
      endings: [],
      seq: registry.issued,
      changed: undefined,
      steering: yield* Steering.make(),
      run: undefined,
      ending: false,
      silent: undefined,
      watchers: new Set(),
      drained: undefined
    }
    const { entries } = registry
    entries.set(start.sessionId, entry)
    // a watcher of a forgotten session looks whether this is it
    const arrival = registry.arrival
    if (arrival !== undefined) {
      registry.arrival = undefined
      Deferred.doneUnsafe(arrival, Exit.void)
    }
    if (entries.size > registry.maxSessions) {
      for (const [sessionId, known] of entries) {
        // one whose watchers have yet to read its last events stays: they read its log
        if (known.run === undefined && !known.ending && !unread(known) && known !== entry) {
          entries.delete(sessionId)
          // its watchers wait for the entry that takes it up again
          wake(known)
          break
        }
      }
    }
    return entry
  })

/** The session's entry: started here, or held by the store from an earlier process (else `CheckpointMissing`). */
const entryOf = <R>(registry: Registry<R>, sessionId: string) =>
  Effect.gen(function*() {
    yield* SessionIdRule.validate(sessionId)
    const known = registry.entries.get(sessionId)
    if (known !== undefined) return known
    const stored = yield* Context.get(registry.services, CheckpointStore.CheckpointStore).load(sessionId)
    // the typed output and the supervisor it was started with, as its checkpoint keeps their names
    const names = decodeNames(stored.state.pluginState[sessionsKey])
    return registry.entries.get(sessionId) ?? (yield* remember(registry, { sessionId, prompt: [], ...names }))
  })

/**
 * Opens the session unless a run of it is in flight (then queues what the start gives to it). Called with its
 * lock held.
 */
const open = <R>(registry: Registry<R>, entry: Entry, given?: Pick<StartOptions, "steer" | "followUp" | "resume">) =>
  Effect.gen(function*() {
    const queue = (steering: Steering.Service) =>
      Effect.gen(function*() {
        if (given?.steer !== undefined) yield* steering.steer(given.steer)
        if (given?.followUp !== undefined) yield* steering.followUp(given.followUp)
      })
    if (entry.run !== undefined) return yield* queue(entry.steering)
    const steering = yield* Steering.make()
    yield* queue(steering)
    yield* launch(registry, entry, steering, given?.resume === true)
  })

const start = <R>(registry: Registry<R>) => (options: StartOptions): Effect.Effect<void, SessionsError> =>
  Effect.gen(function*() {
    yield* SessionIdRule.validate(options.sessionId)
    yield* outputOf(registry, options)
    if ((yield* supervisorOf(registry, options)) !== undefined) yield* taskOf(options)
    const entry = registry.entries.get(options.sessionId) ?? (yield* remember(registry, options))
    yield* entry.lock.withPermit(Effect.suspend(() => {
      // Known already (read before its start, or ended): the session goes on as this start says (its output,
      // its supervisor, its config); a start that joins a run in flight changes nothing of it.
      if (entry.run === undefined) entry.start = options
      return open(registry, entry, options)
    }))
  })

/** Queues a message to the run in flight, or starts the next run with it (as a follow-up). */
const send = <R>(registry: Registry<R>, kind: "steer" | "followUp") =>
(sessionId: string, message: string | Message.Message) =>
  Effect.flatMap(entryOf(registry, sessionId), (entry) =>
    entry.lock.withPermit(Effect.gen(function*() {
      if (entry.run !== undefined) {
        return yield* kind === "steer" ? entry.steering.steer(message) : entry.steering.followUp(message)
      }
      const next = yield* Steering.make()
      yield* next.followUp(message)
      yield* launch(registry, entry, next, true)
    })))

/** The events of `log` numbered above `after` (the log is in order: the newest are read from its end). */
const newer = (log: ReadonlyArray<Published>, after: number): ReadonlyArray<Published> => {
  let first = log.length
  while (first > 0 && log[first - 1]!.seq > after) first--
  return first === log.length ? [] : log.slice(first)
}

/**
 * A session's events as they come. The watcher is registered with the session while the stream runs: what it
 * has not read is kept for it (the run waits when it lags too far), and the session is not forgotten while it
 * has events the watcher has yet to read. Forgotten once it has read them all (past `maxSessions`), the watcher
 * waits for the session to be taken up again, and goes on with it.
 */
const watch = <R>(registry: Registry<R>) => (sessionId: string, after?: number): Stream.Stream<Published, SessionsError> =>
  Stream.unwrap(Effect.gen(function*() {
    let entry = yield* entryOf(registry, sessionId)
    const watcher = { read: position(after) }
    yield* Effect.acquireRelease(
      Effect.sync(() => entry.watchers.add(watcher)),
      () =>
        Effect.sync(() => {
          entry.watchers.delete(watcher)
          readOn(entry)
        })
    )
    /** The session's events after `read`, once there are any. */
    const next = (read: number) =>
      Effect.gen(function*() {
        watcher.read = read
        readOn(entry)
        while (true) {
          const current = registry.entries.get(sessionId)
          if (current === undefined) {
            // forgotten: until an entry is made again (events go on above the numbers it had)
            yield* Deferred.await(registry.arrival ??= Deferred.makeUnsafe<void>())
            continue
          }
          if (current !== entry) {
            entry.watchers.delete(watcher)
            entry = current
            entry.watchers.add(watcher)
          }
          const changed = entry.changed ??= Deferred.makeUnsafe<void>()
          const fresh = newer(entry.log, read)
          if (fresh.length > 0) return [fresh, Option.some(fresh[fresh.length - 1]!.seq)] as const
          yield* Deferred.await(changed)
        }
      })
    return Stream.paginate(watcher.read, next)
  }))

const result = <R>(registry: Registry<R>) =>
(sessionId: string, after?: number): Effect.Effect<RunState.RunResult, AgentError | SessionsError> =>
  Effect.flatMap(entryOf(registry, sessionId), (entry) =>
    Effect.gen(function*() {
      const from = position(after)
      // Known here from the store alone (an earlier process, or forgotten past `maxSessions`): a finished
      // session answers its stored result (opening it runs nothing); an unfinished one waits for a start.
      if (entry.run === undefined && entry.silent === undefined && !entry.endings.some(({ seq }) => seq > from)) {
        const checkpoint = yield* Context.get(registry.services, CheckpointStore.CheckpointStore).load(sessionId)
        if (checkpoint.finished !== undefined) yield* entry.lock.withPermit(open(registry, entry))
      }
      while (true) {
        const changed = entry.changed ??= Deferred.makeUnsafe<void>()
        const ending = entry.endings.find(({ seq }) => seq > from)
        if (ending !== undefined) return yield* resultOf(ending.event)
        // not while a run's end is handled: the next run may be launched with what was left queued
        if (entry.run === undefined && !entry.ending && entry.silent !== undefined) return yield* entry.silent
        yield* Deferred.await(changed)
      }
    }))

/**
 * Sessions in this process, each a `Session` (checkpoints in the
 * `CheckpointStore` service), with the run's requirements. Sessions run in
 * the layer's scope: closing it interrupts them (their checkpoints keep them
 * for a later start). A session's events are kept in memory: a session
 * resumed by a new process publishes from its resume on. As on the durable
 * layer, an `Approvals` policy provided to the layer decides the calls that
 * need approval; without one (or with an interactive handle) they wait for
 * `approve`.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { CheckpointStore, Sessions } from "effect-agent/session"
 *
 * // the model and the tools are the app's layers, as for Agent.run
 * const sessions = Sessions.layer().pipe(Layer.provide(CheckpointStore.layerFileSystem(".sessions")))
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <R = never>(
  options: Options<R> = {}
): Layer.Layer<Sessions, never, Session.Requirements | R> =>
  Layer.effect(
    Sessions,
    Effect.gen(function*() {
      const provided = yield* Effect.serviceOption(Approvals.Approvals)
      const registry: Registry<R> = {
        options,
        scope: yield* Effect.scope,
        services: yield* Effect.context<Session.Requirements | R>(),
        policy: Option.isSome(provided) && !Approvals.isInteractive(provided.value) ? provided.value : undefined,
        entries: new Map(),
        maxEvents: Math.max(1, Math.floor(options.maxEvents ?? 10_000)),
        maxSessions: Math.max(1, Math.floor(options.maxSessions ?? 1_000)),
        issued: 0,
        arrival: undefined
      }
      const entry = (sessionId: string) => entryOf(registry, sessionId)
      return Sessions.of({
        start: start(registry),
        steer: send(registry, "steer"),
        followUp: send(registry, "followUp"),
        approve: (sessionId, approvalId, decision) =>
          Effect.flatMap(entry(sessionId), ({ approvals }) =>
            decision.approved ? approvals.approve(approvalId) : approvals.deny(approvalId, decision.reason)),
        interrupt: (sessionId) =>
          Effect.flatMap(entry(sessionId), ({ run }) => run === undefined ? Effect.void : Fiber.interrupt(run)),
        pending: (sessionId) =>
          Effect.flatMap(entry(sessionId), (known) =>
            Effect.gen(function*() {
              if (known.run === undefined) return { approvals: [] }
              const { approvals } = known
              const [plan, turn] = [yield* approvals.pendingPlan, yield* approvals.pendingTurn]
              return {
                approvals: yield* approvals.pending,
                ...(plan === undefined ? {} : { plan }),
                ...(turn === undefined ? {} : { turn })
              }
            })),
        decidePlan: (sessionId, iteration, decision) =>
          Effect.flatMap(entry(sessionId), ({ approvals, run }) =>
            Effect.gen(function*() {
              const plan = run === undefined ? undefined : yield* approvals.pendingPlan
              return plan !== undefined && plan.iteration === iteration && (yield* approvals.decidePlanWith(decision))
            })),
        decideTurn: (sessionId, turn, decision) =>
          Effect.flatMap(entry(sessionId), ({ approvals, run }) =>
            Effect.gen(function*() {
              const waiting = run === undefined ? undefined : yield* approvals.pendingTurn
              return waiting !== undefined && waiting.turn === turn && (yield* approvals.decideTurnWith(decision))
            })),
        cancel: (sessionId, reason) =>
          Effect.flatMap(entry(sessionId), (known) =>
            known.lock.withPermit(Effect.suspend(() =>
              known.run === undefined ? Effect.void : known.steering.cancel(reason ?? "cancelled")
            ))),
        events: (sessionId, after) =>
          Effect.map(entry(sessionId), ({ log }) => {
            const kept = log.length > registry.maxEvents ? log.slice(log.length - registry.maxEvents) : log
            return newer(kept, position(after))
          }),
        watch: watch(registry),
        result: result(registry)
      })
    })
  )
