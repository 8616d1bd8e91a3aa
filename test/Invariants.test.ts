/**
 * The ARCHITECTURE invariants on random runs: random tool calls, failures,
 * defects, synchronous throws, timeouts, blocks, denials, cancellation, wall-clock deadlines and
 * interruption points.
 *
 * 1. Every tool call gets exactly one result, in the calls' order.
 * 2. AgentEnd is the last event of every run, however it ends.
 * 4. A blocked or denied call's handler never starts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Schema } from "effect"
import { TestClock } from "effect/testing"
import { Agent, Approvals, Hooks, Steering } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, makeTrace, ofTag, recorder, toolsLayer } from "./support.ts"

const CallKind = Schema.Literals([
  "add",
  "flaky",
  "crash",
  "throw",
  "failing",
  "fatal",
  "timeout",
  "sleep",
  "blocked",
  "unknown",
  "malformed",
  "invalid",
  "deploy",
  "done",
  "note",
  "progress",
  "exclusive",
  "sequential"
])
type CallKind = typeof CallKind.Type

const Scenario = Schema.Struct({
  turns: Schema.Array(Schema.Array(CallKind).check(Schema.isMaxLength(5))).check(Schema.isMaxLength(6)),
  cancelAtEvent: Schema.NullOr(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 60 }))),
  interruptAtEvent: Schema.NullOr(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 60 }))),
  maxParallelTools: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 4 })),
  approve: Schema.Boolean,
  /** A wall-clock deadline, in virtual seconds, that may cut a model call, a batch or an approval wait. */
  wallClockSeconds: Schema.NullOr(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 90 })))
})
type Scenario = typeof Scenario.Type

const toCall = (kind: CallKind, turn: number, index: number): ScriptedModel.ToolCall => {
  const id = `t${turn}c${index}`
  const sleep = (name: string, ms: number) => ({ id, name, params: { ms, label: id } })
  switch (kind) {
    case "add":
      return { id, name: "add", params: { a: turn, b: index } }
    case "flaky":
      return { id, name: "flaky", params: { reason: "nope" } }
    case "crash":
      return { id, name: "crash", params: {} }
    case "throw":
      return { id, name: "throw", params: {} }
    case "failing":
      return { id, name: "failing", params: { reason: "not found" } }
    case "fatal":
      return { id, name: "fatal", params: { reason: "corrupt" } }
    case "timeout":
      return sleep("sleep", 120_000)
    case "sleep":
      return sleep("sleep", 10 * (index + 1))
    case "exclusive":
      return sleep("sleep_exclusive", 20)
    case "sequential":
      return sleep("sleep_sequential", 5)
    case "blocked":
      return { id, name: "big", params: { chars: 666 } }
    case "unknown":
      return { id, name: "ghost", params: {} }
    case "malformed":
      return { id, name: "add", rawParams: "{\"a\":" }
    case "invalid":
      return { id, name: "add", params: { a: "x" } }
    case "deploy":
      return { id, name: "deploy", params: { env: id } }
    case "done":
      return { id, name: "done", params: { summary: id } }
    case "note":
      return { id, name: "note", params: { text: id } }
    case "progress":
      return { id, name: "progress", params: { steps: 3 } }
  }
}

const scriptOf = (scenario: Scenario): ReadonlyArray<ScriptedModel.Turn> => [
  ...scenario.turns.map((calls, turn) => ({ text: `turn ${turn}`, toolCalls: calls.map((kind, i) => toCall(kind, turn, i)) })),
  { text: "final answer" }
]

const runScenario = (scenario: Scenario) =>
  Effect.gen(function*() {
    const trace = makeTrace()
    const steering = yield* Steering.make()
    const interrupt = yield* Deferred.make<void>()
    const { events, plugin } = recorder()
    let seen = 0
    const triggers = Hooks.plugin({
      name: "triggers",
      onEvent: () =>
        Effect.gen(function*() {
          const n = seen++
          if (n === scenario.cancelAtEvent) yield* steering.cancel("random cancel")
          if (n === scenario.interruptAtEvent) yield* Deferred.succeed(interrupt, undefined)
        })
    })
    const blocker = Hooks.plugin({
      name: "blocker",
      beforeToolCall: (call) =>
        Effect.succeed(call.name === "big" ? Hooks.block("blocked by the test") : Hooks.allow)
    })
    const fiber = yield* Effect.forkChild(
      Agent.run({
        prompt: "go",
        steering,
        plugins: [plugin, triggers, blocker],
        config: {
          maxParallelTools: scenario.maxParallelTools,
          toolTimeout: "30 seconds",
          maxTurns: 20,
          budgets: { wallClock: scenario.wallClockSeconds === null ? null : scenario.wallClockSeconds * 1_000 }
        }
      }).pipe(
        Effect.provide(Approvals.layer(scenario.approve ? Approvals.allowAll : Approvals.denyAll("no"))),
        Effect.provide(Layer.merge(ScriptedModel.layer(scriptOf(scenario)), toolsLayer(trace)))
      )
    )
    // drive virtual time until the run ends, interrupting it when its trigger fires
    const exit = yield* Effect.gen(function*() {
      // worst case: 6 turns of 5 sequential calls that each time out after 30 s
      for (let step = 0; step < 2_000; step++) {
        if (Deferred.isDoneUnsafe(interrupt)) {
          yield* Fiber.interrupt(fiber)
          return yield* Fiber.await(fiber)
        }
        if (fiber.pollUnsafe() !== undefined) return yield* Fiber.await(fiber)
        yield* TestClock.adjust("1 second")
      }
      return yield* Effect.die(new Error("the run did not end"))
    })
    return { exit, events, trace }
  })

describe("invariants on random runs", () => {
  it.effect("the slowest scenario ends: every call of every turn times out one after another", () =>
    Effect.gen(function*() {
      const { events } = yield* runScenario({
        turns: Array.from({ length: 6 }, () => ["exclusive", "timeout", "timeout", "timeout", "timeout"] as const),
        cancelAtEvent: null,
        interruptAtEvent: null,
        maxParallelTools: 1,
        approve: true,
        wallClockSeconds: null
      })
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))

  it.effect("a cancel from a hook as a queued call starts: that call runs once and AgentEnd is last", () =>
    Effect.gen(function*() {
      // found by the property below: the cancel ends the running calls at once, inside the queued call's start
      const { events, trace } = yield* runScenario({
        turns: [["sleep", "sleep", "unknown", "sleep", "add"]],
        cancelAtEvent: 16,
        interruptAtEvent: null,
        maxParallelTools: 3,
        approve: false,
        wallClockSeconds: null
      })
      const ended = ofTag(events, "ToolExecutionEnd").map((e) => e.toolCallId)
      assert.deepStrictEqual(ended.slice().sort(), ["t0c0", "t0c1", "t0c2", "t0c3", "t0c4"])
      assert.deepStrictEqual(trace.started.filter((label) => label === "add"), ["add"])
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))

  it.effect.prop("1, 2 and 4 hold on every exit path", { scenario: Scenario }, ({ scenario }) =>
    Effect.gen(function*() {
      const { events, exit, trace } = yield* runScenario(scenario)
      // 2. AgentEnd is the last event, and there is exactly one
      const ends = events.filter((e) => e._tag === "AgentEnd")
      assert.strictEqual(ends.length, 1)
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag !== "AgentEnd") return
      // 1. every call has exactly one result, in order, before the next request
      if (Exit.isSuccess(exit)) {
        assertValidTranscript(exit.value.state.messages)
        assert.deepStrictEqual(end.result, exit.value)
      } else if (end.result !== undefined) {
        assertValidTranscript(end.result.state.messages)
      } else {
        assert.isDefined(end.error)
      }
      // 4. blocked and denied calls never started
      assert.isFalse(trace.started.some((label) => label === "big"))
      if (!scenario.approve) assert.isFalse(trace.started.some((label) => label.startsWith("deploy:")))
      for (const e of events) {
        if (e._tag === "ToolExecutionStart") {
          assert.notStrictEqual(e.toolName, "big")
          if (!scenario.approve) assert.notStrictEqual(e.toolName, "deploy")
        }
      }
    }), { timeout: 120_000, arbitrary: { runs: 150 } })
})
