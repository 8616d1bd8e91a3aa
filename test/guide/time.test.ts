import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { Message } from "effect-agent"
import { TestClock } from "effect/testing"
import { resolve } from "./app.ts"
import { kettle, ordersTest, testLayer } from "./mocks.ts"

describe("time", () => {
  it.effect("a lookup slower than the tool's 10 s timeout: the model reads that it timed out", () =>
    Effect.gen(function*() {
      // `it.effect` runs on the TestClock: nothing sleeps for real, time moves when the test says
      const fiber = yield* Effect.forkChild(resolve("Where is order A-1?"))
      yield* TestClock.adjust("10 seconds")
      const result = yield* Fiber.join(fiber)
      const lookup = result.messages.find((m) => m.role === "toolResult")!
      assert.strictEqual(Message.textOf(lookup), "Tool lookup_order timed out after 10000 ms.")
      assert.strictEqual(result.output?.action, "declined")
    }).pipe(Effect.provide(testLayer([
      { toolCalls: [{ name: "lookup_order", params: { id: "A-1" } }] },
      {
        toolCalls: [{
          name: "final_answer",
          params: { orderId: "A-1", action: "declined", note: "the order system is slow" }
        }]
      }
    ], ordersTest([kettle], { latency: "1 minute" })))))

  it.effect("a model that takes 30 s to answer: the run's clock says so", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(resolve("Refund order A-1."))
      yield* TestClock.adjust("30 seconds")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(result.state.elapsedMs, 30_000)
    }).pipe(Effect.provide(testLayer([
      {
        delay: "30 seconds",
        toolCalls: [{ name: "final_answer", params: { orderId: "A-1", action: "declined", note: "too slow" } }]
      }
    ]))))
})
