/**
 * The full-stack workload on the wire: what the local server streams for each
 * Chat Completions request (recorded-shape `chat.completion.chunk` events),
 * and the check it runs on every request's history.
 *
 * A session's first user message is `go T=<n>`: the server reads T from it,
 * and the turn from the number of tool results in the history. On turn n < T
 * it streams a role chunk, 20 text deltas, the call `noop({ i: n })` (its id
 * and name, then its arguments in two pieces), the finish chunk, a usage chunk
 * with empty `choices` and `data: [DONE]`; on turn T the final answer (the same
 * text chunks, finish reason `stop`).
 */
import { DELTAS_PER_TURN, NOOP, finalText, noopResult } from "../workload.ts"

/** The first user message of a session of T tool turns. */
export const prompt = (toolTurns: number): string => `go T=${toolTurns}`

/** T, from a session's first user message. */
export const toolTurnsOf = (text: string): number | undefined => {
  const match = /^go T=(\d+)$/.exec(text)
  return match === null ? undefined : Number(match[1])
}

/** The text deltas of tool turn n. */
export const toolDeltas = (n: number): ReadonlyArray<string> => {
  const out: Array<string> = []
  for (let k = 0; k < DELTAS_PER_TURN; k++) out.push(`t${n}.${k} `)
  return out
}

/** The deltas of the final answer after T tool turns (they join to `finalText(T)`). */
export const finalDeltas = (toolTurns: number): ReadonlyArray<string> => {
  const out: Array<string> = []
  for (let k = 0; k < DELTAS_PER_TURN - 1; k++) out.push(`w${k} `)
  out.push(`done after ${toolTurns} tool turns.`)
  return out
}

export { finalText, NOOP, noopResult }

const created = 1727346182

const chunk = (n: number, choices: ReadonlyArray<unknown>, usage?: unknown): string =>
  `data: ${
    JSON.stringify({
      id: `chatcmpl-bench-${n}`,
      object: "chat.completion.chunk",
      created,
      model: "bench-model",
      system_fingerprint: "fp_bench",
      choices,
      ...(usage === undefined ? {} : { usage })
    })
  }\n\n`

const delta = (n: number, value: unknown, finish: string | null = null) =>
  chunk(n, [{ index: 0, delta: value, logprobs: null, finish_reason: finish }])

/** The SSE events of turn n of a session of T tool turns, each a complete `data: …\n\n`. */
export const turnEvents = (n: number, toolTurns: number): Array<string> => {
  const final = n >= toolTurns
  const deltas = final ? finalDeltas(toolTurns) : toolDeltas(n)
  const events = [delta(n, { role: "assistant", content: "", refusal: null })]
  for (const text of deltas) events.push(delta(n, { content: text }))
  if (!final) {
    const id = `call_${n}`
    events.push(delta(n, {
      tool_calls: [{ index: 0, id, type: "function", function: { name: NOOP, arguments: "" } }]
    }))
    events.push(delta(n, { tool_calls: [{ index: 0, function: { arguments: "{\"i\":" } }] }))
    events.push(delta(n, { tool_calls: [{ index: 0, function: { arguments: `${n}}` } }] }))
  }
  events.push(delta(n, {}, final ? "stop" : "tool_calls"))
  events.push(chunk(n, [], { prompt_tokens: 10 + n, completion_tokens: 25, total_tokens: 35 + n }))
  events.push("data: [DONE]\n\n")
  return events
}

// -----------------------------------------------------------------------------
// The history check
// -----------------------------------------------------------------------------

type Json = Record<string, unknown>

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null

/** The text of a message's content: a string, or the text parts of an array. */
const textOf = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return ""
  let text = ""
  for (const part of content) if (isObject(part) && typeof part.text === "string") text += part.text
  return text
}

/** What a request holds: T, the turn it asks for, and what is wrong with its history (empty when nothing). */
export interface Checked {
  readonly toolTurns: number
  readonly turn: number
  readonly problems: ReadonlyArray<string>
}

/**
 * Checks one request: it streams, declares `noop`, starts with `go T=<n>`,
 * and holds, in order, every earlier turn's call (id, name, arguments) each
 * followed by its result; an earlier turn's text, when sent back, is exact.
 */
export const check = (body: unknown): Checked => {
  const problems: Array<string> = []
  if (!isObject(body)) return { toolTurns: 0, turn: 0, problems: ["the body is not a JSON object"] }
  if (body.stream !== true) problems.push("stream is not true")
  const tools = Array.isArray(body.tools) ? body.tools : []
  if (!tools.some((tool) => isObject(tool) && isObject(tool.function) && tool.function.name === NOOP)) {
    problems.push("noop is not declared")
  }
  const messages = (Array.isArray(body.messages) ? body.messages : []).filter(
    (message): message is Json => isObject(message) && message.role !== "system"
  )
  const first = messages[0]
  const toolTurns = first?.role === "user" ? toolTurnsOf(textOf(first.content)) : undefined
  if (toolTurns === undefined) return { toolTurns: 0, turn: 0, problems: [...problems, "no `go T=<n>` first"] }
  let turn = 0
  let i = 1
  while (i < messages.length) {
    const assistant = messages[i]!
    const id = `call_${turn}`
    const calls = Array.isArray(assistant.tool_calls) ? assistant.tool_calls : []
    const call = calls[0]
    if (assistant.role !== "assistant" || calls.length !== 1 || !isObject(call) || !isObject(call.function)) {
      problems.push(`message ${i}: expected the assistant's call ${id}`)
      break
    }
    const text = textOf(assistant.content)
    const expected = toolDeltas(turn).join("")
    if (text !== "" && text !== expected) problems.push(`message ${i}: text ${JSON.stringify(text.slice(0, 40))}`)
    let args: unknown
    try {
      args = JSON.parse(String(call.function.arguments))
    } catch {
      args = undefined
    }
    if (call.id !== id || call.function.name !== NOOP || !isObject(args) || args.i !== turn) {
      problems.push(`message ${i}: call ${String(call.id)} ${String(call.function.name)}(${String(call.function.arguments)})`)
    }
    const result = messages[i + 1]
    if (result?.role !== "tool" || result.tool_call_id !== id || !textOf(result.content).includes(noopResult(turn))) {
      problems.push(`message ${i + 1}: expected the result of ${id} (${noopResult(turn)})`)
      break
    }
    turn++
    i += 2
  }
  if (turn > toolTurns) problems.push(`turn ${turn} of a session of ${toolTurns} tool turns`)
  return { toolTurns, turn, problems }
}
