/**
 * A run's spans exported over OTLP/HTTP (effect/observability's exporter,
 * JSON) to a real receiver on 127.0.0.1, with a real provider against a
 * local model server: the JSON the receiver got has the span tree (effect/ai's
 * own span and the HTTP client's under `chat`), the attributes, and no key
 * from the environment or the headers anywhere. The run's trajectory lines
 * carry the ids of the spans their events happened in.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, FileSystem, Layer, Path, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { OtlpSerialization, OtlpTracer } from "effect/observability"
import { Agent, ToolRegistry } from "effect-agent"
import { OpenAiChat } from "effect-agent/providers"
import { Trajectory } from "effect-agent/session"
import { receiver, spansOf } from "./otlpReceiver.ts"
import * as ProviderTest from "./providers/ProviderTest.ts"
import * as TestServer from "./providers/TestServer.ts"

const GetWeather = Tool.make("get_weather", {
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.Struct({ celsius: Schema.Finite })
})
const Tools = Toolkit.make(GetWeather)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ get_weather: () => Effect.succeed({ celsius: 21 }) }))
)

const envKey = "sk-env-7Q2mX9vB4kL1"
const headerKey = "hdr-secret-Zp8Rt3Wq6Yn0"

describe("Telemetry over OTLP/HTTP", () => {
  it.live("a run on OpenAiChat, exported as JSON to a local receiver: the span tree, attributes, no key", () =>
    Effect.gen(function*() {
      const otlp = yield* receiver
      const server = yield* TestServer.start((_, index) =>
        Effect.succeed(TestServer.sse(TestServer.fixture(
          index === 0
            ? "openai-chat/openai-python_single-tool-call_gpt-4o.sse"
            : "openai-chat/openai-python_text-with-usage_gpt-4o.sse"
        )))
      )
      const fs = yield* FileSystem.FileSystem
      const path = (yield* Path.Path).join(yield* fs.makeTempDirectoryScoped(), "trajectory.ndjson")
      const model = OpenAiChat.layer({ model: "gpt-4o", baseUrl: server.baseUrl, headers: { "x-team-key": headerKey } })
        .pipe(Layer.provide(ProviderTest.client))
      const tracing = OtlpTracer.layer({ url: `${otlp.url}/v1/traces`, resource: { serviceName: "telemetry-test" } })
        .pipe(Layer.provide([OtlpSerialization.layerJson, ProviderTest.client]))
      const result = yield* Agent.run({
        prompt: "Weather in NYC?",
        name: "weather",
        plugins: [Trajectory.ndjson(path)]
      }).pipe(
        Effect.provide(Layer.mergeAll(ToolsLive, model)),
        Effect.provide(tracing),
        // The provider reads its key from the environment (a record here: the process's is shared by the tests).
        Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord({ OPENAI_API_KEY: envKey }))
      )
      assert.strictEqual(result.outcome._tag, "Completed")
      // The keys did reach the model server: they were there to leak.
      assert.strictEqual(server.requests[0]!.headers.authorization, `Bearer ${envKey}`)
      assert.strictEqual(server.requests[0]!.headers["x-team-key"], headerKey)

      // The scope of the tracing layer closed with the run: its spans were flushed to the receiver.
      for (const body of otlp.bodies) {
        assert.strictEqual(body.path, "/v1/traces")
        assert.notInclude(body.text, envKey)
        assert.notInclude(body.text, headerKey)
        assert.notInclude(body.text, envKey.slice(3, 12))
      }
      const spans = spansOf(otlp.bodies)
      const byName = (name: string) => spans.filter((span) => span.name === name)
      const run = byName("invoke_agent weather")
      assert.strictEqual(run.length, 1)
      const root = run[0]!
      assert.isUndefined(root.parentSpanId)
      assert.strictEqual(root.status.code, 1) // OK
      assert.strictEqual(root.attributes["gen_ai.provider.name"], "openai")
      assert.strictEqual(root.attributes["gen_ai.request.model"], "gpt-4o")
      assert.strictEqual(root.attributes["gen_ai.usage.input_tokens"], result.usage.input)
      assert.strictEqual(root.attributes["effect_agent.outcome"], "Completed")
      for (const span of spans) assert.strictEqual(span.traceId, root.traceId, `${span.name} is in the run's trace`)

      const chats = byName("chat gpt-4o")
      assert.strictEqual(chats.length, 2)
      const replies = result.messages.filter((message) => message.role === "assistant")
      chats.forEach((chat, i) => {
        assert.strictEqual(chat.parentSpanId, root.spanId)
        assert.strictEqual(chat.kind, 3) // client
        const reply = replies[i]!
        assert.strictEqual(reply.role, "assistant")
        if (reply.role !== "assistant") return
        assert.deepStrictEqual(
          {
            provider: chat.attributes["gen_ai.provider.name"],
            request: chat.attributes["gen_ai.request.model"],
            response: chat.attributes["gen_ai.response.model"],
            finish: chat.attributes["gen_ai.response.finish_reasons"],
            input: chat.attributes["gen_ai.usage.input_tokens"],
            output: chat.attributes["gen_ai.usage.output_tokens"],
            cost: chat.attributes["effect_agent.usage.cost_usd"]
          },
          {
            provider: "openai",
            request: "gpt-4o",
            response: reply.model,
            finish: [i === 0 ? "tool_calls" : "stop"],
            input: reply.usage.input,
            output: reply.usage.output,
            cost: reply.usage.cost
          }
        )
        // effect/ai's span and the HTTP request under chat (effect/ai's streamText span does not parent the
        // stream it returns, so the request is its sibling).
        const children = spans.filter((span) => span.parentSpanId === chat.spanId)
        assert.deepStrictEqual(children.map((span) => span.name).sort(), ["LanguageModel.streamText", "POST"])
        const request = children.find((span) => span.name === "POST")!
        assert.strictEqual(request.attributes["http.response.status_code"], 200)
        assert.strictEqual(request.attributes["url.full"], `${server.baseUrl}/chat/completions`)
      })
      assert.isString(chats[0]!.attributes["gen_ai.response.model"])

      const tool = byName("execute_tool get_weather")
      assert.strictEqual(tool.length, 1)
      assert.strictEqual(tool[0]!.parentSpanId, root.spanId)
      assert.strictEqual(tool[0]!.attributes["gen_ai.tool.call.id"], "call_4XzlGBLtUe9dy3GVNV4jhq7h")
      assert.strictEqual(tool[0]!.status.code, 1)

      // Every trajectory line carries the ids of the span its event happened in.
      const lines = (yield* fs.readFileString(path)).trim().split("\n")
      const decoded = yield* Effect.forEach(lines, Trajectory.decodeLine)
      for (const line of decoded) assert.strictEqual(line.traceId, root.traceId, line.event._tag)
      const spanOf = (tag: string) => decoded.filter((line) => line.event._tag === tag).map((line) => line.spanId)
      assert.deepStrictEqual(spanOf("AgentStart"), [root.spanId])
      assert.deepStrictEqual(spanOf("AgentEnd"), [root.spanId])
      assert.deepStrictEqual(spanOf("MessageStart"), chats.map((chat) => chat.spanId))
      assert.deepStrictEqual(spanOf("MessageEnd"), chats.map((chat) => chat.spanId))
      assert.deepStrictEqual(spanOf("ToolExecutionStart"), [tool[0]!.spanId])
      assert.deepStrictEqual(spanOf("ToolExecutionEnd"), [tool[0]!.spanId])
      assert.deepStrictEqual(spanOf("TurnEnd"), [root.spanId, root.spanId])
      // A line written before the ids were (an older file) still loads, without them.
      const old = JSON.parse(lines[0]!)
      delete old.traceId
      delete old.spanId
      const oldLine = yield* Trajectory.decodeLine(JSON.stringify(old))
      assert.deepStrictEqual(oldLine, { event: decoded[0]!.event })
    }).pipe(Effect.provide(NodeServices.layer)))
})
