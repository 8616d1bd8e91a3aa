/**
 * ToolArguments: a tool call's arguments as the model sent them, malformed
 * text kept as it was.
 */
import { assert, describe, it } from "@effect/vitest"
import { ToolArguments } from "effect-agent"

describe("ToolArguments", () => {
  it("ToolArguments.parse keeps malformed text and treats empty text as no arguments", () => {
    assert.deepStrictEqual(ToolArguments.parse("{\"a\":1}"), { a: 1 })
    assert.deepStrictEqual(ToolArguments.parse("  "), {})
    const bad = ToolArguments.parse("{\"a\":")
    assert.isTrue(ToolArguments.isMalformed(bad))
    assert.strictEqual(ToolArguments.toJsonText(bad), "{\"a\":")
    assert.strictEqual(ToolArguments.toJsonText({ b: 2 }), "{\"b\":2}")
  })
})
