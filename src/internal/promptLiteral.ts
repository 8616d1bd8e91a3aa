/**
 * `Prompt` parts and messages written as object literals: the one place that
 * spells effect's `Prompt` markers.
 *
 * `Prompt.makePart` and `Prompt.makeMessage` build the same values with a
 * generic spread and a computed key, which V8 builds the slow way; the
 * transcript converts each message once, when it is appended, and these are
 * the parts of every turn (text, tool calls, tool results). Measured against
 * `makePart` / `makeMessage` on the bench's workload the difference is small
 * (within the noise of a loaded machine, up to a few percent of a turn), so
 * only these hot shapes are written by hand; every other part is made with
 * `Prompt.makePart`. The markers are part of `Prompt`'s types: if effect
 * changes one, these literals stop type-checking.
 *
 * @internal
 */
import type { Prompt } from "effect/ai"

const PartMarker = "~effect/ai/Prompt/Part" as const
const MessageMarker = "~effect/ai/Prompt/Message" as const

/** @internal */
export const textPart = (text: string): Prompt.TextPart => ({
  "~effect/ai/Prompt/Part": PartMarker,
  type: "text",
  text,
  options: {}
})

/** @internal */
export const toolCallPart = (
  id: string,
  name: string,
  params: unknown,
  options: Prompt.ProviderOptions
): Prompt.ToolCallPart => ({
  "~effect/ai/Prompt/Part": PartMarker,
  type: "tool-call",
  id,
  name,
  params,
  providerExecuted: false,
  options
})

/** @internal */
export const toolResultPart = (
  id: string,
  name: string,
  isFailure: boolean,
  result: string
): Prompt.ToolResultPart => ({
  "~effect/ai/Prompt/Part": PartMarker,
  type: "tool-result",
  id,
  name,
  isFailure,
  result,
  providerExecuted: false,
  options: {}
})

/** @internal */
export const systemMessage = (content: string): Prompt.SystemMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "system",
  content,
  options: {}
})

/** @internal */
export const userMessage = (content: ReadonlyArray<Prompt.UserMessagePart>): Prompt.UserMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "user",
  content,
  options: {}
})

/** @internal */
export const assistantMessage = (content: ReadonlyArray<Prompt.AssistantMessagePart>): Prompt.AssistantMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "assistant",
  content,
  options: {}
})

/** @internal */
export const toolMessage = (content: ReadonlyArray<Prompt.ToolMessagePart>): Prompt.ToolMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "tool",
  content,
  options: {}
})
