/**
 * AgentEvent: every event's JSON form, and what an AgentEnd holds.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Schema } from "effect"
import { AiError } from "effect/ai"
import { AgentError, AgentEvent, Message, RunState } from "effect-agent"
import { roundTrip, runOk } from "./support.ts"

describe("AgentEvent.AgentEvent", () => {
  it.effect("every event of a real run, and one of every other tag", () =>
    Effect.gen(function*() {
      const { events } = yield* runOk([
        { reasoning: "plan", toolCalls: [{ name: "progress", params: { steps: 2 } }, { name: "ghost", params: {} }] },
        { text: "done" }
      ])
      const base = { runId: "r", turn: 1, timestamp: 1 }
      const more: ReadonlyArray<AgentEvent.AgentEvent> = [
        { ...base, _tag: "ApprovalRequested", toolCallId: "c", toolName: "deploy", params: { env: "x" }, reason: "why" },
        { ...base, _tag: "ApprovalResolved", toolCallId: "c", toolName: "deploy", approved: false, reason: "no" },
        { ...base, _tag: "SteeringDelivered", messages: [Message.user("s")] },
        { ...base, _tag: "FollowUpDelivered", messages: [Message.user("f")] },
        { ...base, _tag: "DeliveryBlocked", kind: "steering", messages: [Message.user("b")], plugin: "guardrail:input" },
        { ...base, _tag: "WrapUpRequested", source: "maxTurns", message: "wrap up" },
        { ...base, _tag: "GuardTripped", guard: "loop", action: "warn", detail: "repeating", figures: { repeats: 3 } },
        { ...base, _tag: "ContextTransformed", plugin: "p", messagesBefore: 9, messagesAfter: 4, tokensBefore: 900, tokensAfter: 300 },
        { ...base, _tag: "CheckpointSaved", sessionId: "s", bytes: 120 },
        { ...base, _tag: "OutputDelta", toolCallId: "f1", delta: "{\"sum\":" },
        { ...base, ...AgentEvent.custom("meter/spent", Schema.Struct({ cents: Schema.Finite })).make({ cents: 3 }) },
        {
          ...base,
          _tag: "SessionResumed",
          sessionId: "s",
          resumedAtTurn: 3,
          restored: { messages: 5, turns: 2, usage: Message.emptyUsage, elapsedMs: 10, steering: 0, followUps: 1, pendingApprovals: 0 }
        },
        { ...base, _tag: "AgentEnd", error: new AgentError.ConfigError({ field: "x", rule: "y" }) },
        {
          ...base,
          _tag: "AgentEnd",
          error: new AgentError.ModelError({
            reason: new AiError.RateLimitError({}),
            turn: 2,
            state: RunState.make({ runId: "r", messages: [Message.user("go")] })
          })
        },
        { ...base, _tag: "AgentEnd", defect: "Error: bug" },
        // a grandchild's event, as its grandparent reports it: the nested error keeps its class through JSON
        {
          ...base,
          _tag: "Nested",
          path: ["researcher", "searcher"],
          event: { ...base, runId: "child", _tag: "AgentEnd", error: new AgentError.ConfigError({ field: "x", rule: "y" }) }
        }
      ]
      const all = [...events, ...more]
      // every tag by name: a tag renamed or added without an example here fails, naming it
      const tagsSeen = [...new Set(all.map((e) => e._tag))].sort()
      assert.deepStrictEqual(tagsSeen, Object.keys(AgentEvent.AgentEvent.cases).sort())
      for (const event of all) roundTrip(AgentEvent.AgentEvent, event)
    }))
})

describe("AgentEnd", () => {
  it("its type says what is present: an outcome comes with the result, an error or a defect alone", () => {
    const summary = (end: AgentEvent.Of<"AgentEnd">): string => {
      // no `?.` or `!`: the type guarantees the result when there is an outcome
      if (end.outcome !== undefined) return `${end.outcome._tag} after ${end.result.state.turn} turns`
      if (end.error !== undefined) return `failed: ${end.error._tag}`
      return `died: ${end.defect}`
    }
    const base = { runId: "r", turn: 1, timestamp: 1 }
    const state = RunState.make({ runId: "r" })
    const ended: AgentEvent.AgentEvent = {
      ...base,
      _tag: "AgentEnd",
      outcome: { _tag: "Completed" },
      result: { messages: [], state, outcome: { _tag: "Completed" }, usage: Message.emptyUsage }
    }
    assert.strictEqual(ended._tag === "AgentEnd" && summary(ended), "Completed after 0 turns")
    assert.strictEqual(summary({ ...base, _tag: "AgentEnd", defect: "Error: bug" }), "died: Error: bug")
  })

  it("decoding refuses an AgentEnd that is none of the three, or two at once", () => {
    const base = { runId: "r", turn: 1, timestamp: 1, _tag: "AgentEnd" } as const
    const encode = (event: AgentEvent.AgentEvent): Record<string, unknown> =>
      Object.fromEntries(Object.entries(Schema.encodeSync(AgentEvent.AgentEventJson)(event) ?? {}))
    const decode = Schema.decodeUnknownExit(AgentEvent.AgentEventJson)
    const failed = encode({ ...base, error: new AgentError.ConfigError({ field: "x", rule: "y" }) })
    const outcome = { _tag: "Completed" } as const
    const ended = encode({
      ...base,
      outcome,
      result: { messages: [], state: RunState.make({ runId: "r" }), outcome, usage: Message.emptyUsage }
    })
    assert.isTrue(Exit.isSuccess(decode(failed)))
    assert.isTrue(Exit.isSuccess(decode(ended)))
    const error = failed.error
    for (const bad of [base, { ...base, outcome }, { ...failed, defect: "x" }, { ...ended, error }]) {
      assert.isTrue(Exit.isFailure(decode(bad)), JSON.stringify(bad))
    }
  })
})

describe("AgentEvent.custom", () => {
  const Spent = AgentEvent.custom("meter/spent", Schema.Struct({ at: Schema.DateTimeUtcFromString }))
  const base = { runId: "r", turn: 1, timestamp: 1 }

  it("makes a Custom event whose payload is in its JSON form, and reads it back typed", () => {
    const at = Schema.decodeSync(Schema.DateTimeUtcFromString)("2026-01-02T00:00:00.000Z")
    const input = Spent.make({ at })
    assert.deepStrictEqual(input, { _tag: "Custom", kind: "meter/spent", payload: { at: "2026-01-02T00:00:00.000Z" } })
    const event: AgentEvent.AgentEvent = { ...base, ...input }
    // through JSON, as a trajectory stores it
    const json = JSON.parse(JSON.stringify(AgentEvent.encodeJson(event)))
    const back = Schema.decodeUnknownSync(AgentEvent.AgentEventJson)(json)
    assert.deepStrictEqual(back, event)
    assert.isTrue(Spent.is(back))
    const payload = Option.getOrUndefined(Spent.payload(back))
    assert.strictEqual(payload?.at.epochMilliseconds, Date.UTC(2026, 0, 2))
  })

  it("an event of a kind a reader does not know is kept as it is, and another kind's reader says None", () => {
    const unknown = { ...base, _tag: "Custom" as const, kind: "newer-plugin/thing", payload: { any: ["json", 1] } }
    const back = Schema.decodeUnknownSync(AgentEvent.AgentEventJson)(unknown)
    assert.deepStrictEqual(back, unknown)
    assert.isFalse(Spent.is(back))
    assert.isTrue(Option.isNone(Spent.payload(back)))
    // a payload that does not fit its kind's Schema is None, not a throw
    assert.isTrue(Option.isNone(Spent.payload({ ...base, _tag: "Custom", kind: "meter/spent", payload: { at: 5 } })))
  })
})
