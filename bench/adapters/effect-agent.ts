/**
 * effect-agent: `Agent.run` over a `LanguageModel` built with effect/ai's
 * `LanguageModel.make` (the interface every provider implements) whose
 * `streamText` plays the script as encoded stream parts. The tools are
 * `effect/ai` `Tool`s in a `Toolkit`, handlers from `toolkit.toLayer`, given
 * to the loop through `ToolRegistry.layer`; every event reaches the consumer
 * through a plugin's `onEvent`. The config is the default one, except the
 * turn cap (T + 1 turns, with no wrap-up request, which the script does not
 * expect) and, for the batch, the per-turn call limit.
 *
 * The bench's own model rather than `ScriptedModel`: the same content as
 * every other adapter's, and no request recording (which would hold every
 * prompt of the run and inflate the heap figures).
 */
import { Effect, Layer, Schema, Stream } from "effect"
import { LanguageModel, type Response, Tool, Toolkit } from "effect/ai"
import { Agent, Message, ToolRegistry } from "../../src/index.ts"
import {
  type Adapter,
  type BatchSpec,
  Concurrency,
  NOOP,
  type Script,
  type Turn,
  WAIT,
  batchScript,
  noopResult,
  sessionScript
} from "../workload.ts"

const finish = (turn: Turn): Response.StreamPartEncoded => ({
  type: "finish",
  reason: turn.calls.length > 0 ? "tool-calls" : "stop",
  usage: { inputTokens: { total: 0 }, outputTokens: { total: 0 } }
})

const partsOf = (turn: Turn): Array<Response.StreamPartEncoded> => {
  const parts: Array<Response.StreamPartEncoded> = [{ type: "text-start", id: "t" }]
  for (const delta of turn.deltas) parts.push({ type: "text-delta", id: "t", delta })
  parts.push({ type: "text-end", id: "t" })
  // A provider parses the arguments' JSON text; so does this one.
  for (const call of turn.calls) parts.push({ type: "tool-call", id: call.id, name: call.name, params: JSON.parse(call.json) })
  parts.push(finish(turn))
  return parts
}

/** Checks the request ended with the previous turn's tool result. */
const checkRequest = (script: Script, options: LanguageModel.ProviderOptions): void => {
  const last = options.prompt.content[options.prompt.content.length - 1]
  if (last?.role !== "tool") return script.check(undefined, undefined)
  const result = last.content[last.content.length - 1]
  if (result?.type !== "tool-result") return script.check(undefined, undefined)
  script.check(result.id, typeof result.result === "string" ? result.result : JSON.stringify(result.result))
}

/** A `LanguageModel` whose `streamText` plays the script. */
const scriptedModel = (script: Script): Layer.Layer<LanguageModel.LanguageModel> =>
  Layer.effect(
    LanguageModel.LanguageModel,
    LanguageModel.make({
      generateText: () => Effect.die(new Error("the benchmark only streams")),
      streamText: (options) =>
        Stream.unwrap(Effect.sync(() => {
          checkRequest(script, options)
          return Stream.fromArray(partsOf(script.next()))
        }))
    })
  )

const Params = Schema.Struct({ i: Schema.Finite })
const Noop = Tool.make(NOOP, { description: "Does nothing.", parameters: Params, success: Schema.String })
const Wait = Tool.make(WAIT, { description: "Waits.", parameters: Params, success: Schema.String })
const NoopKit = Toolkit.make(Noop)
const WaitKit = Toolkit.make(Wait)

const finalText = (messages: ReadonlyArray<Message.Message>): string => {
  const last = messages[messages.length - 1]
  return last === undefined ? "" : Message.textOf(last)
}

export const adapter: Adapter = {
  name: "effect-agent",
  cap: "maxParallelTools: 8",
  async session(toolTurns, onTurn) {
    const script = sessionScript("effect-agent", toolTurns)
    let toolRuns = 0
    let events = 0
    const tools = ToolRegistry.layer(NoopKit).pipe(Layer.provide(NoopKit.toLayer({
      [NOOP]: ({ i }) =>
        Effect.sync(() => {
          toolRuns++
          onTurn?.()
          return noopResult(i)
        })
    })))
    const result = await Effect.runPromise(
      Agent.run({
        prompt: "go",
        config: { maxTurns: toolTurns + 1, graceTurns: 0 },
        plugins: [{
          name: "count",
          onEvent: () =>
            Effect.sync(() => {
              events++
            })
        }]
      }).pipe(Effect.provide(Layer.mergeAll(scriptedModel(script), tools)))
    )
    if (result.outcome._tag !== "Completed") throw new Error(`effect-agent: the run ended with ${result.outcome._tag}`)
    return { events, toolRuns, text: finalText(result.messages), modelCalls: script.calls, keep: result }
  },
  async batch(spec: BatchSpec) {
    const script = batchScript("effect-agent", spec)
    const observed = new Concurrency()
    const tools = ToolRegistry.layer(WaitKit).pipe(Layer.provide(WaitKit.toLayer({
      [WAIT]: ({ i }) => Effect.promise(() => observed.wait(i, spec.ms))
    })))
    const result = await Effect.runPromise(
      Agent.run({
        prompt: "go",
        config: { maxTurns: 3, maxParallelTools: spec.maxParallel, maxToolCallsPerTurn: spec.calls }
      }).pipe(Effect.provide(Layer.mergeAll(scriptedModel(script), tools)))
    )
    if (result.outcome._tag !== "Completed") throw new Error(`effect-agent: the batch ended with ${result.outcome._tag}`)
    return { text: finalText(result.messages), toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
}
