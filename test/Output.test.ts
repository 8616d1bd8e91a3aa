/**
 * Output: `Agent.run({ output })` ends with a typed final answer given
 * through the `final_answer` tool, beside the run's other tools.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Schema } from "effect"
import { Tool } from "effect/ai"
import { Agent, type AgentConfig, type AgentEvent, Hooks, Message, Output, RunState, Steering, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, ofTag, recorder, toolsLayer } from "./support.ts"

const Answer = Schema.Struct({ sum: Schema.Finite, explanation: Schema.String })

const final = (params: unknown, id = "f1") => ({ toolCalls: [{ id, name: "final_answer", params }] })

/** Runs with the test tools and the `Answer` output. */
const runTyped = (
  script: ScriptedModel.Script,
  options: { readonly outputRetries?: number; readonly config?: AgentConfig.Input; readonly plugins?: [] } = {}
) =>
  Effect.gen(function*() {
    const { events, plugin } = recorder()
    const result = yield* Agent.run({ prompt: "Add 1 and 2", output: Answer, ...options, plugins: [plugin] })
    const requests = yield* (yield* ScriptedModel.ScriptedModel).requests
    return { result, events, requests }
  }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer(script), toolsLayer())))

describe("Agent.run with output", () => {
  it.effect("a run with tools returns the decoded final answer, typed by the Schema", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runTyped([
        { toolCalls: [{ id: "c1", name: "add", params: { a: 1, b: 2 } }] },
        final({ sum: 3, explanation: "1 + 2" })
      ])
      assert.strictEqual(result.outcome._tag, "Completed")
      // typed: `result.output` is `{ sum: number; explanation: string } | undefined`
      const sum: number | undefined = result.output?.sum
      assert.strictEqual(sum, 3)
      assert.deepStrictEqual(result.output, { sum: 3, explanation: "1 + 2" })
      // the final answer tool is offered beside the other tools, on every request
      for (const request of requests) {
        assert.isTrue(request.tools.includes("add"))
        assert.isTrue(request.tools.includes("final_answer"))
      }
      assert.strictEqual(requests.length, 2)
      // the call has its result; the run ends after it, with no further model call
      assertValidTranscript(result.messages)
      const last = result.messages.at(-1)!
      assert.strictEqual(last.role, "toolResult")
      assert.strictEqual(Message.textOf(last), "Final answer received.")
      // the state saves the output in its JSON form, with the Schema's identity
      assert.deepStrictEqual(result.state.output, {
        schema: Output.finalAnswer(Answer).identity,
        invalidAttempts: 0,
        value: { sum: 3, explanation: "1 + 2" }
      })
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag === "AgentEnd") assert.deepStrictEqual(end.result?.output, { sum: 3, explanation: "1 + 2" })
    }))

  it.effect("invalid twice, then valid: the model reads each error and the run succeeds", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runTyped([
        final({ sum: "three" }, "f1"),
        final({ sum: 3 }, "f2"),
        final({ sum: 3, explanation: "counted" }, "f3")
      ])
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { sum: 3, explanation: "counted" })
      assert.strictEqual(requests.length, 3)
      const errors = result.messages.filter((m): m is Message.ToolResultMessage => m.role === "toolResult")
      assert.deepStrictEqual(errors.map((m) => m.isError), [true, true, false])
      // what was wrong, and the expected schema
      const first = Message.textOf(errors[0]!)
      assert.include(first, "Invalid arguments for final_answer")
      assert.include(first, "sum: Expected number")
      assert.include(first, "explanation: Missing key")
      assert.include(first, "Expected arguments matching this schema")
      assert.include(first, "\"required\":[\"sum\",\"explanation\"]")
      assert.include(Message.textOf(errors[1]!), "explanation: Missing key")
      assert.strictEqual(result.state.output?.invalidAttempts, 0)
    }))

  it.effect("a model that never complies ends OutputInvalid with its last attempt, never an exception", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runTyped([
        final({ sum: "a" }, "f1"),
        final({ sum: "b" }, "f2"),
        final({ sum: 3 }, "f3"),
        { text: "never called" }
      ])
      assert.deepStrictEqual(result.outcome, {
        _tag: "OutputInvalid",
        lastAttempt: { sum: 3 },
        issue: "explanation: Missing key",
        attempts: 3
      })
      assert.strictEqual(result.output, undefined)
      assert.strictEqual(requests.length, 3)
      assertValidTranscript(result.messages)
    }))

  it.effect("outputRetries sets the attempts: 0 ends at the first invalid answer", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runTyped([final({ sum: "a" })], { outputRetries: 0 })
      assert.strictEqual(result.outcome._tag, "OutputInvalid")
      assert.strictEqual(requests.length, 1)
    }))

  it.effect("an answer in plain text is an attempt: a reminder goes to the model, then it complies", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runTyped([
        { text: "The sum is 3." },
        final({ sum: 3, explanation: "after the reminder" })
      ])
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { sum: 3, explanation: "after the reminder" })
      assert.strictEqual(requests.length, 2)
      const reminder = result.messages[2]!
      assert.strictEqual(reminder.role, "user")
      assert.strictEqual(
        Message.textOf(reminder),
        "You answered in text, but this task needs its final answer through the final_answer tool. " +
          "Call final_answer now with your answer as its arguments (2 attempts left)."
      )
      // the reminder is announced like any appended message
      assert.isTrue(ofTag(events, "MessageEnd").some((e) => e.message === reminder))
    }))

  it.effect("only answering in text ends OutputInvalid with the last text", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runTyped([{ text: "3" }, { text: "It is 3" }, { text: "Three." }])
      assert.deepStrictEqual(result.outcome, {
        _tag: "OutputInvalid",
        lastAttempt: "Three.",
        issue: "the model answered in text without calling final_answer",
        attempts: 3
      })
      assert.strictEqual(requests.length, 3)
    }))

  it.effect("malformed JSON arguments are an attempt, reported as such", () =>
    Effect.gen(function*() {
      const { result } = yield* runTyped([
        { toolCalls: [{ id: "f1", name: "final_answer", rawParams: "{\"sum\": 3," }] }
      ], { outputRetries: 0 })
      assert.strictEqual(result.outcome._tag, "OutputInvalid")
      if (result.outcome._tag === "OutputInvalid") {
        assert.strictEqual(result.outcome.lastAttempt, "{\"sum\": 3,")
        assert.include(result.outcome.issue, "the arguments are not valid JSON")
      }
    }))

  it.effect("wrap-up asks for the final answer through the tool, and WrappedUp carries the typed output", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runTyped([
        { toolCalls: [{ id: "c1", name: "add", params: { a: 1, b: 2 } }] },
        { toolCalls: [{ id: "c2", name: "add", params: { a: 3, b: 4 } }] },
        final({ sum: 10, explanation: "wrapped up" })
      ], { config: { maxTurns: 3, graceTurns: 1 } })
      assert.strictEqual(result.outcome._tag, "WrappedUp")
      assert.deepStrictEqual(result.output, { sum: 10, explanation: "wrapped up" })
      const wrapUp = ofTag(events, "WrapUpRequested")
      assert.strictEqual(wrapUp.length, 1)
      assert.include(wrapUp[0]!.message, `calling the final_answer tool`)
      // the request after the wrap-up holds it as a system message
      const system = requests[2]!.prompt.content.filter((m) => m.role === "system")
      assert.isTrue(system.some((m) => m.role === "system" && m.content.includes("final_answer")))
    }))

  it.effect("a budget's wrap-up too: WrappedUp with the typed output", () =>
    Effect.gen(function*() {
      const { result } = yield* runTyped([
        // 45 of 100 used: the next call fits, the one after would not; the model is asked to wrap up before it
        { toolCalls: [{ id: "c1", name: "add", params: { a: 1, b: 2 } }], usage: { input: 45, output: 0 } },
        final({ sum: 3, explanation: "within budget" })
      ], { config: { budgets: { tokens: 100 } } })
      assert.strictEqual(result.outcome._tag, "WrappedUp")
      assert.deepStrictEqual(result.output, { sum: 3, explanation: "within budget" })
    }))

  it.effect("a Schema that is not an object is offered as { value } and returned as itself", () =>
    Effect.gen(function*() {
      const Tags = Schema.Array(Schema.String)
      const result = yield* Agent.run({ prompt: "tags?", output: Tags }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([final({ value: ["a", "b"] })]), toolsLayer()))
      )
      const tags: ReadonlyArray<string> | undefined = result.output
      assert.deepStrictEqual(tags, ["a", "b"])
      const answer = Output.finalAnswer(Tags)
      assert.isTrue(answer.wrapped)
      assert.deepStrictEqual(Tool.getJsonSchema(answer.tool), {
        type: "object",
        properties: { value: { type: "array", items: { type: "string" } } },
        required: ["value"],
        additionalProperties: true
      })
    }))

  it.effect("the output is decoded with the Schema: transformations apply, and the state keeps the JSON form", () =>
    Effect.gen(function*() {
      const Due = Schema.Struct({ due: Schema.DateTimeUtcFromString })
      const result = yield* Agent.run({ prompt: "when?", output: Due }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([final({ due: "2026-01-02T00:00:00.000Z" })]), toolsLayer()))
      )
      assert.strictEqual(result.output?.due.epochMilliseconds, Date.UTC(2026, 0, 2))
      assert.deepStrictEqual(result.state.output?.value, { due: "2026-01-02T00:00:00.000Z" })
      // and the state round-trips through JSON
      const json = JSON.parse(JSON.stringify(Schema.encodeSync(RunState.RunStateJson)(result.state)))
      assert.deepStrictEqual(Schema.decodeUnknownSync(RunState.RunStateJson)(json).output, result.state.output)
    }))

  it.effect("runContinue with another Schema fails with OutputSchemaMismatch; with the same one it goes on", () =>
    Effect.gen(function*() {
      const { result } = yield* runTyped([{ toolCalls: [{ id: "c1", name: "add", params: { a: 1, b: 2 } }] }], {
        config: { maxTurns: 1 }
      })
      assert.strictEqual(result.outcome._tag, "MaxTurns")
      const Other = Schema.Struct({ total: Schema.Finite })
      const layer = Layer.merge(ScriptedModel.layer([final({ sum: 3, explanation: "resumed" })]), toolsLayer())
      const mismatch = yield* Effect.exit(
        Agent.runContinue(result.state, { output: Other }).pipe(Effect.provide(layer))
      )
      assert.isTrue(Exit.isFailure(mismatch))
      if (Exit.isFailure(mismatch)) {
        const error = mismatch.cause.reasons[0]
        assert.strictEqual(error?._tag, "Fail")
        if (error?._tag === "Fail") {
          assert.strictEqual(error.error._tag, "OutputSchemaMismatch")
          if (error.error._tag === "OutputSchemaMismatch") {
            assert.strictEqual(error.error.saved, Output.finalAnswer(Answer).identity)
            assert.strictEqual(error.error.given, Output.finalAnswer(Other).identity)
          }
        }
      }
      const none = yield* Effect.flip(Agent.runContinue(result.state).pipe(Effect.provide(layer)))
      assert.strictEqual(none._tag, "OutputSchemaMismatch")
      const resumed = yield* Agent.runContinue(result.state, { output: Answer }).pipe(Effect.provide(layer))
      assert.deepStrictEqual(resumed.output, { sum: 3, explanation: "resumed" })
    }))

  it.effect("a follow-up after the final answer goes on, as after any natural stop: the next answer is the output", () =>
    Effect.gen(function*() {
      const script = [final({ sum: 3, explanation: "1 + 2" }), final({ sum: 4, explanation: "one more" }, "f2")]
      const first = yield* runTyped(script)
      assert.deepStrictEqual([first.result.outcome._tag, first.result.output?.sum], ["Completed", 3])
      // continued with a follow-up queued: delivered, and the model answers again
      const steering = yield* Steering.make()
      yield* steering.followUp("Add one.")
      const { events, plugin } = recorder()
      const next = yield* Agent.runContinue(first.result.state, { output: Answer, steering, plugins: [plugin] }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer(script.slice(1)), toolsLayer()))
      )
      assert.deepStrictEqual(
        {
          outcome: next.outcome._tag,
          output: next.output,
          saved: next.state.output?.value,
          undelivered: next.state.followUps.length,
          added: next.messages.map((message) => `${message.role}:${Message.textOf(message)}`),
          delivered: ofTag(events, "FollowUpDelivered").length
        },
        {
          outcome: "Completed",
          output: { sum: 4, explanation: "one more" },
          saved: { sum: 4, explanation: "one more" },
          undelivered: 0,
          added: ["user:Add one.", "assistant:", "toolResult:Final answer received."],
          delivered: 1
        }
      )
      assertValidTranscript(next.state.messages)
      // continued with nothing queued: it ends with its answer again, with no model call
      const again = yield* Agent.runContinue(next.state, { output: Answer }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([]), toolsLayer()))
      )
      assert.deepStrictEqual([again.outcome._tag, again.output?.sum, again.messages.length], ["Completed", 4, 0])
    }))

  it.effect("a follow-up queued while a typed run works is delivered after its final answer, not returned undelivered", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      let queued = false
      const queueing = Hooks.plugin({
        name: "queueing",
        // queued once, at the end of the turn that answers
        afterTurn: () =>
          queued ? Effect.succeed(Hooks.proceed) : Effect.as(Effect.orDie(steering.followUp("Add one.")), Hooks.proceed).pipe(
            Effect.tap(() => Effect.sync(() => void (queued = true)))
          )
      })
      const result = yield* Agent.run({ prompt: "Add 1 and 2", output: Answer, steering, plugins: [queueing] }).pipe(
        Effect.provide(Layer.merge(
          ScriptedModel.layer([final({ sum: 3, explanation: "1 + 2" }), final({ sum: 4, explanation: "one more" }, "f2")]),
          toolsLayer()
        ))
      )
      assert.deepStrictEqual([result.outcome._tag, result.output?.sum, result.state.followUps.length], ["Completed", 4, 0])
    }))

  it.effect("a run without output offers no final_answer tool and has no output", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* Effect.gen(function*() {
        const result = yield* Agent.run({ prompt: "hi" })
        return { result, requests: yield* (yield* ScriptedModel.ScriptedModel).requests }
      }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "hello" }]), toolsLayer())))
      assert.isFalse(requests[0]!.tools.includes("final_answer"))
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.isFalse("output" in result)
      assert.strictEqual(result.state.output, undefined)
    }))

  it.effect("outputRetries out of range is a ConfigError", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Agent.run({ prompt: "x", output: Answer, outputRetries: -1 }).pipe(
          Effect.provide(Layer.merge(ScriptedModel.layer([]), toolsLayer()))
        )
      )
      assert.strictEqual(error._tag, "ConfigError")
    }))

  it.effect("a hook sees final_answer calls like any other: a block is an attempt the model reads", () =>
    Effect.gen(function*() {
      const strict = Hooks.plugin({
        name: "strict",
        beforeToolCall: (call) =>
          Effect.succeed(call.name === "final_answer" ? Hooks.block("not yet: check your work") : Hooks.allow)
      })
      const result = yield* Agent.run({ prompt: "x", output: Answer, outputRetries: 0, plugins: [strict] }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([final({ sum: 3, explanation: "e" })]), toolsLayer()))
      )
      assert.deepStrictEqual(result.outcome, {
        _tag: "OutputInvalid",
        lastAttempt: { sum: 3, explanation: "e" },
        issue: "Tool call blocked: not yet: check your work",
        attempts: 1
      })
    }))
})

describe("Agent.run with output, native mode", () => {
  const runNative = (script: ScriptedModel.Script, config: AgentConfig.Input = {}) =>
    Effect.gen(function*() {
      const { events, plugin } = recorder()
      const result = yield* Agent.run({
        prompt: "Add",
        output: Answer,
        outputMode: "native",
        config,
        plugins: [plugin]
      })
      const requests = yield* (yield* ScriptedModel.ScriptedModel).requests
      return { result, events, requests }
    }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer(script), ToolRegistry.layerEntries())))

  it.effect("the reply's text is the answer: offered no tool, decoded as JSON, streamed as OutputDelta", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runNative([
        { text: ["{\"sum\": 3, ", "\"explanation\": \"1 + 2\"}"] }
      ])
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(result.output, { sum: 3, explanation: "1 + 2" })
      assert.deepStrictEqual(requests[0]!.tools, [])
      assert.deepStrictEqual(ofTag(events, "OutputDelta").map((e) => [e.toolCallId, e.delta]), [
        [undefined, "{\"sum\": 3, "],
        [undefined, "\"explanation\": \"1 + 2\"}"]
      ])
    }))

  it.effect("a reply that does not decode is an attempt: the model reads the issue and the schema", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runNative([
        { text: "{\"sum\": 3}" },
        { text: "{\"sum\": 3, \"explanation\": \"e\"}" }
      ])
      assert.deepStrictEqual(result.output, { sum: 3, explanation: "e" })
      const retry = result.messages[2]!
      assert.strictEqual(retry.role, "user")
      assert.strictEqual(
        Message.textOf(retry),
        "Your answer is not valid: explanation: Missing key\n" +
          "Answer again with only a JSON object matching this schema: " +
          JSON.stringify(Tool.getJsonSchemaFromSchema(Answer))
      )
      assert.strictEqual(requests.length, 2)
    }))

  it.effect("never valid: OutputInvalid with the last text", () =>
    Effect.gen(function*() {
      const { result } = yield* runNative([{ text: "three" }, { text: "3" }, { text: "{}" }])
      assert.deepStrictEqual(result.outcome, {
        _tag: "OutputInvalid",
        lastAttempt: "{}",
        issue: "sum: Missing key; explanation: Missing key",
        attempts: 3
      })
    }))
})

// Keeps the type import used when the events are not asserted by type.
export type _Events = AgentEvent.AgentEvent
