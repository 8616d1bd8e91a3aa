/**
 * Guardrails: an input check beside the first model call, an output check
 * on the final answer; a trip ends the run `GuardrailTripped` with a valid
 * transcript.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Latch, Schema } from "effect"
import { Agent, Guardrail, Hooks, Message, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, makeTrace, ofTag, runOk } from "./support.ts"

describe("Guardrail.input", () => {
  it.live("a trip interrupts the model call in flight and ends the run with the reason", () =>
    Effect.gen(function*() {
      const calling = Latch.makeUnsafe()
      const started = Hooks.plugin({
        name: "started",
        observe: (event) => void (event._tag === "TurnStart" && calling.openUnsafe())
      })
      const guard = Guardrail.input(({ text }) =>
        // trips once the model call is under way
        Effect.as(calling.await, text.includes("password") ? Guardrail.trip("the prompt holds a password") : Guardrail.pass), { name: "secrets" })
      // the model never answers: only the trip can end this run
      const { events, requests, result } = yield* runOk([{ hang: true }], {
        prompt: "my password is hunter2",
        plugins: [started, guard]
      })
      assert.strictEqual(requests.length, 1)
      assert.deepStrictEqual(result.outcome, {
        _tag: "GuardrailTripped",
        guardrail: "secrets",
        reason: "the prompt holds a password",
        phase: "input"
      })
      assertValidTranscript(result.state.messages)
      const tripped = ofTag(events, "GuardTripped")
      assert.deepStrictEqual(tripped.map((e) => [e.guard, e.detail]), [["guardrail:secrets", "the prompt holds a password"]])
      assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
    }))

  it.live("the model call does not wait for the check, but the first turn's tools do", () =>
    Effect.gen(function*() {
      const order: Array<string> = []
      const trace = makeTrace()
      const guard = Guardrail.input(() =>
        Effect.sleep("50 millis").pipe(Effect.andThen(Effect.sync(() => (order.push("checked"), Guardrail.pass))))
      )
      const seen = Hooks.plugin({
        name: "seen",
        observe: (event) => {
          if (event._tag === "MessageEnd" && event.message.role === "assistant") order.push("replied")
          if (event._tag === "ToolExecutionStart") order.push("tool")
        }
      })
      const { result } = yield* runOk([
        { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { text: "3" }
      ], { plugins: [seen, guard], trace })
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(order.slice(0, 3), ["replied", "checked", "tool"])
      assert.deepStrictEqual(trace.started, ["add"])
    }))

  it.live("a trip after the model answered still ends the run: it does not complete before the check", () =>
    Effect.gen(function*() {
      const guard = Guardrail.input(() => Effect.as(Effect.sleep("30 millis"), Guardrail.trip("off topic")))
      const { result } = yield* runOk([{ text: "sure, here you go" }], { plugins: [guard] })
      assert.deepStrictEqual(result.outcome, { _tag: "GuardrailTripped", guardrail: "input", reason: "off topic", phase: "input" })
    }))
})

describe("Guardrail.output", () => {
  it.effect("a trip on the final answer ends the run with the reason; replies that call tools are not checked", () =>
    Effect.gen(function*() {
      const checked: Array<string> = []
      const pii = Guardrail.output(({ text }) =>
        Effect.sync(() => {
          checked.push(text)
          return text.includes("@") ? Guardrail.trip("the answer holds an email address") : Guardrail.pass
        }), { name: "pii" })
      const { events, result } = yield* runOk([
        { text: "let me look", toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { text: "write to bob@example.com" }
      ], { plugins: [pii] })
      assert.deepStrictEqual(checked, ["write to bob@example.com"])
      assert.deepStrictEqual(result.outcome, {
        _tag: "GuardrailTripped",
        guardrail: "pii",
        reason: "the answer holds an email address",
        phase: "output"
      })
      assertValidTranscript(result.state.messages)
      assert.strictEqual(Message.textOf(result.state.messages.at(-1)!), "write to bob@example.com")
      assert.deepStrictEqual(ofTag(events, "GuardTripped").map((e) => e.guard), ["guardrail:pii"])
    }))

  it.effect("a typed final answer is checked too: a trip ends the run without an output", () =>
    Effect.gen(function*() {
      const checked: Array<unknown> = []
      const limit = Guardrail.output(({ output }) =>
        Effect.sync(() => {
          checked.push(output)
          return (output as { amount: number }).amount > 100 ? Guardrail.trip("over the refund limit") : Guardrail.pass
        }), { name: "limit" })
      const result = yield* Agent.run({
        prompt: "refund",
        plugins: [limit],
        output: Schema.Struct({ amount: Schema.Finite })
      }).pipe(
        Effect.provide(ScriptedModel.layer([{ toolCalls: [{ name: "final_answer", params: { amount: 250 } }] }])),
        Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty)
      )
      assert.deepStrictEqual(checked, [{ amount: 250 }])
      assert.deepStrictEqual(result.outcome, {
        _tag: "GuardrailTripped",
        guardrail: "limit",
        reason: "over the refund limit",
        phase: "output"
      })
      assert.strictEqual(result.output, undefined)
      assertValidTranscript(result.state.messages)
    }))

  it.effect("an answer that passes completes the run", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([{ text: "fine" }], {
        plugins: [Guardrail.output(() => Effect.succeed(Guardrail.pass))]
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
    }))
})
