import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { AgentTool } from "effect-agent"
import { RefundOrder, resolve } from "./app.ts"
import { kettle, ordersTest, testLayer } from "./mocks.ts"

const refundA1 = [
  { toolCalls: [{ name: "refund_order", params: { id: "A-1" } }] },
  { text: "never reached: the failed refund ends the run" }
]
const paymentsDown = ordersTest([kettle], { payments: "down" })

describe("a refund the payment provider refuses", () => {
  it.effect("ends the run with the tool's typed failure, caught by its tag", () =>
    Effect.gen(function*() {
      const handled = yield* resolve("Refund order A-1.").pipe(
        // the error channel now holds PaymentsDown | OrderNotFound besides the run's own errors
        AgentTool.unwrapFatal(RefundOrder),
        Effect.map((result) => `resolved: ${result.output?.action}`),
        Effect.catchTag("PaymentsDown", (error) =>
          Effect.succeed(`${error.provider} down since ${error.since.toISOString()}`))
      )
      assert.strictEqual(handled, "acme-pay down since 2026-03-01T09:00:00.000Z")
    }).pipe(Effect.provide(testLayer(refundA1, paymentsDown))))

  it.effect("the ToolFatalError keeps the run's state; fatalError reads the typed failure from it", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(resolve("Refund order A-1."))
      if (error._tag !== "ToolFatalError") return assert.fail(`expected ToolFatalError, got ${error._tag}`)
      assert.deepStrictEqual([error.toolName, error.toolCallId], ["refund_order", "call_1_1"])
      const failure = yield* AgentTool.fatalError(RefundOrder, error)
      assert.isTrue(Option.isSome(failure) && failure.value._tag === "PaymentsDown")
      // every call answered: `Agent.runContinue(error.state)` goes on once the provider is back
      assert.strictEqual(error.state?.messages.at(-1)?.role, "toolResult")
    }).pipe(Effect.provide(testLayer(refundA1, paymentsDown))))
})
