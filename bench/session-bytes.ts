/**
 * Bytes a durable session writes per turn, early and late in a long run:
 * each turn's checkpoint appends the turn's messages to the journal and
 * replaces the small head, so the cost must not grow with the transcript.
 *
 * Run it: `node --conditions=effect-agent-source bench/session-bytes.ts [turns]` (default 1000;
 * the session runs one more turn, the final answer).
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Console, Effect, FileSystem, Layer, Path, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Hooks, RunState, ToolRegistry } from "../src/index.ts"
import { CheckpointStore, Session } from "../src/session/index.ts"
import { ScriptedModel } from "../src/testing/index.ts"

const turns = Number(process.argv[2] ?? 1000)
const usage = { input: 1200, output: 80, cost: 0.0004 }

const Step = Tool.make("step", { parameters: Schema.Struct({ n: Schema.Finite }), success: Schema.String })
const Kit = Toolkit.make(Step)
const tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({ step: ({ n }) => Effect.succeed(`step ${n} checked`) })))

/** The first `turns` turns each call a tool with new arguments; one more answers. */
const script: ScriptedModel.Script = (index) =>
  index < turns
    ? { text: `Turn ${index + 1}: checking step ${index + 1}.`, toolCalls: [{ name: "step", params: { n: index + 1 } }], usage }
    : { text: "All steps checked.", usage }

const program = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  const store = yield* CheckpointStore.fileSystem(dir)
  const bytes = new Map<number, number>()
  const saves = Hooks.plugin({
    name: "bytes",
    onEvent: (event) => Effect.sync(() => void (event._tag === "CheckpointSaved" && bytes.set(event.turn, event.bytes)))
  })
  const started = Date.now()
  const result = yield* Session.run({ id: "bench", prompt: "Check every step.", plugins: [saves], config: { maxTurns: null } }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
  const seconds = (Date.now() - started) / 1000
  const head = (yield* fs.stat(path.join(dir, "bench", "head.json"))).size
  const journal = (yield* fs.stat(path.join(dir, "bench", "journal-0.ndjson"))).size
  const whole = JSON.stringify(Schema.encodeSync(RunState.RunStateJson)(result.state)).length
  yield* Console.log(`${result.state.turn} turns, ${result.state.messages.length} messages, ${seconds.toFixed(1)} s`)
  for (const turn of new Set([1, 10, 100, turns])) {
    if (bytes.has(turn)) yield* Console.log(`turn ${turn}: ${bytes.get(turn)} bytes written`)
  }
  yield* Console.log(`${(seconds * 1000 / result.state.turn).toFixed(1)} ms per turn, checkpoint (3 fsyncs) included`)
  yield* Console.log(`final files: head ${head} bytes, journal ${journal} bytes; the whole state as one JSON: ${whole} bytes`)
}).pipe(Effect.scoped, Effect.provide(Layer.mergeAll(ScriptedModel.layer(script), tools, NodeServices.layer)))

NodeRuntime.runMain(program)
