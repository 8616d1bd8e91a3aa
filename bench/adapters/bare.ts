/**
 * The lower limit: a hand-written loop over the same scripted stream, doing
 * the same work as the libraries (stream parts, events to a consumer, JSON
 * arguments parsed and validated, tool executed, result appended, model
 * called again with the transcript) and nothing else.
 */
import {
  type Adapter,
  type BatchSpec,
  Concurrency,
  NOOP,
  type Script,
  WAIT,
  batchScript,
  noopResult,
  sessionScript
} from "../workload.ts"

type Part =
  | { readonly type: "text-delta"; readonly delta: string }
  | { readonly type: "tool-call"; readonly id: string; readonly name: string; readonly input: string }
  | { readonly type: "finish"; readonly reason: "stop" | "tool-calls" }

type Message =
  | { readonly role: "user"; readonly text: string }
  | { readonly role: "assistant"; readonly text: string; readonly calls: ReadonlyArray<ToolCall> }
  | { readonly role: "tool"; readonly id: string; readonly name: string; readonly output: string; readonly isError: boolean }

interface ToolCall {
  readonly id: string
  readonly name: string
  readonly input: string
}

type Event =
  | { readonly type: "agent_start" }
  | { readonly type: "turn_start" }
  | { readonly type: "text_delta"; readonly delta: string }
  | { readonly type: "tool_call"; readonly call: ToolCall }
  | { readonly type: "message_end"; readonly message: Message }
  | { readonly type: "tool_start"; readonly call: ToolCall }
  | { readonly type: "tool_end"; readonly result: Message }
  | { readonly type: "turn_end" }
  | { readonly type: "agent_end"; readonly messages: ReadonlyArray<Message> }

interface Tool {
  readonly name: string
  readonly execute: (args: { readonly i: number }) => Promise<string>
}

/** The scripted model as an async stream of parts, like a provider client's. */
async function* stream(script: Script, messages: ReadonlyArray<Message>): AsyncGenerator<Part> {
  const last = messages[messages.length - 1]
  script.check(last?.role === "tool" ? last.id : undefined, last?.role === "tool" ? last.output : undefined)
  const turn = script.next()
  for (const delta of turn.deltas) yield { type: "text-delta", delta }
  for (const call of turn.calls) yield { type: "tool-call", id: call.id, name: call.name, input: call.json }
  yield { type: "finish", reason: turn.calls.length > 0 ? "tool-calls" : "stop" }
}

/** Argument validation, hand-written: JSON object with a finite number `i`. */
const decode = (input: string): { readonly i: number } => {
  const value: unknown = JSON.parse(input)
  if (typeof value !== "object" || value === null || !("i" in value) || typeof value.i !== "number" || !Number.isFinite(value.i)) {
    throw new Error(`expected { i: number }, got ${input}`)
  }
  return { i: value.i }
}

const runCall = async (tools: ReadonlyMap<string, Tool>, call: ToolCall, emit: (e: Event) => void): Promise<Message> => {
  emit({ type: "tool_start", call })
  const tool = tools.get(call.name)
  let result: Message
  try {
    if (tool === undefined) throw new Error(`unknown tool ${call.name}`)
    result = { role: "tool", id: call.id, name: call.name, output: await tool.execute(decode(call.input)), isError: false }
  } catch (error) {
    result = { role: "tool", id: call.id, name: call.name, output: String(error), isError: true }
  }
  emit({ type: "tool_end", result })
  return result
}

/** Runs the calls at most `cap` at a time; results in the calls' order. */
const runBatch = async (
  tools: ReadonlyMap<string, Tool>,
  calls: ReadonlyArray<ToolCall>,
  cap: number,
  emit: (e: Event) => void
): Promise<ReadonlyArray<Message>> => {
  if (calls.length === 1) return [await runCall(tools, calls[0]!, emit)]
  const results: Array<Message> = new Array(calls.length)
  let next = 0
  const worker = async () => {
    while (next < calls.length) {
      const index = next++
      results[index] = await runCall(tools, calls[index]!, emit)
    }
  }
  const workers: Array<Promise<void>> = []
  for (let w = 0; w < Math.min(cap, calls.length); w++) workers.push(worker())
  await Promise.all(workers)
  return results
}

/** The loop: model turn, tool batch, repeat until the model stops calling tools. */
const run = async (
  script: Script,
  tools: ReadonlyMap<string, Tool>,
  cap: number,
  emit: (e: Event) => void
): Promise<ReadonlyArray<Message>> => {
  const messages: Array<Message> = [{ role: "user", text: "go" }]
  emit({ type: "agent_start" })
  while (true) {
    emit({ type: "turn_start" })
    let text = ""
    const calls: Array<ToolCall> = []
    for await (const part of stream(script, messages)) {
      if (part.type === "text-delta") {
        text += part.delta
        emit({ type: "text_delta", delta: part.delta })
      } else if (part.type === "tool-call") {
        const call = { id: part.id, name: part.name, input: part.input }
        calls.push(call)
        emit({ type: "tool_call", call })
      }
    }
    const assistant: Message = { role: "assistant", text, calls }
    messages.push(assistant)
    emit({ type: "message_end", message: assistant })
    if (calls.length === 0) break
    for (const result of await runBatch(tools, calls, cap, emit)) messages.push(result)
    emit({ type: "turn_end" })
  }
  emit({ type: "agent_end", messages })
  return messages
}

const finalTextOf = (messages: ReadonlyArray<Message>): string => {
  const last = messages[messages.length - 1]
  return last?.role === "assistant" ? last.text : ""
}

export const adapter: Adapter = {
  name: "bare loop",
  cap: "hand-written pool of 8",
  async session(toolTurns, onTurn) {
    const script = sessionScript("bare", toolTurns)
    let toolRuns = 0
    const noop: Tool = {
      name: NOOP,
      execute: async ({ i }) => {
        toolRuns++
        onTurn?.()
        return noopResult(i)
      }
    }
    let events = 0
    const messages = await run(script, new Map([[NOOP, noop]]), 8, () => {
      events++
    })
    return { events, toolRuns, text: finalTextOf(messages), modelCalls: script.calls, keep: messages }
  },
  async batch(spec: BatchSpec) {
    const script = batchScript("bare", spec)
    const observed = new Concurrency()
    const wait: Tool = { name: WAIT, execute: ({ i }) => observed.wait(i, spec.ms) }
    const messages = await run(script, new Map([[WAIT, wait]]), spec.maxParallel, () => {})
    return { text: finalTextOf(messages), toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
}
