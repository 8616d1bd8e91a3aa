/**
 * The settings of a run, as a Schema with defaults. Every limit that can be
 * switched off is nullable: `null` means "no limit". Durations are in
 * milliseconds so a config round-trips through JSON; {@link make} also takes
 * `Duration` inputs (`"30 seconds"`). `Agent.run` validates every config it
 * is given, however it was made.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schema, SchemaIssue } from "effect"
import { ConfigError } from "./AgentError.ts"

const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))
const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const PositiveNumber = Schema.Finite.check(Schema.isGreaterThan(0))

/**
 * Run-wide budgets: tokens (total, input, output), cost in US dollars, and
 * wall-clock time in milliseconds. `null` switches a budget off.
 *
 * @since 0.1.0
 */
export const Budgets = Schema.Struct({
  tokens: Schema.NullOr(PositiveInt),
  inputTokens: Schema.NullOr(PositiveInt),
  outputTokens: Schema.NullOr(PositiveInt),
  costUsd: Schema.NullOr(PositiveNumber),
  wallClock: Schema.NullOr(PositiveNumber)
})
/** @since 0.1.0 */
export type Budgets = typeof Budgets.Type

/**
 * The config of a run.
 *
 * | field | default | meaning |
 * |---|---|---|
 * | `maxTurns` | 50 | model calls per run (`null`: no cap) |
 * | `graceTurns` | 3 | turns before the cap at which the model is asked to wrap up (0: never) |
 * | `maxParallelTools` | 8 | tool calls running at once |
 * | `maxToolCallsPerTurn` | 32 | counted calls executed per turn; the rest are answered "not executed" |
 * | `toolTimeout` | 120000 | ms a tool call may run (a tool's `AgentTool.Timeout` wins) |
 * | `contextBudgetTokens` | null | estimated request tokens above which old context is pruned |
 * | `maxResultChars` | 32000 | characters of a tool result the model reads |
 * | `maxRepeatedBatches` | 2 | identical consecutive batches tolerated before the loop detector trips |
 * | `maxStagnantReplies` | 5 | identical tool-less replies tolerated before the run is stagnated |
 * | `pruneKeepToolResults` | 8 | newest tool results kept whole when pruning |
 * | `pruneKeepTail` | 24 | newest messages kept when pruning hard |
 * | `budgets` | all null | token, cost and wall-clock budgets |
 * | `wrapUpAt` | 0.9 | fraction of a budget at which the model is asked to wrap up |
 *
 * @since 0.1.0
 */
export const AgentConfig = Schema.Struct({
  maxTurns: Schema.NullOr(PositiveInt),
  graceTurns: NonNegativeInt,
  maxParallelTools: PositiveInt,
  maxToolCallsPerTurn: Schema.NullOr(PositiveInt),
  toolTimeout: Schema.NullOr(PositiveNumber),
  contextBudgetTokens: Schema.NullOr(PositiveInt),
  maxResultChars: Schema.NullOr(PositiveInt),
  maxRepeatedBatches: Schema.NullOr(PositiveInt),
  maxStagnantReplies: Schema.NullOr(PositiveInt),
  pruneKeepToolResults: NonNegativeInt,
  pruneKeepTail: PositiveInt,
  budgets: Budgets,
  wrapUpAt: Schema.NullOr(PositiveNumber.check(Schema.isLessThanOrEqualTo(1)))
})
/** @since 0.1.0 */
export type AgentConfig = typeof AgentConfig.Type

/**
 * The default config.
 *
 * @since 0.1.0
 */
export const defaults: AgentConfig = {
  maxTurns: 50,
  graceTurns: 3,
  maxParallelTools: 8,
  maxToolCallsPerTurn: 32,
  toolTimeout: 120_000,
  contextBudgetTokens: null,
  maxResultChars: 32_000,
  maxRepeatedBatches: 2,
  maxStagnantReplies: 5,
  pruneKeepToolResults: 8,
  pruneKeepTail: 24,
  budgets: { tokens: null, inputTokens: null, outputTokens: null, costUsd: null, wallClock: null },
  wrapUpAt: 0.9
}

type Nullable<A> = A | null

/**
 * What {@link make} accepts: any subset of the config, with durations as
 * `Duration` inputs or milliseconds.
 *
 * @since 0.1.0
 */
export interface Input extends Partial<Omit<AgentConfig, "toolTimeout" | "budgets">> {
  readonly toolTimeout?: Nullable<Duration.Input> | undefined
  readonly budgets?: Partial<Omit<Budgets, "wallClock">> & {
    readonly wallClock?: Nullable<Duration.Input> | undefined
  } | undefined
}

const millis = (input: Nullable<Duration.Input>): number | null =>
  input === null ? null : typeof input === "number" ? input : Duration.toMillis(Duration.fromInputUnsafe(input))

/**
 * A config from the defaults and the given settings (a setting given as
 * `undefined` keeps its default). It is not validated here; `Agent.run`
 * validates it (see {@link validate}).
 *
 * @example
 * ```ts
 * import { AgentConfig } from "effect-agent"
 *
 * const config = AgentConfig.make({ maxTurns: 10, toolTimeout: "30 seconds", budgets: { costUsd: 0.5 } })
 * ```
 *
 * @since 0.1.0
 */
export const make = (input: Input = {}): AgentConfig => {
  const { toolTimeout, budgets = {}, ...rest } = input
  const pick = <K extends Exclude<keyof Budgets, "wallClock">>(key: K): Budgets[K] => {
    const value = budgets[key]
    return value === undefined ? defaults.budgets[key] : value
  }
  const given: Partial<AgentConfig> = {}
  // A field given as `undefined` (an options object built with spreads) keeps its default.
  for (const [key, value] of Object.entries(rest)) if (value !== undefined) Object.assign(given, { [key]: value })
  return {
    ...defaults,
    ...given,
    toolTimeout: toolTimeout === undefined ? defaults.toolTimeout : millis(toolTimeout),
    budgets: {
      tokens: pick("tokens"),
      inputTokens: pick("inputTokens"),
      outputTokens: pick("outputTokens"),
      costUsd: pick("costUsd"),
      wallClock: budgets.wallClock === undefined ? defaults.budgets.wallClock : millis(budgets.wallClock)
    }
  }
}

const firstPath = (issue: SchemaIssue.Issue): ReadonlyArray<PropertyKey> => {
  const path: Array<PropertyKey> = []
  let current: SchemaIssue.Issue | undefined = issue
  while (current !== undefined) {
    switch (current._tag) {
      case "Pointer":
        path.push(...current.path)
        current = current.issue
        break
      case "Composite":
        current = current.issues[0]
        break
      case "Filter":
      case "Encoding":
        current = current.issue
        break
      default:
        current = undefined
    }
  }
  return path
}

/**
 * Turns a Schema failure on a config into a `ConfigError` naming the field.
 *
 * @since 0.1.0
 */
export const configErrorFromSchema = (error: Schema.SchemaError): ConfigError => {
  const path = firstPath(error.issue)
  const field = path.length === 0 ? "config" : path.map(String).join(".")
  return new ConfigError({ field, rule: error.message })
}

const decode = Schema.decodeUnknownEffect(AgentConfig, { onExcessProperty: "error" })

/**
 * Validates a config: every field present, every number in its range,
 * nothing unknown. Fails with `ConfigError` naming the field and the rule.
 *
 * @since 0.1.0
 */
export const validate = (config: unknown): Effect.Effect<AgentConfig, ConfigError> =>
  Effect.mapError(decode(config), configErrorFromSchema)

// -----------------------------------------------------------------------------
// Untrusted input
// -----------------------------------------------------------------------------

/**
 * A safe range for a setting that comes from untrusted input: values outside
 * it are clamped into it; `nullable` says whether `null` (no limit) may be
 * asked for.
 *
 * @since 0.1.0
 */
export interface Range {
  readonly min: number
  readonly max: number
  readonly integer: boolean
  readonly nullable: boolean
}

const range = (min: number, max: number, integer: boolean, nullable: boolean): Range => ({
  min,
  max,
  integer,
  nullable
})

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
 */
export const untrustedRanges = {
  maxTurns: range(1, 200, true, false),
  maxParallelTools: range(1, 64, true, false),
  maxToolCallsPerTurn: range(1, 256, true, false),
  toolTimeout: range(100, 600_000, false, false),
  contextBudgetTokens: range(1_000, 2_000_000, true, true),
  maxResultChars: range(256, 1_000_000, true, false),
  budgets: {
    tokens: range(1, 100_000_000, true, true),
    inputTokens: range(1, 100_000_000, true, true),
    outputTokens: range(1, 100_000_000, true, true),
    costUsd: range(0.0001, 1_000, false, true),
    wallClock: range(1_000, 86_400_000, false, true)
  }
} as const

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const clampField = (field: string, value: unknown, rule: Range): Effect.Effect<number | null, ConfigError> => {
  if (value === null) {
    return rule.nullable
      ? Effect.succeed(null)
      : Effect.fail(new ConfigError({ field, rule: "cannot be switched off (null) from untrusted input" }))
  }
  if (typeof value !== "number" || !Number.isFinite(value)) {
    return Effect.fail(new ConfigError({ field, rule: `must be a finite number${rule.nullable ? " or null" : ""}` }))
  }
  if (rule.integer && !Number.isInteger(value)) {
    return Effect.fail(new ConfigError({ field, rule: "must be an integer" }))
  }
  return Effect.succeed(Math.min(rule.max, Math.max(rule.min, value)))
}

const internalKnobs = new Set(Object.keys(defaults).filter((key) => !(key in untrustedRanges)))

const clampRecord = (
  input: unknown,
  rules: Record<string, Range>,
  prefix: string
): Effect.Effect<Record<string, number | null>, ConfigError> =>
  Effect.gen(function*() {
    if (!isRecord(input)) return yield* new ConfigError({ field: prefix || "config", rule: "must be an object" })
    const out: Record<string, number | null> = {}
    for (const [key, value] of Object.entries(input)) {
      const field = prefix === "" ? key : `${prefix}.${key}`
      const rule = rules[key]
      if (rule === undefined) {
        return yield* new ConfigError({
          field,
          rule: prefix === "" && internalKnobs.has(key)
            ? "is an internal setting that untrusted input cannot set"
            : "is not a known setting"
        })
      }
      out[key] = yield* clampField(field, value, rule)
    }
    return out
  })

/**
 * A config from untrusted input (an HTTP body, command-line flags): unknown
 * fields and internal knobs are rejected, numbers are clamped into the safe
 * ranges of {@link untrustedRanges}, and the result is validated. Fails with
 * a `ConfigError` naming the field and the rule.
 *
 * @example
 * ```ts
 * import { AgentConfig } from "effect-agent"
 *
 * // maxTurns 10,000 becomes 200; toolTimeout 5 ms becomes 100 ms
 * const config = AgentConfig.fromUntrusted({ maxTurns: 10_000, toolTimeout: 5, budgets: { costUsd: 2 } })
 * ```
 *
 * @since 0.1.0
 */
export const fromUntrusted = (input: unknown): Effect.Effect<AgentConfig, ConfigError> =>
  Effect.gen(function*() {
    const { budgets: budgetRules, ...topRules } = untrustedRanges
    const { budgets: budgetsInput, ...topInput } = isRecord(input) ? input : { budgets: undefined }
    if (!isRecord(input)) return yield* new ConfigError({ field: "config", rule: "must be an object" })
    const top = yield* clampRecord(topInput, topRules, "")
    const budgets = budgetsInput === undefined ? {} : yield* clampRecord(budgetsInput, budgetRules, "budgets")
    return yield* validate({ ...defaults, ...top, budgets: { ...defaults.budgets, ...budgets } })
  })
