/**
 * Tools and a script shared by the session tests and the crash child process.
 */
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { AgentTool, ToolRegistry } from "effect-agent"
import type { ScriptedModel } from "effect-agent/testing"

/** A quick step. */
export const Step = Tool.make("step", { parameters: Schema.Struct({ n: Schema.Finite }), success: Schema.String })

/** A slow call that is safe to run again. */
export const Slow = Tool.make("slow", { parameters: Schema.Struct({ ms: Schema.Finite }), success: Schema.String })

/** A slow call that must not run twice. */
export const Charge = AgentTool.annotate(
  Tool.make("charge", { parameters: Schema.Struct({ cents: Schema.Finite, ms: Schema.Finite }), success: Schema.String }),
  { replaySafe: false }
)

/** A call that needs a human's approval. */
export const Deploy = Tool.make("deploy", {
  parameters: Schema.Struct({ env: Schema.String }),
  success: Schema.String,
  needsApproval: true
})

export const Kit = Toolkit.make(Step, Slow, Charge, Deploy)

/**
 * The tools; `ran` records each handler that started, and `onStart` runs
 * when a slow handler starts, before it sleeps (the crash child prints a
 * marker there: by then every hook of the call, checkpoints included, has
 * run). `maxSleep` caps the sleeps (a resumed process re-running a saved
 * call need not wait as long as the crashed one).
 */
export const toolsLayer = (ran: Array<string>, onStart: (name: string) => void = () => {}, maxSleep = Infinity) =>
  ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
    step: ({ n }) => Effect.sync(() => (ran.push("step"), `step ${n} done`)),
    slow: ({ ms }) =>
      Effect.sync(() => (ran.push("slow"), onStart("slow"))).pipe(
        Effect.andThen(Effect.sleep(`${Math.min(ms, maxSleep)} millis`)),
        Effect.as(`slept ${ms} ms`)
      ),
    charge: ({ cents, ms }) =>
      Effect.sync(() => (ran.push("charge"), onStart("charge"))).pipe(
        Effect.andThen(Effect.sleep(`${Math.min(ms, maxSleep)} millis`)),
        Effect.as(`charged ${cents} cents`)
      ),
    deploy: ({ env }) => Effect.sync(() => (ran.push("deploy"), `deployed to ${env}`))
  })))

/**
 * A script that follows the transcript rather than the call count, so a new
 * process (with a new scripted model) carries on where the checkpoint left
 * off: the model's reply depends on how many replies the prompt already has.
 */
export const followTranscript = (turns: ReadonlyArray<ScriptedModel.Turn>): ScriptedModel.Script => (_index, request) =>
  turns[request.prompt.content.filter((message) => message.role === "assistant").length]

/** Usage reported by every scripted turn. */
export const usage = { input: 100, output: 20, cost: 0.001 }

/** Three turns: a quick step, a slow call of `tool`, and a final reply. */
export const threeTurns = (tool: "slow" | "charge", ms: number): ReadonlyArray<ScriptedModel.Turn> => [
  { toolCalls: [{ id: "c1", name: "step", params: { n: 1 } }], usage },
  {
    toolCalls: [{ id: "c2", name: tool, params: tool === "slow" ? { ms } : { cents: 500, ms } }],
    usage
  },
  { text: "all done", usage }
]

/** A model that never stops calling tools: a quick and a slow call, a quick one, a charge, and again. */
export const endless: ScriptedModel.Script = (index) => ({
  text: `turn ${index + 1}`,
  toolCalls: index % 3 === 0
    ? [{ name: "step", params: { n: index } }, { name: "slow", params: { ms: 2 } }]
    : index % 3 === 1
    ? [{ name: "step", params: { n: index } }]
    : [{ name: "charge", params: { cents: 1, ms: 1 } }],
  usage
})
