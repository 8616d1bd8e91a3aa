import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Effect, Layer } from "effect"
import { Agent, Approvals, Hooks, Message } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { counting, makeTrace, ofTag, runOk, runScript, tags, toolResultTexts, toolsLayer } from "./support.ts"

const call = (name: string, params: unknown, id: string) => ({ id, name, params })

const resultText = (messages: ReadonlyArray<Message.Message>, id: string) => {
  const found = messages.find((m) => m.role === "toolResult" && m.toolCallId === id)
  return found === undefined ? undefined : Message.textOf(found)
}

describe("beforeToolCall", () => {
  it.effect("a blocked call gets an error result with the reason, no ToolExecutionStart, and its handler never runs", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const { events, result } = yield* runOk([
        { toolCalls: [call("deploy", { env: "prod" }, "d"), call("add", { a: 1, b: 2 }, "a")] },
        { text: "ok" }
      ], {
        trace,
        plugins: [{
          name: "guard",
          beforeToolCall: (c) => Effect.succeed(c.name === "deploy" ? Hooks.block("production is frozen") : Hooks.allow)
        }]
      })
      assert.strictEqual(resultText(result.messages, "d"), "Tool call blocked: production is frozen")
      const blocked = result.messages.find((m) => m.role === "toolResult" && m.toolCallId === "d")
      assert.deepStrictEqual(blocked?.role === "toolResult" ? [blocked.isError, blocked.details] : [], [true, {
        kind: "blocked",
        plugin: "guard"
      }])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionStart").map((e) => e.toolCallId), ["a"])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionEnd").map((e) => e.toolCallId).sort(), ["a", "d"])
      assert.deepStrictEqual(trace.started, ["add"])
    }))

  it.effect("hooks run in order and the first block wins; hooks see the decoded arguments", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const { result } = yield* runOk([{ toolCalls: [call("add", { a: 1, b: 2 }, "a")] }, { text: "ok" }], {
        plugins: [
          {
            name: "first",
            beforeToolCall: (c) => Effect.sync(() => (seen.push(`first ${JSON.stringify(c.params)}`), Hooks.block("one")))
          },
          { name: "second", beforeToolCall: () => Effect.sync(() => (seen.push("second"), Hooks.block("two"))) }
        ]
      })
      assert.deepStrictEqual(seen, ["first {\"a\":1,\"b\":2}"])
      assert.strictEqual(resultText(result.messages, "a"), "Tool call blocked: one")
    }))

  it.effect("a hook can rewrite the arguments (validated again)", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([
        { toolCalls: [call("add", { a: 1, b: 2 }, "a"), call("add", { a: 1, b: 2 }, "b")] },
        { text: "ok" }
      ], {
        plugins: [{
          name: "rewrite",
          beforeToolCall: (c) => Effect.succeed(c.id === "a" ? Hooks.rewrite({ a: 10, b: 20 }) : Hooks.rewrite({ a: "x" }))
        }]
      })
      assert.strictEqual(resultText(result.messages, "a"), "30")
      assert.match(resultText(result.messages, "b")!, /^Invalid arguments for add: a: Expected number; b: Missing key/)
    }))

  it.effect("a rewrite and an approval requirement from different hooks both apply", () =>
    Effect.gen(function*() {
      const asked: Array<unknown> = []
      const result = yield* Agent.run({
        prompt: "go",
        plugins: [
          { name: "ask", beforeToolCall: () => Effect.succeed(Hooks.requireApproval("check")) },
          { name: "rewrite", beforeToolCall: () => Effect.succeed(Hooks.rewrite({ a: 10, b: 20 })) }
        ]
      }).pipe(
        Effect.provideService(
          Approvals.Approvals,
          Approvals.policy((request) => (asked.push(request.params), Approvals.approved))
        ),
        Effect.provide(Layer.merge(
          toolsLayer(),
          ScriptedModel.layer([{ toolCalls: [call("add", { a: 1, b: 2 }, "a")] }, { text: "ok" }])
        ))
      )
      assert.deepStrictEqual(asked, [{ a: 10, b: 20 }])
      assert.strictEqual(resultText(result.messages, "a"), "30")
    }))

  it.effect("hooks can require services, which join the run's requirements", () =>
    Effect.gen(function*() {
      class Policy extends Context.Service<Policy, { readonly allowed: ReadonlySet<string> }>()("test/Policy") {}
      const plugin = Hooks.plugin<Policy>({
        name: "policy",
        beforeToolCall: (c) =>
          Policy.use((p) => Effect.succeed(p.allowed.has(c.name) ? Hooks.allow : Hooks.block(`${c.name} is not allowed`)))
      })
      const run = Agent.run({ prompt: "go", plugins: [plugin] })
      const result = yield* run.pipe(
        Effect.provideService(Policy, { allowed: new Set(["add"]) }),
        Effect.provide(Layer.merge(
          toolsLayer(),
          ScriptedModel.layer([{ toolCalls: [call("add", { a: 1, b: 1 }, "a"), call("big", { chars: 1 }, "b")] }, {
            text: "ok"
          }])
        ))
      )
      assert.strictEqual(resultText(result.messages, "a"), "2")
      assert.strictEqual(resultText(result.messages, "b"), "Tool call blocked: big is not allowed")
    }))
})

describe("afterToolCall", () => {
  it.effect("runs on every result, also blocked and unknown calls, and may replace content, mark errors, vote", () =>
    Effect.gen(function*() {
      const seen: Array<[string, boolean]> = []
      const { requests, result } = yield* runOk([
        { toolCalls: [call("add", { a: 1, b: 2 }, "a"), call("ghost", {}, "g"), call("big", { chars: 3 }, "b")] }
      ], {
        plugins: [
          { name: "block-big", beforeToolCall: (c) => Effect.succeed(c.name === "big" ? Hooks.block("no") : Hooks.allow) },
          {
            name: "after",
            afterToolCall: (c, r) =>
              Effect.sync(() => {
                seen.push([c.id, r.executed])
                if (c.id === "a") return { content: [Message.text("three")], details: { redacted: true }, terminate: true }
                return { isError: false, terminate: true }
              })
          }
        ]
      })
      assert.deepStrictEqual(seen.sort(), [["a", true], ["b", false], ["g", false]])
      assert.strictEqual(resultText(result.messages, "a"), "three")
      const a = result.messages.find((m) => m.role === "toolResult" && m.toolCallId === "a")
      assert.deepStrictEqual(a?.role === "toolResult" ? a.details : undefined, { redacted: true })
      const g = result.messages.find((m) => m.role === "toolResult" && m.toolCallId === "g")
      assert.strictEqual(g?.role === "toolResult" ? g.isError : undefined, false)
      // every counted result voted terminate through the hook
      assert.strictEqual(result.outcome._tag, "Terminated")
      assert.strictEqual(requests.length, 1)
    }))
})

describe("transformContext", () => {
  it.effect("changes the request only: the transcript is never rewritten", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk([
        { toolCalls: [call("add", { a: 1, b: 2 }, "a")] },
        { text: "ok" }
      ], {
        plugins: [{
          name: "redact",
          transformContext: (messages) =>
            Effect.succeed(messages.map((m) => m.role === "toolResult" ? { ...m, content: [Message.text("[redacted]")] } : m))
        }]
      })
      assert.deepStrictEqual(toolResultTexts(requests[1]!), ["[redacted]"])
      assert.strictEqual(resultText(result.messages, "a"), "3")
      const transformed = ofTag(events, "ContextTransformed")
      assert.strictEqual(transformed.length, 2)
      assert.strictEqual(transformed[0]!.plugin, "redact")
    }))

  it.effect("a transform that returns its input unchanged costs no event", () =>
    Effect.gen(function*() {
      const { events } = yield* runOk([{ text: "ok" }], {
        plugins: [{ name: "noop", transformContext: (messages) => Effect.succeed(messages) }]
      })
      assert.deepStrictEqual(ofTag(events, "ContextTransformed"), [])
    }))
})

describe("beforeModelCall and afterTurn", () => {
  it.effect("may inject messages before the next model call and stop the run with an outcome", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk([
        { toolCalls: [call("add", { a: 1, b: 2 }, "a")] },
        { toolCalls: [call("add", { a: 2, b: 2 }, "b")] }
      ], {
        plugins: [{
          name: "watch",
          afterTurn: (turn, ctx) =>
            Effect.succeed(
              ctx.turn === 1
                ? Hooks.inject([Message.system("Be quick.")])
                : Hooks.stop({ _tag: "Stagnated", repeats: turn.toolResults.length })
            )
        }]
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Stagnated", repeats: 1 })
      assert.deepStrictEqual(requests[1]!.prompt.content.at(-1)!.role, "system")
      assert.strictEqual(ofTag(events, "MessageEnd").filter((e) => e.message.role === "system").length, 1)
      assert.deepStrictEqual(tags(events).slice(-3), ["TurnEnd", "BudgetSnapshot", "AgentEnd"])
    }))

  it.effect("a wrap-up request is a decision: announced, delivered before the next call, once; ends WrappedUp", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk([
        { toolCalls: [call("add", { a: 1, b: 2 }, "a")] },
        { toolCalls: [call("add", { a: 2, b: 2 }, "b")] },
        { text: "done" }
      ], {
        plugins: [{
          name: "closer",
          // asked after every turn: only the first request counts
          afterTurn: () => Effect.succeed(Hooks.wrapUp("closer", "Finish now."))
        }, {
          name: "late",
          beforeModelCall: (ctx) =>
            Effect.succeed(ctx.wrapUpRequested ? Hooks.wrapUp("late", "Again.") : Hooks.proceed)
        }]
      })
      assert.strictEqual(result.outcome._tag, "WrappedUp")
      assert.isTrue(result.state.wrapUpRequested)
      assert.deepStrictEqual(ofTag(events, "WrapUpRequested").map((e) => [e.turn, e.source, e.message]), [
        [1, "closer", "Finish now."]
      ])
      const last = requests[1]!.prompt.content.at(-1)!
      assert.deepStrictEqual([last.role, last.role === "system" ? last.content : ""], ["system", "Finish now."])
      assert.strictEqual(result.messages.filter((m) => m.role === "system").length, 1)
    }))

  it.effect("emitting a WrapUpRequested event only reports: the run still ends Completed", () =>
    Effect.gen(function*() {
      const { events, result } = yield* runOk([{ text: "done" }], {
        plugins: [{
          name: "noisy",
          beforeModelCall: (ctx) =>
            Effect.as(ctx.emit({ _tag: "WrapUpRequested", source: "noisy", message: "just saying" }), Hooks.proceed)
        }]
      })
      assert.strictEqual(ofTag(events, "WrapUpRequested").length, 1)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.isFalse(result.state.wrapUpRequested)
    }))
})

describe("state", () => {
  it.effect("a plugin's state is saved in the result and restored on continue", () =>
    Effect.gen(function*() {
      const layers = (script: ScriptedModel.Script) => Layer.merge(ScriptedModel.layer(script), toolsLayer())
      const first = yield* Agent.run({ prompt: "go", plugins: [counting], config: { maxTurns: 1, graceTurns: 0 } }).pipe(
        Effect.provide(layers([{ toolCalls: [call("add", { a: 1, b: 1 }, "a"), call("add", { a: 1, b: 1 }, "b")] }]))
      )
      assert.strictEqual(first.state.pluginState["counter"], 2)
      const second = yield* Agent.runContinue(first.state, { plugins: [counting] }).pipe(
        Effect.provide(layers([{ toolCalls: [call("add", { a: 1, b: 1 }, "c")] }, { text: "done" }]))
      )
      assert.strictEqual(second.state.pluginState["counter"], 3)
    }))
})

describe("onEvent", () => {
  it.effect("gets the hook context: an observer can snapshot the run and emit events", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const { events } = yield* runOk([{ toolCalls: [call("add", { a: 1, b: 2 }, "a")] }, { text: "3" }], {
        plugins: [{
          name: "checkpointer",
          onEvent: (event, ctx) =>
            event._tag !== "ToolExecutionStart" ? Effect.void : Effect.gen(function*() {
              const state = yield* ctx.snapshot
              seen.push(`${state.startedCalls.join()} of ${state.messages.length} messages`)
              yield* ctx.emit({ _tag: "CheckpointSaved", sessionId: "s", bytes: 1 })
            })
        }]
      })
      assert.deepStrictEqual(seen, ["a of 2 messages"])
      assert.deepStrictEqual(ofTag(events, "CheckpointSaved").map((e) => [e.turn, e.sessionId]), [[1, "s"]])
    }))
})

describe("observe", () => {
  it.effect("sees every event where it happens, in the order an onEvent hook that skips events sees the rest", () =>
    Effect.gen(function*() {
      const observed: Array<string> = []
      const skipping: Array<string> = []
      // One onEvent hook only: its finished answers are then passed over without a fiber step, and
      // its other answers run in the fiber, the two interleaved within each streamed chunk.
      const result = yield* Agent.run({
        prompt: "go",
        plugins: [
          { name: "observer", observe: (event, ctx) => void observed.push(`${event._tag}@${ctx.turn}`) },
          {
            name: "skipping",
            onEvent: (event) =>
              event._tag === "MessageUpdate" && event.delta.delta === "me "
                ? Effect.void
                : Effect.sync(() => void skipping.push(event._tag))
          }
        ]
      }).pipe(Effect.provide(Layer.merge(
        ScriptedModel.layer([
          { text: ["Let ", "me ", "add."], toolCalls: [call("add", { a: 1, b: 2 }, "a")] },
          { text: "3" }
        ]),
        toolsLayer()
      )))
      const tagsSeen = observed.map((entry) => entry.split("@")[0])
      assert.deepStrictEqual(tagsSeen.slice(0, 3), ["AgentStart", "TurnStart", "MessageStart"])
      assert.strictEqual(tagsSeen.filter((tag) => tag === "MessageUpdate").length, 5)
      // the hook answered work for the deltas before and after the one it skipped, in the same chunk:
      // it saw every event the observer saw, in order, but that one
      const skipped = tagsSeen.indexOf("MessageUpdate") + 1
      assert.deepStrictEqual(skipping, [...tagsSeen.slice(0, skipped), ...tagsSeen.slice(skipped + 1)])
      // the context is live: events of the first turn see no completed turn, the run's end sees two
      assert.strictEqual(observed[1], "TurnStart@0")
      assert.strictEqual(observed.at(-1), "AgentEnd@2")
      assert.strictEqual(result.outcome._tag, "Completed")
    }))

  it.effect("an observer that throws ends the run with a defect; AgentEnd still comes last", () =>
    Effect.gen(function*() {
      const { events, exit } = yield* runScript([{ toolCalls: [call("add", { a: 1, b: 2 }, "a")] }, { text: "3" }], {
        plugins: [{
          name: "broken",
          observe: (event) => {
            if (event._tag === "TurnEnd") throw new Error("observer bug")
          }
        }]
      })
      assert.isTrue(exit._tag === "Failure" && Cause.hasDies(exit.cause))
      assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
      // the AgentEnd of a run that died says what it died of
      const end = ofTag(events, "AgentEnd")[0]!
      assert.deepStrictEqual([end.defect, end.outcome, end.error], ["Error: observer bug", undefined, undefined])
      assert.strictEqual(ofTag(events, "MessageStart").length, 1)
    }))
})
