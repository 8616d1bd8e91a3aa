/**
 * The spans and metrics of a run, collected by an in-memory tracer: their
 * exact names, parents, attributes, statuses and events, for a run with
 * parallel tools, an approval and a timeout; message content only on opt-in;
 * the trace context a continued run links to; nothing at all without a
 * tracer.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, Fiber, Layer, Metric, Option, Schema, Tracer } from "effect"
import { Model, Tool, Toolkit } from "effect/ai"
import { TestClock } from "effect/testing"
import { Agent, Approvals, Hooks, Message, Telemetry, ToolRegistry } from "effect-agent"
import { CheckpointStore, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { toolsLayer } from "./support.ts"

/** A tracer that keeps every span it makes. */
export const collecting = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({
    span: (options) => {
      const span = new Tracer.NativeSpan(options)
      spans.push(span)
      return span
    }
  })
  const named = (name: string) => spans.filter((span) => span.name === name)
  const one = (name: string) => {
    const found = named(name)
    assert.strictEqual(found.length, 1, `one span named ${name}: ${spans.map((s) => s.name).join(", ")}`)
    return found[0]!
  }
  return { spans, tracer, named, one }
}

export const parentOf = (span: Tracer.Span) => Option.getOrUndefined(span.parent)

export const attributes = (span: Tracer.Span) => Object.fromEntries(span.attributes)

const exitOf = (span: Tracer.Span) => {
  assert.strictEqual(span.status._tag, "Ended", `${span.name} ended`)
  return span.status._tag === "Ended" ? span.status.exit : Exit.void
}

const names = Layer.succeedContext(
  Context.make(Model.ProviderName, "openai").pipe(Context.add(Model.ModelName, "gpt-test"))
)

/** Turn 1: two quick sleeps, a slow one that times out, a deploy that needs approval; turn 2 answers. */
const script: ScriptedModel.Script = [
  {
    toolCalls: [
      { id: "a", name: "sleep", params: { ms: 10, label: "a" } },
      { id: "b", name: "sleep", params: { ms: 20, label: "b" } },
      { id: "slow", name: "sleep", params: { ms: 60_000, label: "slow" } },
      { id: "d", name: "deploy", params: { env: "prod" } }
    ],
    usage: { input: 120, output: 30, cacheRead: 80, cacheWrite: 5, cost: 0.25 },
    model: "gpt-test-2026"
  },
  { text: "all done", usage: { input: 200, output: 10 }, model: "gpt-test-2026" }
]

const traced = (
  options: { readonly recordContent?: boolean; readonly script?: ScriptedModel.Script } = {}
) =>
  Effect.gen(function*() {
    const collector = collecting()
    const fiber = yield* Agent.run({
      prompt: "ship it, key sk-in-the-prompt",
      system: "You deploy.",
      name: "deployer",
      config: { toolTimeout: 1_000 }
    }).pipe(
      Effect.provide(Layer.mergeAll(ScriptedModel.layer(options.script ?? script), toolsLayer(), names)),
      Effect.provide(Approvals.layer(Approvals.allowAll)),
      Effect.provideService(Telemetry.RecordContent, options.recordContent ?? false),
      Effect.withTracer(collector.tracer),
      Effect.forkChild
    )
    yield* TestClock.adjust("2 minutes")
    const result = yield* Fiber.join(fiber)
    return { ...collector, result }
  })

describe("Telemetry spans", () => {
  it.effect("a run with parallel tools, an approval and a timeout: names, parents, attributes, statuses", () =>
    Effect.gen(function*() {
      const { named, one, result, spans } = yield* traced()
      assert.strictEqual(result.outcome._tag, "Completed")

      const run = one("invoke_agent deployer")
      assert.isUndefined(parentOf(run), "the run's span is a root here")
      assert.deepStrictEqual(attributes(run), {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "deployer",
        "gen_ai.conversation.id": result.state.runId,
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.usage.input_tokens": 320,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 80,
        "gen_ai.usage.cache_creation.input_tokens": 5,
        "gen_ai.usage.reasoning.output_tokens": 0,
        "effect_agent.usage.cost_usd": 0.25,
        "effect_agent.outcome": "Completed",
        "effect_agent.turns": 2
      })
      assert.isTrue(Exit.isSuccess(exitOf(run)))

      // One chat span per turn, children of the run (effect/ai's own span under each: see TelemetryOtlp).
      const chats = named("chat gpt-test")
      assert.strictEqual(chats.length, 2)
      for (const chat of chats) {
        assert.strictEqual(parentOf(chat), run)
        assert.strictEqual(chat.kind, "client")
      }
      assert.deepStrictEqual(attributes(chats[0]!), {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "effect_agent.turn": 1,
        "gen_ai.response.model": "gpt-test-2026",
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cache_read.input_tokens": 80,
        "gen_ai.usage.cache_creation.input_tokens": 5,
        "gen_ai.usage.reasoning.output_tokens": 0,
        "effect_agent.usage.cost_usd": 0.25
      })
      assert.deepStrictEqual(attributes(chats[1]!)["gen_ai.response.finish_reasons"], ["stop"])
      assert.strictEqual(attributes(chats[1]!)["effect_agent.turn"], 2)

      // The tool spans: siblings of the turn's chat span, under the run, whether they ran in parallel or not.
      const tools = spans.filter((span) => span.name.startsWith("execute_tool"))
      assert.deepStrictEqual(tools.map((span) => span.name).sort(), [
        "execute_tool deploy",
        "execute_tool sleep",
        "execute_tool sleep",
        "execute_tool sleep"
      ])
      for (const tool of tools) assert.strictEqual(parentOf(tool), run)
      const byCall = new Map(tools.map((span) => [attributes(span)["gen_ai.tool.call.id"], span]))
      assert.deepStrictEqual(attributes(byCall.get("a")!), {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "sleep",
        "gen_ai.tool.call.id": "a",
        "gen_ai.tool.type": "function",
        "effect_agent.turn": 1
      })
      assert.isTrue(Exit.isSuccess(exitOf(byCall.get("a")!)))

      // The timeout is the span's status.
      const slow = byCall.get("slow")!
      assert.strictEqual(attributes(slow)["error.type"], "timeout")
      const slowExit = exitOf(slow)
      assert.isTrue(Exit.isFailure(slowExit))
      if (Exit.isFailure(slowExit)) {
        const failure = slowExit.cause.reasons[0]
        assert.strictEqual(failure?._tag, "Fail")
        if (failure?._tag === "Fail") assert.strictEqual((failure.error as Error).message, "timeout")
      }

      // The approval is two events on the call's span.
      const deploy = byCall.get("d")!
      assert.isTrue(Exit.isSuccess(exitOf(deploy)))
      assert.deepStrictEqual(deploy.events.map(([name, , attrs]) => [name, attrs]), [
        ["effect_agent.approval.requested", {}],
        ["effect_agent.approval.resolved", { "effect_agent.approval.approved": true }]
      ])

      // No content without the opt-in.
      for (const span of spans) {
        for (const key of span.attributes.keys()) {
          assert.notMatch(key, /messages|arguments|result|instructions/, `${span.name} has ${key}`)
        }
        for (const value of span.attributes.values()) assert.notInclude(String(value), "sk-in-the-prompt")
      }

      // The state holds the run's trace context.
      assert.deepStrictEqual(result.state.trace, { traceId: run.traceId, spanId: run.spanId })
    }))

  it.effect("a denial and an interruption are statuses too", () =>
    Effect.gen(function*() {
      const collector = collecting()
      const fiber = yield* Agent.run({ prompt: "go" }).pipe(
        Effect.provide(Layer.mergeAll(
          ScriptedModel.layer([
            { toolCalls: [{ id: "d", name: "deploy", params: { env: "prod" } }] },
            { toolCalls: [{ id: "s", name: "sleep", params: { ms: 60_000, label: "s" } }] },
            { text: "never" }
          ]),
          toolsLayer()
        )),
        Effect.provide(Approvals.layer(Approvals.denyAll("not on a Friday"))),
        Effect.withTracer(collector.tracer),
        Effect.forkChild
      )
      yield* TestClock.adjust("1 second")
      yield* Fiber.interrupt(fiber)
      const deploy = collector.one("execute_tool deploy")
      assert.strictEqual(attributes(deploy)["error.type"], "denied")
      assert.isTrue(Exit.isFailure(exitOf(deploy)))
      const sleep = collector.one("execute_tool sleep")
      assert.strictEqual(attributes(sleep)["error.type"], "interrupted")
      assert.isTrue(Exit.hasInterrupts(exitOf(sleep)))
      // Without Model names, the chat span is named by its operation alone.
      assert.strictEqual(collector.named("chat").length, 2)
      const run = collector.one("invoke_agent agent")
      assert.strictEqual(attributes(run)["gen_ai.agent.name"], "agent")
    }))

  it.effect("a tool that runs an agent: the sub-agent's spans nest under the calling tool's span", () =>
    Effect.gen(function*() {
      const collector = collecting()
      const Delegate = Tool.make("delegate", {
        parameters: Schema.Struct({ task: Schema.String }),
        success: Schema.String
      })
      const Kit = Toolkit.make(Delegate)
      const subAgent = ({ task }: { readonly task: string }) =>
        Agent.run({ prompt: task, name: "researcher" }).pipe(
          Effect.provide(Layer.mergeAll(ScriptedModel.layer([{ text: "found it" }]), toolsLayer())),
          Effect.map((result) => Message.textOf(result.messages.at(-1)!)),
          Effect.orDie
        )
      const tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({ delegate: subAgent })))
      const result = yield* Agent.run({ prompt: "go", name: "lead" }).pipe(
        Effect.provide(Layer.mergeAll(
          ScriptedModel.layer([{ toolCalls: [{ name: "delegate", params: { task: "look" } }] }, { text: "done" }]),
          tools
        )),
        Effect.withTracer(collector.tracer)
      )
      assert.strictEqual(result.outcome._tag, "Completed")
      const lead = collector.one("invoke_agent lead")
      const call = collector.one("execute_tool delegate")
      const sub = collector.one("invoke_agent researcher")
      assert.strictEqual(parentOf(call), lead)
      assert.strictEqual(parentOf(sub), call)
      assert.strictEqual(sub.traceId, lead.traceId)
      const subChat = collector.named("chat").filter((span) => parentOf(span) === sub)
      assert.strictEqual(subChat.length, 1)
    }))

  it.effect("message content is recorded only on opt-in", () =>
    Effect.gen(function*() {
      const { named, spans } = yield* traced({ recordContent: true })
      const chat = named("chat gpt-test")[0]!
      const input = JSON.parse(String(attributes(chat)["gen_ai.input.messages"]))
      assert.deepStrictEqual(input.map((message: { role: string }) => message.role), ["system", "user"])
      assert.include(String(attributes(chat)["gen_ai.input.messages"]), "ship it")
      const second = named("chat gpt-test")[1]!
      assert.include(String(attributes(second)["gen_ai.output.messages"]), "all done")
      const deploy = spans.find((span) => span.name === "execute_tool deploy")!
      assert.strictEqual(attributes(deploy)["gen_ai.tool.call.arguments"], JSON.stringify({ env: "prod" }))
      assert.strictEqual(attributes(deploy)["gen_ai.tool.call.result"], "deployed to prod")
    }))

  it.effect("a continued run links its span to the trace context the state holds", () =>
    Effect.gen(function*() {
      const first = yield* traced()
      const before = first.one("invoke_agent deployer")
      const collector = collecting()
      const continued = yield* Agent.runContinue(
        { ...first.result.state, followUps: [Message.user("and again")] },
        { name: "deployer" }
      ).pipe(
        Effect.provide(Layer.mergeAll(ScriptedModel.layer([{ text: "again done" }]), toolsLayer())),
        Effect.withTracer(collector.tracer)
      )
      const after = collector.one("invoke_agent deployer")
      assert.notStrictEqual(after.traceId, before.traceId)
      assert.deepStrictEqual(
        after.links.map((link) => [link.span.traceId, link.span.spanId, link.attributes]),
        [[before.traceId, before.spanId, { "effect_agent.link": "continues" }]]
      )
      assert.deepStrictEqual(continued.state.trace, { traceId: after.traceId, spanId: after.spanId })
    }))
})

/** Each test counts from zero: metrics live in the context's registry. */
const fresh = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => Effect.provideService(effect, Metric.MetricRegistry, new Map()))

describe("Telemetry across a crash", () => {
  it.effect("a session saves its trace context; the resumed run's span links to the crashed run's", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const crashed = collecting()
      const fiber = yield* Session.run({ id: "s1", prompt: "go", name: "worker" }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(Layer.mergeAll(
          ScriptedModel.layer([
            { toolCalls: [{ id: "a", name: "sleep", params: { ms: 10, label: "a" } }] },
            { text: "thinking…", hang: true }
          ]),
          toolsLayer()
        )),
        Effect.withTracer(crashed.tracer),
        Effect.forkChild
      )
      yield* TestClock.adjust("1 second")
      // Turn 2 hangs, after turn 1's checkpoint: the process "crashes".
      yield* Fiber.interrupt(fiber)
      const before = crashed.one("invoke_agent worker")
      const checkpoint = yield* store.load("s1")
      assert.deepStrictEqual(checkpoint.state.trace, { traceId: before.traceId, spanId: before.spanId })

      const resumed = collecting()
      const result = yield* Session.resume("s1", { name: "worker" }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(Layer.mergeAll(ScriptedModel.layer([{ text: "done" }]), toolsLayer())),
        Effect.withTracer(resumed.tracer)
      )
      assert.strictEqual(result.outcome._tag, "Completed")
      const after = resumed.one("invoke_agent worker")
      assert.deepStrictEqual(
        after.links.map((link) => [link.span.traceId, link.span.spanId]),
        [[before.traceId, before.spanId]]
      )
      assert.deepStrictEqual((yield* store.load("s1")).state.trace, { traceId: after.traceId, spanId: after.spanId })
    }))
})

describe("Telemetry metrics", () => {
  it.effect("turns, tool calls by tool and status, tokens, cost and model-call latency", () =>
    fresh(Effect.gen(function*() {
      yield* traced()
      const toolCount = (tool: string, status: string) =>
        Metric.value(Metric.withAttributes(Telemetry.toolCalls, { "gen_ai.tool.name": tool, status }))
      assert.strictEqual((yield* toolCount("sleep", "ok")).count, 2)
      assert.strictEqual((yield* toolCount("sleep", "timeout")).count, 1)
      assert.strictEqual((yield* toolCount("deploy", "ok")).count, 1)
      const turns = yield* Metric.value(Metric.withAttributes(Telemetry.turns, { "gen_ai.agent.name": "deployer" }))
      assert.strictEqual(turns.count, 2)
      const model = { "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test" }
      const input = yield* Metric.value(
        Metric.withAttributes(Telemetry.tokens, { ...model, "gen_ai.token.type": "input" })
      )
      assert.strictEqual(input.count, 2)
      assert.strictEqual(input.sum, 320)
      const cached = yield* Metric.value(
        Metric.withAttributes(Telemetry.tokens, { ...model, "gen_ai.token.type": "cache_read" })
      )
      assert.strictEqual(cached.sum, 80)
      assert.strictEqual((yield* Metric.value(Metric.withAttributes(Telemetry.cost, model))).count, 0.25)
      const latency = yield* Metric.value(Metric.withAttributes(Telemetry.modelCallDuration, model))
      assert.strictEqual(latency.count, 2)
    })))

  it.effect("without a tracer, no span is made and no metric moves; Enabled turns metrics on", () =>
    fresh(Effect.gen(function*() {
      // Which span each event happened in, as a plugin sees it.
      const seen: Array<string> = []
      const where = Hooks.plugin({
        name: "where",
        onEvent: () =>
          Effect.map(Effect.option(Effect.currentSpan), (span) =>
            void seen.push(Option.match(span, { onNone: () => "none", onSome: (s) => s.name })))
      })
      const run = (name: string) =>
        Agent.run({ prompt: "go", name, plugins: [where] }).pipe(
          Effect.provide(Layer.mergeAll(
            ScriptedModel.layer([{ toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] }, { text: "3" }]),
            toolsLayer()
          ))
        )
      const turnsOf = (name: string) =>
        Effect.map(
          Metric.value(Metric.withAttributes(Telemetry.turns, { "gen_ai.agent.name": name })),
          (state) => state.count
        )
      const result = yield* run("quiet")
      assert.strictEqual(yield* turnsOf("quiet"), 0)
      assert.isUndefined(result.state.trace)
      // Inside the application's own span (Effect's native tracer, not installed), every event happens in it:
      // the loop made no span of its own.
      seen.length = 0
      yield* Effect.withSpan(run("quiet"), "outer")
      assert.isAbove(seen.length, 5)
      assert.deepStrictEqual(new Set(seen), new Set(["outer"]))
      assert.strictEqual(yield* turnsOf("quiet"), 0)
      yield* run("counted").pipe(Effect.provideService(Telemetry.Enabled, true))
      assert.strictEqual(yield* turnsOf("counted"), 2)
      // Enabled: false wins over a tracer.
      const collector = collecting()
      yield* run("off").pipe(Effect.provideService(Telemetry.Enabled, false), Effect.withTracer(collector.tracer))
      assert.deepStrictEqual(collector.spans.filter((span) => !span.name.startsWith("LanguageModel")), [])
      assert.strictEqual(yield* turnsOf("off"), 0)
    })))
})
