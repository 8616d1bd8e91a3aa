/**
 * Running one tool call: the parameter decoder, and the two ways to run a
 * handler.
 *
 * `Toolkit.handle` runs each call on a forked fiber behind a queue and a
 * stream; measured here it costs about 60 µs of CPU per call, fifty times
 * what decoding, running and encoding cost (about 1.3 µs), and more than the
 * whole rest of a turn. So when a tool's handler is known (it came from
 * `toolkit.toLayer`), the loop runs it in its own fiber by the same rules as
 * `Toolkit.handle`: the handler gets the decoded parameters and a
 * `preliminary` callback, runs with the context its layer captured (the
 * caller's services win), its result is encoded with the tool's success
 * Schema (and `toModelOutput`), a typed failure is encoded with the failure
 * Schema for `failureMode: "return"` and fails annotated with
 * `Toolkit.FailureOrigin` otherwise (the loop then encodes it, see
 * {@link encodeFailure}). Other toolkits (MCP tools, hand-built toolkits) go
 * through `Toolkit.handle`.
 *
 * @internal
 */
import { Cause, Context, Effect, Exit, identity, Predicate, Schema, Stream } from "effect"
import { AiError, Tool, Toolkit } from "effect/ai"

/**
 * Runs one call; `params` are decoded, `rawParams` as the model sent them.
 *
 * @internal
 */
export type Runner = (
  params: unknown,
  rawParams: unknown,
  toolCallId: string,
  onPreliminary: (encoded: unknown) => Effect.Effect<void>
) => Effect.Effect<Tool.HandlerResult<Tool.Any>, unknown>

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
 * The handler `toolkit.toLayer` registered for a tool, found in a context.
 *
 * @internal
 */
export const findHandler = (context: Context.Context<never>, tool: Tool.Any): HandlerRecord | undefined => {
  const record: unknown = context.mapUnsafe.get(tool.id)
  return isHandlerRecord(record) ? record : undefined
}

type Encode = (value: unknown) => Effect.Effect<unknown, Schema.SchemaError>

// Encoding a result needs no services for the same reason decoding does not.
const encoderOf = (schema: Schema.Top): Encode => Schema.encodeUnknownEffect(schema) as Encode

const failedWith = (error: unknown, origin: Tool.FailureOrigin): Cause.Cause<unknown> =>
  Cause.annotate(Cause.fail(error), Context.make(Toolkit.FailureOrigin, origin))

const invalidResult = (tool: Tool.Any, error: Schema.SchemaError) =>
  AiError.make({
    module: "Toolkit",
    method: `${tool.name}.handle`,
    reason: new AiError.InvalidToolResultError({
      toolName: tool.name,
      description: `Tool handler returned invalid result: ${error.message}`
    })
  })

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

/**
 * Encodes a failure of a tool's handler with its failure Schema (the tool's
 * failure or an `AiError`), as `failureMode: "return"` would.
 *
 * @internal
 */
export const encodeFailure = (tool: Tool.Any, error: unknown): Effect.Effect<unknown, Schema.SchemaError> =>
  encodersFor(tool).failure(error)

/**
 * Runs a handler in the caller's fiber, by `Toolkit.handle`'s rules.
 *
 * @internal
 */
export const direct = (tool: Tool.Any, record: HandlerRecord): Runner => {
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
  const encode = <A>(value: unknown, isFailure: boolean, onEncoded: (encoded: unknown) => A) => {
    const encoded = isFailure ? encodeFailure(value) : encodeSuccess(value)
    // A Schema without effectful steps encodes to an Exit: read it here rather than in a fiber step.
    if (Exit.isExit(encoded) && Exit.isSuccess(encoded)) return Effect.succeed(onEncoded(encoded.value))
    return Effect.map(
      Effect.catchTag(
        encoded,
        "SchemaError",
        (error) => Effect.failCause(failedWith(invalidResult(tool, error), "result"))
      ),
      onEncoded
    )
  }
  // Made once per tool, not per call.
  const succeeded = (result: unknown) =>
    encode(result, false, (encodedResult): Tool.HandlerResult<Tool.Any> => {
      const modelOutput = tool.toModelOutput?.(result)
      return modelOutput === undefined
        ? { result, encodedResult, isFailure: false, preliminary: false }
        : { result, encodedResult, modelOutput, isFailure: false, preliminary: false }
    })
  const failed = (error: unknown) => {
    const normalized = AiError.isAiErrorReason(error)
      ? AiError.make({ module: "Toolkit", method: `${tool.name}.handle`, reason: error })
      : error
    if (tool.failureMode === "error") return Effect.failCause(failedWith(normalized, "handler"))
    return encode(normalized, true, (encodedResult): Tool.HandlerResult<Tool.Any> => ({
      result: normalized,
      encodedResult,
      isFailure: true,
      failureOrigin: "handler",
      preliminary: false
    }))
  }
  const settle = { onSuccess: succeeded, onFailure: failed }
  return (params, _rawParams, toolCallId, onPreliminary) => {
    const context: Toolkit.HandlerContext<Tool.Any> = {
      toolCallId,
      preliminary: (value) => Effect.flatMap(encode(value, false, identity), onPreliminary).pipe(Effect.orDie)
    }
    return Effect.matchEffect(Effect.updateContext(guard(() => record.handler(params, context)), withContext), settle)
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
 * Runs a call through `Toolkit.handle`: the final result, with preliminary
 * results passed on as they come.
 *
 * @internal
 */
export const viaHandle = (
  handle: (name: string, params: unknown, toolCallId: string) => Effect.Effect<
    Stream.Stream<Tool.HandlerResult<Tool.Any>, unknown>,
    AiError.AiError
  >,
  name: string
): Runner =>
(_params, rawParams, toolCallId, onPreliminary) =>
  Effect.flatMap(guard(() => handle(name, rawParams, toolCallId)), (stream) => {
    let final: Tool.HandlerResult<Tool.Any> | undefined
    return Stream.runForEach(stream, (output) => {
      if (!output.preliminary) {
        final = output
        return Effect.void
      }
      return onPreliminary(output.encodedResult)
    }).pipe(Effect.flatMap(() =>
      final === undefined
        ? Effect.die(new Error(`tool ${name} returned no result`))
        : Effect.succeed(final)
    ))
  })
