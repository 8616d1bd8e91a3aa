/**
 * Everything needed to continue a run later: the transcript, the system
 * prompt, the turn counter, usage and wall time used, steering and follow-ups
 * not yet delivered, approvals still pending, the wrap-up flag and each
 * plugin's saved state. A state saved in the middle of a tool batch also
 * holds the results the batch had produced and the calls that had started:
 * continuing it finishes the batch without running those again. It is a versioned Schema: it round-trips through
 * JSON, so it can be stored and resumed in another process.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import * as Message from "./Message.ts"
import * as Outcome from "./Outcome.ts"

/**
 * The current version of the {@link RunState} encoding.
 *
 * @since 0.1.0
 */
export const version = 1 as const

/**
 * A tool call waiting for a human's decision.
 *
 * @since 0.1.0
 */
export const PendingApproval = Schema.Struct({
  toolCallId: Schema.String,
  toolName: Schema.String,
  params: Schema.Unknown,
  reason: Schema.optionalKey(Schema.String)
})
/** @since 0.1.0 */
export type PendingApproval = typeof PendingApproval.Type

/**
 * The serializable state of a run.
 *
 * @since 0.1.0
 */
export const RunState = Schema.Struct({
  version: Schema.Literal(version),
  runId: Schema.String,
  system: Schema.optionalKey(Schema.String),
  messages: Message.Transcript,
  turn: Schema.Finite,
  usage: Message.Usage,
  elapsedMs: Schema.Finite,
  steering: Schema.Array(Message.Message),
  followUps: Schema.Array(Message.Message),
  pendingApprovals: Schema.Array(PendingApproval),
  /** Results of a batch that had not finished when the state was saved (its calls are still open). */
  partialResults: Schema.Array(Message.ToolResultMessage),
  /** Ids of calls whose handler had started, without a result yet, when the state was saved. */
  startedCalls: Schema.Array(Schema.String),
  wrapUpRequested: Schema.Boolean,
  pluginState: Schema.Record(Schema.String, Schema.Unknown)
})
/** @since 0.1.0 */
export type RunState = typeof RunState.Type

/**
 * A fresh state for a run.
 *
 * @since 0.1.0
 */
export const make = (options: {
  readonly runId: string
  readonly system?: string | undefined
  readonly messages?: ReadonlyArray<Message.Message> | undefined
}): RunState => {
  const state: RunState = {
    version,
    runId: options.runId,
    messages: options.messages ?? [],
    turn: 0,
    usage: Message.emptyUsage,
    elapsedMs: 0,
    steering: [],
    followUps: [],
    pendingApprovals: [],
    partialResults: [],
    startedCalls: [],
    wrapUpRequested: false,
    pluginState: {}
  }
  return options.system === undefined ? state : { ...state, system: options.system }
}

/**
 * What a run returns: the messages this run added, the whole state to
 * continue from, how it ended, and the usage so far (over the state's whole
 * life, across continuations).
 *
 * @since 0.1.0
 */
export const RunResult = Schema.Struct({
  messages: Message.Transcript,
  state: RunState,
  outcome: Outcome.Outcome,
  usage: Message.Usage
})
/** @since 0.1.0 */
export type RunResult = typeof RunResult.Type

/**
 * The JSON codec of {@link RunState}, for storing it.
 *
 * @since 0.1.0
 */
export const RunStateJson = Schema.toCodecJson(RunState)
