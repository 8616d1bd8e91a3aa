/**
 * A process running a durable session whose agent calls a sub-agent, for the
 * crash test of nested runs:
 *
 *   node --conditions=effect-agent-source test/session/subagent-child.ts run|resume DIR MS
 *
 * `run` starts session "nested" in DIR, `resume` resumes it. The top agent
 * calls the sub-agent `researcher` once; the researcher makes three turns (a
 * quick step, a slow call of MS ms, a final reply). Both models reply from
 * their transcript (see `followTranscript`), so both processes follow one
 * script. The slow handler prints `started slow` when it starts (after the
 * checkpoint that holds the researcher's state); at the end the process
 * prints one JSON line: the outcome, how often each model was called, which
 * handlers ran, and the researcher's run ids.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect, Layer, Path, Schema } from "effect"
import { Toolkit } from "effect/ai"
import { Agent, Hooks, SubAgent, ToolRegistry } from "effect-agent"
import { CheckpointStore, Session, Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { followTranscript, threeTurns, toolsLayer, usage } from "./fixture.ts"

const [mode, dir, ms] = process.argv.slice(2)
if ((mode !== "run" && mode !== "resume") || dir === undefined || ms === undefined) {
  throw new Error("usage: subagent-child.ts run|resume DIR MS")
}

const print = (line: string) => process.stdout.write(line + "\n")
const ran: Array<string> = []
let childModelCalls = 0
const childRuns = new Set<string>()

const researcher = Agent.define({
  name: "researcher",
  description: "researches a topic",
  input: Schema.Struct({ topic: Schema.String }),
  tools: toolsLayer(ran, (name) => print(`started ${name}`), mode === "resume" ? 1 : Infinity),
  model: ScriptedModel.layer(followTranscript(threeTurns("slow", Number(ms)))),
  plugins: [
    Hooks.plugin({
      name: "count",
      observe: (event) => {
        childRuns.add(event.runId)
        if (event._tag === "TurnStart") childModelCalls++
      }
    })
  ]
})

const Tools = Toolkit.make(Agent.asTool(researcher))
const tools = ToolRegistry.layer(Tools).pipe(Layer.provide(Tools.toLayer({ researcher: SubAgent.handler(researcher) })))

const program = Effect.gen(function*() {
  const store = yield* CheckpointStore.fileSystem(dir)
  const path = yield* Path.Path
  const plugins = [Trajectory.ndjson(path.join(dir, "trajectory.ndjson"))]
  const result = yield* (mode === "run"
    ? Session.run({ id: "nested", prompt: "research x", plugins }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
    : Session.resume("nested", { plugins }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
  const model = yield* ScriptedModel.ScriptedModel
  print(JSON.stringify({
    outcome: result.outcome._tag,
    parentModelCalls: yield* model.calls,
    childModelCalls,
    ran,
    childRuns: [...childRuns]
  }))
}).pipe(
  Effect.provide(Layer.mergeAll(
    ScriptedModel.layer(followTranscript([
      { toolCalls: [{ id: "r1", name: "researcher", params: { topic: "x" } }], usage },
      { text: "parent done", usage }
    ])),
    tools,
    NodeServices.layer
  ))
)

NodeRuntime.runMain(program)
