/**
 * An `effect/ai` `LanguageModel` over the OpenAI Responses API.
 *
 * Requests stream and, by default, are not stored (`store: false`): the whole
 * transcript is sent each turn. Reasoning is kept across turns the stateless
 * way: with `reasoning` set, the layer asks for `reasoning.encrypted_content`,
 * puts it (with the item id) on the reasoning part's metadata under `openai`,
 * and sends each reasoning item back with its encrypted content and summary on
 * the next request. Function calls carry their item id under `openai.itemId`;
 * tool results are sent as `function_call_output` items. With `store: true`
 * item ids are sent back too, so the server can resolve stored items.
 *
 * The stream decodes output text, reasoning summaries (one reasoning block per
 * summary part), function calls by output item with their argument deltas,
 * and usage with cached and reasoning tokens. Tool calls are passed through
 * whatever their name, with arguments parsed by `ToolArguments.parse`.
 *
 * @example
 * ```ts
 * import { NodeHttpClient } from "@effect/platform-node"
 * import { Layer } from "effect"
 * import { OpenAiResponses } from "effect-agent/providers"
 *
 * const Gpt5 = OpenAiResponses.layer({ model: "gpt-5", reasoning: { effort: "medium", summary: "auto" } }).pipe(
 *   Layer.provide(NodeHttpClient.layerUndici)
 * )
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as OpenAiStructuredOutput from "effect/ai/OpenAiStructuredOutput"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Tool from "effect/ai/Tool"
import type * as Sse from "effect/encoding/Sse"
import * as ToolArguments from "./internal/ToolArguments.ts"
import * as PromptEncoding from "./internal/PromptEncoding.ts"
import * as ProviderError from "./internal/ProviderError.ts"
import * as ResponseParts from "./internal/ResponseParts.ts"
import * as Settings from "./internal/Settings.ts"
import * as SseTransport from "./internal/SseTransport.ts"
import type * as Provider from "./Provider.ts"

const provider = "OpenAiResponses"

/**
 * Options of the Responses layer.
 *
 * @since 0.1.0
 * @category options
 */
export interface Options extends Provider.Options {
  /**
   * Reasoning settings for reasoning models. Setting it also asks for the
   * encrypted reasoning content (when `store` is false), so that reasoning is
   * carried across turns.
   */
  readonly reasoning?: {
    readonly effort?: "minimal" | "low" | "medium" | "high" | undefined
    readonly summary?: "auto" | "concise" | "detailed" | undefined
  } | undefined
  /** Let OpenAI store responses (default false: every request carries the whole transcript). */
  readonly store?: boolean | undefined
  /** Extra fields merged into every request body. */
  readonly body?: Readonly<Record<string, unknown>> | undefined
}

/**
 * Builds the `LanguageModel` service. Needs an `HttpClient`; the API key is
 * read from `OPENAI_API_KEY` when not given. OpenAI's own API needs one (the
 * layer fails with `Provider.MissingApiKey` when there is none); a
 * compatible server at another `baseUrl` may need none.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.fnUntraced(function*(options: Options) {
  const settings = yield* Settings.resolve(options, {
    provider,
    baseUrl: "https://api.openai.com/v1",
    envVar: "OPENAI_API_KEY",
    keyRequired: Settings.isOpenAi
  })
  const store = options.store ?? false
  // Each message's input items as JSON text, made once per message.
  const encodeMessage = PromptEncoding.memo((message: Prompt.Message): ReadonlyArray<string> =>
    encodeInputItems(message, store).map((item) => JSON.stringify(item))
  )
  const toolsJson = PromptEncoding.memo(encodeTools)
  const request = Settings.bearerRequest(settings, "/responses")
  const fixed = {
    model: JSON.stringify(settings.model),
    store: JSON.stringify(store),
    reasoning: options.reasoning === undefined ? undefined : JSON.stringify(options.reasoning),
    include: options.reasoning === undefined || store ? undefined : JSON.stringify(["reasoning.encrypted_content"]),
    maxOutputTokens: settings.maxOutputTokens === undefined ? undefined : String(settings.maxOutputTokens),
    temperature: settings.temperature === undefined ? undefined : JSON.stringify(settings.temperature)
  }

  const requestBody = (providerOptions: LanguageModel.ProviderOptions): string => {
    const input: Array<string> = []
    for (const message of providerOptions.prompt.content) {
      for (const item of encodeMessage(message)) input.push(item)
    }
    const tools = toolsJson(providerOptions.tools)
    const fields: Record<string, string | undefined> = {
      model: fixed.model,
      input: `[${input.join(",")}]`,
      stream: "true",
      store: fixed.store,
      reasoning: fixed.reasoning,
      include: fixed.include,
      tools: tools.text,
      tool_choice: tools.text === undefined ? undefined : JSON.stringify(encodeToolChoice(providerOptions.toolChoice)),
      max_output_tokens: fixed.maxOutputTokens,
      temperature: fixed.temperature
    }
    if (providerOptions.responseFormat.type === "json") {
      const format = PromptEncoding.openAiJsonSchema(providerOptions.responseFormat)
      fields.text = JSON.stringify({ format: { type: "json_schema", ...format } })
    }
    return PromptEncoding.jsonObject(PromptEncoding.withExtraFields(fields, options.body))
  }

  return yield* SseTransport.languageModel(settings, {
    provider,
    request,
    body: requestBody,
    decoder: (make) => new ResponsesDecoder(settings, make),
    codecTransformer: OpenAiStructuredOutput.toCodecOpenAI,
    supportsSystemMessagesInHistory: true
  })
})

/**
 * The Responses `LanguageModel` as a layer, with `effect/ai`'s `Model.ProviderName`
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

type InputContent =
  | { readonly type: "input_text"; readonly text: string }
  | { readonly type: "input_image"; readonly image_url: string }
  | { readonly type: "input_file"; readonly filename: string; readonly file_data: string }

interface ReasoningItem {
  readonly type: "reasoning"
  readonly id?: string
  readonly encrypted_content?: string
  readonly summary: Array<{ readonly type: "summary_text"; readonly text: string }>
}

type InputItem =
  | { readonly role: "system" | "assistant"; readonly content: string }
  | { readonly role: "user"; readonly content: ReadonlyArray<InputContent> }
  | ReasoningItem
  | {
    readonly type: "function_call"
    readonly call_id: string
    readonly name: string
    readonly arguments: string
    readonly id?: string
  }
  | {
    readonly type: "function_call_output"
    readonly call_id: string
    readonly output: string | ReadonlyArray<InputContent>
  }

const encodeFile = (part: Prompt.FilePart): InputContent => {
  const source = PromptEncoding.fileSource(part)
  if (part.mediaType.startsWith("image/")) return { type: "input_image", image_url: PromptEncoding.fileUrl(source) }
  if (part.mediaType === "application/pdf" && source.type === "base64") {
    return { type: "input_file", filename: part.fileName ?? "document.pdf", file_data: PromptEncoding.fileUrl(source) }
  }
  throw new PromptEncoding.UnsupportedContent(
    `the OpenAI Responses API cannot take a file of type ${part.mediaType}${source.type === "url" ? " by URL" : ""}`
  )
}

const encodeInputItems = (message: Prompt.Message, store: boolean): ReadonlyArray<InputItem> => {
  switch (message.role) {
    case "system":
      return [{ role: "system", content: message.content }]
    case "user":
      return [{
        role: "user",
        content: message.content.map((part): InputContent =>
          part.type === "text" ? { type: "input_text", text: part.text } : encodeFile(part)
        )
      }]
    case "assistant":
      return encodeAssistant(message, store)
    case "tool": {
      const items: Array<InputItem> = []
      for (const part of message.content) {
        if (part.type !== "tool-result") continue
        const files = PromptEncoding.resultFiles(part)
        const text = PromptEncoding.resultText(part)
        items.push({
          type: "function_call_output",
          call_id: part.id,
          output: files.length === 0
            ? text
            : [...(text === "" ? [] : [{ type: "input_text", text } as const]), ...files.map(encodeFile)]
        })
      }
      return items
    }
  }
}

const encodeAssistant = (message: Prompt.AssistantMessage, store: boolean): Array<InputItem> => {
  const items: Array<InputItem> = []
  let text = ""
  let reasoning: { readonly itemId: string; readonly item: ReasoningItem } | undefined
  const flushText = () => {
    if (text !== "") items.push({ role: "assistant", content: text })
    text = ""
  }
  for (const part of message.content) {
    if (part.type === "text") {
      text += part.text
      continue
    }
    flushText()
    if (part.type === "reasoning") {
      const openai = PromptEncoding.providerOptions(part.options, "openai")
      const itemId = PromptEncoding.optionString(openai, "itemId")
      const encrypted = PromptEncoding.optionString(openai, "encryptedContent")
      // Without the server's copy (store) or the encrypted content, a reasoning
      // item cannot be replayed; the API would reject it.
      if (itemId === undefined || (!store && encrypted === undefined)) continue
      if (reasoning?.itemId !== itemId) {
        const item: ReasoningItem = {
          type: "reasoning",
          ...(store ? { id: itemId } : {}),
          ...(encrypted === undefined ? {} : { encrypted_content: encrypted }),
          summary: []
        }
        reasoning = { itemId, item }
        items.push(item)
      }
      if (part.text !== "") reasoning.item.summary.push({ type: "summary_text", text: part.text })
      continue
    }
    reasoning = undefined
    if (part.type === "tool-call" && !part.providerExecuted) {
      const itemId = PromptEncoding.optionString(PromptEncoding.providerOptions(part.options, "openai"), "itemId")
      items.push({
        type: "function_call",
        call_id: part.id,
        name: part.name,
        arguments: ToolArguments.toJsonText(part.params),
        ...(store && itemId !== undefined ? { id: itemId } : {})
      })
    }
  }
  flushText()
  return items
}

const encodeTool = (tool: Tool.Any) => {
  const description = Tool.getDescription(tool)
  return {
    type: "function",
    name: tool.name,
    ...(description === undefined ? {} : { description }),
    parameters: PromptEncoding.parametersSchema(tool),
    strict: Tool.getStrictMode(tool) ?? false
  }
}

/** The declared tools as JSON text (none: `undefined`), made once per list of tools. */
const encodeTools = (all: ReadonlyArray<Tool.Any>): { readonly text: string | undefined } => {
  const tools = PromptEncoding.functionTools(all)
  return { text: tools.length === 0 ? undefined : JSON.stringify(tools.map(encodeTool)) }
}

const encodeToolChoice = (choice: LanguageModel.ProviderOptions["toolChoice"]) => {
  if (choice === "auto" || choice === "none" || choice === "required") return choice
  if ("tool" in choice) return { type: "function", name: choice.tool }
  return choice.mode === "required" ? "required" : "auto"
}

// -----------------------------------------------------------------------------
// Response stream
// -----------------------------------------------------------------------------

const Nullable = <S extends Schema.Top>(schema: S) => Schema.optional(Schema.NullOr(schema))

const WireUsage = Schema.Struct({
  input_tokens: Schema.Int,
  output_tokens: Schema.Int,
  input_tokens_details: Nullable(Schema.Struct({ cached_tokens: Nullable(Schema.Int) })),
  output_tokens_details: Nullable(Schema.Struct({ reasoning_tokens: Nullable(Schema.Int) }))
})

const ItemRef = { item_id: Schema.String }

const Completed = Schema.Struct({
  usage: Nullable(WireUsage),
  incomplete_details: Nullable(Schema.Struct({ reason: Nullable(Schema.String) }))
})

const decoders = {
  created: SseTransport.decodeWith(
    Schema.Struct({
      response: Schema.Struct({ id: Schema.String, model: Schema.String, created_at: Nullable(Schema.Number) })
    }),
    "response.created"
  ),
  item: SseTransport.decodeWith(
    Schema.Struct({ item: Schema.Struct({ type: Schema.String, id: Schema.String }) }),
    "response.output_item"
  ),
  functionCall: SseTransport.decodeWith(
    Schema.Struct({
      item: Schema.Struct({
        id: Schema.String,
        call_id: Schema.String,
        name: Schema.String,
        arguments: Nullable(Schema.String)
      })
    }),
    "response.output_item (function_call)"
  ),
  reasoningDone: SseTransport.decodeWith(
    Schema.Struct({ item: Schema.Struct({ id: Schema.String, encrypted_content: Nullable(Schema.String) }) }),
    "response.output_item.done (reasoning)"
  ),
  textDelta: SseTransport.decodeWith(
    Schema.Struct({ ...ItemRef, content_index: Nullable(Schema.Number), delta: Schema.String }),
    "response.output_text.delta"
  ),
  summaryPart: SseTransport.decodeWith(
    Schema.Struct({ ...ItemRef, summary_index: Schema.Number }),
    "response.reasoning_summary_part.added"
  ),
  summaryDelta: SseTransport.decodeWith(
    Schema.Struct({ ...ItemRef, summary_index: Schema.Number, delta: Schema.String }),
    "response.reasoning_summary_text.delta"
  ),
  reasoningTextDelta: SseTransport.decodeWith(
    Schema.Struct({ ...ItemRef, content_index: Nullable(Schema.Number), delta: Schema.String }),
    "response.reasoning_text.delta"
  ),
  argumentsDelta: SseTransport.decodeWith(
    Schema.Struct({ ...ItemRef, delta: Schema.String }),
    "response.function_call_arguments.delta"
  ),
  completed: SseTransport.decodeWith(Schema.Struct({ response: Completed }), "response.completed"),
  failed: SseTransport.decodeWith(
    Schema.Struct({
      response: Schema.Struct({
        error: Nullable(Schema.Struct({ code: Nullable(Schema.String), message: Nullable(Schema.String) }))
      })
    }),
    "response.failed"
  ),
  error: SseTransport.decodeWith(
    Schema.Struct({ code: Nullable(Schema.String), message: Nullable(Schema.String) }),
    "error"
  )
}

// A Map, not an object (see OpenAiChatStream's finish reasons).
const incompleteReasons: ReadonlyMap<string, Response.FinishReason> = new Map([
  ["max_output_tokens", "length"],
  ["content_filter", "content-filter"]
])

interface PendingCall {
  readonly callId: string
  readonly name: string
  args: string
}

class ResponsesDecoder<P> implements SseTransport.EventDecoder<P> {
  readonly terminal = "response.completed"
  finished = false
  private readonly settings: Settings.Settings
  private readonly make: ResponseParts.Maker<P>
  private modelId: string | undefined
  private metadataSent = false
  private readonly texts = new Map<string, Array<string>>()
  private readonly reasoning = new Map<string, Array<string>>()
  private readonly calls = new Map<string, PendingCall>()
  private sawToolCall = false

  constructor(settings: Settings.Settings, make: ResponseParts.Maker<P>) {
    this.settings = settings
    this.make = make
  }

  push(event: Sse.Event, out: Array<P>): AiError.AiErrorReason | undefined {
    const json = SseTransport.parseData(event)
    if (Result.isFailure(json)) return json.failure
    const value = json.success
    const type = typeof value === "object" && value !== null && "type" in value && typeof value.type === "string"
      ? value.type
      : event.event
    switch (type) {
      case "response.created":
      case "response.in_progress":
        return this.metadataSent ? undefined : this.created(value, out)
      case "response.output_item.added":
        return this.itemAdded(value, out)
      case "response.output_item.done":
        return this.itemDone(value, out)
      case "response.output_text.delta":
      case "response.refusal.delta":
        return this.decode(decoders.textDelta, value, (delta) => {
          this.open(this.texts, delta.item_id, `${delta.item_id}:${delta.content_index ?? 0}`, "text-start", out)
          out.push(this.make.delta("text-delta", `${delta.item_id}:${delta.content_index ?? 0}`, delta.delta))
        })
      case "response.reasoning_summary_part.added":
        return this.decode(decoders.summaryPart, value, (part) => {
          this.open(this.reasoning, part.item_id, `${part.item_id}:${part.summary_index}`, "reasoning-start", out)
        })
      case "response.reasoning_summary_text.delta":
        return this.decode(decoders.summaryDelta, value, (delta) => {
          const id = `${delta.item_id}:${delta.summary_index}`
          this.open(this.reasoning, delta.item_id, id, "reasoning-start", out)
          if (delta.delta !== "") out.push(this.make.delta("reasoning-delta", id, delta.delta))
        })
      case "response.reasoning_text.delta":
        return this.decode(decoders.reasoningTextDelta, value, (delta) => {
          const id = `${delta.item_id}:text${delta.content_index ?? 0}`
          this.open(this.reasoning, delta.item_id, id, "reasoning-start", out)
          if (delta.delta !== "") out.push(this.make.delta("reasoning-delta", id, delta.delta))
        })
      case "response.function_call_arguments.delta":
        return this.decode(decoders.argumentsDelta, value, (delta) => {
          const call = this.calls.get(delta.item_id)
          if (call === undefined || delta.delta === "") return
          call.args += delta.delta
          out.push(this.make.paramsDelta(call.callId, delta.delta))
        })
      case "response.completed":
      case "response.incomplete":
        return this.decode(decoders.completed, value, (done) => this.complete(done.response, type, out))
      case "response.failed": {
        const failed = decoders.failed(value)
        if (Result.isFailure(failed)) return failed.failure
        const error = failed.success.response.error
        return ProviderError.fromStreamError(error?.code ?? undefined, error?.message ?? undefined)
      }
      case "error": {
        const error = decoders.error(value)
        if (Result.isFailure(error)) return error.failure
        return ProviderError.fromStreamError(error.success.code ?? undefined, error.success.message ?? undefined)
      }
      default:
        return undefined
    }
  }

  private decode<A>(
    decoder: (value: unknown) => Result.Result<A, AiError.InvalidOutputError>,
    value: unknown,
    f: (decoded: A) => void
  ): AiError.InvalidOutputError | undefined {
    const decoded = decoder(value)
    if (Result.isFailure(decoded)) return decoded.failure
    f(decoded.success)
    return undefined
  }

  private created(value: unknown, out: Array<P>) {
    return this.decode(decoders.created, value, ({ response }) => {
      this.metadataSent = true
      this.modelId = response.model
      out.push(this.make.metadata(
        response.id,
        response.model,
        typeof response.created_at === "number" ? response.created_at * 1000 : undefined
      ))
    })
  }

  private open(
    blocks: Map<string, Array<string>>,
    itemId: string,
    id: string,
    start: "text-start" | "reasoning-start",
    out: Array<P>
  ) {
    let ids = blocks.get(itemId)
    if (ids === undefined) {
      ids = []
      blocks.set(itemId, ids)
    }
    if (ids.includes(id)) return
    ids.push(id)
    out.push(this.make.start(start, id))
  }

  private itemAdded(value: unknown, out: Array<P>) {
    const item = decoders.item(value)
    if (Result.isFailure(item)) return item.failure
    if (item.success.item.type !== "function_call") return undefined
    return this.decode(decoders.functionCall, value, ({ item }) => {
      this.calls.set(item.id, { callId: item.call_id, name: item.name, args: "" })
      out.push(this.make.paramsStart(item.call_id, item.name))
    })
  }

  private itemDone(value: unknown, out: Array<P>) {
    const item = decoders.item(value)
    if (Result.isFailure(item)) return item.failure
    const { id, type } = item.success.item
    switch (type) {
      case "message":
        this.endTexts(id, out)
        return undefined
      case "reasoning":
        return this.decode(decoders.reasoningDone, value, ({ item }) => {
          const metadata = {
            openai: item.encrypted_content ? { itemId: id, encryptedContent: item.encrypted_content } : { itemId: id }
          }
          const ids = this.reasoning.get(id) ?? []
          if (ids.length === 0) {
            ids.push(`${id}:0`)
            out.push(this.make.start("reasoning-start", `${id}:0`))
          }
          for (const block of ids) out.push(this.make.end("reasoning-end", block, metadata))
          this.reasoning.delete(id)
        })
      case "function_call":
        return this.decode(decoders.functionCall, value, ({ item }) => {
          const pending = this.calls.get(item.id)
          this.calls.delete(item.id)
          const args = item.arguments ?? pending?.args ?? ""
          if (pending === undefined) out.push(this.make.paramsStart(item.call_id, item.name))
          out.push(this.make.paramsEnd(item.call_id))
          out.push(
            this.make.toolCall(item.call_id, item.name, ToolArguments.parse(args), { openai: { itemId: item.id } })
          )
          this.sawToolCall = true
        })
      default:
        return undefined
    }
  }

  private endTexts(itemId: string, out: Array<P>) {
    for (const id of this.texts.get(itemId) ?? []) out.push(this.make.end("text-end", id))
    this.texts.delete(itemId)
  }

  private complete(response: typeof Completed.Type, type: string, out: Array<P>) {
    for (const itemId of [...this.texts.keys()]) this.endTexts(itemId, out)
    for (const [itemId, ids] of this.reasoning) {
      for (const id of ids) out.push(this.make.end("reasoning-end", id, { openai: { itemId } }))
    }
    this.reasoning.clear()
    const incomplete = response.incomplete_details?.reason
    const reason: Response.FinishReason = type === "response.incomplete"
      ? (incomplete ? incompleteReasons.get(incomplete) ?? "other" : "other")
      : this.sawToolCall
      ? "tool-calls"
      : "stop"
    out.push(this.make.finish({
      reason,
      usage: usageOf(response.usage),
      modelId: this.modelId ?? this.settings.model,
      prices: this.settings.prices
    }))
    this.finished = true
  }
}

const usageOf = (usage: typeof WireUsage.Type | null | undefined): Response.FinishPartEncoded["usage"] => {
  if (!usage) return { inputTokens: {}, outputTokens: {} }
  const cached = usage.input_tokens_details?.cached_tokens ?? 0
  return {
    inputTokens: { total: usage.input_tokens, uncached: usage.input_tokens - cached, cacheRead: cached, cacheWrite: 0 },
    outputTokens: { total: usage.output_tokens, reasoning: usage.output_tokens_details?.reasoning_tokens ?? 0 }
  }
}
