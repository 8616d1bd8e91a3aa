/**
 * The limit: a hand-written loop on `node:http` (a keep-alive agent), no
 * library. Per turn it sends the history as JSON, frames the SSE body by hand
 * (split on blank lines), `JSON.parse`s each `data:` line, appends text and
 * argument deltas, counts one event per delta, runs `noop` with the parsed
 * arguments (checked by hand) and appends the call and its result.
 */
import * as Http from "node:http"
import { NOOP, noopResult, prompt } from "../wire.ts"
import type { Client } from "./types.ts"

interface Call {
  id: string
  name: string
  args: string
}

interface Reply {
  readonly text: string
  readonly calls: ReadonlyArray<Call>
  readonly events: number
}

const tools = [{
  type: "function",
  function: {
    name: NOOP,
    description: "Does nothing.",
    parameters: { type: "object", properties: { i: { type: "number" } }, required: ["i"] }
  }
}]

export const make = async (baseUrl: string): Promise<Client> => {
  const url = new URL(`${baseUrl}/chat/completions`)
  const agent = new Http.Agent({ keepAlive: true })

  const call = (messages: ReadonlyArray<unknown>): Promise<Reply> =>
    new Promise((resolve, reject) => {
      const body = JSON.stringify({ model: "bench-model", messages, tools, stream: true })
      const req = Http.request(url, {
        method: "POST",
        agent,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          authorization: "Bearer sk-bench"
        }
      }, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`status ${res.statusCode}`))
        res.setEncoding("utf8")
        let buffer = ""
        let text = ""
        let events = 0
        let done = false
        const calls: Array<Call> = []
        const onEvent = (event: string) => {
          if (!event.startsWith("data: ")) return
          const data = event.slice(6)
          if (data === "[DONE]") {
            done = true
            return
          }
          const chunk = JSON.parse(data)
          const delta = chunk.choices?.[0]?.delta
          if (delta === undefined) return
          if (typeof delta.content === "string" && delta.content !== "") {
            text += delta.content
            events++
          }
          for (const piece of delta.tool_calls ?? []) {
            let current = calls[piece.index]
            if (current === undefined) {
              current = { id: piece.id, name: piece.function.name, args: "" }
              calls[piece.index] = current
            }
            if (piece.function?.arguments) {
              current.args += piece.function.arguments
              events++
            }
          }
        }
        res.on("data", (chunk: string) => {
          buffer += chunk
          let end = buffer.indexOf("\n\n")
          while (end !== -1) {
            onEvent(buffer.slice(0, end))
            buffer = buffer.slice(end + 2)
            end = buffer.indexOf("\n\n")
          }
        })
        res.on("end", () => done ? resolve({ text, calls, events }) : reject(new Error("the stream ended early")))
        res.on("error", reject)
      })
      req.on("error", reject)
      req.end(body)
    })

  return {
    name: "bare node:http loop",
    async session(toolTurns) {
      const messages: Array<unknown> = [{ role: "user", content: prompt(toolTurns) }]
      let toolRuns = 0
      let events = 0
      for (let turn = 0; turn <= toolTurns; turn++) {
        const reply = await call(messages)
        events += reply.events
        if (reply.calls.length === 0) return { toolRuns, events, text: reply.text }
        messages.push({
          role: "assistant",
          content: reply.text,
          tool_calls: reply.calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args } }))
        })
        for (const c of reply.calls) {
          const args = JSON.parse(c.args)
          if (c.name !== NOOP || typeof args?.i !== "number") throw new Error(`bad call ${c.name}(${c.args})`)
          toolRuns++
          messages.push({ role: "tool", tool_call_id: c.id, content: noopResult(args.i) })
        }
      }
      throw new Error(`bare: no final answer after ${toolTurns + 1} calls`)
    },
    close: async () => agent.destroy()
  }
}
