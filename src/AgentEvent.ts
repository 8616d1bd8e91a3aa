/**
 * Every event of a run, as one tagged union Schema. The events plugins observe
 * (`Plugin.onEvent`), the events `Agent.runStream` returns and the events a
 * trajectory persists are the same values. Each carries the run id, the turn
 * (0 before the first model call, then the turn being run) and a timestamp
 * (epoch milliseconds from effect's `Clock`).
 *
 * @since 0.1.0
 */
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
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
  }),
  /**
   * Per agent, for a run whose sub-agents ran (`Agent.asTool`): the turns
   * and usage of each, by its path (`"researcher"`, `"researcher/searcher"`),
   * summed over its calls. The run's own `usage` includes theirs.
   */
  agents: Schema.optionalKey(Schema.Record(Schema.String, Schema.Struct({ turns: Schema.Finite, usage: Message.Usage })))
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

/** Every event but `Nested` (which holds one of these, or another `Nested`). */
const members = [
  Schema.TaggedStruct("AgentStart", { ...base, messages: Message.Transcript }),
  Schema.TaggedStruct("TurnStart", { ...base }),
  Schema.TaggedStruct("MessageStart", { ...base, role: Schema.Literals(["assistant", "user", "system", "custom"]) }),
  Schema.TaggedStruct("MessageUpdate", { ...base, delta: Delta }),
  Schema.TaggedStruct("OutputDelta", { ...base, toolCallId: Schema.optionalKey(Schema.String), delta: Schema.String }),
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
    terminate: Schema.Boolean,
    /**
     * Set when the call ended in a defect of its tool rather than a typed
     * failure (see `ToolRegistry.Output`'s `defect`): what it was.
     */
    defect: Schema.optionalKey(Schema.String)
  }),
  Schema.TaggedStruct("ApprovalRequested", {
    ...base,
    toolCallId: Schema.String,
    /** What to approve or deny the call with: unique across the run tree (absent in events recorded before it). */
    approvalId: Schema.optionalKey(Schema.String),
    toolName: Schema.String,
    params: Schema.Unknown,
    reason: Schema.optionalKey(Schema.String)
  }),
  Schema.TaggedStruct("ApprovalResolved", {
    ...base,
    toolCallId: Schema.String,
    approvalId: Schema.optionalKey(Schema.String),
    toolName: Schema.String,
    approved: Schema.Boolean,
    reason: Schema.optionalKey(Schema.String)
  }),
  Schema.TaggedStruct("SteeringDelivered", { ...base, messages: Message.Transcript }),
  Schema.TaggedStruct("FollowUpDelivered", { ...base, messages: Message.Transcript }),
  Schema.TaggedStruct("DeliveryBlocked", {
    ...base,
    kind: Schema.Literals(["steering", "followUp"]),
    messages: Message.Transcript,
    plugin: Schema.String
  }),
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
  Schema.TaggedStruct("Custom", { ...base, kind: Schema.String, payload: Schema.Unknown }),
  AgentEnd
] as const

const Flat = Schema.Union(members)

/**
 * An event of a sub-agent's run, as the runs above it see it: `path` names
 * the agents from the run that emits it down to the one whose `event` it is
 * (`["researcher"]` for a child, `["researcher", "searcher"]` for a
 * grandchild); `calls` the ids of the tool calls that started them, one per
 * agent of `path`; `event` is that run's own event, with its own run id, turn
 * and time. A run reports the events of every run below it this way, so a
 * UI can render the tree and a trajectory keeps it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Nested {
  readonly _tag: "Nested"
  readonly runId: string
  readonly turn: number
  readonly timestamp: number
  readonly path: ReadonlyArray<string>
  /**
   * For each agent of `path`, the id of the tool call that started it in the
   * run above it: where a UI puts the sub-agent's events (absent in events
   * written before it was added).
   */
  readonly calls?: ReadonlyArray<string>
  readonly event: AgentEvent
}

/**
 * The JSON-side form of {@link Nested} (its `event` in its encoded form).
 *
 * @since 0.1.0
 * @category models
 */
export interface NestedEncoded {
  readonly _tag: "Nested"
  readonly runId: string
  readonly turn: number
  readonly timestamp: number
  readonly path: ReadonlyArray<string>
  readonly calls?: ReadonlyArray<string>
  readonly event: Encoded
}

/**
 * The encoded form of an event (what the Schema decodes from).
 *
 * @since 0.1.0
 * @category models
 */
export type Encoded = typeof Flat.Encoded | NestedEncoded

/**
 * @since 0.1.0
 * @category models
 */
export type AgentEvent = typeof Flat.Type | Nested

const NestedEvent = Schema.TaggedStruct("Nested", {
  ...base,
  path: Schema.Array(Schema.String),
  calls: Schema.optionalKey(Schema.Array(Schema.String)),
  event: Schema.suspend((): Schema.Codec<AgentEvent, Encoded> => AgentEvent)
})

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
 * - `ApprovalRequested` / `ApprovalResolved`: a call waits for a decision;
 *   `approvalId` is what `Approvals.Interactive` answers it with, unique
 *   across the run and its sub-agents (`call_7/call_1` for the call `call_1`
 *   of the sub-agent that the call `call_7` runs).
 * - `SteeringDelivered` / `FollowUpDelivered`: queued messages entered the run.
 * - `DeliveryBlocked`: steering or follow-ups a plugin's `beforeDelivery`
 *   hook kept out of the run (an input guardrail that tripped, named by
 *   `plugin`): the run ends, and these messages are neither delivered nor
 *   returned in its state.
 * - `WrapUpRequested`: the model was asked to finish (turn limit, budget).
 * - `GuardTripped`: a guard warned or stopped the run, with its figures.
 * - `ContextTransformed`: a `transformContext` hook changed the request (with
 *   its token estimates, when it reports them).
 * - `BudgetSnapshot`: totals and limits after a turn.
 * - `TurnEnd`: the assistant message and its tool results.
 * - `CheckpointSaved` / `SessionResumed`: durable sessions.
 * - `OutputDelta`: a piece of the JSON arguments of the `final_answer` call
 *   streaming in a run with a typed output (`Agent.run({ output })`); the
 *   pieces of one call, joined, are its arguments as the model sent them.
 * - `Custom`: an event a plugin defined (see {@link custom}): its `kind`, and
 *   its `payload` in its JSON form.
 * - A supervised run (`effect-agent/supervisor`) adds its own as `Custom`
 *   events of kind `effect-agent/supervisor` (see its `SupervisorEvent`).
 * - `Nested`: an event of a sub-agent's run (`Agent.asTool`), with the path of
 *   agent names from this run down to it (see {@link Nested}).
 * - `AgentEnd`: always the last event: the outcome and the result, or the
 *   error, or the defect (see {@link AgentEnd}).
 *
 * @since 0.1.0
 * @category schemas
 */
export const AgentEvent = Schema.Union([...members, NestedEvent]).pipe(Schema.toTaggedUnion("_tag"))

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

/**
 * An event a plugin contributes, without a change to this union: made by
 * {@link custom}, carried as `Custom { kind, payload }` with the payload in
 * its JSON form (encoded with the plugin's Schema), so it round-trips through
 * JSON and trajectories, and a reader that does not know the kind keeps it
 * as it is.
 *
 * @since 0.1.0
 * @category models
 */
export interface CustomEvent<A> {
  readonly kind: string
  /** The event's body, its payload encoded: what a plugin passes to its context's `emit`. */
  readonly make: (payload: A) => Input
  /** The payload of an event of this kind, decoded; `None` for another event or a payload that does not decode. */
  readonly payload: (event: AgentEvent) => Option.Option<A>
  /** Whether an event is of this kind. */
  readonly is: (event: AgentEvent) => event is Of<"Custom">
}

/**
 * Defines an event of a plugin's own: its kind (name it after the plugin,
 * e.g. `"my-plugin/escalated"`) and its payload's Schema. The plugin emits it
 * with `context.emit(Definition.make(payload))`; observers read it back with
 * `Definition.payload(event)`.
 *
 * @example
 * ```ts
 * import { Effect, Option, Schema } from "effect"
 * import { AgentEvent, Hooks } from "effect-agent"
 *
 * const Spent = AgentEvent.custom("meter/spent", Schema.Struct({ cents: Schema.Finite }))
 * const meter = Hooks.plugin({
 *   name: "meter",
 *   afterTurn: (_turn, context) =>
 *     Effect.as(context.emit(Spent.make({ cents: context.usage.cost ?? 0 })), Hooks.proceed)
 * })
 * const event: AgentEvent.AgentEvent = { ...Spent.make({ cents: 3 }), runId: "r", turn: 1, timestamp: 0 }
 * Option.map(Spent.payload(event), ({ cents }) => console.log(`spent ${cents}`))
 * // Output: spent 3
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const custom = <A, E>(kind: string, payload: Schema.Codec<A, E>): CustomEvent<A> => {
  const json = Schema.toCodecJson(payload)
  const encode = Schema.encodeSync(json)
  const decode = Schema.decodeUnknownExit(json)
  const is = (event: AgentEvent): event is Of<"Custom"> => event._tag === "Custom" && event.kind === kind
  return {
    kind,
    make: (value) => ({ _tag: "Custom", kind, payload: encode(value) }),
    payload: (event) => {
      if (!is(event)) return Option.none()
      const exit = decode(event.payload)
      return Exit.isSuccess(exit) ? Option.some(exit.value) : Option.none()
    },
    is
  }
}
