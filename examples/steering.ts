import { Deferred, Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, Hooks, Message, Steering, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

const Forecast = Tool.make("forecast", {
  description: "The forecast for a city",
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.String
})
const Tools = Toolkit.make(Forecast)

const program = Effect.gen(function*() {
  const steering = yield* Steering.make()
  const toolStarted = yield* Deferred.make<void>()
  const ToolsLive = ToolRegistry.layer(Tools).pipe(
    Layer.provide(Tools.toLayer({
      forecast: ({ city }) =>
        Deferred.succeed(toolStarted, undefined).pipe(
          Effect.andThen(Effect.sleep("100 millis")),
          Effect.as(`${city}: 39°F, clear`)
        )
    }))
  )
  // The user steers while the tool runs: the message waits for the batch and goes in before the next model call.
  yield* Effect.forkChild(
    Effect.andThen(Deferred.await(toolStarted), steering.steer("Give temperatures in Celsius."))
  )
  // A follow-up restarts the run when it would stop.
  yield* steering.followUp("And tomorrow?")

  const delivered = Hooks.plugin({
    name: "delivered",
    observe: (event) => {
      if (event._tag === "SteeringDelivered" || event._tag === "FollowUpDelivered") {
        console.log(`[${event._tag} before turn ${event.turn + 1}]`)
      }
    }
  })
  const result = yield* Agent.run({ prompt: "Weather in Oslo?", steering, plugins: [delivered] }).pipe(
    Effect.provide(ToolsLive)
  )
  for (const message of result.messages) {
    const text = Message.textOf(message)
    console.log(`${message.role}: ${text === "" ? "(calls a tool)" : text}`)
  }
})

const Model = ScriptedModel.layer([
  { toolCalls: [{ name: "forecast", params: { city: "Oslo" } }] },
  { text: "It is 4°C and clear in Oslo." },
  { text: "Tomorrow: 6°C and cloudy." }
])

Effect.runPromise(program.pipe(Effect.provide(Model)))
