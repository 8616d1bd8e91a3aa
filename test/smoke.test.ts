import { assert, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, type AgentEvent, Hooks, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

const Add = Tool.make("add", {
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite
})
const Tools = Toolkit.make(Add)
const ToolsLayer = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) }))
)

it.effect("smoke", () =>
  Effect.gen(function*() {
    const events: Array<AgentEvent.AgentEvent> = []
    const result = yield* Agent.run({
      prompt: "1+2?",
      plugins: [Hooks.plugin({ name: "rec", onEvent: (e) => Effect.sync(() => void events.push(e)) })]
    })
    console.log(JSON.stringify(result, null, 1))
    console.log(events.map((e) => e._tag).join(" "))
    assert.strictEqual(result.outcome._tag, "Completed")
  }).pipe(
    Effect.provide(ToolsLayer),
    Effect.provide(ScriptedModel.layer([
      { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
      { text: "1 + 2 = 3" }
    ]))
  ))
