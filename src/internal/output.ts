/**
 * The typed output of a run in progress (`Agent.run({ output })`): the
 * `final_answer` tool the run adds to its registry, the answer it accepted,
 * and, after each turn, what the answer (or its absence) decides: the run
 * ends with the output, goes on for another attempt (the error result, or a
 * reminder after a plain-text answer), or ends `OutputInvalid` when the
 * attempts are used up. A run without an output Schema has no such part and
 * pays nothing for it.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import * as Tool from "effect/ai/Tool"
import { ConfigError, OutputSchemaMismatch } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as Output from "../Output.ts"
import type * as RunState from "../RunState.ts"
import * as ToolArguments from "../ToolArguments.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import * as Events from "./events.ts"
import * as Feedback from "./tools/feedback.ts"
import * as Transcript from "./transcript.ts"

/**
 * What a run is asked for: the output Schema and the attempts the model may correct.
 *
 * @internal
 */
export interface Request {
  readonly schema: Output.Any
  readonly retries: number
  readonly mode: Output.Mode
}

/**
 * The request of a run's options: `undefined` without an output Schema;
 * fails with a `ConfigError` for retries that are not a whole number from 0
 * to 100.
 *
 * @internal
 */
export const request = (
  schema: Output.Any | undefined,
  retries: number | undefined,
  mode: Output.Mode | undefined
): Effect.Effect<Request | undefined, ConfigError> => {
  if (schema === undefined) return Effect.succeed(undefined)
  const n = retries ?? Output.defaultRetries
  return Number.isInteger(n) && n >= 0 && n <= 100
    ? Effect.succeed({ schema, retries: n, mode: mode ?? "tool" })
    : Effect.fail(
      new ConfigError({
        field: "outputRetries",
        rule: "must be a whole number from 0 to 100",
        range: { min: 0, max: 100 }
      })
    )
}

/**
 * A run's result with its output typed by the run's Schema: the loop kept
 * the value the Schema decoded; it is checked here against the Schema's type
 * (a guard, not a cast).
 *
 * @internal
 */
export const typed = <A>(
  schema: Schema.Codec<A, unknown> | undefined
): (result: RunState.RunResult<unknown>) => RunState.RunResult<A> => {
  if (schema === undefined) return withoutOutput
  const is = Schema.is(schema)
  return (result) => {
    const { output, ...rest } = result
    return output !== undefined && is(output) ? { ...rest, output } : rest
  }
}

/**
 * A finished run's result with the output its state saved, decoded with the
 * run's Schema; fails when the state was saved with another Schema.
 *
 * @internal
 */
export const saved = <A>(
  schema: Schema.Codec<A, unknown> | undefined,
  result: RunState.RunResult<unknown>
): Effect.Effect<RunState.RunResult<A>, OutputSchemaMismatch> => {
  const state = result.state.output
  if (schema === undefined) {
    return state === undefined
      ? Effect.succeed(withoutOutput(result))
      : Effect.fail(new OutputSchemaMismatch({ saved: state.schema, given: null }))
  }
  const given = Output.finalAnswer(schema).identity
  if (state !== undefined && state.schema !== given) {
    return Effect.fail(new OutputSchemaMismatch({ saved: state.schema, given }))
  }
  const { output: _, ...rest } = result
  if (state?.value === undefined) return Effect.succeed(rest)
  const decoded = Schema.decodeUnknownExit(Schema.toCodecJson(schema))(state.value)
  return Effect.succeed(Exit.isSuccess(decoded) ? { ...rest, output: decoded.value } : rest)
}

const withoutOutput = (result: RunState.RunResult<unknown>): RunState.RunResult<never> => {
  const { output: _, ...rest } = result
  return rest
}

/**
 * The output part of a run.
 *
 * @internal
 */
export interface LiveOutput {
  readonly answer: Output.FinalAnswer
  readonly retries: number
  /** Set when the answer is asked for as the provider's structured output (the reply's text). */
  readonly native: NonNullable<typeof Output.NativeFormat.Service> | undefined
  /** Decodes a native answer: the reply's text, as JSON, with the Schema. */
  readonly decodeText: (text: string) => Exit.Exit<unknown, Schema.SchemaError>
  readonly encode: (value: unknown) => Exit.Exit<unknown, Schema.SchemaError>
  /** Decodes a `final_answer` call's arguments with the tool's parameter Schema. */
  readonly decodeAnswer: (params: unknown) => Exit.Exit<unknown, Schema.SchemaError>
  /** Invalid answers since the last valid one (plain-text answers count). */
  invalidAttempts: number
  /** The accepted answer: decoded, and in its JSON form. */
  accepted: { readonly value: unknown; readonly encoded: unknown } | undefined
  /** Whether an answer was accepted in the turn in progress. */
  acceptedInTurn: boolean
}

/**
 * The output part of a run continued from `state`; fails when the state was
 * started with another output Schema (or with one, and the run asks for none,
 * or the other way round).
 *
 * @internal
 */
export const make = (
  request: Request | undefined,
  state: RunState.RunState,
  registry: ToolRegistry.Service
): Effect.Effect<LiveOutput | undefined, OutputSchemaMismatch | ConfigError> => {
  const saved = state.output
  if (request === undefined) {
    return saved === undefined
      ? Effect.succeed(undefined)
      : Effect.fail(new OutputSchemaMismatch({ saved: saved.schema, given: null }))
  }
  if (request.mode === "native" && registry.tools.length > 0) {
    return Effect.fail(
      new ConfigError({ field: "outputMode", rule: "\"native\" is for a run without tools: use \"tool\"" })
    )
  }
  const answer = Output.finalAnswer(request.schema)
  // A state without output (a new run, or one started before it asked for output) takes the Schema.
  if (saved !== undefined && saved.schema !== answer.identity) {
    return Effect.fail(new OutputSchemaMismatch({ saved: saved.schema, given: answer.identity }))
  }
  const json = Schema.toCodecJson(request.schema)
  const output: LiveOutput = {
    answer,
    retries: request.retries,
    native: request.mode === "native" ? { objectName: Output.toolName, schema: request.schema } : undefined,
    decodeText: Schema.decodeUnknownExit(Schema.fromJsonString(request.schema), { errors: "all" }),
    encode: Schema.encodeUnknownExit(json),
    decodeAnswer: Schema.decodeUnknownExit(answer.parameters),
    invalidAttempts: saved?.invalidAttempts ?? 0,
    accepted: undefined,
    acceptedInTurn: false
  }
  if (saved?.value !== undefined) {
    const decoded = Schema.decodeUnknownExit(json)(saved.value)
    if (Exit.isSuccess(decoded)) output.accepted = { value: decoded.value, encoded: saved.value }
  }
  return Effect.succeed(output)
}

/**
 * The output's part of the run's state.
 *
 * @internal
 */
export const snapshot = (output: LiveOutput): RunState.OutputState =>
  output.accepted === undefined
    ? { schema: output.answer.identity, invalidAttempts: output.invalidAttempts }
    : { schema: output.answer.identity, invalidAttempts: output.invalidAttempts, value: output.accepted.encoded }

// -----------------------------------------------------------------------------
// The final answer tool
// -----------------------------------------------------------------------------

/** What the model reads when its final answer is accepted. */
const acceptedText = "Final answer received."

/** What the model reads for a second valid answer in one turn (the first is kept). */
const alreadyGivenText = "A final answer was already given in this turn: this one is ignored."

/**
 * The run's registry: `registry` with the `final_answer` tool, whose
 * invocation accepts the answer (the loop has already decoded its arguments
 * with the Schema, like any tool's).
 *
 * @internal
 */
export const registry = (base: ToolRegistry.Service, output: LiveOutput): ToolRegistry.Service => {
  if (output.native !== undefined) return base
  const tool = output.answer.tool
  const others: Record<string, Tool.Any> = {}
  for (const t of base.tools) if (t.name !== tool.name) others[t.name] = t
  return ToolRegistry.make(
    { tools: others, invoke: base.invoke },
    { tools: { [tool.name]: tool }, invoke: (_, invocation) => Effect.sync(() => accept(output, invocation.params)) }
  )
}

const accept = (output: LiveOutput, params: unknown): ToolRegistry.Output => {
  // The first valid answer of a turn is the one kept.
  if (output.acceptedInTurn) {
    return { content: [Message.text(alreadyGivenText)], isError: false }
  }
  const value = output.answer.wrapped && Predicate.hasProperty(params, "value") ? params.value : params
  const encoded = output.encode(value)
  if (Exit.isFailure(encoded)) {
    return { content: [Message.text(`The final answer cannot be saved: ${String(encoded.cause)}`)], isError: true }
  }
  output.accepted = { value, encoded: encoded.value }
  output.acceptedInTurn = true
  output.invalidAttempts = 0
  return { content: [Message.text(acceptedText)], isError: false }
}

// -----------------------------------------------------------------------------
// Streaming
// -----------------------------------------------------------------------------

/**
 * The `MessageUpdate` of each delta, each delta of a `final_answer` call's
 * arguments followed by its `OutputDelta` (what `Events.messageUpdates` does
 * in a run without an output).
 *
 * @internal
 */
export const messageUpdates = <R>(
  sink: Events.EventSink<R>,
  deltas: ReadonlyArray<AgentEvent.Delta>
): Effect.Effect<void, never, R> =>
  Effect.forEach(deltas, (delta) => {
    const update = Events.emit(sink, { _tag: "MessageUpdate", delta })
    return delta.type === "toolCall" && delta.name === Output.toolName
      ? Effect.andThen(update, Events.emit(sink, { _tag: "OutputDelta", toolCallId: delta.id, delta: delta.delta }))
      : update
  }, { discard: true })

/**
 * The `MessageUpdate` of each delta, each text delta followed by its
 * `OutputDelta` (a native answer is the reply's text).
 *
 * @internal
 */
export const nativeUpdates = <R>(
  sink: Events.EventSink<R>,
  deltas: ReadonlyArray<AgentEvent.Delta>
): Effect.Effect<void, never, R> =>
  Effect.forEach(deltas, (delta) => {
    const update = Events.emit(sink, { _tag: "MessageUpdate", delta })
    return delta.type === "text"
      ? Effect.andThen(update, Events.emit(sink, { _tag: "OutputDelta", delta: delta.delta }))
      : update
  }, { discard: true })

// -----------------------------------------------------------------------------
// After a turn
// -----------------------------------------------------------------------------

/**
 * What a turn decided about the output: the run ends (with the output, or
 * `OutputInvalid`), the model tries again after a reminder (`Retry`: the run
 * must go on even though the reply had no tool calls), or nothing (the run
 * goes on as it would).
 *
 * @internal
 */
export type Verdict =
  | { readonly _tag: "End"; readonly outcome: Outcome.Outcome }
  | { readonly _tag: "Retry" }
  | undefined

const retry: Verdict = { _tag: "Retry" }

/**
 * The reminder after a reply that answered in text when a final answer was required.
 *
 * @internal
 */
export const reminder = (attemptsLeft: number): string =>
  `You answered in text, but this task needs its final answer through the ${Output.toolName} tool. ` +
  `Call ${Output.toolName} now with your answer as its arguments` +
  ` (${attemptsLeft} attempt${attemptsLeft === 1 ? "" : "s"} left).`

/**
 * Decides a turn's output: a valid `final_answer` call ends the run
 * (`Completed`, or `WrappedUp` after a wrap-up request); an invalid one, or a
 * reply without tool calls, is an attempt: past the retries the run ends
 * `OutputInvalid`, else it goes on (a reply in text gets a reminder).
 *
 * @internal
 */
export const afterTurn = Effect.fnUntraced(function*<R>(
  run: {
    readonly transcript: Transcript.Transcript
    readonly events: Events.EventSink<R>
    readonly progress: { readonly wrapUpRequested: boolean }
  },
  output: LiveOutput,
  message: Message.AssistantMessage,
  results: ReadonlyArray<Message.ToolResultMessage>
) {
  if (output.native !== undefined && !Message.hasToolCalls(message)) acceptText(output, Message.textOf(message))
  if (output.acceptedInTurn) {
    output.acceptedInTurn = false
    const outcome = run.progress.wrapUpRequested ? Outcome.wrappedUp : Outcome.completed
    return { _tag: "End", outcome } satisfies Verdict
  }
  const attempt = output.native === undefined
    ? lastAttempt(output, message, results)
    : nativeAttempt(output, message)
  if (attempt === undefined) return undefined
  output.invalidAttempts++
  if (output.invalidAttempts > output.retries) {
    const outcome = Outcome.outputInvalid(attempt.value, attempt.issue, output.invalidAttempts)
    return { _tag: "End", outcome } satisfies Verdict
  }
  if (!attempt.text) return undefined
  const left = output.retries + 1 - output.invalidAttempts
  const nudge = Message.user(
    output.native === undefined
      ? reminder(left)
      : Output.nativeRetry(attempt.issue, Tool.getJsonSchemaFromSchema(output.native.schema))
  )
  Transcript.append(run.transcript, nudge)
  yield* Events.emit(run.events, { _tag: "MessageEnd", message: nudge })
  return retry
})

/** A native answer: the reply's text, accepted when it decodes. */
const acceptText = (output: LiveOutput, text: string): void => {
  const decoded = output.decodeText(text)
  if (Exit.isFailure(decoded)) return
  const encoded = output.encode(decoded.value)
  if (Exit.isFailure(encoded)) return
  output.accepted = { value: decoded.value, encoded: encoded.value }
  output.acceptedInTurn = true
  output.invalidAttempts = 0
}

/** A native answer that did not decode: the reply's text and what was wrong with it. */
const nativeAttempt = (output: LiveOutput, message: Message.AssistantMessage): Attempt | undefined => {
  if (Message.hasToolCalls(message)) return undefined
  const text = Message.textOf(message)
  const decoded = output.decodeText(text)
  const error = Exit.isFailure(decoded) ? Cause.findErrorOption(decoded.cause) : undefined
  const issue = error?._tag === "Some" ? Feedback.describeIssue(error.value) : "the answer does not decode"
  return { value: text, issue, text: true }
}

interface Attempt {
  readonly value: unknown
  readonly issue: string
  /** A plain-text answer (else a `final_answer` call). */
  readonly text: boolean
}

/** The turn's failed attempt, if it made one: its last invalid `final_answer` call, or its text. */
const lastAttempt = (
  output: LiveOutput,
  message: Message.AssistantMessage,
  results: ReadonlyArray<Message.ToolResultMessage>
): Attempt | undefined => {
  const name = output.answer.tool.name
  if (!Message.hasToolCalls(message)) {
    return {
      value: Message.textOf(message),
      issue: `the model answered in text without calling ${name}`,
      text: true
    }
  }
  for (let i = results.length - 1; i >= 0; i--) {
    const result = results[i]!
    if (result.toolName !== name || !result.isError) continue
    const call = Message.toolCalls(message).find((part) => part.id === result.toolCallId)
    const params = call?.params
    return { value: attemptValue(params), issue: issueOf(output, params, result), text: false }
  }
  return undefined
}

const attemptValue = (params: unknown): unknown => ToolArguments.isMalformed(params) ? params.raw : params

const issueOf = (output: LiveOutput, params: unknown, result: Message.ToolResultMessage): string => {
  if (ToolArguments.isMalformed(params)) return `the arguments are not valid JSON: ${params.error}`
  const decoded = Schema.decodeUnknownExit(output.answer.parameters, { errors: "all" })(params)
  if (Exit.isFailure(decoded)) {
    const error = Cause.findErrorOption(decoded.cause)
    if (error._tag === "Some") return Feedback.describeIssue(error.value)
  }
  // Valid arguments that were still refused (a hook blocked the call): what the model read.
  return Message.textOf(result)
}

/**
 * Whether the transcript ends with the result of an accepted final answer:
 * a continued run that had ended with its output (a checkpoint saved after
 * that turn) ends again at once.
 *
 * @internal
 */
export const endedWithAnswer = (output: LiveOutput, messages: ReadonlyArray<Message.Message>): boolean => {
  const last = messages.at(-1)
  return output.accepted !== undefined && last !== undefined && last.role === "toolResult" &&
    last.toolName === output.answer.tool.name && !last.isError
}
