/**
 * Shared pieces of the provider tests: the API key used everywhere (so tests
 * can check it never leaks), the options the loop passes to `streamText`, a
 * declared tool, and the transcript every request-body test encodes.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { Schema, Stream } from "effect"
import { LanguageModel, type Prompt, type Response, Tool, Toolkit } from "effect/ai"
import { Message, ToolArguments } from "effect-agent"

export const apiKey = "sk-test-4f9c2a7e1b3d"

export const client = NodeHttpClient.layerUndici

export const GetWeather = Tool.make("get_weather", {
  description: "Current weather for a city",
  parameters: Schema.Struct({ city: Schema.String })
})
export const Tools = Toolkit.make(GetWeather)

/** What the loop passes: tool definitions, no resolution, deferred validation. */
export const stream = (prompt: Prompt.RawInput) =>
  LanguageModel.streamText({
    prompt,
    toolkit: Tools,
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  })

export const streamParts = (prompt: Prompt.RawInput) => Stream.runCollect(stream(prompt))

export const generate = (prompt: Prompt.RawInput) =>
  LanguageModel.generateText({
    prompt,
    toolkit: Tools,
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  })

/** The parts of a stream without the Response part marker, as plain JSON. */
export const plain = (parts: ReadonlyArray<Response.AnyPart>): Array<unknown> =>
  parts.map((part) => {
    const { "~effect/ai/Response/Part": _, ...rest } = part as unknown as Record<string, unknown>
    return rest
  })

export const png = "iVBORw0KGgoAAAANSUhEUg=="

/**
 * A transcript with everything a provider must encode: a system prompt, user
 * text with images (inline and by URL), an assistant turn with reasoning to
 * replay, text and two tool calls (one with malformed arguments), their
 * results (one failed, with an image), a mid-history system notice and a
 * last user message.
 */
export const transcript = (
  reasoningData: Message.ProviderData,
  callData: Message.ProviderData | undefined = undefined
): Prompt.Prompt =>
  Message.toPrompt([
    Message.system("Be brief."),
    Message.user([
      Message.text("What is in this image?"),
      { type: "image", mediaType: "image/png", source: { type: "base64", data: png } },
      { type: "image", mediaType: "image/jpeg", source: { type: "url", url: "https://example.com/cat.jpg" } }
    ]),
    {
      role: "assistant",
      content: [
        { type: "reasoning", text: "The user wants the weather.", providerData: reasoningData },
        { type: "text", text: "Let me check." },
        {
          type: "tool-call",
          id: "call_1",
          name: "get_weather",
          params: { city: "Paris" },
          ...(callData === undefined ? {} : { providerData: callData })
        },
        {
          type: "tool-call",
          id: "call_2",
          name: "get_weather",
          params: ToolArguments.malformed("{\"city\":", "Unexpected end of JSON input")
        }
      ],
      stopReason: "toolUse",
      usage: Message.emptyUsage
    },
    Message.toolResult({ toolCallId: "call_1", toolName: "get_weather", text: "18°C and sunny", isError: false }),
    {
      role: "toolResult",
      toolCallId: "call_2",
      toolName: "get_weather",
      content: [
        Message.text("The arguments were not valid JSON."),
        { type: "image", mediaType: "image/png", source: { type: "base64", data: png } }
      ],
      isError: true
    },
    Message.system("Wrap up now."),
    Message.user("Thanks")
  ])

/** The finish part of a stream as plain data: reason, usage and metadata. */
export const finishOf = (parts: ReadonlyArray<Response.AnyPart>) => {
  const finish = parts.at(-1)
  if (finish?.type !== "finish") throw new Error(`the last part is ${finish?.type}, not finish`)
  return {
    reason: finish.reason,
    inputTokens: { ...finish.usage.inputTokens },
    outputTokens: { ...finish.usage.outputTokens },
    metadata: finish.metadata
  }
}
