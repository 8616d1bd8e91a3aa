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
import * as Schema from "effect/Schema"
import * as Message from "./Message.ts"
import * as Outcome from "./Outcome.ts"

/**
 * The current version of the {@link RunState} encoding.
 *
 * @since 0.1.0
 * @category models
 */
export const version = 1 as const

/**
 * A tool call waiting for a human's decision.
 *
 * @since 0.1.0
 * @category schemas
 */
export const PendingApproval = Schema.Struct({
  toolCallId: Schema.String,
  /** What the call is approved or denied with (`Approvals.Request`); absent in states saved before it. */
  approvalId: Schema.optionalKey(Schema.String),
  toolName: Schema.String,
  params: Schema.Unknown,
  reason: Schema.optionalKey(Schema.String)
})
/**
 * @since 0.1.0
 * @category models
 */
export type PendingApproval = typeof PendingApproval.Type

/**
 * Where a run's spans are: the trace id and the span id of its
 * `invoke_agent` span (see `Telemetry`). A run continued from a state that
 * has one links its own span to it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const TraceContext = Schema.Struct({
  traceId: Schema.String.check(Schema.isPattern(/^[0-9a-fA-F]{32}$/)),
  spanId: Schema.String.check(Schema.isPattern(/^[0-9a-fA-F]{16}$/))
})
/**
 * @since 0.1.0
 * @category models
 */
export type TraceContext = typeof TraceContext.Type

/**
 * The typed output of a run that asked for one (`Agent.run({ output })`):
 * the identity of its Schema (`Output.identity`), the invalid final answers
 * the model has given since its last valid one, and the final answer, once
 * given, in its JSON form (encoded with the Schema).
 *
 * @since 0.1.0
 * @category schemas
 */
export const OutputState = Schema.Struct({
  schema: Schema.String,
  invalidAttempts: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  value: Schema.optionalKey(Schema.Unknown)
})
/**
 * @since 0.1.0
 * @category models
 */
export type OutputState = typeof OutputState.Type

/**
 * The serializable state of a run.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunState = Schema.Struct({
  version: Schema.Literal(version),
  runId: Schema.String,
  system: Schema.optionalKey(Schema.String),
  messages: Message.Transcript,
  turn: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  usage: Message.Usage,
  elapsedMs: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)),
  steering: Schema.Array(Message.Message),
  followUps: Schema.Array(Message.Message),
  pendingApprovals: Schema.Array(PendingApproval),
  /** Results of a batch that had not finished when the state was saved (its calls are still open). */
  partialResults: Schema.Array(Message.ToolResultMessage),
  /** Ids of calls whose handler had started, without a result yet, when the state was saved. */
  startedCalls: Schema.Array(Schema.String),
  wrapUpRequested: Schema.Boolean,
  pluginState: Schema.Record(Schema.String, Schema.Unknown),
  /**
   * Each tool's use so far, for its per-run quotas: calls, and the time its calls took (kept for a tool with a
   * `maxDurationMs` quota); absent in states saved before it was kept, and when no tool was called.
   */
  toolUse: Schema.optionalKey(Schema.Record(Schema.String, Schema.Struct({
    calls: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
    durationMs: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))
  }))),
  /** The trace context of the run that saved the state, when it was traced (absent in older states). */
  trace: Schema.optionalKey(TraceContext),
  /** Absent for a run without a typed output (and in states saved before there were any). */
  output: Schema.optionalKey(OutputState)
})
/**
 * @since 0.1.0
 * @category models
 */
export type RunState = typeof RunState.Type

/**
 * What {@link validate} found wrong: what, and the index of the message it is
 * at when it is in the transcript.
 *
 * @since 0.1.0
 * @category models
 */
export interface Problem {
  readonly problem: string
  readonly message?: number | undefined
}

const callIds = (message: Message.AssistantMessage): Array<string> => {
  const ids: Array<string> = []
  for (const part of message.content) if (part.type === "tool-call") ids.push(part.id)
  return ids
}

/** The first id of `ids` that is not one of `calls`, or seen twice; `undefined` when there is none. */
const strayId = (ids: ReadonlyArray<string>, calls: ReadonlySet<string>): string | undefined => {
  const seen = new Set<string>()
  for (const id of ids) {
    if (!calls.has(id) || seen.has(id)) return id
    seen.add(id)
  }
  return undefined
}

/**
 * Checks what the Schema cannot, and a run relies on: no tool call id twice
 * in one assistant message; every tool result answers the next unanswered call of the
 * assistant message before it, in the calls' order, before any other
 * message; only the last assistant message may have calls without results
 * (a batch in progress); and the batch's saved results, started calls and
 * pending approvals are for calls of the last assistant message, once each.
 * A checkpoint that breaks these would make a request no provider accepts, or
 * run a call twice.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (state: RunState): Problem | undefined => {
  let open: Array<string> = []
  let openAt = -1
  let lastCalls: ReadonlySet<string> = new Set()
  const messages = state.messages
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role === "toolResult") {
      const id = message.toolCallId
      if (open.length === 0 || open[0] !== id) {
        return {
          message: i,
          problem: open.includes(id)
            ? `the result of call ${JSON.stringify(id)} comes before the result of ${JSON.stringify(open[0])}`
            : `the result of call ${JSON.stringify(id)} answers no call waiting for its result`
        }
      }
      open.shift()
      continue
    }
    if (open.length > 0) {
      return {
        message: i,
        problem: `${message.role === "assistant" ? "an" : "a"} ${message.role} message comes before every call of ` +
          `message ${openAt + 1} has its result`
      }
    }
    if (message.role !== "assistant") continue
    // A batch keys its calls by id. Ids are not checked across messages: a result answers a call of the
    // message just before it, and some servers (and a scripted model in a new process) reuse ids.
    const calls = callIds(message)
    lastCalls = new Set(calls)
    if (lastCalls.size !== calls.length) {
      const twice = calls.find((id, k) => calls.indexOf(id) !== k)!
      return { message: i, problem: `the tool call id ${JSON.stringify(twice)} appears twice in the message` }
    }
    open = calls
    openAt = i
  }
  const batch: ReadonlyArray<readonly [string, ReadonlyArray<string>]> = [
    ["partialResults", state.partialResults.map((result) => result.toolCallId)],
    ["startedCalls", state.startedCalls],
    ["pendingApprovals", state.pendingApprovals.map((pending) => pending.toolCallId)]
  ]
  for (const [field, list] of batch) {
    const stray = strayId(list, lastCalls)
    if (stray !== undefined) {
      return {
        problem: `${field}: ${JSON.stringify(stray)} is not a call of the last assistant message, or is there twice`
      }
    }
  }
  return undefined
}

/**
 * A fresh state for a run.
 *
 * @since 0.1.0
 * @category constructors
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
 * What a run is asked: text (a user message), a message, or messages.
 *
 * @since 0.1.0
 * @category models
 */
export type Prompt = string | Message.Message | ReadonlyArray<Message.Message>

/**
 * The state a run starts from when asked `prompt`: the one place a prompt
 * becomes a transcript (`Agent.run`, sessions and durable sessions start
 * here). The run id is a random UUID unless given.
 *
 * @example
 * ```ts
 * import { RunState } from "effect-agent"
 *
 * const state = RunState.fromPrompt({ runId: "run-1", system: "Be brief.", prompt: "Hi" })
 * console.log(state.runId, state.system, state.messages.length, state.messages[0]?.role)
 * // Output: run-1 Be brief. 1 user
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromPrompt = (options: {
  readonly prompt: Prompt
  readonly system?: string | undefined
  readonly runId?: string | undefined
}): RunState =>
  make({
    runId: options.runId ?? globalThis.crypto.randomUUID(),
    system: options.system,
    messages: typeof options.prompt === "string"
      ? [Message.user(options.prompt)]
      : "role" in options.prompt
      ? [options.prompt]
      : options.prompt
  })

/**
 * What a run returns: the messages this run added, the whole state to
 * continue from, how it ended, and the usage so far (over the state's whole
 * life, across continuations). After a handoff (`Agent.handoff`), the result
 * is the run of the agent that answered, and `agent` names it. The Schema is
 * of what every run returns; a typed output is in the state, in its JSON form
 * (see {@link RunResult}).
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunResult = Schema.Struct({
  messages: Message.Transcript,
  state: RunState,
  outcome: Outcome.Outcome,
  usage: Message.Usage,
  agent: Schema.optionalKey(Schema.String)
})

/**
 * What a run returns (see the Schema above) and, for a run that asked for a
 * typed output, `output`: the model's final answer decoded with the run's
 * Schema, when it gave a valid one (`Completed`, or `WrappedUp` when it
 * complied with the wrap-up request); absent otherwise. `A` is `never` for a
 * run without an output Schema, `unknown` where the Schema is not known
 * (an `AgentEnd` event).
 *
 * @since 0.1.0
 * @category models
 */
export type RunResult<A = unknown> = typeof RunResult.Type & { readonly output?: A | undefined }

/**
 * The JSON codec of {@link RunState}, for storing it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const RunStateJson = Schema.toCodecJson(RunState)
