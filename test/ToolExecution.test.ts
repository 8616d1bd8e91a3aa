import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { TestClock } from "effect/testing"
import { Agent, AgentTool, Message, RunState, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import {
  assertValidTranscript,
  makeTrace,
  ofTag,
  recorder,
  runOk,
  runScript,
  tags,
  toolResultTexts,
  type Trace
} from "./support.ts"

const call = (name: string, params: unknown, id?: string) => id === undefined ? { name, params } : { id, name, params }
const sleep = (label: string, ms: number, name = "sleep") => call(name, { ms, label }, label)

/** Runs under TestClock, advancing virtual time until the run ends. */
const runTimed = (
  script: ScriptedModel.Script,
  options: Partial<Agent.RunOptions> & { readonly trace?: Trace } = {}
) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.forkChild(runOk(script, options))
    yield* TestClock.adjust("10 seconds")
    const out = yield* Fiber.join(fiber)
    // virtual milliseconds from AgentStart to AgentEnd
    return { ...out, endedAt: out.events.at(-1)!.timestamp - out.events[0]!.timestamp }
  })

const resultOf = (messages: ReadonlyArray<Message.Message>, id: string) => {
  const found = messages.find((m) => m.role === "toolResult" && m.toolCallId === id)
  if (found === undefined || found.role !== "toolResult") throw new Error(`no result for ${id}`)
  return found
}

describe("bad calls become results the model reads", () => {
  it.effect("an unknown tool: an error result listing the tools; no ToolExecutionStart; the loop goes on", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk([
        { toolCalls: [call("nope", {}, "c1")] },
        { text: "sorry" }
      ])
      const answer = resultOf(result.messages, "c1")
      assert.isTrue(answer.isError)
      assert.match(Message.textOf(answer), /^Unknown tool "nope"\. Available tools: add, sleep, .*big\.$/)
      assert.deepStrictEqual(ofTag(events, "ToolExecutionStart"), [])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionEnd").map((e) => e.toolCallId), ["c1"])
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(toolResultTexts(requests[1]!), [Message.textOf(answer)])
    }))

  it.effect("malformed JSON arguments: the parse error, the raw text and the expected schema", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([
        { toolCalls: [{ id: "c1", name: "add", rawParams: "{\"a\": 1, \"b\":" }] },
        { text: "retrying" }
      ])
      const text = Message.textOf(resultOf(result.messages, "c1"))
      assert.match(text, /^The arguments for add were not valid JSON \(.+\)\. You sent \(raw\): \{"a": 1, "b":\n/)
      assert.include(text, "\"required\":[\"a\",\"b\"]")
      // the call keeps the raw text, so the transcript replays exactly what the model sent
      const assistant = result.messages[1]!
      if (assistant.role !== "assistant") return assert.fail("expected an assistant message")
      const part = assistant.content[0]!
      assert.strictEqual(part.type, "tool-call")
      if (part.type === "tool-call") assert.strictEqual((part.params as { raw: string }).raw, "{\"a\": 1, \"b\":")
    }))

  it.effect("arguments that do not match the schema: what is wrong, the schema, what was sent", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const { result } = yield* runOk([
        { toolCalls: [call("add", { a: "one", b: 2 }, "c1"), call("add", { a: 1 }, "c2")] },
        { text: "ok" }
      ], { trace })
      const answer = resultOf(result.messages, "c1")
      assert.isTrue(answer.isError)
      const text = Message.textOf(answer)
      assert.match(text, /^Invalid arguments for add: a: Expected number\n/)
      assert.include(text, "You sent: {\"a\":\"one\",\"b\":2}")
      assert.match(Message.textOf(resultOf(result.messages, "c2")), /^Invalid arguments for add: b: Missing key\n/)
      assert.deepStrictEqual(trace.started, [])
    }))
})

describe("handlers", () => {
  it.effect("a typed failure of a failureMode 'return' tool is an error result", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([{ toolCalls: [call("flaky", { reason: "disk full" }, "c1")] }, { text: "ok" }])
      const answer = resultOf(result.messages, "c1")
      assert.isTrue(answer.isError)
      assert.deepStrictEqual(JSON.parse(Message.textOf(answer)), { reason: "disk full" })
    }))

  it.effect("a typed failure with the default failureMode ('error') is an error result too, encoded by its Schema", () =>
    Effect.gen(function*() {
      const { events, result } = yield* runOk([
        { toolCalls: [call("failing", { reason: "not found" }, "c1")] },
        { text: "ok" }
      ])
      const answer = resultOf(result.messages, "c1")
      assert.isTrue(answer.isError)
      assert.deepStrictEqual(JSON.parse(Message.textOf(answer)), { reason: "not found" })
      assert.deepStrictEqual(ofTag(events, "ToolExecutionEnd")[0]!.result, answer)
      assert.strictEqual(result.outcome._tag, "Completed")
    }))

  it.effect("a tool annotated fatal: its typed failure ends the run with ToolFatalError", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* runScript([{ toolCalls: [call("fatal", { reason: "corrupt" }, "c9")] }])
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      if (error?._tag !== "Some" || error.value._tag !== "ToolFatalError") return assert.fail("expected ToolFatalError")
      assert.strictEqual(error.value.toolName, "fatal")
      assert.strictEqual(error.value.toolCallId, "c9")
      assert.deepStrictEqual(error.value.error, { reason: "corrupt" })
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))

  it.effect("FatalFailure ends the run from any tool (failed or died with); fatal also holds for failureMode 'return'", () =>
    Effect.gen(function*() {
      const Query = Tool.make("query", {
        parameters: Schema.Struct({ sql: Schema.String }),
        success: Schema.String,
        failure: Schema.Union([Schema.String, AgentTool.FatalFailure])
      })
      const Gone = Tool.make("gone", { success: Schema.String })
      const Returning = AgentTool.annotate(
        Tool.make("returning", { success: Schema.String, failure: Schema.String, failureMode: "return" }),
        { fatal: true }
      )
      // through ToolRegistry.layer, and through an entry of ToolRegistry.make
      const kit = Toolkit.make(Query, Gone, Returning)
      const handlers = kit.toLayer({
        query: ({ sql }) =>
          sql === "" ? Effect.fail("empty query") : Effect.fail(new AgentTool.FatalFailure({ reason: "database is gone" })),
        gone: () => Effect.die(new AgentTool.FatalFailure({ reason: "credentials revoked" })),
        returning: () => Effect.fail("out of disk")
      })
      const registries = {
        direct: ToolRegistry.layer(kit).pipe(Layer.provide(handlers)),
        entry: Layer.effect(
          ToolRegistry.ToolRegistry,
          Effect.map(ToolRegistry.fromToolkit(kit), (entry) => ToolRegistry.make(entry))
        ).pipe(Layer.provide(handlers))
      }
      for (const [path, registry] of Object.entries(registries)) {
        const failure = (toolCalls: ReadonlyArray<ScriptedModel.ToolCall>) =>
          Effect.flip(Agent.run({ prompt: "go" }).pipe(
            Effect.provide(Layer.merge(registry, ScriptedModel.layer([{ toolCalls }, { text: "ok" }])))
          ))
        const query = yield* failure([call("query", { sql: "" }, "q1"), call("query", { sql: "drop" }, "q2")])
        if (query._tag !== "ToolFatalError") return assert.fail(`${path}: expected ToolFatalError, got ${query._tag}`)
        assert.deepStrictEqual([query.toolCallId, query.description], ["q2", "database is gone"], path)
        assert.deepStrictEqual(query.error, { _tag: "FatalFailure", reason: "database is gone" }, path)
        const gone = yield* failure([call("gone", {}, "g")])
        assert.deepStrictEqual(gone._tag === "ToolFatalError" && [gone.toolCallId, gone.description], ["g", "credentials revoked"], path)
        const returning = yield* failure([call("returning", {}, "r")])
        assert.deepStrictEqual(
          returning._tag === "ToolFatalError" && [returning.toolCallId, returning.error],
          ["r", "out of disk"],
          path
        )
      }
    }))

  it.effect("a failure its Schema cannot encode is described in words", () =>
    Effect.gen(function*() {
      const Odd = Tool.make("odd", { success: Schema.String, failure: Schema.Struct({ code: Schema.Finite }) })
      const kit = Toolkit.make(Odd)
      const layer = ToolRegistry.layer(kit).pipe(
        // a handler written without types fails with something its Schema does not describe
        Layer.provide(kit.toLayer({ odd: () => Effect.fail(JSON.parse("{\"code\":\"x\"}")) }))
      )
      const { events, plugin } = recorder()
      const result = yield* Agent.run({ prompt: "go", plugins: [plugin] }).pipe(
        Effect.provide(Layer.merge(layer, ScriptedModel.layer([{ toolCalls: [call("odd", {}, "o")] }, { text: "ok" }])))
      )
      const answer = resultOf(result.messages, "o")
      assert.isTrue(answer.isError)
      assert.strictEqual(Message.textOf(answer), "Tool odd failed: {\"code\":\"x\"}")
      // a failure its type does not allow is a defect of the tool
      assert.strictEqual(ofTag(events, "ToolExecutionEnd")[0]!.defect, "invalid failure: Expected number at [\"code\"]")
    }))

  it.effect("a defect in a handler is an error result naming it, never a crashed loop", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([{ toolCalls: [call("crash", {}, "c1")] }, { text: "ok" }])
      const answer = resultOf(result.messages, "c1")
      assert.isTrue(answer.isError)
      assert.strictEqual(Message.textOf(answer), "Tool crash crashed: Error: boom")
      assert.strictEqual(result.outcome._tag, "Completed")
    }))

  it.effect("a handler that throws synchronously is an error result naming it, like a defect", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([{ toolCalls: [call("throw", {}, "c1"), call("add", { a: 1, b: 2 }, "c2")] }, {
        text: "ok"
      }])
      const answer = resultOf(result.messages, "c1")
      assert.isTrue(answer.isError)
      assert.strictEqual(Message.textOf(answer), "Tool throw crashed: Error: thrown")
      assert.strictEqual(Message.textOf(resultOf(result.messages, "c2")), "3")
      assert.strictEqual(result.outcome._tag, "Completed")
    }))

  it.effect("every other way a handler can break is one error result: Effect.sync throwing, toModelOutput throwing, " +
    "an unencodable preliminary, a throw in a second toolkit's handler, a registry entry whose invoke throws", () =>
    Effect.gen(function*() {
      const Sync = Tool.make("sync", { success: Schema.String })
      const Shown = Tool.make("shown", {
        success: Schema.String,
        toModelOutput: () => {
          throw new Error("cannot render")
        }
      })
      const Partial = Tool.make("partial", { success: Schema.Finite })
      const Handled = Tool.make("handled", { success: Schema.String })
      const kit = Toolkit.make(Sync, Shown, Partial)
      const handledKit = Toolkit.make(Handled)
      const registry = Layer.effect(
        ToolRegistry.ToolRegistry,
        Effect.gen(function*() {
          const direct = yield* ToolRegistry.fromToolkit(kit)
          const handled = yield* ToolRegistry.fromToolkit(handledKit)
          const broken: ToolRegistry.Entry = {
            tools: { broken: Tool.make("broken", { success: Schema.String }) },
            invoke: () => {
              throw new Error("no handle")
            }
          }
          return ToolRegistry.make(direct, handled, broken)
        })
      ).pipe(Layer.provide(Layer.merge(
        kit.toLayer({
          sync: () =>
            Effect.sync(() => {
              throw new Error("in sync")
            }),
          shown: () => Effect.succeed("fine"),
          // a string where the success Schema wants a number
          partial: (_, ctx) => Effect.as(ctx.preliminary("not a number" as unknown as number), 1)
        }),
        handledKit.toLayer({
          handled: () => {
            throw new Error("thrown via handle")
          }
        })
      )))
      const { events, plugin } = recorder()
      const result = yield* Agent.run({ prompt: "go", plugins: [plugin] }).pipe(
        Effect.provide(Layer.merge(
          registry,
          ScriptedModel.layer([{
            toolCalls: ["sync", "shown", "partial", "handled", "broken"].map((name) => call(name, {}, name))
          }, { text: "ok" }])
        ))
      )
      assert.strictEqual(result.outcome._tag, "Completed")
      // each is a defect of its tool, and its ToolExecutionEnd says which
      assert.deepStrictEqual(Object.fromEntries(ofTag(events, "ToolExecutionEnd").map((e) => [e.toolCallId, e.defect])), {
        sync: "Error: in sync",
        shown: "Error: cannot render",
        partial: "invalid preliminary result: Expected number",
        handled: "Error: thrown via handle",
        broken: "Error: no handle"
      })
      assertValidTranscript(result.messages)
      const texts = Object.fromEntries(
        ["sync", "shown", "partial", "handled", "broken"].map((id) => {
          const answer = resultOf(result.messages, id)
          assert.isTrue(answer.isError, id)
          return [id, Message.textOf(answer)]
        })
      )
      assert.deepStrictEqual(texts, {
        sync: "Tool sync crashed: Error: in sync",
        shown: "Tool shown crashed: Error: cannot render",
        partial: "Tool partial returned an invalid preliminary result: Expected number",
        handled: "Tool handled crashed: Error: thrown via handle",
        broken: "Tool broken crashed: Error: no handle"
      })
    }))

  it.effect("a timeout interrupts the handler (its finalizer runs) and says after how long", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const { result } = yield* runTimed([
        { toolCalls: [sleep("slow", 5_000)] },
        { text: "ok" }
      ], { trace, config: { toolTimeout: "1 second" } })
      const answer = resultOf(result.messages, "slow")
      assert.strictEqual(Message.textOf(answer), "Tool sleep timed out after 1000 ms.")
      assert.isTrue(answer.isError)
      assert.deepStrictEqual(trace.started, ["slow"])
      assert.deepStrictEqual(trace.finished, [])
      assert.deepStrictEqual(trace.finalized, ["slow"])
    }))

  it.effect("a tool's Timeout annotation wins over the config", () =>
    Effect.gen(function*() {
      const Quick = AgentTool.annotate(
        Tool.make("quick", { success: Schema.String }),
        { timeout: "50 millis" }
      )
      const kit = Toolkit.make(Quick)
      const layer = ToolRegistry.layer(kit).pipe(
        Layer.provide(kit.toLayer({ quick: () => Effect.as(Effect.sleep("1 second"), "late") }))
      )
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go", config: { toolTimeout: "1 minute" } }).pipe(
          Effect.provide(Layer.merge(layer, ScriptedModel.layer([{ toolCalls: [call("quick", {}, "q")] }, { text: "ok" }])))
        )
      )
      yield* TestClock.adjust("1 second")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(Message.textOf(resultOf(result.messages, "q")), "Tool quick timed out after 50 ms.")
    }))

  it.effect("preliminary results stream as ToolExecutionUpdate events", () =>
    Effect.gen(function*() {
      const { events, result } = yield* runOk([{ toolCalls: [call("progress", { steps: 4 }, "p")] }, { text: "ok" }])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionUpdate").map((e) => e.partial), [1, 2, 3])
      assert.strictEqual(Message.textOf(resultOf(result.messages, "p")), "4")
      const order = tags(events).filter((t) => t.startsWith("ToolExecution"))
      assert.deepStrictEqual(order, [
        "ToolExecutionStart",
        "ToolExecutionUpdate",
        "ToolExecutionUpdate",
        "ToolExecutionUpdate",
        "ToolExecutionEnd"
      ])
    }))
})

describe("scheduling", () => {
  it.effect("two parallel 100 ms tools finish in 100 ms; one exclusive call makes it 200 ms", () =>
    Effect.gen(function*() {
      const parallel = yield* runTimed([{ toolCalls: [sleep("a", 100), sleep("b", 100)] }, { text: "ok" }])
      assert.strictEqual(parallel.endedAt, 100)
      const exclusive = yield* runTimed([
        { toolCalls: [sleep("a", 100), sleep("b", 100, "sleep_exclusive")] },
        { text: "ok" }
      ])
      assert.strictEqual(exclusive.endedAt, 200)
    }))

  it.live("in real time too: parallel sleeps overlap, an exclusive one starts after the other ends", () =>
    Effect.gen(function*() {
      // Read from the events' real timestamps, not from how long the runs took: a loaded machine delays both
      // runs (once, at load 30, the parallel pair took 482 ms and the exclusive 538), but it cannot make two
      // sleeps started together stop overlapping, nor an exclusive call start before the one it waits for ends.
      const spans = (toolCalls: ReadonlyArray<ReturnType<typeof sleep>>) =>
        Effect.map(runOk([{ toolCalls }, { text: "ok" }]), ({ events }) => {
          const at = (tag: string, id: string) => {
            const event = events.find((e) => e._tag === tag && "toolCallId" in e && e.toolCallId === id)
            if (event === undefined) throw new Error(`no ${tag} for ${id}`)
            return event.timestamp
          }
          return {
            a: { start: at("ToolExecutionStart", "a"), end: at("ToolExecutionEnd", "a") },
            b: { start: at("ToolExecutionStart", "b"), end: at("ToolExecutionEnd", "b") }
          }
        })
      const parallel = yield* spans([sleep("a", 250), sleep("b", 250)])
      assert.isBelow(parallel.b.start, parallel.a.end, "b starts while a sleeps")
      assert.isBelow(parallel.a.start, parallel.b.end, "a starts while b sleeps")
      const exclusive = yield* spans([sleep("a", 250), sleep("b", 250, "sleep_exclusive")])
      assert.isAtLeast(exclusive.b.start, exclusive.a.end, "the exclusive call waits for the other to end")
      for (const { start, end } of [parallel.a, parallel.b, exclusive.a, exclusive.b]) assert.isAtLeast(end - start, 250)
    }))

  it.effect("event times: a call's end minus its duration is its start; a turn's budget snapshot is at its end", () =>
    Effect.gen(function*() {
      const { events } = yield* runTimed([{ toolCalls: [sleep("a", 100), sleep("b", 300)] }, { text: "ok" }])
      const ends = ofTag(events, "ToolExecutionEnd")
      assert.deepStrictEqual(ends.map((e) => [e.toolCallId, e.durationMs]), [["a", 100], ["b", 300]])
      for (const end of ends) {
        const start = ofTag(events, "ToolExecutionStart").find((e) => e.toolCallId === end.toolCallId)!
        assert.strictEqual(end.timestamp - end.durationMs, start.timestamp)
      }
      const turnEnds = ofTag(events, "TurnEnd")
      const snapshots = ofTag(events, "BudgetSnapshot")
      assert.deepStrictEqual(snapshots.map((e) => e.timestamp), turnEnds.map((e) => e.timestamp))
      assert.strictEqual(snapshots[0]!.figures.elapsedMs, turnEnds[0]!.timestamp - events[0]!.timestamp)
    }))

  it.effect("results keep the calls' order when the second finishes first", () =>
    Effect.gen(function*() {
      const { events, result } = yield* runTimed([{ toolCalls: [sleep("slow", 100), sleep("fast", 10)] }, {
        text: "ok"
      }])
      assert.deepStrictEqual(
        ofTag(events, "ToolExecutionEnd").map((e) => e.toolCallId),
        ["fast", "slow"]
      )
      assert.deepStrictEqual(
        result.messages.filter((m) => m.role === "toolResult").map((m) => m.role === "toolResult" ? m.toolCallId : ""),
        ["slow", "fast"]
      )
      assertValidTranscript(result.messages)
    }))

  it.effect("at most maxParallelTools calls run at once", () =>
    Effect.gen(function*() {
      const calls = ["a", "b", "c", "d", "e"].map((label) => sleep(label, 100))
      const capped = yield* runTimed([{ toolCalls: calls }, { text: "ok" }], { config: { maxParallelTools: 2 } })
      assert.strictEqual(capped.endedAt, 300)
      const open = yield* runTimed([{ toolCalls: calls }, { text: "ok" }], { config: { maxParallelTools: 8 } })
      assert.strictEqual(open.endedAt, 100)
    }))

  it.effect("a call that frees another as it starts in a freed slot: every handler runs once, AgentEnd is last", () =>
    Effect.gen(function*() {
      // `open` starts when `sleep` frees its slot and completes the gate `wait` is blocked on, so `wait`
      // finishes inside `open`'s start. Effect 4.1's bounded `Effect.forEach` then starts `open` a second time.
      const gate = yield* Deferred.make<void>()
      const started: Array<string> = []
      const Wait = Tool.make("wait", { success: Schema.String })
      const Open = Tool.make("open", { success: Schema.String })
      const Nap = Tool.make("nap", { success: Schema.String })
      const kit = Toolkit.make(Wait, Open, Nap)
      const layer = ToolRegistry.layer(kit).pipe(Layer.provide(kit.toLayer({
        wait: () => Effect.sync(() => started.push("wait")).pipe(Effect.andThen(Deferred.await(gate)), Effect.as("waited")),
        open: () => Effect.sync(() => started.push("open")).pipe(Effect.andThen(Deferred.succeed(gate, undefined)), Effect.as("opened")),
        nap: () => Effect.sync(() => started.push("nap")).pipe(Effect.andThen(Effect.sleep("10 millis")), Effect.as("napped"))
      })))
      const { events, plugin } = recorder()
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go", plugins: [plugin], config: { maxParallelTools: 2 } }).pipe(
          Effect.provide(Layer.merge(
            layer,
            ScriptedModel.layer([{ toolCalls: [call("wait", {}, "w"), call("nap", {}, "n"), call("open", {}, "o")] }, {
              text: "ok"
            }])
          ))
        )
      )
      yield* TestClock.adjust("1 second")
      const result = yield* Fiber.join(fiber)
      assert.deepStrictEqual(started, ["wait", "nap", "open"])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionEnd").map((e) => e.toolCallId).sort(), ["n", "o", "w"])
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
      assert.deepStrictEqual(
        result.messages.flatMap((m) => m.role === "toolResult" ? [Message.textOf(m)] : []),
        ["waited", "napped", "opened"]
      )
    }))

  it.effect("sequential calls run one at a time after the parallel ones", () =>
    Effect.gen(function*() {
      const trace: Trace = makeTrace()
      const { endedAt } = yield* runTimed([
        { toolCalls: [sleep("s1", 50, "sleep_sequential"), sleep("p1", 50), sleep("s2", 50, "sleep_sequential"), sleep("p2", 50)] },
        { text: "ok" }
      ], { trace })
      assert.deepStrictEqual(trace.started, ["p1", "p2", "s1", "s2"])
      assert.strictEqual(endedAt, 150)
    }))
})

describe("limits", () => {
  it.effect("results longer than maxResultChars are cut with a marker; the full text stays in details", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runOk([{ toolCalls: [call("big", { chars: 100 }, "b")] }, { text: "ok" }], {
        config: { maxResultChars: 10 }
      })
      const answer = resultOf(result.messages, "b")
      assert.strictEqual(Message.textOf(answer), "xxxxxxxxxx\n[… 90 of 100 characters cut]")
      assert.deepStrictEqual(answer.details, { truncated: true, fullText: "x".repeat(100) })
      assert.deepStrictEqual(toolResultTexts(requests[1]!), ["xxxxxxxxxx\n[… 90 of 100 characters cut]"])
    }))

  it.effect("a cut never splits a surrogate pair", () =>
    Effect.gen(function*() {
      const Emoji = Tool.make("emoji", { success: Schema.String })
      const kit = Toolkit.make(Emoji)
      const layer = ToolRegistry.layer(kit).pipe(Layer.provide(kit.toLayer({ emoji: () => Effect.succeed("a😀b") })))
      const result = yield* Agent.run({ prompt: "go", config: { maxResultChars: 2 } }).pipe(
        Effect.provide(Layer.merge(layer, ScriptedModel.layer([{ toolCalls: [call("emoji", {}, "e")] }, { text: "ok" }])))
      )
      assert.strictEqual(Message.textOf(resultOf(result.messages, "e")), "a\n[… 3 of 4 characters cut]")
    }))

  it.effect("calls over maxToolCallsPerTurn are answered 'not executed', with a warning, and cannot end the run", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const { events, requests, result } = yield* runOk([
        { toolCalls: [call("done", { summary: "1" }, "d1"), call("done", { summary: "2" }, "d2"), call("done", { summary: "3" }, "d3")] },
        { text: "ok" }
      ], { trace, config: { maxToolCallsPerTurn: 2 } })
      assert.match(Message.textOf(resultOf(result.messages, "d3")), /^This tool call was not executed: at most 2 calls per turn/)
      assert.isFalse(resultOf(result.messages, "d1").isError)
      const warning = ofTag(events, "GuardTripped")[0]!
      assert.deepStrictEqual([warning.guard, warning.action, warning.figures], [
        "maxToolCallsPerTurn",
        "warn",
        { calls: 3, limit: 2, notExecuted: 1 }
      ])
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.strictEqual(requests.length, 2)
    }))

  it.effect("tools exempt from the call limit do not count toward it", () =>
    Effect.gen(function*() {
      const Lookup = AgentTool.annotate(Tool.make("lookup", { success: Schema.String }), { countsTowardCallLimit: false })
      const kit = Toolkit.make(Lookup)
      const layer = ToolRegistry.layer(kit).pipe(Layer.provide(kit.toLayer({ lookup: () => Effect.succeed("found") })))
      const result = yield* Agent.run({ prompt: "go", config: { maxToolCallsPerTurn: 1 } }).pipe(
        Effect.provide(Layer.merge(
          layer,
          ScriptedModel.layer([{ toolCalls: [call("lookup", {}, "l1"), call("lookup", {}, "l2"), call("lookup", {}, "l3")] }, {
            text: "ok"
          }])
        ))
      )
      for (const id of ["l1", "l2", "l3"]) assert.strictEqual(Message.textOf(resultOf(result.messages, id)), "found")
    }))

  it.effect("per-tool quotas: per turn and per run; excess calls never run", () =>
    Effect.gen(function*() {
      let runs = 0
      const Search = AgentTool.annotate(Tool.make("search", { success: Schema.String }), { quota: { perTurn: 1, perRun: 2 } })
      const kit = Toolkit.make(Search)
      const layer = ToolRegistry.layer(kit).pipe(
        Layer.provide(kit.toLayer({ search: () => Effect.sync(() => `hit ${++runs}`) }))
      )
      const result = yield* Agent.run({ prompt: "go" }).pipe(
        Effect.provide(Layer.merge(
          layer,
          ScriptedModel.layer([
            { toolCalls: [call("search", {}, "a"), call("search", {}, "b")] },
            { toolCalls: [call("search", {}, "c")] },
            { toolCalls: [call("search", {}, "d")] },
            { text: "ok" }
          ])
        ))
      )
      assert.strictEqual(Message.textOf(resultOf(result.messages, "a")), "hit 1")
      assert.strictEqual(
        Message.textOf(resultOf(result.messages, "b")),
        "Quota exceeded: search may be called at most 1 times per turn."
      )
      assert.strictEqual(Message.textOf(resultOf(result.messages, "c")), "hit 2")
      assert.strictEqual(
        Message.textOf(resultOf(result.messages, "d")),
        "Quota exceeded: search may be called at most 2 times per run."
      )
      assert.strictEqual(runs, 2)
    }))
})

describe("per-tool quotas: time, kept across a resume, no unknown field", () => {
  const searchLayer = (quota: AgentTool.Quota, handler: () => Effect.Effect<string>) => {
    const Search = AgentTool.annotate(Tool.make("search", { success: Schema.String }), { quota })
    const kit = Toolkit.make(Search)
    return ToolRegistry.layer(kit).pipe(Layer.provide(kit.toLayer({ search: handler })))
  }

  it.live("maxDurationMs (agnt's max_duration_us): a tool that has used its time is refused the next call", () =>
    Effect.gen(function*() {
      let runs = 0
      const result = yield* Agent.run({ prompt: "go" }).pipe(
        Effect.provide(Layer.merge(
          searchLayer({ maxDurationMs: 50 }, () => Effect.as(Effect.sleep("80 millis"), `hit ${++runs}`)),
          ScriptedModel.layer([
            { toolCalls: [call("search", {}, "a")] },
            { toolCalls: [call("search", {}, "b")] },
            { text: "ok" }
          ])
        ))
      )
      assert.strictEqual(Message.textOf(resultOf(result.messages, "a")), "hit 1")
      assert.match(
        Message.textOf(resultOf(result.messages, "b")),
        /^Quota exceeded: search may take at most 50 ms in all, and has taken \d+ ms\.$/
      )
      assert.strictEqual(runs, 1)
      assert.isAtLeast(result.state.toolUse?.["search"]?.durationMs ?? 0, 75)
    }))

  it.effect("a resumed run keeps the calls its tools made before: a per-run quota of 1 is not given back", () =>
    Effect.gen(function*() {
      let runs = 0
      const tools = searchLayer({ perRun: 1 }, () => Effect.sync(() => `hit ${++runs}`))
      const first = yield* Agent.run({ prompt: "go", config: { maxTurns: 1 } }).pipe(
        Effect.provide(Layer.merge(tools, ScriptedModel.layer([{ toolCalls: [call("search", {}, "a")] }])))
      )
      assert.deepStrictEqual(first.outcome, { _tag: "MaxTurns", limit: 1 })
      assert.deepStrictEqual(first.state.toolUse, { search: { calls: 1, durationMs: 0 } })
      // through its JSON form, as a checkpoint keeps it
      const saved = yield* Schema.decodeUnknownEffect(RunState.RunState)(JSON.parse(JSON.stringify(first.state)))
      const second = yield* Agent.runContinue(saved, { config: { maxTurns: 3 } }).pipe(
        Effect.provide(Layer.merge(tools, ScriptedModel.layer([{ toolCalls: [call("search", {}, "b")] }, { text: "ok" }])))
      )
      assert.strictEqual(
        Message.textOf(resultOf(second.messages, "b")),
        "Quota exceeded: search may be called at most 1 times per run."
      )
      assert.strictEqual(runs, 1)
    }))

  it("a quota field that is none of perRun, perTurn and maxDurationMs is refused where it is written", () => {
    const quota: AgentTool.Quota = JSON.parse(`{"maxDuration": 50}`)
    assert.throws(
      () => AgentTool.annotate(Tool.make("search", { success: Schema.String }), { quota }),
      `AgentTool.annotate(search): unknown quota field "maxDuration" (perRun, perTurn and maxDurationMs are)`
    )
  })
})

describe("termination vote", () => {
  it.effect("ends the run only when every counted result votes: one model call, no steering polled", () =>
    Effect.gen(function*() {
      let polls = 0
      const { requests, result } = yield* runOk([
        { toolCalls: [call("done", { summary: "a" }), call("done", { summary: "b" })] }
      ], {
        plugins: [{ name: "poll-counter", steering: () => Effect.sync(() => (polls++, [])) }]
      })
      assert.strictEqual(result.outcome._tag, "Terminated")
      assert.strictEqual(requests.length, 1)
      assert.strictEqual(polls, 1) // only the priming poll before the first model call
    }))

  it.effect("one of two results voting is not enough", () =>
    Effect.gen(function*() {
      const { requests, result } = yield* runOk([
        { toolCalls: [call("done", { summary: "a" }), call("add", { a: 1, b: 1 })] },
        { text: "carry on" }
      ])
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.strictEqual(requests.length, 2)
    }))

  it.effect("uncounted tools do not block the vote, but an all-uncounted batch does not end the run", () =>
    Effect.gen(function*() {
      const mixed = yield* runOk([{ toolCalls: [call("done", { summary: "a" }), call("note", { text: "n" })] }])
      assert.strictEqual(mixed.result.outcome._tag, "Terminated")
      const uncounted = yield* runOk([{ toolCalls: [call("note", { text: "n" })] }, { text: "ok" }])
      assert.strictEqual(uncounted.result.outcome._tag, "Completed")
    }))

  it.effect("a failed terminating call does not vote; an unknown tool counts as a 'no'", () =>
    Effect.gen(function*() {
      const bad = yield* runOk([
        { toolCalls: [call("done", { summary: 1 })] },
        { text: "ok" }
      ])
      assert.strictEqual(bad.result.outcome._tag, "Completed")
      const stray = yield* runOk([
        { toolCalls: [call("done", { summary: "a" }), call("ghost", {})] },
        { text: "ok" }
      ])
      assert.strictEqual(stray.result.outcome._tag, "Completed")
    }))
})
