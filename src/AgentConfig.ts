/**
 * The settings of a run, as a Schema with defaults. Every limit that can be
 * switched off is nullable: `null` means "no limit". Durations are in
 * milliseconds so a config round-trips through JSON; {@link make} also takes
 * `Duration` inputs (`"30 seconds"`). Every way to build a config validates
 * it: {@link make} fails with a `ConfigError` naming the field and what it
 * must be, {@link makeUnsafe} throws that error, {@link validate} checks a
 * whole config from anywhere, and `Agent.run` validates the config it is
 * given, however it was made.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import { ConfigError } from "./AgentError.ts"

const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))
const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const PositiveNumber = Schema.Finite.check(Schema.isGreaterThan(0))

/**
 * Run-wide budgets: tokens (total, input, output), cost in US dollars, and
 * wall-clock time in milliseconds. `null` switches a budget off.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Budgets = Schema.Struct({
  tokens: Schema.NullOr(PositiveInt),
  inputTokens: Schema.NullOr(PositiveInt),
  outputTokens: Schema.NullOr(PositiveInt),
  costUsd: Schema.NullOr(PositiveNumber),
  wallClock: Schema.NullOr(PositiveNumber)
})
/**
 * @since 0.1.0
 * @category models
 */
export type Budgets = typeof Budgets.Type

/**
 * The config of a run.
 *
 * | field | default | meaning |
 * |---|---|---|
 * | `maxTurns` | 50 | model calls per run (`null`: no cap) |
 * | `graceTurns` | 3, or a quarter of `maxTurns` | turns before the cap to ask for a wrap-up (0: never); under `maxTurns` |
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
 * Without `graceTurns`, the grace window is a quarter of the turn cap
 * (rounded down), at most 3 turns: the wrap-up request comes in the run's
 * last quarter. A cap of 4–7 turns gets 1 (with `maxTurns: 5`, the request
 * comes after turn 4), 8–11 get 2, 12 or more (and no cap) get 3; a cap of
 * 3 or less gets no wrap-up request. See {@link defaultGraceTurns}.
 *
 * @since 0.1.0
 * @category schemas
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
/**
 * @since 0.1.0
 * @category models
 */
export type AgentConfig = typeof AgentConfig.Type

/**
 * The default config.
 *
 * @since 0.1.0
 * @category defaults
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

/**
 * What each setting must be, as the `ConfigError`s say it.
 */
const expectations: { readonly [K in Exclude<keyof AgentConfig, "budgets">]: string } & {
  readonly budgets: { readonly [K in keyof Budgets]: string }
} = {
  maxTurns: "an integer ≥ 1, or null (no cap)",
  graceTurns: "an integer ≥ 0, less than maxTurns",
  maxParallelTools: "an integer ≥ 1",
  maxToolCallsPerTurn: "an integer ≥ 1, or null (no limit)",
  toolTimeout: "a duration > 0 (milliseconds, or a Duration such as \"30 seconds\"), or null (none)",
  contextBudgetTokens: "an integer ≥ 1, or null (no pruning)",
  maxResultChars: "an integer ≥ 1, or null (no limit)",
  maxRepeatedBatches: "an integer ≥ 1, or null (off)",
  maxStagnantReplies: "an integer ≥ 1, or null (off)",
  pruneKeepToolResults: "an integer ≥ 0",
  pruneKeepTail: "an integer ≥ 1",
  budgets: {
    tokens: "an integer ≥ 1, or null (no budget)",
    inputTokens: "an integer ≥ 1, or null (no budget)",
    outputTokens: "an integer ≥ 1, or null (no budget)",
    costUsd: "a number > 0, or null (no budget)",
    wallClock: "a duration > 0 (milliseconds, or a Duration such as \"1 hour\"), or null (no budget)"
  },
  wrapUpAt: "a number > 0 and ≤ 1, or null (never)"
}

const describeValue = (value: unknown): string => {
  if (value === undefined) return "nothing"
  if (typeof value === "number" || typeof value === "boolean" || value === null) return String(value)
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

const expectationByField: ReadonlyMap<string, string> = (() => {
  const { budgets, ...top } = expectations
  return new Map([
    ...Object.entries(top),
    ...Object.entries(budgets).map(([key, text]): [string, string] => [`budgets.${key}`, text])
  ])
})()

const expectationAt = (path: ReadonlyArray<string>): string | undefined => expectationByField.get(path.join("."))

type Nullable<A> = A | null

/**
 * What {@link make} accepts: any subset of the config, with durations as
 * `Duration` inputs or milliseconds.
 *
 * @since 0.1.0
 * @category options
 */
export interface Input extends Settings<Omit<AgentConfig, "toolTimeout" | "budgets">> {
  readonly toolTimeout?: Nullable<Duration.Input> | undefined
  readonly budgets?: Settings<Omit<Budgets, "wallClock">> & {
    readonly wallClock?: Nullable<Duration.Input> | undefined
  } | undefined
}

/** Each setting optional; `undefined` keeps the default. */
type Settings<A> = { readonly [K in keyof A]?: A[K] | undefined }

/** Milliseconds from a duration input; `undefined` when it is not one (the config check then names it). */
const millis = (input: Nullable<Duration.Input>): number | null | undefined => {
  if (input === null || typeof input === "number") return input
  const duration = Duration.fromInput(input)
  return duration._tag === "Some" ? Duration.toMillis(duration.value) : undefined
}

const fromDuration = (field: string, input: Nullable<Duration.Input>): Result.Result<number | null, ConfigError> => {
  const ms = millis(input)
  return ms === undefined
    ? Result.fail(
      new ConfigError({ field, rule: `must be ${expectationAt(field.split("."))}; got ${describeValue(input)}` })
    )
    : Result.succeed(ms)
}

/**
 * The grace window a config gets for a turn cap when it sets none: a
 * quarter of the cap, rounded down, and at most the default's 3 turns, so
 * that the wrap-up request comes in the run's last quarter (a cap of 5 asks
 * after turn 4, not after turn 2). A cap of 3 or less gets none (no wrap-up
 * request); no cap gets 3.
 *
 * @example
 * ```ts
 * import { AgentConfig } from "effect-agent"
 *
 * console.log([50, 10, 5, 3, null].map(AgentConfig.defaultGraceTurns).join(" ")) // Output: 3 2 1 0 3
 * ```
 *
 * @since 0.1.0
 * @category defaults
 */
export const defaultGraceTurns = (maxTurns: number | null): number =>
  maxTurns === null ? defaults.graceTurns : Math.min(defaults.graceTurns, Math.floor(maxTurns / 4))

/**
 * Whether a config's grace window carries over to another turn cap (a
 * session resumed with a new `maxTurns`, a server's cap over a request's):
 * it does when it fits under the new cap and is not its own cap's default.
 * Otherwise the new cap's default applies ({@link defaultGraceTurns}): a
 * run saved with the defaults and resumed with `maxTurns: 5` is asked to
 * wrap up after turn 4, not after turn 2.
 *
 * @example
 * ```ts
 * import { AgentConfig } from "effect-agent"
 *
 * const saved = AgentConfig.makeUnsafe({ maxTurns: 50 }) // the default grace window: 3
 * const chosen = AgentConfig.makeUnsafe({ maxTurns: 50, graceTurns: 2 })
 * console.log(AgentConfig.graceCarriesOver(saved, 5), AgentConfig.graceCarriesOver(chosen, 5)) // Output: false true
 * ```
 *
 * @since 0.1.0
 * @category defaults
 */
export const graceCarriesOver = (
  config: Pick<AgentConfig, "maxTurns" | "graceTurns">,
  maxTurns: number | null
): boolean =>
  config.graceTurns !== defaultGraceTurns(config.maxTurns) && (maxTurns === null || config.graceTurns < maxTurns)

/** The defaults with the given settings on top, durations in milliseconds; not yet checked. */
const fill = (input: Input): Result.Result<Record<string, unknown>, ConfigError> =>
  Result.gen(function*() {
    const { budgets = {}, graceTurns, toolTimeout, ...rest } = input
    const given: Record<string, unknown> = {}
    // A field given as `undefined` (an options object built with spreads) keeps its default.
    for (const [key, value] of Object.entries(rest)) if (value !== undefined) given[key] = value
    const givenBudgets: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(budgets)) if (value !== undefined) givenBudgets[key] = value
    const maxTurns = input.maxTurns === undefined ? defaults.maxTurns : input.maxTurns
    return {
      ...defaults,
      ...given,
      graceTurns: graceTurns ?? defaultGraceTurns(maxTurns),
      toolTimeout: toolTimeout === undefined ? defaults.toolTimeout : yield* fromDuration("toolTimeout", toolTimeout),
      budgets: {
        ...defaults.budgets,
        ...givenBudgets,
        wallClock: budgets.wallClock === undefined
          ? defaults.budgets.wallClock
          : yield* fromDuration("budgets.wallClock", budgets.wallClock)
      }
    }
  })

/**
 * A config from the defaults and the given settings (a setting given as
 * `undefined` keeps its default), validated: fails with a `ConfigError`
 * naming the field and what it must be. Without `graceTurns`, the grace
 * window is the cap's default ({@link defaultGraceTurns}: a quarter of the
 * cap, at most 3; a cap of 3 turns or less gets no wrap-up request).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { AgentConfig } from "effect-agent"
 *
 * const program = Effect.gen(function*() {
 *   const config = yield* AgentConfig.make({ maxTurns: 10, toolTimeout: "30 seconds", budgets: { costUsd: 0.5 } })
 *   return config.toolTimeout
 * })
 *
 * Effect.runPromise(program).then(console.log) // Output: 30000
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (input: Input = {}): Effect.Effect<AgentConfig, ConfigError> => Effect.fromResult(parse(input))

/**
 * {@link make}, synchronously: throws the `ConfigError` when the settings are
 * invalid. For settings fixed in code (a module-level constant); use
 * {@link make} for anything that comes from elsewhere.
 *
 * @example
 * ```ts
 * import { AgentConfig } from "effect-agent"
 *
 * const config = AgentConfig.makeUnsafe({ maxTurns: 10, budgets: { wallClock: "5 minutes" } })
 * console.log(config.budgets.wallClock) // Output: 300000
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeUnsafe = (input: Input = {}): AgentConfig => {
  const parsed = parse(input)
  if (Result.isFailure(parsed)) throw parsed.failure
  return parsed.success
}

const parse = (input: Input): Result.Result<AgentConfig, ConfigError> => Result.flatMap(fill(input), check)

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

const isRecord = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const valueAt = (value: unknown, path: ReadonlyArray<string>): unknown => {
  let current = value
  for (const key of path) {
    if (!isRecord(current) || !Object.hasOwn(current, key)) return undefined
    current = current[key]
  }
  return current
}

/**
 * Turns a Schema failure on a config into a `ConfigError` naming the field
 * and what it must be (and, given the config, what it was).
 *
 * @since 0.1.0
 * @category errors
 */
export const configErrorFromSchema = (error: Schema.SchemaError, config?: unknown): ConfigError => {
  const path = firstPath(error.issue).map(String)
  if (path.length === 0) return new ConfigError({ field: "config", rule: `must be an object of settings` })
  const field = path.join(".")
  const expected = expectationAt(path)
  if (expected === undefined) return new ConfigError({ field, rule: "is not a known setting" })
  const got = config === undefined ? "" : `; got ${describeValue(valueAt(config, path))}`
  return new ConfigError({ field, rule: `must be ${expected}${got}` })
}

const decode = Schema.decodeUnknownResult(AgentConfig, { onExcessProperty: "error" })

/** The rules between fields, once each field is in its range. */
const checkFields = (config: AgentConfig): Result.Result<AgentConfig, ConfigError> =>
  config.maxTurns !== null && config.graceTurns > 0 && config.graceTurns >= config.maxTurns
    ? Result.fail(
      new ConfigError({
        field: "graceTurns",
        rule: `must be less than maxTurns (${config.maxTurns}), or 0 for no wrap-up request; got ${config.graceTurns}`
      })
    )
    : Result.succeed(config)

const check = (config: unknown): Result.Result<AgentConfig, ConfigError> =>
  Result.flatMap(Result.mapError(decode(config), (error) => configErrorFromSchema(error, config)), checkFields)

/**
 * Validates a config: every field present, every number in its range, the
 * grace window inside the turn cap, nothing unknown. Fails with a
 * `ConfigError` naming the field and what it must be.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (config: unknown): Effect.Effect<AgentConfig, ConfigError> => Effect.fromResult(check(config))
