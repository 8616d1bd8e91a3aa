/**
 * An `effect/ai` `LanguageModel` over Anthropic's Messages API.
 *
 * Requests stream. Leading system messages become the `system` prompt; later
 * ones (wrap-up notices, warnings) are sent as user text inside `<system>`
 * tags, since the API has no system role in history. Consecutive tool results
 * are merged into the user message that follows the assistant turn, ahead of
 * any text. Thinking blocks are replayed unchanged with their signatures
 * (`options.anthropic.signature`, or `options.signature.signature`), redacted
 * thinking with its data; reasoning without a signature is not sent (the API
 * would reject it). With `promptCaching` (the default) the system prompt, the
 * tool definitions and the conversation so far are marked as cache
 * breakpoints, so each turn reads the previous turn's prefix from the cache.
 *
 * The stream decodes text, thinking (with its signature, and redacted
 * thinking), tool calls assembled from `input_json_delta` pieces, `ping`s,
 * the stop reason and usage (cache reads and writes included). Tool calls are
 * passed through whatever their name, with arguments parsed by
 * `ToolArguments.parse`.
 *
 * @example
 * ```ts
 * import { NodeHttpClient } from "@effect/platform-node"
 * import { Layer } from "effect"
 * import { Anthropic } from "effect-agent/providers"
 *
 * // ANTHROPIC_API_KEY from the environment
 * const Claude = Anthropic.layer({ model: "claude-sonnet-4-5", thinking: { budgetTokens: 4000 } }).pipe(
 *   Layer.provide(NodeHttpClient.layerUndici)
 * )
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Tool from "effect/ai/Tool"
import type * as Sse from "effect/encoding/Sse"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import * as ToolArguments from "./internal/ToolArguments.ts"
import * as PromptEncoding from "./internal/PromptEncoding.ts"
import * as ProviderError from "./internal/ProviderError.ts"
import * as ResponseParts from "./internal/ResponseParts.ts"
import * as Settings from "./internal/Settings.ts"
import * as SseTransport from "./internal/SseTransport.ts"
import type * as Provider from "./Provider.ts"

const provider = "Anthropic"

/**
 * Options of the Anthropic layer.
 *
 * @since 0.1.0
 * @category options
 */
export interface Options extends Provider.Options {
  /** Extended thinking with a token budget (`maxOutputTokens` must exceed it). */
  readonly thinking?: { readonly budgetTokens: number } | undefined
  /** Mark cache breakpoints on the system prompt, the tools and the conversation (default true). */
  readonly promptCaching?: boolean | undefined
  /** The `anthropic-version` header (default `2023-06-01`). */
  readonly version?: string | undefined
}

/**
 * The output token limit when `maxOutputTokens` is not given (the API
 * requires one); thinking budgets are added to it.
 *
 * @since 0.1.0
 * @category defaults
 */
export const defaultMaxOutputTokens = 8192

/**
 * Builds the `LanguageModel` service. Needs an `HttpClient`, and an API key:
 * given, or read from `ANTHROPIC_API_KEY` (the layer fails with
 * `Provider.MissingApiKey` when there is none).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.fnUntraced(function*(options: Options) {
  const settings = yield* Settings.resolve(options, {
    provider,
    baseUrl: "https://api.anthropic.com",
    envVar: "ANTHROPIC_API_KEY",
    keyRequired: () => true
  })
  const caching = options.promptCaching ?? true
  const thinkingBudget = options.thinking === undefined
    ? undefined
    : Math.max(1024, Math.floor(options.thinking.budgetTokens))
  const maxTokens = settings.maxOutputTokens ?? defaultMaxOutputTokens + (thinkingBudget ?? 0)
  const encodeMessage = PromptEncoding.memo(encodeAnthropicMessage)
  const request = HttpClientRequest.post(`${settings.baseUrl}/v1/messages`).pipe(
    HttpClientRequest.setHeaders({
      ...settings.headers,
      "anthropic-version": options.version ?? "2023-06-01",
      ...(settings.apiKey === undefined ? {} : { "x-api-key": Redacted.value(settings.apiKey) })
    })
  )

  const requestBody = (providerOptions: LanguageModel.ProviderOptions): string => {
    if (providerOptions.responseFormat.type === "json") {
      throw new PromptEncoding.UnsupportedContent(
        "the Anthropic layer does not support structured output (generateObject); declare a tool instead"
      )
    }
    const { messages, system } = encodeMessages(providerOptions.prompt, encodeMessage, caching)
    const body: Record<string, unknown> = { model: settings.model, max_tokens: maxTokens, stream: true, messages }
    if (system.length > 0) body.system = system
    const tools = PromptEncoding.functionTools(providerOptions.tools)
    // Sent even with tool choice "none": the API rejects tool_use blocks in a
    // transcript when no tools are defined.
    if (tools.length > 0) {
      body.tools = tools.map((tool, i) => encodeTool(tool, caching && i === tools.length - 1))
      body.tool_choice = encodeToolChoice(providerOptions.toolChoice)
    }
    if (settings.temperature !== undefined) body.temperature = settings.temperature
    if (thinkingBudget !== undefined) body.thinking = { type: "enabled", budget_tokens: thinkingBudget }
    return JSON.stringify(body)
  }

  return yield* SseTransport.languageModel(settings, {
    provider,
    request,
    body: requestBody,
    decoder: (make) => new AnthropicDecoder(settings, make),
    supportsSystemMessagesInHistory: false
  })
})

/**
 * The Anthropic `LanguageModel` as a layer, with `effect/ai`'s `Model.ProviderName`
 * (`anthropic`) and `Model.ModelName` (the model id), which the run's spans report.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options) =>
  Layer.merge(Layer.effect(LanguageModel.LanguageModel, make(options)), Settings.modelNames("anthropic", options.model))

// -----------------------------------------------------------------------------
// Request
// -----------------------------------------------------------------------------

type Source =
  | { readonly type: "base64"; readonly media_type: string; readonly data: string }
  | { readonly type: "url"; readonly url: string }

type Block =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "image"; readonly source: Source }
  | { readonly type: "document"; readonly source: Source }
  | { readonly type: "thinking"; readonly thinking: string; readonly signature: string }
  | { readonly type: "redacted_thinking"; readonly data: string }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly input: unknown }
  | {
    readonly type: "tool_result"
    readonly tool_use_id: string
    readonly content: string | ReadonlyArray<Block>
    readonly is_error?: boolean
  }

interface WireMessage {
  readonly role: "user" | "assistant"
  readonly content: ReadonlyArray<Block>
}

type Encoded =
  | { readonly kind: "system"; readonly text: string }
  | { readonly kind: "message"; readonly message: WireMessage }

const encodeFile = (part: Prompt.FilePart): Block => {
  const source = PromptEncoding.fileSource(part)
  const wire: Source = source.type === "url"
    ? { type: "url", url: source.url }
    : { type: "base64", media_type: source.mediaType, data: source.data }
  if (part.mediaType.startsWith("image/")) return { type: "image", source: wire }
  if (part.mediaType === "application/pdf") return { type: "document", source: wire }
  throw new PromptEncoding.UnsupportedContent(`Anthropic cannot take a file of type ${part.mediaType}`)
}

const thinkingBlock = (part: Prompt.ReasoningPart): Block | undefined => {
  const anthropic = PromptEncoding.providerOptions(part.options, "anthropic")
  const redacted = PromptEncoding.optionString(anthropic, "redactedData")
  if (redacted !== undefined) return { type: "redacted_thinking", data: redacted }
  const signature = PromptEncoding.optionString(anthropic, "signature") ??
    PromptEncoding.optionString(PromptEncoding.providerOptions(part.options, "signature"), "signature")
  return signature === undefined ? undefined : { type: "thinking", thinking: part.text, signature }
}

// tool_use input must be an object: arguments that were not a JSON object
// (malformed text the loop already answered with an error) are sent as {}.
const toolInput = (params: unknown): unknown => {
  const value = ToolArguments.isMalformed(params) ? undefined : params
  return typeof value === "object" && value !== null && !Array.isArray(value) ? value : {}
}

const encodeAnthropicMessage = (message: Prompt.Message): Encoded | undefined => {
  switch (message.role) {
    case "system":
      return { kind: "system", text: message.content }
    case "user":
      return {
        kind: "message",
        message: {
          role: "user",
          content: message.content.map((part): Block =>
            part.type === "text" ? { type: "text", text: part.text } : encodeFile(part)
          )
        }
      }
    case "assistant": {
      const content: Array<Block> = []
      for (const part of message.content) {
        if (part.type === "text") {
          if (part.text !== "") content.push({ type: "text", text: part.text })
        } else if (part.type === "reasoning") {
          const block = thinkingBlock(part)
          if (block !== undefined) content.push(block)
        } else if (part.type === "tool-call" && !part.providerExecuted) {
          content.push({ type: "tool_use", id: part.id, name: part.name, input: toolInput(part.params) })
        }
      }
      return content.length === 0 ? undefined : { kind: "message", message: { role: "assistant", content } }
    }
    case "tool": {
      const content: Array<Block> = []
      for (const part of message.content) {
        if (part.type !== "tool-result") continue
        const files = PromptEncoding.resultFiles(part)
        const text = PromptEncoding.resultText(part)
        content.push({
          type: "tool_result",
          tool_use_id: part.id,
          content: files.length === 0
            ? text
            : [...(text === "" ? [] : [{ type: "text", text } as const]), ...files.map(encodeFile)],
          ...(part.isFailure ? { is_error: true } : {})
        })
      }
      return content.length === 0 ? undefined : { kind: "message", message: { role: "user", content } }
    }
  }
}

const cacheControl = { type: "ephemeral" } as const

type CachedBlock = Block & { readonly cache_control?: typeof cacheControl }

const encodeMessages = (
  prompt: Prompt.Prompt,
  encode: (message: Prompt.Message) => Encoded | undefined,
  caching: boolean
) => {
  const system: Array<{ type: "text"; text: string; cache_control?: typeof cacheControl }> = []
  const messages: Array<{ role: "user" | "assistant"; content: Array<CachedBlock> }> = []
  for (const message of prompt.content) {
    const encoded = encode(message)
    if (encoded === undefined) continue
    let wire: WireMessage
    if (encoded.kind === "system") {
      if (messages.length === 0) {
        system.push({ type: "text", text: encoded.text })
        continue
      }
      wire = { role: "user", content: [{ type: "text", text: `<system>\n${encoded.text}\n</system>` }] }
    } else {
      wire = encoded.message
    }
    const last = messages[messages.length - 1]
    if (last !== undefined && last.role === wire.role) {
      for (const block of wire.content) last.content.push(block)
    } else {
      messages.push({ role: wire.role, content: [...wire.content] })
    }
  }
  for (const message of messages) {
    if (message.role === "user") message.content = toolResultsFirst(message.content)
  }
  if (caching) {
    const lastSystem = system[system.length - 1]
    if (lastSystem !== undefined) system[system.length - 1] = { ...lastSystem, cache_control: cacheControl }
    const lastMessage = messages[messages.length - 1]
    const lastBlock = lastMessage?.content[lastMessage.content.length - 1]
    // Thinking blocks cannot carry a cache breakpoint.
    if (lastMessage !== undefined && lastBlock !== undefined && !isThinking(lastBlock)) {
      lastMessage.content[lastMessage.content.length - 1] = { ...lastBlock, cache_control: cacheControl }
    }
  }
  return { system, messages }
}

const isThinking = (block: Block): boolean => block.type === "thinking" || block.type === "redacted_thinking"

// The API wants a user turn's tool results ahead of its other content.
const toolResultsFirst = (content: Array<Block>): Array<Block> => {
  const firstOther = content.findIndex((block) => block.type !== "tool_result")
  if (firstOther === -1 || !content.slice(firstOther).some((block) => block.type === "tool_result")) return content
  return [
    ...content.filter((block) => block.type === "tool_result"),
    ...content.filter((block) => block.type !== "tool_result")
  ]
}

const encodeTool = (tool: Tool.Any, cache: boolean) => {
  const description = Tool.getDescription(tool)
  return {
    name: tool.name,
    ...(description === undefined ? {} : { description }),
    input_schema: PromptEncoding.parametersSchema(tool),
    ...(cache ? { cache_control: cacheControl } : {})
  }
}

const encodeToolChoice = (choice: LanguageModel.ProviderOptions["toolChoice"]) => {
  if (choice === "auto" || choice === "none") return { type: choice }
  if (choice === "required") return { type: "any" }
  if ("tool" in choice) return { type: "tool", name: choice.tool }
  return { type: choice.mode === "required" ? "any" : "auto" }
}

// -----------------------------------------------------------------------------
// Response stream
// -----------------------------------------------------------------------------

const Count = Schema.optional(Schema.NullOr(Schema.Int))

const WireUsage = Schema.Struct({
  input_tokens: Count,
  output_tokens: Count,
  cache_creation_input_tokens: Count,
  cache_read_input_tokens: Count
})
type WireUsage = typeof WireUsage.Type

const decoders = {
  message_start: SseTransport.decodeWith(
    Schema.Struct({ message: Schema.Struct({ id: Schema.String, model: Schema.String, usage: WireUsage }) }),
    "message_start"
  ),
  content_block_start: SseTransport.decodeWith(
    Schema.Struct({ index: Schema.Number, content_block: Schema.Struct({ type: Schema.String }) }),
    "content_block_start"
  ),
  content_block_delta: SseTransport.decodeWith(
    Schema.Struct({ index: Schema.Number, delta: Schema.Struct({ type: Schema.String }) }),
    "content_block_delta"
  ),
  content_block_stop: SseTransport.decodeWith(Schema.Struct({ index: Schema.Number }), "content_block_stop"),
  message_delta: SseTransport.decodeWith(
    Schema.Struct({
      delta: Schema.Struct({ stop_reason: Schema.optional(Schema.NullOr(Schema.String)) }),
      usage: Schema.optional(Schema.NullOr(WireUsage))
    }),
    "message_delta"
  ),
  error: SseTransport.decodeWith(
    Schema.Struct({
      error: Schema.Struct({ type: Schema.optional(Schema.String), message: Schema.optional(Schema.String) })
    }),
    "error"
  )
}

const blockDecoders = {
  text: SseTransport.decodeWith(
    Schema.Struct({ content_block: Schema.Struct({ text: Schema.optional(Schema.String) }) }),
    "content_block_start (text)"
  ),
  thinking: SseTransport.decodeWith(
    Schema.Struct({
      content_block: Schema.Struct({
        thinking: Schema.optional(Schema.String),
        signature: Schema.optional(Schema.String)
      })
    }),
    "content_block_start (thinking)"
  ),
  redacted_thinking: SseTransport.decodeWith(
    Schema.Struct({ content_block: Schema.Struct({ data: Schema.String }) }),
    "content_block_start (redacted_thinking)"
  ),
  tool_use: SseTransport.decodeWith(
    Schema.Struct({ content_block: Schema.Struct({ id: Schema.String, name: Schema.String }) }),
    "content_block_start (tool_use)"
  )
}

const deltaDecoders = {
  text_delta: SseTransport.decodeWith(Schema.Struct({ delta: Schema.Struct({ text: Schema.String }) }), "text_delta"),
  thinking_delta: SseTransport.decodeWith(
    Schema.Struct({ delta: Schema.Struct({ thinking: Schema.String }) }),
    "thinking_delta"
  ),
  signature_delta: SseTransport.decodeWith(
    Schema.Struct({ delta: Schema.Struct({ signature: Schema.String }) }),
    "signature_delta"
  ),
  input_json_delta: SseTransport.decodeWith(
    Schema.Struct({ delta: Schema.Struct({ partial_json: Schema.String }) }),
    "input_json_delta"
  )
}

// A Map, not an object (see OpenAiChatStream's finish reasons: V8 deoptimized the decoder per response, and
// `toString` would have found the prototype's function).
const stopReasons: ReadonlyMap<string, Response.FinishReason> = new Map([
  ["end_turn", "stop"],
  ["stop_sequence", "stop"],
  ["max_tokens", "length"],
  ["model_context_window_exceeded", "length"],
  ["tool_use", "tool-calls"],
  ["pause_turn", "pause"],
  ["refusal", "content-filter"]
])

type OpenBlock =
  | { readonly kind: "text"; readonly id: string }
  | { readonly kind: "thinking"; readonly id: string; signature: string }
  | { readonly kind: "redacted"; readonly id: string; readonly data: string }
  | { readonly kind: "tool"; readonly id: string; readonly name: string; args: string }

class AnthropicDecoder<P> implements SseTransport.EventDecoder<P> {
  readonly terminal = "message_stop"
  finished = false
  private readonly settings: Settings.Settings
  private readonly make: ResponseParts.Maker<P>
  private readonly blocks = new Map<number, OpenBlock>()
  private modelId: string | undefined
  private reason: Response.FinishReason = "unknown"
  private usage: WireUsage = {}

  constructor(settings: Settings.Settings, make: ResponseParts.Maker<P>) {
    this.settings = settings
    this.make = make
  }

  push(event: Sse.Event, out: Array<P>): AiError.AiErrorReason | undefined {
    const json = SseTransport.parseData(event)
    if (Result.isFailure(json)) return json.failure
    const type = typeof json.success === "object" && json.success !== null && "type" in json.success
      ? json.success.type
      : event.event
    switch (type) {
      case "message_start": {
        const decoded = decoders.message_start(json.success)
        if (Result.isFailure(decoded)) return decoded.failure
        const message = decoded.success.message
        this.modelId = message.model
        this.usage = message.usage
        out.push(this.make.metadata(message.id, message.model, undefined))
        return undefined
      }
      case "content_block_start":
        return this.start(json.success, out)
      case "content_block_delta":
        return this.delta(json.success, out)
      case "content_block_stop": {
        const decoded = decoders.content_block_stop(json.success)
        if (Result.isFailure(decoded)) return decoded.failure
        this.stop(decoded.success.index, out)
        return undefined
      }
      case "message_delta": {
        const decoded = decoders.message_delta(json.success)
        if (Result.isFailure(decoded)) return decoded.failure
        const reason = decoded.success.delta.stop_reason
        if (reason) this.reason = stopReasons.get(reason) ?? "other"
        if (decoded.success.usage) this.usage = mergeUsage(this.usage, decoded.success.usage)
        return undefined
      }
      case "message_stop": {
        for (const index of [...this.blocks.keys()]) this.stop(index, out)
        out.push(this.make.finish({
          reason: this.reason,
          usage: usageOf(this.usage),
          modelId: this.modelId ?? this.settings.model,
          prices: this.settings.prices
        }))
        this.finished = true
        return undefined
      }
      case "error": {
        const decoded = decoders.error(json.success)
        if (Result.isFailure(decoded)) return decoded.failure
        return ProviderError.fromStreamError(decoded.success.error.type, decoded.success.error.message)
      }
      default:
        return undefined
    }
  }

  private start(json: unknown, out: Array<P>): AiError.AiErrorReason | undefined {
    const decoded = decoders.content_block_start(json)
    if (Result.isFailure(decoded)) return decoded.failure
    const { content_block, index } = decoded.success
    const id = String(index)
    switch (content_block.type) {
      case "text": {
        const block = blockDecoders.text(json)
        if (Result.isFailure(block)) return block.failure
        this.blocks.set(index, { kind: "text", id })
        out.push(this.make.start("text-start", id))
        const text = block.success.content_block.text
        if (text) out.push(this.make.delta("text-delta", id, text))
        return undefined
      }
      case "thinking": {
        const block = blockDecoders.thinking(json)
        if (Result.isFailure(block)) return block.failure
        this.blocks.set(index, { kind: "thinking", id, signature: block.success.content_block.signature ?? "" })
        out.push(this.make.start("reasoning-start", id))
        const thinking = block.success.content_block.thinking
        if (thinking) out.push(this.make.delta("reasoning-delta", id, thinking))
        return undefined
      }
      case "redacted_thinking": {
        const block = blockDecoders.redacted_thinking(json)
        if (Result.isFailure(block)) return block.failure
        this.blocks.set(index, { kind: "redacted", id, data: block.success.content_block.data })
        out.push(this.make.start("reasoning-start", id))
        return undefined
      }
      case "tool_use": {
        const block = blockDecoders.tool_use(json)
        if (Result.isFailure(block)) return block.failure
        const { id: callId, name } = block.success.content_block
        this.blocks.set(index, { kind: "tool", id: callId, name, args: "" })
        out.push(this.make.paramsStart(callId, name))
        return undefined
      }
      default:
        return undefined
    }
  }

  private delta(json: unknown, out: Array<P>): AiError.AiErrorReason | undefined {
    const decoded = decoders.content_block_delta(json)
    if (Result.isFailure(decoded)) return decoded.failure
    const block = this.blocks.get(decoded.success.index)
    if (block === undefined) return undefined
    switch (decoded.success.delta.type) {
      case "text_delta": {
        const delta = deltaDecoders.text_delta(json)
        if (Result.isFailure(delta)) return delta.failure
        if (block.kind === "text" && delta.success.delta.text !== "") {
          out.push(this.make.delta("text-delta", block.id, delta.success.delta.text))
        }
        return undefined
      }
      case "thinking_delta": {
        const delta = deltaDecoders.thinking_delta(json)
        if (Result.isFailure(delta)) return delta.failure
        if (block.kind === "thinking" && delta.success.delta.thinking !== "") {
          out.push(this.make.delta("reasoning-delta", block.id, delta.success.delta.thinking))
        }
        return undefined
      }
      case "signature_delta": {
        const delta = deltaDecoders.signature_delta(json)
        if (Result.isFailure(delta)) return delta.failure
        if (block.kind === "thinking") block.signature += delta.success.delta.signature
        return undefined
      }
      case "input_json_delta": {
        const delta = deltaDecoders.input_json_delta(json)
        if (Result.isFailure(delta)) return delta.failure
        if (block.kind === "tool" && delta.success.delta.partial_json !== "") {
          block.args += delta.success.delta.partial_json
          out.push(this.make.paramsDelta(block.id, delta.success.delta.partial_json))
        }
        return undefined
      }
      default:
        return undefined
    }
  }

  private stop(index: number, out: Array<P>) {
    const block = this.blocks.get(index)
    if (block === undefined) return
    this.blocks.delete(index)
    switch (block.kind) {
      case "text":
        out.push(this.make.end("text-end", block.id))
        return
      case "thinking":
        out.push(
          block.signature === ""
            ? this.make.end("reasoning-end", block.id)
            : this.make.end("reasoning-end", block.id, { anthropic: { signature: block.signature } })
        )
        return
      case "redacted":
        out.push(this.make.end("reasoning-end", block.id, { anthropic: { redactedData: block.data } }))
        return
      case "tool":
        out.push(this.make.paramsEnd(block.id))
        out.push(this.make.toolCall(block.id, block.name, ToolArguments.parse(block.args)))
        return
    }
  }
}

const mergeUsage = (start: WireUsage, delta: WireUsage): WireUsage => ({
  input_tokens: delta.input_tokens ?? start.input_tokens,
  output_tokens: delta.output_tokens ?? start.output_tokens,
  cache_creation_input_tokens: delta.cache_creation_input_tokens ?? start.cache_creation_input_tokens,
  cache_read_input_tokens: delta.cache_read_input_tokens ?? start.cache_read_input_tokens
})

const usageOf = (usage: WireUsage): Response.FinishPartEncoded["usage"] => {
  const uncached = usage.input_tokens ?? 0
  const cacheRead = usage.cache_read_input_tokens ?? 0
  const cacheWrite = usage.cache_creation_input_tokens ?? 0
  return {
    inputTokens: { total: uncached + cacheRead + cacheWrite, uncached, cacheRead, cacheWrite },
    outputTokens: usage.output_tokens == null ? {} : { total: usage.output_tokens }
  }
}
