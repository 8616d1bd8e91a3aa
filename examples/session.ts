import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Message, ToolRegistry } from "effect-agent"
import { CheckpointStore, Session, Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"

// Tools and a model, as in the quick start (a real provider layer goes in the model's place).
const Search = Tool.make("search", {
  description: "Searches the web",
  parameters: Schema.Struct({ query: Schema.String }),
  success: Schema.String
})
const Tools = Toolkit.make(Search)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ search: ({ query }) => Effect.succeed(`3 pages about ${query}`) }))
)
const Model = ScriptedModel.layer([
  { toolCalls: [{ name: "search", params: { query: "durable agents" } }] },
  { text: "Three pages agree: checkpoint every turn." }
])

const program = Effect.gen(function*() {
  // New id: starts the session. Unfinished (a crash, Ctrl-C): resumes it. Finished: its stored result.
  const result = yield* Session.open("research", {
    prompt: "What do people say about durable agents?",
    plugins: [Trajectory.ndjson(".sessions/research.ndjson")],
    config: { maxTurns: 10, budgets: { costUsd: 1 } }
  })
  console.log(result.outcome._tag, "-", Message.textOf(result.messages.at(-1)!))
})

// Each session is kept in .sessions/<id>/: where checkpoints go is a Layer (CheckpointStore.layerMemory in tests).
const Checkpoints = CheckpointStore.layerFileSystem(".sessions")
// The trajectory writes its file through @effect/platform-node's NodeServices.
// runMain turns SIGINT and SIGTERM into a clean stop, which keeps the checkpoint.
NodeRuntime.runMain(program.pipe(Effect.provide(Layer.mergeAll(ToolsLive, Model, Checkpoints, NodeServices.layer))))
