/**
 * A supervised run whose worker (our own loop) hands off (`Agent.handoff`):
 * the worker's transcript is then the agent handed off to's, and its next
 * turns, in the same run or in a resumed session, go on in that agent, as
 * `Agent.runContinue` does with its `agent`. A session's checkpoint records
 * the handoff, so that the library reads back what it wrote.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, type AgentEvent, Message, Steering, SubAgent, ToolRegistry } from "effect-agent"
import { CheckpointStore } from "effect-agent/session"
import { Check, SupervisedSession, Supervisor } from "effect-agent/supervisor"
import { ScriptedModel } from "effect-agent/testing"
import { patience } from "../patience.ts"

const systems = { main: "You are the main agent.", billing: "You are billing." } as const

const Step = Tool.make("step", { parameters: Schema.Struct({ n: Schema.Finite }), success: Schema.String })
const StepKit = Toolkit.make(Step)
const stepTools = ToolRegistry.layer(StepKit).pipe(Layer.provide(StepKit.toLayer({
  step: ({ n }) => Effect.succeed(`step ${n} done`)
})))

const billing = Agent.define({
  name: "billing",
  description: "Handles billing",
  system: systems.billing,
  input: Schema.Struct({ topic: Schema.String }),
  prompt: ({ topic }) => `billing: ${topic}`,
  tools: stepTools
})

const Kit = Toolkit.make(Step, Agent.handoff(billing))
const tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
  step: ({ n }) => Effect.succeed(`step ${n} done`),
  transfer_to_billing: SubAgent.handoffHandler(billing)
})))

type Name = keyof typeof systems

/**
 * Whose turn a request is, by the tools it offers (billing has its own, without the handoff: the application's
 * agent given billing's transcript is still the application's), and how many replies its transcript holds.
 */
const whose = (request: ScriptedModel.Request): { readonly agent: Name; readonly replies: number } => ({
  agent: request.tools.includes("transfer_to_billing") ? "main" : "billing",
  replies: request.prompt.content.filter((message) => message.role === "assistant").length
})

/** A model that plays each agent's script by how many replies its transcript holds. */
const modelOf = (script: Record<Name, ReadonlyArray<ScriptedModel.Turn | undefined>>) =>
  ScriptedModel.layer((_index, request) => {
    const { agent, replies } = whose(request)
    return script[agent][replies]
  })

const handOff: ScriptedModel.Turn = {
  toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }]
}

/** Main hands off at once; billing answers each of its turns in order. */
const script = (...answers: ReadonlyArray<ScriptedModel.Turn>) =>
  modelOf({
    main: [handOff, { text: "main answered (the wrong agent)" }, { text: "main again" }],
    // billing's transcript holds main's handoff call when it starts: its first reply is its second
    billing: [undefined, ...answers]
  })

const inStore = (store: CheckpointStore.Service) => Effect.provideService(CheckpointStore.CheckpointStore, store)

const texts = (messages: ReadonlyArray<Message.Message>) =>
  messages.map((message) => `${message.role}:${Message.textOf(message)}`)

const base = { checks: [], baseline: false, agent: { system: systems.main } } as const
const withBilling = { ...base, agent: { system: systems.main, agents: [billing] } } as const

describe("Supervised runs after a handoff", () => {
  it.effect("a converged session that handed off is read back: load names the agent, resume ends as it ended", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const first = yield* SupervisedSession.run({ id: "h1", task: "I want a refund.", ...base }).pipe(
        inStore(store),
        Effect.provide(Layer.merge(script({ text: "Billing: refund on its way." }), tools))
      )
      assert.deepStrictEqual(first.outcome, { _tag: "Converged", turns: 1 })
      assert.strictEqual(Message.textOf(first.state.messages.at(-1)!), "Billing: refund on its way.")
      const loaded = yield* SupervisedSession.load("h1").pipe(inStore(store))
      assert.deepStrictEqual(loaded.handedOff, { agent: "billing", runId: first.state.runId })
      assert.strictEqual(loaded.agentState?.runId, first.state.runId)
      assert.notStrictEqual(first.state.runId, loaded.runId)
      // nothing queued: no turn, so no agent needed to go on in
      const again = yield* SupervisedSession.resume({ id: "h1", ...base }).pipe(
        inStore(store),
        Effect.provide(Layer.merge(script(), tools))
      )
      assert.deepStrictEqual(again.outcome, first.outcome)
      assert.deepStrictEqual(texts(again.state.messages), texts(first.state.messages))
    }))

  it.effect("resumed with a follow-up, the session goes on in the agent handed off to", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const model = script({ text: "Billing: refund on its way." }, { text: "Billing: and the invoice too." })
      const layer = Layer.merge(model, tools)
      yield* SupervisedSession.run({ id: "h2", task: "I want a refund.", ...withBilling }).pipe(
        inStore(store),
        Effect.provide(layer)
      )
      const steering = yield* Steering.make()
      yield* steering.followUp("And the invoice?")
      const events: Array<AgentEvent.AgentEvent> = []
      const again = yield* SupervisedSession.resume({
        id: "h2",
        ...withBilling,
        steering,
        onEvent: (event) => Effect.sync(() => void events.push(event))
      }).pipe(inStore(store), Effect.provide(layer))
      assert.deepStrictEqual(again.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(texts(again.state.messages).slice(-3), [
        "assistant:Billing: refund on its way.",
        "user:And the invoice?",
        "assistant:Billing: and the invoice too."
      ])
      assert.deepStrictEqual(again.state.followUps, [])
      // the follow-up's turn ran in billing, not in the application's agent
      const delivered = events.filter((event) => event._tag === "FollowUpDelivered")
      assert.strictEqual(delivered.length, 1)
      const saved = yield* SupervisedSession.load("h2").pipe(inStore(store))
      assert.deepStrictEqual(saved.handedOff, { agent: "billing", runId: again.state.runId })
      assert.deepStrictEqual(saved.outcome, { _tag: "Converged", turns: 2 })
    }))

  it.effect("resumed with a follow-up but without the agent's definition: a ConfigError naming agents", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const layer = Layer.merge(script({ text: "Billing: refund on its way." }, { text: "unreached" }), tools)
      yield* SupervisedSession.run({ id: "h3", task: "I want a refund.", ...base }).pipe(inStore(store), Effect.provide(layer))
      const steering = yield* Steering.make()
      yield* steering.followUp("And the invoice?")
      const error = yield* Effect.flip(SupervisedSession.resume({ id: "h3", ...base, steering }).pipe(
        inStore(store),
        Effect.provide(layer)
      ))
      assert.strictEqual(error._tag, "ConfigError")
      assert.strictEqual(error._tag === "ConfigError" ? error.field : undefined, "agents")
      // the checkpoint is still the session's, and can be resumed with the agent given
      const loaded = yield* SupervisedSession.load("h3").pipe(inStore(store))
      assert.strictEqual(loaded.handedOff?.agent, "billing")
    }))

  it.effect("in one run: checks that fail after the handoff send their feedback to the agent handed off to", () =>
    Effect.gen(function*() {
      let answers = 0
      const check = Check.make("billing answered twice", Effect.sync(() => {
        answers += 1
        return answers >= 2 ? { status: "pass", summary: "ok" } as const : { status: "fail", summary: "once" } as const
      }))
      const result = yield* Supervisor.run({ task: "I want a refund.", ...withBilling, checks: [check] }).pipe(
        Effect.provide(Layer.merge(script({ text: "Billing: first." }, { text: "Billing: second." }), tools))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.strictEqual(result.reply, "Billing: second.")
      assert.strictEqual(Message.textOf(result.state.messages.at(-1)!), "Billing: second.")
    }))

  it.live("stopped in the middle of the turn of the agent handed off to: loaded, then resumed in that agent", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const started = yield* Deferred.make<void>()
      // process 1: billing's first call hangs (the handoff's run has been saved mid-turn by then)
      const hanging = ScriptedModel.layer((_index, request) => {
        const { agent, replies } = whose(request)
        if (agent === "main") return replies === 0 ? handOff : undefined
        return { text: "thinking", hang: true }
      })
      const fiber = yield* Effect.forkChild(
        SupervisedSession.run({
          id: "h4",
          task: "I want a refund.",
          runId: "supervised",
          ...withBilling,
          // billing's first TurnStart (its run's id is its own): the session's plugin has saved before it reaches here
          onEvent: (event) =>
            event._tag === "TurnStart" && event.runId !== "supervised" ? Deferred.succeed(started, undefined) : Effect.void
        }).pipe(inStore(store), Effect.provide(Layer.merge(hanging, tools)))
      )
      yield* Deferred.await(started).pipe(Effect.timeout(patience))
      yield* Fiber.interrupt(fiber)
      const loaded = yield* SupervisedSession.load("h4").pipe(inStore(store))
      assert.strictEqual(loaded.inTurn, true)
      assert.strictEqual(loaded.handedOff?.agent, "billing")
      assert.strictEqual(loaded.handedOff?.runId, loaded.agentState?.runId)
      // process 2: billing answers; the turn is continued in billing
      const again = yield* SupervisedSession.resume({ id: "h4", ...withBilling }).pipe(
        inStore(store),
        Effect.provide(Layer.merge(script({ text: "Billing: refund on its way." }), tools))
      )
      assert.deepStrictEqual(again.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(texts(again.state.messages), [
        "user:I want a refund.",
        "assistant:",
        "toolResult:Handed off to billing.",
        "user:billing: refund",
        "assistant:Billing: refund on its way."
      ])
      assert.strictEqual(again.state.runId, loaded.handedOff?.runId)
    }))
})
