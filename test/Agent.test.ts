import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Schema, Stream } from "effect"
import { AiError, LanguageModel, type Response } from "effect/ai"
import { Agent, type AgentError, type AgentEvent, Hooks, Message, RunState, Steering } from "effect-agent"
import { expectTypeOf } from "vitest"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, ofTag, recorder, runOk, runScript, tags, toolResultTexts, toolsLayer } from "./support.ts"

describe("Agent.run", () => {
  it.effect("runs a tool call and answers: transcript, events, outcome", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk([
        { toolCalls: [{ id: "c1", name: "add", params: { a: 1, b: 2 } }], usage: { input: 10, output: 5 } },
        { text: "1 + 2 = 3", usage: { input: 20, output: 7, cost: 0.01 } }
      ], { prompt: "What is 1 + 2?", system: "Be exact." })
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.messages, [
        Message.user("What is 1 + 2?"),
        {
          role: "assistant",
          content: [{ type: "tool-call", id: "c1", name: "add", params: { a: 1, b: 2 } }],
          stopReason: "toolUse",
          usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
          model: "scripted"
        },
        { role: "toolResult", toolCallId: "c1", toolName: "add", content: [Message.text("3")], isError: false },
        {
          role: "assistant",
          content: [Message.text("1 + 2 = 3")],
          stopReason: "stop",
          usage: { input: 20, output: 7, cacheRead: 0, cacheWrite: 0, reasoning: 0, cost: 0.01 },
          model: "scripted"
        }
      ])
      assert.deepStrictEqual(result.usage, { input: 30, output: 12, cacheRead: 0, cacheWrite: 0, reasoning: 0, cost: 0.01 })
      assert.strictEqual(result.state.turn, 2)
      assert.strictEqual(result.state.system, "Be exact.")
      assert.deepStrictEqual(tags(events), [
        "AgentStart",
        "TurnStart",
        "MessageStart",
        "MessageUpdate",
        "MessageEnd",
        "ToolExecutionStart",
        "ToolExecutionEnd",
        "TurnEnd",
        "BudgetSnapshot",
        "TurnStart",
        "MessageStart",
        "MessageUpdate",
        "MessageUpdate",
        "MessageUpdate",
        "MessageUpdate",
        "MessageUpdate",
        "MessageEnd",
        "TurnEnd",
        "BudgetSnapshot",
        "AgentEnd"
      ])
      // the text arrives as deltas of one content part
      const deltas = ofTag(events, "MessageUpdate").filter((e) => e.delta.type === "text")
      assert.deepStrictEqual(deltas.map((e) => e.delta.type === "text" ? e.delta.delta : "").join(""), "1 + 2 = 3")
      // the second request holds the system prompt, the task, the call and its result
      assert.strictEqual(requests.length, 2)
      assert.deepStrictEqual(requests[1]!.prompt.content.map((m) => m.role), ["system", "user", "assistant", "tool"])
      assert.deepStrictEqual(toolResultTexts(requests[1]!), ["3"])
      assert.deepStrictEqual(requests[0]!.tools.includes("add"), true)
      assert.strictEqual(requests[0]!.toolCallValidation, "deferred")
      // every event carries the run id and the turn
      for (const event of events) assert.strictEqual(event.runId, result.state.runId)
      assert.deepStrictEqual(ofTag(events, "TurnStart").map((e) => e.turn), [1, 2])
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag === "AgentEnd") assert.deepStrictEqual(end.result, result)
      const snapshots = ofTag(events, "BudgetSnapshot")
      assert.deepStrictEqual(snapshots.at(-1)!.figures.usage, result.usage)
    }))

  it.effect("a reply without tool calls completes in one model call", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runOk([{ text: "hello" }])
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.strictEqual(requests.length, 1)
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "hello")
    }))

  it.effect("reasoning with a signature is kept and replayed to the model", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runOk([
        { reasoning: { text: "think hard", signature: "sig-1" }, toolCalls: [{ name: "add", params: { a: 1, b: 1 } }] },
        { text: "2" }
      ])
      const first = result.messages[1]!
      assert.strictEqual(first.role, "assistant")
      if (first.role === "assistant") {
        assert.deepStrictEqual(first.content[0], {
          type: "reasoning",
          text: "think hard",
          signature: "sig-1",
          providerData: { scripted: { signature: "sig-1" } }
        })
      }
      const replayed = requests[1]!.prompt.content[1]!
      assert.strictEqual(replayed.role, "assistant")
      if (replayed.role === "assistant") {
        const part = replayed.content[0]!
        assert.strictEqual(part.type, "reasoning")
        assert.deepStrictEqual(part.options, { scripted: { signature: "sig-1" } })
      }
    }))

  it.effect("custom messages stay in the transcript but never reach the model", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runOk([{ text: "ok" }], {
        prompt: [Message.custom("ui-marker", { id: 7 }), Message.user("hi")]
      })
      assert.deepStrictEqual(result.messages[0], Message.custom("ui-marker", { id: 7 }))
      assert.deepStrictEqual(requests[0]!.prompt.content.map((m) => m.role), ["user"])
    }))

  it.effect("the turn cap ends the run with MaxTurns after exactly maxTurns model calls", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk(
        (i) => ({ toolCalls: [{ name: "add", params: { a: i, b: 1 } }] }),
        { config: { maxTurns: 3, graceTurns: 0 } }
      )
      assert.deepStrictEqual(result.outcome, { _tag: "MaxTurns", limit: 3 })
      assert.strictEqual(requests.length, 3)
      assertValidTranscript(result.state.messages)
      const tripped = ofTag(events, "GuardTripped")
      assert.deepStrictEqual(tripped.map((e) => [e.guard, e.action, e.figures]), [["maxTurns", "stop", { turns: 3, limit: 3 }]])
      assert.deepStrictEqual(tags(events).slice(-2), ["GuardTripped", "AgentEnd"])
    }))

  it.effect("maxTurns null switches the cap off", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runOk(
        (i) => i < 60 ? { toolCalls: [{ name: "add", params: { a: i, b: 1 } }] } : { text: "done" },
        { config: { maxTurns: null } }
      )
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.strictEqual(requests.length, 61)
    }))

  it.effect("a model failure fails the run with ModelError carrying the AiError reason, after AgentEnd", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* runScript([
        { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { fail: new AiError.RateLimitError({}) }
      ])
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      assert.strictEqual(error?._tag, "Some")
      if (error?._tag === "Some") {
        assert.strictEqual(error.value._tag, "ModelError")
        if (error.value._tag === "ModelError") {
          assert.strictEqual(error.value.reason._tag, "RateLimitError")
          assert.strictEqual(error.value.turn, 2)
        }
      }
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag === "AgentEnd") assert.strictEqual(end.error?._tag, "ModelError")
    }))

  it.effect("a failed run's error carries its state: the transcript answered, and steering not yet delivered", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      // steered while the second model call runs: the failure comes before it could be delivered
      const steer = Hooks.plugin({
        name: "steer",
        onEvent: (event) => event._tag === "TurnStart" && event.turn === 2 ? Effect.orDie(steering.steer("use the cache")) : Effect.void
      })
      const { events, exit } = yield* runScript([
        { toolCalls: [{ id: "c1", name: "add", params: { a: 1, b: 2 } }] },
        { fail: new AiError.RateLimitError({}) }
      ], { steering, plugins: [steer] })
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      if (error?._tag !== "Some" || error.value._tag !== "ModelError") return assert.fail("expected a ModelError")
      const state = error.value.state
      if (state === undefined) return assert.fail("expected the run's state on the error")
      assert.deepStrictEqual(state.steering.map(Message.textOf), ["use the cache"])
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["user", "assistant", "toolResult"])
      assertValidTranscript(state.messages)
      const end = ofTag(events, "AgentEnd")[0]!
      assert.deepStrictEqual(end.error, error.value)
      // the state continues once the model is back: the steering is delivered before the next call
      const resumed = yield* Agent.runContinue(state).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "cached: 3" }]), toolsLayer()))
      )
      const model = resumed.state.messages.slice(state.messages.length)
      assert.deepStrictEqual(model.map((m) => [m.role, Message.textOf(m)]), [["user", "use the cache"], ["assistant", "cached: 3"]])
      assert.strictEqual(resumed.outcome._tag, "Completed")
    }))

  it.effect("so does a fatal tool failure: the fatal call is answered with its failure; queued steering is kept", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      const steer = Hooks.plugin({
        name: "steer",
        onEvent: (event) => event._tag === "ToolExecutionStart" ? Effect.orDie(steering.steer("stop and report")) : Effect.void
      })
      const { events, exit } = yield* runScript([
        { toolCalls: [{ id: "f", name: "fatal", params: { reason: "disk corrupt" } }] }
      ], { steering, plugins: [steer] })
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      if (error?._tag !== "Some" || error.value._tag !== "ToolFatalError") return assert.fail("expected a ToolFatalError")
      const state = error.value.state!
      assert.deepStrictEqual(state.steering.map(Message.textOf), ["stop and report"])
      assertValidTranscript(state.messages)
      const answer = state.messages.at(-1)!
      assert.deepStrictEqual(answer.role === "toolResult" && [answer.toolCallId, Message.textOf(answer), answer.isError], [
        "f",
        "Tool fatal failed fatally: {\"reason\":\"disk corrupt\"}",
        true
      ])
      assert.deepStrictEqual(ofTag(events, "AgentEnd")[0]!.error, error.value)
    }))

  it.effect("running past the script is a clear failure", () =>
    Effect.gen(function*() {
      const { exit } = yield* runScript([{ toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] }])
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      assert.strictEqual(error?._tag, "Some")
      if (error?._tag === "Some" && error.value._tag === "ModelError") {
        assert.match(error.value.reason.message, /no turn for this request \(call 2 to this model\)/)
      } else assert.fail("expected a ModelError")
    }))

  it.effect("an invalid config fails with ConfigError naming the field", () =>
    Effect.gen(function*() {
      const { exit } = yield* runScript([{ text: "x" }], { config: { maxParallelTools: 0 } })
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      if (error?._tag === "Some" && error.value._tag === "ConfigError") {
        assert.strictEqual(error.value.field, "maxParallelTools")
      } else assert.fail("expected a ConfigError")
    }))
})

describe("streamed replies", () => {
  it.effect("deltas of interleaved text blocks are assembled per block, each at its own index", () =>
    Effect.gen(function*() {
      const parts: ReadonlyArray<Response.StreamPartEncoded> = [
        { type: "text-start", id: "a" },
        { type: "text-start", id: "b" },
        { type: "text-delta", id: "a", delta: "Hel" },
        { type: "text-delta", id: "b", delta: "Wor" },
        { type: "text-delta", id: "a", delta: "lo" },
        { type: "text-delta", id: "b", delta: "ld" },
        { type: "text-end", id: "a" },
        { type: "text-delta", id: "b", delta: "!" },
        { type: "text-end", id: "b" },
        // a delta for a closed block (no new start) opens a new one
        { type: "text-delta", id: "b", delta: "?" },
        { type: "text-start", id: "a" },
        { type: "text-delta", id: "a", delta: "again" },
        { type: "text-end", id: "a" },
        {
          type: "finish",
          reason: "stop",
          usage: { inputTokens: { total: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, reasoning: 0 } }
        }
      ]
      const model = yield* LanguageModel.make({
        generateText: () => Effect.die("not used"),
        streamText: () => Stream.fromIterable(parts)
      })
      const { events, plugin } = recorder()
      const result = yield* Agent.run({ prompt: "go", plugins: [plugin] }).pipe(
        Effect.provideService(LanguageModel.LanguageModel, model),
        Effect.provide(toolsLayer())
      )
      assert.deepStrictEqual(result.messages[1], {
        role: "assistant",
        content: [Message.text("Hello"), Message.text("World!"), Message.text("?"), Message.text("again")],
        stopReason: "stop",
        usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0 }
      })
      assert.deepStrictEqual(
        ofTag(events, "MessageUpdate").map((e) => `${e.delta.type === "text" ? e.delta.index : "?"}:${e.delta.delta}`),
        ["0:Hel", "1:Wor", "0:lo", "1:ld", "1:!", "2:?", "3:again"]
      )
    }))
})

describe("Agent.runStream", () => {
  it.effect("returns the events as a stream whose last element is AgentEnd with the result", () =>
    Effect.gen(function*() {
      const events = yield* Stream.runCollect(Agent.runStream({ prompt: "hi" }))
      assert.strictEqual(events[0]!._tag, "AgentStart")
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag === "AgentEnd") {
        assert.strictEqual(end.result?.outcome._tag, "Completed")
        assert.strictEqual(Message.textOf(end.result!.messages.at(-1)!), "hello there")
      }
    }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "hello there" }]), toolsLayer()))))

  it.effect("fails the stream with the run's error after AgentEnd", () =>
    Effect.gen(function*() {
      const seen: Array<AgentEvent.AgentEvent> = []
      const exit = yield* Stream.runForEach(Agent.runStream({ prompt: "hi" }), (e) => Effect.sync(() => void seen.push(e)))
        .pipe(Effect.exit)
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual(seen.at(-1)!._tag, "AgentEnd")
    }).pipe(Effect.provide(Layer.merge(
      ScriptedModel.layer([{ fail: new AiError.InternalProviderError({ description: "down" }) }]),
      toolsLayer()
    ))))

  it.effect("taking only the first events interrupts the run", () =>
    Effect.gen(function*() {
      const first = yield* Stream.runCollect(Stream.take(Agent.runStream({ prompt: "hi" }), 2))
      assert.deepStrictEqual(first.map((e) => e._tag), ["AgentStart", "TurnStart"])
    }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer([{ hang: true }]), toolsLayer()))))
})

describe("Agent.runContinue", () => {
  const layers = (script: ScriptedModel.Script) => Layer.merge(ScriptedModel.layer(script), toolsLayer())

  it.effect("continues a state whose last message is a tool result", () =>
    Effect.gen(function*() {
      const first = yield* Agent.run({ prompt: "add", config: { maxTurns: 1, graceTurns: 0 } }).pipe(
        Effect.provide(layers([{ toolCalls: [{ name: "add", params: { a: 2, b: 2 } }] }]))
      )
      assert.strictEqual(first.outcome._tag, "MaxTurns")
      const encoded = yield* Schema.decodeUnknownEffect(RunState.RunState)(JSON.parse(JSON.stringify(first.state)))
      const second = yield* Agent.runContinue(encoded).pipe(Effect.provide(layers([{ text: "4" }])))
      assert.strictEqual(second.outcome._tag, "Completed")
      assert.strictEqual(second.state.turn, 2)
      assert.strictEqual(second.state.runId, first.state.runId)
      assert.deepStrictEqual(second.messages.map((m) => m.role), ["assistant"])
      assertValidTranscript(second.state.messages)
    }))

  it.effect("answers tool calls left open in the state before calling the model", () =>
    Effect.gen(function*() {
      const state = RunState.make({
        runId: "r1",
        messages: [
          Message.user("add"),
          {
            role: "assistant",
            content: [{ type: "tool-call", id: "open", name: "add", params: { a: 5, b: 5 } }],
            stopReason: "toolUse",
            usage: Message.emptyUsage
          }
        ]
      })
      const result = yield* Agent.runContinue(state).pipe(Effect.provide(layers([{ text: "10" }])))
      assert.deepStrictEqual(result.messages.map((m) => m.role), ["toolResult", "assistant"])
      assert.strictEqual(Message.textOf(result.messages[0]!), "10")
      assertValidTranscript(result.state.messages)
    }))

  it.effect("fails with InvalidContinuation on a final reply with nothing queued", () =>
    Effect.gen(function*() {
      const done = yield* Agent.run({ prompt: "hi" }).pipe(Effect.provide(layers([{ text: "bye" }])))
      const error = yield* Effect.flip(Agent.runContinue(done.state).pipe(Effect.provide(layers([]))))
      assert.strictEqual(error._tag, "InvalidContinuation")
      const empty = yield* Effect.flip(
        Agent.runContinue(RunState.make({ runId: "x" })).pipe(Effect.provide(layers([])))
      )
      assert.strictEqual(empty._tag, "InvalidContinuation")
    }))

  it.effect("a final reply with a follow-up queued in the state continues", () =>
    Effect.gen(function*() {
      const done = yield* Agent.run({ prompt: "hi" }).pipe(Effect.provide(layers([{ text: "bye" }])))
      const state: RunState.RunState = { ...done.state, followUps: [Message.user("one more thing")] }
      const result = yield* Agent.runContinue(state).pipe(Effect.provide(layers([{ text: "sure" }])))
      assert.deepStrictEqual(result.messages.map(Message.textOf), ["one more thing", "sure"])
      assert.deepStrictEqual(result.state.followUps, [])
    }))
})

describe("Agent's types", () => {
  it.effect("RunResult is exported from Agent: the Schema and the type of what a run returns", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([{ text: "hi" }])
      const typed: Agent.RunResult = result
      assert.strictEqual(Agent.RunResult, RunState.RunResult)
      assert.isTrue(Schema.is(Agent.RunResult)(typed))
      expectTypeOf<Agent.RunResult<string>>().toEqualTypeOf<RunState.RunResult<string>>()
      expectTypeOf<Effect.Success<ReturnType<typeof Agent.run<never, string>>>>().toEqualTypeOf<Agent.RunResult<string>>()
    }))

  it("a run fails only with the core's errors: no WorkerError (the supervisor's) to handle after Agent.run", () => {
    type Tags = "ModelError" | "ToolFatalError" | "ConfigError" | "InvalidContinuation" | "InvalidPluginState" | "OutputSchemaMismatch"
    expectTypeOf<Effect.Error<ReturnType<typeof Agent.run>>>().toEqualTypeOf<AgentError.AgentError>()
    expectTypeOf<Effect.Error<ReturnType<typeof Agent.runContinue>>>().toEqualTypeOf<AgentError.AgentError>()
    expectTypeOf<Stream.Error<ReturnType<typeof Agent.runStream>>>().toEqualTypeOf<AgentError.AgentError>()
    expectTypeOf<AgentError.AgentError["_tag"]>().toEqualTypeOf<Tags>()
  })
})
