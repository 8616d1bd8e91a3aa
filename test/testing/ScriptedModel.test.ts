import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream } from "effect"
import { AiError, LanguageModel, Response, Tool, Toolkit } from "effect/ai"
import { ScriptedModel } from "effect-agent/testing"

const Add = Tool.make("add", {
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite
})
const Tools = Toolkit.make(Add)
const Handlers = Tools.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) })

const rich: ScriptedModel.Turn = {
  reasoning: { text: "let me think", signature: "sig" },
  text: "calling tools",
  toolCalls: [{ id: "c1", name: "add", params: { a: 1, b: 2 } }, { id: "c2", name: "nope", rawParams: "{\"x\":" }],
  usage: { input: 10, output: 4, cacheRead: 2, cacheWrite: 1, reasoning: 3, cost: 0.5 },
  model: "m-1"
}

describe("ScriptedModel", () => {
  it.effect("the loop's fast path yields exactly the parts LanguageModel would decode", () =>
    Effect.gen(function*() {
      const model = yield* LanguageModel.LanguageModel
      const fast = yield* Stream.runCollect(model.streamText({
        prompt: "hi",
        toolkit: yield* Tools,
        disableToolCallResolution: true,
        toolCallValidation: "deferred"
      }))
      const { head, tail } = ScriptedModel.streamParts(rich, 0)
      const decode = Schema.decodeUnknownSync(Response.StreamPart())
      assert.deepStrictEqual(fast, [...head, ...tail].map((part) => decode(part)))
      // a turn without usage (its all-zero usage is shared between turns)
      for (const index of [1, 2]) {
        const plain = yield* Stream.runCollect(model.streamText({
          prompt: "again",
          disableToolCallResolution: true,
          toolCallValidation: "deferred"
        }))
        const parts = ScriptedModel.streamParts({ text: "done" }, index)
        assert.deepStrictEqual(plain, [...parts.head, ...parts.tail].map((part) => decode(part)))
      }
    }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer([rich, { text: "done" }, { text: "done" }]), Handlers))))

  it.effect("works as an ordinary LanguageModel: generateText resolves tool calls with the toolkit", () =>
    Effect.gen(function*() {
      const response = yield* LanguageModel.generateText({ prompt: "1 + 2?", toolkit: Tools })
      assert.deepStrictEqual(response.toolResults.map((r) => r.result), [3])
      const text = yield* LanguageModel.generateText({ prompt: "and?" })
      assert.strictEqual(text.text, "3")
      assert.strictEqual(text.finishReason, "stop")
    }).pipe(Effect.provide(Layer.merge(
      ScriptedModel.layer([{ toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] }, { text: "3" }]),
      Handlers
    ))))

  it.effect("streams through LanguageModel.make when not in the loop's mode", () =>
    Effect.gen(function*() {
      const parts = yield* Stream.runCollect(LanguageModel.streamText({ prompt: "hi" }))
      assert.strictEqual(
        parts.flatMap((p) => p.type === "text-delta" ? [p.delta] : []).join(""),
        "hello there"
      )
    }).pipe(Effect.provide(ScriptedModel.layer([{ text: "hello there" }]))))

  it.effect("records requests, can stop recording, and fails clearly past the script", () =>
    Effect.gen(function*() {
      const recorded = yield* Effect.gen(function*() {
        yield* LanguageModel.generateText({ prompt: "one" })
        const error = yield* Effect.flip(LanguageModel.generateText({ prompt: "two" }))
        const recorder = yield* ScriptedModel.ScriptedModel
        return { error, requests: yield* recorder.requests, calls: yield* recorder.calls }
      }).pipe(Effect.provide(ScriptedModel.layer([{ text: "x" }])))
      assert.strictEqual(recorded.requests.length, 2)
      assert.strictEqual(recorded.calls, 2)
      assert.strictEqual(recorded.error.reason._tag, "UnknownError")
      assert.match(recorded.error.message, /no turn for this request \(call 2 to this model\)/)
      const quiet = yield* Effect.gen(function*() {
        yield* LanguageModel.generateText({ prompt: "one" })
        const recorder = yield* ScriptedModel.ScriptedModel
        return { requests: yield* recorder.requests, calls: yield* recorder.calls }
      }).pipe(Effect.provide(ScriptedModel.layer([{ text: "x" }], { record: false })))
      assert.deepStrictEqual(quiet, { requests: [], calls: 1 })
    }))

  it.effect("fails with the scripted AiError reason", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(LanguageModel.generateText({ prompt: "x" }))
      assert.strictEqual(error.reason._tag, "RateLimitError")
    }).pipe(Effect.provide(ScriptedModel.layer([{ fail: new AiError.RateLimitError({}) }]))))
})
