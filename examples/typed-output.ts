import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, Hooks, Message, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

const SearchFlights = Tool.make("search_flights", {
  description: "Flights between two cities",
  parameters: Schema.Struct({ from: Schema.String, to: Schema.String }),
  success: Schema.Array(Schema.Struct({ flight: Schema.String, price: Schema.Finite }))
})
const Tools = Toolkit.make(SearchFlights)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({
    search_flights: () => Effect.succeed([{ flight: "SK 1467", price: 129 }, { flight: "DY 1302", price: 99 }])
  }))
)

// The final answer: any Schema. The model gives it by calling the `final_answer` tool.
const Choice = Schema.Struct({
  flight: Schema.String,
  price: Schema.Finite,
  reason: Schema.String
})

const Model = ScriptedModel.layer([
  { toolCalls: [{ name: "search_flights", params: { from: "Oslo", to: "Copenhagen" } }] },
  // An answer that does not decode: the model reads what was wrong and the schema, and tries again.
  { toolCalls: [{ name: "final_answer", params: { flight: "DY 1302", price: 99 } }] },
  { toolCalls: [{ name: "final_answer", params: { flight: "DY 1302", price: 99, reason: "the cheapest" } }] }
])

const trace = Hooks.plugin({
  name: "trace",
  observe: (event) => {
    if (event._tag === "OutputDelta") console.log(`answer streaming: ${event.delta}`)
    if (event._tag === "ToolExecutionEnd" && event.result.isError) {
      console.log(`${event.toolName} rejected: ${Message.textOf(event.result).split("\n")[0]}`)
    }
  }
})

const program = Effect.gen(function*() {
  const result = yield* Agent.run({
    prompt: "Find the cheapest flight from Oslo to Copenhagen.",
    output: Choice,
    plugins: [trace]
  })
  // `result.output` has the Schema's type: { flight: string; price: number; reason: string } | undefined
  const choice = result.output
  if (choice !== undefined) {
    console.log(`${result.outcome._tag}: ${choice.flight} for ${choice.price} (${choice.reason})`)
  }
})

Effect.runPromise(program.pipe(Effect.provide(Layer.merge(ToolsLive, Model))))
