import { assert, describe, it } from "@effect/vitest"
import { Exit, Schema } from "effect"
import { Pricing } from "effect-agent/providers"

describe("Pricing", () => {
  it("finds a model by id, dated id, longest prefix and router prefix", () => {
    const table = Pricing.defaultTable
    assert.strictEqual(Pricing.find(table, "gpt-4o"), table["gpt-4o"])
    assert.strictEqual(Pricing.find(table, "gpt-4o-2024-08-06"), table["gpt-4o"])
    assert.strictEqual(Pricing.find(table, "gpt-4o-mini-2024-07-18"), table["gpt-4o-mini"])
    assert.strictEqual(Pricing.find(table, "claude-sonnet-4-20250514"), table["claude-sonnet-4"])
    assert.strictEqual(Pricing.find(table, "claude-sonnet-4-5-20250929"), table["claude-sonnet-4-5"])
    assert.strictEqual(Pricing.find(table, "openai/gpt-5-mini"), table["gpt-5-mini"])
    assert.strictEqual(Pricing.find(table, "gpt-4omni"), undefined)
    assert.strictEqual(Pricing.find(table, "llama3.1:8b"), undefined)
  })

  it("finds only the table's own entries: a server's model id such as constructor prices nothing", () => {
    // The model id is the server's text: the prototype's members are not prices (their cost was NaN).
    for (const id of ["constructor", "toString", "__proto__", "hasOwnProperty", "vendor/constructor"]) {
      assert.strictEqual(Pricing.find(Pricing.defaultTable, id), undefined, id)
    }
    const table: Pricing.PriceTable = { "toString": { input: 1, output: 2 } }
    assert.deepStrictEqual(Pricing.find(table, "toString"), { input: 1, output: 2 })
    assert.deepStrictEqual(Pricing.find(table, "toString-2025"), { input: 1, output: 2 })
  })

  it("prices uncached, cached and written input and output tokens", () => {
    const price = { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 }
    const usage = {
      inputTokens: { total: 1_600, uncached: 100, cacheRead: 1_000, cacheWrite: 500 },
      outputTokens: { total: 200 }
    }
    assert.closeTo(Pricing.cost(price, usage), (100 * 3 + 1_000 * 0.3 + 500 * 3.75 + 200 * 15) / 1e6, 1e-15)
    // Without an uncached count, it is the total less the cache reads and writes; cache rates default to input.
    assert.closeTo(
      Pricing.cost({ input: 2, output: 8 }, { inputTokens: { total: 1_000, cacheRead: 400 }, outputTokens: {} }),
      (600 * 2 + 400 * 2) / 1e6,
      1e-15
    )
  })

  it("rejects untrusted tables with negative or non-finite prices", () => {
    const decode = Schema.decodeUnknownExit(Pricing.PriceTable)
    assert.isTrue(Exit.isSuccess(decode({ "my-model": { input: 1, output: 2 } })))
    assert.isTrue(Exit.isFailure(decode({ "my-model": { input: -1, output: 2 } })))
    assert.isTrue(Exit.isFailure(decode({ "my-model": { input: 1, output: Number.POSITIVE_INFINITY } })))
  })
})
