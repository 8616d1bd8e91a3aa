import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, Hooks, Message, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

const ReadFile = Tool.make("read_file", {
  description: "Read a file",
  parameters: Schema.Struct({ path: Schema.String }),
  success: Schema.String
})
const DeleteFile = Tool.make("delete_file", {
  description: "Delete a file",
  parameters: Schema.Struct({ path: Schema.String }),
  success: Schema.String
})
const files = new Map([["notes.md", "buy milk"]])
const Tools = Toolkit.make(ReadFile, DeleteFile)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({
    read_file: ({ path }) => Effect.succeed(files.get(path) ?? `no such file: ${path}`),
    delete_file: ({ path }) =>
      Effect.sync(() => {
        files.delete(path)
        return `deleted ${path}`
      })
  }))
)

// Block: the handler never runs; the model reads the reason.
const noDeletes = Hooks.plugin({
  name: "no-deletes",
  beforeToolCall: (call) =>
    Effect.succeed(call.name === "delete_file" ? Hooks.block("deleting files is not allowed") : Hooks.allow)
})

// Rewrite: the tool runs with other arguments (checked by its Schema again).
const hasPath = Schema.is(Schema.Struct({ path: Schema.String }))
const lowerCasePaths = Hooks.plugin({
  name: "lower-case-paths",
  beforeToolCall: (call) =>
    Effect.succeed(hasPath(call.params) ? Hooks.rewrite({ path: call.params.path.toLowerCase() }) : Hooks.allow)
})

// Observe: every event, where it happens; events are told apart by `_tag`.
const trace = Hooks.plugin({
  name: "trace",
  observe: (event) => {
    if (event._tag === "ToolExecutionEnd") console.log(`${event.toolName} → ${Message.textOf(event.result)}`)
  }
})

const Model = ScriptedModel.layer([
  {
    toolCalls: [
      { name: "read_file", params: { path: "NOTES.md" } },
      { name: "delete_file", params: { path: "NOTES.md" } }
    ]
  },
  { text: "Your notes say: buy milk. I was not allowed to delete them." }
])

const program = Effect.gen(function*() {
  const result = yield* Agent.run({
    prompt: "Read NOTES.md, then delete it.",
    plugins: [noDeletes, lowerCasePaths, trace]
  })
  // Messages are told apart by `role`.
  const answer = result.messages.filter((message) => message.role === "assistant").at(-1)
  console.log(`${result.outcome._tag}: ${answer === undefined ? "" : Message.textOf(answer)}`)
  console.log(`notes.md is still there: ${files.has("notes.md")}`)
})

Effect.runPromise(program.pipe(Effect.provide(Layer.merge(ToolsLive, Model))))
