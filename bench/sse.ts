/**
 * A workload turn as the Chat Completions Server-Sent Events body a server
 * streams for it, encoded once per process. The rows that decode a provider's
 * wire format (effect-agent's provider-shaped model, and the two rows over an
 * in-memory `fetch`) all stream these same bytes.
 */
import type { Turn } from "./workload.ts"

const encoder = new TextEncoder()

const chunk = (choices: ReadonlyArray<unknown>, usage?: unknown): string =>
  `data: ${
    JSON.stringify({
      id: "chatcmpl-bench",
      object: "chat.completion.chunk",
      created: 1727346182,
      model: "bench-model",
      system_fingerprint: "fp_bench",
      choices,
      ...(usage === undefined ? {} : { usage })
    })
  }\n\n`

const delta = (value: unknown, finish: string | null = null) =>
  chunk([{ index: 0, delta: value, logprobs: null, finish_reason: finish }])

/**
 * A turn as the Chat Completions SSE body a server streams for it: a role
 * chunk, the text deltas, each tool call's id and name then its arguments in
 * two pieces, the finish chunk, a usage chunk, `[DONE]`.
 */
export const sseBody = (turn: Turn): Uint8Array => {
  const events = [delta({ role: "assistant", content: "", refusal: null })]
  for (const text of turn.deltas) events.push(delta({ content: text }))
  turn.calls.forEach((call, index) => {
    const half = Math.ceil(call.json.length / 2)
    events.push(delta({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }] }))
    events.push(delta({ tool_calls: [{ index, function: { arguments: call.json.slice(0, half) } }] }))
    events.push(delta({ tool_calls: [{ index, function: { arguments: call.json.slice(half) } }] }))
  })
  events.push(delta({}, turn.calls.length > 0 ? "tool_calls" : "stop"))
  events.push(chunk([], { prompt_tokens: 10, completion_tokens: 25, total_tokens: 35 }))
  events.push("data: [DONE]\n\n")
  return encoder.encode(events.join(""))
}

/** Each turn's body, encoded once per process (the workload's turns are shared). */
const bodies = new WeakMap<Turn, Uint8Array>()

/** The turn's SSE body, encoded on first use. */
export const bodyOf = (turn: Turn): Uint8Array => {
  let body = bodies.get(turn)
  if (body === undefined) {
    body = sseBody(turn)
    bodies.set(turn, body)
  }
  return body
}
