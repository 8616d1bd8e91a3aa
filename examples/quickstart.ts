import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, Message, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

// 1. Tools are plain effect/ai tools, with handlers.
const GetWeather = Tool.make("get_weather", {
  description: "Current temperature in a city",
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.Struct({ celsius: Schema.Finite })
})
const Tools = Toolkit.make(GetWeather)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({
    get_weather: ({ city }) => Effect.succeed({ celsius: city === "Oslo" ? 4 : 20 })
  }))
)

// 2. A model: any effect/ai LanguageModel layer. ScriptedModel plays a script
//    (offline, for tests); a real provider layer goes in its place.
const Model = ScriptedModel.layer([
  { toolCalls: [{ name: "get_weather", params: { city: "Oslo" } }] },
  { text: "It is 4°C in Oslo: bring a coat." }
])

// 3. Run the loop.
const program = Effect.gen(function*() {
  const result = yield* Agent.run({
    system: "You answer weather questions. Use the tools.",
    prompt: "How cold is it in Oslo?",
    config: { maxTurns: 10 }
  })
  console.log(result.outcome._tag, "-", Message.textOf(result.messages.at(-1)!))
})

Effect.runPromise(program.pipe(Effect.provide(Layer.merge(ToolsLive, Model))))
