import { Effect, Layer, Schema } from "effect"
import { Toolkit } from "effect/ai"
import { Agent, type AgentEvent, Hooks, Message, SubAgent, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

const Topic = Schema.Struct({ topic: Schema.String })

// A sub-agent with a typed answer: it gives it through its own final_answer tool.
const researcher = Agent.define({
  name: "researcher",
  description: "Finds papers on a topic",
  system: "You are a careful researcher.",
  input: Topic,
  output: Schema.Struct({ papers: Schema.Array(Schema.String) }),
  model: ScriptedModel.layer([
    { toolCalls: [{ name: "final_answer", params: { papers: ["Effects as values", "Fibers in practice"] } }] }
  ]),
  config: { maxTurns: 5 }
})

// A sub-agent that answers with its final reply, as text.
const writer = Agent.define({
  name: "writer",
  description: "Writes a one-line summary",
  input: Topic,
  prompt: ({ topic }) => `Summarise ${topic} in one line.`,
  model: ScriptedModel.layer([{ text: "Effects describe work; fibers run it." }])
})

// Each is a tool of the calling agent; its handler runs the child run.
const Tools = Toolkit.make(Agent.asTool(researcher), Agent.asTool(writer))
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ researcher: SubAgent.handler(researcher), writer: SubAgent.handler(writer) }))
)

// The calling agent asks both at once: they run in parallel, each with its own transcript.
const Model = ScriptedModel.layer([
  {
    toolCalls: [
      { name: "researcher", params: { topic: "effects" } },
      { name: "writer", params: { topic: "effects" } }
    ]
  },
  { text: "Here is your brief." }
])

const program = Effect.gen(function*() {
  // The children's events reach the caller's observers as Nested { path, event };
  // its BudgetSnapshot has each child's turns and usage.
  let agents: AgentEvent.BudgetFigures["agents"]
  const tree = Hooks.plugin({
    name: "tree",
    observe: (event) => {
      if (event._tag === "Nested" && event.event._tag === "AgentEnd" && event.event.outcome !== undefined) {
        console.log(`${event.path.join("/")} ended: ${event.event.outcome._tag}`)
      }
      if (event._tag === "BudgetSnapshot") agents = event.figures.agents
    }
  })
  const result = yield* Agent.run({ prompt: "Brief me on effects.", plugins: [tree] })
  for (const message of result.messages) {
    if (message.role === "toolResult") console.log(`${message.toolName} answered: ${Message.textOf(message)}`)
  }
  for (const [agent, figures] of Object.entries(agents ?? {})) console.log(`${agent} took ${figures.turns} turn`)
  console.log(`${result.outcome._tag}: ${Message.textOf(result.messages.at(-1)!)}`)
})

Effect.runPromise(program.pipe(Effect.provide(Layer.merge(ToolsLive, Model))))
