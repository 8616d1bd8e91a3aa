/**
 * Outcome: how a run ended, and its JSON form.
 */
import { assert, describe, it } from "@effect/vitest"
import { Option, Schema } from "effect"
import { Outcome } from "effect-agent"
import { roundTrip } from "./support.ts"

describe("Outcome.Outcome", () => {
  it("every outcome round-trips through JSON", () => {
    const outcomes: ReadonlyArray<Outcome.Outcome> = [
      Outcome.completed,
      Outcome.terminated,
      Outcome.wrappedUp,
      Outcome.maxTurns(8),
      Outcome.budgetExceeded("costUsd", 1, 1.2),
      { _tag: "LoopDetected", repeats: 3, signature: "add{}" },
      { _tag: "Stagnated", repeats: 6 },
      Outcome.cancelled("user"),
      Outcome.outputInvalid({ sum: "x" }, "sum: Expected number", 3),
      Outcome.custom("support/escalated", Schema.Struct({ ticket: Schema.String })).make({ ticket: "T-1" }),
      { _tag: "Custom", kind: "unknown-to-this-reader", payload: [1, { a: null }] }
    ]
    for (const outcome of outcomes) assert.deepStrictEqual(roundTrip(Outcome.Outcome, outcome), outcome)
  })
})

describe("Outcome.custom", () => {
  const Escalated = Outcome.custom("support/escalated", Schema.Struct({ ticket: Schema.String, level: Schema.Int }))

  it("carries the payload in its JSON form and reads it back typed; other outcomes read None", () => {
    const outcome = Escalated.make({ ticket: "T-1", level: 2 })
    assert.deepStrictEqual(outcome, { _tag: "Custom", kind: "support/escalated", payload: { ticket: "T-1", level: 2 } })
    assert.isTrue(Escalated.is(outcome))
    assert.deepStrictEqual(Option.getOrUndefined(Escalated.payload(outcome))?.level, 2)
    assert.isTrue(Option.isNone(Escalated.payload(Outcome.completed)))
    const custom = (kind: string, payload: unknown): Outcome.Outcome => ({ _tag: "Custom", kind, payload })
    assert.isTrue(Option.isNone(Escalated.payload(custom("support/escalated", { ticket: 1 }))))
    assert.isTrue(Option.isNone(Escalated.payload(custom("other", { ticket: "T", level: 1 }))))
  })
})
