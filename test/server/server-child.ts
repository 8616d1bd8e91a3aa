/**
 * An agent server in a process of its own, for the restart tests:
 *
 *   node --conditions=effect-agent-source test/server/server-child.ts DIR [HANG_FROM]
 *
 * It serves sessions kept in DIR on an ephemeral loopback port (with the
 * scripted model and tools of `support.ts`, whose replies follow each
 * session's transcript, so a new process carries on where a checkpoint left
 * off; with HANG_FROM, the model never gives a session's HANG_FROM-th reply
 * and later: a run stays mid-way until the process stops), and prints its
 * URL as one JSON line: `{"url":"http://127.0.0.1:…"}`. Its `fix`
 * supervisor checks that the worker's step 2 is done, in the workspace file
 * `DIR/steps` (the next process on DIR sees the steps this one did).
 * SIGTERM and SIGINT stop it cleanly; SIGKILL, not.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import * as NodePath from "node:path"
import { baseUrl, fileWorkspace, fixedCheck, hangingScript, script, serverLayer, workingAgent } from "./support.ts"

const [dir, hangFrom] = process.argv.slice(2)
if (dir === undefined) throw new Error("usage: server-child.ts DIR [HANG_FROM]")
const workspace = fileWorkspace(NodePath.join(dir, "steps"))
const agent = workingAgent(workspace, hangFrom === undefined ? script : hangingScript(Number(hangFrom) - 1))
const supervisors = { fix: { checks: [fixedCheck(workspace)] } }

const main = Effect.gen(function*() {
  const url = yield* baseUrl
  process.stdout.write(JSON.stringify({ url }) + "\n")
  return yield* Effect.never
})

NodeRuntime.runMain(Effect.provide(main, Layer.orDie(serverLayer({ directory: dir, supervisors }, agent))))
