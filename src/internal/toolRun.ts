/**
 * Invoking one tool call, for every toolkit (local tools and MCP tools alike):
 * decode the arguments (once, when the loop validates them), run the handler,
 * encode its result, and turn it into the content the model reads.
 *
 * `Toolkit.handle` is not used: it runs each call on a forked fiber behind a
 * queue and a stream (about 60 µs of CPU per call, measured, fifty times what
 * decoding, running and encoding cost, and more than the whole rest of a
 * turn), and it decodes the arguments again. The handler `toolkit.toLayer`
 * registered is run here in the caller's fiber by `Toolkit.handle`'s rules:
 * it gets the decoded parameters and a `preliminary` callback, runs with the
 * context its layer captured (the caller's services win), its result is
 * encoded with the tool's success Schema (and `toModelOutput`), and a typed
 * failure is encoded with the failure Schema, whatever the `failureMode`, so
 * the model reads the structured failure.
 *
 * @internal
 */
import { Cause, Context, Effect, Exit, Option, Predicate, Result, Schema } from "effect"
import { AiError, Prompt, Tool, Toolkit } from "effect/ai"
import { ToolFatalError } from "../AgentError.ts"
import * as AgentTool from "../AgentTool.ts"
import * as Message from "../Message.ts"
import * as Feedback from "./tools/feedback.ts"

// -----------------------------------------------------------------------------
// Decoding
// -----------------------------------------------------------------------------

type Decode = (input: unknown) => Effect.Effect<unknown, Schema.SchemaError>

const decoders = new WeakMap<Tool.Any, Decode>()

/**
 * The decoder of a tool's parameters (cached per tool). Tool parameter
 * Schemas decode without services (`Toolkit.handle` decodes them the same
 * way); `Tool.Any` erases that, so it is restored here. Dynamic tools (MCP)
 * may carry a JSON Schema instead: their server validates.
 *
 * @internal
 */
export const decoderFor = (tool: Tool.Any): Decode => {
  const cached = decoders.get(tool)
  if (cached !== undefined) return cached
  const schema: unknown = tool.parametersSchema
  const decode: Decode = Schema.isSchema(schema)
    ? Schema.decodeUnknownEffect(tool.parametersSchema, { errors: "all" }) as Decode
    : Effect.succeed
  decoders.set(tool, decode)
  return decode
}

// -----------------------------------------------------------------------------
// Invoking
// -----------------------------------------------------------------------------

/**
 * One call of a tool, as `ToolRegistry.Service.invoke` takes it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Invocation {
  /** The call's id, as the transcript has it (the model's, unless the loop had to give it one: see `Message.ToolCallPart`). */
  readonly toolCallId: string
  /**
   * The arguments, already decoded by the tool's parameter Schema (what
   * `beforeToolCall` hooks see as `params`): the loop validates a call's
   * arguments before any hook sees them, and they are not decoded again.
   */
  readonly params: unknown
  /** Receives each preliminary result the handler reports, encoded with the tool's success Schema. */
  readonly onPreliminary?: ((encoded: unknown) => Effect.Effect<void>) | undefined
}

/**
 * What one call gave the model.
 *
 * @since 0.1.0
 * @category models
 */
export interface Output {
  /**
   * What the model reads: the result encoded with the tool's success Schema
   * (or its `toModelOutput`), the failure encoded with its failure Schema, or
   * the words for a defect or an interruption.
   */
  readonly content: ReadonlyArray<Message.UserContent>
  /** Whether the call failed (a typed failure, a defect, an interruption). */
  readonly isError: boolean
}

/**
 * Invokes one call of one tool.
 *
 * @internal
 */
export type Invoke = (invocation: Invocation) => Effect.Effect<Output, ToolFatalError>

/** A handler as `toolkit.toLayer` stores it in the context, under the tool's id. */
interface HandlerRecord {
  readonly handler: (
    params: unknown,
    context: Toolkit.HandlerContext<Tool.Any>
  ) => Effect.Effect<unknown, unknown>
  readonly context: Context.Context<never>
}

const isHandlerRecord = (u: unknown): u is HandlerRecord =>
  Predicate.hasProperty(u, "handler") && typeof u.handler === "function" &&
  Predicate.hasProperty(u, "context") && Context.isContext(u.context)

/**
 * The invokers of a toolkit's tools, by name, from the handlers
 * `toolkit.toLayer` put in `handlers`.
 *
 * @internal
 */
export const invokers = (
  tools: Readonly<Record<string, Tool.Any>>,
  handlers: Context.Context<never>
): ReadonlyMap<string, Invoke> => {
  const byName = new Map<string, Invoke>()
  for (const tool of Object.values(tools)) {
    const record: unknown = handlers.mapUnsafe.get(tool.id)
    byName.set(tool.name, isHandlerRecord(record) ? invoker(tool, record) : noHandler(tool))
  }
  return byName
}

// The types promise a handler for every tool; a context built by hand may still lack one.
const noHandler = (tool: Tool.Any): Invoke => () =>
  Effect.succeed(errorOutput(Feedback.crashed(tool.name, new Error(`no handler is registered for ${tool.name}`))))

type Encode = (value: unknown) => Effect.Effect<unknown, Schema.SchemaError>

// Encoding a result needs no services for the same reason decoding does not.
const encoderOf = (schema: Schema.Top): Encode => Schema.encodeUnknownEffect(schema) as Encode

interface Encoders {
  readonly success: Encode
  readonly failure: Encode
}

const encoders = new WeakMap<Tool.Any, Encoders>()

/**
 * A tool's result encoders, made once per tool: registries are built per run
 * (a layer per session), and `Tool.failureResultSchema` makes a new Schema,
 * compiled afresh, on every call.
 */
const encodersFor = (tool: Tool.Any): Encoders => {
  let cached = encoders.get(tool)
  if (cached === undefined) {
    cached = { success: encoderOf(tool.successSchema), failure: encoderOf(Tool.failureResultSchema(tool)) }
    encoders.set(tool, cached)
  }
  return cached
}

const invalidResult = (tool: Tool.Any, error: Schema.SchemaError) =>
  AiError.make({
    module: "Toolkit",
    method: `${tool.name}.handle`,
    reason: new AiError.InvalidToolResultError({
      toolName: tool.name,
      description: `Tool handler returned invalid result: ${error.message}`
    })
  })

const errorOutput = (text: string): Output => ({ content: [Message.text(text)], isError: true })

/**
 * Invokes a handler in the caller's fiber. A failure ends the run
 * (`ToolFatalError`) only when the tool is `fatal` or the handler failed or
 * died with `AgentTool.FatalFailure`; every other failure, defect or
 * interruption is an error result the model reads.
 */
const invoker = (tool: Tool.Any, record: HandlerRecord): Invoke => {
  const settings = AgentTool.settings(tool)
  const { failure: encodeFailure, success: encodeSuccess } = encodersFor(tool)
  // The caller's context is the same object call after call in a run: merge it once.
  const merged = new WeakMap<Context.Context<never>, Context.Context<never>>()
  const withContext = (input: Context.Context<never>) => {
    let context = merged.get(input)
    if (context === undefined) {
      context = Context.merge(record.context, input)
      merged.set(input, context)
    }
    return context
  }
  // A preliminary result its Schema cannot encode is a defect of the handler (`Toolkit.handle` does the same).
  const encodePreliminary = (value: unknown): Effect.Effect<unknown> =>
    Effect.orDie(Effect.mapError(encodeSuccess(value), (error) => invalidResult(tool, error)))
  const isFatal = (error: unknown): boolean => settings.fatal || error instanceof AgentTool.FatalFailure
  const fatal = (toolCallId: string, error: unknown, encoded: Option.Option<unknown>) => {
    const description = Feedback.describeError(error)
    return Effect.fail(
      new ToolFatalError({
        toolName: tool.name,
        toolCallId,
        description,
        error: Option.isSome(encoded) ? encoded.value : Schema.is(Schema.Json)(error) ? error : description
      })
    )
  }
  const resultOutput = (result: unknown, encoded: unknown): Output => {
    let modelOutput: ReadonlyArray<Prompt.ToolModelOutputPart> | undefined
    try {
      modelOutput = tool.toModelOutput?.(result)
    } catch (defect) {
      return errorOutput(Feedback.crashed(tool.name, defect))
    }
    return {
      content: modelOutput !== undefined && modelOutput.length > 0
        ? modelOutput.map(modelOutputContent)
        : [Message.text(Feedback.resultText(encoded))],
      isError: false
    }
  }
  // Made once per tool, not per call.
  const succeeded = (result: unknown): Effect.Effect<Output> => {
    const encoded = encodeSuccess(result)
    // A Schema without effectful steps encodes to an Exit: read it here rather than in a fiber step.
    if (Exit.isExit(encoded) && Exit.isSuccess(encoded)) return Effect.succeed(resultOutput(result, encoded.value))
    return Effect.match(encoded, {
      onSuccess: (value) => resultOutput(result, value),
      onFailure: (error) => errorOutput(Feedback.failed(tool.name, invalidResult(tool, error)))
    })
  }
  /**
   * A typed failure of the handler: an error result holding the failure
   * encoded with the tool's failure Schema, or the run's end when it is
   * fatal. A failure the Schema cannot encode is described in words.
   */
  const handlerFailed = (toolCallId: string, error: unknown): Effect.Effect<Output, ToolFatalError> => {
    const normalized = AiError.isAiErrorReason(error)
      ? AiError.make({ module: "Toolkit", method: `${tool.name}.handle`, reason: error })
      : error
    const onEncoded = (encoded: unknown): Effect.Effect<Output, ToolFatalError> =>
      isFatal(normalized)
        ? fatal(toolCallId, normalized, Option.some(encoded))
        : Effect.succeed(errorOutput(Feedback.resultText(encoded)))
    const encoded = encodeFailure(normalized)
    if (Exit.isExit(encoded) && Exit.isSuccess(encoded)) return onEncoded(encoded.value)
    return Effect.matchEffect(encoded, {
      onSuccess: onEncoded,
      onFailure: (schemaError) =>
        isFatal(normalized)
          ? fatal(toolCallId, normalized, Option.none())
          : Effect.succeed(errorOutput(Feedback.failed(
            tool.name,
            // `failureMode: "return"` reports a failure it cannot encode as an invalid result
            tool.failureMode === "return" ? invalidResult(tool, schemaError) : normalized
          )))
    })
  }
  const ended = (toolCallId: string, cause: Cause.Cause<unknown>): Effect.Effect<Output, ToolFatalError> => {
    const failure = Cause.findErrorOption(cause)
    if (Option.isSome(failure)) return handlerFailed(toolCallId, failure.value)
    const defect = Cause.findDefect(cause)
    if (Result.isSuccess(defect)) {
      return defect.success instanceof AgentTool.FatalFailure
        ? fatal(toolCallId, defect.success, Option.none())
        : Effect.succeed(errorOutput(Feedback.crashed(tool.name, defect.success)))
    }
    return Effect.succeed(errorOutput(Feedback.interrupted(tool.name)))
  }
  return ({ onPreliminary, params, toolCallId }) => {
    const context: Toolkit.HandlerContext<Tool.Any> = {
      toolCallId,
      preliminary: (value) =>
        onPreliminary === undefined ? Effect.void : Effect.flatMap(encodePreliminary(value), onPreliminary)
    }
    return Effect.matchCauseEffect(Effect.updateContext(guard(() => record.handler(params, context)), withContext), {
      onSuccess: succeeded,
      onFailure: (cause) => ended(toolCallId, cause)
    })
  }
}

/** A part of a tool's model output as transcript content: text and images as they are, other files named. */
const modelOutputContent = (part: Prompt.ToolModelOutputPart): Message.UserContent => {
  if (part.type === "text") return Message.text(part.text)
  if (!part.mediaType.startsWith("image/")) return Message.text(Prompt.toolModelOutputToText([part]))
  return {
    type: "image",
    mediaType: part.mediaType,
    source: part.data instanceof URL
      ? { type: "url", url: part.data.href }
      : { type: "base64", data: typeof part.data === "string" ? part.data : Buffer.from(part.data).toString("base64") }
  }
}

/**
 * Calls a function that should return an Effect: a synchronous throw, or a
 * value that is not an Effect, becomes a defect of the returned Effect, as a
 * throw inside `Effect.sync` would. A `try` rather than `Effect.suspend`: the
 * handler is called at once, with no fiber step added to every call.
 *
 * @internal
 */
export const guard = <A, E, R>(f: () => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  let effect: Effect.Effect<A, E, R>
  try {
    effect = f()
  } catch (defect) {
    return Effect.die(defect)
  }
  // A handler written in JavaScript, or typed `any`, may return anything.
  if (!Effect.isEffect(effect)) return Effect.die(new TypeError(`expected an Effect, got ${describe(effect)}`))
  return effect
}

const describe = (value: unknown): string => value === null ? "null" : typeof value

/**
 * What an invocation that did not give an output ended with, as the model
 * reads it: a fatal failure goes on as the run's failure; a defect (a registry
 * of the application's own that threw) or an interruption is an error result.
 *
 * @internal
 */
export const unexpected = (toolName: string, cause: Cause.Cause<unknown>): Effect.Effect<Output, ToolFatalError> => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure)) {
    return failure.value instanceof ToolFatalError
      ? Effect.fail(failure.value)
      : Effect.succeed(errorOutput(Feedback.failed(toolName, failure.value)))
  }
  const defect = Cause.findDefect(cause)
  if (Result.isSuccess(defect)) return Effect.succeed(errorOutput(Feedback.crashed(toolName, defect.success)))
  return Effect.succeed(errorOutput(Feedback.interrupted(toolName)))
}
