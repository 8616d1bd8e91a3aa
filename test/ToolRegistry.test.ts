import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { AgentTool, ToolRegistry } from "effect-agent"

const Add = Tool.make("add", {
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite,
  failure: Schema.Struct({ reason: Schema.String })
})
const Drop = AgentTool.annotate(Tool.make("drop", { success: Schema.String, failure: Schema.String }), { fatal: true })
const Arithmetic = Toolkit.make(Add, Drop)
const handlers = Arithmetic.toLayer({
  add: ({ a, b }) => a < 0 ? Effect.fail({ reason: "negative" }) : Effect.succeed(a + b),
  drop: () => Effect.fail("the table is gone")
})

const registry = Effect.map(ToolRegistry.fromToolkit(Arithmetic), (entry) => ToolRegistry.make(entry)).pipe(
  Effect.provide(handlers)
)

describe("ToolRegistry", () => {
  it.effect("lists its tools, finds them by name and gives the model their definitions", () =>
    Effect.gen(function*() {
      const tools = yield* registry
      assert.deepStrictEqual(tools.tools.map((tool) => tool.name), ["add", "drop"])
      assert.strictEqual(tools.get("add"), Add)
      assert.isUndefined(tools.get("sub"))
      assert.deepStrictEqual(Object.keys(tools.definitions), ["add", "drop"])
      assert.strictEqual(tools.definitions.add, Add)
    }))

  it.effect("invoke runs a call with decoded arguments: the content the model reads, a failure as an error", () =>
    Effect.gen(function*() {
      const tools = yield* registry
      assert.deepStrictEqual(yield* tools.invoke("add", { toolCallId: "c1", params: { a: 1, b: 2 } }), {
        content: [{ type: "text", text: "3" }],
        isError: false
      })
      assert.deepStrictEqual(yield* tools.invoke("add", { toolCallId: "c2", params: { a: -1, b: 2 } }), {
        content: [{ type: "text", text: "{\"reason\":\"negative\"}" }],
        isError: true
      })
      const unknown = yield* tools.invoke("sub", { toolCallId: "c3", params: {} })
      assert.isTrue(unknown.isError)
      assert.deepStrictEqual(unknown.content, [
        { type: "text", text: "Unknown tool \"sub\". Available tools: add, drop." }
      ])
    }))

  it.effect("a fatal failure fails invoke with ToolFatalError", () =>
    Effect.gen(function*() {
      const tools = yield* registry
      const error = yield* Effect.flip(tools.invoke("drop", { toolCallId: "d", params: {} }))
      assert.deepStrictEqual([error._tag, error.toolName, error.toolCallId, error.description], [
        "ToolFatalError",
        "drop",
        "d",
        "the table is gone"
      ])
    }))

  it.effect("a later entry's tool replaces an earlier one of the same name", () =>
    Effect.gen(function*() {
      const first = yield* registry
      const Other = Tool.make("add", { success: Schema.String })
      const other = Toolkit.make(Other)
      const entry = yield* ToolRegistry.fromToolkit(other).pipe(
        Effect.provide(other.toLayer({ add: () => Effect.succeed("replaced") }))
      )
      const merged = ToolRegistry.make({ tools: first.definitions, invoke: first.invoke }, entry)
      assert.deepStrictEqual(merged.tools.map((tool) => tool.name), ["add", "drop"])
      assert.strictEqual(merged.get("add"), Other)
      assert.deepStrictEqual(yield* merged.invoke("add", { toolCallId: "c", params: {} }), {
        content: [{ type: "text", text: "replaced" }],
        isError: false
      })
    }))
})
