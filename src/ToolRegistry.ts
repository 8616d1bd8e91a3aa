/**
 * The tools a run may call: one service over any number of `effect/ai`
 * toolkits with handlers (the application's, the built-in ones, tools from
 * MCP servers, see `McpTools`), with lookup by name, the definitions the
 * model is given, and the one way a call of a tool is invoked.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { ToolRegistry } from "effect-agent"
 *
 * const Add = Tool.make("add", {
 *   parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
 *   success: Schema.Finite
 * })
 * const Math = Toolkit.make(Add)
 * const Tools = ToolRegistry.layer(Math).pipe(
 *   Layer.provide(Math.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) }))
 * )
 * ```
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as AiError from "effect/ai/AiError"
import * as Prompt from "effect/ai/Prompt"
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import { ToolFatalError } from "./AgentError.ts"
import * as AgentTool from "./AgentTool.ts"
import * as Compat from "./compat.ts"
import * as Message from "./Message.ts"

/**
 * One call of a tool, as {@link Invoke} takes it.
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
 * What a call gave the model: the one shape of a call's result, from the
 * handler (or the loop's answer for a call that did not run) to the
 * transcript's `Message.ToolResultMessage`, which takes its fields.
 *
 * @since 0.1.0
 * @category models
 */
export interface Output {
  /**
   * What the model reads: the result encoded with the tool's success Schema
   * (or its `toModelOutput`), the failure encoded with its failure Schema, or
   * the words for a defect, an interruption, or a call that did not run.
   */
  readonly content: ReadonlyArray<Message.UserContent>
  /** Whether the call failed (a typed failure, a defect, an interruption, a call that did not run). */
  readonly isError: boolean
  /** Kept beside the result, never sent to the model (the result message's `details`). */
  readonly details?: unknown
  /**
   * Set when the call ended in a defect of its tool, not a typed failure: the
   * handler threw or died, returned a result (or reported a preliminary
   * result) its success Schema rejects, failed with a value its failure
   * Schema does not describe, its `toModelOutput` threw, or it has no
   * handler. The defect in words (`Error: boom`, `invalid result: Expected
   * number, got "3"`). With {@link FailOnDefect} on, such a call ends the run.
   */
  readonly defect?: string
}

/**
 * An error {@link Output}: the text the model reads, and the `details` kept beside it.
 *
 * @example
 * ```ts
 * import { ToolRegistry } from "effect-agent"
 *
 * const output = ToolRegistry.errorOutput("Tool lookup failed: not found", { kind: "notFound" })
 * console.log(output.isError)
 * // Output: true
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const errorOutput = (text: string, details?: unknown): Output =>
  details === undefined
    ? { content: [Message.text(text)], isError: true }
    : { content: [Message.text(text)], isError: true, details }

/**
 * Whether a defect of a tool (see {@link Output}'s `defect`) ends the run, as
 * a `ToolFatalError` whose `defect` says what it was, rather than become an
 * error result the model reads. Off by default: in production a model can
 * often work around a broken tool, and the run goes on. Turn it on in tests,
 * where a tool that throws, or returns what its Schema rejects, is a bug the
 * test must catch rather than a run that ends `Completed`. A reference the
 * application sets (like `Telemetry.RecordContent`), not a config field: a
 * config from outside cannot turn it on. A sub-agent's run sees it too; its
 * defect ends the sub-agent's run, and the run that called it.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { Agent, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const Half = Tool.make("half", { parameters: Schema.Struct({ n: Schema.Finite }), success: Schema.Finite })
 * const kit = Toolkit.make(Half)
 * const Tools = ToolRegistry.layer(kit).pipe(
 *   Layer.provide(kit.toLayer({ half: ({ n }) => Effect.sync(() => { if (n % 2 !== 0) throw new Error(`${n} is odd`); return n / 2 }) }))
 * )
 * const program = Agent.run({ prompt: "half of 3?" }).pipe(
 *   Effect.provide(Layer.merge(Tools, ScriptedModel.layer([{ toolCalls: [{ name: "half", params: { n: 3 } }] }, { text: "1.5" }]))),
 *   Effect.provideService(ToolRegistry.FailOnDefect, true),
 *   Effect.flip
 * )
 * Effect.runPromise(program).then((error) => console.log(error.message))
 * // Output: tool half (call_1_1) had a defect: Error: 3 is odd
 * ```
 *
 * @since 0.1.0
 * @category references
 */
export const FailOnDefect = Context.Reference<boolean>("effect-agent/ToolRegistry/FailOnDefect", {
  defaultValue: () => false
})

/**
 * Invokes one call of a tool by its name. Every failure is an error
 * {@link Output} the model reads (a defect of the tool marked with its
 * `defect`), except a fatal one (the tool is `AgentTool.Fatal`, or its
 * handler failed or died with `AgentTool.FatalFailure`), which fails with
 * `ToolFatalError` and ends the run.
 *
 * @since 0.1.0
 * @category models
 */
export type Invoke = (name: string, invocation: Invocation) => Effect.Effect<Output, ToolFatalError>

/**
 * The registry's service shape.
 *
 * @since 0.1.0
 * @category services
 */
export interface Service {
  /** The registered tools, in registration order (a later tool replaces an earlier one of the same name). */
  readonly tools: ReadonlyArray<Tool.Any>
  /** The tool registered under a name. */
  readonly get: (name: string) => Tool.Any | undefined
  /** The tools by name: what the model is told it may call (their names, descriptions and JSON Schemas). */
  readonly definitions: Readonly<Record<string, Tool.Any>>
  /** Runs one call (see {@link Invoke}); a name that is not registered gives an error output. */
  readonly invoke: Invoke
}

/**
 * The registry service.
 *
 * @since 0.1.0
 * @category services
 */
export class ToolRegistry extends Context.Service<ToolRegistry, Service>()("effect-agent/ToolRegistry") {}

/**
 * Tools and the way to invoke them: what {@link make} merges. Made by
 * {@link fromToolkit} and by `McpTools`; `invoke` is asked only for the
 * names in `tools`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Entry {
  readonly tools: Readonly<Record<string, Tool.Any>>
  readonly invoke: Invoke
}

/**
 * A toolkit and the handlers its `toolkit.toLayer(...)` layer provides, as a
 * registry entry (erasing its static types, so toolkits of different types can
 * share a registry).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromToolkit = <Tools extends Record<string, Tool.Any>>(
  toolkit: Toolkit.Toolkit<Tools>
): Effect.Effect<Entry, never, Tool.HandlersFor<Tools>> =>
  // The handlers are found in the context (the requirement above puts them there).
  Effect.map(Effect.context<never>(), (handlers) => {
    const tools: Readonly<Record<string, Tool.Any>> = toolkit.tools
    const byName = new Map<string, InvokeOne>()
    for (const tool of Object.values(tools)) {
      const handler = Compat.handlerOf(tool, handlers)
      byName.set(tool.name, handler === undefined ? noHandler(tool) : invoker(tool, handler))
    }
    return {
      tools,
      invoke: (name, invocation) => {
        const invoke = byName.get(name)
        return invoke === undefined ? Effect.succeed(unknownTool(name, Object.values(tools))) : invoke(invocation)
      }
    }
  })

/**
 * Builds a registry from entries (later tools replace earlier ones of the
 * same name).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (...entries: ReadonlyArray<Entry>): Service => {
  const byName = new Map<string, { readonly tool: Tool.Any; readonly invoke: Invoke }>()
  for (const entry of entries) {
    for (const tool of Object.values(entry.tools)) byName.set(tool.name, { tool, invoke: entry.invoke })
  }
  const tools = Array.from(byName.values(), (registered) => registered.tool)
  const definitions: Record<string, Tool.Any> = {}
  for (const tool of tools) definitions[tool.name] = tool
  return {
    tools,
    get: (name) => byName.get(name)?.tool,
    definitions,
    invoke: (name, invocation) => {
      const registered = byName.get(name)
      return registered === undefined
        ? Effect.succeed(unknownTool(name, tools))
        : registered.invoke(name, invocation)
    }
  }
}

/**
 * A registry with no tools.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty: Service = make()

/**
 * The registry from one or more `effect/ai` toolkits; their handlers come
 * from `toolkit.toLayer(...)` layers.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <const Toolkits extends ReadonlyArray<Toolkit.Any>>(
  ...toolkits: Toolkits
): Layer.Layer<ToolRegistry, never, Tool.HandlersFor<Toolkit.MergedTools<Toolkits>>> =>
  Layer.effect(ToolRegistry, Effect.map(fromToolkit(Toolkit.merge(...toolkits)), (entry) => make(entry)))

/**
 * The registry as a layer, from entries already built.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerEntries = (...entries: ReadonlyArray<Entry>): Layer.Layer<ToolRegistry> =>
  Layer.succeed(ToolRegistry, make(...entries))

/**
 * The answer to a call of a tool that is not registered, naming the tools
 * that are: what a registry's `invoke` gives for such a name, and what the
 * loop answers such a call with (without invoking anything).
 *
 * @example
 * ```ts
 * import { ToolRegistry } from "effect-agent"
 *
 * const output = ToolRegistry.unknownTool("sub", [])
 * console.log(output.isError, output.content.map((part) => part.type === "text" ? part.text : "").join(""))
 * // Output: true Unknown tool "sub". Available tools: (none).
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const unknownTool = (name: string, available: ReadonlyArray<Tool.Any>): Output =>
  errorOutput(`Unknown tool "${name}". Available tools: ${available.map((tool) => tool.name).join(", ") || "(none)"}.`)

/**
 * The answer to a call that had started before a crash, of a tool that is
 * not safe to run again (`AgentTool.ReplaySafe` false): its outcome is
 * unknown. What a resumed run, or a durable session's replay, answers such
 * a call with, rather than act twice.
 *
 * @example
 * ```ts
 * import { ToolRegistry } from "effect-agent"
 *
 * const output = ToolRegistry.outcomeUnknown("charge")
 * console.log(output.isError, output.details)
 * // Output: true { kind: 'outcomeUnknown' }
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const outcomeUnknown = (toolName: string): Output =>
  errorOutput(
    `This call to ${toolName} had started when the run was interrupted, and its outcome is unknown: ` +
      "it may or may not have taken effect. Check before calling it again.",
    { kind: "outcomeUnknown" }
  )

/**
 * Runs one call through a registry, as the loop does: whatever the registry
 * does but fail fatally (it throws, dies, fails with another error, is
 * interrupted, or returns something that is not an Effect) is an error
 * {@link Output} the model reads; a `ToolFatalError` goes on (the run ends).
 *
 * @example
 * ```ts
 * import { Effect, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { ToolRegistry } from "effect-agent"
 *
 * const Add = Tool.make("add", {
 *   parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
 *   success: Schema.Finite
 * })
 * const Math = Toolkit.make(Add)
 * const program = Effect.gen(function*() {
 *   const registry = ToolRegistry.make(yield* ToolRegistry.fromToolkit(Math))
 *   const sum = yield* ToolRegistry.invoke(registry, "add", { toolCallId: "c1", params: { a: 1, b: 2 } })
 *   const unknown = yield* ToolRegistry.invoke(registry, "sub", { toolCallId: "c2", params: {} })
 *   return [sum, unknown].map((output) => JSON.stringify(output))
 * })
 * Effect.runPromise(program.pipe(Effect.provide(Math.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) }))))
 *   .then((outputs) => console.log(outputs.join("\n")))
 * // Output: {"content":[{"type":"text","text":"3"}],"isError":false}
 * // Output: {"content":[{"type":"text","text":"Unknown tool \"sub\". Available tools: add."}],"isError":true}
 * ```
 *
 * @since 0.1.0
 * @category invoking
 */
export const invoke = (registry: Service, name: string, invocation: Invocation): Effect.Effect<Output, ToolFatalError> =>
  Effect.catchCause(guard(() => registry.invoke(name, invocation)), (cause) => unexpected(name, cause))

/**
 * What an invocation that did not give an output ended with: a fatal failure
 * goes on; any other failure, a defect (a registry of the application's own
 * that threw) or an interruption is an error output.
 */
const unexpected = (toolName: string, cause: Cause.Cause<unknown>): Effect.Effect<Output, ToolFatalError> => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isSome(failure)) {
    return failure.value instanceof ToolFatalError
      ? Effect.fail(failure.value)
      // a failure the `Invoke` type does not allow: the registry's defect
      : Effect.succeed(defectOutput(failed(toolName, failure.value), describeDefect(failure.value)))
  }
  const defect = Cause.findDefect(cause)
  if (Result.isSuccess(defect)) return Effect.succeed(crashed(toolName, defect.success))
  return Effect.succeed(errorOutput(interrupted(toolName)))
}

// -----------------------------------------------------------------------------
// Invoking a toolkit's handler
// -----------------------------------------------------------------------------
//
// `Toolkit.handle` is not used: it runs each call on a forked fiber behind a
// queue and a stream (about 60 µs of CPU per call, fifty times what decoding,
// running and encoding cost) and decodes the arguments again. The handler
// `toolkit.toLayer` registered (found by `Compat.handlerOf`) is run here in
// the caller's fiber by `Toolkit.handle`'s rules: it gets the decoded
// parameters and a `preliminary` callback, runs with the context its layer
// captured (the caller's services win), its result is encoded with the tool's
// success Schema (and `toModelOutput`), and a typed failure is encoded with the
// failure Schema, whatever the `failureMode`, so the model reads the
// structured failure.

/** Invokes one call of one tool. */
type InvokeOne = (invocation: Invocation) => Effect.Effect<Output, ToolFatalError>

// The types promise a handler for every tool; a context built by hand may still lack one.
const noHandler = (tool: Tool.Any): InvokeOne => () =>
  Effect.succeed(crashed(tool.name, new Error(`no handler is registered for ${tool.name}`)))

type Encode = (value: unknown) => Effect.Effect<unknown, Schema.SchemaError>

// Encoding a result needs no services, as decoding the parameters does not (`Toolkit.handle` does the same).
const encoderOf = (schema: Schema.Top): Encode => Schema.encodeUnknownEffect(schema) as Encode

interface Encoders {
  readonly success: Encode
  readonly failure: Encode
  /**
   * A fatal failure as `ToolFatalError.error` holds it: JSON (`Schema.toCodecJson`), so that it survives
   * the stores that keep the error (a durable session), and `AgentTool.fatalError` decodes it back.
   */
  readonly fatal: Encode
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
    const failure = Tool.failureResultSchema(tool)
    cached = {
      success: encoderOf(tool.successSchema),
      failure: encoderOf(failure),
      fatal: encoderOf(Schema.toCodecJson(failure))
    }
    encoders.set(tool, cached)
  }
  return cached
}

/**
 * A preliminary result the success Schema rejects: the handler dies with it
 * (as `Toolkit.handle` makes it die), and the call's output says so.
 */
class InvalidPreliminary {
  readonly error: Schema.SchemaError
  constructor(error: Schema.SchemaError) {
    this.error = error
  }
}

/**
 * Invokes a handler in the caller's fiber. A failure ends the run
 * (`ToolFatalError`) only when the tool is `fatal` or the handler failed or
 * died with `AgentTool.FatalFailure`; every other failure, defect or
 * interruption is an error output the model reads.
 */
const invoker = (tool: Tool.Any, record: Tool.Handler<string>): InvokeOne => {
  const settings = AgentTool.settings(tool)
  const { failure: encodeFailure, fatal: encodeFatal, success: encodeSuccess } = encodersFor(tool)
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
    Effect.catch(encodeSuccess(value), (error) => Effect.die(new InvalidPreliminary(error)))
  const isFatal = (error: unknown): boolean => settings.fatal || error instanceof AgentTool.FatalFailure
  /** The run's end: the failure, as JSON its Schema decodes back when it is one the Schema describes. */
  const fatal = (toolCallId: string, error: unknown): Effect.Effect<never, ToolFatalError> => {
    const description = describeError(error)
    const failWith = (json: unknown) =>
      Effect.fail(new ToolFatalError({ toolName: tool.name, toolCallId, description, error: json }))
    return Effect.matchEffect(encodeFatal(error), {
      onSuccess: failWith,
      onFailure: () => failWith(Schema.is(Schema.Json)(error) ? error : description)
    })
  }
  const resultOutput = (result: unknown, encoded: unknown): Output => {
    let modelOutput: ReadonlyArray<Prompt.ToolModelOutputPart> | undefined
    try {
      modelOutput = tool.toModelOutput?.(result)
    } catch (defect) {
      return crashed(tool.name, defect)
    }
    return {
      content: modelOutput !== undefined && modelOutput.length > 0
        ? modelOutput.map(modelOutputContent)
        : [Message.text(resultText(encoded))],
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
      onFailure: (error) => invalidResult(tool.name, "result", error)
    })
  }
  /**
   * A typed failure of the handler: an error output holding the failure
   * encoded with the tool's failure Schema, or the run's end when it is
   * fatal. A failure the Schema cannot encode is described in words, and is
   * a defect of the tool (its handler failed with what its type does not
   * allow), whatever its `failureMode`.
   */
  const handlerFailed = (toolCallId: string, error: unknown): Effect.Effect<Output, ToolFatalError> => {
    const normalized = AiError.isAiErrorReason(error)
      ? AiError.make({ module: "Toolkit", method: `${tool.name}.handle`, reason: error })
      : error
    if (isFatal(normalized)) return fatal(toolCallId, normalized)
    const encoded = encodeFailure(normalized)
    if (Exit.isExit(encoded) && Exit.isSuccess(encoded)) return Effect.succeed(errorOutput(resultText(encoded.value)))
    return Effect.matchEffect(encoded, {
      onSuccess: (value) => Effect.succeed(errorOutput(resultText(value))),
      // what the tool's own failure Schema says of it (not the union with `AiError` it was encoded with)
      onFailure: (unionError) =>
        Effect.match(encoderOf(tool.failureSchema)(normalized), {
          onSuccess: () => issueText(unionError),
          onFailure: issueText
        }).pipe(Effect.map((issue) => defectOutput(failed(tool.name, normalized), `invalid failure: ${issue}`)))
    })
  }
  const ended = (toolCallId: string, cause: Cause.Cause<unknown>): Effect.Effect<Output, ToolFatalError> => {
    const failure = Cause.findErrorOption(cause)
    if (Option.isSome(failure)) return handlerFailed(toolCallId, failure.value)
    const defect = Cause.findDefect(cause)
    if (Result.isSuccess(defect)) {
      return defect.success instanceof AgentTool.FatalFailure
        ? fatal(toolCallId, defect.success)
        : defect.success instanceof InvalidPreliminary
        ? Effect.succeed(invalidResult(tool.name, "preliminary result", defect.success.error))
        : Effect.succeed(crashed(tool.name, defect.success))
    }
    return Effect.succeed(errorOutput(interrupted(tool.name)))
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
 */
const guard = <A, E, R>(f: () => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
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

// -----------------------------------------------------------------------------
// What the model reads of a call the registry answers (the loop's own answers are in `internal/tools/feedback.ts`)
// -----------------------------------------------------------------------------


/** A value as text: strings as they are, anything else as JSON. */
const resultText = (encoded: unknown): string => typeof encoded === "string" ? encoded : JSON.stringify(encoded) ?? ""

const describeError = (error: unknown): string => error instanceof Error ? error.message : resultText(error)

const describeDefect = (defect: unknown): string =>
  defect instanceof Error
    ? `${defect.name}: ${defect.message}`
    : typeof defect === "string"
    ? defect
    : resultText(defect)

/** A failure the tool's failure Schema could not encode, or one that did not come from its handler. */
const failed = (toolName: string, error: unknown): string => `Tool ${toolName} failed: ${describeError(error)}`

/** An error output for a defect of the tool: `text` for the model, `defect` for the host (see {@link Output}). */
const defectOutput = (text: string, defect: string): Output => ({ content: [Message.text(text)], isError: true, defect })

/** A handler that threw or died (or another defect with no words of its own). */
const crashed = (toolName: string, defect: unknown): Output => {
  const described = describeDefect(defect)
  return defectOutput(`Tool ${toolName} crashed: ${described}`, described)
}

/** What a Schema says of a value it rejects, on one line (`Expected number at ["count"]`). */
const issueText = (error: Schema.SchemaError): string => error.message.replace(/\s*\n\s*/g, " ")

/** A result (or a preliminary result) its success Schema rejects: said once, with what the Schema says. */
const invalidResult = (toolName: string, what: "result" | "preliminary result", error: Schema.SchemaError): Output => {
  const issue = issueText(error)
  return defectOutput(`Tool ${toolName} returned an invalid ${what}: ${issue}`, `invalid ${what}: ${issue}`)
}

const interrupted = (toolName: string): string => `Tool ${toolName} was interrupted.`
