/**
 * A `LanguageModel` that plays a script: one scripted turn per model call,
 * streamed as deltas the way a real provider streams them. It records every
 * request it receives, can delay, fail or hang on cue, and fails clearly when
 * the run calls it more often than the script allows. Every loop test in this
 * project runs on it, and applications use it to test their own agents: the
 * repository's `docs/testing.md` shows how, with `@effect/vitest`, a mocked
 * service Layer behind the tools, the recorder and the `TestClock`.
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
import type * as Arr from "effect/Array"
import * as Cause from "effect/Cause"
import * as Channel from "effect/Channel"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Pull from "effect/Pull"
import * as Stream from "effect/Stream"
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import type * as Message from "../Message.ts"
import * as ToolArguments from "../ToolArguments.ts"

/**
 * A tool call in a scripted turn. `rawParams` sends the arguments as raw text
 * (to script malformed JSON); otherwise `params` is sent as JSON. Without an
 * `id`, calls get `call_<turn>_<index>`.
 *
 * @since 0.1.0
 * @category models
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
 * @category models
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
 * @category models
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
 * @category models
 */
export type Script = ReadonlyArray<Turn> | ((index: number, request: Request) => Turn | undefined)

/**
 * What a test can ask the scripted model.
 *
 * @since 0.1.0
 * @category services
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
 * @category services
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

const finishReasonOf = (turn: Turn): Response.FinishReason =>
  turn.finishReason ?? ((turn.toolCalls?.length ?? 0) > 0 ? "tool-calls" : "stop")

/** Where our providers put a call's cost: the finish part's metadata. */
const costMetadata = (turn: Turn) =>
  turn.usage?.cost === undefined ? undefined : { "effect-agent": { costUsd: turn.usage.cost } }

const finishOf = (turn: Turn): Response.FinishPartEncoded => {
  const metadata = costMetadata(turn)
  const part: Response.FinishPartEncoded = { type: "finish", reason: finishReasonOf(turn), usage: usageOf(turn) }
  return metadata === undefined ? part : { ...part, metadata }
}

const callId = (call: ToolCall, index: number, i: number): string => call.id ?? `call_${index + 1}_${i + 1}`

const rawParamsOf = (call: ToolCall): string => call.rawParams ?? JSON.stringify(call.params ?? {})

const reasoningOf = (turn: Turn) =>
  turn.reasoning === undefined
    ? undefined
    : typeof turn.reasoning === "string"
    ? { text: turn.reasoning, signature: undefined }
    : turn.reasoning

/** How a scripted reasoning signature travels: in the part's metadata, as a provider's would. */
const signatureOf = (signature: string | undefined) => signature === undefined ? undefined : { scripted: { signature } }

const signatureMetadata = (signature: string | undefined) => {
  const metadata = signatureOf(signature)
  return metadata === undefined ? {} : { metadata }
}

/**
 * Makes the parts of a turn, one method per kind: {@link encodedParts}, what
 * a provider streams; {@link decodedParts}, what `LanguageModel` decodes them
 * to. One builder ({@link turnParts}) puts them in order for both.
 */
interface PartMaker<P> {
  metadata(id: string, modelId: string): P
  start(type: "text-start" | "reasoning-start", id: string): P
  delta(type: "text-delta" | "reasoning-delta" | "tool-params-delta", id: string, delta: string): P
  end(type: "text-end" | "reasoning-end" | "tool-params-end", id: string, signature?: string | undefined): P
  paramsStart(id: string, name: string): P
  toolCall(id: string, name: string, params: unknown): P
  finish(turn: Turn): P
}

/** A turn's parts in stream order; the first `beforeCalls` are what a `hang` turn streams. */
interface Parts<P> {
  readonly all: [P, ...Array<P>]
  readonly beforeCalls: number
}

const turnParts = <P>(turn: Turn, index: number, make: PartMaker<P>): Parts<P> => {
  const all: [P, ...Array<P>] = [make.metadata(`scripted_${index + 1}`, turn.model ?? "scripted")]
  const reasoning = reasoningOf(turn)
  if (reasoning !== undefined) {
    all.push(make.start("reasoning-start", "r"))
    for (const delta of words(reasoning.text)) all.push(make.delta("reasoning-delta", "r", delta))
    all.push(make.end("reasoning-end", "r", reasoning.signature))
  }
  if (turn.text !== undefined) {
    all.push(make.start("text-start", "t"))
    for (const delta of typeof turn.text === "string" ? words(turn.text) : turn.text) {
      all.push(make.delta("text-delta", "t", delta))
    }
    all.push(make.end("text-end", "t"))
  }
  const beforeCalls = all.length
  const calls = turn.toolCalls ?? []
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!
    const id = callId(call, index, i)
    const raw = rawParamsOf(call)
    all.push(make.paramsStart(id, call.name))
    if (raw !== "") all.push(make.delta("tool-params-delta", id, raw))
    all.push(make.end("tool-params-end", id))
    all.push(make.toolCall(id, call.name, ToolArguments.parse(raw)))
  }
  all.push(make.finish(turn))
  return { all, beforeCalls }
}

const encodedParts: PartMaker<Response.StreamPartEncoded> = {
  metadata: (id, modelId) => ({ type: "response-metadata", id, modelId }),
  start: (type, id) => ({ type, id }),
  delta: (type, id, delta) => ({ type, id, delta }),
  end: (type, id, signature) => ({ type, id, ...signatureMetadata(signature) }),
  paramsStart: (id, name) => ({ type: "tool-params-start", id, name }),
  toolCall: (id, name, params) => ({ type: "tool-call", id, name, params }),
  finish: finishOf
}

/**
 * The parts of a turn as a provider would stream them.
 *
 * @since 0.1.0
 * @category utils
 */
export const streamParts = (turn: Turn, index: number): {
  readonly head: Array<Response.StreamPartEncoded>
  readonly tail: Array<Response.StreamPartEncoded>
} => {
  const { all, beforeCalls } = turnParts(turn, index, encodedParts)
  return { head: all.slice(0, beforeCalls), tail: all.slice(beforeCalls) }
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
  const calls = turn.toolCalls ?? []
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!
    const params = ToolArguments.parse(rawParamsOf(call))
    parts.push({ type: "tool-call", id: callId(call, index, i), name: call.name, params })
  }
  parts.push(finishOf(turn))
  return parts
}

const exhausted = (method: string, calls: number) =>
  AiError.make({
    module: "ScriptedModel",
    method,
    reason: new AiError.UnknownError({
      // `calls` counts this model's calls in this process; a script that picks its turn from the conversation (the
      // command's `--script`, `followTranscript`) had none for what the conversation holds either
      description: `the script has no turn for this request (call ${calls + 1} to this model): ` +
        "the run called the model more often than scripted"
    })
  })

const failWith = (method: string, reason: AiError.AiErrorReason) =>
  AiError.make({ module: "ScriptedModel", method, reason })

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

let zeroUsage: Response.Usage | undefined

/**
 * A finish part's usage. `Usage` is a Schema class that validates what it is
 * built from, which cost more than the rest of a scripted part; most scripts
 * give no usage, so the all-zero one (immutable) is built once.
 */
const usageOfPart = (turn: Turn): Response.Usage =>
  turn.usage === undefined ? (zeroUsage ??= makeUsage(usageOf(turn))) : makeUsage(usageOf(turn))

type Decoded = Response.StreamPart<{}, "deferred">

/**
 * The parts `LanguageModel` would decode from {@link encodedParts} (deferred
 * tool-call validation), made directly: the loop's mode streams these.
 */
const decodedParts: PartMaker<Decoded> = {
  metadata: (id, modelId) => ({
    "~effect/ai/Response/Part": Part,
    type: "response-metadata",
    id,
    modelId,
    metadata: noMetadata
  }),
  start: (type, id) => ({ "~effect/ai/Response/Part": Part, type, id, metadata: noMetadata }),
  delta: (type, id, delta) => ({ "~effect/ai/Response/Part": Part, type, id, delta, metadata: noMetadata }),
  end: (type, id, signature) => ({
    "~effect/ai/Response/Part": Part,
    type,
    id,
    metadata: signatureOf(signature) ?? noMetadata
  }),
  paramsStart: (id, name) => ({
    "~effect/ai/Response/Part": Part,
    type: "tool-params-start",
    id,
    name,
    providerExecuted: false,
    metadata: noMetadata
  }),
  toolCall: (id, name, params) => ({
    "~effect/ai/Response/Part": Part,
    type: "tool-call",
    id,
    name,
    params,
    providerExecuted: false,
    metadata: noMetadata
  }),
  finish: (turn) => ({
    "~effect/ai/Response/Part": Part,
    type: "finish",
    reason: finishReasonOf(turn),
    usage: usageOfPart(turn),
    metadata: costMetadata(turn) ?? noMetadata
  })
}

/**
 * How the scripted model behaves beyond its script.
 *
 * @since 0.1.0
 * @category options
 */
export interface Options {
  /**
   * Record every request (default `true`). Off, nothing is kept, and the
   * request a script function receives holds the run's live transcript:
   * read it there, do not keep it (benchmarks use this to copy nothing).
   */
  readonly record?: boolean | undefined
}

const toolNamesOf = new WeakMap<object, ReadonlyArray<string>>()

/** The names of a toolkit's tools (read once per toolkit: the loop passes the same one on every call). */
const toolNames = (toolkit: unknown): ReadonlyArray<string> => {
  if (typeof toolkit !== "object" || toolkit === null || !("tools" in toolkit)) return []
  let names = toolNamesOf.get(toolkit)
  if (names === undefined) {
    names = typeof toolkit.tools === "object" && toolkit.tools !== null ? Object.keys(toolkit.tools) : []
    toolNamesOf.set(toolkit, names)
  }
  return names
}

/**
 * Builds a scripted `LanguageModel` and its recorder.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (script: Script, options: Options = {}): Effect.Effect<{
  readonly model: LanguageModel.LanguageModel
  readonly recorder: Service
}> =>
  Effect.gen(function*() {
    const requests: Array<Request> = []
    let calls = 0
    /** The turn the script gives call `index`, the request recorded (and made only when needed). */
    const turnFor = (index: number, request: () => Request): Turn | undefined => {
      if (options.record === false && typeof script !== "function") return script[index]
      const made = request()
      if (options.record !== false) requests.push(made)
      return typeof script === "function" ? script(index, made) : script[index]
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
    const play = <P>(turn: Turn, index: number, method: string, make: PartMaker<P>) => {
      const body = turn.fail !== undefined
        ? Stream.fail(failWith(method, turn.fail))
        : (() => {
          const { all, beforeCalls } = turnParts(turn, index, make)
          return turn.hang === true
            ? Stream.concat(Stream.fromArray(all.slice(0, beforeCalls)), Stream.never)
            : Stream.fromArray(all)
        })()
      return turn.delay === undefined ? body : Stream.concat(Stream.fromEffectDrain(Effect.sleep(turn.delay)), body)
    }
    const base = yield* LanguageModel.make({
      generateText: (options) =>
        Effect.suspend(() => {
          const index = calls++
          const turn = turnFor(index, fromProvider(options))
          if (turn === undefined) return Effect.fail(exhausted("generateText", index))
          const wait = turn.delay === undefined ? Effect.void : Effect.sleep(turn.delay)
          if (turn.fail !== undefined) return Effect.andThen(wait, Effect.fail(failWith("generateText", turn.fail)))
          if (turn.hang === true) return Effect.andThen(wait, Effect.never)
          return Effect.as(wait, contentParts(turn, index))
        }),
      streamText: (options) =>
        Stream.unwrap(Effect.sync(() => {
          const index = calls++
          const turn = turnFor(index, fromProvider(options))
          return turn === undefined
            ? Stream.fail(exhausted("streamText", index))
            : play(turn, index, "streamText", encodedParts)
        }))
    })
    // The agent loop streams with tool resolution off and tool-call validation deferred, where
    // decoding a part only fills in its defaults: the scripted model builds those parts itself
    // instead of encoding them for LanguageModel.make to decode, which costs more than the loop's
    // own turn. Every other use goes through LanguageModel.make.
    const deferred = (input: LanguageModel.GenerateTextOptions<{}>) => {
      const request = (): Request => ({
        prompt: snapshot(Prompt.make(input.prompt)),
        tools: toolNames(input.toolkit),
        toolChoice: input.toolChoice ?? "auto",
        toolCallValidation: "deferred"
      })
      // The turn is taken when the stream runs, as a provider sends its request then. A plain
      // turn is one chunk, pulled once: a channel of its own, not `Channel.suspend` over
      // `Stream.fromArray`, whose two more channel layers cost fiber steps on every model call.
      return Stream.fromChannel(Channel.fromTransform((upstream, scope) => {
        const index = calls++
        const turn = turnFor(index, request)
        if (turn === undefined || turn.fail !== undefined || turn.delay !== undefined || turn.hang === true) {
          const stream = turn === undefined
            ? Stream.fail(exhausted("streamText", index))
            : play(turn, index, "streamText", decodedParts)
          return Channel.toTransform(Stream.toChannel(stream))(upstream, scope)
        }
        const { all } = turnParts(turn, index, decodedParts)
        let pulled = false
        const pull: Pull.Pull<Arr.NonEmptyReadonlyArray<Decoded>, AiError.AiError, void> = Effect.suspend(() => {
          if (pulled) return Cause.done()
          pulled = true
          return Effect.succeed(all)
        })
        return Effect.succeed(pull)
      }))
    }
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
 * @category layers
 */
export const layer = (
  script: Script,
  options?: Options
): Layer.Layer<LanguageModel.LanguageModel | ScriptedModel> =>
  Layer.effectContext(Effect.map(make(script, options), ({ model, recorder }) =>
    Context.make(LanguageModel.LanguageModel, model).pipe(Context.add(ScriptedModel, recorder))))
