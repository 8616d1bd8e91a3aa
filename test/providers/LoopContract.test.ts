/**
 * The providers depend on `effect/ai` alone, so they speak the two contracts
 * they share with the run by their data, not by importing the core: the
 * malformed tool-argument marker (core `ToolArguments`) and the native
 * structured output a run asks for (core `Output.NativeFormat`). These tests
 * pin that both sides read and write the same values, so that neither can
 * drift from the other.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Output, ToolArguments } from "effect-agent"
import * as ProviderOutput from "../../src/providers/internal/Output.ts"
import * as ProviderArguments from "../../src/providers/internal/ToolArguments.ts"

const texts = ["{\"a\":1}", "", "  ", "[1,2]", "null", "\"text\"", "{\"a\":", "{a:1}", "{\"a\":1}}", "\u0000"]

describe("the providers' side of the run's contracts", () => {
  it("tool arguments: the providers parse every text as the core does, and the loop reads their marker", () => {
    for (const text of texts) {
      const ours = ProviderArguments.parse(text)
      assert.deepStrictEqual(ours, ToolArguments.parse(text), JSON.stringify(text))
      assert.strictEqual(ToolArguments.isMalformed(ours), ProviderArguments.isMalformed(ours), JSON.stringify(text))
      assert.strictEqual(ProviderArguments.toJsonText(ours), ToolArguments.toJsonText(ours), JSON.stringify(text))
    }
    // a malformed text is the marker, with the raw text to replay
    const malformed = ProviderArguments.parse("{\"a\":")
    assert.isTrue(ToolArguments.isMalformed(malformed))
    assert.strictEqual(ToolArguments.toJsonText(malformed), "{\"a\":")
    // the core's marker is the providers' too, and a look-alike is neither's
    const marker = ToolArguments.malformed("{x", "bad")
    assert.isTrue(ProviderArguments.isMalformed(marker))
    assert.strictEqual(ProviderArguments.toJsonText(marker), "{x")
    const lookAlike = { _tag: "MalformedToolArguments", raw: 1, error: "bad" }
    assert.isFalse(ProviderArguments.isMalformed(lookAlike))
    assert.isFalse(ToolArguments.isMalformed(lookAlike))
  })

  it.effect("native output: what the run provides as Output.NativeFormat is what the providers read", () =>
    Effect.gen(function*() {
      assert.strictEqual(ProviderOutput.NativeFormat.key, Output.NativeFormat.key)
      assert.isUndefined(yield* ProviderOutput.NativeFormat)
      const format = { objectName: "answer", schema: Schema.Struct({ n: Schema.Number }) }
      const read = yield* Effect.provideService(Effect.service(ProviderOutput.NativeFormat), Output.NativeFormat, format)
      assert.strictEqual(read, format)
    }))
})
