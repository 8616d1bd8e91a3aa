/**
 * Model prices and the cost of a model call. A {@link PriceTable} maps model
 * ids to {@link ModelPrice}s in US dollars per million tokens; {@link find}
 * resolves a provider's dated model id (`gpt-4o-2024-08-06`,
 * `claude-sonnet-4-20250514`) to its entry, and {@link cost} prices a call's
 * usage. Providers use {@link defaultTable} unless given their own table.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

const Rate = Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))

/**
 * What a model costs, in US dollars per million tokens: uncached `input`,
 * `output` (reasoning included), and, where the provider bills them
 * differently, `cacheRead` and `cacheWrite` input tokens (both default to
 * `input`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const ModelPrice = Schema.Struct({
  input: Rate,
  output: Rate,
  cacheRead: Schema.optionalKey(Rate),
  cacheWrite: Schema.optionalKey(Rate)
})
/**
 * @since 0.1.0
 * @category models
 */
export type ModelPrice = typeof ModelPrice.Type

/**
 * Prices by model id. Keys are model ids or their undated prefixes: `gpt-4o`
 * prices `gpt-4o-2024-08-06` too. Decode untrusted tables with this Schema: it
 * rejects negative or non-finite prices.
 *
 * @since 0.1.0
 * @category schemas
 */
export const PriceTable = Schema.Record(Schema.String, ModelPrice)
/**
 * @since 0.1.0
 * @category models
 */
export type PriceTable = typeof PriceTable.Type

/**
 * List prices of common OpenAI and Anthropic models (standard tier, as
 * published in late 2025). Prices change: pass your own table to a provider
 * layer when they matter.
 *
 * @since 0.1.0
 * @category defaults
 */
export const defaultTable: PriceTable = {
  "gpt-5": { input: 1.25, cacheRead: 0.125, output: 10 },
  "gpt-5-mini": { input: 0.25, cacheRead: 0.025, output: 2 },
  "gpt-5-nano": { input: 0.05, cacheRead: 0.005, output: 0.4 },
  "gpt-4.1": { input: 2, cacheRead: 0.5, output: 8 },
  "gpt-4.1-mini": { input: 0.4, cacheRead: 0.1, output: 1.6 },
  "gpt-4.1-nano": { input: 0.1, cacheRead: 0.025, output: 0.4 },
  "gpt-4o": { input: 2.5, cacheRead: 1.25, output: 10 },
  "gpt-4o-mini": { input: 0.15, cacheRead: 0.075, output: 0.6 },
  "o3": { input: 2, cacheRead: 0.5, output: 8 },
  "o3-mini": { input: 1.1, cacheRead: 0.55, output: 4.4 },
  "o4-mini": { input: 1.1, cacheRead: 0.275, output: 4.4 },
  "claude-opus-4-5": { input: 5, cacheRead: 0.5, cacheWrite: 6.25, output: 25 },
  "claude-opus-4-1": { input: 15, cacheRead: 1.5, cacheWrite: 18.75, output: 75 },
  "claude-opus-4": { input: 15, cacheRead: 1.5, cacheWrite: 18.75, output: 75 },
  "claude-sonnet-4-5": { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  "claude-sonnet-4": { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  "claude-3-7-sonnet": { input: 3, cacheRead: 0.3, cacheWrite: 3.75, output: 15 },
  "claude-haiku-4-5": { input: 1, cacheRead: 0.1, cacheWrite: 1.25, output: 5 },
  "claude-3-5-haiku": { input: 0.8, cacheRead: 0.08, cacheWrite: 1, output: 4 }
}

/**
 * The price of a model: the entry for its exact id, else for the longest key
 * that prefixes the id up to a `-` (dated ids), also after dropping a router's
 * `vendor/` prefix (`openai/gpt-4o`).
 *
 * @example
 * ```ts
 * import { Pricing } from "effect-agent/providers"
 *
 * // USD per million tokens of input, from the "gpt-4o-mini" entry (the longest key the id starts with)
 * console.log(Pricing.find(Pricing.defaultTable, "gpt-4o-mini-2024-07-18")?.input) // Output: 0.15
 * ```
 *
 * @since 0.1.0
 * @category getters
 */
export const find = (table: PriceTable, modelId: string): ModelPrice | undefined => {
  const slash = modelId.lastIndexOf("/")
  const id = slash === -1 ? modelId : modelId.slice(slash + 1)
  // The table's own keys only: the model id is the server's text, and `constructor` or `__proto__` must
  // not find the prototype's function or object as a price (its cost would be NaN, which no budget stops on).
  if (Object.hasOwn(table, id)) return table[id]
  let best: string | undefined
  for (const key of Object.keys(table)) {
    if (id.startsWith(key) && id.charCodeAt(key.length) === DASH && (best === undefined || key.length > best.length)) {
      best = key
    }
  }
  return best === undefined ? undefined : table[best]
}

const DASH = 45

/**
 * Token counts as `effect/ai` reports them on a finish part.
 *
 * @since 0.1.0
 * @category models
 */
export interface TokenUsage {
  readonly inputTokens: {
    readonly total?: number | undefined
    readonly uncached?: number | undefined
    readonly cacheRead?: number | undefined
    readonly cacheWrite?: number | undefined
  }
  readonly outputTokens: {
    readonly total?: number | undefined
  }
}

/**
 * The cost in US dollars of a call's usage at a price. Uncached input is
 * `uncached` when reported, else the total less cache reads and writes.
 *
 * @since 0.1.0
 * @category utils
 */
export const cost = (price: ModelPrice, usage: TokenUsage): number => {
  const cacheRead = usage.inputTokens.cacheRead ?? 0
  const cacheWrite = usage.inputTokens.cacheWrite ?? 0
  const uncached = usage.inputTokens.uncached ?? Math.max(0, (usage.inputTokens.total ?? 0) - cacheRead - cacheWrite)
  const output = usage.outputTokens.total ?? 0
  return (
    uncached * price.input +
    cacheRead * (price.cacheRead ?? price.input) +
    cacheWrite * (price.cacheWrite ?? price.input) +
    output * price.output
  ) / 1_000_000
}
