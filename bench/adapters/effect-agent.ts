/**
 * effect-agent: `Agent.run` over effect-agent's `ScriptedModel` (a
 * `LanguageModel`) playing the script, with request recording off. The tools are
 * `effect/ai` `Tool`s in a `Toolkit`, handlers from `toolkit.toLayer`, given
 * to the loop through `ToolRegistry.layer`; every event reaches the consumer
 * through a plugin's `onEvent`. The config is the default one, except the
 * turn cap (T + 1 turns, with no wrap-up request, which the script does not
 * expect) and, for the batch, the per-turn call limit.
 *
 * ScriptedModel streams what a provider streams: the text deltas, the tool
 * call's argument text as it arrives, the call, the finish with usage. In the
 * loop's mode it builds the decoded parts itself; a provider built on
 * effect/ai's `LanguageModel.make` pays more per part for Schema decoding
 * (see RESULTS.md).
 */
import { Effect, Layer, Schema, Tracer } from "effect"
import { type Prompt, Tool, Toolkit } from "effect/ai"
import { Agent, type Hooks, Message, ToolRegistry } from "../../src/index.ts"
import { ScriptedModel } from "../../src/testing/index.ts"
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

/** A workload turn as a scripted turn: the same deltas, the call's arguments as the JSON text a provider sends. */
const scripted = (turn: Turn): ScriptedModel.Turn => ({
  text: turn.deltas,
  toolCalls: turn.calls.map((call) => ({ id: call.id, name: call.name, rawParams: call.json }))
})

/** Checks the request ended with the previous turn's tool result. */
const checkRequest = (script: Script, prompt: Prompt.Prompt): void => {
  const last = prompt.content[prompt.content.length - 1]
  if (last?.role !== "tool") return script.check(undefined, undefined)
  const result = last.content[last.content.length - 1]
  if (result?.type !== "tool-result") return script.check(undefined, undefined)
  script.check(result.id, typeof result.result === "string" ? result.result : JSON.stringify(result.result))
}

/** effect-agent's `ScriptedModel` playing the workload, recording nothing. */
const scriptedModel = (script: Script) =>
  ScriptedModel.layer((_index, request) => {
    checkRequest(script, request.prompt)
    return scripted(script.next())
  }, { record: false })

const Params = Schema.Struct({ i: Schema.Finite })
const Noop = Tool.make(NOOP, { description: "Does nothing.", parameters: Params, success: Schema.String })
const Wait = Tool.make(WAIT, { description: "Waits.", parameters: Params, success: Schema.String })
const NoopKit = Toolkit.make(Noop)
const WaitKit = Toolkit.make(Wait)

const finalText = (messages: ReadonlyArray<Message.Message>): string => {
  const last = messages[messages.length - 1]
  return last === undefined ? "" : Message.textOf(last)
}

/** How the consumer is given the events: a synchronous `observe`, or an `onEvent` Effect per event. */
type Consumer = "observe" | "onEvent"

const counter = (consumer: Consumer, count: () => void): Hooks.Plugin =>
  consumer === "observe"
    ? { name: "count", observe: count }
    : { name: "count", onEvent: () => Effect.sync(count) }

/**
 * With `traced`, a tracer is installed (Effect's native one: spans are made
 * and kept in memory, nothing is exported), so the run makes its spans and
 * updates its metrics (see `Telemetry`).
 */
const make = (name: string, consumer: Consumer, traced = false): Adapter => ({
  name,
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
        plugins: [counter(consumer, () => {
          events++
        })]
      }).pipe(
        Effect.provide(Layer.mergeAll(scriptedModel(script), tools)),
        (run) => traced ? Effect.withTracer(run, Tracer.nativeTracer) : run
      )
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
      }).pipe(
        Effect.provide(Layer.mergeAll(scriptedModel(script), tools)),
        (run) => traced ? Effect.withTracer(run, Tracer.nativeTracer) : run
      )
    )
    if (result.outcome._tag !== "Completed") throw new Error(`effect-agent: the batch ended with ${result.outcome._tag}`)
    return { text: finalText(result.messages), toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
})

/** effect-agent, events counted by a plugin's `observe`. */
export const adapter: Adapter = make("effect-agent", "observe")

/** effect-agent, events counted by a plugin's `onEvent`, an `Effect.sync` per event. */
export const onEventAdapter: Adapter = make("effect-agent (onEvent)", "onEvent")

/** effect-agent with a tracer installed: spans and metrics on (kept in memory, not exported). */
export const tracedAdapter: Adapter = make("effect-agent (traced)", "observe", true)
