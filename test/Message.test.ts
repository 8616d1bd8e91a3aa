/**
 * Message: the transcript's JSON form, the helpers on messages, and the
 * conversion to effect/ai's Prompt.
 */
import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import { Prompt } from "effect/ai"
import { Message, ToolArguments } from "effect-agent"
import { roundTrip, sampleTranscript as messages } from "./support.ts"

describe("Message.Message", () => {
  it("every message and part round-trips through JSON, alone and as a Transcript", () => {
    for (const message of messages) roundTrip(Message.Message, message)
    assert.deepStrictEqual(roundTrip(Message.Transcript, messages), messages)
  })
})

describe("Message.hasToolCalls", () => {
  it("Message.hasToolCalls agrees with Message.toolCalls", () => {
    const reply = (content: Message.AssistantMessage["content"]): Message.AssistantMessage => ({
      role: "assistant",
      content,
      stopReason: "stop",
      usage: Message.emptyUsage
    })
    assert.isFalse(Message.hasToolCalls(reply([{ type: "text", text: "hi" }])))
    assert.isTrue(Message.hasToolCalls(reply([{ type: "text", text: "hi" }, { type: "tool-call", id: "c", name: "n", params: {} }])))
  })
})

describe("Message.counted and Message.lastCallUsage", () => {
  const usage = (input: number, output: number, cost?: number): Message.Usage =>
    cost === undefined ? { ...Message.emptyUsage, input, output } : { ...Message.emptyUsage, input, output, cost }
  const reply = (used: Message.Usage): Message.AssistantMessage => ({
    role: "assistant",
    content: [{ type: "text", text: "ok" }],
    stopReason: "stop",
    usage: used
  })

  it("a budget counts total, input or output tokens, or the cost (0 when unknown)", () => {
    const used = usage(120, 30, 0.002)
    assert.deepStrictEqual(
      (["tokens", "inputTokens", "outputTokens", "costUsd"] as const).map((budget) => Message.counted(budget, used)),
      [150, 120, 30, 0.002]
    )
    assert.strictEqual(Message.counted("costUsd", usage(1, 1)), 0)
  })

  it("the last call's usage is the last assistant message's, whatever follows it", () => {
    const user: Message.Message = { role: "user", content: [{ type: "text", text: "hi" }] }
    assert.isUndefined(Message.lastCallUsage([]))
    assert.isUndefined(Message.lastCallUsage([user]))
    const transcript: ReadonlyArray<Message.Message> = [user, reply(usage(1, 2)), user, reply(usage(3, 4)), user]
    assert.deepStrictEqual(Message.lastCallUsage(transcript), usage(3, 4))
  })
})

describe("Message.toPrompt", () => {
  it("converts each message once, leaves custom messages out, replays reasoning data and raw arguments", () => {
    const prompt = Message.toPrompt(messages)
    assert.deepStrictEqual(prompt.content.map((m) => m.role), ["system", "user", "assistant", "tool", "tool"])
    const user = prompt.content[1]!
    if (user.role !== "user") return assert.fail("expected a user message")
    assert.deepStrictEqual(user.content.map((p) => p.type === "file" ? [p.mediaType, String(p.data)] : p.type), [
      "text",
      ["image/png", "iVBORw0KGgo="],
      ["image/jpeg", "https://example.com/a.jpg"]
    ])
    const reply = prompt.content[2]!
    if (reply.role !== "assistant") return assert.fail("expected an assistant message")
    const [reasoning, redacted, text, call, malformed] = reply.content
    assert.deepStrictEqual(reasoning?.options, { anthropic: { signature: "sig" } })
    assert.deepStrictEqual(redacted?.options, { anthropic: { redactedData: "opaque" } })
    assert.strictEqual(text?.type, "text")
    assert.deepStrictEqual(call?.type === "tool-call" ? call.params : undefined, { a: 1, b: [2, { c: null }] })
    assert.strictEqual(
      malformed?.type === "tool-call" ? ToolArguments.toJsonText(malformed.params) : undefined,
      "{\"a\":"
    )
    const failed = prompt.content[4]!
    if (failed.role !== "tool") return assert.fail("expected a tool message")
    const part = failed.content[0]!
    assert.deepStrictEqual(part.type === "tool-result" ? [part.id, part.isFailure, part.result] : [], ["c2", true, "bad json"])
  })

  it("builds what Prompt.makeMessage and Prompt.makePart build, and what Prompt's Schema accepts", () => {
    const prompt = Message.toPrompt([
      Message.system("be brief"),
      Message.user("hi"),
      {
        role: "assistant",
        content: [{ type: "text", text: "t" }, { type: "tool-call", id: "c1", name: "add", params: { a: 1 } }],
        stopReason: "toolUse",
        usage: Message.emptyUsage
      },
      Message.toolResult({ toolCallId: "c1", toolName: "add", text: "3", isError: false })
    ])
    assert.deepStrictEqual(prompt.content, [
      Prompt.makeMessage("system", { content: "be brief" }),
      Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "hi" })] }),
      Prompt.makeMessage("assistant", {
        content: [
          Prompt.makePart("text", { text: "t" }),
          Prompt.makePart("tool-call", { id: "c1", name: "add", params: { a: 1 }, providerExecuted: false })
        ]
      }),
      Prompt.makeMessage("tool", {
        content: [
          Prompt.makePart("tool-result", { id: "c1", name: "add", isFailure: false, result: "3", providerExecuted: false })
        ]
      })
    ])
    for (const message of prompt.content) assert.isTrue(Prompt.isMessage(message))
    assert.deepStrictEqual(Schema.decodeUnknownSync(Prompt.Prompt)(Schema.encodeSync(Prompt.Prompt)(prompt)), prompt)
  })

  it("a reasoning part with only a signature still carries it", () => {
    const prompt = Message.toPrompt([{
      role: "assistant",
      content: [{ type: "reasoning", text: "x", signature: "only-sig" }],
      stopReason: "stop",
      usage: Message.emptyUsage
    }])
    const reply = prompt.content[0]!
    assert.deepStrictEqual(reply.role === "assistant" ? reply.content[0]?.options : undefined, {
      signature: { signature: "only-sig" }
    })
  })
})
