/**
 * Every place the providers rely on what `effect/ai`'s `LanguageModel.make`
 * does without promising it, in one module, each with the effect source it
 * mirrors and why the public API cannot serve. The providers depend on
 * `effect` alone (they cannot use the core's `src/compat.ts`), so they keep
 * theirs here. `test/providers/Compat.test.ts` fails when the installed
 * `effect` changes under one of them.
 *
 * All of it is one thing: the agent loop's calls ({@link isLoopCall}) take a
 * direct path ({@link withDirectLoopCalls}) that does, by hand, what
 * `LanguageModel.make`'s `streamText` does for them (the request's options,
 * its span), and streams the parts `make` would decode from the provider's
 * encoded parts, built directly ({@link decodedParts}). Every other call,
 * and a loop call for which `make` does more than that, goes through
 * `LanguageModel.make` itself.
 *
 * Why not the public API: `make`'s `streamText` decodes every part of every
 * read a second time with the Schema of the stream parts (the provider has
 * already checked each wire event with its own Schema, so the parts it
 * builds are valid by construction), in an Effect per read. Measured with
 * `bench/providers.ts` (the recorded streams, in memory, through the
 * providers, the two paths in alternating rounds), a call through `make`
 * takes ×2.4 the direct path's time on a Chat Completions text stream (33
 * events), ×2.7 on a tool call (10), ×1.6 on a Responses stream (94), ×1.8
 * on an Anthropic one (38); the agent loop over `OpenAiChat` on an in-memory
 * `fetch` (the bench's `effect-agent-fetch` row, 200 turns), ×2.3 per turn
 * (median of 8 alternating runs; ×1.6 best against best).
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Tracer from "effect/Tracer"
import type * as AiError from "effect/ai/AiError"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import * as ResponseIdTracker from "effect/ai/ResponseIdTracker"
import * as Telemetry from "effect/ai/Telemetry"
import type * as Tool from "effect/ai/Tool"
import * as ResponseParts from "./ResponseParts.ts"

// -----------------------------------------------------------------------------
// Which calls take the direct path
// -----------------------------------------------------------------------------

/**
 * When true, every call goes through `LanguageModel.make`, the loop's too
 * (the tests compare both paths with it; `bench/providers.ts` measures both).
 *
 * @since 0.1.0
 * @category references
 */
export const StandardPath = Context.Reference<boolean>("effect-agent/providers/StandardPath", {
  defaultValue: () => false
})

/**
 * The options of the agent loop's calls, which take the direct path: tool
 * calls are not resolved, and their validation is left to the caller.
 *
 * Mirrors `isToolCallValidationDeferred` (node_modules/effect/src/ai/
 * LanguageModel.ts): for exactly these calls `make` decodes the parts with
 * the toolkit's encoded parameters or, failing those, a tool call of any name
 * with its parameters as the provider gave them (`withUndeclaredToolCalls`),
 * and hands them over without running a handler (`streamContent`'s
 * `disableToolCallResolution` branch): what {@link decodedParts} builds.
 *
 * @since 0.1.0
 * @category guards
 */
export const isLoopCall = (options: LanguageModel.GenerateTextOptions<{}>): boolean =>
  options.disableToolCallResolution === true && options.toolCallValidation === "deferred"

const approvalsIn = new WeakMap<Prompt.Message, boolean>()

const messageHasApprovals = (message: Prompt.Message): boolean => {
  if (message.role !== "assistant" && message.role !== "tool") return false
  let found = approvalsIn.get(message)
  if (found === undefined) {
    found = false
    for (const part of message.content) {
      if (part.type === "tool-approval-request" || part.type === "tool-approval-response") found = true
    }
    approvalsIn.set(message, found)
  }
  return found
}

/**
 * Whether a prompt holds tool approval requests or responses, which
 * `LanguageModel.make` resolves before a call (each message is looked at
 * once for its life): such a call goes through `make`.
 *
 * Mirrors where `streamContent` (node_modules/effect/src/ai/LanguageModel.ts)
 * looks for them, `collectToolApprovals` (approval requests in assistant
 * messages, responses in tool messages): with any, `make` runs the approved
 * calls, answers the denied ones and strips the approvals from the prompt
 * (`executeApprovedToolCalls`, `createDenialResults`,
 * `stripResolvedApprovals`), or fails with a `ToolkitRequiredError`.
 *
 * @since 0.1.0
 * @category guards
 */
export const hasApprovals = (prompt: Prompt.Prompt): boolean => {
  for (const message of prompt.content) if (messageHasApprovals(message)) return true
  return false
}

const toolsByToolkit = new WeakMap<object, ReadonlyArray<Tool.Any>>()

/** A toolkit's tools, listed once per toolkit (the loop passes the same one on every call). */
const toolsOf = (toolkit: { readonly tools: Record<string, Tool.Any> }): ReadonlyArray<Tool.Any> => {
  let tools = toolsByToolkit.get(toolkit)
  if (tools === undefined) {
    tools = Object.values(toolkit.tools)
    toolsByToolkit.set(toolkit, tools)
  }
  return tools
}

/**
 * Whether a call's toolkit can be read as it is: a toolkit made by
 * `Toolkit.make` (a function that is also an Effect) or one with handlers (an
 * object), both with their `tools`. Another Effect (rare) is resolved by
 * `LanguageModel.make`.
 *
 * Mirrors `resolveToolkit` (node_modules/effect/src/ai/LanguageModel.ts),
 * which runs a toolkit given as an Effect: a `Toolkit.make` toolkit yields
 * one with the same `tools` (`Toolkit.ts`'s `asEffect`), whose handlers a
 * loop call never runs. Reading `tools` saves running it per call.
 */
const hasTools = (toolkit: unknown): toolkit is { readonly tools: Record<string, Tool.Any> } =>
  (typeof toolkit === "object" || typeof toolkit === "function") && toolkit !== null && "tools" in toolkit &&
  typeof toolkit.tools === "object" && toolkit.tools !== null

// -----------------------------------------------------------------------------
// The request's options and its span
// -----------------------------------------------------------------------------

const textFormat: LanguageModel.ProviderOptions["responseFormat"] = { type: "text" }

/**
 * The `ProviderOptions` `LanguageModel.make` hands the provider for a loop
 * call without a tracker or approvals: the prompt; with tools, the tools (the
 * `oneOf` ones when the choice names some) and the tool choice (`"auto"` when
 * none is given); without (no toolkit, or an empty one), no tools and the
 * choice `"none"`; a text response; no previous response; deferred tool-call
 * validation.
 *
 * Mirrors `streamText`'s first `providerOptions` inside `make` and what
 * `streamContent` sets on them (node_modules/effect/src/ai/LanguageModel.ts).
 * Why not the public API: those functions are `make`'s own; there is no way
 * to have the options without its decoding of the parts.
 *
 * @since 0.1.0
 * @category options
 */
export const loopOptions = (
  input: LanguageModel.GenerateTextOptions<{}>,
  prompt: Prompt.Prompt,
  tools: ReadonlyArray<Tool.Any>,
  span: Tracer.Span
): LanguageModel.ProviderOptions => {
  const toolChoice = input.toolChoice ?? "auto"
  const oneOf: ReadonlyArray<string> | undefined = typeof toolChoice === "object" && "oneOf" in toolChoice
    ? toolChoice.oneOf
    : undefined
  const some = tools.length > 0
  return {
    prompt,
    tools: !some ? [] : oneOf === undefined ? tools : tools.filter((tool) => oneOf.includes(tool.name)),
    toolChoice: some ? toolChoice : "none",
    responseFormat: textFormat,
    span,
    previousResponseId: undefined,
    incrementalPrompt: undefined,
    toolCallValidation: "deferred"
  }
}

/**
 * The span of a loop call, as `LanguageModel.make` makes it when a tracer is
 * installed: `LanguageModel.streamText`, a client span for the stream's life,
 * with the output type, the tool choice and the concurrency as attributes.
 * Without a tracer (effect's native one, whose spans no one receives) the
 * `inert` span made once per layer, instead of a span per call.
 *
 * Mirrors `streamText`'s `Effect.makeSpanScoped` inside `make` and
 * `annotateRequestOptions` (node_modules/effect/src/ai/LanguageModel.ts).
 *
 * @since 0.1.0
 * @category telemetry
 */
export const loopSpan = (
  input: LanguageModel.GenerateTextOptions<{}>,
  inert: Tracer.Span
): Effect.Effect<Tracer.Span, never, Scope.Scope> =>
  Effect.withFiber((fiber) => {
    if (fiber.getRef(Tracer.Tracer) === Tracer.nativeTracer) return Effect.succeed(inert)
    return Effect.map(Effect.makeSpanScoped("LanguageModel.streamText", { kind: "client" }), (span) => {
      const toolChoice = input.toolChoice ?? "auto"
      span.attribute("gen_ai.output.type", textFormat.type)
      span.attribute("effect.ai.tool_choice", typeof toolChoice === "string" ? toolChoice : JSON.stringify(toolChoice))
      span.attribute("effect.ai.concurrency", input.concurrency ?? "unbounded")
      return span
    })
  })

// -----------------------------------------------------------------------------
// The LanguageModel with the direct path
// -----------------------------------------------------------------------------

/** What a call streams: decoded parts (`LanguageModel.make` decodes for the calls that go through it). */
type Parts = Stream.Stream<ResponseParts.Decoded, AiError.AiError, unknown>

/**
 * `base` (made by `LanguageModel.make` over the provider's encoded parts)
 * with the loop's calls ({@link isLoopCall}) streaming the parts
 * `streamDecoded` builds with {@link decodedParts}, for the
 * {@link loopOptions}, under a {@link loopSpan}. A loop call goes through
 * `base` when `make` would do more for it than that:
 *
 * - a `ResponseIdTracker` is provided (`streamContent` then sends only the
 *   prompt's new part with the previous response's id, marks the parts each
 *   response answered, and falls back to the whole prompt on an
 *   `InvalidRequestError`);
 * - a `Telemetry.CurrentSpanTransformer` was provided when the layer was
 *   built, or is at the call (`make`'s `parentSpanTransformer` and
 *   `getSpanTransformer`: `streamText` then collects the parts and calls the
 *   transformer when the stream ends);
 * - the prompt holds approvals ({@link hasApprovals});
 * - the toolkit is some other Effect ({@link hasTools}).
 *
 * Mirrors `make` and its `streamText` and `streamContent`
 * (node_modules/effect/src/ai/LanguageModel.ts): those, and the
 * `IdGenerator` `streamText` provides (which the providers' streams do not
 * use), are the services `make` reads. The test fails when `make` reads
 * another.
 *
 * @since 0.1.0
 * @category constructors
 */
export const withDirectLoopCalls = Effect.fnUntraced(function*(
  base: LanguageModel.LanguageModel,
  streamDecoded: (options: LanguageModel.ProviderOptions) => Stream.Stream<ResponseParts.Decoded, AiError.AiError>
) {
  const transformedAtBuild = Option.isSome(yield* Effect.serviceOption(Telemetry.CurrentSpanTransformer))
  // The span of a loop call when no tracer is installed: inert, made once.
  const inertSpan = yield* Effect.makeSpan("LanguageModel.streamText", {
    annotations: Context.make(Tracer.DisablePropagation, true)
  })

  // `LanguageModel.streamText` is typed by overloads on the toolkit given.
  // The widest options may carry a toolkit Effect needing any service: `unknown` stands for them.
  const standard = (input: LanguageModel.GenerateTextOptions<{}>): Parts => {
    const { toolkit, ...rest } = input
    return toolkit === undefined ? base.streamText(rest) : base.streamText({ ...rest, toolkit })
  }

  const direct = (input: LanguageModel.GenerateTextOptions<{}>, tools: ReadonlyArray<Tool.Any>): Parts =>
    Stream.unwrap(Effect.suspend((): Effect.Effect<Parts, never, Scope.Scope> => {
      const prompt = Prompt.make(input.prompt)
      if (hasApprovals(prompt)) return Effect.succeed(standard(input))
      return Effect.map(loopSpan(input, inertSpan), (span) => streamDecoded(loopOptions(input, prompt, tools, span)))
    }))

  const loopCall = (input: LanguageModel.GenerateTextOptions<{}>): Parts =>
    Stream.unwrap(Effect.withFiber((fiber): Effect.Effect<Parts> => {
      const context = fiber.context
      if (
        transformedAtBuild || fiber.getRef(StandardPath) ||
        Context.getOption(context, ResponseIdTracker.ResponseIdTracker)._tag === "Some" ||
        Context.getOption(context, Telemetry.CurrentSpanTransformer)._tag === "Some"
      ) {
        return Effect.succeed(standard(input))
      }
      const toolkit = input.toolkit
      if (toolkit === undefined) return Effect.succeed(direct(input, []))
      return Effect.succeed(hasTools(toolkit) ? direct(input, toolsOf(toolkit)) : standard(input))
    }))

  const streamText = (input: LanguageModel.GenerateTextOptions<{}>) =>
    isLoopCall(input) ? loopCall(input) : standard(input)
  const model: LanguageModel.LanguageModel = {
    ...base,
    // LanguageModel's streamText is typed by overloads on the toolkit given; like
    // LanguageModel.make itself, the implementation is written once over the widest options.
    streamText: streamText as LanguageModel.LanguageModel["streamText"]
  }
  return model
})

// -----------------------------------------------------------------------------
// Decoded parts as literals
// -----------------------------------------------------------------------------

/**
 * The marker every decoded part carries (what `Response.makePart` sets). The
 * parts are written as literals, the marker as a plain key: `makePart`'s
 * generic spread, or a computed key, builds each part the slow way, and this
 * runs once per streamed part. If effect changes the marker, these literals
 * stop type-checking.
 */
const Part = "~effect/ai/Response/Part" as const

/** The metadata of parts that carry none (what decoding defaults it to): one frozen object, not one per part. */
const noMetadata: Response.ProviderMetadata = Object.freeze({})

/**
 * The parts `LanguageModel.make` decodes `ResponseParts.encoded`'s to for a
 * loop call (tool-call validation deferred), made directly: with the part
 * marker, `metadata` defaulted to `{}`, `providerExecuted` to `false`, the
 * timestamp as a `DateTime.Utc` and the usage as a `Response.Usage`.
 *
 * Mirrors the stream part Schemas of node_modules/effect/src/ai/Response.ts
 * (`StreamPart`, each part's `BasePart` fields and defaults, `Usage`) as
 * `make`'s `streamDecoderFor` applies them with `withUndeclaredToolCalls`
 * (node_modules/effect/src/ai/LanguageModel.ts). Why not the public API:
 * decoding is the cost the direct path exists to save (see the module's
 * measurements), and `Response.makePart` builds each part by a generic
 * spread, the slow way, once per streamed part.
 *
 * @since 0.1.0
 * @category makers
 */
export const decodedParts: ResponseParts.Maker<ResponseParts.Decoded> = {
  metadata: (id, modelId, createdMillis) => ({
    "~effect/ai/Response/Part": Part,
    type: "response-metadata",
    ...(id === undefined ? {} : { id }),
    ...(modelId === undefined ? {} : { modelId }),
    ...(ResponseParts.validMillis(createdMillis) ? { timestamp: DateTime.makeUnsafe(createdMillis) } : {}),
    metadata: noMetadata
  }),
  start: (type, id) => ({ "~effect/ai/Response/Part": Part, type, id, metadata: noMetadata }),
  delta: (type, id, delta) => ({ "~effect/ai/Response/Part": Part, type, id, delta, metadata: noMetadata }),
  end: (type, id, metadata) => ({ "~effect/ai/Response/Part": Part, type, id, metadata: metadata ?? noMetadata }),
  paramsStart: (id, name) => ({
    "~effect/ai/Response/Part": Part,
    type: "tool-params-start",
    id,
    name,
    providerExecuted: false,
    metadata: noMetadata
  }),
  paramsDelta: (id, delta) => ({
    "~effect/ai/Response/Part": Part,
    type: "tool-params-delta",
    id,
    delta,
    metadata: noMetadata
  }),
  paramsEnd: (id) => ({ "~effect/ai/Response/Part": Part, type: "tool-params-end", id, metadata: noMetadata }),
  toolCall: (id, name, params, metadata) => ({
    "~effect/ai/Response/Part": Part,
    type: "tool-call",
    id,
    name,
    params,
    providerExecuted: false,
    metadata: metadata ?? noMetadata
  }),
  finish: (finish) => ({
    "~effect/ai/Response/Part": Part,
    type: "finish",
    reason: finish.reason,
    // The counts were checked as integers by the provider's wire Schema: the class need not check them again.
    usage: new Response.Usage(finish.usage, { disableChecks: true }),
    metadata: ResponseParts.finishMetadata(finish) ?? noMetadata
  })
}
