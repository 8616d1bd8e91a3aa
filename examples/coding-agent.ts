/**
 * A coding agent on the sandbox: it looks at a small shell project, runs its
 * test, finds the bug, fixes it with `edit_file` and runs the test again.
 *
 * The tools are the built-in ones (`bash`, `read_file`, `edit_file`, …) on
 * `Sandbox.auto`: commands run under bubblewrap where it works (the
 * workspace and the system's directories, nothing else of the host, no
 * network), else in the workspace directory. The model is
 * `ScriptedModel`, so the example runs offline and always the same way; put a
 * provider's `LanguageModel` layer in its place to run it against a real
 * model.
 *
 * Run it: `node --conditions=effect-agent-source examples/coding-agent.ts`
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Console, Effect, FileSystem, Layer, Path } from "effect"
import { Agent, type AgentEvent, Hooks, ToolRegistry } from "effect-agent"
import { BuiltinTools, Sandbox } from "effect-agent/sandbox"
import { ScriptedModel } from "effect-agent/testing"
import { fileURLToPath } from "node:url"

/** The project the agent works on: `calc.sh add` subtracts. */
export const project: Readonly<Record<string, string>> = {
  "calc.sh": [
    "#!/bin/sh",
    "# Usage: calc.sh add A B",
    "case \"$1\" in",
    "  add) echo $(($2 - $3)) ;;",
    "  *) echo \"unknown operation: $1\" >&2; exit 2 ;;",
    "esac",
    ""
  ].join("\n"),
  "test.sh": [
    "#!/bin/sh",
    "out=$(sh calc.sh add 2 3)",
    "if [ \"$out\" = \"5\" ]; then echo \"ok: add 2 3 = 5\"",
    "else echo \"FAIL: add 2 3 gave $out, expected 5\"; exit 1; fi",
    ""
  ].join("\n")
}

/** What the scripted model does, turn by turn, as a real model would. */
export const script: ReadonlyArray<ScriptedModel.Turn> = [
  {
    text: "Let me look at the project.",
    toolCalls: [
      { name: "list_files", params: {} },
      { name: "read_file", params: { path: "calc.sh" } }
    ]
  },
  { text: "Now the test.", toolCalls: [{ name: "bash", params: { command: "sh test.sh" } }] },
  {
    text: "`add` subtracts. Fixing it.",
    toolCalls: [{
      name: "edit_file",
      params: { path: "calc.sh", old_text: "$(($2 - $3))", new_text: "$(($2 + $3))" }
    }]
  },
  { toolCalls: [{ name: "bash", params: { command: "sh test.sh" } }] },
  { text: "Fixed: `calc.sh add` subtracted its operands; it adds them now and test.sh passes." }
]

/** The tools: the built-in toolkit on a sandbox over `root`. */
export const tools = (root: string) =>
  ToolRegistry.layer(BuiltinTools.toolkit).pipe(
    Layer.provide(BuiltinTools.layer),
    Layer.provide(Sandbox.auto(root)),
    Layer.provide(NodeServices.layer)
  )

/** Runs the agent on the project in `root`; `onEvent` sees every event of the run. */
export const runCodingAgent = (
  root: string,
  onEvent: (event: AgentEvent.AgentEvent) => Effect.Effect<void> = () => Effect.void
) =>
  Agent.run({
    system: "You are a careful coding agent. Run the tests before and after a change.",
    prompt: "The test of this project fails. Find the bug and fix it.",
    plugins: [Hooks.plugin({ name: "printer", onEvent })]
  }).pipe(
    Effect.provide(tools(root)),
    Effect.provide(ScriptedModel.layer(script))
  )

/** Writes the project into `root`. */
export const writeProject = (root: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    for (const [name, content] of Object.entries(project)) yield* fs.writeFileString(path.join(root, name), content)
  })

const print = (event: AgentEvent.AgentEvent): Effect.Effect<void> => {
  switch (event._tag) {
    case "ToolExecutionStart":
      return Console.log(`> ${event.toolName} ${JSON.stringify(event.params)}`)
    case "ToolExecutionEnd":
      return Console.log(
        event.result.content.map((part) => (part.type === "text" ? part.text : `[${part.type}]`)).join("")
          .split("\n").map((line) => `  ${line}`).join("\n")
      )
    case "MessageEnd":
      return event.message.role === "assistant" && event.message.content.some((part) => part.type === "text")
        ? Console.log(event.message.content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join(""))
        : Effect.void
    default:
      return Effect.void
  }
}

const main = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const root = yield* fs.makeTempDirectoryScoped({ prefix: "coding-agent-" })
  yield* writeProject(root)
  const result = yield* runCodingAgent(root, print)
  yield* Console.log(`\noutcome: ${result.outcome._tag}`)
  yield* Console.log(`calc.sh now:\n${yield* fs.readFileString(`${root}/calc.sh`)}`)
}).pipe(Effect.scoped, Effect.provide(NodeServices.layer))

if (process.argv[1] === fileURLToPath(import.meta.url)) NodeRuntime.runMain(main)
