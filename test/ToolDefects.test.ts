/**
 * A tool's defects (issue 31, item 4): a handler that throws or dies, or
 * returns what its success Schema rejects, is a bug of the tool, not a
 * failure the model caused. It is an error result the model reads, said
 * once; `ToolExecutionEnd` marks it apart from a typed failure; and with
 * `ToolRegistry.FailOnDefect` on (tests) it ends the run with a
 * `ToolFatalError` naming the tool and the defect, on every path a call takes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, AgentError, AgentEvent, Message, SubAgent, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { ofTag, recorder, roundTrip } from "./support.ts"

const Half = Tool.make("half", { parameters: Schema.Struct({ n: Schema.Finite }), success: Schema.Finite })
const Lookup = Tool.make("lookup", {
  parameters: Schema.Struct({ key: Schema.String }),
  success: Schema.String,
  failure: Schema.Struct({ missing: Schema.String })
})
const Kit = Toolkit.make(Half, Lookup)

/** `half` throws on an odd number and returns text (not a number) on 0; `lookup` fails typed on "x". */
const KitLayer = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
  half: ({ n }) =>
    Effect.sync(() => {
      if (n % 2 !== 0) throw new Error(`${n} is odd`)
      // a handler written without types returns what its Schema rejects
      return n === 0 ? JSON.parse("\"zero\"") : n / 2
    }),
  lookup: ({ key }) => key === "x" ? Effect.fail({ missing: key }) : Effect.succeed(`value of ${key}`)
})))

const call = (name: string, params: unknown, id: string): ScriptedModel.ToolCall => ({ id, name, params })

/** Runs a script over the kit, recording events; `strict` turns `FailOnDefect` on. */
const run = (script: ScriptedModel.Script, strict: boolean) =>
  Effect.gen(function*() {
    const { events, plugin } = recorder()
    const running = Agent.run({ prompt: "go", plugins: [plugin] })
    const exit = yield* Effect.exit(strict ? Effect.provideService(running, ToolRegistry.FailOnDefect, true) : running)
    return { exit, events }
  }).pipe(Effect.provide(Layer.merge(KitLayer, ScriptedModel.layer(script))))

const resultText = (messages: ReadonlyArray<Message.Message>, id: string): string => {
  const found = messages.find((m) => m.role === "toolResult" && m.toolCallId === id)
  if (found === undefined) throw new Error(`no result for ${id}`)
  return Message.textOf(found)
}

const ends = (events: ReadonlyArray<AgentEvent.AgentEvent>) =>
  Object.fromEntries(ofTag(events, "ToolExecutionEnd").map((end) => [end.toolCallId, end]))

describe("tool defects, by default", () => {
  it.effect("a result its success Schema rejects: one error result that says 'Tool half' once, with the Schema's issue", () =>
    Effect.gen(function*() {
      const { exit } = yield* run([{ toolCalls: [call("half", { n: 0 }, "h0")] }, { text: "ok" }], false)
      if (exit._tag !== "Success") return assert.fail(`the run failed: ${exit.cause}`)
      const text = resultText(exit.value.messages, "h0")
      assert.strictEqual(text, "Tool half returned an invalid result: Expected number")
      assert.strictEqual(text.split("half").length - 1, 1)
      assert.strictEqual(exit.value.outcome._tag, "Completed")
    }))

  it.effect("ToolExecutionEnd marks a defect (a throw, an invalid result) apart from a typed failure and a success", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* run([
        {
          toolCalls: [
            call("half", { n: 3 }, "odd"),
            call("half", { n: 0 }, "zero"),
            call("lookup", { key: "x" }, "missing"),
            call("half", { n: 4 }, "fine")
          ]
        },
        { text: "ok" }
      ], false)
      assert.strictEqual(exit._tag, "Success")
      const end = ends(events)
      assert.deepStrictEqual(
        Object.fromEntries(Object.entries(end).map(([id, e]) => [id, [e.result.isError, e.defect]])),
        {
          odd: [true, "Error: 3 is odd"],
          zero: [true, "invalid result: Expected number"],
          missing: [true, undefined],
          fine: [false, undefined]
        }
      )
      // the typed failure is the failure encoded, as before; no `defect` key at all on it
      assert.deepStrictEqual(JSON.parse(Message.textOf(end["missing"]!.result)), { missing: "x" })
      assert.isFalse("defect" in end["missing"]!)
    }))

  it("the marked event round-trips through JSON", () => {
    const event: AgentEvent.AgentEvent = {
      _tag: "ToolExecutionEnd",
      runId: "r",
      turn: 1,
      timestamp: 0,
      toolCallId: "c",
      toolName: "half",
      result: { role: "toolResult", toolCallId: "c", toolName: "half", content: [Message.text("x")], isError: true },
      durationMs: 1,
      terminate: false,
      defect: "Error: 3 is odd"
    }
    const back = roundTrip(AgentEvent.AgentEventJson, event)
    assert.strictEqual(back._tag === "ToolExecutionEnd" ? back.defect : undefined, "Error: 3 is odd")
  })
})

describe("ToolRegistry.FailOnDefect", () => {
  it.effect("a throwing handler fails the run with ToolFatalError naming the tool and the defect, with the run's state", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* run([{ toolCalls: [call("half", { n: 3 }, "odd")] }, { text: "never" }], true)
      const error = exit._tag === "Failure" ? exit.cause.reasons.find((reason) => reason._tag === "Fail") : undefined
      if (error === undefined || error.error._tag !== "ToolFatalError") return assert.fail(`expected ToolFatalError: ${exit}`)
      const fatal = error.error
      assert.deepStrictEqual([fatal.toolName, fatal.toolCallId, fatal.defect], ["half", "odd", "Error: 3 is odd"])
      assert.strictEqual(fatal.message, "tool half (odd) had a defect: Error: 3 is odd")
      // the state holds the call answered with its defect: the transcript is whole
      assert.strictEqual(resultText(fatal.state?.messages ?? [], "odd"), "Tool half crashed: Error: 3 is odd")
      assert.deepStrictEqual(ofTag(events, "ToolExecutionEnd"), [])
      assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
      // and it survives JSON with its defect, as a durable session stores it
      const back = roundTrip(AgentError.AgentError, fatal)
      assert.strictEqual(back._tag === "ToolFatalError" ? back.defect : undefined, "Error: 3 is odd")
    }))

  it.effect("a result its success Schema rejects fails the run too", () =>
    Effect.gen(function*() {
      const { exit } = yield* run([{ toolCalls: [call("half", { n: 0 }, "zero")] }, { text: "never" }], true)
      const error = exit._tag === "Failure" ? exit.cause.reasons.find((reason) => reason._tag === "Fail") : undefined
      if (error === undefined || error.error._tag !== "ToolFatalError") return assert.fail(`expected ToolFatalError: ${exit}`)
      assert.deepStrictEqual(
        [error.error.toolName, error.error.defect],
        ["half", "invalid result: Expected number"]
      )
    }))

  it.effect("a typed failure stays a result the model reads: the run goes on and completes", () =>
    Effect.gen(function*() {
      const { exit } = yield* run([
        { toolCalls: [call("lookup", { key: "x" }, "missing"), call("half", { n: 4 }, "fine")] },
        { text: "ok" }
      ], true)
      if (exit._tag !== "Success") return assert.fail(`the run failed: ${exit.cause}`)
      assert.strictEqual(exit.value.outcome._tag, "Completed")
      assert.deepStrictEqual(JSON.parse(resultText(exit.value.messages, "missing")), { missing: "x" })
      assert.strictEqual(resultText(exit.value.messages, "fine"), "2")
    }))

  it.effect("a defect in a sub-agent's tool ends the sub-agent's run and the run that called it", () =>
    Effect.gen(function*() {
      const helper = Agent.define({
        name: "helper",
        description: "Halves a number",
        input: Schema.Struct({ task: Schema.String }),
        tools: KitLayer,
        model: ScriptedModel.layer([{ toolCalls: [call("half", { n: 5 }, "inner")] }, { text: "never" }])
      })
      const Calls = Toolkit.make(Agent.asTool(helper))
      const CallsLayer = ToolRegistry.layer(Calls).pipe(Layer.provide(Calls.toLayer({ helper: SubAgent.handler(helper) })))
      const script: ScriptedModel.Script = [{ toolCalls: [call("helper", { task: "halve 5" }, "outer")] }, { text: "done" }]
      const runWith = (strict: boolean) =>
        Effect.exit(Agent.run({ prompt: "go" }).pipe(
          Effect.provideService(ToolRegistry.FailOnDefect, strict),
          Effect.provide(Layer.merge(CallsLayer, ScriptedModel.layer(script)))
        ))
      const strict = yield* runWith(true)
      const error = strict._tag === "Failure" ? strict.cause.reasons.find((reason) => reason._tag === "Fail") : undefined
      if (error === undefined || error.error._tag !== "ToolFatalError") return assert.fail(`expected ToolFatalError: ${strict}`)
      assert.deepStrictEqual([error.error.toolName, error.error.toolCallId], ["helper", "outer"])
      assert.include(error.error.defect, "tool half (inner) had a defect: Error: 5 is odd")
      // off, the same defect is a result the calling model reads, and the run completes
      const lenient = yield* runWith(false)
      if (lenient._tag !== "Success") return assert.fail(`the run failed: ${lenient.cause}`)
      assert.strictEqual(lenient.value.outcome._tag, "Completed")
    }))
})
