/**
 * A run's settings from untrusted input: a config in an HTTP body (the
 * agent server's `POST /sessions`) or on the command line (the command's
 * limit flags). Unknown fields and internal knobs are rejected; a value a
 * setting cannot have (not a number, a fraction of a turn, no turns, a
 * negative cost, `null` for a limit that cannot be switched off) fails with a
 * `ConfigError` naming the field and its safe range (`range`); a possible but
 * extreme value is clamped into the safe range of {@link ranges}, and
 * {@link decodeClamped} says which were. `AgentConfig` is the run's settings
 * as a Schema; this module is the apps' policy for settings they are sent.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as AgentConfig from "../AgentConfig.ts"
import { ConfigError } from "../AgentError.ts"

/**
 * A safe range for a setting that comes from untrusted input: values outside
 * it are clamped into it; `nullable` says whether `null` (no limit) may be
 * asked for.
 *
 * @since 0.1.0
 * @category models
 */
export interface Range {
  readonly min: number
  readonly max: number
  readonly integer: boolean
  readonly nullable: boolean
  /** The unit the numbers are in, when they have one (`"ms"`, `"USD"`). */
  readonly unit?: string | undefined
}

const range = (min: number, max: number, integer: boolean, nullable: boolean, unit?: string): Range =>
  unit === undefined ? { min, max, integer, nullable } : { min, max, integer, nullable, unit }

/**
 * The settings untrusted input may set, and their safe ranges:
 *
 * | setting | range | `null` |
 * |---|---|---|
 * | `maxTurns` | 1 – 200 | no |
 * | `maxParallelTools` | 1 – 64 | no |
 * | `maxToolCallsPerTurn` | 1 – 256 | no |
 * | `toolTimeout` (ms) | 100 ms – 10 min | no |
 * | `contextBudgetTokens` | 1,000 – 2,000,000 | yes |
 * | `maxResultChars` | 256 – 1,000,000 | no |
 * | `budgets.tokens`, `budgets.inputTokens`, `budgets.outputTokens` | 1 – 100,000,000 | yes |
 * | `budgets.costUsd` | $0.0001 – $1,000 | yes |
 * | `budgets.wallClock` (ms) | 1 s – 24 h | yes |
 *
 * Everything else (grace turns, detector thresholds, pruning, the wrap-up
 * fraction) is an internal tuning knob that untrusted input cannot set.
 *
 * @since 0.1.0
 * @category untrusted
 */
export const ranges = {
  maxTurns: range(1, 200, true, false),
  maxParallelTools: range(1, 64, true, false),
  maxToolCallsPerTurn: range(1, 256, true, false),
  toolTimeout: range(100, 600_000, false, false, "ms"),
  contextBudgetTokens: range(1_000, 2_000_000, true, true),
  maxResultChars: range(256, 1_000_000, true, false),
  budgets: {
    tokens: range(1, 100_000_000, true, true),
    inputTokens: range(1, 100_000_000, true, true),
    outputTokens: range(1, 100_000_000, true, true),
    costUsd: range(0.0001, 1_000, false, true, "USD"),
    wallClock: range(1_000, 86_400_000, false, true, "ms")
  }
} as const

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * A range in words: `an integer from 1 to 200`, `a number from 100 to 600000 (ms), or null`.
 *
 * @example
 * ```ts
 * import { UntrustedConfig } from "effect-agent/protocol"
 *
 * console.log(UntrustedConfig.describeRange(UntrustedConfig.ranges.maxTurns)) // Output: an integer from 1 to 200
 * ```
 *
 * @since 0.1.0
 * @category utils
 */
export const describeRange = (rule: Range): string =>
  `${rule.integer ? "an integer" : "a number"} from ${rule.min} to ${rule.max}` +
  (rule.unit === undefined ? "" : ` (${rule.unit})`) + (rule.nullable ? ", or null" : "")

/**
 * A setting from untrusted input that was outside its safe range, and the
 * value used instead.
 *
 * @since 0.1.0
 * @category models
 */
export interface Clamped {
  readonly field: string
  readonly given: number
  readonly used: number
  readonly range: Range
}

/**
 * A config from untrusted input, and the settings that were clamped into
 * their safe ranges (to warn about).
 *
 * @since 0.1.0
 * @category models
 */
export interface Decoded {
  readonly config: AgentConfig.AgentConfig
  readonly clamped: ReadonlyArray<Clamped>
}

/** A value as an error shows it: `-1`, `"50"`, `NaN`. */
const describeValue = (value: unknown): string => {
  if (value === undefined) return "nothing"
  if (typeof value === "number" || typeof value === "boolean" || value === null) return String(value)
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** Each setting's check, by field (`budgets.costUsd`): whether a value is one it can have at all. */
const isPossible: ReadonlyMap<string, (value: unknown) => boolean> = new Map([
  ...Object.entries(AgentConfig.AgentConfig.fields).map(([key, schema]) => [key, Schema.is(schema)] as const),
  ...Object.entries(AgentConfig.Budgets.fields).map(([key, schema]) => [`budgets.${key}`, Schema.is(schema)] as const)
])

/** Whether a value is one the setting can have at all (its Schema's range), whatever the safe range. */
const possible = (field: string, value: number): boolean => isPossible.get(field)?.(value) ?? false

const outOfRange = (field: string, rule: Range, value: unknown): ConfigError =>
  new ConfigError({
    field,
    rule: `must be ${describeRange(rule)}; got ${describeValue(value)}`,
    range: { min: rule.min, max: rule.max }
  })

const clampField = (
  field: string,
  value: unknown,
  rule: Range,
  clamped: Array<Clamped>
): Result.Result<number | null, ConfigError> => {
  if (value === null) {
    return rule.nullable
      ? Result.succeed(null)
      : Result.fail(
        new ConfigError({
          field,
          rule: `cannot be switched off (null) from untrusted input: must be ${describeRange(rule)}`
        })
      )
  }
  // Not a number, not an integer, or impossible (no turns, a negative cost): refused, never guessed at.
  if (typeof value !== "number" || !Number.isFinite(value)) return Result.fail(outOfRange(field, rule, value))
  if ((rule.integer && !Number.isInteger(value)) || !possible(field, value)) {
    return Result.fail(outOfRange(field, rule, value))
  }
  // Possible but extreme: clamped into the safe range, and reported.
  const used = Math.min(rule.max, Math.max(rule.min, value))
  if (used !== value) clamped.push({ field, given: value, used, range: rule })
  return Result.succeed(used)
}

const internalKnobs = new Set(Object.keys(AgentConfig.defaults).filter((key) => !(key in ranges)))

const clampRecord = (
  input: unknown,
  rules: Record<string, Range>,
  prefix: string,
  clamped: Array<Clamped>
): Result.Result<Record<string, number | null>, ConfigError> =>
  Result.gen(function*() {
    if (!isRecord(input)) {
      return yield* Result.fail(new ConfigError({ field: prefix || "config", rule: "must be an object" }))
    }
    const out: Record<string, number | null> = {}
    for (const [key, value] of Object.entries(input)) {
      const field = prefix === "" ? key : `${prefix}.${key}`
      const rule = Object.hasOwn(rules, key) ? rules[key] : undefined
      if (rule === undefined) {
        return yield* Result.fail(
          new ConfigError({
            field,
            rule: prefix === "" && internalKnobs.has(key)
              ? "is an internal setting that untrusted input cannot set"
              : "is not a known setting"
          })
        )
      }
      out[key] = yield* clampField(field, value, rule, clamped)
    }
    return out
  })

/**
 * {@link decode}, with the settings it clamped: a caller warns about each
 * (the command does, naming its flag).
 *
 * @since 0.1.0
 * @category constructors
 */
export const decodeClamped = (input: unknown): Effect.Effect<Decoded, ConfigError> =>
  Effect.gen(function*() {
    const clamped: Array<Clamped> = []
    const { top, budgets } = yield* Effect.fromResult(Result.gen(function*() {
      if (!isRecord(input)) return yield* Result.fail(new ConfigError({ field: "config", rule: "must be an object" }))
      const { budgets: budgetRules, ...topRules } = ranges
      const { budgets: budgetsInput, ...topInput } = input
      return {
        top: yield* clampRecord(topInput, topRules, "", clamped),
        budgets: budgetsInput === undefined ? {} : yield* clampRecord(budgetsInput, budgetRules, "budgets", clamped)
      }
    }))
    const config = yield* AgentConfig.validate({
      ...AgentConfig.defaults,
      ...top,
      graceTurns: AgentConfig.defaultGraceTurns(top.maxTurns ?? AgentConfig.defaults.maxTurns),
      budgets: { ...AgentConfig.defaults.budgets, ...budgets }
    })
    return { config, clamped }
  })

/**
 * A config from untrusted input (an HTTP body, command-line flags), over
 * `AgentConfig.defaults`: unknown fields and internal knobs are rejected; a
 * value a setting cannot have fails with a `ConfigError` naming the field and
 * its safe range (`range`); a possible but extreme value is clamped into the
 * safe range of {@link ranges} (see {@link decodeClamped} to warn about it).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { UntrustedConfig } from "effect-agent/protocol"
 *
 * // maxTurns 10,000 becomes 200; toolTimeout 5 ms becomes 100 ms; maxTurns -1 would fail
 * const config = UntrustedConfig.decode({ maxTurns: 10_000, toolTimeout: 5, budgets: { costUsd: 2 } })
 * Effect.runPromise(config).then(({ maxTurns, toolTimeout }) => console.log(maxTurns, toolTimeout)) // Output: 200 100
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const decode = (input: unknown): Effect.Effect<AgentConfig.AgentConfig, ConfigError> =>
  Effect.map(decodeClamped(input), (decoded) => decoded.config)
