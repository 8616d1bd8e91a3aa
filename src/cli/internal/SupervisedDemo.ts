/**
 * `effect-agent demo --supervised`: a supervised run a newcomer can watch
 * offline. In a temporary workspace, `greet.mjs` is wrong and the check
 * `node check.mjs` says so (the baseline is red). Our loop, on a scripted
 * model with the built-in tools, works in turns: its first fix is still
 * wrong (the check fails, a new failure, and the feedback goes back), its
 * second is right (green): `Converged`.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import * as BuiltinTools from "../../sandbox/BuiltinTools.ts"
import * as Sandbox from "../../sandbox/Sandbox.ts"
import * as Check from "../../supervisor/Check.ts"
import * as Supervisor from "../../supervisor/Supervisor.ts"
import * as ScriptedModel from "../../testing/ScriptedModel.ts"
import * as ToolRegistry from "../../ToolRegistry.ts"
import * as PluginEvents from "./PluginEvents.ts"
import type * as View from "./View.ts"

const checkScript = `import { greet } from "./greet.mjs"
const got = greet("Ada")
if (got !== "Hello, Ada!") {
  console.error(\`expected "Hello, Ada!", got \${JSON.stringify(got)}\`)
  process.exit(1)
}
console.log("greet ok")
`

const write = (content: string) => ({ name: "write_file", params: { path: "greet.mjs", content } })

/** The model's side: a first fix that misses the comma, then, after the feedback, the right one. */
const script: ScriptedModel.Script = [
  {
    delay: "300 millis",
    text: "greet must end with an exclamation mark.",
    toolCalls: [write(`export const greet = (name) => "Hello " + name + "!"\n`)],
    usage: { input: 310, output: 40 }
  },
  { delay: "200 millis", text: "Done: greet now ends with \"!\".", usage: { input: 380, output: 12 } },
  {
    delay: "300 millis",
    text: "The check wants a comma after Hello.",
    toolCalls: [write("export const greet = (name) => `Hello, ${name}!`\n")],
    usage: { input: 520, output: 38 }
  },
  { delay: "200 millis", text: "Fixed: greet(\"Ada\") is \"Hello, Ada!\".", usage: { input: 590, output: 14 } }
]

/**
 * Runs the supervised demo, showing it in `view`.
 *
 * @since 0.1.0
 */
export const run = (options: { readonly view: View.View }) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const root = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-demo-" })
    yield* fs.writeFileString(path.join(root, "greet.mjs"), "export const greet = (name) => \"Hello \" + name\n")
    yield* fs.writeFileString(path.join(root, "check.mjs"), checkScript)
    const sandbox = Sandbox.local(root)
    const tools = Layer.effect(
      ToolRegistry.ToolRegistry,
      Effect.map(ToolRegistry.fromToolkit(BuiltinTools.make()), (entry) => ToolRegistry.make(entry))
    ).pipe(Layer.provide(BuiltinTools.layer), Layer.provide(sandbox))
    const onEvent = yield* PluginEvents.deliverTo([options.view.plugin])
    const result = yield* Supervisor.run({
      task: "Make greet(\"Ada\") return \"Hello, Ada!\" in greet.mjs.",
      // The check runs node itself (the sandbox passes only an allowlisted environment).
      checks: [Check.command("greet", `${JSON.stringify(process.execPath)} check.mjs`)],
      agent: { system: "You fix code in the workspace with the tools; be brief." },
      maxTurns: 4,
      onEvent
    }).pipe(Effect.provide(Layer.mergeAll(tools, sandbox, ScriptedModel.layer(script))))
    options.view.close()
    return result
  }).pipe(Effect.scoped)
