/**
 * Every event of a run, as one tagged union Schema. The events plugins observe
 * (`Plugin.onEvent`), the events `Agent.runStream` returns and the events a
 * trajectory persists are the same values. Each carries the run id, the turn
 * (0 before the first model call, then the turn being run) and a timestamp
 * (epoch milliseconds from effect's `Clock`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { AgentError } from "./AgentError.ts"
import * as Message from "./Message.ts"
import * as Outcome from "./Outcome.ts"
import * as RunState from "./RunState.ts"

const base = {
  runId: Schema.String,
  turn: Schema.Finite,
  timestamp: Schema.Finite
}

/**
 * One streamed piece of an assistant message: a text or reasoning delta for
 * the content part at `index`, or a delta of a tool call's JSON arguments.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Delta = Schema.Union([
  Schema.Struct({ type: Schema.Literal("text"), index: Schema.Finite, delta: Schema.String }),
  Schema.Struct({ type: Schema.Literal("reasoning"), index: Schema.Finite, delta: Schema.String }),
  Schema.Struct({
    type: Schema.Literal("toolCall"),
    id: Schema.String,
    name: Schema.String,
    delta: Schema.String
  })
])
/**
 * @since 0.1.0
 * @category models
 */
export type Delta = typeof Delta.Type

/**
 * Running totals and limits after a turn.
 *
 * @since 0.1.0
 * @category schemas
 */
export const BudgetFigures = Schema.Struct({
  turns: Schema.Finite,
  usage: Message.Usage,
  elapsedMs: Schema.Finite,
  limits: Schema.Struct({
    turns: Schema.NullOr(Schema.Finite),
    tokens: Schema.NullOr(Schema.Finite),
    inputTokens: Schema.NullOr(Schema.Finite),
    outputTokens: Schema.NullOr(Schema.Finite),
    costUsd: Schema.NullOr(Schema.Finite),
    wallClock: Schema.NullOr(Schema.Finite)
  })
})
/**
 * @since 0.1.0
 * @category models
 */
export type BudgetFigures = typeof BudgetFigures.Type

const AgentEndFields = Schema.TaggedStruct("AgentEnd", {
  ...base,
  outcome: Schema.optionalKey(Outcome.Outcome),
  result: Schema.optionalKey(RunState.RunResult),
  error: Schema.optionalKey(AgentError),
  defect: Schema.optionalKey(Schema.String)
})

type AgentEndBase = Omit<typeof AgentEndFields.Type, "outcome" | "result" | "error" | "defect">

/**
 * How a run ended, as its last event says it. Exactly one of three:
 *
 * - the loop chose the ending: `outcome` and `result` (the `RunResult` the
 *   run returns; an interrupted run's outcome is `Cancelled`);
 * - the run failed: `error`, the `AgentError` it fails with (carrying the
 *   run's state, see `AgentError.ModelError`);
 * - the run died of a defect (a bug): `defect`, what it was.
 *
 * Tell them apart with `event.outcome !== undefined`, `event.error !==
 * undefined` or `event.defect !== undefined`; the fields of the others are
 * absent.
 *
 * @since 0.1.0
 * @category models
 */
export type AgentEnd =
  | AgentEndBase & {
    readonly outcome: Outcome.Outcome
    readonly result: RunState.RunResult
    readonly error?: never
    readonly defect?: never
  }
  | AgentEndBase & {
    readonly error: AgentError
    readonly outcome?: never
    readonly result?: never
    readonly defect?: never
  }
  | AgentEndBase & {
    readonly defect: string
    readonly outcome?: never
    readonly result?: never
    readonly error?: never
  }

const isAgentEnd = (event: typeof AgentEndFields.Type): event is AgentEnd =>
  event.outcome !== undefined
    ? event.result !== undefined && event.error === undefined && event.defect === undefined
    : event.result === undefined && (event.error === undefined) !== (event.defect === undefined)

/**
 * The Schema of the {@link AgentEnd} event.
 *
 * @since 0.1.0
 * @category schemas
 */
export const AgentEnd = AgentEndFields.pipe(Schema.refine(isAgentEnd, {
  expected: "an AgentEnd with an outcome and a result, or an error, or a defect"
}))

/**
 * The events of a run:
 *
 * - `AgentStart`: the run begins, with the messages it was given.
 * - `TurnStart`: a model call is about to be made.
 * - `MessageStart` / `MessageUpdate` / `MessageEnd`: an assistant message
 *   streams; `MessageEnd` also marks each user, system or custom message
 *   appended to the transcript (tool results come with `ToolExecutionEnd`).
 * - `ToolExecutionStart` / `ToolExecutionUpdate` / `ToolExecutionEnd`: a tool
 *   call runs, reports preliminary results, ends (every call gets an end, even
 *   one that never started: blocked, denied, unknown, invalid).
 * - `ApprovalRequested` / `ApprovalResolved`: a call waits for a decision.
 * - `SteeringDelivered` / `FollowUpDelivered`: queued messages entered the run.
 * - `WrapUpRequested`: the model was asked to finish (turn limit, budget).
 * - `GuardTripped`: a guard warned or stopped the run, with its figures.
 * - `ContextTransformed`: a `transformContext` hook changed the request (with
 *   its token estimates, when it reports them).
 * - `BudgetSnapshot`: totals and limits after a turn.
 * - `TurnEnd`: the assistant message and its tool results.
 * - `CheckpointSaved` / `SessionResumed`: durable sessions.
 * - `AgentEnd`: always the last event: the outcome and the result, or the
 *   error, or the defect (see {@link AgentEnd}).
 *
 * @since 0.1.0
 * @category schemas
 */
export const AgentEvent = Schema.Union([
  Schema.TaggedStruct("AgentStart", { ...base, messages: Message.Transcript }),
  Schema.TaggedStruct("TurnStart", { ...base }),
  Schema.TaggedStruct("MessageStart", { ...base, role: Schema.Literals(["assistant", "user", "system", "custom"]) }),
  Schema.TaggedStruct("MessageUpdate", { ...base, delta: Delta }),
  Schema.TaggedStruct("MessageEnd", { ...base, message: Message.Message }),
  Schema.TaggedStruct("ToolExecutionStart", {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    params: Schema.Unknown
  }),
  Schema.TaggedStruct("ToolExecutionUpdate", {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    partial: Schema.Unknown
  }),
  Schema.TaggedStruct("ToolExecutionEnd", {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    result: Message.ToolResultMessage,
    durationMs: Schema.Finite,
    terminate: Schema.Boolean
  }),
  Schema.TaggedStruct("ApprovalRequested", {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    params: Schema.Unknown,
    reason: Schema.optionalKey(Schema.String)
  }),
  Schema.TaggedStruct("ApprovalResolved", {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    approved: Schema.Boolean,
    reason: Schema.optionalKey(Schema.String)
  }),
  Schema.TaggedStruct("SteeringDelivered", { ...base, messages: Message.Transcript }),
  Schema.TaggedStruct("FollowUpDelivered", { ...base, messages: Message.Transcript }),
  Schema.TaggedStruct("WrapUpRequested", { ...base, source: Schema.String, message: Schema.String }),
  Schema.TaggedStruct("GuardTripped", {
    ...base,
    guard: Schema.String,
    action: Schema.Literals(["warn", "stop"]),
    detail: Schema.String,
    figures: Schema.Record(Schema.String, Schema.Finite)
  }),
  Schema.TaggedStruct("ContextTransformed", {
    ...base,
    plugin: Schema.String,
    messagesBefore: Schema.Finite,
    messagesAfter: Schema.Finite,
    tokensBefore: Schema.optionalKey(Schema.Finite),
    tokensAfter: Schema.optionalKey(Schema.Finite)
  }),
  Schema.TaggedStruct("BudgetSnapshot", { ...base, figures: BudgetFigures }),
  Schema.TaggedStruct("TurnEnd", {
    ...base,
    message: Message.AssistantMessage,
    toolResults: Schema.Array(Message.ToolResultMessage)
  }),
  Schema.TaggedStruct("CheckpointSaved", { ...base, sessionId: Schema.String, bytes: Schema.Finite }),
  Schema.TaggedStruct("SessionResumed", {
    ...base,
    sessionId: Schema.String,
    resumedAtTurn: Schema.Finite,
    restored: Schema.Struct({
      messages: Schema.Finite,
      turns: Schema.Finite,
      usage: Message.Usage,
      elapsedMs: Schema.Finite,
      steering: Schema.Finite,
      followUps: Schema.Finite,
      pendingApprovals: Schema.Finite
    })
  }),
  AgentEnd
]).pipe(Schema.toTaggedUnion("_tag"))
/**
 * @since 0.1.0
 * @category models
 */
export type AgentEvent = typeof AgentEvent.Type

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never

/**
 * An event without the fields the loop fills in (run id, turn, timestamp):
 * what a plugin passes to `emit`.
 *
 * @since 0.1.0
 * @category options
 */
export type Input = DistributiveOmit<AgentEvent, "runId" | "turn" | "timestamp">

/**
 * The tags of the events.
 *
 * @since 0.1.0
 * @category models
 */
export type Tag = AgentEvent["_tag"]

/**
 * The event with a given tag.
 *
 * @since 0.1.0
 * @category models
 */
export type Of<T extends Tag> = Extract<AgentEvent, { readonly _tag: T }>

/**
 * The events' JSON codec: what trajectories persist (durations, errors and
 * every other value in their JSON form).
 *
 * @since 0.1.0
 * @category schemas
 */
export const AgentEventJson = Schema.toCodecJson(AgentEvent)

/**
 * Encodes an event to its JSON form.
 *
 * @since 0.1.0
 * @category codecs
 */
export const encodeJson = Schema.encodeSync(AgentEventJson)

/**
 * Decodes an event from its JSON form.
 *
 * @since 0.1.0
 * @category codecs
 */
export const decodeJson = Schema.decodeUnknownEffect(AgentEventJson)
