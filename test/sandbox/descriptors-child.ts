/**
 * A process that inherited descriptors (test/sandbox/SandboxDescriptors.test.ts
 * opens them for it: a key file, a directory, a writable pipe), running a
 * command in a sandbox, or a turn of an external worker:
 *
 *   node --conditions=effect-agent-source test/sandbox/descriptors-child.ts local|bubblewrap|worker DIR FAKE_CLAUDE
 *
 * A sandbox runs, in the workspace DIR, a bash call that lists its shell's
 * descriptors and tries the inherited ones, and prints its result as one JSON
 * line. The worker is the fake Claude Code CLI (test/fixtures/workers), which
 * records its descriptors in DIR/fake-calls.jsonl.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { Sandbox } from "effect-agent/sandbox"
import { ExternalWorker } from "effect-agent/supervisor"

const [mode, dir, fakeClaude] = process.argv.slice(2)
if ((mode !== "local" && mode !== "bubblewrap" && mode !== "worker") || dir === undefined || fakeClaude === undefined) {
  throw new Error("usage: descriptors-child.ts local|bubblewrap|worker DIR FAKE_CLAUDE")
}

/** The attack: read the key on 100, list and write through the directory on 101; first, the shell's descriptors. */
const attack = "ls /proc/$$/fd; cat <&100; ls /proc/self/fd/101/; echo planted > /proc/self/fd/101/planted"

const worker = Effect.asVoid(
  ExternalWorker.claude({ executable: fakeClaude, cwd: dir, model: "claude-test" }).turn({
    message: "Fix it",
    phase: "act",
    resumeToken: undefined
  })
)

const sandboxed = Effect.gen(function*() {
  const sandbox = yield* Sandbox.Sandbox
  const result = yield* sandbox.exec({ command: ["bash", "-c", attack], timeout: "20 seconds" })
  process.stdout.write(JSON.stringify(result) + "\n")
}).pipe(Effect.provide(mode === "local" ? Sandbox.local(dir) : Sandbox.bubblewrap(dir)))

const program: Effect.Effect<void, unknown, NodeServices.NodeServices> = mode === "worker" ? worker : sandboxed
NodeRuntime.runMain(program.pipe(Effect.orDie, Effect.provide(NodeServices.layer)))
