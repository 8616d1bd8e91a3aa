import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { demo } from "../examples/demo.ts"

describe("examples", () => {
  it.effect("the demo: parallel tools, steering mid-run that changes the plan, a live log, the outcome", () =>
    Effect.gen(function*() {
      let out = ""
      const fiber = yield* Effect.forkChild(demo((text) => void (out += text)))
      yield* TestClock.adjust("10 seconds")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.strictEqual(result.state.turn, 3)
      const lines = out.split("\n").map((line) => line.trim())
      const index = (prefix: string) => lines.findIndex((line) => line.includes(prefix))
      // the three first calls run in parallel: all start before any ends, at the same virtual time
      const starts = lines.filter((line) => line.includes("⚙ weather") || line.includes("⚙ flights"))
      assert.strictEqual(starts.length, 3)
      assert.isTrue(starts.every((line) => line.startsWith("0.40s")))
      assert.include(out, "✓ flights 500 ms")
      // the steering sent at 0.6 s, during the batch, is delivered after it, before turn 2
      assert.isBelow(index("✓ flights"), index("↪ steering delivered: Actually, I'd rather take the train"))
      assert.isBelow(index("↪ steering delivered"), index("── turn 2"))
      // and the model changes its plan
      assert.isAbove(index("⚙ trains"), index("── turn 2"))
      assert.include(out, "■ Completed")
      assert.include(out, "Answer: Take the 08:25 Bergensbanen")
    }))
})
