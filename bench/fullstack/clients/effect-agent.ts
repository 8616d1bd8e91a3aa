/**
 * effect-agent: `Agent.run` over the `OpenAiChat` provider, on undici
 * (`NodeHttpClient.layerUndici`) or on `fetch` (`FetchHttpClient.layer`). The
 * model layer is built once per process, on one `ManagedRuntime`, as a server
 * running many sessions would; each session gets its own tools layer (its
 * handler counts its runs). Events are counted by a plugin's `observe`.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Layer, ManagedRuntime, Redacted, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { FetchHttpClient, type HttpClient } from "effect/http"
import { Agent, Message, ToolRegistry } from "../../../src/index.ts"
import { OpenAiChat } from "../../../src/providers/index.ts"
import { NOOP, noopResult, prompt } from "../wire.ts"
import type { Client } from "./types.ts"

const Noop = Tool.make(NOOP, {
  description: "Does nothing.",
  parameters: Schema.Struct({ i: Schema.Finite }),
  success: Schema.String
})
const NoopKit = Toolkit.make(Noop)

const make = (name: string, http: Layer.Layer<HttpClient.HttpClient>) => async (baseUrl: string): Promise<Client> => {
  const runtime = ManagedRuntime.make(
    OpenAiChat.layer({ model: "bench-model", baseUrl, apiKey: Redacted.make("sk-bench") }).pipe(Layer.provide(http))
  )
  return {
    name,
    async session(toolTurns) {
      let toolRuns = 0
      let events = 0
      const tools = ToolRegistry.layer(NoopKit).pipe(Layer.provide(NoopKit.toLayer({
        [NOOP]: ({ i }) =>
          Effect.sync(() => {
            toolRuns++
            return noopResult(i)
          })
      })))
      const result = await runtime.runPromise(
        Agent.run({
          prompt: prompt(toolTurns),
          config: { maxTurns: toolTurns + 1, graceTurns: 0 },
          plugins: [{
            name: "count",
            observe: () => {
              events++
            }
          }]
        }).pipe(Effect.provide(tools))
      )
      if (result.outcome._tag !== "Completed") throw new Error(`${name}: the run ended with ${result.outcome._tag}`)
      const last = result.messages[result.messages.length - 1]
      return { toolRuns, events, text: last === undefined ? "" : Message.textOf(last) }
    },
    close: () => runtime.dispose()
  }
}

export const undici = make("effect-agent (undici)", NodeHttpClient.layerUndici)
export const fetch = make("effect-agent (fetch)", FetchHttpClient.layer)
