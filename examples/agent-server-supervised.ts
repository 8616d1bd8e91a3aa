import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, Schema, Stream } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { HttpServer } from "effect/http"
import { ToolRegistry } from "effect-agent"
import { AgentServer } from "effect-agent/server"
import { Check, SupervisorEvent } from "effect-agent/supervisor"
import { ScriptedModel } from "effect-agent/testing"
import { createServer } from "node:http"

// The work the check looks at: here a flag the worker's tool sets (a real server runs `Check.command` in its Sandbox).
let fixed = false
const Fix = Tool.make("fix", {
  description: "Fix the failing test",
  parameters: Schema.Struct({ file: Schema.String }),
  success: Schema.String
})
const Tools = Toolkit.make(Fix)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ fix: ({ file }) => Effect.sync(() => ((fixed = true), `fixed ${file}`)) }))
)
const tests = Check.make(
  "tests",
  Effect.sync(() =>
    fixed
      ? { status: "pass" as const, summary: "1 passed" }
      : { status: "fail" as const, summary: "1 failed: sum() is off by one" }
  )
)
const Model = ScriptedModel.layer([
  { text: "1. Read sum.ts. 2. Fix the off-by-one." },
  { toolCalls: [{ name: "fix", params: { file: "sum.ts" } }] },
  { toolCalls: [{ name: "final_answer", params: { summary: "sum() no longer skips the last item" } }] }
])

// The owner's supervisor (its checks, a plan first) and typed output, by name: a client only names them.
const token = AgentServer.randomToken()
const Report = Schema.Struct({ summary: Schema.String })
const Server = AgentServer.layer({
  token,
  supervisors: { tests: { checks: [tests], plan: true, maxTurns: 5 } },
  outputs: { report: Report }
}).pipe(
  Layer.provide(Layer.merge(Model, ToolsLive)),
  Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" }))
)

// A client: starts a supervised session with a typed answer, approves its plan, reads how it ended.
const program = Effect.gen(function*() {
  const url = yield* HttpServer.addressFormattedWith(Effect.succeed)
  const client = yield* AgentServer.client(url, { token })
  const session = yield* client.sessions.create({
    payload: { task: "Make the tests pass", id: "fix-1", supervisor: "tests", output: "report" }
  })
  const events = yield* client.sessions.events({ params: { id: session.id }, headers: {} })
  yield* Stream.runForEach(events, ({ id, data: event }) =>
    Effect.gen(function*() {
      const step = SupervisorEvent.of(event)
      if (step?._tag === "CheckResult") console.log(`#${id} ${step.check}: ${step.status} (${step.summary})`)
      if (step?._tag === "PlanProposed") {
        console.log(`#${id} plan ${step.iteration}: ${step.plan}`)
        const decided = yield* client.sessions.control({ params: { id: session.id }, payload: { type: "approve_plan", iteration: step.iteration } })
        console.log(`#${id} ${decided.type}: ${decided.status} (iteration ${decided.iteration})`)
      }
    }))
  const done = yield* client.sessions.get({ params: { id: session.id } })
  console.log(`${done.id}: ${done.status}, ${done.supervisorOutcome?._tag} in ${done.turns} turn`)
  console.log(JSON.stringify(done.output))
})

Effect.runPromise(program.pipe(Effect.provide(Server), Effect.provide(NodeHttpClient.layerUndici)))
