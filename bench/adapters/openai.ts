/**
 * OpenAI Agents SDK (`@openai/agents`): `Runner.run(agent, input, { stream:
 * true })` with a custom `Model` (the SDK's documented model interface) whose
 * `getStreamedResponse` plays the script as `StreamEvent`s: `response_started`,
 * one `output_text_delta` per delta, and `response_done` carrying the output
 * items (the assistant message and its `function_call`). Tools are
 * `tool({ parameters: zod })`, validated and executed by the SDK's runner; the
 * consumer counts every `RunStreamEvent`. Tracing is disabled (it would export
 * to OpenAI). The batch uses the SDK's own cap, `maxFunctionToolConcurrency`.
 */
import { Agent, type AgentInputItem, type Model, type ModelRequest, Runner, tool } from "@openai/agents"
import type { protocol } from "@openai/agents"
import { z } from "zod"
import {
  type Adapter,
  Concurrency,
  NOOP,
  type Script,
  WAIT,
  batchScript,
  noopResult,
  sessionScript
} from "../workload.ts"

const usage = { requests: 1, inputTokens: 0, outputTokens: 0, totalTokens: 0 }

const lastResult = (input: ModelRequest["input"]): { id: string | undefined; output: string | undefined } => {
  if (typeof input === "string") return { id: undefined, output: undefined }
  const last: AgentInputItem | undefined = input[input.length - 1]
  if (last?.type !== "function_call_result") return { id: undefined, output: undefined }
  const output = last.output
  const text = typeof output === "string" ? output : Array.isArray(output) ? undefined : output.type === "text" ? output.text : undefined
  return { id: last.callId, output: text }
}

/** A `Model` whose streamed response plays the script. */
class ScriptedModel implements Model {
  private readonly script: Script
  constructor(script: Script) {
    this.script = script
  }

  getResponse(): Promise<never> {
    return Promise.reject(new Error("the benchmark only streams"))
  }

  async *getStreamedResponse(request: ModelRequest): AsyncIterable<protocol.StreamEvent> {
    const { id, output } = lastResult(request.input)
    this.script.check(id, output)
    const n = this.script.calls
    const turn = this.script.next()
    yield { type: "response_started" }
    const itemId = `msg_${n}`
    for (const delta of turn.deltas) yield { type: "output_text_delta", itemId, delta }
    const items: Array<protocol.OutputModelItem> = [{
      type: "message",
      id: itemId,
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: turn.text }]
    }]
    for (const call of turn.calls) {
      items.push({ type: "function_call", id: `fc_${call.id}`, callId: call.id, name: call.name, arguments: call.json, status: "completed" })
    }
    yield { type: "response_done", response: { id: `resp_${n}`, usage, output: items } }
  }
}

const Params = z.object({ i: z.number() })

const runner = new Runner({ tracingDisabled: true })

export const adapter: Adapter = {
  name: "@openai/agents",
  cap: "maxFunctionToolConcurrency: 8",
  async session(toolTurns, onTurn) {
    const script = sessionScript("@openai/agents", toolTurns)
    let toolRuns = 0
    const agent = new Agent({
      name: "bench",
      model: new ScriptedModel(script),
      tools: [tool({
        name: NOOP,
        description: "Does nothing.",
        parameters: Params,
        execute: async ({ i }) => {
          toolRuns++
          onTurn?.()
          return noopResult(i)
        }
      })]
    })
    const result = await runner.run(agent, "go", { stream: true, maxTurns: toolTurns + 1 })
    let events = 0
    for await (const _event of result) events++
    await result.completed
    if (result.error !== null) throw result.error
    return { events, toolRuns, text: String(result.finalOutput), modelCalls: script.calls, keep: result }
  },
  async batch(spec) {
    const script = batchScript("@openai/agents", spec)
    const observed = new Concurrency()
    const agent = new Agent({
      name: "bench",
      model: new ScriptedModel(script),
      tools: [tool({
        name: WAIT,
        description: "Waits.",
        parameters: Params,
        execute: ({ i }) => observed.wait(i, spec.ms)
      })]
    })
    const result = await runner.run(agent, "go", {
      stream: true,
      maxTurns: 2,
      toolExecution: { maxFunctionToolConcurrency: spec.maxParallel }
    })
    for await (const _event of result) {
      // drained: the batch measures wall time, not events
    }
    await result.completed
    if (result.error !== null) throw result.error
    return { text: String(result.finalOutput), toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
}
