/**
 * What the provider layers cost per streamed event, without the network:
 * each recorded stream is served by an in-memory HttpClient, one event per
 * chunk, and decoded through `LanguageModel.streamText` as the agent loop
 * calls it (SSE framing, JSON, the wire Schemas and the parts), on the
 * providers' direct path, and again with every call sent through
 * `LanguageModel.make` (`compat.StandardPath`: the encoded parts, which
 * effect/ai decodes again): what the direct path (`providers/internal/compat.ts`)
 * saves. The two are run in alternating rounds; each prints its median
 * round. The floor printed beside them is `JSON.parse` of the same `data:`
 * lines alone.
 *
 *   node bench/providers.ts [rounds]
 */
import { Effect, Layer, Redacted, Stream } from "effect"
import { LanguageModel } from "effect/ai"
import { HttpClient, HttpClientResponse } from "effect/http"
import { readFileSync } from "node:fs"
import { Anthropic, OpenAiChat, OpenAiResponses } from "../src/providers/index.ts"
import * as Compat from "../src/providers/internal/compat.ts"

const fixture = (path: string) => readFileSync(new URL(`../test/fixtures/providers/${path}`, import.meta.url), "utf8")

// One chunk per event, as a network read usually brings.
const serving = (body: string) => {
  const chunks = body.split("\n\n").filter((event) => event !== "").map((event) =>
    new TextEncoder().encode(`${event}\n\n`)
  )
  const response = () =>
    new Response(new ReadableStream({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(chunk)
        controller.close()
      }
    }))
  return Layer.succeed(
    HttpClient.HttpClient,
    HttpClient.make((request) => Effect.succeed(HttpClientResponse.fromWeb(request, response())))
  )
}

const options = { model: "gpt-4o", apiKey: Redacted.make("sk-bench") }
const cases: ReadonlyArray<
  readonly [string, string, Layer.Layer<LanguageModel.LanguageModel, unknown, HttpClient.HttpClient>]
> = [
  ["openai-chat text", "openai-chat/openai-python_text-with-usage_gpt-4o.sse", OpenAiChat.layer(options)],
  ["openai-chat tool call", "openai-chat/openai-python_single-tool-call_gpt-4o.sse", OpenAiChat.layer(options)],
  [
    "responses reasoning + tool",
    "openai-responses/reasoning-summary-plus-tool_gpt-5.sse",
    OpenAiResponses.layer(options)
  ],
  ["anthropic thinking + tool", "anthropic/thinking-plus-tool-use_claude-sonnet-4.sse", Anthropic.layer(options)]
]

const runs = 300
const rounds = Number(process.argv[2] ?? 5)

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

for (const [name, path, layer] of cases) {
  const body = fixture(path)
  const data = body.split("\n").filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
  const model = layer.pipe(Layer.provide(serving(body)))
  const once = Stream.runDrain(
    LanguageModel.streamText({ prompt: "hi", disableToolCallResolution: true, toolCallValidation: "deferred" })
  )
  const round = (standard: boolean) =>
    Effect.gen(function*() {
      const start = performance.now()
      for (let i = 0; i < runs; i++) yield* once
      return performance.now() - start
    }).pipe(Effect.provideService(Compat.StandardPath, standard))
  const program = Effect.gen(function*() {
    for (let i = 0; i < 30; i++) yield* once // warm up
    for (let i = 0; i < 30; i++) yield* Effect.provideService(once, Compat.StandardPath, true)
    const direct: Array<number> = []
    const standard: Array<number> = []
    for (let r = 0; r < rounds; r++) {
      direct.push(yield* round(false))
      standard.push(yield* round(true))
    }
    return { direct: median(direct), standard: median(standard) }
  }).pipe(Effect.provide(model))
  const { direct, standard } = await Effect.runPromise(program)
  let floor = performance.now()
  for (let i = 0; i < runs; i++) for (const line of data) JSON.parse(line.slice(6))
  floor = performance.now() - floor
  const perEvent = (ms: number) => ((ms * 1000) / (runs * data.length)).toFixed(2)
  const perCall = (ms: number) => ((ms * 1000) / runs).toFixed(0)
  console.log(
    `${name.padEnd(28)} ${String(data.length).padStart(4)} events  direct ${perEvent(direct).padStart(6)} µs/event` +
      ` ${perCall(direct).padStart(5)} µs/call  LanguageModel.make ${perEvent(standard).padStart(6)} µs/event` +
      ` ${perCall(standard).padStart(5)} µs/call  ×${(standard / direct).toFixed(2)}` +
      `  (JSON.parse alone ${perEvent(floor)} µs/event)`
  )
}
