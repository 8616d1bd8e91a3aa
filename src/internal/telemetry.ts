/**
 * The spans and metrics of a run (see the public `Telemetry` module for the
 * tree and the attributes). The loop looks telemetry up once per run; when it
 * is off (no tracer installed, the default) the run holds `undefined` and
 * each site of the loop takes its untraced path: one comparison per turn and
 * per call, nothing else.
 *
 * @internal
 */
import type * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Metric from "effect/Metric"
import * as References from "effect/References"
import * as Tracer from "effect/Tracer"
import * as Model from "effect/ai/Model"
import type * as Prompt from "effect/ai/Prompt"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import type * as RunState from "../RunState.ts"
import * as Telemetry from "../Telemetry.ts"

/**
 * What a run with telemetry on knows to make its spans.
 *
 * @internal
 */
export interface Settings {
  readonly agent: string
  readonly recordContent: boolean
  /** `gen_ai.provider.name`: the `effect/ai` `Model.ProviderName` in context, if any. */
  readonly provider: string | undefined
  /** `gen_ai.request.model`: the `effect/ai` `Model.ModelName` in context, if any. */
  readonly model: string | undefined
  /** Whether a tracer records spans (telemetry may be on for metrics only). */
  readonly tracing: boolean
}

/**
 * Telemetry of a run in progress: its settings and its `invoke_agent` span.
 *
 * @internal
 */
export interface RunTelemetry extends Settings {
  readonly span: Tracer.Span
  readonly meters: Meters
}

/**
 * A run's metrics with their attributes, made once per run: a metric with
 * attributes is looked up by a key built from them, on every update.
 */
interface Meters {
  readonly turns: Metric.Metric<number, unknown>
  readonly duration: Metric.Metric<number, unknown>
  readonly tokens: Readonly<Record<"input" | "output" | "cache_read" | "cache_creation", Metric.Metric<number, unknown>>>
  readonly cost: Metric.Metric<number, unknown>
  /** The `tool_calls` counter by tool and status, made at first use (tool names are the registry's, bounded). */
  readonly toolCalls: Map<string, Metric.Metric<number, unknown>>
}

const makeMeters = (settings: Settings): Meters => {
  const attributes = modelAttributes(settings, settings.model)
  const tokens = (type: string) =>
    Metric.withAttributes(Telemetry.tokens, { ...attributes, "gen_ai.token.type": type })
  return {
    turns: Metric.withAttributes(Telemetry.turns, { "gen_ai.agent.name": settings.agent }),
    duration: Metric.withAttributes(Telemetry.modelCallDuration, attributes),
    tokens: {
      input: tokens("input"),
      output: tokens("output"),
      cache_read: tokens("cache_read"),
      cache_creation: tokens("cache_creation")
    },
    cost: Metric.withAttributes(Telemetry.cost, attributes),
    toolCalls: new Map()
  }
}

/**
 * The run's telemetry settings, or `undefined` when telemetry is off.
 *
 * @internal
 */
export const settings = (agent: string | undefined): Effect.Effect<Settings | undefined> =>
  Effect.withFiber((fiber) => {
    const context = fiber.context
    const enabled = fiber.getRef(Telemetry.Enabled)
    // Effect's default tracer is not in the context: only a tracer the application installed is.
    const installed = Context.getOrUndefined(context, Tracer.Tracer) !== undefined
    const tracing = installed && fiber.getRef(References.TracerEnabled)
    if (enabled === false || (enabled === "auto" && !tracing)) return Effect.succeed(undefined)
    const found: Settings = {
      agent: agent ?? "agent",
      recordContent: fiber.getRef(Telemetry.RecordContent),
      provider: Context.getOrUndefined(context, Model.ProviderName),
      model: Context.getOrUndefined(context, Model.ModelName),
      tracing
    }
    return Effect.succeed(found)
  })

const nowNanos = Effect.withFiber((fiber) => Effect.succeed(fiber.getRef(Clock.Clock).currentTimeNanosUnsafe()))

/** Sets the attributes whose value is known (the conventions want absent, not empty). */
const setAll = (span: Tracer.Span, attributes: Record<string, unknown>): void => {
  for (const key in attributes) {
    const value = attributes[key]
    if (value !== undefined) span.attribute(key, value)
  }
}

const usageAttributes = (usage: Message.Usage): Record<string, unknown> => ({
  "gen_ai.usage.input_tokens": usage.input,
  "gen_ai.usage.output_tokens": usage.output,
  "gen_ai.usage.cache_read.input_tokens": usage.cacheRead,
  "gen_ai.usage.cache_creation.input_tokens": usage.cacheWrite,
  "gen_ai.usage.reasoning.output_tokens": usage.reasoning,
  "effect_agent.usage.cost_usd": usage.cost
})

// -----------------------------------------------------------------------------
// invoke_agent
// -----------------------------------------------------------------------------

/**
 * The run's `invoke_agent` span around `body`, linked to the span of the run
 * a continued state came from (`state.trace`).
 *
 * @internal
 */
export const invokeAgent = <E, R>(
  settings: Settings,
  state: RunState.RunState,
  body: (telemetry: RunTelemetry) => Effect.Effect<RunState.RunResult, E, R>
): Effect.Effect<RunState.RunResult, E, R> =>
  Effect.useSpan(
    `invoke_agent ${settings.agent}`,
    {
      kind: "internal",
      attributes: {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": settings.agent,
        "gen_ai.conversation.id": state.runId,
        ...(settings.provider === undefined ? {} : { "gen_ai.provider.name": settings.provider }),
        ...(settings.model === undefined ? {} : { "gen_ai.request.model": settings.model })
      },
      links: state.trace === undefined ? [] : [{
        span: Tracer.externalSpan({ traceId: state.trace.traceId, spanId: state.trace.spanId }),
        attributes: { "effect_agent.link": "continues" }
      }]
    },
    (span) =>
      Effect.tap(
        Effect.withParentSpan(body({ ...settings, span, meters: makeMeters(settings) }), span, {
          captureStackTrace: false
        }),
        (result) =>
          Effect.sync(() => {
            setAll(span, usageAttributes(result.usage))
            span.attribute("effect_agent.outcome", result.outcome._tag)
            span.attribute("effect_agent.turns", result.state.turn)
          })
      )
  )

/**
 * The trace context a saved state keeps: the run's `invoke_agent` span.
 *
 * @internal
 */
export const traceContext = (telemetry: RunTelemetry): RunState.TraceContext | undefined =>
  telemetry.tracing ? { traceId: telemetry.span.traceId, spanId: telemetry.span.spanId } : undefined

// -----------------------------------------------------------------------------
// chat
// -----------------------------------------------------------------------------

const finishReason = (reason: Message.StopReason): string => {
  switch (reason) {
    case "toolUse":
      return "tool_calls"
    case "aborted":
      return "cancelled"
    default:
      return reason
  }
}

const modelAttributes = (telemetry: Settings, model: string | undefined) => ({
  ...(telemetry.provider === undefined ? {} : { "gen_ai.provider.name": telemetry.provider }),
  ...(model === undefined ? {} : { "gen_ai.request.model": model })
})

/** Records one call's tokens, cost and latency. */
const recordCall = (
  telemetry: RunTelemetry,
  seconds: number,
  message: Message.AssistantMessage | undefined,
  errorType: string | undefined
): Effect.Effect<void> => {
  const { meters } = telemetry
  const duration = errorType === undefined
    ? Metric.update(meters.duration, seconds)
    : Metric.update(
      Metric.withAttributes(Telemetry.modelCallDuration, {
        ...modelAttributes(telemetry, telemetry.model),
        "error.type": errorType
      }),
      seconds
    )
  if (message === undefined) return duration
  const { usage } = message
  const { tokens } = meters
  return Effect.all([
    duration,
    Metric.update(tokens.input, usage.input),
    Metric.update(tokens.output, usage.output),
    usage.cacheRead > 0 ? Metric.update(tokens.cache_read, usage.cacheRead) : Effect.void,
    usage.cacheWrite > 0 ? Metric.update(tokens.cache_creation, usage.cacheWrite) : Effect.void,
    usage.cost === undefined ? Effect.void : Metric.update(meters.cost, usage.cost)
  ], { discard: true })
}

/**
 * One model call's `chat` span around `reply`, with its response's model,
 * finish reason, usage and cost; its tokens, cost and latency as metrics.
 *
 * @internal
 */
export const chat = <A extends { readonly message: Message.AssistantMessage }, E, R>(
  telemetry: RunTelemetry,
  turn: number,
  prompt: Prompt.Prompt,
  reply: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const model = telemetry.model
  // Without a tracer (metrics only), there is no span to parent the call or take its attributes.
  const body = (span: Tracer.Span | undefined) =>
    Effect.flatMap(nowNanos, (start) =>
      Effect.onExit(
        span === undefined ? reply : Effect.withParentSpan(reply, span, { captureStackTrace: false }),
        (exit) =>
          Effect.flatMap(nowNanos, (end) => {
            const seconds = Number(end - start) / 1e9
            if (Exit.isFailure(exit)) return recordCall(telemetry, seconds, undefined, errorTypeOf(exit.cause))
            const message = exit.value.message
            if (span !== undefined) annotateChat(span, message, telemetry.recordContent)
            return recordCall(telemetry, seconds, message, undefined)
          })
      ))
  if (!telemetry.tracing) return body(undefined)
  return Effect.useSpan(
    model === undefined ? "chat" : `chat ${model}`,
    {
      kind: "client",
      attributes: {
        "gen_ai.operation.name": "chat",
        ...modelAttributes(telemetry, model),
        "effect_agent.turn": turn,
        ...(telemetry.recordContent ? { "gen_ai.input.messages": JSON.stringify(prompt.content) } : {})
      }
    },
    body
  )
}

/** What the reply tells of the call: the response's model, why it finished, its usage (and content, on opt-in). */
const annotateChat = (span: Tracer.Span, message: Message.AssistantMessage, recordContent: boolean): void => {
  setAll(span, {
    "gen_ai.response.model": message.model,
    "gen_ai.response.finish_reasons": [finishReason(message.stopReason)],
    ...usageAttributes(message.usage)
  })
  if (recordContent) {
    span.attribute("gen_ai.output.messages", JSON.stringify([{ role: "assistant", parts: message.content }]))
  }
}

const errorTypeOf = (cause: Cause.Cause<unknown>): string => {
  for (const reason of cause.reasons) {
    if (reason._tag === "Fail") {
      const error = reason.error
      return typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : "error"
    }
  }
  return cause.reasons.some((reason) => reason._tag === "Interrupt") ? "interrupted" : "defect"
}

// -----------------------------------------------------------------------------
// execute_tool
// -----------------------------------------------------------------------------

/**
 * How a tool call ended, as its span's status and the `status` of the
 * `tool_calls` metric.
 *
 * @internal
 */
export type CallStatus = "ok" | "error" | "denied" | "timeout" | "interrupted" | "blocked"

/** How a result says its call ended: by the `kind` of the details the loop put on it. */
export const statusOf = (result: Message.ToolResultMessage): CallStatus => {
  if (!result.isError) return "ok"
  const details: unknown = result.details
  const kind = typeof details === "object" && details !== null && "kind" in details ? details.kind : undefined
  switch (kind) {
    case "denied":
      return "denied"
    case "timedOut":
      return "timeout"
    case "cancelled":
    case "budgetExceeded":
      return "interrupted"
    case "blocked":
    case "quota":
    case "notExecuted":
      return "blocked"
    default:
      return "error"
  }
}

/**
 * The tool's name in span names and metrics: a registered tool's name, or
 * `unknown` for a name the model made up (the model's text must not create
 * metric series or span names without bound). The span's `gen_ai.tool.name`
 * keeps the name it asked for, capped.
 */
const toolLabel = (call: Hooks.ToolCall): string => call.tool === undefined ? "unknown" : call.name

const capped = (text: string): string => text.length <= 256 ? text : `${text.slice(0, 256)}…`

/** A call that did not succeed: the failure its span ends with (caught at once, never seen by the run). */
class CallFailed<A> extends Data.TaggedError("effect_agent.CallFailed")<{
  readonly status: Exclude<CallStatus, "ok">
  readonly finalized: A
}> {
  override get message(): string {
    return this.status
  }
}

/**
 * One tool call's `execute_tool` span around `body`; the call's end as the
 * span's status and a `tool_calls` metric.
 *
 * @internal
 */
export const executeTool = <A extends { readonly result: Message.ToolResultMessage }, E, R>(
  telemetry: RunTelemetry,
  turn: number,
  call: Hooks.ToolCall,
  body: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const tool = toolLabel(call)
  const counted = (status: CallStatus) => {
    const key = `${tool}\u0000${status}`
    let counter = telemetry.meters.toolCalls.get(key)
    if (counter === undefined) {
      counter = Metric.withAttributes(Telemetry.toolCalls, { "gen_ai.tool.name": tool, status })
      telemetry.meters.toolCalls.set(key, counter)
    }
    return Metric.update(counter, 1)
  }
  const ended = (span: Tracer.Span, finalized: A): Effect.Effect<A, CallFailed<A>> => {
    const status = statusOf(finalized.result)
    if (telemetry.recordContent) span.attribute("gen_ai.tool.call.result", Message.textOf(finalized.result))
    if (status !== "ok") span.attribute("error.type", status)
    return Effect.andThen(
      counted(status),
      status === "ok" ? Effect.succeed(finalized) : Effect.fail(new CallFailed({ status, finalized }))
    )
  }
  // A fatal failure of the tool fails the call (and the run): counted as an error.
  const counting = (effect: Effect.Effect<A, E, R>) =>
    Effect.onInterrupt(Effect.tapError(effect, () => counted("error")), () => counted("interrupted"))
  if (!telemetry.tracing) {
    return counting(Effect.flatMap(body, (finalized) => Effect.as(counted(statusOf(finalized.result)), finalized)))
  }
  return Effect.useSpan(
    `execute_tool ${tool}`,
    {
      kind: "internal",
      attributes: {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": capped(call.name),
        "gen_ai.tool.call.id": capped(call.id),
        "gen_ai.tool.type": "function",
        "effect_agent.turn": turn,
        ...(telemetry.recordContent ? { "gen_ai.tool.call.arguments": JSON.stringify(call.rawParams) } : {})
      }
    },
    (span) =>
      Effect.flatMap(
        counting(Effect.onInterrupt(
          Effect.withParentSpan(body, span, { captureStackTrace: false }),
          () => Effect.sync(() => span.attribute("error.type", "interrupted"))
        )),
        (done) => ended(span, done)
      )
  ).pipe(
    Effect.catchIf(
      (error): error is CallFailed<A> => error instanceof CallFailed,
      (failed) => Effect.succeed(failed.finalized)
    )
  )
}

/**
 * A span event on the current span (the call's `execute_tool`): an approval
 * asked for, or answered.
 *
 * @internal
 */
export const event = (name: string, attributes: Record<string, unknown>): Effect.Effect<void> =>
  Effect.withFiber((fiber) => {
    const span = Context.getOrUndefined(fiber.context, Tracer.ParentSpan)
    if (span !== undefined && span._tag === "Span") {
      span.event(name, fiber.getRef(Clock.Clock).currentTimeNanosUnsafe(), attributes)
    }
    return Effect.void
  })

/**
 * Counts a completed turn.
 *
 * @internal
 */
export const turnEnded = (telemetry: RunTelemetry): Effect.Effect<void> => Metric.update(telemetry.meters.turns, 1)
