/**
 * ToolRegistry: toolkits with handlers as one registry, looked up by name.
 * Tools from MCP servers are in ToolRegistryMcp.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream } from "effect"
import { AiError, Tool, Toolkit } from "effect/ai"
import { ToolRegistry } from "effect-agent"

const Add = Tool.make("add", {
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite
})
const Echo = Tool.make("echo", { parameters: Schema.Struct({ text: Schema.String }), success: Schema.String })
/** Another tool named "add": it replaces the first when registered after it. */
const AddTwice = Tool.make("add", {
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite
})

const Math = Toolkit.make(Add)
const Words = Toolkit.make(Echo)
const Doubling = Toolkit.make(AddTwice)

const registry = <E>(layer: Layer.Layer<ToolRegistry.ToolRegistry, E>) =>
  Effect.provide(Effect.service(ToolRegistry.ToolRegistry), layer)

const mathAndWords = ToolRegistry.layer(Math, Words).pipe(
  Layer.provide(Math.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) })),
  Layer.provide(Words.toLayer({ echo: ({ text }) => Effect.succeed(text) }))
)

describe("ToolRegistry.layer", () => {
  it.effect("registers the tools of every toolkit, in order, found by name", () =>
    Effect.gen(function*() {
      const tools = yield* registry(mathAndWords)
      assert.deepStrictEqual(tools.tools.map((tool) => tool.name), ["add", "echo"])
      assert.strictEqual(tools.get("add"), Add)
      assert.strictEqual(tools.get("echo"), Echo)
      assert.isUndefined(tools.get("ghost"))
      assert.deepStrictEqual(Object.keys(tools.toolkit.tools), ["add", "echo"])
    }))

  it.effect("handle decodes the arguments and runs the handler; run takes decoded arguments", () =>
    Effect.gen(function*() {
      const tools = yield* registry(mathAndWords)
      const results = yield* Stream.runCollect(yield* tools.handle("add", { a: 2, b: 3 }, "c1"))
      assert.deepStrictEqual(
        results.map((result) => [result.result, result.isFailure, result.preliminary]),
        [[5, false, false]]
      )
      const call = { params: { text: "hi" }, rawParams: { text: "hi" }, toolCallId: "c2" }
      const run = yield* tools.run("echo", call, () => Effect.void)
      assert.deepStrictEqual([run.result, run.isFailure], ["hi", false])
    }))

  it.effect("an unknown name fails with ToolNotFoundError listing the tools; the toolkit's own handle is refused", () =>
    Effect.gen(function*() {
      const tools = yield* registry(mathAndWords)
      const missing = yield* Effect.flip(tools.handle("ghost", {}, "c"))
      const reason = missing.reason
      assert.deepStrictEqual(
        reason._tag === "ToolNotFoundError" ? [reason.toolName, reason.availableTools] : reason._tag,
        ["ghost", ["add", "echo"]]
      )
      const ghost = { params: {}, rawParams: {}, toolCallId: "c" }
      const notRun = yield* Effect.flip(tools.run("ghost", ghost, () => Effect.void))
      assert.strictEqual(AiError.isAiError(notRun) ? notRun.reason._tag : notRun, "ToolNotFoundError")
      const refused = yield* Effect.flip(Effect.scoped(tools.toolkit.handle("add" as never, {} as never)))
      assert.strictEqual(refused.reason._tag, "ToolConfigurationError")
    }))
})

describe("ToolRegistry.make, erase, layerEntries and empty", () => {
  /** A toolkit with its handlers, built apart from the registry. */
  const built = <Tools extends Record<string, Tool.Any>, E>(
    kit: Toolkit.Toolkit<Tools>,
    handlers: Layer.Layer<Tool.HandlersFor<Tools>, E>
  ) => Effect.provide(Effect.map(kit, ToolRegistry.erase), handlers)

  it.effect("a registry from toolkits with handlers built apart; a later tool of a name replaces the earlier", () =>
    Effect.gen(function*() {
      const sum = yield* built(Math, Math.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) }))
      const doubled = yield* built(Doubling, Doubling.toLayer({ add: ({ a, b }) => Effect.succeed(2 * (a + b)) }))
      const words = yield* built(Words, Words.toLayer({ echo: ({ text }) => Effect.succeed(text) }))
      const tools = yield* registry(ToolRegistry.layerEntries(sum, words, doubled))
      // the replaced tool keeps its place; its definition and handler are the later ones
      assert.deepStrictEqual(tools.tools.map((tool) => tool.name), ["add", "echo"])
      assert.strictEqual(tools.get("add"), AddTwice)
      const results = yield* Stream.runCollect(yield* tools.handle("add", { a: 1, b: 2 }, "c"))
      assert.deepStrictEqual(results.map((result) => result.result), [6])
      const alone = ToolRegistry.make(sum)
      const run = yield* alone.run("add", { params: { a: 1, b: 2 }, rawParams: { a: 1, b: 2 }, toolCallId: "c" }, () =>
        Effect.void)
      assert.strictEqual(run.result, 3)
    }))

  it("the empty registry has no tools and finds none", () => {
    assert.deepStrictEqual(ToolRegistry.empty.tools, [])
    assert.isUndefined(ToolRegistry.empty.get("add"))
    assert.deepStrictEqual(Object.keys(ToolRegistry.make().toolkit.tools), [])
  })
})
