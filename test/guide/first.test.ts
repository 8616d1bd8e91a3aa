import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Message } from "effect-agent"
import { resolve } from "./app.ts"
import { testLayer } from "./mocks.ts"

describe("the support agent", () => {
  it.effect("looks the order up, refunds it, and answers with a Resolution", () =>
    Effect.gen(function*() {
      const result = yield* resolve("Please refund order A-1, the kettle leaks.")
      assert.strictEqual(result.outcome._tag, "Completed")
      // `output` has the Schema's type: { orderId: string; action: "refunded" | "declined"; note: string }
      assert.deepStrictEqual(result.output, { orderId: "A-1", action: "refunded", note: "refunded 49.99 EUR" })
      // the refund ran against the mocked Orders service, and the model read its result
      const refund = result.messages.find((m) => m.role === "toolResult" && m.toolName === "refund_order")
      assert.deepStrictEqual(
        JSON.parse(Message.textOf(refund!)),
        { id: "A-1", item: "kettle", cents: 4999, refunded: true }
      )
    }).pipe(Effect.provide(testLayer([
      { toolCalls: [{ name: "lookup_order", params: { id: "A-1" } }] },
      { toolCalls: [{ name: "refund_order", params: { id: "A-1" } }] },
      {
        toolCalls: [{
          name: "final_answer",
          params: { orderId: "A-1", action: "refunded", note: "refunded 49.99 EUR" }
        }]
      }
    ]))))
})
