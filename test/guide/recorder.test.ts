import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { ScriptedModel } from "effect-agent/testing"
import { resolve, system } from "./app.ts"
import { testLayer } from "./mocks.ts"

describe("what the model is sent", () => {
  it.effect("an order that is not found: the model reads the typed failure, and declines", () =>
    Effect.gen(function*() {
      const result = yield* resolve("Refund order Z-9.")
      assert.strictEqual(result.output?.action, "declined")
      const recorder = yield* ScriptedModel.ScriptedModel
      assert.strictEqual(yield* recorder.calls, 2)
      const [first, second] = yield* recorder.requests
      // every request: the system prompt first, and the tools the model may call
      const head = first!.prompt.content[0]!
      assert.deepStrictEqual([head.role, head.role === "system" && head.content], ["system", system])
      assert.deepStrictEqual(first!.tools, ["lookup_order", "refund_order", "policy", "final_answer"])
      // the second carries the lookup's failure, encoded with the tool's failure Schema
      const answer = second!.prompt.content.at(-1)!
      assert.deepStrictEqual(
        answer.role === "tool" && answer.content.map((part) => part.type === "tool-result" && [part.isFailure, part.result]),
        [[true, "{\"_tag\":\"OrderNotFound\",\"id\":\"Z-9\"}"]]
      )
    }).pipe(Effect.provide(testLayer([
      { toolCalls: [{ name: "lookup_order", params: { id: "Z-9" } }] },
      {
        toolCalls: [{
          name: "final_answer",
          params: { orderId: "Z-9", action: "declined", note: "no such order" }
        }]
      }
    ]))))
})
