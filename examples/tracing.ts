import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Layer, Metric, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { OtlpSerialization, OtlpTracer } from "effect/observability"
import { Agent, Telemetry, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { createServer } from "node:http"

const Weather = Tool.make("weather", {
  description: "The temperature in a city",
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.Finite
})
const Tools = Toolkit.make(Weather)
const ToolsLive = ToolRegistry.layer(Tools).pipe(
  Layer.provide(Tools.toLayer({ weather: ({ city }) => Effect.succeed(city === "Oslo" ? 4 : 19) }))
)
const Model = ScriptedModel.layer([
  {
    toolCalls: [{ name: "weather", params: { city: "Oslo" } }, { name: "weather", params: { city: "Rome" } }],
    usage: { input: 310, output: 42 }
  },
  { text: "Rome is 15 degrees warmer than Oslo.", usage: { input: 380, output: 12 } }
])

// A stand-in for an OpenTelemetry Collector (http://localhost:4318 in real life): it keeps the spans it gets.
interface OtlpSpan {
  readonly name: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly startTimeUnixNano: string
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: Record<string, unknown> }>
}
const received: Array<OtlpSpan> = []
const collector = createServer((request, response) => {
  let body = ""
  request.on("data", (chunk) => (body += chunk))
  request.on("end", () => {
    for (const resource of JSON.parse(body).resourceSpans) {
      for (const scope of resource.scopeSpans) received.push(...scope.spans)
    }
    response.end("{}")
  })
})
await new Promise<void>((listening) => collector.listen(0, "127.0.0.1", listening))
const address = collector.address()
const port = typeof address === "object" && address !== null ? address.port : 4318

// Spans go out over OTLP/HTTP as JSON; the exporter sends what is left when its layer closes.
const Tracing = OtlpTracer.layer({ url: `http://127.0.0.1:${port}/v1/traces`, resource: { serviceName: "weather" } })
  .pipe(Layer.provide([OtlpSerialization.layerJson, NodeHttpClient.layerUndici]))

/** A few attributes of a span, as `name=value`. */
const shown = (span: OtlpSpan): string => {
  const short: Record<string, string> = {
    "gen_ai.usage.input_tokens": "in",
    "gen_ai.usage.output_tokens": "out",
    "gen_ai.response.finish_reasons": "finish",
    "gen_ai.tool.call.id": "call"
  }
  return span.attributes.flatMap(({ key, value }) => {
    if (short[key] === undefined) return []
    const plain = value.arrayValue === undefined
      ? Object.values(value)[0]
      : (value.arrayValue as { values: Array<{ stringValue: string }> }).values.map((v) => v.stringValue).join()
    return [`${short[key]}=${plain}`]
  }).join(" ")
}

const program = Effect.gen(function*() {
  const result = yield* Agent.run({ prompt: "Which is warmer, Oslo or Rome?", name: "weather" }).pipe(
    Effect.provide(Tracing)
  )
  console.log(result.outcome._tag)
  // The spans as a tree, siblings in the order they started.
  const print = (parent: string | undefined, depth: number): void => {
    const children = received.filter((span) => span.parentSpanId === parent)
      .sort((a, b) => a.startTimeUnixNano.localeCompare(b.startTimeUnixNano) || shown(a).localeCompare(shown(b)))
    for (const span of children) {
      console.log(`${"  ".repeat(depth)}${span.name}  ${shown(span)}`.trimEnd())
      print(span.spanId, depth + 1)
    }
  }
  print(undefined, 0)
  // Metrics go through Effect's Metric: here read back, in real life exported (OtlpMetrics, Prometheus).
  const calls = yield* Metric.value(
    Metric.withAttributes(Telemetry.toolCalls, { "gen_ai.tool.name": "weather", status: "ok" })
  )
  console.log(`tool calls: weather ok ${calls.count}`)
})

await Effect.runPromise(program.pipe(Effect.provide(Layer.merge(ToolsLive, Model))))
collector.close()
