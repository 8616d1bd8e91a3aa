import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import { TestClock } from "effect/testing"
import { Agent, Hooks, Message, Steering } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, makeTrace, ofTag, recorder, runOk, tags, toolsLayer } from "./support.ts"

const call = (name: string, params: unknown, id: string) => ({ id, name, params })
const roles = (request: ScriptedModel.Request) => request.prompt.content.map((m) => m.role)
const lastUserText = (request: ScriptedModel.Request) => {
  const user = request.prompt.content.filter((m) => m.role === "user").at(-1)
  return user?.role === "user" ? user.content.map((p) => p.type === "text" ? p.text : "").join("") : undefined
}

describe("steer", () => {
  it.effect("a message steered during a batch is delivered after the batch, before the next model call", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      const { events, requests, result } = yield* runOk([
        { toolCalls: [call("add", { a: 1, b: 2 }, "a"), call("add", { a: 3, b: 4 }, "b")] },
        { text: "ok, metric" }
      ], {
        steering,
        plugins: [{
          name: "steer-on-start",
          onEvent: (e) =>
            e._tag === "ToolExecutionStart" && e.toolCallId === "a" ? Effect.orDie(steering.steer("use metric units")) : Effect.void
        }]
      })
      assert.deepStrictEqual(roles(requests[1]!), ["user", "assistant", "tool", "tool", "user"])
      assert.strictEqual(lastUserText(requests[1]!), "use metric units")
      const order = tags(events)
      assert.isBelow(order.indexOf("TurnEnd"), order.indexOf("SteeringDelivered"))
      assert.isBelow(order.lastIndexOf("ToolExecutionEnd"), order.indexOf("SteeringDelivered"))
      assert.deepStrictEqual(ofTag(events, "SteeringDelivered")[0]!.messages, [Message.user("use metric units")])
      assertValidTranscript(result.messages)
    }))

  it.effect("steering queued before the run is delivered with the prompt; steering keeps the loop going", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      yield* steering.steer("first")
      const { requests, result } = yield* runOk([{ text: "a" }, { text: "b" }], {
        steering,
        plugins: [{
          name: "steer-after-first-reply",
          onEvent: (e) => e._tag === "TurnEnd" && e.turn === 1 ? Effect.orDie(steering.steer("second")) : Effect.void
        }]
      })
      assert.strictEqual(requests.length, 2)
      assert.deepStrictEqual(roles(requests[0]!), ["user", "user"])
      assert.strictEqual(lastUserText(requests[1]!), "second")
      assert.strictEqual(result.outcome._tag, "Completed")
    }))

  it.effect("oneAtATime delivers one steering message per delivery point", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make({ steeringMode: "oneAtATime" })
      yield* steering.steer("s1")
      yield* steering.steer("s2")
      const { requests } = yield* runOk([{ text: "a" }, { text: "b" }], { steering })
      assert.strictEqual(requests.length, 2)
      assert.strictEqual(lastUserText(requests[0]!), "s1")
      assert.strictEqual(lastUserText(requests[1]!), "s2")
    }))

  it.effect("'all' delivers everything queued at once", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      yield* steering.steer("s1")
      yield* steering.steer("s2")
      const { requests } = yield* runOk([{ text: "a" }], { steering })
      assert.deepStrictEqual(roles(requests[0]!), ["user", "user", "user"])
    }))

  it.effect("steering not delivered when the run ends is returned in the state", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      const { result } = yield* runOk([{ toolCalls: [call("done", { summary: "x" }, "d")] }], {
        steering,
        plugins: [{
          name: "late",
          onEvent: (e) => e._tag === "ToolExecutionStart" ? Effect.orDie(steering.steer("too late")) : Effect.void
        }]
      })
      assert.strictEqual(result.outcome._tag, "Terminated")
      // a terminating batch polls nothing: the message is returned in the state, not dropped
      assert.deepStrictEqual(result.state.steering, [Message.user("too late")])
    }))

  it.effect("with oneAtATime, messages still queued when a guard ends the run stay in the state", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make({ steeringMode: "oneAtATime" })
      yield* steering.steer("s1")
      yield* steering.steer("s2")
      yield* steering.steer("s3")
      const { result } = yield* runOk([{ text: "a" }], { steering, config: { maxTurns: 1, graceTurns: 0 } })
      assert.strictEqual(result.outcome._tag, "MaxTurns")
      // s2 was delivered into the transcript (a continuation sends it); s3 was never taken
      assert.deepStrictEqual(result.state.messages.at(-1), Message.user("s2"))
      assert.deepStrictEqual(result.state.steering, [Message.user("s3")])
    }))
})

describe("followUp", () => {
  it.effect("a follow-up queued during the run restarts it after the natural stop", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      const { events, requests, result } = yield* runOk([{ text: "first" }, { text: "second" }], {
        steering,
        plugins: [{
          name: "queue",
          onEvent: (e) => e._tag === "TurnStart" && e.turn === 1 ? Effect.orDie(steering.followUp("and another")) : Effect.void
        }]
      })
      assert.strictEqual(requests.length, 2)
      assert.deepStrictEqual(result.messages.map(Message.textOf), ["go", "first", "and another", "second"])
      assert.strictEqual(ofTag(events, "FollowUpDelivered").length, 1)
      assert.strictEqual(result.outcome._tag, "Completed")
    }))

  it.effect("follow-ups are not delivered while the model is still calling tools", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      yield* steering.followUp("later")
      const { requests } = yield* runOk([
        { toolCalls: [call("add", { a: 1, b: 1 }, "a")] },
        { text: "two" },
        { text: "done" }
      ], { steering })
      assert.strictEqual(lastUserText(requests[1]!), "go")
      assert.strictEqual(lastUserText(requests[2]!), "later")
    }))

  it.effect("follow-ups from a plugin hook restart the loop", () =>
    Effect.gen(function*() {
      let given = false
      const { requests } = yield* runOk([{ text: "a" }, { text: "b" }], {
        plugins: [{
          name: "more",
          followUp: () => Effect.sync(() => given ? [] : (given = true, [Message.user("more please")]))
        }]
      })
      assert.strictEqual(requests.length, 2)
      assert.strictEqual(lastUserText(requests[1]!), "more please")
    }))
})

describe("cancel", () => {
  it.effect("mid-stream: the stream is aborted, the partial reply kept as 'aborted', the outcome Cancelled", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      const { events, result } = yield* runOk([{ text: "partial answer", hang: true }], {
        steering,
        plugins: [{
          name: "stop",
          onEvent: (e) => e._tag === "MessageUpdate" ? steering.cancel("user pressed stop") : Effect.void
        }]
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Cancelled", reason: "user pressed stop" })
      const last = result.messages.at(-1)!
      assert.strictEqual(last.role, "assistant")
      if (last.role === "assistant") {
        assert.strictEqual(last.stopReason, "aborted")
        assert.strictEqual(Message.textOf(last), "partial answer")
      }
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))

  it.effect("mid-batch: running tools are interrupted (finalizers run) and answered 'cancelled'", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const steering = yield* Steering.make()
      const { requests, result } = yield* runOk([
        { toolCalls: [call("sleep", { ms: 10_000, label: "long" }, "s"), call("add", { a: 1, b: 1 }, "a")] },
        { text: "never" }
      ], {
        trace,
        steering,
        plugins: [{
          name: "stop",
          onEvent: (e) => e._tag === "ToolExecutionEnd" && e.toolCallId === "a" ? steering.cancel("enough") : Effect.void
        }]
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Cancelled", reason: "enough" })
      assert.strictEqual(requests.length, 1)
      assert.deepStrictEqual(trace.finalized, ["long"])
      assert.deepStrictEqual(trace.finished, [])
      const long = result.messages.find((m) => m.role === "toolResult" && m.toolCallId === "s")
      // it had started: the model and the host are told it may have taken effect (issue 29, item 12)
      assert.strictEqual(
        long === undefined ? undefined : Message.textOf(long),
        "Tool call cancelled while it ran: enough. It had started and was interrupted: its outcome is unknown, " +
          "it may or may not have taken effect. Check before calling it again."
      )
      assert.deepStrictEqual(long?.role === "toolResult" && long.details, {
        kind: "cancelled",
        started: true,
        outcome: "unknown"
      })
      assertValidTranscript(result.messages)
    }))

  it.effect("29/12: a cancelled call says whether its handler had started (may have taken effect) or never ran", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const steering = yield* Steering.make()
      const { result } = yield* runOk([
        { toolCalls: [call("sleep", { ms: 10_000, label: "first" }, "s1"), call("sleep", { ms: 10, label: "next" }, "s2")] },
        { text: "never" }
      ], {
        trace,
        steering,
        config: { maxParallelTools: 1 },
        plugins: [{
          name: "stop",
          onEvent: (e) => e._tag === "ToolExecutionStart" && e.toolCallId === "s1" ? steering.cancel("enough") : Effect.void
        }]
      })
      assert.deepStrictEqual(trace.started, ["first"])
      assertValidTranscript(result.messages)
      const answers = result.messages.flatMap((m) =>
        m.role === "toolResult" ? [[m.toolCallId, Message.textOf(m), m.details]] : []
      )
      assert.deepStrictEqual(answers, [
        ["s1", "Tool call cancelled while it ran: enough. It had started and was interrupted: its outcome is unknown, " +
          "it may or may not have taken effect. Check before calling it again.", {
            kind: "cancelled",
            started: true,
            outcome: "unknown"
          }],
        ["s2", "Tool call cancelled before it started: enough. It did not run.", { kind: "cancelled", started: false }]
      ])
    }))

  it.effect("before a model call: the run ends without calling the model", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      yield* steering.cancel()
      const { requests, result } = yield* runOk([{ text: "x" }], { steering })
      assert.deepStrictEqual(result.outcome, { _tag: "Cancelled", reason: "cancelled" })
      assert.strictEqual(requests.length, 0)
    }))

  it.effect("the Steering service from the context works like the option", () =>
    Effect.gen(function*() {
      const { events, plugin } = recorder()
      const fiber = yield* Effect.forkChild(
        Effect.gen(function*() {
          const steering = yield* Steering.Steering
          return yield* Agent.run({
            prompt: "go",
            plugins: [plugin, Hooks.plugin({
              name: "stop",
              onEvent: (e) => e._tag === "ToolExecutionStart" ? steering.cancel("via service") : Effect.void
            })]
          })
        }).pipe(
          Effect.provide(Steering.layer()),
          Effect.provide(Layer.merge(
            toolsLayer(),
            ScriptedModel.layer([{ toolCalls: [call("sleep", { ms: 1_000, label: "x" }, "s")] }])
          ))
        )
      )
      yield* TestClock.adjust("1 second")
      const result = yield* Fiber.join(fiber)
      assert.deepStrictEqual(result.outcome, { _tag: "Cancelled", reason: "via service" })
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))
})

describe("the queue's bound", () => {
  it.effect("a flood past the bound fails with SteeringFull and queues nothing; what the run takes makes room", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make({ limits: { messages: 3 } })
      yield* steering.steer("a")
      yield* steering.followUp("b")
      yield* steering.steer("c")
      const refused = yield* Effect.flip(steering.followUp("d"))
      const size = new TextEncoder().encode(JSON.stringify(Message.user("d"))).byteLength
      assert.deepStrictEqual(
        [refused._tag, refused.kind, refused.queued, refused.bytes, refused.size, refused.limits],
        ["SteeringFull", "followUp", 3, 3 * size, size, { messages: 3, bytes: Steering.defaultLimits.bytes }]
      )
      assert.deepStrictEqual(yield* steering.takeFollowUps, [Message.user("b")])
      yield* steering.followUp("d")
      assert.deepStrictEqual(yield* steering.takeSteering, [Message.user("a"), Message.user("c")])
      assert.deepStrictEqual(yield* steering.takeFollowUps, [Message.user("d")])
    }))

  it.effect("by size: 4 MiB by default, whatever the count", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      const mib = "x".repeat(1024 * 1024 - 100)
      for (let i = 0; i < 4; i++) yield* steering.steer(mib)
      const refused = yield* Effect.flip(steering.steer(mib))
      assert.deepStrictEqual([refused.queued, refused.bytes > 4 * (1024 * 1024 - 100)], [4, true])
      // a small one still fits
      yield* steering.steer("use metric units")
      assert.strictEqual((yield* steering.takeSteering).length, 5)
    }))

  it.effect("one at a time: a flood at every turn cannot grow the run's queue past the bound", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make({ steeringMode: "oneAtATime", limits: { messages: 3 } })
      let sent = 0
      const flood = Hooks.plugin({
        name: "flood",
        onEvent: (event) =>
          event._tag !== "TurnStart" ? Effect.void : Effect.gen(function*() {
            // as many as it takes, at most 10 a turn
            for (let i = 0; i < 10; i++) {
              const queued = yield* Effect.result(steering.steer(`m${sent}`))
              if (queued._tag === "Failure") return
              sent++
            }
          })
      })
      const { events, result } = yield* runOk(
        Array.from({ length: 6 }, (_, i) => ({ toolCalls: [call("add", { a: i, b: 1 }, `c${i}`)] })),
        { steering, plugins: [flood], config: { maxTurns: 6, graceTurns: 0 } }
      )
      const delivered = ofTag(events, "SteeringDelivered").flatMap((event) => event.messages).length
      // what waits at the end (in the state and the handle) is within the bound, and nothing was lost
      const left = result.state.steering.length + (yield* steering.takeSteering).length
      assert.isAtMost(left, 3)
      assert.strictEqual(delivered + left, sent)
    }))
})
