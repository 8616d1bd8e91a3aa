/**
 * A tool call's id is unique in its assistant message, whatever the model
 * says: a reply whose calls share an id, or give an empty, huge or unprintable
 * one, gets ids of the loop's (`x`, `x_2`; `call_1`), the same in the events,
 * the approvals, the results and the next request to the model.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { Agent, Approvals, Hooks, Message } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, makeTrace, ofTag, recorder, runOk, toolsLayer } from "./support.ts"
import { patience } from "./patience.ts"

const callIds = (message: Message.Message | undefined): Array<string> =>
  message?.role === "assistant" ? Message.toolCalls(message).map((call) => call.id) : []

const results = (messages: ReadonlyArray<Message.Message>): Array<[string, string]> =>
  messages.flatMap((m) => m.role === "toolResult" ? [[m.toolCallId, Message.textOf(m)] as [string, string]] : [])

/** The ids of the tool calls and of the tool results in a request, in order. */
const idsSentBack = (request: ScriptedModel.Request) =>
  request.prompt.content.flatMap((message) =>
    message.role === "assistant" || message.role === "tool"
      ? message.content.flatMap((part) =>
        part.type === "tool-call" ? [`call ${part.id}`] : part.type === "tool-result" ? [`result ${part.id}`] : []
      )
      : []
  )

describe("tool call ids", () => {
  it.live("duplicate-id attack: two calls that share an id each get their own id, result and approval; one decision answers one", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const trace = makeTrace()
      const { events, plugin } = recorder()
      const bothAsked = yield* Deferred.make<void>()
      let asked = 0
      const counter = Hooks.plugin({
        name: "counter",
        onEvent: (event) =>
          event._tag === "ApprovalRequested" && ++asked === 2 ? Deferred.succeed(bothAsked, undefined) : Effect.void
      })
      const fiber = yield* Effect.forkChild(
        Effect.gen(function*() {
          const result = yield* Agent.run({ prompt: "go", plugins: [plugin, counter] })
          const model = yield* ScriptedModel.ScriptedModel
          return { result, requests: yield* model.requests }
        }).pipe(
          Effect.provideService(Approvals.Approvals, approvals),
          Effect.provide(Layer.merge(
            ScriptedModel.layer([
              {
                toolCalls: [
                  { id: "x", name: "deploy", params: { env: "staging" } },
                  { id: "x", name: "deploy", params: { env: "production" } }
                ]
              },
              { text: "ok" }
            ]),
            toolsLayer(trace)
          ))
        )
      )
      yield* Deferred.await(bothAsked).pipe(Effect.timeout(patience))
      // Both wait, each under its own id, with its own arguments.
      assert.deepStrictEqual(
        (yield* approvals.pending).map((request) => [request.approvalId, request.params]),
        [["x", { env: "staging" }], ["x_2", { env: "production" }]]
      )
      assert.isTrue(yield* approvals.approve("x"))
      // The same decision again (a second reviewer, a retried request) answers nothing: x was answered.
      assert.isFalse(yield* approvals.approve("x"))
      assert.deepStrictEqual((yield* approvals.pending).map((request) => request.approvalId), ["x_2"])
      assert.isTrue(yield* approvals.deny("x_2", "not production"))
      const { requests, result } = yield* Fiber.join(fiber)

      assert.deepStrictEqual(trace.started, ["deploy:staging"])
      assertValidTranscript(result.messages)
      assert.deepStrictEqual(callIds(result.messages[1]), ["x", "x_2"])
      assert.deepStrictEqual(results(result.messages), [
        ["x", "deployed to staging"],
        ["x_2", "Tool call denied: not production"]
      ])
      // The events carry the same ids: the streamed arguments, the requests, the decisions.
      assert.deepStrictEqual(
        ofTag(events, "MessageUpdate").flatMap((e) => e.delta.type === "toolCall" ? [e.delta.id] : []),
        ["x", "x_2"]
      )
      assert.deepStrictEqual(ofTag(events, "ApprovalRequested").map((e) => e.approvalId), ["x", "x_2"])
      assert.deepStrictEqual(ofTag(events, "ApprovalResolved").map((e) => [e.toolCallId, e.approved]), [
        ["x", true],
        ["x_2", false]
      ])
      // The model reads each call with its own result, under the ids of the transcript.
      assert.deepStrictEqual(idsSentBack(requests[1]!), ["call x", "call x_2", "result x", "result x_2"])
    }))

  it.effect("duplicate-id attack: three calls sharing an id, and one that names a renamed id, all run once, in order", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([
        {
          toolCalls: [
            { id: "c", name: "add", params: { a: 1, b: 1 } },
            { id: "c", name: "add", params: { a: 2, b: 2 } },
            { id: "c_2", name: "add", params: { a: 3, b: 3 } },
            { id: "c", name: "add", params: { a: 4, b: 4 } }
          ]
        },
        { text: "ok" }
      ])
      assertValidTranscript(result.messages)
      assert.deepStrictEqual(callIds(result.messages[1]), ["c", "c_2", "c_2_2", "c_3"])
      assert.deepStrictEqual(results(result.messages), [["c", "2"], ["c_2", "4"], ["c_2_2", "6"], ["c_3", "8"]])
    }))

  it.effect("id attack: an empty id, a 10,000-character one, one with control characters and a lone surrogate each get a fresh id", () =>
    Effect.gen(function*() {
      const huge = "h".repeat(10_000)
      const { events, result } = yield* runOk([
        {
          toolCalls: [
            { id: "", name: "add", params: { a: 1, b: 0 } },
            { id: huge, name: "add", params: { a: 2, b: 0 } },
            { id: "a\u001b[2Jb\nc", name: "add", params: { a: 3, b: 0 } },
            { id: "\ud800", name: "add", params: { a: 4, b: 0 } },
            { id: "call_2", name: "add", params: { a: 5, b: 0 } },
            { id: "h".repeat(128), name: "add", params: { a: 6, b: 0 } }
          ]
        },
        { text: "ok" }
      ])
      assertValidTranscript(result.messages)
      // A plain id of up to 128 characters is kept; the others are the loop's, unique in the reply.
      assert.deepStrictEqual(callIds(result.messages[1]), ["call_1", "call_2", "call_3", "call_4", "call_2_2", "h".repeat(128)])
      assert.deepStrictEqual(results(result.messages).map(([, text]) => text), ["1", "2", "3", "4", "5", "6"])
      assert.deepStrictEqual(
        ofTag(events, "ToolExecutionEnd").map((e) => e.toolCallId),
        ["call_1", "call_2", "call_3", "call_4", "call_2_2", "h".repeat(128)]
      )
      assert.deepStrictEqual(ofTag(events, "AgentEnd").map((e) => e.outcome?._tag), ["Completed"])
    }))

  it.effect("id attack: a lone surrogate in the id of a call that needs approval no longer kills the run (URIError)", () =>
    Effect.gen(function*() {
      const { events, result } = yield* runOk([
        { toolCalls: [{ id: "\ud800", name: "deploy", params: { env: "staging" } }] },
        { text: "ok" }
      ]).pipe(Effect.provideService(Approvals.Approvals, Approvals.allowAll))
      assert.deepStrictEqual(ofTag(events, "ApprovalRequested").map((e) => e.approvalId), ["call_1"])
      assert.deepStrictEqual(results(result.messages), [["call_1", "deployed to staging"]])
      assert.strictEqual(result.outcome._tag, "Completed")
    }))

  it.effect("a model that numbers calls per response keeps its ids: call_0 in each turn is the model's, answered in its turn", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runOk([
        { toolCalls: [{ id: "call_0", name: "add", params: { a: 1, b: 1 } }] },
        { toolCalls: [{ id: "call_0", name: "add", params: { a: 2, b: 2 } }] },
        { text: "ok" }
      ])
      assertValidTranscript(result.messages.slice(0, 3))
      assertValidTranscript(result.messages.slice(3))
      assert.deepStrictEqual([callIds(result.messages[1]), callIds(result.messages[3])], [["call_0"], ["call_0"]])
      assert.deepStrictEqual(results(result.messages), [["call_0", "2"], ["call_0", "4"]])
      assert.deepStrictEqual(idsSentBack(requests[2]!), ["call call_0", "result call_0", "call call_0", "result call_0"])
    }))
})
