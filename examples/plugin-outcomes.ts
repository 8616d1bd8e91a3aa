import { Effect, Layer, Option, Schema } from "effect"
import { Agent, AgentEvent, Hooks, Outcome, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

// A plugin's own event and outcome: a kind, named after the plugin, and a payload Schema.
const Mentioned = AgentEvent.custom("support/mentioned", Schema.Struct({ word: Schema.String, turn: Schema.Int }))
const Escalated = Outcome.custom("support/escalated", Schema.Struct({ queue: Schema.String }))

const support = Hooks.plugin({
  name: "support",
  afterTurn: (turn, context) => {
    const refund = turn.message.content.some((part) => part.type === "text" && part.text.includes("refund"))
    if (!refund) return Effect.succeed(Hooks.proceed)
    return Effect.as(
      context.emit(Mentioned.make({ word: "refund", turn: context.turn })),
      Hooks.stop(Escalated.make({ queue: "billing" }))
    )
  }
})

// Any observer reads them back, typed, with the definitions; a reader without them keeps them as they are.
const log = Hooks.plugin({
  name: "log",
  observe: (event) => {
    Option.map(Mentioned.payload(event), ({ turn, word }) => console.log(`"${word}" mentioned in turn ${turn}`))
    if (event._tag === "Custom") console.log(`as JSON: ${JSON.stringify(event.payload)}`)
  }
})

const program = Effect.gen(function*() {
  const result = yield* Agent.run({ prompt: "I was charged twice.", plugins: [support, log] })
  const escalated = Escalated.payload(result.outcome)
  if (Option.isSome(escalated)) console.log(`${result.outcome._tag} (${Escalated.kind}): to ${escalated.value.queue}`)
})

const Model = ScriptedModel.layer([{ text: "Sorry about that: I will ask for a refund." }])
Effect.runPromise(program.pipe(Effect.provide(Layer.merge(Model, ToolRegistry.layerEntries()))))
