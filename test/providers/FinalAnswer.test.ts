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
import { type LanguageModel, OpenAiStructuredOutput, Tool, Toolkit } from "effect/ai"
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

/** Serves the recorded streams in turn. */
const serveAll = (...streams: ReadonlyArray<string>) =>
  TestServer.start((_, index) => Effect.succeed(TestServer.sse(streams[index] ?? "")))

/** A run without tools that asks for the output as the provider's structured output. */
const runNative = <A, E>(model: Layer.Layer<LanguageModel.LanguageModel, E>, output: Schema.Codec<A, unknown>) =>
  Effect.gen(function*() {
    const deltas: Array<string> = []
    const collect = Hooks.plugin({
      name: "deltas",
      observe: (event) => {
        if (event._tag === "OutputDelta") deltas.push(event.delta)
      }
    })
    const result = yield* Agent.run({ prompt: "Where?", output, outputMode: "native", plugins: [collect] })
    return { result, deltas }
  }).pipe(Effect.provide(Layer.merge(ToolRegistry.layerEntries(), model)))

/** The strict JSON Schema OpenAI's structured output is sent, as effect/ai makes it for `generateObject`. */
const strictSchema = (schema: Output.Any) => OpenAiStructuredOutput.toCodecOpenAI(schema).jsonSchema

describe("a typed output as the provider's native structured output", () => {
  const chatChunk = (delta: unknown, finish: string | null = null) => ({
    id: "chatcmpl-n",
    model: "gpt-4o-2024-08-06",
    choices: [{ index: 0, delta, finish_reason: finish }]
  })

  it.effect("OpenAiChat: response_format json_schema and no tools; a reply that is not JSON is retried", () =>
    Effect.gen(function*() {
      const json = TestServer.events(
        chatChunk({ role: "assistant", content: "" }),
        chatChunk({ content: "{\"city\":" }),
        chatChunk({ content: "\"Oslo\"}" }),
        chatChunk({}, "stop"),
        "[DONE]"
      )
      const server = yield* serveAll(TestServer.fixture("openai-chat/openai-python_text-with-usage_gpt-4o.sse"), json)
      const model = OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const { deltas, result } = yield* runNative(model, City)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { city: "Oslo" })
      assert.strictEqual(server.requests.length, 2)
      const format = {
        type: "json_schema",
        json_schema: { name: "final_answer", schema: strictSchema(City), strict: true }
      }
      assert.deepStrictEqual(server.requests[0]!.body, {
        model: "gpt-4o",
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: "Where?" }],
        response_format: format
      })
      // the recorded reply (prose, not JSON) is an attempt: the model reads what was wrong and the schema
      const second = server.requests[1]!.body
      assert.deepStrictEqual(second.response_format, format)
      const retry = second.messages.at(-1)
      assert.strictEqual(retry.role, "user")
      assert.match(retry.content, /^Your answer is not valid: .*JSON/)
      assert.include(retry.content, JSON.stringify(Tool.getJsonSchemaFromSchema(City)))
      assert.strictEqual(deltas.slice(-2).join(""), "{\"city\":\"Oslo\"}")
    }))

  it.effect("OpenAiResponses: text.format json_schema and no tools", () =>
    Effect.gen(function*() {
      const Ok = Schema.Struct({ ok: Schema.Boolean })
      const recorded = TestServer.fixture("openai-responses/simple-text_gpt-4o.sse")
      // The recorded stream, its text ("Olá!") replaced by a JSON answer.
      const json = recorded.replaceAll("\"delta\":\"Olá\"", "\"delta\":\"{\\\"ok\\\":\"")
        .replaceAll("\"delta\":\"!\"", "\"delta\":\"true}\"")
        .replaceAll("Olá!", "{\\\"ok\\\":true}")
      assert.notStrictEqual(json, recorded)
      const server = yield* serveAll(json)
      const model = OpenAiResponses.layer({ model: "gpt-4o", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const { deltas, result } = yield* runNative(model, Ok)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { ok: true })
      assert.deepStrictEqual(server.requests[0]!.body, {
        model: "gpt-4o",
        stream: true,
        store: false,
        input: [{ role: "user", content: [{ type: "input_text", text: "Where?" }] }],
        text: { format: { type: "json_schema", name: "final_answer", schema: strictSchema(Ok), strict: true } }
      })
      assert.deepStrictEqual(deltas, ["{\"ok\":", "true}"])
    }))

  it.effect("Anthropic: the model call fails, saying the layer has no structured output", () =>
    Effect.gen(function*() {
      const server = yield* serveAll(TestServer.fixture("anthropic/simple-text_claude-sonnet-4.sse"))
      const model = Anthropic.layer({ model: "claude-sonnet-4", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client),
        Layer.orDie
      )
      const error = yield* Effect.flip(runNative(model, City))
      assert.strictEqual(error._tag, "ModelError")
      assert.include(error.message, "does not support structured output")
      assert.strictEqual(server.requests.length, 0)
    }))

  it.effect("a run with tools cannot ask for it: ConfigError", () =>
    Effect.gen(function*() {
      const model = OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl: "http://127.0.0.1:9" }).pipe(
        Layer.provide(ProviderTest.client),
        Layer.orDie
      )
      const error = yield* Effect.flip(
        Agent.run({ prompt: "x", output: City, outputMode: "native" }).pipe(
          Effect.provide(Layer.merge(ToolsLive, model))
        )
      )
      assert.strictEqual(error._tag, "ConfigError")
      if (error._tag === "ConfigError") assert.strictEqual(error.field, "outputMode")
    }))
})
