/**
 * The transcript of a run: content parts, messages, stop reasons and usage, as
 * Schemas that round-trip through JSON, and their conversion to an `effect/ai`
 * `Prompt`.
 *
 * Messages are plain objects (cheap to build, cheap to persist). Each message
 * is converted to its `Prompt` form once, when it is appended to a run
 * (see {@link toPromptMessage}); the transcript is never re-converted whole.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import * as Prompt from "effect/ai/Prompt"
import * as Compat from "./compat.ts"

// -----------------------------------------------------------------------------
// Content parts
// -----------------------------------------------------------------------------

/**
 * Plain text.
 *
 * @since 0.1.0
 * @category schemas
 */
export const TextPart = Schema.Struct({
  type: Schema.Literal("text"),
  text: Schema.String
})
/**
 * @since 0.1.0
 * @category models
 */
export type TextPart = typeof TextPart.Type

/**
 * Where an image's bytes come from: inline base64 data, or a URL.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ImageSource = Schema.Union([
  Schema.Struct({ type: Schema.Literal("base64"), data: Schema.String }),
  Schema.Struct({ type: Schema.Literal("url"), url: Schema.String })
])
/**
 * @since 0.1.0
 * @category models
 */
export type ImageSource = typeof ImageSource.Type

/**
 * An image, with its media type (`image/png`, `image/jpeg`, …).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ImagePart = Schema.Struct({
  type: Schema.Literal("image"),
  mediaType: Schema.String,
  source: ImageSource
})
/**
 * @since 0.1.0
 * @category models
 */
export type ImagePart = typeof ImagePart.Type

/**
 * Provider data attached to a part, keyed by provider (`anthropic`, `openai`,
 * …). It is replayed to the provider unchanged on later requests.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ProviderData = Schema.Record(Schema.String, Schema.Unknown)
/**
 * @since 0.1.0
 * @category models
 */
export type ProviderData = typeof ProviderData.Type

/**
 * A model's reasoning. `signature` and `providerData` carry what a provider
 * needs to accept the reasoning back on the next request (Anthropic thinking
 * signatures, OpenAI encrypted reasoning items); `redacted` marks reasoning
 * the provider returned only in opaque form.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ReasoningPart = Schema.Struct({
  type: Schema.Literal("reasoning"),
  text: Schema.String,
  signature: Schema.optionalKey(Schema.String),
  redacted: Schema.optionalKey(Schema.Boolean),
  providerData: Schema.optionalKey(ProviderData)
})
/**
 * @since 0.1.0
 * @category models
 */
export type ReasoningPart = typeof ReasoningPart.Type

/**
 * A call the model asked for. `params` is the JSON the model sent, unvalidated:
 * the loop validates it against the tool's Schema when it runs the call.
 * Arguments that were not valid JSON are kept as a `ToolArguments.Malformed`
 * value holding the raw text. `id` is unique in its message: the loop keeps
 * the model's id when it is 1 to 128 characters of printable ASCII and no
 * earlier call of the reply has it, and gives the call an id of its own
 * otherwise (`x`, then `x_2`; `call_1` for an empty or unprintable id).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ToolCallPart = Schema.Struct({
  type: Schema.Literal("tool-call"),
  id: Schema.String,
  name: Schema.String,
  params: Schema.Unknown,
  providerData: Schema.optionalKey(ProviderData)
})
/**
 * @since 0.1.0
 * @category models
 */
export type ToolCallPart = typeof ToolCallPart.Type

/**
 * What a user message or a tool result may hold.
 *
 * @since 0.1.0
 * @category schemas
 */
export const UserContent = Schema.Union([TextPart, ImagePart])
/**
 * @since 0.1.0
 * @category models
 */
export type UserContent = typeof UserContent.Type

/**
 * What an assistant message may hold, in the order the model produced it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const AssistantContent = Schema.Union([TextPart, ReasoningPart, ToolCallPart])
/**
 * @since 0.1.0
 * @category models
 */
export type AssistantContent = typeof AssistantContent.Type

// -----------------------------------------------------------------------------
// Usage and stop reasons
// -----------------------------------------------------------------------------

/**
 * Why the model stopped: a natural `stop`, to call tools (`toolUse`), at its
 * output limit (`length`), on an `error`, because the run `aborted` it, or for
 * a provider reason with no better name (`other`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const StopReason = Schema.Literals(["stop", "toolUse", "length", "error", "aborted", "other"])
/**
 * @since 0.1.0
 * @category models
 */
export type StopReason = typeof StopReason.Type

const Count = Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))

/**
 * Tokens used by one model call, or summed over a run. `input` counts every
 * prompt token (cached ones included), `cacheRead` and `cacheWrite` say how many
 * of those hit or filled the provider's cache, and `reasoning` how many of the
 * `output` tokens were reasoning. `cost` is in US dollars, when the provider
 * knows the model's prices.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Usage = Schema.Struct({
  input: Count,
  output: Count,
  cacheRead: Count,
  cacheWrite: Count,
  reasoning: Count,
  cost: Schema.optionalKey(Count)
})
/**
 * @since 0.1.0
 * @category models
 */
export type Usage = typeof Usage.Type

/**
 * No tokens used.
 *
 * @since 0.1.0
 * @category constructors
 */
export const emptyUsage: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 }

/**
 * Adds two usages; the cost is summed when either side has one.
 *
 * @since 0.1.0
 * @category usage
 */
export const addUsage = (self: Usage, that: Usage): Usage => {
  const sum: {
    input: number
    output: number
    cacheRead: number
    cacheWrite: number
    reasoning: number
    cost?: number
  } = {
    input: self.input + that.input,
    output: self.output + that.output,
    cacheRead: self.cacheRead + that.cacheRead,
    cacheWrite: self.cacheWrite + that.cacheWrite,
    reasoning: self.reasoning + that.reasoning
  }
  if (self.cost !== undefined || that.cost !== undefined) sum.cost = (self.cost ?? 0) + (that.cost ?? 0)
  return sum
}

/**
 * Input plus output tokens.
 *
 * @since 0.1.0
 * @category usage
 */
export const totalTokens = (usage: Usage): number => usage.input + usage.output

/**
 * What a budget of model calls counts of a usage: total, input or output
 * tokens, or the cost in USD (0 when unknown). The wall clock is not counted
 * from usage.
 *
 * @example
 * ```ts
 * import { Message } from "effect-agent"
 *
 * const usage = { input: 120, output: 30, cacheRead: 0, cacheWrite: 0, reasoning: 0, cost: 0.002 }
 * console.log(Message.counted("tokens", usage), Message.counted("costUsd", usage)) // Output: 150 0.002
 * ```
 *
 * @since 0.1.0
 * @category usage
 */
export const counted = (budget: "tokens" | "inputTokens" | "outputTokens" | "costUsd", usage: Usage): number => {
  switch (budget) {
    case "tokens":
      return totalTokens(usage)
    case "inputTokens":
      return usage.input
    case "outputTokens":
      return usage.output
    case "costUsd":
      return usage.cost ?? 0
  }
}

/**
 * The usage of the last model call in a transcript: the last assistant
 * message's, or `undefined` when there is none.
 *
 * @since 0.1.0
 * @category usage
 */
export const lastCallUsage = (messages: ReadonlyArray<Message>): Usage | undefined => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!
    if (message.role === "assistant") return message.usage
  }
  return undefined
}

// -----------------------------------------------------------------------------
// Messages
// -----------------------------------------------------------------------------

/**
 * An instruction from the application: the system prompt, or a message a hook
 * or guard injects mid-run (a wrap-up request, a loop warning).
 *
 * @since 0.1.0
 * @category schemas
 */
export const SystemMessage = Schema.Struct({
  role: Schema.Literal("system"),
  content: Schema.String
})
/**
 * @since 0.1.0
 * @category models
 */
export type SystemMessage = typeof SystemMessage.Type

/**
 * A message from the user: the prompt, steering, follow-ups.
 *
 * @since 0.1.0
 * @category schemas
 */
export const UserMessage = Schema.Struct({
  role: Schema.Literal("user"),
  content: Schema.Array(UserContent)
})
/**
 * @since 0.1.0
 * @category models
 */
export type UserMessage = typeof UserMessage.Type

/**
 * One model reply: its parts in order, why it stopped, what it used, the
 * provider's error text when it stopped on an error, and the model id the
 * provider reported.
 *
 * @since 0.1.0
 * @category schemas
 */
export const AssistantMessage = Schema.Struct({
  role: Schema.Literal("assistant"),
  content: Schema.Array(AssistantContent),
  stopReason: StopReason,
  usage: Usage,
  errorMessage: Schema.optionalKey(Schema.String),
  model: Schema.optionalKey(Schema.String)
})
/**
 * @since 0.1.0
 * @category models
 */
export type AssistantMessage = typeof AssistantMessage.Type

/**
 * The result of one tool call. `content` is what the model reads; `details`
 * is for the application (structured results, full text of truncated output,
 * why a call was blocked) and never reaches the model.
 *
 * @since 0.1.0
 * @category schemas
 */
export const ToolResultMessage = Schema.Struct({
  role: Schema.Literal("toolResult"),
  toolCallId: Schema.String,
  toolName: Schema.String,
  content: Schema.Array(UserContent),
  isError: Schema.Boolean,
  details: Schema.optionalKey(Schema.Unknown)
})
/**
 * @since 0.1.0
 * @category models
 */
export type ToolResultMessage = typeof ToolResultMessage.Type

/**
 * Application data kept in the transcript (a UI marker, a note, an artefact).
 * It is never sent to the model unless a `transformContext` hook converts it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const CustomMessage = Schema.Struct({
  role: Schema.Literal("custom"),
  kind: Schema.String,
  payload: Schema.Unknown
})
/**
 * @since 0.1.0
 * @category models
 */
export type CustomMessage = typeof CustomMessage.Type

/**
 * Any message of a transcript.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Message = Schema.Union([SystemMessage, UserMessage, AssistantMessage, ToolResultMessage, CustomMessage])
/**
 * @since 0.1.0
 * @category models
 */
export type Message = typeof Message.Type

/**
 * A transcript: messages in order.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Transcript = Schema.Array(Message)
/**
 * @since 0.1.0
 * @category models
 */
export type Transcript = ReadonlyArray<Message>

// -----------------------------------------------------------------------------
// Constructors
// -----------------------------------------------------------------------------

/**
 * A text part.
 *
 * @since 0.1.0
 * @category constructors
 */
export const text = (text: string): TextPart => ({ type: "text", text })

/**
 * A user message from text or parts.
 *
 * @example
 * ```ts
 * import { Message } from "effect-agent"
 *
 * const ask = Message.user("What is 2 + 2?")
 * console.log(ask.role, Message.textOf(ask)) // Output: user What is 2 + 2?
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const user = (content: string | ReadonlyArray<UserContent>): UserMessage => ({
  role: "user",
  content: typeof content === "string" ? [text(content)] : content
})

/**
 * A system message.
 *
 * @since 0.1.0
 * @category constructors
 */
export const system = (content: string): SystemMessage => ({ role: "system", content })

/**
 * A custom (application) message.
 *
 * @since 0.1.0
 * @category constructors
 */
export const custom = (kind: string, payload: unknown): CustomMessage => ({ role: "custom", kind, payload })

/**
 * A tool result with text content.
 *
 * @since 0.1.0
 * @category constructors
 */
export const toolResult = (options: {
  readonly toolCallId: string
  readonly toolName: string
  readonly text: string
  readonly isError: boolean
  readonly details?: unknown
}): ToolResultMessage => {
  const message: {
    role: "toolResult"
    toolCallId: string
    toolName: string
    content: ReadonlyArray<UserContent>
    isError: boolean
    details?: unknown
  } = {
    role: "toolResult",
    toolCallId: options.toolCallId,
    toolName: options.toolName,
    content: [text(options.text)],
    isError: options.isError
  }
  if (options.details !== undefined) message.details = options.details
  return message
}

// -----------------------------------------------------------------------------
// Accessors
// -----------------------------------------------------------------------------

/**
 * The tool calls of an assistant message, in order.
 *
 * @since 0.1.0
 * @category getters
 */
export const toolCalls = (message: AssistantMessage): ReadonlyArray<ToolCallPart> => {
  const calls: Array<ToolCallPart> = []
  for (const part of message.content) if (part.type === "tool-call") calls.push(part)
  return calls
}

/**
 * Whether an assistant message asks for tool calls (without collecting them).
 *
 * @since 0.1.0
 * @category getters
 */
export const hasToolCalls = (message: AssistantMessage): boolean => {
  for (const part of message.content) if (part.type === "tool-call") return true
  return false
}

/**
 * The concatenated text parts of a message (empty for messages without text).
 *
 * @since 0.1.0
 * @category getters
 */
export const textOf = (message: Message): string => {
  switch (message.role) {
    case "system":
      return message.content
    case "custom":
      return ""
    default: {
      let out = ""
      for (const part of message.content) if (part.type === "text") out += part.text
      return out
    }
  }
}

// -----------------------------------------------------------------------------
// Conversion to effect/ai Prompt
// -----------------------------------------------------------------------------

const toPromptUserPart = (part: UserContent): Prompt.TextPart | Prompt.FilePart =>
  part.type === "text"
    ? Compat.textPart(part.text)
    : Prompt.makePart("file", {
      mediaType: part.mediaType,
      data: part.source.type === "base64" ? part.source.data : new URL(part.source.url)
    })

const toPromptAssistantPart = (
  part: AssistantContent
): Prompt.TextPart | Prompt.ReasoningPart | Prompt.ToolCallPart => {
  switch (part.type) {
    case "text":
      return Compat.textPart(part.text)
    case "reasoning":
      return Prompt.makePart("reasoning", {
        text: part.text,
        options: reasoningOptions(part)
      })
    case "tool-call":
      return Compat.toolCallPart(part.id, part.name, part.params, jsonOptions(part.providerData))
  }
}

// Provider data is JSON by construction (it came from the provider's stream or a
// decoded checkpoint); Prompt's options type says so, so it is re-checked here once.
const isJsonRecord = Schema.is(Prompt.ProviderOptions)

const jsonOptions = (data: ProviderData | undefined): Prompt.ProviderOptions =>
  data !== undefined && isJsonRecord(data) ? data : {}

const reasoningOptions = (part: ReasoningPart): Prompt.ProviderOptions => {
  const options = jsonOptions(part.providerData)
  if (part.signature === undefined || Object.values(options).some(hasSignature)) return options
  return { ...options, signature: { signature: part.signature } }
}

const hasSignature = (value: unknown): boolean =>
  typeof value === "object" && value !== null && "signature" in value

const isImage = (content: UserContent): boolean => content.type === "image"

/**
 * The `Prompt` content a tool result becomes: its text as the result, and its
 * parts as the model output when it holds images.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toPromptToolResult = (message: ToolResultMessage): Prompt.ToolResultPart => {
  const part = Compat.toolResultPart(message.toolCallId, message.toolName, message.isError, textOf(message))
  return message.content.some(isImage) ? { ...part, modelOutput: message.content.map(toPromptUserPart) } : part
}

/**
 * Converts one message to its `Prompt` form; custom messages have none.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toPromptMessage = (message: Message): Prompt.Message | undefined => {
  switch (message.role) {
    case "system":
      return Compat.systemMessage(message.content)
    case "user":
      return Compat.userMessage(message.content.map(toPromptUserPart))
    case "assistant":
      return Compat.assistantMessage(message.content.map(toPromptAssistantPart))
    case "toolResult":
      return Compat.toolMessage([toPromptToolResult(message)])
    case "custom":
      return undefined
  }
}

/**
 * Converts a transcript to an `effect/ai` `Prompt`, leaving custom messages out.
 *
 * @example
 * ```ts
 * import { Message } from "effect-agent"
 *
 * const prompt = Message.toPrompt([Message.system("Be brief."), Message.user("Hi")])
 * ```
 *
 * @since 0.1.0
 * @category conversions
 */
export const toPrompt = (messages: ReadonlyArray<Message>): Prompt.Prompt => {
  const out: Array<Prompt.Message> = []
  for (const message of messages) {
    const converted = toPromptMessage(message)
    if (converted !== undefined) out.push(converted)
  }
  return Prompt.fromMessages(out)
}
