import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, Approvals, Hooks, Message, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

// A tool that needs approval: its calls wait for the Approvals service; the other calls go on meanwhile.
const Deploy = Tool.make("deploy", {
  description: "Deploy the current build",
  parameters: Schema.Struct({ env: Schema.Literals(["staging", "production"]) }),
  success: Schema.String,
  needsApproval: true
})
const Tools = Toolkit.make(Deploy)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ deploy: ({ env }) => Effect.succeed(`deployed to ${env}`) }))
)

const Model = ScriptedModel.layer([
  {
    toolCalls: [
      { name: "deploy", params: { env: "staging" } },
      { name: "deploy", params: { env: "production" } }
    ]
  },
  { text: "Deployed to staging; production was not approved." }
])

const program = Effect.gen(function*() {
  // Decisions come later, through a handle: from a UI, a chat, a CLI's stdin.
  const approvals = yield* Approvals.interactive()
  // Here a reviewer answers each ApprovalRequested event, by its approvalId (the call waits by then).
  const reviewer = Hooks.plugin({
    name: "reviewer",
    onEvent: (event) => {
      if (event._tag !== "ApprovalRequested") return Effect.void
      const id = event.approvalId ?? event.toolCallId
      const production = JSON.stringify(event.params).includes("production")
      const decide = production
        ? approvals.deny(id, "no production deploys on Fridays")
        : approvals.approve(id)
      return Effect.asVoid(decide)
    }
  })
  const result = yield* Agent.run({ prompt: "Ship it to staging and production.", plugins: [reviewer] }).pipe(
    Effect.provideService(Approvals.Approvals, approvals)
  )
  for (const message of result.messages) {
    if (message.role === "toolResult") console.log(`${message.isError ? "✗" : "✓"} ${Message.textOf(message)}`)
  }
  console.log(`${result.outcome._tag}: ${Message.textOf(result.messages.at(-1)!)}`)
})

Effect.runPromise(program.pipe(Effect.provide(Layer.merge(ToolsLive, Model))))
