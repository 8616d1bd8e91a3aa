import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { TestClock } from "effect/testing"
import { Agent, Approvals, Hooks, Message, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { makeTrace, ofTag, recorder, runOk, tags, toolsLayer } from "./support.ts"

const call = (name: string, params: unknown, id: string) => ({ id, name, params })
const textOf = (messages: ReadonlyArray<Message.Message>, id: string) => {
  const found = messages.find((m) => m.role === "toolResult" && m.toolCallId === id)
  return found === undefined ? undefined : Message.textOf(found)
}

/** Runs with an interactive approver; `answer` is called on each ApprovalRequested. */
const runInteractive = (
  script: ScriptedModel.Script,
  answer: (approvals: Approvals.Interactive, toolCallId: string) => Effect.Effect<unknown>
) =>
  Effect.gen(function*() {
    const approvals = yield* Approvals.interactive()
    const trace = makeTrace()
    const { events, plugin } = recorder()
    const answering = Hooks.plugin({
      name: "answer",
      onEvent: (e) => e._tag === "ApprovalRequested" ? Effect.asVoid(Effect.forkDetach(answer(approvals, e.toolCallId))) : Effect.void
    })
    const fiber = yield* Effect.forkChild(
      Agent.run({ prompt: "go", plugins: [plugin, answering] }).pipe(
        Effect.provideService(Approvals.Approvals, approvals),
        Effect.provide(Layer.merge(ScriptedModel.layer(script), toolsLayer(trace)))
      )
    )
    yield* TestClock.adjust("10 seconds")
    const result = yield* Fiber.join(fiber)
    return { result, events, trace, approvals }
  })

describe("approvals", () => {
  it.effect("a tool flagged needsApproval waits for the decision; approved, it runs", () =>
    Effect.gen(function*() {
      const { events, result, trace } = yield* runInteractive(
        [{ toolCalls: [call("deploy", { env: "staging" }, "d")] }, { text: "deployed" }],
        (approvals, id) => approvals.approve(id)
      )
      assert.strictEqual(textOf(result.messages, "d"), "deployed to staging")
      assert.deepStrictEqual(trace.started, ["deploy:staging"])
      const order = tags(events).filter((t) => t.startsWith("Approval") || t.startsWith("ToolExecution"))
      assert.deepStrictEqual(order, ["ApprovalRequested", "ApprovalResolved", "ToolExecutionStart", "ToolExecutionEnd"])
      assert.deepStrictEqual(ofTag(events, "ApprovalRequested")[0]!.params, { env: "staging" })
      assert.isTrue(ofTag(events, "ApprovalResolved")[0]!.approved)
    }))

  it.effect("denied, the handler never runs and the model reads the reason", () =>
    Effect.gen(function*() {
      const { events, result, trace } = yield* runInteractive(
        [{ toolCalls: [call("deploy", { env: "prod" }, "d")] }, { text: "ok" }],
        (approvals, id) => approvals.deny(id, "not on a Friday")
      )
      assert.strictEqual(textOf(result.messages, "d"), "Tool call denied: not on a Friday")
      assert.deepStrictEqual(trace.started, [])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionStart"), [])
      const resolved = ofTag(events, "ApprovalResolved")[0]!
      assert.deepStrictEqual([resolved.approved, resolved.reason], [false, "not on a Friday"])
    }))

  it.effect("a call waiting for approval does not block the other calls of its batch", () =>
    Effect.gen(function*() {
      const { events, result } = yield* runInteractive(
        [{ toolCalls: [call("deploy", { env: "prod" }, "d"), call("sleep", { ms: 100, label: "s" }, "s")] }, {
          text: "ok"
        }],
        (approvals, id) => Effect.andThen(Effect.sleep("1 second"), approvals.approve(id))
      )
      const order = events.filter((e) => e._tag === "ToolExecutionEnd" || e._tag === "ApprovalResolved")
        .map((e) => `${e._tag}:${"toolCallId" in e ? e.toolCallId : ""}`)
      assert.deepStrictEqual(order, ["ToolExecutionEnd:s", "ApprovalResolved:d", "ToolExecutionEnd:d"])
      assert.strictEqual(textOf(result.messages, "d"), "deployed to prod")
      // the approval arrived after 1 s; the sleep ended at 100 ms
      const endOf = (id: string) => ofTag(events, "ToolExecutionEnd").find((e) => e.toolCallId === id)!.timestamp
      assert.strictEqual(endOf("s") - events[0]!.timestamp, 100)
      assert.strictEqual(endOf("d") - events[0]!.timestamp, 1000)
    }))

  it.effect("a decision given before the call asks answers it when it asks", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      assert.isFalse(yield* approvals.approve("d"))
      const result = yield* Agent.run({ prompt: "go" }).pipe(
        Effect.provideService(Approvals.Approvals, approvals),
        Effect.provide(Layer.merge(
          ScriptedModel.layer([{ toolCalls: [call("deploy", { env: "x" }, "d")] }, { text: "ok" }]),
          toolsLayer()
        ))
      )
      assert.strictEqual(textOf(result.messages, "d"), "deployed to x")
    }))

  it.effect("pending lists the calls waiting", () =>
    Effect.gen(function*() {
      const seen = yield* Deferred.make<ReadonlyArray<Approvals.Request>>()
      yield* runInteractive(
        [{ toolCalls: [call("deploy", { env: "a" }, "d1"), call("deploy", { env: "b" }, "d2")] }, { text: "ok" }],
        (approvals, id) =>
          Effect.gen(function*() {
            yield* Effect.sleep("10 millis")
            if (id === "d1") yield* Deferred.succeed(seen, yield* approvals.pending)
            yield* approvals.approve(id)
          })
      )
      const pending = yield* Deferred.await(seen)
      assert.deepStrictEqual(pending.map((r) => r.toolCallId).sort(), ["d1", "d2"])
    }))

  it.effect("without an Approvals service, calls that need approval are denied", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const { result } = yield* runOk([{ toolCalls: [call("deploy", { env: "prod" }, "d")] }, { text: "ok" }], { trace })
      assert.strictEqual(
        textOf(result.messages, "d"),
        "Tool call denied: this call needs approval and no approver is configured"
      )
      assert.deepStrictEqual(trace.started, [])
    }))

  it.effect("a beforeToolCall hook can require approval; a policy decides", () =>
    Effect.gen(function*() {
      const result = yield* Agent.run({
        prompt: "go",
        plugins: [{
          name: "ask-for-big",
          beforeToolCall: (c) => Effect.succeed(c.name === "big" ? Hooks.requireApproval("large output") : Hooks.allow)
        }]
      }).pipe(
        Effect.provideService(
          Approvals.Approvals,
          Approvals.policy((request) =>
            request.reason === "large output" && JSON.stringify(request.params) === "{\"chars\":5}"
              ? Approvals.approved
              : Approvals.denied("too big")
          )
        ),
        Effect.provide(Layer.merge(
          ScriptedModel.layer([{
            toolCalls: [call("big", { chars: 5 }, "b1"), call("big", { chars: 50 }, "b2"), call("add", { a: 1, b: 1 }, "a")]
          }, { text: "ok" }]),
          toolsLayer()
        ))
      )
      assert.strictEqual(textOf(result.messages, "b1"), "xxxxx")
      assert.strictEqual(textOf(result.messages, "b2"), "Tool call denied: too big")
      assert.strictEqual(textOf(result.messages, "a"), "2")
    }))

  it.effect("a needsApproval function decides per call, answering a boolean or an Effect", () =>
    Effect.gen(function*() {
      const Params = Schema.Struct({ amount: Schema.Finite })
      const seen: Array<string> = []
      const Pay = Tool.make("pay", {
        parameters: Params,
        success: Schema.String,
        needsApproval: ({ amount }, { toolCallId }) => {
          seen.push(toolCallId)
          return amount > 100
        }
      })
      const Refund = Tool.make("refund", {
        parameters: Params,
        success: Schema.String,
        needsApproval: ({ amount }) => Effect.succeed(amount > 10)
      })
      const Kit = Toolkit.make(Pay, Refund)
      const handlers = Kit.toLayer({
        pay: ({ amount }) => Effect.succeed(`paid ${amount}`),
        refund: ({ amount }) => Effect.succeed(`refunded ${amount}`)
      })
      const result = yield* Agent.run({ prompt: "go" }).pipe(
        Effect.provideService(Approvals.Approvals, Approvals.denyAll("over the limit")),
        Effect.provide(Layer.mergeAll(
          ScriptedModel.layer([{
            toolCalls: [
              call("pay", { amount: 5 }, "p1"),
              call("pay", { amount: 500 }, "p2"),
              call("refund", { amount: 1 }, "r1"),
              call("refund", { amount: 50 }, "r2")
            ]
          }, { text: "ok" }]),
          ToolRegistry.layer(Kit).pipe(Layer.provide(handlers))
        ))
      )
      assert.strictEqual(textOf(result.messages, "p1"), "paid 5")
      assert.strictEqual(textOf(result.messages, "p2"), "Tool call denied: over the limit")
      assert.strictEqual(textOf(result.messages, "r1"), "refunded 1")
      assert.strictEqual(textOf(result.messages, "r2"), "Tool call denied: over the limit")
      assert.deepStrictEqual(seen, ["p1", "p2"])
    }))

  it.effect("allowAll and denyAll", () =>
    Effect.gen(function*() {
      const run = (service: Approvals.Service) =>
        Agent.run({ prompt: "go" }).pipe(
          Effect.provide(Approvals.layer(service)),
          Effect.provide(Layer.merge(
            ScriptedModel.layer([{ toolCalls: [call("deploy", { env: "x" }, "d")] }, { text: "ok" }]),
            toolsLayer()
          ))
        )
      assert.strictEqual(textOf((yield* run(Approvals.allowAll)).messages, "d"), "deployed to x")
      assert.strictEqual(textOf((yield* run(Approvals.denyAll())).messages, "d"), "Tool call denied: denied by policy")
    }))
})

describe("Approvals.interactive: plans and turns", () => {
  it.effect("a plan waits for its decision; decisions given early are kept, in order, for the next plans", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const fiber = yield* Effect.forkChild(approvals.decidePlan({ runId: "r", plan: "p1", iteration: 1 }))
      yield* Effect.yieldNow
      assert.deepStrictEqual(yield* approvals.pendingPlan, { runId: "r", plan: "p1", iteration: 1 })
      assert.isTrue(yield* approvals.decidePlanWith({ _tag: "Refine", notes: "more" }))
      assert.deepStrictEqual(yield* Fiber.join(fiber), { _tag: "Refine", notes: "more" })
      assert.isUndefined(yield* approvals.pendingPlan)
      assert.isFalse(yield* approvals.decidePlanWith({ _tag: "Refine", notes: "again" }))
      assert.isFalse(yield* approvals.decidePlanWith({ _tag: "Approve" }))
      assert.deepStrictEqual(yield* approvals.decidePlan({ runId: "r", plan: "p2", iteration: 2 }), {
        _tag: "Refine",
        notes: "again"
      })
      assert.deepStrictEqual(yield* approvals.decidePlan({ runId: "r", plan: "p3", iteration: 3 }), { _tag: "Approve" })
      assert.isFalse(yield* approvals.decideTurnWith({ _tag: "Replace", feedback: "look at a.ts" }))
      assert.deepStrictEqual(yield* approvals.decideTurn({ runId: "r", turn: 1, feedback: "x" }), {
        _tag: "Replace",
        feedback: "look at a.ts"
      })
    }))
})
