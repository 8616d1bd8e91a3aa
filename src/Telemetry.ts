/**
 * Traces and metrics of agent runs, through Effect's own `Tracer` and
 * `Metric` (no OpenTelemetry SDK: `effect/observability` exports both over
 * OTLP), named by the OpenTelemetry GenAI semantic conventions.
 *
 * The spans of a run, when a tracer is installed:
 *
 * ```
 * invoke_agent {agent}                  the run (Agent.run, runStream, runContinue, sessions)
 * ├─ chat {model}                       each model call, one per turn
 * │  ├─ LanguageModel.streamText        effect/ai's own span
 * │  └─ POST                            the provider's HTTP request (effect/http's client span)
 * ├─ execute_tool {tool}                each tool call of the turn, siblings, also parallel ones
 * │  └─ invoke_agent {sub-agent}        a tool that runs an agent nests it here
 * └─ chat {model}                       the next turn
 * ```
 *
 * There is no turn span (the conventions define none): every `chat` and
 * `execute_tool` span carries `effect_agent.turn`. `invoke_agent` carries the
 * run id (`gen_ai.conversation.id`), the outcome and the run's usage; `chat`
 * the provider, the request and response models, the finish reason, the
 * tokens (input, output, cache read and write) and the cost; `execute_tool`
 * the tool's name (`unknown` in the span's name and the metrics for a tool
 * that is not registered), the call id, and how the call ended: a call that did not
 * succeed ends with an error status whose message, and `error.type`, say
 * `denied`, `timeout`, `interrupted`, `blocked` or `error`. A wait for
 * approval is a span event (`effect_agent.approval.requested`, then
 * `effect_agent.approval.resolved`). A continued run (a resumed session)
 * links its `invoke_agent` span to the one of the run it continues, whose
 * trace context the saved state holds (`RunState.trace`).
 *
 * Message content (prompts, replies, tool arguments and results) is recorded
 * only when {@link RecordContent} is set; keys never are.
 *
 * Telemetry costs nothing when no tracer is installed (Effect's default): no
 * span is made and no metric updated. {@link Enabled} turns it on without a
 * tracer (metrics only) or off with one.
 *
 * @example
 * ```ts
 * import { NodeHttpClient } from "@effect/platform-node"
 * import { Effect, Layer } from "effect"
 * import { OtlpSerialization, OtlpTracer } from "effect/observability"
 * import { Agent } from "effect-agent"
 *
 * const Tracing = OtlpTracer.layer({ url: "http://127.0.0.1:4318/v1/traces", resource: { serviceName: "my-agent" } })
 *   .pipe(Layer.provide([OtlpSerialization.layerJson, NodeHttpClient.layerUndici]))
 *
 * const traced = Agent.run({ prompt: "Summarise the report", name: "summariser" }).pipe(Effect.provide(Tracing))
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Metric from "effect/Metric"

/**
 * Whether runs record spans and metrics: `"auto"` (the default) when a
 * tracer is installed and tracing is enabled, `true` always (metrics without
 * a tracer), `false` never.
 *
 * @since 0.1.0
 * @category references
 */
export const Enabled = Context.Reference<boolean | "auto">("effect-agent/Telemetry/Enabled", {
  defaultValue: () => "auto"
})

/**
 * Whether spans record message content: the request's messages and the
 * reply (`gen_ai.input.messages`, `gen_ai.output.messages`,
 * `gen_ai.system_instructions`) and each call's arguments and result
 * (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`). Off by default:
 * content may hold what the application must not export. It is a reference
 * the application sets, not a config field, so that a config from outside
 * (`UntrustedConfig.decode`) cannot turn it on.
 *
 * @since 0.1.0
 * @category references
 */
export const RecordContent = Context.Reference<boolean>("effect-agent/Telemetry/RecordContent", {
  defaultValue: () => false
})

// -----------------------------------------------------------------------------
// Metrics
// -----------------------------------------------------------------------------

/**
 * Turns completed (a model call and its tool batch), by agent.
 *
 * @since 0.1.0
 * @category metrics
 */
export const turns: Metric.Counter<number> = Metric.counter("effect_agent.turns", {
  description: "Turns completed: a model call and its tool calls",
  incremental: true
})

/**
 * Tool calls, by tool (`gen_ai.tool.name`) and how they ended (`status`:
 * `ok`, `error`, `denied`, `timeout`, `interrupted`, `blocked`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const toolCalls: Metric.Counter<number> = Metric.counter("effect_agent.tool_calls", {
  description: "Tool calls, by tool and status",
  incremental: true
})

/**
 * Tokens per model call, by `gen_ai.token.type` (`input`, `output`,
 * `cache_read`, `cache_creation`), provider and model: the conventions'
 * `gen_ai.client.token.usage`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const tokens: Metric.Histogram<number> = Metric.histogram("gen_ai.client.token.usage", {
  description: "Tokens used per model call",
  boundaries: [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
})

/**
 * Cost of model calls in US dollars, by provider and model (calls whose
 * provider reports a cost).
 *
 * @since 0.1.0
 * @category metrics
 */
export const cost: Metric.Counter<number> = Metric.counter("effect_agent.cost", {
  description: "Cost of model calls, in US dollars",
  incremental: true
})

/**
 * Model call latency in seconds, from the request to the end of the reply's
 * stream, by provider, model and `error.type` when the call failed: the
 * conventions' `gen_ai.client.operation.duration`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const modelCallDuration: Metric.Histogram<number> = Metric.histogram("gen_ai.client.operation.duration", {
  description: "Model call duration, in seconds",
  boundaries: [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
})
