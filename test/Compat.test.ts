/**
 * `src/compat.ts` relies on parts of `effect` its public API does not
 * promise. Each test here fails when the installed `effect` changes under one
 * of them, before a run would misbehave.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Schema, Stream } from "effect"
import { Prompt, Tool, Toolkit } from "effect/ai"
import * as Compat from "../src/compat.ts"

const Add = Tool.make("add", {
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite
})
const Other = Tool.make("other", { success: Schema.String })
const Math = Toolkit.make(Add, Other)

describe("Compat", () => {
  describe("handlerOf: toolkit.toLayer's handler records", () => {
    it.effect("finds each handler toLayer registered, with the context it captured, and runs it", () =>
      Effect.gen(function*() {
        const handlers = yield* Effect.context<never>()
        const add = Compat.handlerOf(Add, handlers)
        assert.isDefined(add)
        assert.strictEqual(add!.name, "add")
        assert.isTrue(Context.isContext(add!.context))
        const sum = yield* add!.handler({ a: 1, b: 2 }, { toolCallId: "c1", preliminary: () => Effect.void })
        assert.strictEqual(sum, 3)
        // The public way gives the same result: the record is what `Toolkit.handle` runs.
        const kit = yield* Math
        const results = yield* Stream.runCollect(yield* kit.handle("add", { a: 1, b: 2 }))
        assert.deepStrictEqual(results.filter((item) => !item.preliminary).map((item) => item.result), [3])
      }).pipe(Effect.provide(Math.toLayer({ add: ({ a, b }) => Effect.succeed(a + b), other: () => Effect.succeed("x") }))))

    it("finds nothing in a context without the handler", () => {
      assert.isUndefined(Compat.handlerOf(Add, Context.empty()))
    })
  })

  describe("Prompt literals: the markers effect's constructors write", () => {
    it("each literal equals what Prompt.makePart / makeMessage build", () => {
      const options = { openai: { itemId: "i1" } }
      assert.deepStrictEqual(Compat.textPart("hi"), Prompt.makePart("text", { text: "hi" }))
      assert.deepStrictEqual(
        Compat.toolCallPart("c1", "add", { a: 1 }, options),
        Prompt.makePart("tool-call", { id: "c1", name: "add", params: { a: 1 }, providerExecuted: false, options })
      )
      assert.deepStrictEqual(
        Compat.toolResultPart("c1", "add", false, "3"),
        Prompt.makePart("tool-result", { id: "c1", name: "add", isFailure: false, result: "3", providerExecuted: false })
      )
      assert.deepStrictEqual(Compat.systemMessage("be brief"), Prompt.makeMessage("system", { content: "be brief" }))
      const text = Compat.textPart("hi")
      assert.deepStrictEqual(Compat.userMessage([text]), Prompt.makeMessage("user", { content: [text] }))
      assert.deepStrictEqual(Compat.assistantMessage([text]), Prompt.makeMessage("assistant", { content: [text] }))
      const result = Compat.toolResultPart("c1", "add", false, "3")
      assert.deepStrictEqual(Compat.toolMessage([result]), Prompt.makeMessage("tool", { content: [result] }))
    })

    it("effect recognises them as parts and messages, and a prompt of them round-trips its Schema", () => {
      assert.isTrue(Prompt.isPart(Compat.textPart("hi")))
      assert.isTrue(Prompt.isMessage(Compat.userMessage([Compat.textPart("hi")])))
      const prompt = Prompt.fromMessages([
        Compat.systemMessage("be brief"),
        Compat.userMessage([Compat.textPart("add 1 and 2")]),
        Compat.assistantMessage([Compat.toolCallPart("c1", "add", { a: 1, b: 2 }, {})]),
        Compat.toolMessage([Compat.toolResultPart("c1", "add", false, "3")])
      ])
      const codec = Schema.toCodecJson(Prompt.Prompt)
      const decoded = Schema.decodeUnknownSync(codec)(Schema.encodeUnknownSync(codec)(prompt))
      assert.deepStrictEqual(decoded, prompt)
    })
  })
})
