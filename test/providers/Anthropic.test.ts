import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer, Redacted } from "effect"
import { LanguageModel, Tool } from "effect/ai"
import { Message } from "effect-agent"
import { Anthropic } from "effect-agent/providers"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const layer = (baseUrl: string, options: Partial<Anthropic.Options> = {}) =>
  Anthropic.layer({ model: "claude-sonnet-4", apiKey: Redacted.make(ProviderTest.apiKey), baseUrl, ...options }).pipe(
    Layer.provide(ProviderTest.client)
  )

const replay = (file: string) =>
  TestServer.start(() => Effect.succeed(TestServer.sse(TestServer.fixture(`anthropic/${file}`))))

const signature =
  "EtYDCkYICxgCKkAVHEWRYo6RgSMs4ZZDX4gW16kdfp2EIXftcLesVephGa/p1m+1Y8mRQPvvKOQICrOkGKYoJBKSNLJ4ukI/mo6LEgx7FMTwIpYzM2WTWT8aDKY6c2i52xIX2NYX3SIwY5gI8frldE4pwUhseod0S0xZV2hTAQhqMCOu4+effAu250K2RPrqrO98+VD/hjF9Kr0C7EzGQ7dZ7MNwrkE+tCARkzIRk5Wtv8vVAhADlMcs78QvxmjOToU65I91p7w2/VP11peDoc9+7AbyldRKGp3chNnQgXHI7ObK89s0ltFBGrLf6tegaQL9httOtcUGCioZnI9LI9vJHMlQeoZiiWRq8hVbHlHc3f6BwBqlUJhYUyk7ld34UoaSNc5UKUNuLAmkOLg3KQLdbI7b3BQVdsWOhNTKd12fRJQcOLhXNSCv7hQ9FtWfV5C+pX59xF6YYIO3TCPUqWSubCtqdrDEoQVWdHtyveFA+4iixZxyqZ7Ea+kzbmc/6pXxwO2MX0rHrbe/yXWYAmU/XxY9HJTzXEO+CibGQOAaHdC11s8gOCFb8EWt3ALguFfj/p2SJtqybC44Alrjnhjqk+7Mi+DoMcINUh7SCK9rVl4VeDhPFVAYAQ=="

describe("Anthropic", () => {
  it.effect("replays a recorded text stream with pings and padded JSON", () =>
    Effect.gen(function*() {
      const server = yield* replay("simple-text_claude-sonnet-4.sse")
      const parts = yield* ProviderTest.streamParts("hi").pipe(Effect.provide(layer(server.baseUrl)))
      const text =
        "Olá! (That's \"hi\" in Portuguese)\n\nYou could also say \"Oi!\" which is a more casual way to say hi in Portuguese."
      const types = parts.map((part) => part.type)
      assert.deepStrictEqual(types.filter((type) => type !== "text-delta"), [
        "response-metadata",
        "text-start",
        "text-end",
        "finish"
      ])
      assert.strictEqual(types.filter((type) => type === "text-delta").length, 12)
      assert.strictEqual(parts.flatMap((part) => part.type === "text-delta" ? [part.delta] : []).join(""), text)
      const metadata = parts[0]
      assert(metadata?.type === "response-metadata")
      assert.deepStrictEqual([metadata.id, metadata.modelId], ["msg_01R8GdyyLQUhUfyjqSCMbnWg", "claude-sonnet-4-20250514"])
      assert.deepStrictEqual(ProviderTest.finishOf(parts), {
        reason: "stop",
        inputTokens: { total: 16, uncached: 16, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 38 },
        metadata: { "effect-agent": { costUsd: (16 * 3 + 38 * 15) / 1e6 } }
      })
      const response = yield* ProviderTest.generate("hi").pipe(Effect.provide(layer(server.baseUrl)))
      assert.strictEqual(response.text, text)
      assert.strictEqual(response.finishReason, "stop")
    }))

  it.effect("replays recorded thinking with its signature, then a tool call from input_json_delta pieces", () =>
    Effect.gen(function*() {
      const server = yield* replay("thinking-plus-tool-use_claude-sonnet-4.sse")
      const parts = yield* ProviderTest.streamParts("Weather in Florence?").pipe(Effect.provide(layer(server.baseUrl)))
      const id = "toolu_01Js4AMfx5qpTLhwTusnvT68"
      const thinking =
        "The user is asking for weather information for Florence, Italy. I have access to a weather function that takes a location parameter. The user has provided the location as \"Florence, Italy\" which is specific enough for the weather function. I have all the required parameters to make the function call."
      assert.strictEqual(parts.filter((part) => part.type === "reasoning-delta").length, 21)
      assert.strictEqual(parts.flatMap((part) => part.type === "reasoning-delta" ? [part.delta] : []).join(""), thinking)
      assert.deepStrictEqual(
        ProviderTest.plain(parts.filter((part) => part.type !== "reasoning-delta").slice(1, -1)),
        [
          { type: "reasoning-start", id: "0", metadata: {} },
          { type: "reasoning-end", id: "0", metadata: { anthropic: { signature } } },
          { type: "tool-params-start", id, name: "weather", providerExecuted: false, metadata: {} },
          ...["{\"", "lo", "catio", "n\": \"Florenc", "e, Italy", "\"}"].map((delta) => ({
            type: "tool-params-delta",
            id,
            delta,
            metadata: {}
          })),
          { type: "tool-params-end", id, metadata: {} },
          {
            type: "tool-call",
            id,
            name: "weather",
            params: { location: "Florence, Italy" },
            providerExecuted: false,
            metadata: {}
          }
        ]
      )
      assert.deepStrictEqual(ProviderTest.finishOf(parts), {
        reason: "tool-calls",
        inputTokens: { total: 424, uncached: 424, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 119 },
        metadata: { "effect-agent": { costUsd: (424 * 3 + 119 * 15) / 1e6 } }
      })
      const response = yield* ProviderTest.generate("again").pipe(Effect.provide(layer(server.baseUrl)))
      assert.strictEqual(response.reasoningText, thinking)
      assert.deepStrictEqual(response.reasoning.map((part) => part.metadata), [{ anthropic: { signature } }])
      assert.deepStrictEqual(
        response.toolCalls.map((call) => [call.id, call.name, call.params]),
        [[id, "weather", { location: "Florence, Italy" }]]
      )
    }))

  it.effect("encodes a transcript: system prompt, thinking replay, merged tool results, wrapped late system text", () =>
    Effect.gen(function*() {
      const server = yield* replay("simple-text_claude-sonnet-4.sse")
      yield* ProviderTest.generate(ProviderTest.transcript({ anthropic: { signature: "sig-1" } })).pipe(
        Effect.provide(layer(server.baseUrl, { thinking: { budgetTokens: 2048 } }))
      )
      const [request] = server.requests
      assert.strictEqual(request!.url, "/v1/messages")
      assert.strictEqual(request!.headers["x-api-key"], ProviderTest.apiKey)
      assert.strictEqual(request!.headers["anthropic-version"], "2023-06-01")
      const cache = { type: "ephemeral" }
      const image = { type: "image", source: { type: "base64", media_type: "image/png", data: ProviderTest.png } }
      assert.deepStrictEqual(request!.body, {
        model: "claude-sonnet-4",
        max_tokens: 8192 + 2048,
        stream: true,
        thinking: { type: "enabled", budget_tokens: 2048 },
        system: [{ type: "text", text: "Be brief.", cache_control: cache }],
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "What is in this image?" },
              image,
              { type: "image", source: { type: "url", url: "https://example.com/cat.jpg" } }
            ]
          },
          {
            role: "assistant",
            content: [
              { type: "thinking", thinking: "The user wants the weather.", signature: "sig-1" },
              { type: "text", text: "Let me check." },
              { type: "tool_use", id: "call_1", name: "get_weather", input: { city: "Paris" } },
              { type: "tool_use", id: "call_2", name: "get_weather", input: {} }
            ]
          },
          {
            role: "user",
            content: [
              { type: "tool_result", tool_use_id: "call_1", content: "18°C and sunny" },
              {
                type: "tool_result",
                tool_use_id: "call_2",
                content: [{ type: "text", text: "The arguments were not valid JSON." }, image],
                is_error: true
              },
              { type: "text", text: "<system>\nWrap up now.\n</system>" },
              { type: "text", text: "Thanks", cache_control: cache }
            ]
          }
        ],
        tools: [{
          name: "get_weather",
          description: "Current weather for a city",
          input_schema: Tool.getJsonSchema(ProviderTest.GetWeather),
          cache_control: cache
        }],
        tool_choice: { type: "auto" }
      })
    }))

  it.effect("replays redacted thinking and a bare signature, drops unsigned reasoning, caches nothing when told", () =>
    Effect.gen(function*() {
      const server = yield* replay("simple-text_claude-sonnet-4.sse")
      const prompt = Message.toPrompt([
        Message.user("hi"),
        {
          role: "assistant",
          content: [
            { type: "reasoning", text: "", redacted: true, providerData: { anthropic: { redactedData: "opaque" } } },
            { type: "reasoning", text: "Signed by the app.", signature: "sig-2" },
            { type: "reasoning", text: "From another provider.", providerData: { openai: { itemId: "rs_1" } } },
            { type: "text", text: "Hello." }
          ],
          stopReason: "stop",
          usage: Message.emptyUsage
        },
        Message.user("Again")
      ])
      yield* ProviderTest.generate(prompt).pipe(Effect.provide(layer(server.baseUrl, { promptCaching: false })))
      const body = server.requests[0]!.body
      assert.deepStrictEqual(body.messages, [
        { role: "user", content: [{ type: "text", text: "hi" }] },
        {
          role: "assistant",
          content: [
            { type: "redacted_thinking", data: "opaque" },
            { type: "thinking", thinking: "Signed by the app.", signature: "sig-2" },
            { type: "text", text: "Hello." }
          ]
        },
        { role: "user", content: [{ type: "text", text: "Again" }] }
      ])
      assert.strictEqual(body.system, undefined)
      assert.strictEqual(JSON.stringify(body).includes("cache_control"), false)
    }))

  it.effect("tool choice none still declares the tools, which a transcript with tool_use blocks needs", () =>
    Effect.gen(function*() {
      const server = yield* replay("simple-text_claude-sonnet-4.sse")
      yield* LanguageModel.generateText({
        prompt: ProviderTest.transcript({}),
        toolkit: ProviderTest.Tools,
        toolChoice: "none",
        disableToolCallResolution: true,
        toolCallValidation: "deferred"
      }).pipe(Effect.provide(layer(server.baseUrl)))
      const body = server.requests[0]!.body
      assert.deepStrictEqual(body.tool_choice, { type: "none" })
      assert.deepStrictEqual(body.tools.map((tool: { name: string }) => tool.name), ["get_weather"])
    }))

  it.effect("fails to build without a key, naming ANTHROPIC_API_KEY; reads it from the environment", () =>
    Effect.gen(function*() {
      const server = yield* replay("simple-text_claude-sonnet-4.sse")
      const fromEnv = Anthropic.layer({ model: "claude-sonnet-4", baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const withEnv = (env: Record<string, string>) =>
        Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(env))
      const missing = yield* Effect.exit(ProviderTest.generate("hi").pipe(Effect.provide(fromEnv), withEnv({})))
      assert(Exit.isFailure(missing))
      assert.include(String(missing.cause), "ANTHROPIC_API_KEY")
      yield* ProviderTest.generate("hi").pipe(Effect.provide(fromEnv), withEnv({ ANTHROPIC_API_KEY: "sk-ant-env" }))
      assert.strictEqual(server.requests.length, 1)
      assert.strictEqual(server.requests[0]!.headers["x-api-key"], "sk-ant-env")
    }))
})
