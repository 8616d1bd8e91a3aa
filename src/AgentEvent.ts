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
/** @since 0.1.0 */
export type Delta = typeof Delta.Type

/**
 * Running totals and limits after a turn.
 *
 * @since 0.1.0
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
/** @since 0.1.0 */
export type BudgetFigures = typeof BudgetFigures.Type

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
 * - `AgentEnd`: always the last event: the outcome and result, or the error.
 *
 * @since 0.1.0
 */
export const AgentEvent = Schema.TaggedUnion({
  AgentStart: { ...base, messages: Message.Transcript },
  TurnStart: { ...base },
  MessageStart: { ...base, role: Schema.Literals(["assistant", "user", "system", "custom"]) },
  MessageUpdate: { ...base, delta: Delta },
  MessageEnd: { ...base, message: Message.Message },
  ToolExecutionStart: { ...base, toolCallId: Schema.String, toolName: Schema.String, params: Schema.Unknown },
  ToolExecutionUpdate: { ...base, toolCallId: Schema.String, toolName: Schema.String, partial: Schema.Unknown },
  ToolExecutionEnd: {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    result: Message.ToolResultMessage,
    durationMs: Schema.Finite,
    terminate: Schema.Boolean
  },
  ApprovalRequested: {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    params: Schema.Unknown,
    reason: Schema.optionalKey(Schema.String)
  },
  ApprovalResolved: {
    ...base,
    toolCallId: Schema.String,
    toolName: Schema.String,
    approved: Schema.Boolean,
    reason: Schema.optionalKey(Schema.String)
  },
  SteeringDelivered: { ...base, messages: Message.Transcript },
  FollowUpDelivered: { ...base, messages: Message.Transcript },
  WrapUpRequested: { ...base, source: Schema.String, message: Schema.String },
  GuardTripped: {
    ...base,
    guard: Schema.String,
    action: Schema.Literals(["warn", "stop"]),
    detail: Schema.String,
    figures: Schema.Record(Schema.String, Schema.Finite)
  },
  ContextTransformed: {
    ...base,
    plugin: Schema.String,
    messagesBefore: Schema.Finite,
    messagesAfter: Schema.Finite,
    tokensBefore: Schema.optionalKey(Schema.Finite),
    tokensAfter: Schema.optionalKey(Schema.Finite)
  },
  BudgetSnapshot: { ...base, figures: BudgetFigures },
  TurnEnd: { ...base, message: Message.AssistantMessage, toolResults: Schema.Array(Message.ToolResultMessage) },
  CheckpointSaved: { ...base, sessionId: Schema.String, bytes: Schema.Finite },
  SessionResumed: {
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
  },
  AgentEnd: {
    ...base,
    outcome: Schema.optionalKey(Outcome.Outcome),
    error: Schema.optionalKey(AgentError),
    result: Schema.optionalKey(RunState.RunResult)
  }
})
/** @since 0.1.0 */
export type AgentEvent = typeof AgentEvent.Type

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never

/**
 * An event without the fields the loop fills in (run id, turn, timestamp):
 * what a plugin passes to `emit`.
 *
 * @since 0.1.0
 */
export type Input = DistributiveOmit<AgentEvent, "runId" | "turn" | "timestamp">

/**
 * The tags of the events.
 *
 * @since 0.1.0
 */
export type Tag = AgentEvent["_tag"]

/**
 * The event with a given tag.
 *
 * @since 0.1.0
 */
export type Of<T extends Tag> = Extract<AgentEvent, { readonly _tag: T }>

/**
 * The events' JSON codec: what trajectories persist (durations, errors and
 * every other value in their JSON form).
 *
 * @since 0.1.0
 */
export const AgentEventJson = Schema.toCodecJson(AgentEvent)

/**
 * Encodes an event to its JSON form.
 *
 * @since 0.1.0
 */
export const encodeJson = Schema.encodeSync(AgentEventJson)

/**
 * Decodes an event from its JSON form.
 *
 * @since 0.1.0
 */
export const decodeJson = Schema.decodeUnknownEffect(AgentEventJson)
