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
 * A config from the defaults and the given settings. It is not validated
 * here; `Agent.run` validates it (see {@link validate}).
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
  return {
    ...defaults,
    ...rest,
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
