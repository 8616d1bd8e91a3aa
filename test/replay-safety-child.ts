/**
 * A process running a durable session of tool calls that must not run twice,
 * for the randomized crash test (test/ReplaySafety.test.ts):
 *
 *   node --conditions=effect-agent-source test/replay-safety-child.ts run|resume DIR SEED
 *
 * The script (from SEED, the same in both processes): four turns of two to
 * four parallel `pay` calls (not ReplaySafe) of 5–40 ms each, then an answer.
 * Each `pay` handler appends its call id to DIR/effects.log as it starts: the
 * side effect that must never happen twice. An `afterToolCall` hook sleeps
 * 0–50 ms for each call, so calls end while others' hooks still wait. The
 * process prints `checkpoint` at each `CheckpointSaved`, and at the end one
 * JSON line with the outcome.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect, Layer, Path, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { AgentTool, type Hooks, ToolRegistry } from "effect-agent"
import { CheckpointStore, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { appendFileSync } from "node:fs"

const [mode, dir, seedText] = process.argv.slice(2)
if ((mode !== "run" && mode !== "resume") || dir === undefined || seedText === undefined) {
  throw new Error("usage: replay-safety-child.ts run|resume DIR SEED")
}

/** mulberry32: a small seeded generator, so both processes play the same script. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const next = random(Number(seedText))
const between = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))

const turns: Array<ScriptedModel.Turn> = []
const hookMs = new Map<string, number>()
for (let turn = 0; turn < 4; turn++) {
  const calls = Array.from({ length: between(2, 4) }, (_, i) => {
    const id = `t${turn}c${i}`
    hookMs.set(id, between(0, 50))
    return { id, name: "pay", params: { ms: between(5, 40) } }
  })
  turns.push({ toolCalls: calls })
}
turns.push({ text: "all paid" })

const Pay = AgentTool.annotate(
  Tool.make("pay", { parameters: Schema.Struct({ ms: Schema.Finite }), success: Schema.String }),
  { replaySafe: false }
)
const Kit = Toolkit.make(Pay)

const print = (line: string) => process.stdout.write(line + "\n")

const program = Effect.gen(function*() {
  const path = yield* Path.Path
  const effects = path.join(dir, "effects.log")
  const store = yield* CheckpointStore.fileSystem(path.join(dir, "store"))
  const tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
    pay: ({ ms }, ctx) =>
      Effect.sync(() => appendFileSync(effects, `${ctx.toolCallId}\n`)).pipe(
        Effect.andThen(Effect.sleep(`${ms} millis`)),
        Effect.as(`paid ${ctx.toolCallId}`)
      )
  })))
  const plugin: Hooks.Plugin = {
    name: "slow-after",
    afterToolCall: (call) => Effect.asVoid(Effect.sleep(`${hookMs.get(call.id) ?? 0} millis`)),
    onEvent: (event) => event._tag === "CheckpointSaved" ? Effect.sync(() => print("checkpoint")) : Effect.void
  }
  // The model follows the transcript: its reply depends on how many replies the prompt already has.
  const script: ScriptedModel.Script = (_index, request) =>
    turns[request.prompt.content.filter((message) => message.role === "assistant").length]
  const result = yield* (mode === "run"
    ? Session.run({ id: "pay", prompt: "pay everyone", plugins: [plugin] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
    : Session.resume("pay", { plugins: [plugin] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))).pipe(
      Effect.provide(Layer.merge(tools, ScriptedModel.layer(script)))
    )
  print(JSON.stringify({ outcome: result.outcome._tag }))
}).pipe(Effect.provide(NodeServices.layer))

NodeRuntime.runMain(program)
