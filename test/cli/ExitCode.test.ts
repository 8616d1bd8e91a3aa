/**
 * ExitCode: the command's exit codes, stable for scripts, from how a run
 * ended and from how the command's program exited.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Exit, Schema } from "effect"
import { CliError } from "effect/cli"
import { Outcome } from "effect-agent"
import { ExitCode } from "effect-agent/cli"
import { SupervisorOutcome } from "effect-agent/supervisor"
import * as Failure from "../../src/cli/internal/Failure.ts"

describe("ExitCode.codes", () => {
  it("are the documented numbers, each a different one", () => {
    assert.deepStrictEqual(ExitCode.codes, {
      ok: 0,
      unexpected: 1,
      maxTurns: 10,
      tokenBudget: 11,
      wallClockBudget: 12,
      // ynh's stuck (its 14 is a tampered baseline, none here); the cost budget, which ynh has not, 19
      stuck: 13,
      planIterationCap: 15,
      outputInvalid: 16,
      custom: 17,
      guardrail: 18,
      costBudget: 19,
      modelFailure: 20,
      resumeFailure: 21,
      configError: 22,
      cancelled: 30,
      interrupted: 31
    })
    const values = Object.values(ExitCode.codes)
    assert.strictEqual(new Set(values).size, values.length)
  })
})

describe("ExitCode.fromOutcome", () => {
  it("maps every outcome: the ends a run meant to 0, each budget to its code, loops and stagnation to stuck", () => {
    const cases: ReadonlyArray<readonly [Outcome.Outcome | SupervisorOutcome.SupervisorOutcome, ExitCode.ExitCode]> = [
      [Outcome.completed, 0],
      [Outcome.terminated, 0],
      [Outcome.wrappedUp, 0],
      [Outcome.handedOff("billing"), 0],
      [Outcome.guardrailTripped("pii", "an email address", "output"), 18],
      [Outcome.maxTurns(5), 10],
      [Outcome.budgetExceeded("tokens", 10, 12), 11],
      [Outcome.budgetExceeded("inputTokens", 10, 12), 11],
      [Outcome.budgetExceeded("outputTokens", 10, 12), 11],
      [Outcome.budgetExceeded("wallClock", 1_000, 1_200), 12],
      [Outcome.budgetExceeded("costUsd", 1, 1.5), 19],
      [{ _tag: "LoopDetected", repeats: 4, signature: "x" }, 13],
      [{ _tag: "Stagnated", repeats: 6 }, 13],
      [Outcome.cancelled("enough"), 30],
      [Outcome.outputInvalid("plain text", "the model answered in text", 3), 16],
      [Outcome.custom("plugin/escalated", Schema.String).make("T-1"), 17],
      [{ _tag: "Converged", turns: 2 }, 0],
      [{ _tag: "Unverified", budget: "turns", limit: 3, used: 3, failing: ["tests"] }, 10],
      [{ _tag: "Unverified", budget: "tokens", limit: 10, used: 12, failing: [] }, 11],
      [{ _tag: "Unverified", budget: "wallClock", limit: 1_000, used: 1_200, failing: [] }, 12],
      [{ _tag: "Unverified", budget: "costUsd", limit: 1, used: 2, failing: [] }, 19],
      [{ _tag: "Stuck", reason: "checks", repeats: 5 }, 13],
      [{ _tag: "Rejected", notes: "no" }, 30],
      [{ _tag: "PlanIterationCap", limit: 5 }, 15]
    ]
    for (const [outcome, code] of cases) {
      assert.strictEqual(ExitCode.fromOutcome(outcome), code, JSON.stringify(outcome))
      // a supervised run's own ending, as its AgentEnd event carries it (a Custom outcome), has the same code
      assert.strictEqual(ExitCode.fromOutcome(SupervisorOutcome.toOutcome(outcome)), code, JSON.stringify(outcome))
    }
  })
})

describe("ExitCode.fromExit", () => {
  const exitCode = (exit: Exit.Exit<unknown, unknown>, onInterrupt: ExitCode.ExitCode = 30) => {
    let stderr = ""
    const code = ExitCode.fromExit(exit, { code: onInterrupt }, (text) => void (stderr += text))
    return { code, stderr }
  }

  it("success is 0; ExitWith its code; an interruption the code set for it; nothing is written", () => {
    assert.deepStrictEqual(exitCode(Exit.succeed(undefined)), { code: 0, stderr: "" })
    assert.deepStrictEqual(exitCode(Exit.fail(new ExitCode.ExitWith({ code: 13 }))), { code: 13, stderr: "" })
    assert.deepStrictEqual(exitCode(Exit.failCause(Cause.interrupt())), { code: 30, stderr: "" })
    assert.deepStrictEqual(exitCode(Exit.failCause(Cause.interrupt()), 31), { code: 31, stderr: "" })
  })

  it("help asked for is 0; help shown for invalid flags is a config error, already printed", () => {
    const help = new CliError.ShowHelp({ commandPath: ["effect-agent"], errors: [] })
    assert.deepStrictEqual(exitCode(Exit.fail(help)), { code: 0, stderr: "" })
    const invalid = new CliError.ShowHelp({
      commandPath: ["effect-agent", "run"],
      errors: [new CliError.UnrecognizedOption({ option: "--bogus", suggestions: [] })]
    })
    assert.deepStrictEqual(exitCode(Exit.fail(invalid)), { code: 22, stderr: "" })
    const unrecognized = new CliError.UnrecognizedOption({ option: "--bogus", suggestions: [] })
    assert.deepStrictEqual(exitCode(Exit.fail(unrecognized)), { code: 22, stderr: "" })
  })

  it("anything else is 1, and is written out, since nobody reported it", () => {
    const failed = exitCode(Exit.fail(new Error("the disk is full")))
    assert.strictEqual(failed.code, 1)
    assert.match(failed.stderr, /^effect-agent: unexpected failure:\n[^]*the disk is full/)
    const died = exitCode(Exit.die(new TypeError("x is undefined")))
    assert.strictEqual(died.code, 1)
    assert.include(died.stderr, "x is undefined")
  })
})

describe("Failure (internal)", () => {
  it("carries its code and message under the tag the --json result reports", () => {
    const failure = new Failure.Failure({ code: 22, message: "--emit-jsonl - and --json both want stdout" })
    assert.deepStrictEqual([failure._tag, failure.code, failure.message], [
      "CliFailure",
      22,
      "--emit-jsonl - and --json both want stdout"
    ])
  })
})
