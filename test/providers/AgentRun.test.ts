/**
 * A whole run of the agent loop on each real provider, against a local server:
 * turn 1 streams a recorded tool call, the tool runs, turn 2 answers. The
 * second request shows what the loop and the provider replay together: the
 * assistant turn (with its reasoning, signed or encrypted, exactly as the
 * provider sent it) and the tool result.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Redacted, Schema, Stream } from "effect"
import { HttpServerResponse } from "effect/http"
import { type LanguageModel, Tool, Toolkit } from "effect/ai"
import { Agent, AgentEvent, Message, ToolRegistry } from "effect-agent"
import { Anthropic, OpenAiChat, OpenAiResponses } from "effect-agent/providers"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const GetWeather = Tool.make("get_weather", {
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.Struct({ celsius: Schema.Finite })
})
const Weather = Tool.make("weather", {
  parameters: Schema.Struct({ location: Schema.String }),
  success: Schema.Struct({ celsius: Schema.Finite })
})
const Tools = Toolkit.make(GetWeather, Weather)
const calls: Array<string> = []
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({
    get_weather: ({ city }) => Effect.sync(() => (calls.push(city), { celsius: 21 })),
    weather: ({ location }) => Effect.sync(() => (calls.push(location), { celsius: 24 }))
  }))
)

/** Serves the recorded tool-call stream, then the recorded answer. */
const twoTurns = (first: string, second: string) =>
  TestServer.start((_, index) =>
    Effect.succeed(TestServer.sse(TestServer.fixture(index === 0 ? first : second)))
  )

const runOn = (model: Layer.Layer<LanguageModel.LanguageModel, unknown>, prompt: string) =>
  Agent.run({ system: "Answer weather questions with the tools.", prompt }).pipe(
    Effect.provide(Layer.merge(ToolsLive, model))
  )

const key = Redacted.make(ProviderTest.apiKey)

describe("Agent.run on the real providers", () => {
  it.effect("OpenAiChat: a tool call, its result, an answer", () =>
    Effect.gen(function*() {
      calls.length = 0
      const server = yield* twoTurns(
        "openai-chat/openai-python_single-tool-call_gpt-4o.sse",
        "openai-chat/openai-python_text-with-usage_gpt-4o.sse"
      )
      const model = OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const result = yield* runOn(model, "Weather in NYC?")
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(calls, ["New York City"])
      assert.isTrue(Message.textOf(result.messages.at(-1)!).startsWith("I'm unable to provide real-time weather updates."))
      assert.deepStrictEqual(result.usage, {
        input: 44 + 14,
        output: 16 + 30,
        cacheRead: 0,
        cacheWrite: 0,
        reasoning: 0,
        cost: (44 * 2.5 + 16 * 10) / 1e6 + (14 * 2.5 + 30 * 10) / 1e6
      })
      const second = server.requests[1]!.body
      assert.deepStrictEqual(second.messages, [
        { role: "system", content: "Answer weather questions with the tools." },
        { role: "user", content: "Weather in NYC?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_4XzlGBLtUe9dy3GVNV4jhq7h",
            type: "function",
            function: { name: "get_weather", arguments: "{\"city\":\"New York City\"}" }
          }]
        },
        { role: "tool", tool_call_id: "call_4XzlGBLtUe9dy3GVNV4jhq7h", content: "{\"celsius\":21}" }
      ])
    }))

  it.effect("duplicate-id attack: OpenAiChat streams two calls with one id; each goes back with its own id and result", () =>
    Effect.gen(function*() {
      calls.length = 0
      const chunk = (delta: unknown, finish: string | null = null) => ({
        id: "chatcmpl-1",
        object: "chat.completion.chunk",
        model: "gpt-4o",
        choices: [{ index: 0, delta, finish_reason: finish }]
      })
      const start = (index: number) => ({
        tool_calls: [{ index, id: "call_0", type: "function", function: { name: "get_weather", arguments: "" } }]
      })
      const args = (index: number, text: string) => ({ tool_calls: [{ index, function: { arguments: text } }] })
      // The calls' arguments stream one after the other; the provider ends both calls at the finish.
      const first = TestServer.events(
        chunk(start(0)),
        chunk(args(0, "{\"city\":\"Paris\"}")),
        chunk(start(1)),
        chunk(args(1, "{\"city\":")),
        chunk(args(1, "\"Rome\"}")),
        chunk({}, "tool_calls"),
        "[DONE]"
      )
      const server = yield* TestServer.start((_, index) =>
        Effect.succeed(
          TestServer.sse(index === 0 ? first : TestServer.fixture("openai-chat/openai-python_text-with-usage_gpt-4o.sse"))
        )
      )
      const model = OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const deltas: Array<string> = []
      const result = yield* Agent.run({
        prompt: "Weather in Paris and Rome?",
        plugins: [{
          name: "deltas",
          onEvent: (event) =>
            Effect.sync(() => {
              if (event._tag === "MessageUpdate" && event.delta.type === "toolCall") {
                deltas.push(`${event.delta.id} ${event.delta.name} ${event.delta.delta}`)
              }
            })
        }]
      }).pipe(Effect.provide(Layer.merge(ToolsLive, model)))
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(calls, ["Paris", "Rome"])
      // Each delta names the call it belongs to, by the id the call has in the transcript.
      assert.deepStrictEqual(deltas, [
        "call_0 get_weather {\"city\":\"Paris\"}",
        "call_0_2 get_weather {\"city\":",
        "call_0_2 get_weather \"Rome\"}"
      ])
      const second = server.requests[1]!.body
      assert.deepStrictEqual(second.messages, [
        { role: "user", content: "Weather in Paris and Rome?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "call_0", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } },
            { id: "call_0_2", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Rome\"}" } }
          ]
        },
        { role: "tool", tool_call_id: "call_0", content: "{\"celsius\":21}" },
        { role: "tool", tool_call_id: "call_0_2", content: "{\"celsius\":21}" }
      ])
    }))

  it.effect("a server naming its model `constructor` costs nothing known: no NaN cost, the cost budget still counts", () =>
    Effect.gen(function*() {
      // The model id is the server's text; it once found Object's constructor as a price, made the cost NaN, and
      // a cost budget compares NaN as never reached.
      const server = yield* TestServer.start(() =>
        Effect.succeed(TestServer.sse(
          TestServer.fixture("openai-chat/openai-python_text-with-usage_gpt-4o.sse")
            .replaceAll("\"model\":\"gpt-4o-2024-08-06\"", "\"model\":\"constructor\"")
        ))
      )
      const model = OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const result = yield* Agent.run({ prompt: "hi", config: { budgets: { costUsd: 1 } } }).pipe(
        Effect.provide(Layer.merge(ToolsLive, model))
      )
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.strictEqual(result.usage.cost, undefined)
      assert.strictEqual(result.usage.input, 14)
    }))

  it.effect("OpenAiResponses: encrypted reasoning and the function call go back with the output", () =>
    Effect.gen(function*() {
      calls.length = 0
      const first = "openai-responses/reasoning-summary-plus-tool_gpt-5.sse"
      const server = yield* twoTurns(first, "openai-responses/simple-text_gpt-4o.sse")
      const model = OpenAiResponses.layer({
        model: "gpt-5",
        apiKey: key,
        baseUrl: server.baseUrl,
        reasoning: { effort: "high", summary: "detailed" }
      }).pipe(Layer.provide(ProviderTest.client))
      const result = yield* runOn(model, "Weather in Florence?")
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(calls, ["Florence, Italy"])
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "Olá!")
      const encrypted = TestServer.fixture(first).split("\n").filter((line) => line.includes("\"response.output_item.done\""))
        .map((line) => JSON.parse(line.slice(6))).find((event) => event.item.type === "reasoning").item.encrypted_content
      const summary = TestServer.fixture(first).split("\n").filter((line) =>
        line.includes("\"response.reasoning_summary_text.done\"")
      ).map((line) => JSON.parse(line.slice(6)))[0].text
      const second = server.requests[1]!.body
      assert.deepStrictEqual(second.include, ["reasoning.encrypted_content"])
      assert.deepStrictEqual(second.input, [
        { role: "system", content: "Answer weather questions with the tools." },
        { role: "user", content: [{ type: "input_text", text: "Weather in Florence?" }] },
        { type: "reasoning", encrypted_content: encrypted, summary: [{ type: "summary_text", text: summary }] },
        {
          type: "function_call",
          call_id: "call_zgUaIBRPTwxxOusyyKw5NVMH",
          name: "weather",
          arguments: "{\"location\":\"Florence, Italy\"}"
        },
        { type: "function_call_output", call_id: "call_zgUaIBRPTwxxOusyyKw5NVMH", output: "{\"celsius\":24}" }
      ])
    }))

  it.effect("Anthropic: the signed thinking block and the tool use go back, the result follows", () =>
    Effect.gen(function*() {
      calls.length = 0
      const first = "anthropic/thinking-plus-tool-use_claude-sonnet-4.sse"
      const server = yield* twoTurns(first, "anthropic/simple-text_claude-sonnet-4.sse")
      const model = Anthropic.layer({
        model: "claude-sonnet-4",
        apiKey: key,
        baseUrl: server.baseUrl,
        thinking: { budgetTokens: 1024 }
      }).pipe(Layer.provide(ProviderTest.client))
      const result = yield* runOn(model, "Weather in Florence?")
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(calls, ["Florence, Italy"])
      const assistant = result.messages[1]
      assert(assistant?.role === "assistant")
      const reasoning = assistant.content[0]
      assert(reasoning?.type === "reasoning")
      const signature: string = JSON.parse(
        TestServer.fixture(first).split("\n").find((line) => line.includes("signature_delta"))!.slice(6)
      ).delta.signature
      assert.strictEqual(reasoning.signature, signature)
      const second = server.requests[1]!.body
      const cache = { type: "ephemeral" }
      assert.deepStrictEqual(second.system, [
        { type: "text", text: "Answer weather questions with the tools.", cache_control: cache }
      ])
      assert.deepStrictEqual(second.messages, [
        { role: "user", content: [{ type: "text", text: "Weather in Florence?" }] },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: reasoning.text, signature },
            {
              type: "tool_use",
              id: "toolu_01Js4AMfx5qpTLhwTusnvT68",
              name: "weather",
              input: { location: "Florence, Italy" }
            }
          ]
        },
        {
          role: "user",
          content: [{
            type: "tool_result",
            tool_use_id: "toolu_01Js4AMfx5qpTLhwTusnvT68",
            content: "{\"celsius\":24}",
            cache_control: cache
          }]
        }
      ])
      assert.strictEqual(result.usage.input, 424 + 16)
      assert.strictEqual(result.usage.output, 119 + 38)
    }))

  it.effect("a provider failure ends the run with a ModelError; no event, error or state holds the key", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() =>
        Effect.succeed(HttpServerResponse.jsonUnsafe(
          { type: "error", error: { type: "authentication_error", message: `invalid x-api-key ${ProviderTest.apiKey}` } },
          { status: 401 }
        ))
      )
      const model = Anthropic.layer({ model: "claude-sonnet-4", apiKey: key, baseUrl: server.baseUrl }).pipe(
        Layer.provide(ProviderTest.client)
      )
      const events: Array<AgentEvent.AgentEvent> = []
      const exit = yield* Agent.runStream({ prompt: "Weather in Florence?" }).pipe(
        Stream.runForEach((event) => Effect.sync(() => events.push(event))),
        Effect.provide(Layer.merge(ToolsLive, model)),
        Effect.exit
      )
      assert(Exit.isFailure(exit))
      const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
      assert(error?._tag === "Fail" && error.error._tag === "ModelError")
      assert.strictEqual(error.error.reason._tag, "AuthenticationError")
      assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
      const persisted = events.map((event) => Schema.encodeSync(AgentEvent.AgentEventJson)(event))
      for (const text of [JSON.stringify(persisted), JSON.stringify(error.error), String(exit.cause)]) {
        assert.notInclude(text, ProviderTest.apiKey)
      }
      assert.include(JSON.stringify(error.error), "invalid x-api-key <redacted>")
    }))
})
