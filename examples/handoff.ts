import { Effect, Layer, Schema } from "effect"
import { Toolkit } from "effect/ai"
import { Agent, Hooks, Message, SubAgent, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

// The agent that takes over refunds.
const billing = Agent.define({
  name: "billing",
  description: "Handles refunds and invoices",
  system: "You are the billing desk.",
  input: Schema.Struct({ request: Schema.String }),
  prompt: ({ request }) => `The customer asks: ${request}`,
  model: ScriptedModel.layer([{ text: "Your refund of order 42 is on its way." }])
})

// A handoff is a tool, transfer_to_billing; its handler says what history billing keeps.
const Tools = Toolkit.make(Agent.handoff(billing))
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({
    transfer_to_billing: SubAgent.handoffHandler(billing, {
      // billing sees the customer's messages, not the triage agent's tool calls
      history: (messages) => messages.filter((message) => message.role === "user")
    })
  }))
)

const Triage = ScriptedModel.layer([
  { toolCalls: [{ name: "transfer_to_billing", params: { request: "refund order 42" } }] }
])

const program = Effect.gen(function*() {
  const ends = Hooks.plugin({
    name: "ends",
    observe: (event) => {
      if (event._tag === "AgentEnd" && event.outcome !== undefined) console.log(`run ended: ${event.outcome._tag}`)
    }
  })
  const result = yield* Agent.run({ prompt: "I want a refund for order 42.", plugins: [ends] })
  console.log(`${result.agent} answered: ${Message.textOf(result.messages.at(-1)!)}`)
})

Effect.runPromise(program.pipe(Effect.provide(Layer.merge(ToolsLive, Triage))))
