/**
 * `Backend`: how a run is carried out where a backend changes it. Every way
 * to run goes through the front door (`Agent.run`, `runContinue`,
 * `runStream`), which reads it; these tests pin what each part does, and
 * that a run's own tools do not inherit it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, type AgentEvent, Backend, Message, RunState, SubAgent, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

const Ask = Tool.make("ask", { parameters: Schema.Struct({ q: Schema.String }), success: Schema.String })

describe("Backend", () => {
  it.effect("every model call passes through modelCall, and every event reaches the sinks before the plugins", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const turns: Array<number> = []
      const result = yield* Agent.run({
        prompt: "Hi",
        plugins: [{ name: "after", observe: (event) => seen.push(`plugin:${event._tag}`) }]
      }).pipe(
        Effect.provideService(Backend.Backend, {
          modelCall: (turn, call) => Effect.tap(call, () => Effect.sync(() => turns.push(turn))),
          sinks: [(event) => seen.push(event._tag)],
          announce: [{ _tag: "CheckpointSaved", sessionId: "s", bytes: 1 }]
        }),
        Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty),
        Effect.provide(ScriptedModel.layer([{ text: "Hello." }]))
      )
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "Hello.")
      assert.deepStrictEqual(turns, [1])
      // announced right after AgentStart; each event to the sink, then to the plugin
      assert.deepStrictEqual(seen.slice(0, 4), ["AgentStart", "plugin:AgentStart", "CheckpointSaved", "plugin:CheckpointSaved"])
      assert.strictEqual(seen.at(-1), "plugin:AgentEnd")
    }))

  it.effect("a modelCall that answers from a record is the reply: the model is not called", () =>
    Effect.gen(function*() {
      const recorded: Backend.ModelReply = {
        message: { role: "assistant", content: [Message.text("from the record")], stopReason: "stop", usage: Message.emptyUsage },
        stopped: undefined
      }
      const result = yield* Agent.run({ prompt: "Hi" }).pipe(
        Effect.provideService(Backend.Backend, { modelCall: () => Effect.succeed(recorded) }),
        Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty)
      )
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "from the record")
      const model = yield* ScriptedModel.ScriptedModel
      assert.strictEqual(yield* model.calls, 0)
    }).pipe(Effect.provide(ScriptedModel.layer([{ text: "from the model" }]))))

  it.effect("a run inside a tool is a run of its own: it does not inherit the backend", () =>
    Effect.gen(function*() {
      const outer: Array<string> = []
      const inner: Array<string> = []
      const Tools = Toolkit.make(Ask)
      const tools = ToolRegistry.layer(Tools).pipe(Layer.provide(Tools.toLayer({
        ask: ({ q }) =>
          Agent.run({ prompt: q, plugins: [{ name: "inner", observe: (event) => inner.push(event._tag) }] }).pipe(
            Effect.map((result) => Message.textOf(result.messages.at(-1)!)),
            Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty),
            Effect.provide(ScriptedModel.layer([{ text: "inner answer" }])),
            Effect.orDie
          )
      })))
      const result = yield* Agent.run({ prompt: "Ask it" }).pipe(
        Effect.provideService(Backend.Backend, { sinks: [(event) => outer.push(event._tag)] }),
        Effect.provide(tools),
        Effect.provide(ScriptedModel.layer([
          { toolCalls: [{ id: "a1", name: "ask", params: { q: "inner?" } }] },
          { text: "outer answer" }
        ]))
      )
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "outer answer")
      assert.isTrue(inner.includes("AgentEnd"))
      // the outer sink saw one run: one AgentStart, one AgentEnd
      assert.deepStrictEqual(outer.filter((tag) => tag === "AgentStart" || tag === "AgentEnd"), ["AgentStart", "AgentEnd"])
    }))

  it.effect("elapsedBefore counts against the wall-clock budget of a new run", () =>
    Effect.gen(function*() {
      const result = yield* Agent.run({ prompt: "Hi", config: { budgets: { wallClock: 1_000 } } }).pipe(
        Effect.provideService(Backend.Backend, { elapsedBefore: 5_000 }),
        Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty),
        Effect.provide(ScriptedModel.layer([{ text: "too late" }]))
      )
      assert.strictEqual(result.outcome._tag, "BudgetExceeded")
      assert.isAtLeast(result.state.elapsedMs, 5_000)
    }))

  it.effect("handedOff is told the agent handed off to and the state it starts from, before it starts", () =>
    Effect.gen(function*() {
      const told: Array<Backend.Handoff> = []
      const events: Array<AgentEvent.AgentEvent> = []
      const billing = Agent.define({
        name: "billing",
        description: "handles refunds",
        system: "You are billing.",
        input: Schema.Struct({ topic: Schema.String }),
        config: { maxTurns: 5 },
        model: ScriptedModel.layer([{ text: "refund issued" }])
      })
      const Tools = Toolkit.make(Agent.handoff(billing))
      const tools = ToolRegistry.layer(Tools).pipe(
        Layer.provide(Tools.toLayer({ transfer_to_billing: SubAgent.handoffHandler(billing) }))
      )
      const result = yield* Agent.run({ prompt: "money back" }).pipe(
        Effect.provideService(Backend.Backend, {
          sinks: [(event) => events.push(event)],
          handedOff: (next) => Effect.sync(() => told.push(next))
        }),
        Effect.provide(tools),
        Effect.provide(ScriptedModel.layer([
          { toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }] }
        ]))
      )
      assert.strictEqual(result.agent, "billing")
      assert.strictEqual(told.length, 1)
      const [next] = told
      assert.strictEqual(next!.agent, "billing")
      assert.deepStrictEqual(next!.config, { maxTurns: 5 })
      assert.strictEqual(next!.state.system, "You are billing.")
      // the state the agent started from: its AgentStart's transcript
      const starts = events.filter((event) => event._tag === "AgentStart")
      assert.strictEqual(starts.length, 2)
      assert.deepStrictEqual(result.state.messages.slice(0, next!.state.messages.length), next!.state.messages)
      assert.strictEqual(result.state.runId, next!.state.runId)
    }))

  it.effect("tools wraps the registry of every agent the run is in: the application's, and an agent's own after a handoff", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const Tools = Toolkit.make(Ask)
      const askLayer = (answer: string) =>
        ToolRegistry.layer(Tools).pipe(Layer.provide(Tools.toLayer({ ask: () => Effect.succeed(answer) })))
      const billing = Agent.define({
        name: "billing",
        description: "handles refunds",
        input: Schema.Struct({ topic: Schema.String }),
        tools: askLayer("billing's own"),
        model: ScriptedModel.layer([{ toolCalls: [{ id: "b1", name: "ask", params: { q: "own?" } }] }, { text: "refunded" }])
      })
      const Main = Toolkit.make(Ask, Agent.handoff(billing))
      const tools = ToolRegistry.layer(Main).pipe(Layer.provide(Main.toLayer({
        ask: () => Effect.succeed("main's"),
        transfer_to_billing: SubAgent.handoffHandler(billing)
      })))
      const result = yield* Agent.run({ prompt: "refund" }).pipe(
        Effect.provideService(Backend.Backend, {
          tools: (registry) => ({
            ...registry,
            invoke: (name, invocation) =>
              Effect.andThen(Effect.sync(() => seen.push(`${invocation.toolCallId}:${name}`)), registry.invoke(name, invocation))
          })
        }),
        Effect.provide(tools),
        Effect.provide(ScriptedModel.layer([
          { toolCalls: [{ id: "m1", name: "ask", params: { q: "main?" } }] },
          { toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }] }
        ]))
      )
      assert.strictEqual(result.agent, "billing")
      assert.deepStrictEqual(seen, ["m1:ask", "h1:transfer_to_billing", "b1:ask"])
      const answers = result.state.messages.flatMap((message) =>
        message.role === "toolResult" && message.toolCallId === "b1" ? [Message.textOf(message)] : []
      )
      assert.deepStrictEqual(answers, ["billing's own"])
    }))

  it("RunState.fromPrompt: the one place a prompt becomes a transcript", () => {
    const message = Message.user("as a message")
    assert.deepStrictEqual(RunState.fromPrompt({ runId: "r", prompt: "text" }).messages, [Message.user("text")])
    assert.deepStrictEqual(RunState.fromPrompt({ runId: "r", prompt: message }).messages, [message])
    assert.deepStrictEqual(RunState.fromPrompt({ runId: "r", prompt: [message, message] }).messages, [message, message])
    assert.isString(RunState.fromPrompt({ prompt: "x" }).runId)
  })
})
