import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import { Tool } from "effect/ai"
import { ToolArguments } from "effect-agent"
import { OpenAiChat } from "effect-agent/providers"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const layer = (baseUrl: string, options: Partial<OpenAiChat.Options> = {}) =>
  OpenAiChat.layer({ model: "gpt-4o", apiKey: Redacted.make(ProviderTest.apiKey), baseUrl, ...options }).pipe(
    Layer.provide(ProviderTest.client)
  )

const replay = (file: string) =>
  TestServer.start(() => Effect.succeed(TestServer.sse(TestServer.fixture(`openai-chat/${file}`))))

describe("OpenAiChat", () => {
  it.effect("replays a recorded text stream with usage in a final empty-choices chunk", () =>
    Effect.gen(function*() {
      const server = yield* replay("openai-python_text-with-usage_gpt-4o.sse")
      const parts = yield* ProviderTest.streamParts("What is the weather in San Francisco?").pipe(
        Effect.provide(layer(server.baseUrl))
      )
      const text =
        "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend checking a reliable weather website or a weather app."
      const types = parts.map((part) => part.type)
      assert.deepStrictEqual(types.filter((type) => type !== "text-delta"), [
        "response-metadata",
        "text-start",
        "text-end",
        "finish"
      ])
      assert.strictEqual(types.filter((type) => type === "text-delta").length, 30)
      assert.strictEqual(parts.flatMap((part) => part.type === "text-delta" ? [part.delta] : []).join(""), text)
      const metadata = parts[0]
      assert(metadata?.type === "response-metadata")
      assert.deepStrictEqual(
        [metadata.id, metadata.modelId, metadata.timestamp?.toString()],
        ["chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL", "gpt-4o-2024-08-06", "DateTime.Utc(2024-09-26T10:22:48.000Z)"]
      )
      assert.deepStrictEqual(ProviderTest.finishOf(parts), {
        reason: "stop",
        inputTokens: { total: 14, uncached: 14, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 30, reasoning: 0 },
        metadata: { "effect-agent": { costUsd: (14 * 2.5 + 30 * 10) / 1e6 } }
      })

      const response = yield* ProviderTest.generate("again").pipe(Effect.provide(layer(server.baseUrl)))
      assert.strictEqual(response.text, text)
      assert.strictEqual(response.finishReason, "stop")
      assert.deepStrictEqual(response.toolCalls, [])
      assert.deepStrictEqual({ ...response.usage.inputTokens }, { total: 14, uncached: 14, cacheRead: 0, cacheWrite: 0 })
      assert.deepStrictEqual({ ...response.usage.outputTokens }, { total: 30, reasoning: 0 })
    }))

  it.effect("replays a recorded tool call whose arguments arrive in pieces", () =>
    Effect.gen(function*() {
      const server = yield* replay("openai-python_single-tool-call_gpt-4o.sse")
      const parts = yield* ProviderTest.streamParts("Weather in NYC?").pipe(Effect.provide(layer(server.baseUrl)))
      const id = "call_4XzlGBLtUe9dy3GVNV4jhq7h"
      assert.deepStrictEqual(ProviderTest.plain(parts.slice(1, -1)), [
        { type: "tool-params-start", id, name: "get_weather", providerExecuted: false, metadata: {} },
        ...["{\"", "city", "\":\"", "New", " York", " City", "\"}"].map((delta) => ({
          type: "tool-params-delta",
          id,
          delta,
          metadata: {}
        })),
        { type: "tool-params-end", id, metadata: {} },
        {
          type: "tool-call",
          id,
          name: "get_weather",
          params: { city: "New York City" },
          providerExecuted: false,
          metadata: {}
        }
      ])
      assert.deepStrictEqual(ProviderTest.finishOf(parts), {
        reason: "tool-calls",
        inputTokens: { total: 44, uncached: 44, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 16, reasoning: 0 },
        metadata: { "effect-agent": { costUsd: (44 * 2.5 + 16 * 10) / 1e6 } }
      })
      const response = yield* ProviderTest.generate("again").pipe(Effect.provide(layer(server.baseUrl)))
      assert.strictEqual(response.text, "")
      assert.strictEqual(response.finishReason, "tool-calls")
      assert.deepStrictEqual(
        response.toolCalls.map((call) => [call.id, call.name, call.params]),
        [[id, "get_weather", { city: "New York City" }]]
      )
      assert.deepStrictEqual({ ...response.usage.inputTokens }, { total: 44, uncached: 44, cacheRead: 0, cacheWrite: 0 })
      assert.deepStrictEqual({ ...response.usage.outputTokens }, { total: 16, reasoning: 0 })
    }))

  it.effect("encodes a whole transcript: images, tool calls and results, mid-history system messages", () =>
    Effect.gen(function*() {
      const server = yield* replay("openai-python_text-with-usage_gpt-4o.sse")
      yield* ProviderTest.generate(ProviderTest.transcript({ anthropic: { signature: "sig" } })).pipe(
        Effect.provide(layer(server.baseUrl, { headers: { "x-team": "agents" }, maxOutputTokens: 512, temperature: 0 }))
      )
      const [request] = server.requests
      assert.strictEqual(request!.url, "/chat/completions")
      assert.strictEqual(request!.headers.authorization, `Bearer ${ProviderTest.apiKey}`)
      assert.strictEqual(request!.headers["x-team"], "agents")
      const image = `data:image/png;base64,${ProviderTest.png}`
      assert.deepStrictEqual(request!.body, {
        model: "gpt-4o",
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 512,
        temperature: 0,
        messages: [
          { role: "system", content: "Be brief." },
          {
            role: "user",
            content: [
              { type: "text", text: "What is in this image?" },
              { type: "image_url", image_url: { url: image } },
              { type: "image_url", image_url: { url: "https://example.com/cat.jpg" } }
            ]
          },
          {
            role: "assistant",
            content: "Let me check.",
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } },
              { id: "call_2", type: "function", function: { name: "get_weather", arguments: "{\"city\":" } }
            ]
          },
          { role: "tool", tool_call_id: "call_1", content: "18°C and sunny" },
          { role: "tool", tool_call_id: "call_2", content: "The arguments were not valid JSON." },
          {
            role: "user",
            content: [
              { type: "text", text: "Attachments of the result of tool call call_2:" },
              { type: "image_url", image_url: { url: image } }
            ]
          },
          { role: "system", content: "Wrap up now." },
          { role: "user", content: "Thanks" }
        ],
        tools: [{
          type: "function",
          function: {
            name: "get_weather",
            description: "Current weather for a city",
            parameters: Tool.getJsonSchema(ProviderTest.GetWeather)
          }
        }],
        tool_choice: "auto"
      })
    }))

  it.effect("reads the key from OPENAI_API_KEY through Config, and sends none when there is none", () =>
    Effect.gen(function*() {
      const server = yield* replay("openai-python_text-with-usage_gpt-4o.sse")
      const local = OpenAiChat.layer({ model: "llama3.1", baseUrl: `${server.baseUrl}/`, body: { keep_alive: "5m" } })
        .pipe(Layer.provide(ProviderTest.client))
      const withEnv = (env: Record<string, string>) =>
        Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(env))
      yield* ProviderTest.generate("hi").pipe(Effect.provide(local), withEnv({}))
      yield* ProviderTest.generate("hi").pipe(Effect.provide(local), withEnv({ OPENAI_API_KEY: "sk-from-env" }))
      assert.strictEqual(server.requests[0]!.headers.authorization, undefined)
      assert.strictEqual(server.requests[0]!.body.keep_alive, "5m")
      assert.strictEqual(server.requests[0]!.body.max_tokens, undefined)
      assert.strictEqual(server.requests[1]!.headers.authorization, "Bearer sk-from-env")
    }))
})

describe("OpenAiChat stream decoding", () => {
  const chunk = (delta: unknown, extra: Record<string, unknown> = {}) => ({
    id: "chatcmpl-x",
    model: "qwen3:8b",
    choices: [{ index: 0, delta, finish_reason: null }],
    ...extra
  })

  it.effect("decodes reasoning deltas, cached tokens, and passes malformed arguments and unknown tools through", () =>
    Effect.gen(function*() {
      const body = TestServer.events(
        chunk({ role: "assistant", reasoning_content: "Think" }),
        chunk({ reasoning_content: "ing." }),
        chunk({ content: "Calling." }),
        chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "search", arguments: "" } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: "{\"q\": \"Par" } }] }),
        chunk({ tool_calls: [{ index: 1, id: "call_b", function: { name: "get_weather", arguments: "{}" } }] }),
        { id: "chatcmpl-x", model: "qwen3:8b", choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
        {
          id: "chatcmpl-x",
          model: "qwen3:8b",
          choices: [],
          usage: {
            prompt_tokens: 100,
            completion_tokens: 20,
            prompt_tokens_details: { cached_tokens: 60 },
            completion_tokens_details: { reasoning_tokens: 5 }
          }
        },
        "[DONE]"
      )
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(body)))
      const response = yield* ProviderTest.generate("hi").pipe(Effect.provide(layer(server.baseUrl)))
      assert.strictEqual(response.reasoningText, "Thinking.")
      assert.strictEqual(response.text, "Calling.")
      const [search, weather] = response.toolCalls
      assert.deepStrictEqual([search?.id, search?.name, weather?.id, weather?.name, weather?.params], [
        "call_a",
        "search",
        "call_b",
        "get_weather",
        {}
      ])
      const malformed = search?.params
      assert(ToolArguments.isMalformed(malformed))
      assert.strictEqual(malformed.raw, "{\"q\": \"Par")
      assert.include(malformed.error, "JSON")
      assert.strictEqual(response.finishReason, "tool-calls")
      assert.deepStrictEqual({ ...response.usage.inputTokens }, { total: 100, uncached: 40, cacheRead: 60, cacheWrite: 0 })
      assert.deepStrictEqual({ ...response.usage.outputTokens }, { total: 20, reasoning: 5 })
      assert.deepStrictEqual(response.content.map((part) => part.type), [
        "response-metadata",
        "reasoning",
        "text",
        "tool-call",
        "tool-call",
        "finish"
      ])
      // Not in the price table: no cost.
      assert.deepStrictEqual(response.content.at(-1)!.metadata, {})
    }))

  it.effect("a finish reason it does not know is other, even one named like an object's method", () =>
    Effect.gen(function*() {
      for (const [sent, expected] of [["toString", "other"], ["constructor", "other"], ["length", "length"]]) {
        const body = TestServer.events(
          chunk({ content: "Hi." }),
          { id: "chatcmpl-x", model: "qwen3:8b", choices: [{ index: 0, delta: {}, finish_reason: sent }] },
          "[DONE]"
        )
        const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(body)))
        const response = yield* ProviderTest.generate("hi").pipe(Effect.provide(layer(server.baseUrl)))
        assert.strictEqual(response.finishReason, expected, sent)
      }
    }))

  it.effect("a tool call whose first delta has no id is an invalid stream", () =>
    Effect.gen(function*() {
      const body = TestServer.events(
        chunk({ tool_calls: [{ index: 0, function: { name: "search", arguments: "{}" } }] }),
        "[DONE]"
      )
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(body)))
      const exit = yield* Effect.exit(ProviderTest.generate("hi").pipe(Effect.provide(layer(server.baseUrl))))
      assert.include(String(exit), "the first delta of tool call 0 has no id")
    }))
})
