/**
 * pi-agent-core: the `Agent` class (its public entry point) with a `streamFn`
 * that plays the script as a pi-ai `AssistantMessageEventStream`, the protocol
 * pi-ai's providers implement. Tools are `AgentTool`s with TypeBox schemas,
 * validated by pi's loop; events reach the consumer through `subscribe`.
 * pi has no cap on parallel tool calls (its `parallel` mode is an unbounded
 * `Promise.all`).
 */
import { Agent, type AgentTool, type StreamFn } from "@mariozechner/pi-agent-core"
import {
  type AssistantMessage,
  type AssistantMessageEvent,
  type Model,
  type TextContent,
  type ToolCall,
  createAssistantMessageEventStream
} from "@mariozechner/pi-ai"
import { Type } from "typebox"
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

const model: Model<string> = {
  id: "scripted",
  name: "scripted",
  api: "scripted",
  provider: "scripted",
  baseUrl: "",
  reasoning: false,
  input: ["text"],
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  contextWindow: 1_000_000,
  maxTokens: 100_000
}

const usage = () => ({
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: 0,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 }
})

/** A `streamFn` playing the script, emitting the events a pi-ai provider emits. */
const scriptedStream = (script: Script): StreamFn => (_model, context) => {
  const last = context.messages[context.messages.length - 1]
  if (last?.role === "toolResult") {
    const first = last.content[0]
    script.check(last.toolCallId, first?.type === "text" ? first.text : undefined)
  } else {
    script.check(undefined, undefined)
  }
  const turn = script.next()
  const stream = createAssistantMessageEventStream()
  const text: TextContent = { type: "text", text: "" }
  const partial: AssistantMessage = {
    role: "assistant",
    content: [text],
    api: model.api,
    provider: model.provider,
    model: model.id,
    usage: usage(),
    stopReason: "stop",
    timestamp: Date.now()
  }
  const push = (event: AssistantMessageEvent) => stream.push(event)
  push({ type: "start", partial })
  push({ type: "text_start", contentIndex: 0, partial })
  for (const delta of turn.deltas) {
    text.text += delta
    push({ type: "text_delta", contentIndex: 0, delta, partial })
  }
  push({ type: "text_end", contentIndex: 0, content: text.text, partial })
  for (const call of turn.calls) {
    const toolCall: ToolCall = { type: "toolCall", id: call.id, name: call.name, arguments: { i: call.args.i } }
    const contentIndex = partial.content.length
    partial.content.push(toolCall)
    push({ type: "toolcall_start", contentIndex, partial })
    push({ type: "toolcall_end", contentIndex, toolCall, partial })
  }
  const reason = turn.calls.length > 0 ? "toolUse" : "stop"
  partial.stopReason = reason
  push({ type: "done", reason, message: partial })
  return stream
}

const Params = Type.Object({ i: Type.Number() })

const finalText = (agent: Agent): string => {
  const last = agent.state.messages[agent.state.messages.length - 1]
  if (last?.role !== "assistant") return ""
  return last.content.map((c) => (c.type === "text" ? c.text : "")).join("")
}

/** pi turns loop failures into an error message in state: surface them. */
const failIfErrored = (agent: Agent) => {
  if (agent.state.errorMessage !== undefined) throw new Error(`pi-agent-core: ${agent.state.errorMessage}`)
}

export const adapter: Adapter = {
  name: "pi-agent-core",
  cap: "none (unbounded Promise.all)",
  async session(toolTurns, onTurn) {
    const script = sessionScript("pi-agent-core", toolTurns)
    let toolRuns = 0
    const noop: AgentTool<typeof Params> = {
      name: NOOP,
      label: NOOP,
      description: "Does nothing.",
      parameters: Params,
      execute: async (_id, { i }) => {
        toolRuns++
        onTurn?.()
        return { content: [{ type: "text", text: noopResult(i) }], details: {} }
      }
    }
    const agent = new Agent({
      initialState: { systemPrompt: "", model, tools: [noop] },
      streamFn: scriptedStream(script)
    })
    let events = 0
    agent.subscribe(() => {
      events++
    })
    await agent.prompt("go")
    failIfErrored(agent)
    return { events, toolRuns, text: finalText(agent), modelCalls: script.calls, keep: agent }
  },
  async batch(spec) {
    const script = batchScript("pi-agent-core", spec)
    const observed = new Concurrency()
    const wait: AgentTool<typeof Params> = {
      name: WAIT,
      label: WAIT,
      description: "Waits.",
      parameters: Params,
      execute: async (_id, { i }) => ({
        content: [{ type: "text", text: await observed.wait(i, spec.ms) }],
        details: {}
      })
    }
    const agent = new Agent({
      initialState: { systemPrompt: "", model, tools: [wait] },
      streamFn: scriptedStream(script)
    })
    await agent.prompt("go")
    failIfErrored(agent)
    return { text: finalText(agent), toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
}
