/**
 * SupervisorEvent: a supervised run's own events are the core's open union's
 * `Custom` events: every one round-trips through the events' JSON codec (what
 * `--emit-jsonl` writes and trajectories keep), and reads back typed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { AgentEvent, Message } from "effect-agent"
import { SupervisorEvent } from "effect-agent/supervisor"
import { roundTrip } from "../support.ts"

const base = { runId: "r", turn: 1, timestamp: 1 }

const every: ReadonlyArray<SupervisorEvent.SupervisorEvent> = [
  { _tag: "WorkerTurnStart", worker: "agent", phase: "plan", message: "plan it" },
  { _tag: "WorkerTurnEnd", worker: "agent", phase: "act", text: "done", usage: { ...Message.emptyUsage, input: 1, output: 2 } },
  { _tag: "WorkerFailed", worker: "codex", reason: "eof", message: "stream ended mid-turn" },
  {
    _tag: "SupervisedBudget",
    phase: "act",
    turns: 2,
    planIterations: 1,
    usage: { ...Message.emptyUsage, input: 10, output: 4, cost: 0.01 },
    elapsedMs: 1500,
    limits: { turns: 10, tokens: 1000, costUsd: null, wallClock: null }
  },
  { _tag: "CheckStarted", check: "tests", role: "blocking", baseline: true },
  {
    _tag: "CheckResult",
    check: "tests",
    role: "verifier",
    status: "known",
    summary: "exit 1",
    details: "FAIL",
    durationMs: 12,
    baseline: false
  },
  { _tag: "PlanProposed", plan: "1. read", iteration: 1, value: { steps: ["read"] } },
  { _tag: "PlanRevised", iteration: 2, notes: "shorter" },
  { _tag: "PlanApproved", iteration: 2, plan: "1. read" },
  { _tag: "PlanRejected", iteration: 1, notes: "no" },
  { _tag: "TurnApprovalRequested", feedback: "fix tests" },
  { _tag: "FeedbackSent", feedback: "fix tests", failing: ["tests"] }
]

describe("SupervisorEvent", () => {
  it.effect("every event is a Custom event of the core's union: it round-trips through JSON and reads back typed", () =>
    Effect.sync(() => {
      // every tag by name: a tag added without an example here fails, naming it
      assert.deepStrictEqual(every.map((e) => e._tag).sort(), Object.keys(SupervisorEvent.SupervisorEvent.cases).sort())
      for (const own of every) {
        const event: AgentEvent.AgentEvent = { ...SupervisorEvent.make(own), ...base }
        assert.strictEqual(event._tag, "Custom")
        const back = roundTrip(AgentEvent.AgentEvent, event)
        assert.deepStrictEqual(SupervisorEvent.of(back), { ...own, ...base })
        assert.strictEqual(SupervisorEvent.tagOf(back), own._tag)
      }
    }))

  it("of and ofTag read only the supervisor's events; a core event keeps its own tag", () => {
    const events: ReadonlyArray<AgentEvent.AgentEvent> = [
      { ...base, _tag: "TurnStart" },
      { ...SupervisorEvent.make({ _tag: "FeedbackSent", feedback: "f", failing: [] }), ...base, turn: 3 },
      { ...AgentEvent.custom("other/kind", SupervisorEvent.SupervisorEvent).make(every[0]!), ...base }
    ]
    assert.deepStrictEqual(events.map(SupervisorEvent.tagOf), ["TurnStart", "FeedbackSent", "Custom"])
    assert.deepStrictEqual(SupervisorEvent.ofTag(events, "FeedbackSent").map((e) => [e.feedback, e.turn]), [["f", 3]])
    assert.isUndefined(SupervisorEvent.of(events[0]!))
  })
})
