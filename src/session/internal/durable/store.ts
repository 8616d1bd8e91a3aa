/**
 * What a durable session keeps beside the workflow engine's own storage: the
 * inbox (steering, follow-ups and cancels), the intent records of calls that must not
 * run twice, the decision kept for each approval, the published events, what
 * each idle session waits on, and the sessions there are (for the supervisor
 * and the reaper).
 *
 * @internal
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as AgentEvent from "../../../AgentEvent.ts"
import type * as Approvals from "../../../Approvals.ts"
import * as Message from "../../../Message.ts"
import * as Steering from "../../../Steering.ts"
import type { InvalidSessionId } from "../errors.ts"
import * as SessionId from "../sessionId.ts"
import type { Entry } from "./outbox.ts"

/**
 * The name of the sessions' workflow (`DurableSession.SessionWorkflow`), whose idempotency key is the session id.
 *
 * @internal
 */
export const workflowName = "effect-agent/DurableSession"

/**
 * A storage operation failed.
 *
 * @since 0.1.0
 * @category errors
 */
export class StoreError extends Schema.TaggedError<StoreError>()("DurableStoreError", {
  operation: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `durable session store: ${this.operation} failed: ${this.detail}`
  }
}

/**
 * An approver's decision, as the store keeps it and the deferred of a call carries it.
 *
 * @internal
 */
export const Decision = Schema.Union([
  Schema.Struct({ approved: Schema.Literal(true) }),
  // `cancelled`: the denial of a call the session's cancel found waiting, with the cancel's reason
  Schema.Struct({
    approved: Schema.Literal(false),
    reason: Schema.String,
    cancelled: Schema.optionalKey(Schema.String)
  })
])

/**
 * A supervised run's question waiting for the operator (`Approvals.PlanRequest`, `Approvals.TurnRequest`), as
 * the store keeps it (a typed plan's value as JSON: one that is no JSON is left out).
 *
 * @internal
 */
export const Question = Schema.Union([
  Schema.Struct({
    plan: Schema.Struct({
      runId: Schema.String,
      plan: Schema.String,
      iteration: Schema.Int,
      value: Schema.optionalKey(Schema.Unknown)
    })
  }),
  Schema.Struct({ turn: Schema.Struct({ runId: Schema.String, turn: Schema.Int, feedback: Schema.String }) })
])

/** @internal */
export type Question = typeof Question.Type

/**
 * A decision on a plan (`Approvals.PlanDecision`), as the store keeps it.
 *
 * @internal
 */
export const PlanDecision = Schema.Union([
  Schema.Struct({ _tag: Schema.Literal("Approve") }),
  Schema.Struct({ _tag: Schema.Literal("Refine"), notes: Schema.String }),
  Schema.Struct({ _tag: Schema.Literal("Reject"), notes: Schema.String })
])

/**
 * A decision on a turn's feedback (`Approvals.TurnDecision`), as the store keeps it.
 *
 * @internal
 */
export const TurnDecision = Schema.Union([
  Schema.Struct({ _tag: Schema.Literal("Approve") }),
  Schema.Struct({ _tag: Schema.Literal("Replace"), feedback: Schema.String }),
  Schema.Struct({ _tag: Schema.Literal("Interrupt") })
])

/**
 * The operator's answer to a {@link Question} (`Approvals.PlanDecision`, `Approvals.TurnDecision`).
 *
 * @internal
 */
export const Answer = Schema.Union([
  Schema.Struct({ plan: PlanDecision }),
  Schema.Struct({ turn: TurnDecision }),
  // the session's run was cancelled while the question waited: it ends `Cancelled` with the reason
  Schema.Struct({ cancelled: Schema.String })
])

/** @internal */
export type Answer = typeof Answer.Type

/**
 * What {@link Service.claimDecision} answers: whether this decision was kept
 * (the first for its approval), and the decision kept (this one, or the first).
 *
 * @since 0.1.0
 * @category models
 */
export interface Claimed {
  readonly claimed: boolean
  readonly decision: Approvals.Decision
}

/**
 * The kinds of message the inbox holds: steering, follow-ups, and cancels
 * (a cancel's reason as the text of a user message, see {@link Service.appendCancel}).
 *
 * @since 0.1.0
 * @category models
 */
export type InboxKind = "steering" | "followUp" | "cancel"

/**
 * The kinds of message a client queues with {@link Service.appendInbox}.
 *
 * @since 0.1.0
 * @category models
 */
export type MessageKind = Exclude<InboxKind, "cancel">

/**
 * The longest reason a cancel keeps, in characters: a longer one is cut to it.
 *
 * @internal
 */
export const maxCancelReason = 4_096

/**
 * A cancel's reason as the store keeps it: cut to {@link maxCancelReason}.
 *
 * @internal
 */
export const cancelReason = (reason: string): string =>
  reason.length > maxCancelReason ? `${reason.slice(0, maxCancelReason - 1)}…` : reason

/**
 * A cancel as the inbox keeps it: its reason ({@link cancelReason}) as a user message's text.
 *
 * @internal
 */
export const cancelMessage = (reason: string): Message.Message => Message.user(cancelReason(reason))

/**
 * A message in the inbox, with its place in the session's inbox.
 *
 * @since 0.1.0
 * @category models
 */
export interface InboxEntry {
  readonly seq: number
  readonly message: Message.Message
}

/**
 * A published event: `id` identifies it within its session (a second publish
 * of it is ignored); `seq` is its place in the session's events, in the
 * order they were first published.
 *
 * @since 0.1.0
 * @category models
 */
export interface Published {
  readonly seq: number
  readonly id: string
  readonly event: AgentEvent.AgentEvent
}

/**
 * A session's status as the store records it.
 *
 * @since 0.1.0
 * @category models
 */
export type Status = "submitted" | "running" | "finished"

/**
 * A session the store knows.
 *
 * @since 0.1.0
 * @category models
 */
export interface SessionRecord {
  readonly sessionId: string
  /**
   * `submitted`: a client recorded it before it submitted its workflow, which has not begun (or whose submit was
   * lost: the client died, the database went away); `running`: its workflow began; `finished`.
   */
  readonly status: Status
  /** When it was registered or last changed status, in ms since the epoch. */
  readonly updatedAt: number
  /** While `submitted`: the workflow's payload as JSON (`DurableSession.Payload`), to submit it again. */
  readonly payload?: string | undefined
}

/**
 * The store's operations. Each that takes a session id refuses one that
 * breaks the rule (`CheckpointStore.SessionId`) with `InvalidSessionId`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /**
   * Records a session a client is about to submit, with its payload (JSON), unless the store knows it already:
   * a submit that is lost leaves it `submitted`, and the supervisor submits it again.
   */
  readonly submit: (sessionId: string, at: number, payload: string) => Effect.Effect<void, StoreError | InvalidSessionId>
  /** Records a session as running (its workflow began); a finished one stays finished. */
  readonly register: (sessionId: string, at: number) => Effect.Effect<void, StoreError | InvalidSessionId>
  /** Records a session as finished. */
  readonly finish: (sessionId: string, at: number) => Effect.Effect<void, StoreError | InvalidSessionId>
  readonly sessions: Effect.Effect<ReadonlyArray<SessionRecord>, StoreError>
  /** The session the store knows under this id, if any. */
  readonly session: (sessionId: string) => Effect.Effect<SessionRecord | undefined, StoreError | InvalidSessionId>
  /**
   * Appends to a session's inbox; answers the message's place. What waits unread is bounded as a run's
   * `Steering` is (`Steering.defaultLimits`: both kinds together): past it, `SteeringFull` and nothing kept.
   */
  readonly appendInbox: (
    sessionId: string,
    kind: MessageKind,
    message: Message.Message
  ) => Effect.Effect<number, StoreError | InvalidSessionId | Steering.SteeringFull>
  /**
   * Appends a cancel of the session's run in flight (its reason cut to {@link maxCancelReason}), read by the
   * run's next steering take. Answers `false`, keeping nothing, when the session has no run a cancel could
   * reach: the store does not know it, it finished, or it waits idle for a follow-up (see {@link setWaiting}):
   * a cancel kept then would cancel the session's next run. Atomic with `setWaiting`: a cancel kept before a
   * session records its idle wait is one the session's idle take reads (and drops). A session holds one cancel
   * at most (until its idle take drops it): a cancel while one is held keeps nothing and answers `true`.
   */
  readonly appendCancel: (sessionId: string, reason: string) => Effect.Effect<boolean, StoreError | InvalidSessionId>
  /**
   * The messages of a kind after `after`, in order. `after` is what the session has read of that kind (the
   * reads before it were activities, whose results are recorded): those are dropped from the inbox.
   */
  readonly readInbox: (
    sessionId: string,
    kind: InboxKind,
    after: number
  ) => Effect.Effect<ReadonlyArray<InboxEntry>, StoreError | InvalidSessionId>
  /**
   * A steering take's read in one round trip, where the store offers it (without it, the take reads the cancels,
   * then the steering, with `readInbox`): the cancels after `after.cancel` and, when there is none, the steering
   * messages after `after.steering`, each read as `readInbox` reads it (when a cancel waits, no steering is read);
   * and `head`, the last place in the session's inbox when it read (`0`: none yet), if the store keeps one.
   */
  readonly readSteering?: (
    sessionId: string,
    after: { readonly cancel: number; readonly steering: number }
  ) => Effect.Effect<
    {
      readonly cancels: ReadonlyArray<InboxEntry>
      readonly steering: ReadonlyArray<InboxEntry>
      readonly head?: number | undefined
    },
    StoreError | InvalidSessionId
  >
  /** Records the idle wait a session is in (`undefined`: none); atomic with {@link appendCancel}. */
  readonly setWaiting: (sessionId: string, wait: number | undefined) => Effect.Effect<void, StoreError | InvalidSessionId>
  readonly waiting: (sessionId: string) => Effect.Effect<number | undefined, StoreError | InvalidSessionId>
  /** Writes an intent record: `true` when this call wrote it, `false` when it was there already. */
  readonly claimIntent: (sessionId: string, key: string) => Effect.Effect<boolean, StoreError | InvalidSessionId>
  /**
   * Keeps the first decision for an approval (by its key, `Body.approvalKey`): answers whether this call kept
   * `decision`, and the decision kept. Atomic: of two claims of one key, exactly one keeps its decision.
   */
  readonly claimDecision: (
    sessionId: string,
    key: string,
    decision: Approvals.Decision
  ) => Effect.Effect<Claimed, StoreError | InvalidSessionId>
  /** Records a question asked under `key` (once: asking it again changes nothing). */
  readonly ask: (sessionId: string, key: string, question: Question) => Effect.Effect<void, StoreError | InvalidSessionId>
  /** The questions asked and not answered (nor closed), in the order they were asked. */
  readonly questions: (
    sessionId: string
  ) => Effect.Effect<ReadonlyArray<{ readonly key: string; readonly question: Question }>, StoreError | InvalidSessionId>
  /**
   * Keeps the first answer to the question asked under `key`: whether this call kept `answer`, and the answer
   * kept; `undefined` when no such question was asked (or it was closed unanswered). Atomic, as `claimDecision`.
   */
  readonly answer: (
    sessionId: string,
    key: string,
    answer: Answer
  ) => Effect.Effect<{ readonly claimed: boolean; readonly answer: Answer } | undefined, StoreError | InvalidSessionId>
  /** Closes the questions not answered (their run ended): none is answered any more. */
  readonly closeQuestions: (sessionId: string) => Effect.Effect<void, StoreError | InvalidSessionId>
  /** Stores published events, in order; an event whose id is stored already is kept as it was. */
  readonly publish: (sessionId: string, entries: ReadonlyArray<Entry>) => Effect.Effect<void, StoreError | InvalidSessionId>
  /** The published events whose `seq` is after `after` (`0`: all), in order. */
  readonly events: (sessionId: string, after: number) => Effect.Effect<ReadonlyArray<Published>, StoreError | InvalidSessionId>
  /** Deletes what the store holds for a session. */
  readonly forget: (sessionId: string) => Effect.Effect<void, StoreError | InvalidSessionId>
  /**
   * The database client this store writes through (the SQL store's `SqlClient`), if any: an engine on the same
   * client (`DurableSession.layerSqlEngine`) then writes a session's events in its own statements, with the
   * results of the activities that emitted them.
   */
  readonly database?: unknown
}

/**
 * The store service.
 *
 * @since 0.1.0
 * @category services
 */
export class Store extends Context.Service<Store, Service>()("effect-agent/DurableSession/Store") {}

/**
 * A store whose every operation on a session first checks its id: an id that
 * breaks the rule is refused with `InvalidSessionId`, and the store under it
 * never sees it. The layers wrap every store in it.
 *
 * @internal
 */
export const validated = (store: Service): Service => {
  const check = <A, E>(sessionId: string, effect: () => Effect.Effect<A, E>) =>
    Effect.flatMap(SessionId.validate(sessionId), effect)
  const readSteering = store.readSteering
  return {
    submit: (sessionId, at, payload) => check(sessionId, () => store.submit(sessionId, at, payload)),
    register: (sessionId, at) => check(sessionId, () => store.register(sessionId, at)),
    finish: (sessionId, at) => check(sessionId, () => store.finish(sessionId, at)),
    sessions: store.sessions,
    session: (sessionId) => check(sessionId, () => store.session(sessionId)),
    appendInbox: (sessionId, kind, message) => check(sessionId, () => store.appendInbox(sessionId, kind, message)),
    appendCancel: (sessionId, reason) => check(sessionId, () => store.appendCancel(sessionId, reason)),
    readInbox: (sessionId, kind, after) => check(sessionId, () => store.readInbox(sessionId, kind, after)),
    setWaiting: (sessionId, wait) => check(sessionId, () => store.setWaiting(sessionId, wait)),
    waiting: (sessionId) => check(sessionId, () => store.waiting(sessionId)),
    claimIntent: (sessionId, key) => check(sessionId, () => store.claimIntent(sessionId, key)),
    claimDecision: (sessionId, key, decision) => check(sessionId, () => store.claimDecision(sessionId, key, decision)),
    ask: (sessionId, key, question) => check(sessionId, () => store.ask(sessionId, key, question)),
    questions: (sessionId) => check(sessionId, () => store.questions(sessionId)),
    answer: (sessionId, key, answer) => check(sessionId, () => store.answer(sessionId, key, answer)),
    closeQuestions: (sessionId) => check(sessionId, () => store.closeQuestions(sessionId)),
    publish: (sessionId, entries) => check(sessionId, () => store.publish(sessionId, entries)),
    events: (sessionId, after) => check(sessionId, () => store.events(sessionId, after)),
    forget: (sessionId) => check(sessionId, () => store.forget(sessionId)),
    ...(store.database === undefined ? {} : { database: store.database }),
    ...(readSteering === undefined ? {} : {
      readSteering: (sessionId: string, after: { readonly cancel: number; readonly steering: number }) =>
        check(sessionId, () => readSteering(sessionId, after))
    })
  }
}

/**
 * The refusal of a message that would put what waits in a session's inbox
 * past `Steering.defaultLimits`, if it would.
 *
 * @internal
 */
export const inboxFull = (
  kind: MessageKind,
  queued: number,
  bytes: number,
  size: number
): Steering.SteeringFull | undefined => {
  const limits = Steering.defaultLimits
  return queued + 1 > limits.messages || bytes + size > limits.bytes
    ? new Steering.SteeringFull({ kind: kind === "steering" ? "steer" : "followUp", queued, bytes, size, limits })
    : undefined
}

/**
 * A store in memory: for tests and one-process engines.
 *
 * @internal
 */
export const makeMemory = (): Service => {
  const sessions = new Map<string, SessionRecord>()
  const inbox = new Map<string, {
    next: number
    entries: Array<InboxEntry & { readonly kind: InboxKind; readonly size: number }>
    /**
     * The last place read of each kind a client queues: what is at or before it no longer waits (it is dropped at
     * the next read). A cancel is bounded apart: one at most.
     */
    read: Record<MessageKind, number>
  }>()
  const waits = new Map<string, number>()
  const intents = new Map<string, Set<string>>()
  const decisions = new Map<string, Map<string, Approvals.Decision>>()
  const events = new Map<string, { readonly ids: Set<string>; readonly list: Array<Published> }>()
  /** By session, in the order asked: a question's answer, `null` while it waits, `undefined` once closed. */
  const asked = new Map<string, Map<string, { readonly question: Question; answer: Answer | null | undefined }>>()
  return {
    submit: (sessionId, at, payload) =>
      Effect.sync(() => {
        if (!sessions.has(sessionId)) sessions.set(sessionId, { sessionId, status: "submitted", updatedAt: at, payload })
      }),
    register: (sessionId, at) =>
      Effect.sync(() => {
        const known = sessions.get(sessionId)
        if (known === undefined || known.status === "submitted") {
          sessions.set(sessionId, { sessionId, status: "running", updatedAt: at })
        }
      }),
    finish: (sessionId, at) =>
      Effect.sync(() => void sessions.set(sessionId, { sessionId, status: "finished", updatedAt: at })),
    sessions: Effect.sync(() => Array.from(sessions.values())),
    session: (sessionId) => Effect.sync(() => sessions.get(sessionId)),
    appendInbox: (sessionId, kind, message) =>
      Effect.suspend(() => {
        const box = inbox.get(sessionId) ?? { next: 1, entries: [], read: { steering: 0, followUp: 0 } }
        inbox.set(sessionId, box)
        const size = Steering.sizeOf(message)
        const waiting = box.entries.filter((entry) => entry.kind !== "cancel" && entry.seq > box.read[entry.kind])
        const full = inboxFull(kind, waiting.length, waiting.reduce((sum, entry) => sum + entry.size, 0), size)
        if (full !== undefined) return Effect.fail(full)
        const seq = box.next++
        box.entries.push({ seq, kind, message, size })
        return Effect.succeed(seq)
      }),
    appendCancel: (sessionId, reason) =>
      Effect.sync(() => {
        const known = sessions.get(sessionId)
        if (known === undefined || known.status === "finished" || waits.has(sessionId)) return false
        const box = inbox.get(sessionId) ?? { next: 1, entries: [], read: { steering: 0, followUp: 0 } }
        inbox.set(sessionId, box)
        if (box.entries.some((entry) => entry.kind === "cancel")) return true
        const message = cancelMessage(reason)
        box.entries.push({ seq: box.next++, kind: "cancel", message, size: Steering.sizeOf(message) })
        return true
      }),
    readInbox: (sessionId, kind, after) =>
      Effect.sync(() => {
        const box = inbox.get(sessionId)
        if (box === undefined) return []
        box.entries = box.entries.filter((entry) => entry.kind !== kind || entry.seq > after)
        const read = box.entries.filter((entry) => entry.kind === kind).map(({ message, seq }) => ({ seq, message }))
        if (kind !== "cancel") box.read[kind] = Math.max(box.read[kind], read.at(-1)?.seq ?? 0)
        return read
      }),
    readSteering: (sessionId, after) =>
      Effect.sync(() => {
        const box = inbox.get(sessionId)
        if (box === undefined) return { cancels: [], steering: [], head: 0 }
        const head = box.next - 1
        const past = (kind: InboxKind, seq: number) => kind === "cancel" ? seq > after.cancel : kind !== "steering" || seq > after.steering
        box.entries = box.entries.filter((entry) => past(entry.kind, entry.seq))
        const cancels = box.entries.filter((entry) => entry.kind === "cancel").map(({ message, seq }) => ({ seq, message }))
        if (cancels.length > 0) return { cancels, steering: [], head }
        const steering = box.entries.filter((entry) => entry.kind === "steering").map(({ message, seq }) => ({ seq, message }))
        box.read.steering = Math.max(box.read.steering, steering.at(-1)?.seq ?? 0)
        return { cancels, steering, head }
      }),
    setWaiting: (sessionId, wait) =>
      Effect.sync(() => void (wait === undefined ? waits.delete(sessionId) : waits.set(sessionId, wait))),
    waiting: (sessionId) => Effect.sync(() => waits.get(sessionId)),
    claimIntent: (sessionId, key) =>
      Effect.sync(() => {
        const keys = intents.get(sessionId) ?? new Set<string>()
        intents.set(sessionId, keys)
        if (keys.has(key)) return false
        keys.add(key)
        return true
      }),
    claimDecision: (sessionId, key, decision) =>
      Effect.sync((): Claimed => {
        const kept = decisions.get(sessionId) ?? new Map<string, Approvals.Decision>()
        decisions.set(sessionId, kept)
        const first = kept.get(key)
        if (first !== undefined) return { claimed: false, decision: first }
        kept.set(key, decision)
        return { claimed: true, decision }
      }),
    ask: (sessionId, key, question) =>
      Effect.sync(() => {
        const questions = asked.get(sessionId) ?? new Map()
        asked.set(sessionId, questions)
        if (!questions.has(key)) questions.set(key, { question, answer: null })
      }),
    questions: (sessionId) =>
      Effect.sync(() =>
        Array.from(asked.get(sessionId) ?? [], ([key, { answer, question }]) => ({ key, question, answer }))
          .filter((entry) => entry.answer === null)
          .map(({ key, question }) => ({ key, question }))
      ),
    answer: (sessionId, key, answer) =>
      Effect.sync(() => {
        const question = asked.get(sessionId)?.get(key)
        if (question === undefined || question.answer === undefined) return undefined
        if (question.answer !== null) return { claimed: false, answer: question.answer }
        question.answer = answer
        return { claimed: true, answer }
      }),
    closeQuestions: (sessionId) =>
      Effect.sync(() => {
        for (const question of asked.get(sessionId)?.values() ?? []) {
          if (question.answer === null) question.answer = undefined
        }
      }),
    publish: (sessionId, entries) =>
      Effect.sync(() => {
        const stored = events.get(sessionId) ?? { ids: new Set<string>(), list: [] }
        events.set(sessionId, stored)
        for (const { event, id } of entries) {
          if (stored.ids.has(id)) continue
          stored.ids.add(id)
          stored.list.push({ seq: stored.list.length + 1, id, event })
        }
      }),
    events: (sessionId, after) =>
      Effect.sync(() =>
        (events.get(sessionId)?.list ?? []).filter((entry) => entry.seq > after)
      ),
    forget: (sessionId) =>
      Effect.sync(() => {
        sessions.delete(sessionId)
        inbox.delete(sessionId)
        waits.delete(sessionId)
        intents.delete(sessionId)
        decisions.delete(sessionId)
        asked.delete(sessionId)
        events.delete(sessionId)
      })
  }
}
