/**
 * The quick-start agent on a real model. Pick the model on the command line:
 *
 *   node --conditions=effect-agent-source examples/models.ts openai      # needs OPENAI_API_KEY
 *   node --conditions=effect-agent-source examples/models.ts anthropic   # needs ANTHROPIC_API_KEY
 *   node --conditions=effect-agent-source examples/models.ts local       # Ollama on localhost
 *   node --conditions=effect-agent-source examples/models.ts local http://localhost:8000/v1   # vLLM
 */
import { NodeHttpClient, NodeRuntime } from "@effect/platform-node"
import { type Config, Console, Effect, Layer, Schema } from "effect"
import { type LanguageModel, Tool, Toolkit } from "effect/ai"
import type { HttpClient } from "effect/http"
import { Agent, Message, ToolRegistry } from "effect-agent"
import { Anthropic, OpenAiChat, OpenAiResponses, type Provider } from "effect-agent/providers"

const GetWeather = Tool.make("get_weather", {
  description: "Current temperature in a city",
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.Struct({ celsius: Schema.Finite })
})
const Tools = Toolkit.make(GetWeather)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ get_weather: ({ city }) => Effect.succeed({ celsius: city === "Oslo" ? 4 : 20 }) }))
)

export const models = {
  // OpenAI, through the Responses API (OPENAI_API_KEY). Reasoning is kept across turns.
  openai: () => OpenAiResponses.layer({ model: "gpt-5-mini", reasoning: { effort: "low", summary: "auto" } }),
  // Anthropic (ANTHROPIC_API_KEY), with extended thinking.
  anthropic: () => Anthropic.layer({ model: "claude-sonnet-4-5", thinking: { budgetTokens: 2048 } }),
  // Any OpenAI-compatible server, no key needed: Ollama by default; vLLM serves on
  // http://localhost:8000/v1, llama.cpp's llama-server on http://localhost:8080/v1.
  local: (baseUrl = "http://localhost:11434/v1") => OpenAiChat.layer({ model: "qwen3:8b", baseUrl })
}

/** A model layer: it fails to build when its key is missing, and needs an `HttpClient`. */
type Model = Layer.Layer<
  LanguageModel.LanguageModel,
  Config.ConfigError | Provider.MissingApiKey,
  HttpClient.HttpClient
>

/** Runs the agent on a model layer. */
export const ask = (model: Model) =>
  Agent.run({ system: "You answer weather questions. Use the tools.", prompt: "How cold is it in Oslo?" }).pipe(
    Effect.provide(Layer.merge(ToolsLive, model.pipe(Layer.provide(NodeHttpClient.layerUndici))))
  )

const main = Effect.gen(function*() {
  const [which = "local", baseUrl] = process.argv.slice(2)
  const model = which === "openai" ? models.openai() : which === "anthropic" ? models.anthropic() : models.local(baseUrl)
  const result = yield* ask(model)
  yield* Console.log(`${result.outcome._tag} - ${Message.textOf(result.messages.at(-1)!)}`)
  yield* Console.log(`${result.usage.input} in, ${result.usage.output} out, $${(result.usage.cost ?? 0).toFixed(5)}`)
})

if (process.argv[1] !== undefined && import.meta.url === new URL(process.argv[1], "file://").href) {
  NodeRuntime.runMain(main)
}
