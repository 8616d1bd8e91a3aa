/**
 * AgentConfig: what construction and validation accept and reject, how an
 * untrusted config is clamped or refused, and its JSON form.
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

describe("AgentConfig.fromUntrusted", () => {
  it.effect("clamps possible but extreme numbers into the safe ranges, and says which", () =>
    Effect.gen(function*() {
      const input = {
        maxTurns: 10_000,
        maxParallelTools: 1_000,
        toolTimeout: 5,
        maxResultChars: 10,
        budgets: { costUsd: 5_000, wallClock: 10, tokens: null }
      }
      const config = yield* AgentConfig.fromUntrusted(input)
      assert.strictEqual(config.maxTurns, 200)
      assert.strictEqual(config.maxParallelTools, 64)
      assert.strictEqual(config.toolTimeout, 100)
      assert.strictEqual(config.maxResultChars, 256)
      assert.deepStrictEqual(config.budgets, {
        tokens: null,
        inputTokens: null,
        outputTokens: null,
        costUsd: 1_000,
        wallClock: 1_000
      })
      assert.strictEqual(config.graceTurns, AgentConfig.defaults.graceTurns)
      const { clamped } = yield* AgentConfig.fromUntrustedClamped(input)
      assert.deepStrictEqual(clamped.map((c) => [c.field, c.given, c.used]), [
        ["maxTurns", 10_000, 200],
        ["maxParallelTools", 1_000, 64],
        ["toolTimeout", 5, 100],
        ["maxResultChars", 10, 256],
        ["budgets.costUsd", 5_000, 1_000],
        ["budgets.wallClock", 10, 1_000]
      ])
      // a small cap gets no wrap-up request rather than an impossible grace window
      assert.strictEqual((yield* AgentConfig.fromUntrusted({ maxTurns: 2 })).graceTurns, 0)
    }))

  it.effect("refuses impossible values (no turns, a negative cost), naming the field and its safe range", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [unknown, string, string, { min: number; max: number }]> = [
        [{ maxTurns: -1 }, "maxTurns", "must be an integer from 1 to 200; got -1", { min: 1, max: 200 }],
        [{ maxTurns: 0 }, "maxTurns", "must be an integer from 1 to 200; got 0", { min: 1, max: 200 }],
        [{ maxParallelTools: 0 }, "maxParallelTools", "must be an integer from 1 to 64; got 0", { min: 1, max: 64 }],
        [
          { budgets: { costUsd: -3 } },
          "budgets.costUsd",
          "must be a number from 0.0001 to 1000 (USD), or null; got -3",
          { min: 0.0001, max: 1_000 }
        ],
        [
          { budgets: { wallClock: 0 } },
          "budgets.wallClock",
          "must be a number from 1000 to 86400000 (ms), or null; got 0",
          { min: 1_000, max: 86_400_000 }
        ]
      ]
      for (const [input, field, rule, range] of cases) {
        const error = yield* Effect.flip(AgentConfig.fromUntrusted(input))
        assert.deepStrictEqual([error._tag, error.field, error.rule, error.range], ["ConfigError", field, rule, range])
      }
    }))

  it.effect("rejects unknown fields, internal knobs, wrong types and switching off protections, naming the field", () =>
    Effect.gen(function*() {
      const failure = (input: unknown) => Effect.flip(AgentConfig.fromUntrusted(input))
      const cases: ReadonlyArray<readonly [unknown, string, RegExp]> = [
        [{ maxTurnz: 5 }, "maxTurnz", /not a known setting/],
        [{ graceTurns: 1 }, "graceTurns", /internal setting/],
        [{ maxRepeatedBatches: 100 }, "maxRepeatedBatches", /internal setting/],
        [{ maxTurns: "50" }, "maxTurns", /^must be an integer from 1 to 200; got "50"$/],
        [{ maxTurns: 2.5 }, "maxTurns", /^must be an integer from 1 to 200; got 2\.5$/],
        [{ maxTurns: null }, "maxTurns", /cannot be switched off/],
        [{ toolTimeout: Number.NaN }, "toolTimeout", /^must be a number from 100 to 600000 \(ms\); got NaN$/],
        [{ budgets: { dollars: 1 } }, "budgets.dollars", /not a known setting/],
        [{ budgets: 5 }, "budgets", /must be an object/],
        ["maxTurns=5", "config", /must be an object/]
      ]
      for (const [input, field, rule] of cases) {
        const error = yield* failure(input)
        assert.strictEqual(error._tag, "ConfigError")
        assert.strictEqual(error.field, field)
        assert.match(error.rule, rule)
      }
    }))

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
