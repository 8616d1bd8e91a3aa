import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Schema } from "effect"
import { AiError, Prompt } from "effect/ai"
import { AgentConfig, AgentError, AgentEvent, Message, Outcome, RunState, ToolArguments } from "effect-agent"
import { runOk } from "./support.ts"

/** Encodes to JSON text and back, and checks the value survived. */
const roundTrip = <S extends Schema.Codec<unknown, unknown>>(schema: S, value: S["Type"]) => {
  const json = Schema.toCodecJson(schema)
  const text = JSON.stringify(Schema.encodeSync(json)(value))
  const back = Schema.decodeUnknownSync(json)(JSON.parse(text))
  assert.deepStrictEqual(Schema.encodeSync(json)(back), Schema.encodeSync(json)(value))
  return back
}

const assistant: Message.AssistantMessage = {
  role: "assistant",
  content: [
    { type: "reasoning", text: "hmm", signature: "sig", providerData: { anthropic: { signature: "sig" } } },
    { type: "reasoning", text: "", redacted: true, providerData: { anthropic: { redactedData: "opaque" } } },
    Message.text("calling"),
    { type: "tool-call", id: "c1", name: "add", params: { a: 1, b: [2, { c: null }] } },
    { type: "tool-call", id: "c2", name: "add", params: ToolArguments.malformed("{\"a\":", "Unexpected end") }
  ],
  stopReason: "toolUse",
  usage: { input: 10, output: 5, cacheRead: 3, cacheWrite: 1, reasoning: 2, cost: 0.0125 },
  errorMessage: "none",
  model: "gpt-test"
}

const messages: ReadonlyArray<Message.Message> = [
  Message.system("Be brief."),
  Message.user([
    Message.text("look"),
    { type: "image", mediaType: "image/png", source: { type: "base64", data: "iVBORw0KGgo=" } },
    { type: "image", mediaType: "image/jpeg", source: { type: "url", url: "https://example.com/a.jpg" } }
  ]),
  assistant,
  { role: "toolResult", toolCallId: "c1", toolName: "add", content: [Message.text("3")], isError: false },
  {
    role: "toolResult",
    toolCallId: "c2",
    toolName: "add",
    content: [Message.text("bad json")],
    isError: true,
    details: { kind: "invalidArguments" }
  },
  Message.custom("ui", { pinned: true })
]

describe("contracts round-trip through JSON", () => {
  it("Message and every part", () => {
    for (const message of messages) roundTrip(Message.Message, message)
    assert.deepStrictEqual(roundTrip(Message.Transcript, messages), messages)
  })

  it("Outcome", () => {
    const outcomes: ReadonlyArray<Outcome.Outcome> = [
      Outcome.completed,
      Outcome.terminated,
      Outcome.wrappedUp,
      Outcome.maxTurns(8),
      Outcome.budgetExceeded("costUsd", 1, 1.2),
      { _tag: "LoopDetected", repeats: 3, signature: "add{}" },
      { _tag: "Stagnated", repeats: 6 },
      Outcome.cancelled("user")
    ]
    for (const outcome of outcomes) assert.deepStrictEqual(roundTrip(Outcome.Outcome, outcome), outcome)
  })

  it("RunState, versioned", () => {
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

  it("AgentError, including the wrapped AiError reason", () => {
    const errors: ReadonlyArray<AgentError.AgentError> = [
      new AgentError.ModelError({ reason: new AiError.RateLimitError({ retryAfter: Duration.seconds(3) }), turn: 2 }),
      new AgentError.ToolFatalError({ toolName: "t", toolCallId: "c", description: "boom", error: { code: 1 } }),
      new AgentError.ConfigError({ field: "maxTurns", rule: "must be at least 1" }),
      new AgentError.InvalidContinuation({ reason: "empty" }),
      new AgentError.InvalidPluginState({ plugin: "loopDetector", reason: "seen is -1" })
    ]
    const backs = errors.map((error) => roundTrip(AgentError.AgentError, error))
    backs.forEach((back, i) => {
      assert.strictEqual(back._tag, errors[i]!._tag)
      assert.strictEqual(back.message, errors[i]!.message)
    })
    // the wrapped reason keeps its tag and its fields: a reason decoded as another tag fails here, not skips
    const [model] = backs
    const reason = model?._tag === "ModelError" ? model.reason : undefined
    assert.strictEqual(reason?._tag, "RateLimitError")
    const retryAfter = reason?._tag === "RateLimitError" ? reason.retryAfter : undefined
    assert.strictEqual(retryAfter === undefined ? undefined : Duration.toMillis(retryAfter), 3000)
  })

  it("AgentConfig with its defaults", () => {
    const config = AgentConfig.makeUnsafe({ maxTurns: 10, toolTimeout: "30 seconds", budgets: { costUsd: 2, wallClock: "1 hour" } })
    assert.strictEqual(config.toolTimeout, 30_000)
    assert.strictEqual(config.budgets.wallClock, 3_600_000)
    assert.strictEqual(config.maxParallelTools, AgentConfig.defaults.maxParallelTools)
    assert.deepStrictEqual(roundTrip(AgentConfig.AgentConfig, config), config)
    // a setting given as undefined (JavaScript callers, spreads of partial options) keeps its default
    const fromJavaScript: AgentConfig.Input = JSON.parse("{}")
    Object.assign(fromJavaScript, { maxTurns: undefined })
    assert.deepStrictEqual(AgentConfig.makeUnsafe(fromJavaScript), AgentConfig.defaults)
  })

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
        { ...base, _tag: "WrapUpRequested", source: "maxTurns", message: "wrap up" },
        { ...base, _tag: "GuardTripped", guard: "loop", action: "warn", detail: "repeating", figures: { repeats: 3 } },
        { ...base, _tag: "ContextTransformed", plugin: "p", messagesBefore: 9, messagesAfter: 4, tokensBefore: 900, tokensAfter: 300 },
        { ...base, _tag: "CheckpointSaved", sessionId: "s", bytes: 120 },
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
        { ...base, _tag: "AgentEnd", defect: "Error: bug" }
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

describe("Message.toPrompt", () => {
  it("converts each message once, leaves custom messages out, replays reasoning data and raw arguments", () => {
    const prompt = Message.toPrompt(messages)
    assert.deepStrictEqual(prompt.content.map((m) => m.role), ["system", "user", "assistant", "tool", "tool"])
    const user = prompt.content[1]!
    if (user.role !== "user") return assert.fail("expected a user message")
    assert.deepStrictEqual(user.content.map((p) => p.type === "file" ? [p.mediaType, String(p.data)] : p.type), [
      "text",
      ["image/png", "iVBORw0KGgo="],
      ["image/jpeg", "https://example.com/a.jpg"]
    ])
    const reply = prompt.content[2]!
    if (reply.role !== "assistant") return assert.fail("expected an assistant message")
    const [reasoning, redacted, text, call, malformed] = reply.content
    assert.deepStrictEqual(reasoning?.options, { anthropic: { signature: "sig" } })
    assert.deepStrictEqual(redacted?.options, { anthropic: { redactedData: "opaque" } })
    assert.strictEqual(text?.type, "text")
    assert.deepStrictEqual(call?.type === "tool-call" ? call.params : undefined, { a: 1, b: [2, { c: null }] })
    assert.strictEqual(
      malformed?.type === "tool-call" ? ToolArguments.toJsonText(malformed.params) : undefined,
      "{\"a\":"
    )
    const failed = prompt.content[4]!
    if (failed.role !== "tool") return assert.fail("expected a tool message")
    const part = failed.content[0]!
    assert.deepStrictEqual(part.type === "tool-result" ? [part.id, part.isFailure, part.result] : [], ["c2", true, "bad json"])
  })

  it("builds what Prompt.makeMessage and Prompt.makePart build, and what Prompt's Schema accepts", () => {
    const prompt = Message.toPrompt([
      Message.system("be brief"),
      Message.user("hi"),
      {
        role: "assistant",
        content: [{ type: "text", text: "t" }, { type: "tool-call", id: "c1", name: "add", params: { a: 1 } }],
        stopReason: "toolUse",
        usage: Message.emptyUsage
      },
      Message.toolResult({ toolCallId: "c1", toolName: "add", text: "3", isError: false })
    ])
    assert.deepStrictEqual(prompt.content, [
      Prompt.makeMessage("system", { content: "be brief" }),
      Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "hi" })] }),
      Prompt.makeMessage("assistant", {
        content: [
          Prompt.makePart("text", { text: "t" }),
          Prompt.makePart("tool-call", { id: "c1", name: "add", params: { a: 1 }, providerExecuted: false })
        ]
      }),
      Prompt.makeMessage("tool", {
        content: [
          Prompt.makePart("tool-result", { id: "c1", name: "add", isFailure: false, result: "3", providerExecuted: false })
        ]
      })
    ])
    for (const message of prompt.content) assert.isTrue(Prompt.isMessage(message))
    assert.deepStrictEqual(Schema.decodeUnknownSync(Prompt.Prompt)(Schema.encodeSync(Prompt.Prompt)(prompt)), prompt)
  })

  it("a reasoning part with only a signature still carries it", () => {
    const prompt = Message.toPrompt([{
      role: "assistant",
      content: [{ type: "reasoning", text: "x", signature: "only-sig" }],
      stopReason: "stop",
      usage: Message.emptyUsage
    }])
    const reply = prompt.content[0]!
    assert.deepStrictEqual(reply.role === "assistant" ? reply.content[0]?.options : undefined, {
      signature: { signature: "only-sig" }
    })
  })

  it("ToolArguments.parse keeps malformed text and treats empty text as no arguments", () => {
    assert.deepStrictEqual(ToolArguments.parse("{\"a\":1}"), { a: 1 })
    assert.deepStrictEqual(ToolArguments.parse("  "), {})
    const bad = ToolArguments.parse("{\"a\":")
    assert.isTrue(ToolArguments.isMalformed(bad))
    assert.strictEqual(ToolArguments.toJsonText(bad), "{\"a\":")
    assert.strictEqual(ToolArguments.toJsonText({ b: 2 }), "{\"b\":2}")
  })
})
