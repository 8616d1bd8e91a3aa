/**
 * Vercel AI SDK (`ai`): `ToolLoopAgent.stream` with `stopWhen: isStepCount`,
 * over a `LanguageModelV4` (the provider specification every AI SDK provider
 * implements) whose `doStream` plays the script as a `ReadableStream` of
 * `LanguageModelV4StreamPart`s. Tools are `tool({ inputSchema: zod })`,
 * validated and executed by the SDK's loop; the consumer counts every part of
 * `fullStream`. The SDK runs every tool call of a step at once: no cap.
 */
import type { LanguageModelV4, LanguageModelV4StreamPart } from "@ai-sdk/provider"
import { ToolLoopAgent, isStepCount, tool } from "ai"
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

const usage = {
  inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 0, text: 0, reasoning: 0 }
}

/** A LanguageModelV4 whose `doStream` plays the script. */
const scriptedModel = (script: Script): LanguageModelV4 => ({
  specificationVersion: "v4",
  provider: "scripted",
  modelId: "scripted",
  supportedUrls: {},
  doGenerate: () => Promise.reject(new Error("the benchmark only streams")),
  doStream: (options) => {
    const last = options.prompt[options.prompt.length - 1]
    const result = last?.role === "tool" ? last.content[last.content.length - 1] : undefined
    if (result?.type === "tool-result") {
      const output = result.output
      script.check(result.toolCallId, output.type === "text" ? output.value : output.type === "json" ? JSON.stringify(output.value) : undefined)
    } else {
      script.check(undefined, undefined)
    }
    const turn = script.next()
    const stream = new ReadableStream<LanguageModelV4StreamPart>({
      start(controller) {
        controller.enqueue({ type: "stream-start", warnings: [] })
        controller.enqueue({ type: "text-start", id: "t" })
        for (const delta of turn.deltas) controller.enqueue({ type: "text-delta", id: "t", delta })
        controller.enqueue({ type: "text-end", id: "t" })
        for (const call of turn.calls) {
          controller.enqueue({ type: "tool-call", toolCallId: call.id, toolName: call.name, input: call.json })
        }
        controller.enqueue({
          type: "finish",
          usage,
          finishReason: { unified: turn.calls.length > 0 ? "tool-calls" : "stop", raw: undefined }
        })
        controller.close()
      }
    })
    return Promise.resolve({ stream })
  }
})

const Params = z.object({ i: z.number() })

export const adapter: Adapter = {
  name: "ai (ToolLoopAgent)",
  cap: "none (all calls of a step at once)",
  async session(toolTurns, onTurn) {
    const script = sessionScript("ai", toolTurns)
    let toolRuns = 0
    const agent = new ToolLoopAgent({
      model: scriptedModel(script),
      tools: {
        [NOOP]: tool({
          description: "Does nothing.",
          inputSchema: Params,
          execute: async ({ i }) => {
            toolRuns++
            onTurn?.()
            return noopResult(i)
          }
        })
      },
      stopWhen: isStepCount(toolTurns + 1)
    })
    const result = await agent.stream({ prompt: "go" })
    let events = 0
    for await (const part of result.fullStream) {
      if (part.type === "error") throw part.error
      events++
    }
    // Kept: the result and the messages of all steps, what an app appends to its history.
    const messages = await result.responseMessages
    return { events, toolRuns, text: await result.text, modelCalls: script.calls, keep: { result, messages } }
  },
  async batch(spec) {
    const script = batchScript("ai", spec)
    const observed = new Concurrency()
    const agent = new ToolLoopAgent({
      model: scriptedModel(script),
      tools: {
        [WAIT]: tool({
          description: "Waits.",
          inputSchema: Params,
          execute: ({ i }) => observed.wait(i, spec.ms)
        })
      },
      stopWhen: isStepCount(2)
    })
    const result = await agent.stream({ prompt: "go" })
    for await (const part of result.fullStream) {
      if (part.type === "error") throw part.error
    }
    return { text: await result.text, toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
}
