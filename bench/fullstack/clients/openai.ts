/**
 * OpenAI Agents SDK: `Runner.run(agent, input, { stream: true })` over its
 * chat-completions model (`OpenAIChatCompletionsModel` on an `OpenAI` client
 * pointed at the server, on `fetch`); tracing disabled; events are the run's
 * stream events.
 */
import { Agent, OpenAIChatCompletionsModel, Runner, tool } from "@openai/agents"
import OpenAI from "openai"
import { z } from "zod"
import { NOOP, noopResult, prompt } from "../wire.ts"
import type { Client } from "./types.ts"

const Params = z.object({ i: z.number() })

export const make = async (baseUrl: string): Promise<Client> => {
  const model = new OpenAIChatCompletionsModel(new OpenAI({ baseURL: baseUrl, apiKey: "sk-bench" }), "bench-model")
  const runner = new Runner({ tracingDisabled: true })
  return {
    name: "@openai/agents",
    async session(toolTurns) {
      let toolRuns = 0
      const agent = new Agent({
        name: "bench",
        model,
        tools: [tool({
          name: NOOP,
          description: "Does nothing.",
          parameters: Params,
          execute: async ({ i }) => {
            toolRuns++
            return noopResult(i)
          }
        })]
      })
      const result = await runner.run(agent, prompt(toolTurns), { stream: true, maxTurns: toolTurns + 1 })
      let events = 0
      for await (const _event of result) events++
      await result.completed
      if (result.error !== null) throw result.error
      return { toolRuns, events, text: String(result.finalOutput) }
    },
    close: async () => {}
  }
}
