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

  it.effect("wrong-call attack: a decision for no waiting call is refused and not kept; a later call_0 waits for its own", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const trace = makeTrace()
      const answers: Array<boolean> = []
      // A provider that numbers calls per response: both turns' deploys are call_0.
      const reviewer = Hooks.plugin({
        name: "reviewer",
        onEvent: (event) => {
          if (event._tag !== "ApprovalRequested") return Effect.void
          const id = event.approvalId ?? event.toolCallId
          const approve = Effect.map(approvals.approve(id), (answered) => void answers.push(answered))
          return JSON.stringify(event.params).includes("staging")
            // approved, and approved again (a double click, a retry): the second names no waiting call
            ? Effect.andThen(approve, approve)
            : Effect.asVoid(approvals.deny(id, "no production deploys"))
        }
      })
      const result = yield* Agent.run({ prompt: "go", plugins: [reviewer] }).pipe(
        Effect.provideService(Approvals.Approvals, approvals),
        Effect.provide(Layer.merge(
          ScriptedModel.layer([
            { toolCalls: [call("deploy", { env: "staging" }, "call_0")] },
            { toolCalls: [call("deploy", { env: "production" }, "call_0")] },
            { text: "ok" }
          ]),
          toolsLayer(trace)
        ))
      )
      assert.deepStrictEqual(answers, [true, false])
      assert.deepStrictEqual(trace.started, ["deploy:staging"])
      const results = result.messages.filter((m) => m.role === "toolResult").map(Message.textOf)
      assert.deepStrictEqual(results, ["deployed to staging", "Tool call denied: no production deploys"])
    }))

  it.effect("a decision given before the run asks answers nothing: the call waits, and is answered when it asks", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      assert.isFalse(yield* approvals.approve("d"))
      assert.isFalse(yield* approvals.deny("d", "no"))
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go" }).pipe(
          Effect.provideService(Approvals.Approvals, approvals),
          Effect.provide(Layer.merge(
            ScriptedModel.layer([{ toolCalls: [call("deploy", { env: "x" }, "d")] }, { text: "ok" }]),
            toolsLayer()
          ))
        )
      )
      yield* TestClock.adjust("1 second")
      assert.deepStrictEqual((yield* approvals.pending).map((r) => r.approvalId), ["d"])
      assert.isTrue(yield* approvals.approve("d"))
      assert.strictEqual(textOf((yield* Fiber.join(fiber)).messages, "d"), "deployed to x")
    }))

  it.effect("early decisions use no memory: ten thousand of them (1 KB ids) are all refused, and none is kept", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const ids = Array.from({ length: 10_000 }, (_, i) => `${i}`.padEnd(1024, "x"))
      const answered = yield* Effect.forEach(ids, (id, i) => i % 2 === 0 ? approvals.approve(id) : approvals.deny(id))
      assert.isFalse(answered.some(Boolean))
      // a call asking under the last of them waits (nothing was kept for it)
      const request = { runId: "r", toolCallId: ids.at(-1)!, approvalId: ids.at(-1)!, toolName: "deploy", params: {} }
      const waiting = yield* Effect.forkChild(approvals.decide(request), { startImmediately: true })
      assert.deepStrictEqual((yield* approvals.pending).map((r) => r.approvalId), [ids.at(-1)])
      assert.isTrue(yield* approvals.approve(ids.at(-1)!))
      assert.deepStrictEqual(yield* Fiber.join(waiting), Approvals.approved)
      assert.deepStrictEqual(yield* approvals.pending, [])
    }))

  it.effect("a decision names the call by its approvalId only: a sub-agent's call_0 is not answered as call_0", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const child = { runId: "c", toolCallId: "call_0", approvalId: "call_0/call_0", toolName: "deploy", params: {} }
      const waiting = yield* Effect.forkChild(approvals.decide(child), { startImmediately: true })
      assert.isFalse(yield* approvals.approve("call_0"))
      assert.deepStrictEqual((yield* approvals.pending).map((r) => r.approvalId), ["call_0/call_0"])
      assert.isTrue(yield* approvals.deny("call_0/call_0", "no"))
      assert.deepStrictEqual(yield* Fiber.join(waiting), Approvals.denied("no"))
    }))

  it.effect("a second call asking under an approval id that waits already is denied, never confused with the first", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const request = { runId: "r", toolCallId: "d", approvalId: "d", toolName: "deploy", params: {} }
      const first = yield* Effect.forkChild(approvals.decide(request), { startImmediately: true })
      const second = yield* approvals.decide({ ...request, params: { env: "production" } })
      assert.deepStrictEqual(
        second,
        Approvals.denied("another call is waiting for approval under the same id (d); call ids must be unique")
      )
      assert.isTrue(yield* approvals.approve("d"))
      assert.deepStrictEqual(yield* Fiber.join(first), Approvals.approved)
    }))

  it.effect("an answer given on the ApprovalRequested event itself finds the call waiting (it is opened first)", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const answered: Array<boolean> = []
      // answered in the same fiber, while the event is being emitted
      const reviewer = Hooks.plugin({
        name: "reviewer",
        onEvent: (event) =>
          event._tag === "ApprovalRequested"
            ? Effect.map(approvals.approve(event.approvalId ?? event.toolCallId), (ok) => void answered.push(ok))
            : Effect.void
      })
      const result = yield* Agent.run({ prompt: "go", plugins: [reviewer] }).pipe(
        Effect.provideService(Approvals.Approvals, approvals),
        Effect.provide(Layer.merge(
          ScriptedModel.layer([{ toolCalls: [call("deploy", { env: "x" }, "d")] }, { text: "ok" }]),
          toolsLayer()
        ))
      )
      assert.deepStrictEqual(answered, [true])
      assert.strictEqual(textOf(result.messages, "d"), "deployed to x")
      assert.deepStrictEqual(yield* approvals.pending, [])
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
  it.effect("a plan waits for its decision; a decision when no plan or feedback waits is refused and not kept", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const fiber = yield* Effect.forkChild(approvals.decidePlan({ runId: "r", plan: "p1", iteration: 1 }))
      yield* Effect.yieldNow
      assert.deepStrictEqual(yield* approvals.pendingPlan, { runId: "r", plan: "p1", iteration: 1 })
      assert.isTrue(yield* approvals.decidePlanWith({ _tag: "Refine", notes: "more" }))
      assert.deepStrictEqual(yield* Fiber.join(fiber), { _tag: "Refine", notes: "more" })
      assert.isUndefined(yield* approvals.pendingPlan)
      // a second click, and an approval sent before the next plan is seen: neither is kept for plan 2
      assert.isFalse(yield* approvals.decidePlanWith({ _tag: "Refine", notes: "again" }))
      assert.isFalse(yield* approvals.decidePlanWith({ _tag: "Approve" }))
      const second = yield* Effect.forkChild(approvals.decidePlan({ runId: "r", plan: "p2", iteration: 2 }), {
        startImmediately: true
      })
      assert.deepStrictEqual(yield* approvals.pendingPlan, { runId: "r", plan: "p2", iteration: 2 })
      assert.isTrue(yield* approvals.decidePlanWith({ _tag: "Reject", notes: "no" }))
      assert.deepStrictEqual(yield* Fiber.join(second), { _tag: "Reject", notes: "no" })
      assert.isFalse(yield* approvals.decideTurnWith({ _tag: "Replace", feedback: "look at a.ts" }))
      const turn = yield* Effect.forkChild(approvals.decideTurn({ runId: "r", turn: 1, feedback: "x" }), {
        startImmediately: true
      })
      assert.deepStrictEqual(yield* approvals.pendingTurn, { runId: "r", turn: 1, feedback: "x" })
      assert.isTrue(yield* approvals.decideTurnWith({ _tag: "Approve" }))
      assert.deepStrictEqual(yield* Fiber.join(turn), { _tag: "Approve" })
    }))

  it.effect("an opened question waits until its scope closes, then is withdrawn", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const request = { runId: "r", toolCallId: "d", approvalId: "d", toolName: "deploy", params: {} }
      const decided = yield* Effect.scoped(Effect.gen(function*() {
        const wait = yield* approvals.open(request)
        assert.deepStrictEqual((yield* approvals.pending).map((r) => r.approvalId), ["d"])
        assert.isTrue(yield* approvals.deny("d", "no"))
        return yield* wait
      }))
      assert.deepStrictEqual(decided, Approvals.denied("no"))
      // opened and never waited for: the scope's end takes it out
      yield* Effect.scoped(Effect.asVoid(approvals.openPlan({ runId: "r", plan: "p", iteration: 1 })))
      assert.isUndefined(yield* approvals.pendingPlan)
      assert.isFalse(yield* approvals.decidePlanWith({ _tag: "Approve" }))
      yield* Effect.scoped(Effect.asVoid(approvals.open(request)))
      assert.deepStrictEqual(yield* approvals.pending, [])
    }))
})
