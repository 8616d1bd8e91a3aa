/**
 * The Chat Completions stream: the Schema of a `chat.completion.chunk` and
 * the decoder that turns a response's events into parts (text and reasoning
 * deltas, tool calls assembled by index from argument pieces, the finish
 * reason and usage).
 *
 * @since 0.1.0
 */
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as AiError from "effect/ai/AiError"
import type * as Response from "effect/ai/Response"
import type * as Sse from "effect/encoding/Sse"
import * as ToolArguments from "./ToolArguments.ts"
import * as ProviderError from "./ProviderError.ts"
import type * as ResponseParts from "./ResponseParts.ts"
import type * as Settings from "./Settings.ts"
import * as SseTransport from "./SseTransport.ts"

const Nullable = <S extends Schema.Top>(schema: S) => Schema.optional(Schema.NullOr(schema))

const Chunk = Schema.Struct({
  id: Nullable(Schema.String),
  model: Nullable(Schema.String),
  created: Nullable(Schema.Number),
  choices: Schema.Array(Schema.Struct({
    index: Schema.Number,
    delta: Nullable(Schema.Struct({
      content: Nullable(Schema.String),
      reasoning_content: Nullable(Schema.String),
      reasoning: Nullable(Schema.String),
      refusal: Nullable(Schema.String),
      tool_calls: Nullable(Schema.Array(Schema.Struct({
        index: Schema.Number,
        id: Nullable(Schema.String),
        function: Nullable(Schema.Struct({
          name: Nullable(Schema.String),
          arguments: Nullable(Schema.String)
        }))
      })))
    })),
    finish_reason: Nullable(Schema.String)
  })),
  usage: Nullable(Schema.Struct({
    prompt_tokens: Schema.Int,
    completion_tokens: Schema.Int,
    prompt_tokens_details: Nullable(Schema.Struct({ cached_tokens: Nullable(Schema.Int) })),
    completion_tokens_details: Nullable(Schema.Struct({ reasoning_tokens: Nullable(Schema.Int) }))
  }))
})
type Chunk = typeof Chunk.Type

const decodeWithSchema = SseTransport.decodeWith(Chunk, "chat.completion.chunk")

// A hand-written check of a chunk, ahead of its Schema. Chunks are nearly all
// of what a call receives, and the Schema's decode costs a few microseconds
// each, more than the rest of a chunk's decoding together; this check costs a
// tenth of that. It accepts only values the Schema accepts (tests check it on
// every recorded chunk and on each field of them made wrong), which it passes
// on as they are (the decoder reads only the Schema's fields); a value it does
// not accept goes to the Schema, which decodes it or says what is wrong.
type Json = { readonly [key: string]: unknown }

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value)
const isNullable = (value: unknown, type: "string" | "number"): boolean =>
  value === undefined || value === null || typeof value === type
const isNullableInt = (value: unknown): boolean =>
  value === undefined || value === null || Number.isSafeInteger(value)
const isNullableObject = (value: unknown): value is Json | null | undefined =>
  value === undefined || value === null || isObject(value)

const isToolCall = (call: unknown): boolean => {
  if (!isObject(call) || typeof call.index !== "number" || !isNullable(call.id, "string")) return false
  const fn = call.function
  return isNullableObject(fn) && (fn == null || (isNullable(fn.name, "string") && isNullable(fn.arguments, "string")))
}

const isDelta = (delta: unknown): boolean => {
  if (!isNullableObject(delta)) return false
  if (delta == null) return true
  if (
    !isNullable(delta.content, "string") || !isNullable(delta.reasoning_content, "string") ||
    !isNullable(delta.reasoning, "string") || !isNullable(delta.refusal, "string")
  ) return false
  const calls = delta.tool_calls
  if (calls === undefined || calls === null) return true
  return Array.isArray(calls) && calls.every(isToolCall)
}

const isChoice = (choice: unknown): boolean =>
  isObject(choice) && typeof choice.index === "number" && isDelta(choice.delta) &&
  isNullable(choice.finish_reason, "string")

const isUsage = (usage: unknown): boolean => {
  if (!isNullableObject(usage)) return false
  if (usage == null) return true
  const prompt = usage.prompt_tokens_details
  const completion = usage.completion_tokens_details
  return Number.isSafeInteger(usage.prompt_tokens) && Number.isSafeInteger(usage.completion_tokens) &&
    isNullableObject(prompt) && (prompt == null || isNullableInt(prompt.cached_tokens)) &&
    isNullableObject(completion) && (completion == null || isNullableInt(completion.reasoning_tokens))
}

const isChunk = (value: unknown): value is Chunk =>
  isObject(value) && isNullable(value.id, "string") && isNullable(value.model, "string") &&
  isNullable(value.created, "number") && Array.isArray(value.choices) && value.choices.every(isChoice) &&
  isUsage(value.usage)

/**
 * Decodes one chunk: the hand-written check, else the Schema.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeChunk = (value: unknown): Result.Result<Chunk, AiError.InvalidOutputError> =>
  isChunk(value) ? Result.succeed(value) : decodeWithSchema(value)

/**
 * Whether the Schema of a chunk accepts a value (for the tests of the check).
 *
 * @since 0.1.0
 * @category testing
 */
export const schemaAccepts = (value: unknown): boolean => Result.isSuccess(decodeWithSchema(value))

/**
 * Whether the hand-written check accepts a value (for its tests).
 *
 * @since 0.1.0
 * @category testing
 */
export const checkAccepts = (value: unknown): boolean => isChunk(value)

// A Map, not an object: indexing an object with a string fresh from `JSON.parse` made V8 deoptimize the
// decoder on every response (trace-deopt: "unexpected name in keyed access"), and an object would answer
// a reason such as `toString` with its prototype's function.
const finishReasons: ReadonlyMap<string, Response.FinishReason> = new Map([
  ["stop", "stop"],
  ["length", "length"],
  ["tool_calls", "tool-calls"],
  ["function_call", "tool-calls"],
  ["content_filter", "content-filter"]
])

interface PendingCall {
  readonly id: string
  readonly name: string
  args: string
}

/**
 * A decoder for one response, making its parts with `make`.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decoder = <P>(settings: Settings.Settings, make: ResponseParts.Maker<P>): SseTransport.EventDecoder<P> =>
  new ChatDecoder(settings, make)

class ChatDecoder<P> implements SseTransport.EventDecoder<P> {
  readonly terminal = "data: [DONE]"
  finished = false
  private readonly settings: Settings.Settings
  private readonly make: ResponseParts.Maker<P>
  private modelId: string | undefined
  private open: { readonly kind: "text" | "reasoning"; readonly id: string } | undefined
  private blocks = 0
  private readonly calls = new Map<number, PendingCall>()
  private reason: Response.FinishReason = "unknown"
  private usage: Response.FinishPartEncoded["usage"] = { inputTokens: {}, outputTokens: {} }

  constructor(settings: Settings.Settings, make: ResponseParts.Maker<P>) {
    this.settings = settings
    this.make = make
  }

  push(event: Sse.Event, out: Array<P>) {
    if (event.data === "[DONE]") {
      this.close(out)
      out.push(this.make.finish({
        reason: this.reason,
        usage: this.usage,
        modelId: this.modelId ?? this.settings.model,
        prices: this.settings.prices
      }))
      this.finished = true
      return undefined
    }
    const json = SseTransport.parseData(event)
    if (Result.isFailure(json)) return json.failure
    const error = streamError(json.success)
    if (error !== undefined) return ProviderError.fromStreamError(error.type, error.message)
    const chunk = decodeChunk(json.success)
    if (Result.isFailure(chunk)) return chunk.failure
    return this.onChunk(chunk.success, out)
  }

  private onChunk(chunk: Chunk, out: Array<P>) {
    if (this.modelId === undefined && (chunk.model || chunk.id)) {
      this.modelId = chunk.model ?? undefined
      out.push(this.make.metadata(
        chunk.id || undefined,
        chunk.model || undefined,
        typeof chunk.created === "number" ? chunk.created * 1000 : undefined
      ))
    }
    for (const choice of chunk.choices) {
      if (choice.index !== 0) continue
      const delta = choice.delta
      if (delta) {
        const reasoning = delta.reasoning_content ?? delta.reasoning
        if (reasoning) this.delta("reasoning", reasoning, out)
        if (delta.content) this.delta("text", delta.content, out)
        if (delta.refusal) this.delta("text", delta.refusal, out)
        if (delta.tool_calls) {
          for (const call of delta.tool_calls) {
            const missing = this.toolDelta(call, out)
            if (missing !== undefined) return missing
          }
        }
      }
      if (choice.finish_reason) {
        this.reason = finishReasons.get(choice.finish_reason) ?? "other"
        this.close(out)
      }
    }
    if (chunk.usage) this.usage = usageOf(chunk.usage)
    return undefined
  }

  private delta(kind: "text" | "reasoning", delta: string, out: Array<P>) {
    if (this.open?.kind !== kind) {
      this.endBlock(out)
      this.open = { kind, id: `${kind}-${this.blocks++}` }
      out.push(this.make.start(kind === "text" ? "text-start" : "reasoning-start", this.open.id))
    }
    out.push(this.make.delta(kind === "text" ? "text-delta" : "reasoning-delta", this.open.id, delta))
  }

  private endBlock(out: Array<P>) {
    if (this.open === undefined) return
    out.push(this.make.end(this.open.kind === "text" ? "text-end" : "reasoning-end", this.open.id))
    this.open = undefined
  }

  private toolDelta(
    call: NonNullable<NonNullable<Chunk["choices"][number]["delta"]>["tool_calls"]>[number],
    out: Array<P>
  ) {
    const args = call.function?.arguments ?? ""
    let pending = this.calls.get(call.index)
    if (pending === undefined) {
      const name = call.function?.name
      if (!call.id || !name) {
        return ProviderError.invalidStream(
          `the first delta of tool call ${call.index} has no ${call.id ? "function.name" : "id"}`
        )
      }
      pending = { id: call.id, name, args: "" }
      this.calls.set(call.index, pending)
      out.push(this.make.paramsStart(pending.id, name))
    }
    if (args !== "") {
      pending.args += args
      out.push(this.make.paramsDelta(pending.id, args))
    }
    return undefined
  }

  private close(out: Array<P>) {
    this.endBlock(out)
    for (const call of this.calls.values()) {
      out.push(this.make.paramsEnd(call.id))
      out.push(this.make.toolCall(call.id, call.name, ToolArguments.parse(call.args)))
    }
    this.calls.clear()
  }
}

const streamError = (json: unknown): { type: string | undefined; message: string | undefined } | undefined => {
  if (typeof json !== "object" || json === null || !("error" in json) || "choices" in json) return undefined
  const error: unknown = json.error
  if (typeof error === "string") return { type: undefined, message: error }
  if (typeof error !== "object" || error === null) return { type: undefined, message: undefined }
  const type = "code" in error && typeof error.code === "string"
    ? error.code
    : "type" in error && typeof error.type === "string"
    ? error.type
    : undefined
  const message = "message" in error && typeof error.message === "string" ? error.message : undefined
  return { type, message }
}

const usageOf = (usage: NonNullable<Chunk["usage"]>): Response.FinishPartEncoded["usage"] => {
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0
  return {
    inputTokens: {
      total: usage.prompt_tokens,
      uncached: usage.prompt_tokens - cached,
      cacheRead: cached,
      cacheWrite: 0
    },
    outputTokens: {
      total: usage.completion_tokens,
      reasoning: usage.completion_tokens_details?.reasoning_tokens ?? 0
    }
  }
}
