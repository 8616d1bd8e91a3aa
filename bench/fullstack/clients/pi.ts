/**
 * pi-agent-core: the `Agent` class over pi-ai's `openai-completions`
 * provider (its default `streamFn`, `streamSimple`, which picks the provider
 * by the model's `api`; the provider uses the `openai` SDK on `fetch`).
 * Events are counted through `subscribe`.
 */
import { Agent, type AgentTool } from "@mariozechner/pi-agent-core"
import type { Model } from "@mariozechner/pi-ai"
import { Type } from "typebox"
import { NOOP, noopResult, prompt } from "../wire.ts"
import type { Client } from "./types.ts"

const Params = Type.Object({ i: Type.Number() })

export const make = async (baseUrl: string): Promise<Client> => {
  const model: Model<"openai-completions"> = {
    id: "bench-model",
    name: "bench",
    api: "openai-completions",
    provider: "bench",
    baseUrl,
    reasoning: false,
    input: ["text"],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    contextWindow: 1_000_000,
    maxTokens: 100_000
  }
  return {
    name: "pi-agent-core",
    async session(toolTurns) {
      let toolRuns = 0
      const noop: AgentTool<typeof Params> = {
        name: NOOP,
        label: NOOP,
        description: "Does nothing.",
        parameters: Params,
        execute: async (_id, { i }) => {
          toolRuns++
          return { content: [{ type: "text", text: noopResult(i) }], details: {} }
        }
      }
      const agent = new Agent({
        initialState: { systemPrompt: "", model, tools: [noop] },
        getApiKey: () => "sk-bench"
      })
      let events = 0
      agent.subscribe(() => {
        events++
      })
      await agent.prompt(prompt(toolTurns))
      if (agent.state.errorMessage !== undefined) throw new Error(`pi-agent-core: ${agent.state.errorMessage}`)
      const last = agent.state.messages[agent.state.messages.length - 1]
      const text = last?.role === "assistant"
        ? last.content.map((c) => (c.type === "text" ? c.text : "")).join("")
        : ""
      return { toolRuns, events, text }
    },
    close: async () => {}
  }
}
