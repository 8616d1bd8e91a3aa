import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { ExternalWorker } from "effect-agent/supervisor"

// Claude Code in the current directory, given only the variable it needs from the environment.
const worker = ExternalWorker.claude({ cwd: process.cwd(), env: ["ANTHROPIC_API_KEY"], timeout: "20 minutes" })

const program = Effect.gen(function*() {
  const first = yield* worker.turn({ message: "Make npm test pass", phase: "act", resumeToken: undefined })
  console.log(`turn 1: ${first.text}`)
  // keep first.resumeToken (a supervised session keeps it in its checkpoint) to continue the conversation
  const second = yield* worker.turn({ message: "2 tests still fail: …", phase: "act", resumeToken: first.resumeToken })
  console.log(`turn 2: ${second.text} (${second.usage.inputTokens} tokens in, ${second.usage.outputTokens} out)`)
})

NodeRuntime.runMain(program.pipe(Effect.provide(NodeServices.layer)))
