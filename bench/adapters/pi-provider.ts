/**
 * pi-agent-core over pi-ai's real `openai-completions` provider, in memory:
 * the `Agent` class with its default `streamFn` (`streamSimple`, which picks
 * the provider by the model's `api`), as `bench/fullstack/clients/pi.ts` runs
 * it, but with `fetch` answered by an in-memory server (`MemoryServer`) that
 * checks each request's last message against the script and streams the
 * turn's Chat Completions SSE body, the same bytes the effect-agent rows
 * decode, in one chunk.
 *
 * How `fetch` is injected: pi-ai builds a new `openai` SDK client per request
 * (`createClient` in its `openai-completions` provider) and passes it no
 * `fetch`, so the client takes the global one (`options.fetch ??
 * getDefaultFetch()`, which returns `globalThis.fetch`, read when the client
 * is made). pi-ai offers no option to pass one, so while a session runs the
 * global `fetch` is replaced (`route`) by one that hands the requests carrying
 * the session's `x-bench-session` header (set through the model's `headers`,
 * which pi-ai sends with every request) to that session's server, and any
 * other request to the real `fetch`; the global is restored when the last
 * session ends. Everything else is pi's own path: message conversion, request
 * encoding, the SDK's request and retry wrapper, its SSE reader and
 * `JSON.parse`, pi-ai's event stream, the loop.
 */
import { Agent, type AgentTool } from "@mariozechner/pi-agent-core"
import type { Model } from "@mariozechner/pi-ai"
import { Type } from "typebox"
import { MemoryServer, route, SESSION_HEADER } from "../memory-fetch.ts"
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

const NAME = "pi-agent-core (pi-ai provider, in-memory fetch)"

const model: Model<"openai-completions"> = {
  id: "bench-model",
  name: "bench",
  api: "openai-completions",
  provider: "bench",
  baseUrl: "http://bench.invalid/v1",
  reasoning: false,
  input: ["text"],
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  contextWindow: 1_000_000,
  maxTokens: 100_000
}

const Params = Type.Object({ i: Type.Number() })

const finalText = (agent: Agent): string => {
  const last = agent.state.messages[agent.state.messages.length - 1]
  if (last?.role !== "assistant") return ""
  return last.content.map((c) => (c.type === "text" ? c.text : "")).join("")
}

/** Runs the agent on its script's in-memory server; a failed check or a loop error fails the session. */
const play = async (script: Script, tool: AgentTool<typeof Params>, onEvent?: () => void): Promise<Agent> => {
  const server = new MemoryServer(script)
  const session = route(server)
  const agent = new Agent({
    initialState: { systemPrompt: "", model: { ...model, headers: { [SESSION_HEADER]: session.id } }, tools: [tool] },
    getApiKey: () => "sk-bench"
  })
  if (onEvent !== undefined) agent.subscribe(onEvent)
  try {
    await agent.prompt("go")
  } finally {
    session.close()
  }
  server.rethrow()
  // pi turns loop failures into an error message in state: surface them.
  if (agent.state.errorMessage !== undefined) throw new Error(`${NAME}: ${agent.state.errorMessage}`)
  return agent
}

export const adapter: Adapter = {
  name: NAME,
  cap: "none (unbounded Promise.all)",
  async session(toolTurns, onTurn) {
    const script = sessionScript(NAME, toolTurns)
    let toolRuns = 0
    let events = 0
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
    const agent = await play(script, noop, () => {
      events++
    })
    return { events, toolRuns, text: finalText(agent), modelCalls: script.calls, keep: agent }
  },
  async batch(spec) {
    const script = batchScript(NAME, spec)
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
    const agent = await play(script, wait)
    return { text: finalText(agent), toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
}
