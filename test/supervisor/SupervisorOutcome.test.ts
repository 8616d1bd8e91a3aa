/**
 * SupervisorOutcome: a supervised run's own endings travel as the core's
 * `Custom` outcome and come back as they were; how a worker's own run ended
 * decides whether the supervised run goes on.
 */
import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import { Outcome } from "effect-agent"
import { SupervisorOutcome } from "effect-agent/supervisor"
import { roundTrip } from "../support.ts"

const own: ReadonlyArray<SupervisorOutcome.Own> = [
  { _tag: "Converged", turns: 2 },
  { _tag: "Tolerated", turns: 2, known: ["legacy"] },
  { _tag: "Unverified", budget: "turns", limit: 3, used: 3, failing: ["tests"] },
  { _tag: "Stuck", reason: "checks", repeats: 5 },
  { _tag: "Rejected", notes: "no" },
  { _tag: "PlanIterationCap", limit: 5 }
]

describe("SupervisorOutcome", () => {
  it("its own endings are Custom outcomes of the core and come back as they were; core ones pass as they are", () => {
    assert.deepStrictEqual(own.map((o) => o._tag).sort(), Object.keys(SupervisorOutcome.Own.cases).sort())
    for (const outcome of own) {
      const core = SupervisorOutcome.toOutcome(outcome)
      assert.strictEqual(core._tag, "Custom")
      assert.deepStrictEqual(SupervisorOutcome.fromOutcome(roundTrip(Outcome.Outcome, core)), outcome)
      // the saved form (a checkpoint's outcome) is the ending itself, as version 1 wrote it
      assert.deepStrictEqual(roundTrip(SupervisorOutcome.SupervisorOutcome, outcome), outcome)
    }
    assert.deepStrictEqual(SupervisorOutcome.toOutcome(Outcome.cancelled("x")), Outcome.cancelled("x"))
    assert.deepStrictEqual(SupervisorOutcome.fromOutcome(Outcome.maxTurns(3)), Outcome.maxTurns(3))
    assert.isTrue(Schema.is(SupervisorOutcome.SupervisorOutcome)({ _tag: "Converged", turns: 1 }))
  })

  it("a worker's run that ended by itself goes on; a budget is Unverified by it; anything else is the ending", () => {
    for (const done of [Outcome.completed, Outcome.terminated, Outcome.wrappedUp]) {
      assert.isUndefined(SupervisorOutcome.fromInner(done, ["tests"]))
    }
    assert.deepStrictEqual(SupervisorOutcome.fromInner(Outcome.budgetExceeded("outputTokens", 10, 12), ["tests"]), {
      _tag: "Unverified",
      budget: "outputTokens",
      limit: 10,
      used: 12,
      failing: ["tests"]
    })
    for (const stopped of [
      Outcome.guardrailTripped("pii", "an email", "output"),
      Outcome.maxTurns(50),
      Outcome.cancelled("stop"),
      Outcome.handedOff("billing"),
      Outcome.outputInvalid("x", "not a number", 3)
    ]) {
      assert.deepStrictEqual(SupervisorOutcome.fromInner(stopped, []), stopped)
    }
  })
})
