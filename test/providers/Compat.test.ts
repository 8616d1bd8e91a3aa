/**
 * `src/providers/internal/compat.ts` rebuilds, for the agent loop's calls,
 * what `LanguageModel.make`'s `streamText` does without promising it: the
 * request's options, its span, and the parts it decodes. Each test here runs
 * the same call through `LanguageModel.make` itself (`compat.StandardPath`)
 * and through the direct path, against a real server on 127.0.0.1 serving the
 * recorded streams, and fails when the installed `effect` changes under one
 * of those reaches: the parts, the request on the wire, the options the
 * provider is handed, the spans and their attributes, and a whole run's
 * transcript must be the same on both paths.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Schema, Stream, Tracer } from "effect"
import {
  type AiError,
  type LanguageModel,
  Prompt,
  type Response,
  ResponseIdTracker,
  Telemetry,
  Tool,
  Toolkit
} from "effect/ai"
import { Agent, type AgentEvent, ToolRegistry } from "effect-agent"
import { Anthropic, OpenAiChat, OpenAiResponses } from "effect-agent/providers"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as Compat from "../../src/providers/internal/compat.ts"
import * as OpenAiChatStream from "../../src/providers/internal/OpenAiChatStream.ts"
import * as Settings from "../../src/providers/internal/Settings.ts"
import * as SseTransport from "../../src/providers/internal/SseTransport.ts"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const key = Redacted.make(ProviderTest.apiKey)

interface Provider {
  readonly name: string
  readonly directory: string
  /** The recorded plain answer, served after a first turn's tool call. */
  readonly answer: string
  readonly layer: (baseUrl: string) => Layer.Layer<LanguageModel.LanguageModel, unknown>
}

const providers: ReadonlyArray<Provider> = [
  {
    name: "OpenAiChat",
    directory: "openai-chat",
    answer: "openai-python_text-with-usage_gpt-4o.sse",
    layer: (baseUrl) =>
      OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl }).pipe(Layer.provide(ProviderTest.client))
  },
  {
    name: "OpenAiResponses",
    directory: "openai-responses",
    answer: "simple-text_gpt-4o.sse",
    layer: (baseUrl) =>
      OpenAiResponses.layer({ model: "gpt-5", apiKey: key, baseUrl }).pipe(Layer.provide(ProviderTest.client))
  },
  {
    name: "Anthropic",
    directory: "anthropic",
    answer: "simple-text_claude-sonnet-4.sse",
    layer: (baseUrl) =>
      Anthropic.layer({ model: "claude-sonnet-4", apiKey: key, baseUrl }).pipe(Layer.provide(ProviderTest.client))
  }
]

const fixtures = (directory: string): ReadonlyArray<string> =>
  Fs.readdirSync(new URL(`../fixtures/providers/${directory}`, import.meta.url)).filter((file) => file.endsWith(".sse"))

/** Runs an effect with every call of our providers routed through `LanguageModel.make`. */
const throughMake = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.provideService(effect, Compat.StandardPath, true)

/** Both paths, `LanguageModel.make`'s first. */
const paths: ReadonlyArray<<A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>> = [
  throughMake,
  (effect) => effect
]

/** The direct path's parts without metadata share one frozen object; `LanguageModel.make` decodes a fresh one each. */
const direct = (parts: ReadonlyArray<Response.AnyPart>) => parts.filter((part) => Object.isFrozen(part.metadata)).length

/** A tracer keeping every span it makes. */
const recording = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({
    span: (options) => {
      const span = new Tracer.NativeSpan(options)
      spans.push(span)
      return span
    }
  })
  return { spans, tracer }
}

/** What a span tells its tracer, without its ids and times. */
const spanRecord = (span: Tracer.Span) => ({
  name: span.name,
  kind: span.kind,
  parent: span.parent._tag === "Some" && span.parent.value._tag === "Span" ? span.parent.value.name : undefined,
  attributes: Object.fromEntries(span.attributes),
  events: span instanceof Tracer.NativeSpan ? span.events.map(([name, , attributes]) => [name, attributes]) : [],
  status: span.status._tag === "Ended" ? span.status.exit._tag : "open"
})

/** A value with each run's own id (random per run) replaced, at any depth of plain objects and arrays. */
const withoutRunIds = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(withoutRunIds)
  if (typeof value !== "object" || value === null || Object.getPrototypeOf(value) !== Object.prototype) return value
  return Object.fromEntries(
    Object.entries(value).map(([key, field]) => [key, key === "runId" ? "run" : withoutRunIds(field)])
  )
}

const Weather = Tool.make("weather", {
  parameters: Schema.Struct({ location: Schema.String }),
  success: Schema.Struct({ celsius: Schema.Finite })
})
const Kit = Toolkit.make(ProviderTest.GetWeather, Weather)
const KitLive = Kit.toLayer({
  get_weather: () => Effect.succeed(undefined),
  weather: () => Effect.succeed({ celsius: 21 })
})

describe("the direct path equals LanguageModel.make's, on every recorded stream", () => {
  for (const provider of providers) {
    describe(provider.name, () => {
      for (const file of fixtures(provider.directory)) {
        // Live: a real server and real time. (Under the TestClock, a loaded machine's real seconds made it warn
        // "not advancing the test clock" inside one path's span, and the spans compared unequal.)
        it.live(`${file}: the parts, the request and the spans`, () =>
          Effect.gen(function*() {
            const server = yield* TestServer.start(() =>
              Effect.succeed(TestServer.sse(TestServer.fixture(`${provider.directory}/${file}`)))
            )
            const layer = provider.layer(server.baseUrl)
            const prompt = ProviderTest.transcript({}, undefined)
            const runs = []
            for (const path of paths) {
              const { spans, tracer } = recording()
              const parts = yield* ProviderTest.streamParts(prompt).pipe(
                Effect.withSpan("caller"),
                Effect.withTracer(tracer),
                path,
                Effect.provide(layer)
              )
              runs.push({ parts, spans: spans.map(spanRecord) })
            }
            const [made, fast] = runs
            assert.strictEqual(direct(made!.parts), 0, "StandardPath routed the call through LanguageModel.make")
            assert.isAbove(direct(fast!.parts), 0, "the loop's call took the direct path")
            assert.deepStrictEqual(fast!.parts, made!.parts)
            assert.strictEqual(fast!.parts.at(-1)?.type, "finish")
            // The same request on the wire: the options the provider was handed encode the same.
            assert.strictEqual(server.requests.length, 2)
            assert.deepStrictEqual(server.requests[1]!.body, server.requests[0]!.body)
            // The same spans, with the same attributes: the call's own span as `make` annotates it, and the client's.
            assert.deepStrictEqual(fast!.spans, made!.spans)
            const call = made!.spans.find((span) => span.name === "LanguageModel.streamText")
            assert.deepStrictEqual(call, {
              name: "LanguageModel.streamText",
              kind: "client",
              parent: "caller",
              attributes: {
                "gen_ai.output.type": "text",
                "effect.ai.tool_choice": "auto",
                "effect.ai.concurrency": "unbounded"
              },
              events: [],
              status: "Success"
            })
          }))

        it.effect(`${file}: a whole run, its transcript, events and usage`, () =>
          Effect.gen(function*() {
            const runs = []
            const results = []
            const requests = []
            for (const path of paths) {
              // Each run on a server of its own: the recorded stream, then the recorded answer.
              const server = yield* TestServer.start((_, index) =>
                Effect.succeed(TestServer.sse(TestServer.fixture(
                  `${provider.directory}/${index === 0 ? file : provider.answer}`
                )))
              )
              const layer = Layer.merge(
                provider.layer(server.baseUrl),
                ToolRegistry.layer(Kit).pipe(Layer.provide(KitLive))
              )
              const events: Array<AgentEvent.AgentEvent> = []
              const result = yield* Agent.run({
                prompt: "Weather in Paris?",
                plugins: [{ name: "events", observe: (event) => void events.push(event) }]
              }).pipe(path, Effect.provide(layer))
              results.push(result)
              const { messages, usage, outcome } = result
              runs.push(withoutRunIds({ messages, usage, outcome, events }))
              requests.push(server.requests.map((request) => request.body))
            }
            assert.strictEqual(results[0]!.outcome._tag, "Completed")
            assert.deepStrictEqual(runs[1], runs[0])
            assert.deepStrictEqual(requests[1], requests[0])
          }))
      }
    })
  }
})

/**
 * A `LanguageModel` over a wire format that records the options it is handed
 * and reads a Chat Completions stream (the test's `HttpClient` must outlive
 * its calls).
 */
const capturing = (baseUrl: string) =>
  Effect.gen(function*() {
    const captured: Array<LanguageModel.ProviderOptions> = []
    const settings = yield* Settings.resolve({ model: "gpt-4o", apiKey: key, baseUrl }, {
      provider: "Capture",
      baseUrl,
      envVar: "CAPTURE_API_KEY",
      keyRequired: () => false
    })
    const model = yield* SseTransport.languageModel(settings, {
      provider: "Capture",
      request: Settings.bearerRequest(settings, "/chat/completions"),
      body: (options) => {
        captured.push(options)
        return "{}"
      },
      decoder: (make) => OpenAiChatStream.decoder(settings, make),
      supportsSystemMessagesInHistory: true
    })
    return { captured, model }
  })

describe("the options the provider is handed, and the call's span", () => {
  const text = TestServer.fixture("openai-chat/openai-python_text-with-usage_gpt-4o.sse")
  const prompt = ProviderTest.transcript({}, undefined)
  const loop = { prompt, disableToolCallResolution: true, toolCallValidation: "deferred" } as const
  const choice = (toolChoice: LanguageModel.ToolChoice<"get_weather" | "weather">) => toolChoice
  /** One call of the loop's, its parts collected. */
  type Call = (model: LanguageModel.LanguageModel) => Effect.Effect<ReadonlyArray<Response.AnyPart>, AiError.AiError>
  const variants: ReadonlyArray<readonly [string, Call]> = [
    ["no toolkit", (model) => Stream.runCollect(model.streamText(loop))],
    ["an empty toolkit", (model) => Stream.runCollect(model.streamText({ ...loop, toolkit: Toolkit.make() }))],
    ["a toolkit", (model) => Stream.runCollect(model.streamText({ ...loop, toolkit: Kit }))],
    [
      "a toolkit with handlers",
      (model) =>
        Effect.gen(function*() {
          const toolkit = yield* Kit
          return yield* Stream.runCollect(model.streamText({ ...loop, toolkit }))
        }).pipe(Effect.provide(KitLive))
    ],
    ["tool choice none", (model) => Stream.runCollect(model.streamText({ ...loop, toolkit: Kit, toolChoice: "none" }))],
    [
      "tool choice required",
      (model) => Stream.runCollect(model.streamText({ ...loop, toolkit: Kit, toolChoice: "required" }))
    ],
    [
      "one tool chosen",
      (model) => Stream.runCollect(model.streamText({ ...loop, toolkit: Kit, toolChoice: choice({ tool: "weather" }) }))
    ],
    [
      "one of some tools",
      (model) =>
        Stream.runCollect(model.streamText({ ...loop, toolkit: Kit, toolChoice: choice({ oneOf: ["weather"] }) }))
    ],
    [
      "one of some tools, required",
      (model) =>
        Stream.runCollect(
          model.streamText({ ...loop, toolkit: Kit, toolChoice: choice({ mode: "required", oneOf: ["weather"] }) })
        )
    ],
    [
      "a prompt as text, a concurrency",
      (model) => Stream.runCollect(model.streamText({ ...loop, prompt: "hi", toolkit: Kit, concurrency: 2 }))
    ]
  ]
  for (const [name, call] of variants) {
    it.effect(name, () =>
      Effect.gen(function*() {
        const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(text)))
        const { captured, model } = yield* capturing(server.baseUrl)
        const spans = []
        const parts = []
        for (const path of paths) {
          const tracer = recording()
          parts.push(yield* call(model).pipe(Effect.withTracer(tracer.tracer), path))
          spans.push(tracer.spans.map(spanRecord))
        }
        assert.strictEqual(direct(parts[0]!), 0)
        assert.isAbove(direct(parts[1]!), 0)
        assert.deepStrictEqual(parts[1], parts[0])
        assert.strictEqual(captured.length, 2)
        const [made, fast] = captured.map(({ span, ...options }) => ({ ...options, span: spanRecord(span) }))
        assert.deepStrictEqual(fast, made)
        assert.deepStrictEqual(spans[1], spans[0])
      }).pipe(Effect.provide(ProviderTest.client)))
  }

  it.effect("without a tracer, the same options", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(text)))
      const { captured, model } = yield* capturing(server.baseUrl)
      for (const path of paths) yield* Stream.runDrain(model.streamText({ ...loop, toolkit: Kit })).pipe(path)
      const [made, fast] = captured.map(({ span: _, ...options }) => options)
      assert.strictEqual(captured.length, 2)
      assert.deepStrictEqual(fast, made)
    }).pipe(Effect.provide(ProviderTest.client)))
})

describe("a loop call for which LanguageModel.make does more goes through it", () => {
  const text = TestServer.fixture("openai-chat/openai-python_text-with-usage_gpt-4o.sse")
  const layerAt = (baseUrl: string) => providers[0]!.layer(baseUrl)

  it.effect("a ResponseIdTracker", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(text)))
      const tracker = yield* ResponseIdTracker.make
      const parts = yield* ProviderTest.streamParts("hi").pipe(
        Effect.provideService(ResponseIdTracker.ResponseIdTracker, tracker),
        Effect.provide(layerAt(server.baseUrl))
      )
      assert.strictEqual(direct(parts), 0)
    }))

  it.effect("a span transformer, given when the layer was built or at the call", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(text)))
      const seen: Array<number> = []
      const transformer: Telemetry.SpanTransformer = (options) => void seen.push(options.response.length)
      const atCall = yield* ProviderTest.streamParts("hi").pipe(
        Effect.provideService(Telemetry.CurrentSpanTransformer, transformer),
        Effect.provide(layerAt(server.baseUrl))
      )
      const atBuild = yield* ProviderTest.streamParts("hi").pipe(
        Effect.provide(layerAt(server.baseUrl).pipe(
          Layer.provide(Layer.succeed(Telemetry.CurrentSpanTransformer, transformer))
        ))
      )
      assert.strictEqual(direct(atCall), 0)
      assert.strictEqual(direct(atBuild), 0)
      assert.deepStrictEqual(seen, [atCall.length, atBuild.length])
    }))

  it.effect("approvals in the prompt: make answers a denied call before the request", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sse(text)))
      const prompt = Prompt.fromMessages([
        Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "Weather in Paris?" })] }),
        Prompt.makeMessage("assistant", {
          content: [
            Prompt.makePart("tool-call", {
              id: "call_1",
              name: "get_weather",
              params: { city: "Paris" },
              providerExecuted: false
            }),
            Prompt.makePart("tool-approval-request", { approvalId: "a1", toolCallId: "call_1" })
          ]
        }),
        Prompt.makeMessage("tool", {
          content: [Prompt.makePart("tool-approval-response", { approvalId: "a1", approved: false })]
        })
      ])
      const parts = yield* ProviderTest.streamParts(prompt).pipe(Effect.provide(layerAt(server.baseUrl)))
      assert.strictEqual(direct(parts), 0)
      const messages: ReadonlyArray<{ readonly role: string; readonly tool_call_id?: string }> =
        server.requests[0]!.body.messages
      assert.deepStrictEqual(messages.map((message) => message.role), ["user", "assistant", "tool"])
      assert.strictEqual(messages[2]!.tool_call_id, "call_1")
    }))

  it("LanguageModel.make reads no service but those the direct path decides on", () => {
    // What runs is the compiled module: read it beside effect/ai's entry point.
    const entry = fileURLToPath(import.meta.resolve("effect/ai"))
    const source = Fs.readFileSync(Path.join(Path.dirname(entry), "LanguageModel.js"), "utf8")
    const read = new Set([
      ...Array.from(source.matchAll(/serviceOption\(\s*([\w.]+)\s*\)/g), (match) => match[1]),
      ...Array.from(source.matchAll(/yield\*\s+([A-Z][\w.]*)\s*;/g), (match) => match[1])
    ])
    // `IdGenerator` is provided to the provider's stream (which does not read it) and read when tools run.
    assert.deepStrictEqual(
      [...read].sort(),
      ["CurrentSpanTransformer", "IdGenerator", "ResponseIdTracker.ResponseIdTracker"],
      "LanguageModel.make reads a service compat.withDirectLoopCalls does not know: check what it does with it"
    )
  })
})
