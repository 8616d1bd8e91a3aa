import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Orders, resolve } from "./app.ts"
import { testLayer } from "./mocks.ts"

// A bug in the code behind a tool: an amount in euros where the Schema wants integer cents.
const buggyOrders = Layer.succeed(Orders, Orders.of({
  find: (id) => Effect.succeed({ id, item: "kettle", cents: 49.99, refunded: false }),
  refund: () => Effect.die(new Error("refund is not implemented"))
}))

describe("strict mode (ToolRegistry.FailOnDefect, on in testLayer)", () => {
  it.effect("a result the tool's Schema rejects fails the run: the test fails, not the model", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(resolve("Where is order A-1?"))
      assert.strictEqual(error._tag, "ToolFatalError")
      assert.strictEqual(
        error.message,
        "tool lookup_order (call_1_1) had a defect: invalid result: Expected an integer at [\"cents\"]"
      )
    }).pipe(Effect.provide(testLayer([
      { toolCalls: [{ name: "lookup_order", params: { id: "A-1" } }] },
      { text: "never reached" }
    ], buggyOrders))))

  it.effect("so does a handler that dies or throws", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(resolve("Refund order A-1."))
      assert.deepStrictEqual(
        error._tag === "ToolFatalError" && [error.toolName, error.defect],
        ["refund_order", "Error: refund is not implemented"]
      )
    }).pipe(Effect.provide(testLayer([
      { toolCalls: [{ name: "refund_order", params: { id: "A-1" } }] },
      { text: "never reached" }
    ], buggyOrders))))
})
