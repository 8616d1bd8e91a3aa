/**
 * A durable session: run it, stop it with Ctrl-C in the middle, run it again:
 * it resumes where it stopped. A research agent fetches two pages (slowly,
 * in parallel), publishes a summary (a call that must not run twice), and
 * answers.
 *
 * - Stopped while the pages are fetched: the turn is redone (fetching is safe
 *   to repeat).
 * - Stopped while it publishes: the call is not run again; the model is told
 *   its outcome is unknown.
 *
 * Checkpoints and the trajectory (every event, one JSON line each) go to the
 * directory given, by default `effect-agent-durable-session` in the OS's
 * temporary directory (an example leaves nothing in your clone); once the
 * session has finished, running it again prints its outcome; delete the
 * directory to start over. The model is `ScriptedModel`, so it runs offline.
 *
 * Run it: `node --conditions=effect-agent-source examples/durable-session.ts [dir]`
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Console, type Duration, Effect, Layer, Path, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { type AgentEvent, AgentTool, Message, ToolRegistry } from "effect-agent"
import { CheckpointStore, Session, Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"

const FetchPage = Tool.make("fetch_page", {
  description: "Fetches a web page",
  parameters: Schema.Struct({ url: Schema.String }),
  success: Schema.String
})
// Publishing twice would publish twice: a call that had started is never run again blindly.
const Publish = AgentTool.annotate(
  Tool.make("publish", { description: "Publishes a post", parameters: Schema.Struct({ title: Schema.String }), success: Schema.String }),
  { replaySafe: false }
)
const Tools = Toolkit.make(FetchPage, Publish)

const tools = (delay: Duration.Input) =>
  ToolRegistry.layer(Tools).pipe(Layer.provide(Tools.toLayer({
    fetch_page: ({ url }) => Effect.as(Effect.sleep(delay), `<h1>${url}</h1> 42 is the answer.`),
    publish: ({ title }) => Effect.as(Effect.sleep(delay), `published "${title}"`)
  })))

const script: ReadonlyArray<ScriptedModel.Turn> = [
  {
    toolCalls: [
      { name: "fetch_page", params: { url: "https://example.org/a" } },
      { name: "fetch_page", params: { url: "https://example.org/b" } }
    ]
  },
  { toolCalls: [{ name: "publish", params: { title: "Both pages agree: 42" } }] },
  { text: "Done: both pages say 42, and the summary is published (or, if it was interrupted, check before publishing again)." }
]

// The model's reply follows the transcript, not the call count, so a resumed process carries on.
const model = ScriptedModel.layer((_index, request) =>
  script[request.prompt.content.filter((message) => message.role === "assistant").length]
)

const describe = (event: AgentEvent.AgentEvent): string | undefined => {
  switch (event._tag) {
    case "SessionResumed":
      return `resumed at turn ${event.resumedAtTurn} (${event.restored.messages} messages restored)`
    case "TurnStart":
      return `turn ${event.turn}`
    case "ToolExecutionStart":
      return `  ${event.toolName} ${JSON.stringify(event.params)}`
    case "ToolExecutionEnd":
      return `  ${event.result.isError ? "✗" : "✓"} ${Message.textOf(event.result)}`
    case "CheckpointSaved":
      return `  checkpoint saved (${event.bytes} bytes)`
    case "MessageEnd":
      return event.message.role === "assistant" && Message.textOf(event.message) !== ""
        ? Message.textOf(event.message)
        : undefined
    default:
      return undefined
  }
}

/**
 * Opens the session in `dir`: starts it, resumes it, or, once it has
 * finished, returns its result. `delay` is how long each tool call takes.
 */
export const durableSession = (
  dir: string,
  print: (line: string) => Effect.Effect<void>,
  delay: Duration.Input = "1500 millis"
) =>
  Effect.gen(function*() {
    const printer = {
      name: "printer",
      onEvent: (event: AgentEvent.AgentEvent) => {
        const line = describe(event)
        return line === undefined ? Effect.void : print(line)
      }
    }
    const plugins = [Trajectory.ndjson((yield* Path.Path).join(dir, "research.ndjson")), printer]
    return yield* Session.open("research", {
      prompt: "Find out what example.org says, and publish a summary.",
      plugins,
      config: { maxTurns: 10, budgets: { costUsd: 1 } }
    })
  }).pipe(Effect.provide(Layer.mergeAll(model, tools(delay), CheckpointStore.layerFileSystem(dir))))

/** Where the session is kept when no directory is given: under the OS's temporary directory, not here. */
export const defaultDirectory = (): string => NodePath.join(Os.tmpdir(), "effect-agent-durable-session")

const dir = process.argv[2] ?? defaultDirectory()
const main = Console.log(`session in ${dir}`).pipe(
  Effect.andThen(durableSession(dir, Console.log)),
  Effect.flatMap((result) => Console.log(`outcome: ${result.outcome._tag} (delete ${dir} to start over)`)),
  Effect.provide(NodeServices.layer)
)

if (process.argv[1] === fileURLToPath(import.meta.url)) NodeRuntime.runMain(main)
