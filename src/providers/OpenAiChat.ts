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
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as OpenAiStructuredOutput from "effect/ai/OpenAiStructuredOutput"
import type * as Prompt from "effect/ai/Prompt"
import * as Tool from "effect/ai/Tool"
import * as ToolArguments from "./internal/ToolArguments.ts"
import * as OpenAiChatStream from "./internal/OpenAiChatStream.ts"
import * as PromptEncoding from "./internal/PromptEncoding.ts"
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
  // Each message's wire messages as JSON text, made once per message.
  const encodeMessage = PromptEncoding.memo((message: Prompt.Message): EncodedJson => {
    const encoded = encodeChatMessage(message)
    return { messages: encoded.messages.map((wire) => JSON.stringify(wire)), files: encoded.files }
  })
  const toolsJson = PromptEncoding.memo(encodeTools)
  const request = Settings.bearerRequest(settings, "/chat/completions")
  const model = JSON.stringify(settings.model)
  const maxTokens = settings.maxOutputTokens === undefined ? undefined : String(settings.maxOutputTokens)
  const temperature = settings.temperature === undefined ? undefined : JSON.stringify(settings.temperature)
  const reasoningEffort = options.reasoningEffort === undefined ? undefined : JSON.stringify(options.reasoningEffort)

  const requestBody = (providerOptions: LanguageModel.ProviderOptions): string => {
    const tools = toolsJson(providerOptions.tools)
    const fields: Record<string, string | undefined> = {
      model,
      messages: encodeMessages(providerOptions.prompt, encodeMessage),
      stream: "true",
      stream_options: includeUsage,
      tools: tools.text,
      tool_choice: tools.text === undefined ? undefined : JSON.stringify(encodeToolChoice(providerOptions.toolChoice))
    }
    fields[maxTokensField] = maxTokens
    fields.temperature = temperature
    fields.reasoning_effort = reasoningEffort
    if (providerOptions.responseFormat.type === "json") {
      fields.response_format = JSON.stringify({
        type: "json_schema",
        json_schema: PromptEncoding.openAiJsonSchema(providerOptions.responseFormat)
      })
    }
    return PromptEncoding.jsonObject(PromptEncoding.withExtraFields(fields, options.body))
  }

  return yield* SseTransport.languageModel(settings, {
    provider,
    request,
    body: requestBody,
    decoder: (make) => OpenAiChatStream.decoder(settings, make),
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

/** A message's wire messages as JSON text, and the files its tool results attach. */
interface EncodedJson {
  readonly messages: ReadonlyArray<string>
  readonly files: ReadonlyArray<ContentPart>
}

const includeUsage = JSON.stringify({ include_usage: true })

/** The messages of a request as a JSON array's text. */
const encodeMessages = (prompt: Prompt.Prompt, encode: (message: Prompt.Message) => EncodedJson): string => {
  const out: Array<string> = []
  let pending: Array<ContentPart> = []
  for (const message of prompt.content) {
    if (message.role !== "tool" && pending.length > 0) {
      out.push(JSON.stringify({ role: "user", content: pending }))
      pending = []
    }
    const encoded = encode(message)
    for (const wire of encoded.messages) out.push(wire)
    for (const file of encoded.files) pending.push(file)
  }
  if (pending.length > 0) out.push(JSON.stringify({ role: "user", content: pending }))
  return `[${out.join(",")}]`
}

/** The declared tools as JSON text (none: `undefined`), made once per list of tools. */
const encodeTools = (all: ReadonlyArray<Tool.Any>): { readonly text: string | undefined } => {
  const tools = PromptEncoding.functionTools(all)
  return { text: tools.length === 0 ? undefined : JSON.stringify(tools.map(encodeTool)) }
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
