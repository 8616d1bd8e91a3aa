import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { TestClock } from "effect/testing"
import { Agent, Hooks, Message, Steering } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, makeTrace, ofTag, recorder, toolsLayer } from "./support.ts"

const call = (name: string, params: unknown, id: string) => ({ id, name, params })

describe("interrupting the run's fiber", () => {
  it.effect("interrupts running tools (finalizers run), delivers AgentEnd, leaves no fiber running", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const started = yield* Deferred.make<void>()
      const { events, plugin } = recorder()
      const signal = Hooks.plugin({
        name: "signal",
        onEvent: (e) => e._tag === "ToolExecutionStart" && e.toolCallId === "s2" ? Deferred.succeed(started, undefined) : Effect.void
      })
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go", plugins: [plugin, signal] }).pipe(
          Effect.provide(Layer.merge(
            ScriptedModel.layer([{
              toolCalls: [
                call("sleep", { ms: 10, label: "quick" }, "s1"),
                call("sleep", { ms: 60_000, label: "long-a" }, "s2"),
                call("sleep", { ms: 60_000, label: "long-b" }, "s3")
              ]
            }, { text: "never" }]),
            toolsLayer(trace)
          ))
        )
      )
      yield* Deferred.await(started)
      yield* TestClock.adjust("10 millis")
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(trace.finished, ["quick"])
      assert.deepStrictEqual(trace.finalized.slice().sort(), ["long-a", "long-b", "quick"])
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag !== "AgentEnd") return
      assert.deepStrictEqual(end.outcome, { _tag: "Cancelled", reason: "interrupted" })
      const messages = end.result!.state.messages
      assertValidTranscript(messages)
      const texts = messages.filter((m) => m.role === "toolResult").map((m) => m.role === "toolResult" ? m.content : [])
      // both long calls had started: each says it may have taken effect (issue 29, item 12)
      const running = "Tool call interrupted while it ran: the run was stopped. It had started and was interrupted: " +
        "its outcome is unknown, it may or may not have taken effect. Check before calling it again."
      assert.deepStrictEqual(texts.map((c) => c[0]?.type === "text" ? c[0].text : ""), ["slept quick", running, running])
      assert.deepStrictEqual(
        messages.flatMap((m) => m.role === "toolResult" && m.toolCallId !== "s1" ? [m.details] : []),
        [
          { kind: "interrupted", started: true, outcome: "unknown" },
          { kind: "interrupted", started: true, outcome: "unknown" }
        ]
      )
      // nothing keeps running after the interruption
      const count = events.length
      yield* TestClock.adjust("2 minutes")
      assert.strictEqual(events.length, count)
      assert.deepStrictEqual(trace.finished, ["quick"])
      assert.strictEqual(ofTag(events, "AgentEnd").length, 1)
    }))

  it.effect("29/12: an interrupted run tells a call that ran (outcome unknown) from one that never started", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const started = yield* Deferred.make<void>()
      const { events, plugin } = recorder()
      const signal = Hooks.plugin({
        name: "signal",
        onEvent: (e) => e._tag === "ToolExecutionStart" ? Deferred.succeed(started, undefined) : Effect.void
      })
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go", config: { maxParallelTools: 1 }, plugins: [plugin, signal] }).pipe(
          Effect.provide(Layer.merge(
            ScriptedModel.layer([{
              toolCalls: [call("sleep", { ms: 60_000, label: "ran" }, "s1"), call("sleep", { ms: 10, label: "queued" }, "s2")]
            }, { text: "never" }]),
            toolsLayer(trace)
          ))
        )
      )
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(trace.started, ["ran"])
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag !== "AgentEnd") return
      const messages = end.result!.state.messages
      assertValidTranscript(messages)
      assert.deepStrictEqual(messages.flatMap((m) => m.role === "toolResult" ? [[m.toolCallId, m.details]] : []), [
        ["s1", { kind: "interrupted", started: true, outcome: "unknown" }],
        ["s2", { kind: "interrupted", started: false }]
      ])
    }))

  it.effect("a message the steering handle gave up is kept when the run is interrupted as it is taken", () =>
    Effect.gen(function*() {
      // The run's fiber is interrupted while it takes the handle's messages: the interruption lands as soon as
      // the take returns. Before, a message taken then was in neither the inbox nor the transcript: lost.
      let fiber: Fiber.Fiber<unknown, unknown> | undefined
      const handle = yield* Steering.make()
      let given = false
      const steering: Steering.Service = {
        ...handle,
        takeSteering: Effect.sync(() => {
          if (given) return []
          given = true
          fiber!.interruptUnsafe()
          return [Message.user("keep me")]
        })
      }
      const { events, plugin } = recorder()
      fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go", steering, plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "never" }]), toolsLayer(makeTrace())))
        )
      )
      yield* Fiber.await(fiber)
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag !== "AgentEnd") return
      const state = end.result!.state
      const kept = [...state.steering, ...state.messages].filter((m) => Message.textOf(m) === "keep me")
      assert.strictEqual(kept.length, 1)
    }))

  it.effect("interrupting during the model stream delivers AgentEnd with a valid transcript", () =>
    Effect.gen(function*() {
      const { events, plugin } = recorder()
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go", plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "thinking", hang: true }]), toolsLayer()))
        )
      )
      yield* TestClock.adjust("1 second")
      yield* Fiber.interrupt(fiber)
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag === "AgentEnd") {
        assert.strictEqual(end.outcome?._tag, "Cancelled")
        assertValidTranscript(end.result!.state.messages)
      }
    }))
})
