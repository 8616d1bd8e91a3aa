/**
 * AgentConfig: what construction and validation accept and reject, and its
 * JSON form (an untrusted config, clamped or refused: test/protocol/UntrustedConfig.test.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer } from "effect"
import { Agent, AgentConfig } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { roundTrip, toolsLayer } from "./support.ts"

describe("AgentConfig.make", () => {
  const bad: ReadonlyArray<readonly [AgentConfig.Input, string, string]> = [
    [{ maxTurns: 0 }, "maxTurns", "must be an integer ≥ 1, or null (no cap); got 0"],
    [{ maxParallelTools: 2.5 }, "maxParallelTools", "must be an integer ≥ 1; got 2.5"],
    [{ budgets: { costUsd: -3 } }, "budgets.costUsd", "must be a number > 0, or null (no budget); got -3"],
    [{ wrapUpAt: 1.5 }, "wrapUpAt", "must be a number > 0 and ≤ 1, or null (never); got 1.5"],
    [
      // as a JavaScript caller, or a config read from a file, might give it
      JSON.parse("{\"toolTimeout\": \"soon\"}"),
      "toolTimeout",
      "must be a duration > 0 (milliseconds, or a Duration such as \"30 seconds\"), or null (none); got \"soon\""
    ],
    [{ maxTurns: 5, graceTurns: 5 }, "graceTurns", "must be less than maxTurns (5), or 0 for no wrap-up request; got 5"]
  ]

  it.effect("rejects at construction what validate rejects: a ConfigError naming the field and what it must be", () =>
    Effect.gen(function*() {
      for (const [input, field, rule] of bad) {
        const error = yield* Effect.flip(AgentConfig.make(input))
        assert.deepStrictEqual([error._tag, error.field, error.rule], ["ConfigError", field, rule])
        // makeUnsafe throws the same error
        assert.throws(() => AgentConfig.makeUnsafe(input), rule)
      }
      const unknown = yield* Effect.flip(AgentConfig.make(JSON.parse("{\"maxTurnz\": 5}")))
      assert.deepStrictEqual([unknown.field, unknown.rule], ["maxTurnz", "is not a known setting"])
      const whole = yield* Effect.flip(AgentConfig.validate({ ...AgentConfig.defaults, maxTurns: 2 }))
      assert.strictEqual(whole.field, "graceTurns")
      assert.strictEqual((yield* AgentConfig.make({ maxTurns: 10, toolTimeout: "30 seconds" })).toolTimeout, 30_000)
    }))

  it.effect("Agent.run fails with the ConfigError, never a defect, for every bad setting", () =>
    Effect.gen(function*() {
      for (const [config, field] of bad) {
        const exit = yield* Effect.exit(
          Agent.run({ prompt: "x", config }).pipe(
            Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "x" }]), toolsLayer()))
          )
        )
        const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
        assert.deepStrictEqual(error?._tag === "Some" && [error.value._tag, error.value._tag === "ConfigError" && error.value.field], [
          "ConfigError",
          field
        ])
      }
    }))
})

describe("AgentConfig.validate", () => {
  it.effect("Agent.run validates every config however it was made", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Agent.run({ prompt: "x", config: { ...AgentConfig.defaults, wrapUpAt: 1.5 } }).pipe(
          Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "x" }]), toolsLayer()))
        )
      )
      assert.strictEqual(error._tag, "ConfigError")
      if (error._tag === "ConfigError") assert.strictEqual(error.field, "wrapUpAt")
    }))
})

describe("AgentConfig.AgentConfig", () => {
  it("round-trips through JSON with its defaults; a setting given as undefined keeps its default", () => {
    const config = AgentConfig.makeUnsafe({ maxTurns: 10, toolTimeout: "30 seconds", budgets: { costUsd: 2, wallClock: "1 hour" } })
    assert.strictEqual(config.toolTimeout, 30_000)
    assert.strictEqual(config.budgets.wallClock, 3_600_000)
    assert.strictEqual(config.maxParallelTools, AgentConfig.defaults.maxParallelTools)
    assert.deepStrictEqual(roundTrip(AgentConfig.AgentConfig, config), config)
    // a setting given as undefined (JavaScript callers, spreads of partial options) keeps its default
    const fromJavaScript: AgentConfig.Input = JSON.parse("{}")
    Object.assign(fromJavaScript, { maxTurns: undefined })
    assert.deepStrictEqual(AgentConfig.makeUnsafe(fromJavaScript), AgentConfig.defaults)
  })
})
