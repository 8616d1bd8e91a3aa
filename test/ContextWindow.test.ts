/**
 * ContextWindow: the token estimate, and the pruning that keeps a request
 * under its budget without touching the transcript.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Tokenizer } from "effect/ai"
import { ContextWindow, Message } from "effect-agent"
import type { ScriptedModel } from "effect-agent/testing"
import { ofTag, runOk } from "./support.ts"

const addCall = (i: number) => ({ toolCalls: [{ id: `c${i}`, name: "add", params: { a: i, b: 1 } }] })

describe("context window", () => {
  const big = (i: number) => ({ toolCalls: [{ id: `b${i}`, name: "big", params: { chars: 400 } }] })
  const resultTexts = (request: ScriptedModel.Request) =>
    request.prompt.content.flatMap((m) =>
      m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [String(p.result)] : []) : []
    )

  it("estimates tokens as characters / 4, rounded up per message; custom messages cost nothing", () => {
    assert.strictEqual(ContextWindow.estimateTokens([Message.user("12345678"), Message.system("123")]), 3)
    assert.strictEqual(ContextWindow.estimateTokens([Message.custom("ui", { big: "x".repeat(1000) })]), 0)
  })

  it.effect("does nothing under budget", () =>
    Effect.gen(function*() {
      const { events } = yield* runOk((i) => i < 4 ? big(i) : { text: "ok" }, {
        config: { contextBudgetTokens: 10_000, maxRepeatedBatches: null }
      })
      assert.deepStrictEqual(ofTag(events, "ContextTransformed"), [])
    }))

  it.effect("pass 1 replaces older tool results with placeholders in the request only", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk((i) => i < 6 ? big(i) : { text: "ok" }, {
        config: { contextBudgetTokens: 400, pruneKeepToolResults: 2, pruneKeepTail: 50, maxRepeatedBatches: null }
      })
      const last = requests.at(-1)!
      const texts = resultTexts(last)
      assert.strictEqual(texts.length, 6)
      assert.deepStrictEqual(texts.slice(0, 4), Array(4).fill("[big result removed to save context: 400 characters]"))
      assert.deepStrictEqual(texts.slice(4), ["x".repeat(400), "x".repeat(400)])
      // the transcript keeps everything
      const kept = result.state.messages.filter((m) => m.role === "toolResult").map(Message.textOf)
      assert.isTrue(kept.every((text) => text === "x".repeat(400)))
      const transformed = ofTag(events, "ContextTransformed").at(-1)!
      assert.strictEqual(transformed.plugin, "contextWindow")
      assert.isAbove(transformed.tokensBefore!, 400)
      assert.isAtMost(transformed.tokensAfter!, 400)
      assert.strictEqual(transformed.messagesBefore, transformed.messagesAfter)
    }))

  it.effect("pass 2 keeps system messages, the task and a tail that never splits a call from its result", () =>
    Effect.gen(function*() {
      const { requests } = yield* runOk((i) => i < 12 ? big(i) : { text: "ok" }, {
        system: "sys",
        config: { contextBudgetTokens: 300, pruneKeepToolResults: 1, pruneKeepTail: 5, maxRepeatedBatches: null }
      })
      const last = requests.at(-1)!.prompt.content
      assert.deepStrictEqual(last.map((m) => m.role).slice(0, 3), ["system", "user", "assistant"])
      // every call in the request has its result, every result its call
      const calls = last.flatMap((m) => m.role === "assistant" ? m.content.flatMap((p) => p.type === "tool-call" ? [p.id] : []) : [])
      const results = last.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p.id] : []) : [])
      assert.deepStrictEqual(calls, results)
      assert.isAtMost(last.length, 2 + 6)
    }))

  it.effect("uses the Tokenizer service when one is provided", () =>
    Effect.gen(function*() {
      // a tokenizer that counts every message as 1,000 tokens
      const tokenizer = Tokenizer.make({
        tokenize: (prompt) => Effect.succeed(Array.from({ length: prompt.content.length * 1_000 }, (_, i) => i))
      })
      const { events } = yield* runOk((i) => i < 2 ? addCall(i) : { text: "ok" }, {
        config: { contextBudgetTokens: 2_500, pruneKeepToolResults: 0, pruneKeepTail: 50 }
      }).pipe(Effect.provideService(Tokenizer.Tokenizer, tokenizer))
      const transformed = ofTag(events, "ContextTransformed")
      assert.isAbove(transformed.length, 0)
      assert.strictEqual(transformed[0]!.tokensBefore, 3_000)
    }))
})
