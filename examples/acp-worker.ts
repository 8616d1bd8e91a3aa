import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { ExternalWorker } from "effect-agent/supervisor"

// Any agent that speaks ACP on stdio, named after this script: `node acp-worker.ts gemini --experimental-acp`.
const [command = "gemini", ...args] = process.argv.slice(2)
const worker = ExternalWorker.acp({ command, args, cwd: process.cwd(), env: ["GEMINI_API_KEY"] })

const program = Effect.gen(function*() {
  const first = yield* worker.turn({ message: "Make npm test pass", phase: "act", resumeToken: undefined })
  console.log(`turn 1 (session ${first.resumeToken}): ${first.text}`)
  // a later turn loads the session (when the agent can): a new process, as after a resume
  const second = yield* worker.turn({ message: "2 tests still fail: …", phase: "act", resumeToken: first.resumeToken })
  console.log(`turn 2: ${second.text} (${second.usage.inputTokens} tokens in, ${second.usage.outputTokens} out)`)
})

NodeRuntime.runMain(program.pipe(Effect.provide(NodeServices.layer)))
