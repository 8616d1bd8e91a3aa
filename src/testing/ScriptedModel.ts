/**
 * A `LanguageModel` that plays a script: one scripted turn per model call,
 * streamed as deltas the way a real provider streams them. It records every
 * request it receives, can delay, fail or hang on cue, and fails clearly when
 * the run calls it more often than the script allows. Every loop test in this
 * project runs on it, and applications use it to test their own agents.
 *
 * @example
 * ```ts
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const Model = ScriptedModel.layer([
 *   { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
 *   { text: "3" }
 * ])
 * ```
 *
 * @since 0.1.0
 */
import { Channel, Context, Duration, Effect, Layer, Stream } from "effect"
import { AiError, LanguageModel, Prompt, Response } from "effect/ai"
import type * as Message from "../Message.ts"
import * as ToolArguments from "../ToolArguments.ts"

/**
 * A tool call in a scripted turn. `rawParams` sends the arguments as raw text
 * (to script malformed JSON); otherwise `params` is sent as JSON. Without an
 * `id`, calls get `call_<turn>_<index>`.
 *
 * @since 0.1.0
 */
export interface ToolCall {
  readonly id?: string | undefined
  readonly name: string
  readonly params?: unknown
  readonly rawParams?: string | undefined
}

/**
 * One scripted model call.
 *
 * - `text`: the reply text (split into word deltas), or the deltas themselves.
 * - `reasoning`: reasoning text, with an optional signature to replay.
 * - `toolCalls`: calls the model asks for.
 * - `usage`: tokens (and cost) to report.
 * - `finishReason`: defaults to `tool-calls` when there are calls, else `stop`.
 * - `delay`: wait before streaming (virtual time under `TestClock`).
 * - `fail`: fail the call with this `AiError` reason.
 * - `hang`: stream the text and reasoning, then never finish until interrupted.
 * - `model`: the model id to report.
 *
 * @since 0.1.0
 */
export interface Turn {
  readonly text?: string | ReadonlyArray<string> | undefined
  readonly reasoning?: string | { readonly text: string; readonly signature?: string | undefined } | undefined
  readonly toolCalls?: ReadonlyArray<ToolCall> | undefined
  readonly usage?: Partial<Message.Usage> | undefined
  readonly finishReason?: Response.FinishReason | undefined
  readonly delay?: Duration.Input | undefined
  readonly fail?: AiError.AiErrorReason | undefined
  readonly hang?: boolean | undefined
  readonly model?: string | undefined
}

/**
 * A request the model received.
 *
 * @since 0.1.0
 */
export interface Request {
  readonly prompt: Prompt.Prompt
  readonly tools: ReadonlyArray<string>
  readonly toolChoice: LanguageModel.ProviderOptions["toolChoice"]
  readonly toolCallValidation: "strict" | "deferred" | undefined
}

/**
 * The script: turns in order, or a function giving the turn for each call
 * (`undefined` ends the script).
 *
 * @since 0.1.0
 */
export type Script = ReadonlyArray<Turn> | ((index: number, request: Request) => Turn | undefined)

/**
 * What a test can ask the scripted model.
 *
 * @since 0.1.0
 */
export interface Service {
  /** Every request received, in order. */
  readonly requests: Effect.Effect<ReadonlyArray<Request>>
  /** How many calls were made. */
  readonly calls: Effect.Effect<number>
}

/**
 * The scripted model's recorder.
 *
 * @since 0.1.0
 */
export class ScriptedModel extends Context.Service<ScriptedModel, Service>()("effect-agent/testing/ScriptedModel") {}

const words = (text: string): ReadonlyArray<string> => text === "" ? [] : text.split(/(?<=\s)(?=\S)/)

const usageOf = (turn: Turn): Response.FinishPartEncoded["usage"] => ({
  inputTokens: {
    total: turn.usage?.input ?? 0,
    cacheRead: turn.usage?.cacheRead ?? 0,
    cacheWrite: turn.usage?.cacheWrite ?? 0
  },
  outputTokens: { total: turn.usage?.output ?? 0, reasoning: turn.usage?.reasoning ?? 0 }
})

const finishOf = (turn: Turn): Response.FinishPartEncoded => ({
  type: "finish",
  reason: turn.finishReason ?? ((turn.toolCalls?.length ?? 0) > 0 ? "tool-calls" : "stop"),
  usage: usageOf(turn),
  ...(turn.usage?.cost === undefined ? {} : { metadata: { "effect-agent": { costUsd: turn.usage.cost } } })
})

interface ResolvedCall {
  readonly id: string
  readonly name: string
  readonly raw: string
  readonly params: unknown
}

const resolveCalls = (turn: Turn, index: number): ReadonlyArray<ResolvedCall> =>
  (turn.toolCalls ?? []).map((call, i) => {
    const raw = call.rawParams ?? JSON.stringify(call.params ?? {})
    return { id: call.id ?? `call_${index + 1}_${i + 1}`, name: call.name, raw, params: ToolArguments.parse(raw) }
  })

const reasoningOf = (turn: Turn) =>
  turn.reasoning === undefined
    ? undefined
    : typeof turn.reasoning === "string"
    ? { text: turn.reasoning, signature: undefined }
    : turn.reasoning

const signatureMetadata = (signature: string | undefined) =>
  signature === undefined ? {} : { metadata: { scripted: { signature } } }

/**
 * The parts of a turn as a provider would stream them.
 *
 * @since 0.1.0
 */
export const streamParts = (turn: Turn, index: number): {
  readonly head: Array<Response.StreamPartEncoded>
  readonly tail: Array<Response.StreamPartEncoded>
} => {
  const head: Array<Response.StreamPartEncoded> = [{
    type: "response-metadata",
    id: `scripted_${index + 1}`,
    modelId: turn.model ?? "scripted"
  }]
  const reasoning = reasoningOf(turn)
  if (reasoning !== undefined) {
    head.push({ type: "reasoning-start", id: "r" })
    for (const delta of words(reasoning.text)) head.push({ type: "reasoning-delta", id: "r", delta })
    head.push({ type: "reasoning-end", id: "r", ...signatureMetadata(reasoning.signature) })
  }
  if (turn.text !== undefined) {
    head.push({ type: "text-start", id: "t" })
    for (const delta of typeof turn.text === "string" ? words(turn.text) : turn.text) {
      head.push({ type: "text-delta", id: "t", delta })
    }
    head.push({ type: "text-end", id: "t" })
  }
  const tail: Array<Response.StreamPartEncoded> = []
  for (const call of resolveCalls(turn, index)) {
    tail.push({ type: "tool-params-start", id: call.id, name: call.name })
    if (call.raw !== "") tail.push({ type: "tool-params-delta", id: call.id, delta: call.raw })
    tail.push({ type: "tool-params-end", id: call.id })
    tail.push({ type: "tool-call", id: call.id, name: call.name, params: call.params })
  }
  tail.push(finishOf(turn))
  return { head, tail }
}

const contentParts = (turn: Turn, index: number): Array<Response.PartEncoded> => {
  const parts: Array<Response.PartEncoded> = []
  const reasoning = reasoningOf(turn)
  if (reasoning !== undefined) {
    parts.push({ type: "reasoning", text: reasoning.text, ...signatureMetadata(reasoning.signature) })
  }
  if (turn.text !== undefined) {
    parts.push({ type: "text", text: typeof turn.text === "string" ? turn.text : turn.text.join("") })
  }
  for (const call of resolveCalls(turn, index)) {
    parts.push({ type: "tool-call", id: call.id, name: call.name, params: call.params })
  }
  parts.push(finishOf(turn))
  return parts
}

const exhausted = (method: string, calls: number) =>
  AiError.make({
    module: "ScriptedModel",
    method,
    reason: new AiError.UnknownError({
      description: `the script has no turn for model call ${calls + 1}: the run called the model more often than scripted`
    })
  })

const failWith = (method: string, reason: AiError.AiErrorReason) =>
  AiError.make({ module: "ScriptedModel", method, reason })

type Emitted = ReturnType<typeof streamParts>["head"][number]

/**
 * The marker every decoded part carries (what `Response.makePart` sets). The
 * parts are written as literals: `makePart`'s generic spread cost more than
 * the rest of a scripted turn together. The marker is written as a plain key,
 * not `[Part]`: a literal with a computed key is built the slow way, and this
 * runs once per streamed part. If effect changes the marker, these literals
 * stop type-checking.
 */
const Part = "~effect/ai/Response/Part" as const

/** The metadata of parts that carry none: one frozen object, not one per part. */
const noMetadata: Response.ProviderMetadata = Object.freeze({})

const makeUsage = (usage: Response.FinishPartEncoded["usage"]) =>
  new Response.Usage({ inputTokens: usage.inputTokens, outputTokens: usage.outputTokens })

const isZero = (usage: Response.FinishPartEncoded["usage"]): boolean =>
  usage.inputTokens.total === 0 && usage.inputTokens.cacheRead === 0 && usage.inputTokens.cacheWrite === 0 &&
  usage.inputTokens.uncached === undefined && usage.outputTokens.total === 0 && usage.outputTokens.reasoning === 0 &&
  usage.outputTokens.text === undefined

let zeroUsage: Response.Usage | undefined

/**
 * A finish part's usage. `Usage` is a Schema class that validates what it is
 * built from, which cost more than the rest of a scripted part; most scripts
 * give no usage, so the all-zero one (immutable) is built once.
 */
const usageOfPart = (usage: Response.FinishPartEncoded["usage"]): Response.Usage =>
  isZero(usage) ? (zeroUsage ??= makeUsage(usage)) : makeUsage(usage)

/** The part `LanguageModel` would decode from an emitted one (deferred tool-call validation). */
const decoded = (part: Emitted): Response.StreamPart<{}, "deferred"> => {
  const metadata = part.metadata ?? noMetadata
  switch (part.type) {
    case "response-metadata":
      return part.modelId === undefined
        ? { "~effect/ai/Response/Part": Part, type: part.type, id: part.id, metadata }
        : { "~effect/ai/Response/Part": Part, type: part.type, id: part.id, modelId: part.modelId, metadata }
    case "text-start":
    case "text-end":
    case "reasoning-start":
    case "reasoning-end":
    case "tool-params-end":
      return { "~effect/ai/Response/Part": Part, type: part.type, id: part.id, metadata }
    case "text-delta":
    case "reasoning-delta":
    case "tool-params-delta":
      return { "~effect/ai/Response/Part": Part, type: part.type, id: part.id, delta: part.delta, metadata }
    case "tool-params-start":
      return {
        "~effect/ai/Response/Part": Part,
        type: part.type,
        id: part.id,
        name: part.name,
        providerExecuted: part.providerExecuted ?? false,
        metadata
      }
    case "tool-call":
      return {
        "~effect/ai/Response/Part": Part,
        type: part.type,
        id: part.id,
        name: part.name,
        params: part.params,
        providerExecuted: part.providerExecuted ?? false,
        metadata
      }
    case "finish":
      return {
        "~effect/ai/Response/Part": Part,
        type: part.type,
        reason: part.reason,
        usage: usageOfPart(part.usage),
        metadata
      }
    default:
      throw new Error(`ScriptedModel does not emit ${part.type} parts`)
  }
}

/**
 * How the scripted model behaves beyond its script.
 *
 * @since 0.1.0
 */
export interface Options {
  /**
   * Record every request (default `true`). Off, nothing is kept, and the
   * request a script function receives holds the run's live transcript:
   * read it there, do not keep it (benchmarks use this to copy nothing).
   */
  readonly record?: boolean | undefined
}

const toolNames = (toolkit: unknown): ReadonlyArray<string> =>
  typeof toolkit === "object" && toolkit !== null && "tools" in toolkit && typeof toolkit.tools === "object" &&
    toolkit.tools !== null
    ? Object.keys(toolkit.tools)
    : []

/**
 * Builds a scripted `LanguageModel` and its recorder.
 *
 * @since 0.1.0
 */
export const make = (script: Script, options: Options = {}): Effect.Effect<{
  readonly model: LanguageModel.LanguageModel
  readonly recorder: Service
}> =>
  Effect.gen(function*() {
    const requests: Array<Request> = []
    let calls = 0
    const next = (request: () => Request): [Turn | undefined, number] => {
      const index = calls++
      if (options.record === false && typeof script !== "function") return [script[index], index]
      const made = request()
      if (options.record !== false) requests.push(made)
      return [typeof script === "function" ? script(index, made) : script[index], index]
    }
    // The loop hands over its live transcript: a recorded request keeps a copy of what it held.
    const snapshot = (prompt: Prompt.Prompt) =>
      options.record === false ? prompt : Prompt.fromMessages(prompt.content.slice())
    const fromProvider = (options: LanguageModel.ProviderOptions) => (): Request => ({
      prompt: snapshot(options.prompt),
      tools: options.tools.map((tool) => tool.name),
      toolChoice: options.toolChoice,
      toolCallValidation: options.toolCallValidation
    })
    const play = <P>(turn: Turn, index: number, method: string, part: (emitted: Emitted) => P) => {
      const body = turn.fail !== undefined
        ? Stream.fail(failWith(method, turn.fail))
        : (() => {
          const { head, tail } = streamParts(turn, index)
          return turn.hang === true
            ? Stream.concat(Stream.fromArray(head.map(part)), Stream.never)
            : Stream.fromArray(head.concat(tail).map(part))
        })()
      return turn.delay === undefined ? body : Stream.concat(Stream.fromEffectDrain(Effect.sleep(turn.delay)), body)
    }
    const base = yield* LanguageModel.make({
      generateText: (options) =>
        Effect.suspend(() => {
          const [turn, index] = next(fromProvider(options))
          if (turn === undefined) return Effect.fail(exhausted("generateText", index))
          const wait = turn.delay === undefined ? Effect.void : Effect.sleep(turn.delay)
          if (turn.fail !== undefined) return Effect.andThen(wait, Effect.fail(failWith("generateText", turn.fail)))
          if (turn.hang === true) return Effect.andThen(wait, Effect.never)
          return Effect.as(wait, contentParts(turn, index))
        }),
      streamText: (options) =>
        Stream.unwrap(Effect.sync(() => {
          const [turn, index] = next(fromProvider(options))
          return turn === undefined
            ? Stream.fail(exhausted("streamText", index))
            : play(turn, index, "streamText", (part): Response.StreamPartEncoded => part)
        }))
    })
    // The agent loop streams with tool resolution off and tool-call validation deferred, where
    // decoding a part only fills in its defaults: the scripted model builds those parts itself
    // instead of encoding them for LanguageModel.make to decode, which costs more than the loop's
    // own turn. Every other use goes through LanguageModel.make.
    // `Channel.suspend`, not `Stream.suspend`: the latter also records every stream it makes in a
    // WeakMap (for `Stream.concat`), a cost per model call that showed in the benchmark's profile.
    const deferred = (input: LanguageModel.GenerateTextOptions<{}>) =>
      Stream.fromChannel(Channel.suspend(() => {
        const [turn, index] = next(() => ({
          prompt: snapshot(Prompt.make(input.prompt)),
          tools: toolNames(input.toolkit),
          toolChoice: input.toolChoice ?? "auto",
          toolCallValidation: "deferred"
        }))
        return Stream.toChannel(
          turn === undefined ? Stream.fail(exhausted("streamText", index)) : play(turn, index, "streamText", decoded)
        )
      }))
    const streamText = (input: LanguageModel.GenerateTextOptions<{}>) => {
      if (input.disableToolCallResolution === true && input.toolCallValidation === "deferred") return deferred(input)
      const { toolkit, ...rest } = input
      return toolkit === undefined ? base.streamText(rest) : base.streamText({ ...rest, toolkit })
    }
    const model: LanguageModel.LanguageModel = {
      ...base,
      // LanguageModel's streamText is typed by overloads on the toolkit given; like
      // LanguageModel.make itself, the implementation is written once over the widest options.
      streamText: streamText as LanguageModel.LanguageModel["streamText"]
    }
    const recorder: Service = {
      requests: Effect.sync(() => requests.slice()),
      calls: Effect.sync(() => calls)
    }
    return { model, recorder }
  })

/**
 * A layer providing the scripted `LanguageModel` and its recorder.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const requestsSeen = Effect.gen(function*() {
 *   const recorder = yield* ScriptedModel.ScriptedModel
 *   return yield* recorder.requests
 * })
 * ```
 *
 * @since 0.1.0
 */
export const layer = (
  script: Script,
  options?: Options
): Layer.Layer<LanguageModel.LanguageModel | ScriptedModel> =>
  Layer.effectContext(Effect.map(make(script, options), ({ model, recorder }) =>
    Context.make(LanguageModel.LanguageModel, model).pipe(Context.add(ScriptedModel, recorder))))
