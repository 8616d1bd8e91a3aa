/**
 * An `effect/ai` `LanguageModel` over the OpenAI Chat Completions API, which
 * most servers speak: OpenAI itself, and by `baseUrl` Ollama, vLLM,
 * llama.cpp's server, OpenRouter, Groq, Together, DeepSeek and others.
 *
 * Requests stream (`stream: true`, with usage in the stream). System, user
 * (text, images, PDFs), assistant (text, tool calls) and tool messages are
 * encoded in order, system messages in mid-history included; reasoning parts
 * are not sent back (Chat Completions has no way to replay them). The stream
 * decodes text, reasoning deltas from servers that send them
 * (`reasoning_content` / `reasoning`), tool calls assembled by index from
 * argument pieces, the finish reason and usage (cached and reasoning tokens).
 * Tool calls are passed through as the model sent them, whatever their name,
 * with arguments parsed by `ToolArguments.parse`.
 *
 * @example
 * ```ts
 * import { NodeHttpClient } from "@effect/platform-node"
 * import { Layer } from "effect"
 * import { OpenAiChat } from "effect-agent/providers"
 *
 * // OpenAI, with OPENAI_API_KEY from the environment
 * const OpenAi = OpenAiChat.layer({ model: "gpt-4o" }).pipe(Layer.provide(NodeHttpClient.layerUndici))
 * // A local Ollama server
 * const Ollama = OpenAiChat.layer({ model: "llama3.1", baseUrl: "http://localhost:11434/v1" })
 * ```
 *
 * @since 0.1.0
 */
import { Effect, Layer, Result, Schema } from "effect"
import { LanguageModel, OpenAiStructuredOutput, type Prompt, type Response, Tool } from "effect/ai"
import type { Sse } from "effect/encoding"
import * as ToolArguments from "../ToolArguments.ts"
import * as PromptEncoding from "./internal/PromptEncoding.ts"
import * as ProviderError from "./internal/ProviderError.ts"
import * as ResponseParts from "./internal/ResponseParts.ts"
import * as Settings from "./internal/Settings.ts"
import * as SseTransport from "./internal/SseTransport.ts"
import type * as Provider from "./Provider.ts"

const provider = "OpenAiChat"

/**
 * Options of the Chat Completions layer.
 *
 * @since 0.1.0
 * @category options
 */
export interface Options extends Provider.Options {
  /** `reasoning_effort` for reasoning models. */
  readonly reasoningEffort?: "minimal" | "low" | "medium" | "high" | undefined
  /**
   * The field that carries `maxOutputTokens`: OpenAI's reasoning models
   * require `max_completion_tokens`, many compatible servers only know
   * `max_tokens`. Default: `max_completion_tokens` for api.openai.com,
   * `max_tokens` elsewhere.
   */
  readonly maxTokensField?: "max_tokens" | "max_completion_tokens" | undefined
  /** Extra fields merged into every request body (server-specific settings). */
  readonly body?: Readonly<Record<string, unknown>> | undefined
}

const defaultBaseUrl = "https://api.openai.com/v1"

/**
 * Builds the `LanguageModel` service. Needs an `HttpClient`; the API key is
 * read from `OPENAI_API_KEY` when not given. OpenAI's own API needs one (the
 * layer fails with `Provider.MissingApiKey` when there is none); a
 * server at another `baseUrl` may need none.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.fnUntraced(function*(options: Options) {
  const settings = yield* Settings.resolve(options, {
    provider,
    baseUrl: defaultBaseUrl,
    envVar: "OPENAI_API_KEY",
    keyRequired: Settings.isOpenAi
  })
  const maxTokensField = options.maxTokensField ??
    (settings.baseUrl === defaultBaseUrl ? "max_completion_tokens" : "max_tokens")
  const encodeMessage = PromptEncoding.memo(encodeChatMessage)
  const request = Settings.bearerRequest(settings, "/chat/completions")

  const requestBody = (providerOptions: LanguageModel.ProviderOptions): Record<string, unknown> => {
    const body: Record<string, unknown> = {
      model: settings.model,
      messages: encodeMessages(providerOptions.prompt, encodeMessage),
      stream: true,
      stream_options: { include_usage: true }
    }
    const tools = PromptEncoding.functionTools(providerOptions.tools)
    if (tools.length > 0) {
      body.tools = tools.map(encodeTool)
      body.tool_choice = encodeToolChoice(providerOptions.toolChoice)
    }
    if (settings.maxOutputTokens !== undefined) body[maxTokensField] = settings.maxOutputTokens
    if (settings.temperature !== undefined) body.temperature = settings.temperature
    if (options.reasoningEffort !== undefined) body.reasoning_effort = options.reasoningEffort
    if (providerOptions.responseFormat.type === "json") {
      body.response_format = {
        type: "json_schema",
        json_schema: PromptEncoding.openAiJsonSchema(providerOptions.responseFormat)
      }
    }
    return options.body === undefined ? body : { ...body, ...options.body }
  }

  return yield* SseTransport.languageModel(settings, {
    provider,
    request,
    body: requestBody,
    decoder: () => new ChatDecoder(settings),
    codecTransformer: OpenAiStructuredOutput.toCodecOpenAI,
    supportsSystemMessagesInHistory: true
  })
})

/**
 * The Chat Completions `LanguageModel` as a layer, with `effect/ai`'s `Model.ProviderName`
 * (`openai`) and `Model.ModelName` (the model id), which the run's spans report.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options) =>
  Layer.merge(Layer.effect(LanguageModel.LanguageModel, make(options)), Settings.modelNames("openai", options.model))

// -----------------------------------------------------------------------------
// Request
// -----------------------------------------------------------------------------

type ContentPart =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "image_url"; readonly image_url: { readonly url: string } }
  | { readonly type: "file"; readonly file: { readonly filename: string; readonly file_data: string } }

interface ToolCall {
  readonly id: string
  readonly type: "function"
  readonly function: { readonly name: string; readonly arguments: string }
}

type ChatMessage =
  | { readonly role: "system"; readonly content: string }
  | { readonly role: "user"; readonly content: string | ReadonlyArray<ContentPart> }
  | { readonly role: "assistant"; readonly content: string | null; readonly tool_calls?: ReadonlyArray<ToolCall> }
  | { readonly role: "tool"; readonly tool_call_id: string; readonly content: string }

interface EncodedMessage {
  readonly messages: ReadonlyArray<ChatMessage>
  /** Files of tool results, sent in a user message after the run of tool messages. */
  readonly files: ReadonlyArray<ContentPart>
}

const encodeFile = (part: Prompt.FilePart): ContentPart => {
  const source = PromptEncoding.fileSource(part)
  const url = PromptEncoding.fileUrl(source)
  if (part.mediaType.startsWith("image/")) return { type: "image_url", image_url: { url } }
  if (part.mediaType === "application/pdf" && source.type === "base64") {
    return { type: "file", file: { filename: part.fileName ?? "document.pdf", file_data: url } }
  }
  throw new PromptEncoding.UnsupportedContent(
    `OpenAI Chat Completions cannot take a file of type ${part.mediaType}${source.type === "url" ? " by URL" : ""}`
  )
}

const encodeChatMessage = (message: Prompt.Message): EncodedMessage => {
  switch (message.role) {
    case "system":
      return { messages: [{ role: "system", content: message.content }], files: [] }
    case "user": {
      const only = message.content[0]
      if (message.content.length === 1 && only?.type === "text") {
        return { messages: [{ role: "user", content: only.text }], files: [] }
      }
      const content = message.content.map((part): ContentPart =>
        part.type === "text" ? { type: "text", text: part.text } : encodeFile(part)
      )
      return { messages: [{ role: "user", content }], files: [] }
    }
    case "assistant": {
      let text = ""
      const calls: Array<ToolCall> = []
      for (const part of message.content) {
        if (part.type === "text") text += part.text
        else if (part.type === "tool-call" && !part.providerExecuted) {
          calls.push({
            id: part.id,
            type: "function",
            function: { name: part.name, arguments: ToolArguments.toJsonText(part.params) }
          })
        }
      }
      return {
        messages: [
          calls.length > 0
            ? { role: "assistant", content: text === "" ? null : text, tool_calls: calls }
            : { role: "assistant", content: text }
        ],
        files: []
      }
    }
    case "tool": {
      const messages: Array<ChatMessage> = []
      const files: Array<ContentPart> = []
      for (const part of message.content) {
        if (part.type !== "tool-result") continue
        messages.push({ role: "tool", tool_call_id: part.id, content: PromptEncoding.resultText(part) })
        const attached = PromptEncoding.resultFiles(part)
        if (attached.length > 0) {
          files.push({ type: "text", text: `Attachments of the result of tool call ${part.id}:` })
          for (const file of attached) files.push(encodeFile(file))
        }
      }
      return { messages, files }
    }
  }
}

const encodeMessages = (
  prompt: Prompt.Prompt,
  encode: (message: Prompt.Message) => EncodedMessage
): Array<ChatMessage> => {
  const out: Array<ChatMessage> = []
  let pending: Array<ContentPart> = []
  for (const message of prompt.content) {
    if (message.role !== "tool" && pending.length > 0) {
      out.push({ role: "user", content: pending })
      pending = []
    }
    const encoded = encode(message)
    for (const wire of encoded.messages) out.push(wire)
    for (const file of encoded.files) pending.push(file)
  }
  if (pending.length > 0) out.push({ role: "user", content: pending })
  return out
}

const encodeTool = (tool: Tool.Any) => {
  const description = Tool.getDescription(tool)
  return {
    type: "function",
    function: {
      name: tool.name,
      ...(description === undefined ? {} : { description }),
      parameters: PromptEncoding.parametersSchema(tool)
    }
  }
}

const encodeToolChoice = (choice: LanguageModel.ProviderOptions["toolChoice"]) => {
  if (choice === "auto" || choice === "none" || choice === "required") return choice
  if ("tool" in choice) return { type: "function", function: { name: choice.tool } }
  return choice.mode === "required" ? "required" : "auto"
}

// -----------------------------------------------------------------------------
// Response stream
// -----------------------------------------------------------------------------

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
    prompt_tokens: Schema.Number,
    completion_tokens: Schema.Number,
    prompt_tokens_details: Nullable(Schema.Struct({ cached_tokens: Nullable(Schema.Number) })),
    completion_tokens_details: Nullable(Schema.Struct({ reasoning_tokens: Nullable(Schema.Number) }))
  }))
})
type Chunk = typeof Chunk.Type

const decodeChunk = SseTransport.decodeWith(Chunk, "chat.completion.chunk")

const finishReasons: Record<string, Response.FinishReason> = {
  stop: "stop",
  length: "length",
  tool_calls: "tool-calls",
  function_call: "tool-calls",
  content_filter: "content-filter"
}

interface PendingCall {
  readonly id: string
  readonly name: string
  args: string
}

class ChatDecoder implements SseTransport.EventDecoder {
  readonly terminal = "data: [DONE]"
  finished = false
  private readonly settings: Settings.Settings
  private modelId: string | undefined
  private open: { readonly kind: "text" | "reasoning"; readonly id: string } | undefined
  private blocks = 0
  private readonly calls = new Map<number, PendingCall>()
  private reason: Response.FinishReason = "unknown"
  private usage: Response.FinishPartEncoded["usage"] = { inputTokens: {}, outputTokens: {} }

  constructor(settings: Settings.Settings) {
    this.settings = settings
  }

  push(event: Sse.Event, out: Array<Response.StreamPartEncoded>) {
    if (event.data === "[DONE]") {
      this.close(out)
      out.push(ResponseParts.finish({
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

  private onChunk(chunk: Chunk, out: Array<Response.StreamPartEncoded>) {
    if (this.modelId === undefined && (chunk.model || chunk.id)) {
      this.modelId = chunk.model ?? undefined
      out.push({
        type: "response-metadata",
        ...(chunk.id ? { id: chunk.id } : {}),
        ...(chunk.model ? { modelId: chunk.model } : {}),
        ...(typeof chunk.created === "number" ? { timestamp: new Date(chunk.created * 1000).toISOString() } : {})
      })
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
        this.reason = finishReasons[choice.finish_reason] ?? "other"
        this.close(out)
      }
    }
    if (chunk.usage) this.usage = usageOf(chunk.usage)
    return undefined
  }

  private delta(kind: "text" | "reasoning", delta: string, out: Array<Response.StreamPartEncoded>) {
    if (this.open?.kind !== kind) {
      this.endBlock(out)
      this.open = { kind, id: `${kind}-${this.blocks++}` }
      out.push({ type: kind === "text" ? "text-start" : "reasoning-start", id: this.open.id })
    }
    out.push({ type: kind === "text" ? "text-delta" : "reasoning-delta", id: this.open.id, delta })
  }

  private endBlock(out: Array<Response.StreamPartEncoded>) {
    if (this.open === undefined) return
    out.push({ type: this.open.kind === "text" ? "text-end" : "reasoning-end", id: this.open.id })
    this.open = undefined
  }

  private toolDelta(
    call: NonNullable<NonNullable<Chunk["choices"][number]["delta"]>["tool_calls"]>[number],
    out: Array<Response.StreamPartEncoded>
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
      out.push({ type: "tool-params-start", id: pending.id, name })
    }
    if (args !== "") {
      pending.args += args
      out.push({ type: "tool-params-delta", id: pending.id, delta: args })
    }
    return undefined
  }

  private close(out: Array<Response.StreamPartEncoded>) {
    this.endBlock(out)
    for (const call of this.calls.values()) {
      out.push({ type: "tool-params-end", id: call.id })
      out.push({ type: "tool-call", id: call.id, name: call.name, params: ToolArguments.parse(call.args) })
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
