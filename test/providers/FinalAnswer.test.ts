/**
 * A run with a typed output on each real provider, against a local server:
 * the first request declares the `final_answer` tool (its parameters are the
 * output Schema's JSON Schema) beside the run's other tool, exactly as the
 * provider's wire format wants it; the recorded stream's call comes back as
 * the decoded output, its arguments streamed as `OutputDelta` events.
 *
 * The streams are the recorded tool-call streams of `fixtures/providers`,
 * with the called function's name replaced by `final_answer` (the name is
 * the only byte that changes: the provider decodes a call the same way
 * whatever its name).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Schema } from "effect"
import { type LanguageModel, Tool, Toolkit } from "effect/ai"
import { Agent, type AgentEvent, Hooks, Output, ToolRegistry } from "effect-agent"
import { Anthropic, OpenAiChat, OpenAiResponses } from "effect-agent/providers"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const GetWeather = Tool.make("get_weather", {
  description: "Current weather for a city",
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.Struct({ celsius: Schema.Finite })
})
const Tools = Toolkit.make(GetWeather)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ get_weather: () => Effect.succeed({ celsius: 21 }) }))
)

/** The recorded stream at `path`, its function `name` called `final_answer`. */
const recordedAsFinalAnswer = (path: string, name: string) => {
  const text = TestServer.fixture(path)
  const renamed = text.replaceAll(`"name":"${name}"`, `"name":"${Output.toolName}"`)
  assert.notStrictEqual(renamed, text, `${path} calls ${name}`)
  return renamed
}

const serve = (stream: string) => TestServer.start(() => Effect.succeed(TestServer.sse(stream)))

const key = Redacted.make(ProviderTest.apiKey)

const runTyped = <A>(model: Layer.Layer<LanguageModel.LanguageModel, unknown>, output: Schema.Codec<A, unknown>) =>
  Effect.gen(function*() {
    const deltas: Array<AgentEvent.Of<"OutputDelta">> = []
    const collect = Hooks.plugin({
      name: "deltas",
      observe: (event) => {
        if (event._tag === "OutputDelta") deltas.push(event)
      }
    })
    const result = yield* Agent.run({ prompt: "Where?", output, plugins: [collect] })
    return { result, deltas }
  }).pipe(Effect.provide(Layer.merge(ToolsLive, model)))

const City = Schema.Struct({ city: Schema.String })
const Location = Schema.Struct({ location: Schema.String })

/** The JSON Schema effect's Schema makes for an output Schema: what every provider sends as the parameters. */
const parametersOf = (schema: Output.Any) => Tool.getJsonSchema(Output.finalAnswer(schema).tool)

describe("a typed output on the real providers", () => {
  it.effect("the JSON Schema sent is effect's for the output Schema", () =>
    Effect.sync(() => {
      assert.deepStrictEqual(parametersOf(City), {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
        additionalProperties: true
      })
    }))

  it.effect("OpenAiChat: final_answer is declared beside the tools, and the recorded call is the output", () =>
    Effect.gen(function*() {
      const server = yield* serve(
        recordedAsFinalAnswer("openai-chat/openai-python_single-tool-call_gpt-4o.sse", "get_weather")
      )
      const model = OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const { deltas, result } = yield* runTyped(model, City)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { city: "New York City" })
      assert.strictEqual(server.requests.length, 1)
      assert.deepStrictEqual(server.requests[0]!.body, {
        model: "gpt-4o",
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: "Where?" }],
        tools: [
          {
            type: "function",
            function: {
              name: "get_weather",
              description: "Current weather for a city",
              parameters: Tool.getJsonSchema(GetWeather)
            }
          },
          {
            type: "function",
            function: { name: "final_answer", description: Output.description, parameters: parametersOf(City) }
          }
        ],
        tool_choice: "auto"
      })
      // the arguments as they streamed, piece by piece
      assert.deepStrictEqual(deltas.map((d) => d.delta), ["{\"", "city", "\":\"", "New", " York", " City", "\"}"])
      assert.isTrue(deltas.every((d) => d.toolCallId === "call_4XzlGBLtUe9dy3GVNV4jhq7h"))
    }))

  it.effect("OpenAiResponses: final_answer is declared beside the tools, and the recorded call is the output", () =>
    Effect.gen(function*() {
      const server = yield* serve(
        recordedAsFinalAnswer("openai-responses/reasoning-summary-plus-tool_gpt-5.sse", "weather")
      )
      const model = OpenAiResponses.layer({ model: "gpt-5", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const { deltas, result } = yield* runTyped(model, Location)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { location: "Florence, Italy" })
      assert.strictEqual(server.requests.length, 1)
      assert.deepStrictEqual(server.requests[0]!.body, {
        model: "gpt-5",
        stream: true,
        store: false,
        input: [{ role: "user", content: [{ type: "input_text", text: "Where?" }] }],
        tools: [
          {
            type: "function",
            name: "get_weather",
            description: "Current weather for a city",
            parameters: Tool.getJsonSchema(GetWeather),
            strict: false
          },
          {
            type: "function",
            name: "final_answer",
            description: Output.description,
            parameters: parametersOf(Location),
            strict: false
          }
        ],
        tool_choice: "auto"
      })
      assert.strictEqual(deltas.map((d) => d.delta).join(""), "{\"location\":\"Florence, Italy\"}")
      assert.isAbove(deltas.length, 3)
    }))

  it.effect("Anthropic: final_answer is declared beside the tools, and the recorded call is the output", () =>
    Effect.gen(function*() {
      const server = yield* serve(
        recordedAsFinalAnswer("anthropic/thinking-plus-tool-use_claude-sonnet-4.sse", "weather")
      )
      const model = Anthropic.layer({ model: "claude-sonnet-4", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const { deltas, result } = yield* runTyped(model, Location)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { location: "Florence, Italy" })
      assert.strictEqual(server.requests.length, 1)
      const cache = { type: "ephemeral" }
      assert.deepStrictEqual(server.requests[0]!.body, {
        model: "claude-sonnet-4",
        max_tokens: server.requests[0]!.body.max_tokens,
        stream: true,
        messages: [{ role: "user", content: [{ type: "text", text: "Where?", cache_control: cache }] }],
        tools: [
          {
            name: "get_weather",
            description: "Current weather for a city",
            input_schema: Tool.getJsonSchema(GetWeather)
          },
          {
            name: "final_answer",
            description: Output.description,
            input_schema: parametersOf(Location),
            cache_control: cache
          }
        ],
        tool_choice: { type: "auto" }
      })
      assert.deepStrictEqual(deltas.map((d) => d.delta), ["{\"", "lo", "catio", "n\": \"Florenc", "e, Italy", "\"}"])
    }))
})
