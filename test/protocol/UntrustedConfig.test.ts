/**
 * UntrustedConfig: how a run's settings from untrusted input (an HTTP body,
 * the command's flags) are clamped into safe ranges or refused, naming the
 * field.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentConfig } from "effect-agent"
import { UntrustedConfig } from "effect-agent/protocol"

describe("UntrustedConfig.decode", () => {
  it.effect("clamps possible but extreme numbers into the safe ranges, and says which", () =>
    Effect.gen(function*() {
      const input = {
        maxTurns: 10_000,
        maxParallelTools: 1_000,
        toolTimeout: 5,
        maxResultChars: 10,
        budgets: { costUsd: 5_000, wallClock: 10, tokens: null }
      }
      const config = yield* UntrustedConfig.decode(input)
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
      const { clamped } = yield* UntrustedConfig.decodeClamped(input)
      assert.deepStrictEqual(clamped.map((c) => [c.field, c.given, c.used]), [
        ["maxTurns", 10_000, 200],
        ["maxParallelTools", 1_000, 64],
        ["toolTimeout", 5, 100],
        ["maxResultChars", 10, 256],
        ["budgets.costUsd", 5_000, 1_000],
        ["budgets.wallClock", 10, 1_000]
      ])
      // a small cap gets no wrap-up request rather than an impossible grace window
      assert.strictEqual((yield* UntrustedConfig.decode({ maxTurns: 2 })).graceTurns, 0)
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
        const error = yield* Effect.flip(UntrustedConfig.decode(input))
        assert.deepStrictEqual([error._tag, error.field, error.rule, error.range], ["ConfigError", field, rule, range])
      }
    }))

  it.effect("rejects unknown fields, internal knobs, wrong types and switching off protections, naming the field", () =>
    Effect.gen(function*() {
      const failure = (input: unknown) => Effect.flip(UntrustedConfig.decode(input))
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

  it("describes each safe range in words, with its unit and whether null is allowed", () => {
    assert.strictEqual(UntrustedConfig.describeRange(UntrustedConfig.ranges.maxTurns), "an integer from 1 to 200")
    assert.strictEqual(
      UntrustedConfig.describeRange(UntrustedConfig.ranges.budgets.costUsd),
      "a number from 0.0001 to 1000 (USD), or null"
    )
  })
})
