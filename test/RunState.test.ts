/**
 * RunState: the state a run saves and continues from, versioned.
 */
import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import { Message, RunState } from "effect-agent"
import { roundTrip, sampleTranscript as messages } from "./support.ts"

describe("RunState.RunState", () => {
  it("round-trips through JSON, and is versioned: another version does not decode", () => {
    const state: RunState.RunState = {
      ...RunState.make({ runId: "r", system: "sys", messages }),
      turn: 3,
      steering: [Message.user("s")],
      followUps: [Message.user("f")],
      pendingApprovals: [{ toolCallId: "c9", toolName: "deploy", params: { env: "prod" }, reason: "prod" }],
      pluginState: { counter: { n: 2 } },
      wrapUpRequested: true
    }
    assert.deepStrictEqual(roundTrip(RunState.RunState, state), state)
    assert.strictEqual(state.version, 1)
    assert.throws(() => Schema.decodeUnknownSync(RunState.RunState)({ ...state, version: 2 }))
  })
})

describe("RunState.make", () => {
  it("starts at turn 0 with nothing queued, used or saved; the system prompt only when given", () => {
    const state = RunState.make({ runId: "r", messages: [Message.user("go")] })
    assert.deepStrictEqual(state, {
      version: RunState.version,
      runId: "r",
      messages: [Message.user("go")],
      turn: 0,
      usage: Message.emptyUsage,
      elapsedMs: 0,
      steering: [],
      followUps: [],
      pendingApprovals: [],
      partialResults: [],
      startedCalls: [],
      wrapUpRequested: false,
      pluginState: {}
    })
    assert.isFalse("system" in state)
    assert.strictEqual(RunState.make({ runId: "r", system: "sys" }).system, "sys")
  })
})

describe("RunState.validate", () => {
  const calls = (...ids: ReadonlyArray<string>): Message.AssistantMessage => ({
    role: "assistant",
    content: ids.map((id) => ({ type: "tool-call", id, name: "add", params: {} })),
    stopReason: "toolUse",
    usage: Message.emptyUsage
  })
  const result = (id: string) => Message.toolResult({ toolCallId: id, toolName: "add", text: "ok", isError: false })
  const problemOf = (messages: ReadonlyArray<Message.Message>, batch: Partial<RunState.RunState> = {}) =>
    RunState.validate({ ...RunState.make({ runId: "r", messages }), ...batch })

  it("accepts a whole transcript, and a batch in progress on the last assistant message", () => {
    assert.isUndefined(problemOf(messages))
    const inProgress = [Message.user("go"), calls("a", "b", "c"), result("a")]
    assert.isUndefined(problemOf(inProgress, {
      partialResults: [result("b")],
      startedCalls: ["c"],
      pendingApprovals: []
    }))
    // ids may repeat across messages: a result answers a call of the message just before it
    assert.isUndefined(problemOf([Message.user("go"), calls("a"), result("a"), calls("a"), result("a")]))
  })

  it("names what breaks the transcript, and at which message", () => {
    const go = Message.user("go")
    assert.deepStrictEqual(problemOf([go, calls("a", "b"), result("b"), result("a")]), {
      message: 2,
      problem: "the result of call \"b\" comes before the result of \"a\""
    })
    assert.deepStrictEqual(problemOf([go, calls("a"), result("a"), result("x")]), {
      message: 3,
      problem: "the result of call \"x\" answers no call waiting for its result"
    })
    assert.deepStrictEqual(problemOf([go, calls("a", "b"), result("a"), Message.user("more")]), {
      message: 3,
      problem: "a user message comes before every call of message 2 has its result"
    })
    assert.deepStrictEqual(problemOf([go, calls("a"), calls("b")]), {
      message: 2,
      problem: "an assistant message comes before every call of message 2 has its result"
    })
    assert.deepStrictEqual(problemOf([go, calls("a", "a")]), {
      message: 1,
      problem: "the tool call id \"a\" appears twice in the message"
    })
  })

  it("the batch's results, started calls and pending approvals are calls of the last assistant message", () => {
    const batch = [Message.user("go"), calls("a"), result("a"), calls("b", "c")]
    assert.deepStrictEqual(problemOf(batch, { startedCalls: ["a"] }), {
      problem: "startedCalls: \"a\" is not a call of the last assistant message, or is there twice"
    })
    assert.deepStrictEqual(problemOf(batch, { partialResults: [result("b"), result("b")] }), {
      problem: "partialResults: \"b\" is not a call of the last assistant message, or is there twice"
    })
    assert.deepStrictEqual(
      problemOf(batch, { pendingApprovals: [{ toolCallId: "z", toolName: "deploy", params: {}, reason: "r" }] }),
      { problem: "pendingApprovals: \"z\" is not a call of the last assistant message, or is there twice" }
    )
    assert.isUndefined(problemOf(batch, { startedCalls: ["b"], partialResults: [result("c")] }))
  })
})
