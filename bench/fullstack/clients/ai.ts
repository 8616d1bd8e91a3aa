/**
 * Vercel AI SDK: `ToolLoopAgent.stream` over `@ai-sdk/openai-compatible`'s
 * chat model (on `fetch`), `stopWhen: isStepCount(T + 1)`; events are the
 * parts of `fullStream`.
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { ToolLoopAgent, isStepCount, tool } from "ai"
import { z } from "zod"
import { NOOP, noopResult, prompt } from "../wire.ts"
import type { Client } from "./types.ts"

const Params = z.object({ i: z.number() })

export const make = async (baseUrl: string): Promise<Client> => {
  const provider = createOpenAICompatible({ name: "bench", baseURL: baseUrl, apiKey: "sk-bench", includeUsage: true })
  const model = provider.chatModel("bench-model")
  return {
    name: "ai (ToolLoopAgent)",
    async session(toolTurns) {
      let toolRuns = 0
      const agent = new ToolLoopAgent({
        model,
        tools: {
          [NOOP]: tool({
            description: "Does nothing.",
            inputSchema: Params,
            execute: async ({ i }) => {
              toolRuns++
              return noopResult(i)
            }
          })
        },
        stopWhen: isStepCount(toolTurns + 1)
      })
      const result = await agent.stream({ prompt: prompt(toolTurns) })
      let events = 0
      for await (const part of result.fullStream) {
        if (part.type === "error") throw part.error
        events++
      }
      return { toolRuns, events, text: await result.text }
    },
    close: async () => {}
  }
}
