import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, Schema, Stream } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { HttpServer } from "effect/http"
import { Message, ToolRegistry } from "effect-agent"
import { AgentServer } from "effect-agent/server"
import { ScriptedModel } from "effect-agent/testing"
import { createServer } from "node:http"

// What every session runs with: a model and tools, as for Agent.run (a real provider layer goes in the model's place).
const Deploy = Tool.make("deploy", {
  description: "Deploy the current build",
  parameters: Schema.Struct({ env: Schema.String }),
  success: Schema.String,
  needsApproval: true
})
const Tools = Toolkit.make(Deploy)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ deploy: ({ env }) => Effect.succeed(`deployed to ${env}`) }))
)
const Model = ScriptedModel.layer([
  { toolCalls: [{ name: "deploy", params: { env: "staging" } }] },
  { text: "Staging is live." }
])

// The server: sessions kept in memory here (give `directory` to keep them, and resume them after a restart).
// Every request needs its token; this program talks to it too, so it makes the token (without one, the server
// makes one and logs it, with the inspector's URL that carries it).
const token = AgentServer.randomToken()
const Server = AgentServer.layer({ token, config: { maxTurns: 10 } }).pipe(
  Layer.provide(Layer.merge(Model, ToolsLive)),
  Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" }))
)

// A client: starts a session, follows its events, approves the deploy when it asks.
const program = Effect.gen(function*() {
  const url = yield* HttpServer.addressFormattedWith(Effect.succeed)
  const client = yield* AgentServer.client(url, { token })
  const session = yield* client.sessions.create({ payload: { task: "Deploy to staging", id: "deploy-1" } })
  const events = yield* client.sessions.events({ params: { id: session.id }, headers: {} })
  yield* Stream.runForEach(events, ({ id, data: event }) =>
    Effect.gen(function*() {
      if (event._tag === "ApprovalRequested") {
        console.log(`#${id} ${event.toolName} waits for approval`)
        const approvalId = event.approvalId ?? event.toolCallId
        yield* client.sessions.control({ params: { id: session.id }, payload: { type: "approve", id: approvalId } })
      }
      if (event._tag === "ToolExecutionEnd") console.log(`#${id} ${event.toolName}: ${Message.textOf(event.result)}`)
      if (event._tag === "AgentEnd") console.log(`#${id} ${event.outcome?._tag}`)
    }))
  const done = yield* client.sessions.get({ params: { id: session.id } })
  console.log(`${done.id}: ${done.status} in ${done.turns} turns`)
})

Effect.runPromise(program.pipe(Effect.provide(Server), Effect.provide(NodeHttpClient.layerUndici)))
