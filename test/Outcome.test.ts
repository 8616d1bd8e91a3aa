/**
 * Outcome: how a run ended, and its JSON form.
 */
import { assert, describe, it } from "@effect/vitest"
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
      Outcome.cancelled("user")
    ]
    for (const outcome of outcomes) assert.deepStrictEqual(roundTrip(Outcome.Outcome, outcome), outcome)
  })
})
