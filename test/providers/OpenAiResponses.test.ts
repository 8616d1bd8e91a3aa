import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { Tool } from "effect/ai"
import { OpenAiResponses } from "effect-agent/providers"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const layer = (baseUrl: string, options: Partial<OpenAiResponses.Options> = {}) =>
  OpenAiResponses.layer({ model: "gpt-5", apiKey: Redacted.make(ProviderTest.apiKey), baseUrl, ...options }).pipe(
    Layer.provide(ProviderTest.client)
  )

const reasoningFixture = "openai-responses/reasoning-summary-plus-tool_gpt-5.sse"

const replay = (file: string) => TestServer.start(() => Effect.succeed(TestServer.sse(TestServer.fixture(file))))

/** The data of the fixture's events of a type, parsed. */
const fixtureEvents = (file: string, type: string): Array<any> =>
  TestServer.fixture(file).split("\n").filter((line) => line.startsWith("data: ")).map((line) =>
    JSON.parse(line.slice(6))
  ).filter((event) => event.type === type)

describe("OpenAiResponses", () => {
  it.effect("replays a recorded text stream", () =>
    Effect.gen(function*() {
      const server = yield* replay("openai-responses/simple-text_gpt-4o.sse")
      const parts = yield* ProviderTest.streamParts("hi").pipe(Effect.provide(layer(server.baseUrl)))
      const id = "msg_099d6c816b4d9f35016a3c11fb338081a289266547cae6ff41:0"
      assert.deepStrictEqual(ProviderTest.plain(parts.slice(1, -1)), [
        { type: "text-start", id, metadata: {} },
        { type: "text-delta", id, delta: "Olá", metadata: {} },
        { type: "text-delta", id, delta: "!", metadata: {} },
        { type: "text-end", id, metadata: {} }
      ])
      const metadata = parts[0]
      assert(metadata?.type === "response-metadata")
      assert.deepStrictEqual(
        [metadata.id, metadata.modelId],
        ["resp_099d6c816b4d9f35016a3c11f9593481a2a77e9b90b888ae50", "gpt-4o-2024-08-06"]
      )
      assert.deepStrictEqual(ProviderTest.finishOf(parts), {
        reason: "stop",
        inputTokens: { total: 20, uncached: 20, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 3, reasoning: 0 },
        metadata: { "effect-agent": { costUsd: (20 * 2.5 + 3 * 10) / 1e6 } }
      })
    }))

  it.effect("replays recorded reasoning summaries with encrypted content, then a function call", () =>
    Effect.gen(function*() {
      const server = yield* replay(reasoningFixture)
      const parts = yield* ProviderTest.streamParts("Weather in Florence?").pipe(Effect.provide(layer(server.baseUrl)))
      const itemId = "rs_017e85da2ae23b69016a3c1251dcec819daf72930a854fd4d1"
      const callId = "call_zgUaIBRPTwxxOusyyKw5NVMH"
      const [summary] = fixtureEvents(reasoningFixture, "response.reasoning_summary_text.done")
      const [added] = fixtureEvents(reasoningFixture, "response.output_item.added")
      const [done] = fixtureEvents(reasoningFixture, "response.output_item.done")
      const encryptedContent: string = done.item.encrypted_content
      assert.notStrictEqual(encryptedContent, added.item.encrypted_content)
      assert.strictEqual(parts.filter((part) => part.type === "reasoning-delta").length, 75)
      assert.strictEqual(
        parts.flatMap((part) => part.type === "reasoning-delta" ? [part.delta] : []).join(""),
        summary.text
      )
      assert.deepStrictEqual(
        ProviderTest.plain(parts.filter((part) => part.type !== "reasoning-delta" && part.type !== "tool-params-delta")
          .slice(1, -1)),
        [
          { type: "reasoning-start", id: `${itemId}:0`, metadata: {} },
          { type: "reasoning-end", id: `${itemId}:0`, metadata: { openai: { itemId, encryptedContent } } },
          { type: "tool-params-start", id: callId, name: "weather", providerExecuted: false, metadata: {} },
          { type: "tool-params-end", id: callId, metadata: {} },
          {
            type: "tool-call",
            id: callId,
            name: "weather",
            params: { location: "Florence, Italy" },
            providerExecuted: false,
            metadata: { openai: { itemId: "fc_017e85da2ae23b69016a3c12560820819db3b6e8a38dddad65" } }
          }
        ]
      )
      assert.deepStrictEqual(
        parts.flatMap((part) => part.type === "tool-params-delta" ? [part.delta] : []),
        ["{\"", "location", "\":\"", "Flor", "ence", ",", " Italy", "\"}"]
      )
      assert.deepStrictEqual(ProviderTest.finishOf(parts), {
        reason: "tool-calls",
        inputTokens: { total: 63, uncached: 63, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 121, reasoning: 64 },
        metadata: { "effect-agent": { costUsd: (63 * 1.25 + 121 * 10) / 1e6 } }
      })
      const response = yield* ProviderTest.generate("again").pipe(Effect.provide(layer(server.baseUrl)))
      assert.strictEqual(response.reasoningText, summary.text)
      assert.deepStrictEqual(response.reasoning.map((part) => part.metadata), [{ openai: { itemId, encryptedContent } }])
      assert.deepStrictEqual(
        response.toolCalls.map((call) => [call.id, call.name, call.params]),
        [[callId, "weather", { location: "Florence, Italy" }]]
      )
      assert.strictEqual(response.finishReason, "tool-calls")
    }))

  it.effect("encodes a stateless transcript: encrypted reasoning without ids, function calls and outputs", () =>
    Effect.gen(function*() {
      const server = yield* replay("openai-responses/simple-text_gpt-4o.sse")
      yield* ProviderTest.generate(
        ProviderTest.transcript({ openai: { itemId: "rs_1", encryptedContent: "enc-1" } }, { openai: { itemId: "fc_1" } })
      ).pipe(Effect.provide(layer(server.baseUrl, { reasoning: { effort: "low", summary: "auto" }, maxOutputTokens: 900 })))
      const [request] = server.requests
      assert.strictEqual(request!.url, "/responses")
      assert.strictEqual(request!.headers.authorization, `Bearer ${ProviderTest.apiKey}`)
      const image = { type: "input_image", image_url: `data:image/png;base64,${ProviderTest.png}` }
      assert.deepStrictEqual(request!.body, {
        model: "gpt-5",
        stream: true,
        store: false,
        include: ["reasoning.encrypted_content"],
        reasoning: { effort: "low", summary: "auto" },
        max_output_tokens: 900,
        input: [
          { role: "system", content: "Be brief." },
          {
            role: "user",
            content: [
              { type: "input_text", text: "What is in this image?" },
              image,
              { type: "input_image", image_url: "https://example.com/cat.jpg" }
            ]
          },
          {
            type: "reasoning",
            encrypted_content: "enc-1",
            summary: [{ type: "summary_text", text: "The user wants the weather." }]
          },
          { role: "assistant", content: "Let me check." },
          { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
          { type: "function_call", call_id: "call_2", name: "get_weather", arguments: "{\"city\":" },
          { type: "function_call_output", call_id: "call_1", output: "18°C and sunny" },
          {
            type: "function_call_output",
            call_id: "call_2",
            output: [{ type: "input_text", text: "The arguments were not valid JSON." }, image]
          },
          { role: "system", content: "Wrap up now." },
          { role: "user", content: [{ type: "input_text", text: "Thanks" }] }
        ],
        tools: [{
          type: "function",
          name: "get_weather",
          description: "Current weather for a city",
          parameters: Tool.getJsonSchema(ProviderTest.GetWeather),
          strict: false
        }],
        tool_choice: "auto"
      })
    }))

  it.effect("sends item ids back when responses are stored, and no include", () =>
    Effect.gen(function*() {
      const server = yield* replay("openai-responses/simple-text_gpt-4o.sse")
      yield* ProviderTest.generate(
        ProviderTest.transcript({ openai: { itemId: "rs_1" } }, { openai: { itemId: "fc_1" } })
      ).pipe(Effect.provide(layer(server.baseUrl, { store: true, reasoning: { effort: "low" } })))
      const body = server.requests[0]!.body
      assert.strictEqual(body.store, true)
      assert.strictEqual(body.include, undefined)
      assert.deepStrictEqual(body.input[2], {
        type: "reasoning",
        id: "rs_1",
        summary: [{ type: "summary_text", text: "The user wants the weather." }]
      })
      assert.deepStrictEqual(body.input[4], {
        type: "function_call",
        call_id: "call_1",
        name: "get_weather",
        arguments: "{\"city\":\"Paris\"}",
        id: "fc_1"
      })
    }))
})
