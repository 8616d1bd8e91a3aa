import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { TestClock } from "effect/testing"
import { Agent, AgentConfig, AgentTool, Approvals, Hooks, Message, RunState, ToolRegistry } from "effect-agent"
import { CheckpointStore, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as Loop from "../src/internal/loop.ts"
import { assertValidTranscript, ofTag, recorder } from "./support.ts"

// Three tools: a quick one, a slow replay-safe one, and a slow one that must not run twice.
const Quick = Tool.make("quick", { success: Schema.String })
const SlowSafe = Tool.make("slow_safe", { success: Schema.String })
const Charge = AgentTool.annotate(
  Tool.make("charge", { parameters: Schema.Struct({ cents: Schema.Finite }), success: Schema.String }),
  { replaySafe: false }
)
const Kit = Toolkit.make(Quick, SlowSafe, Charge)

const makeTools = (ran: Array<string>) =>
  ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
    quick: () => Effect.sync(() => (ran.push("quick"), "quick done")),
    slow_safe: () => Effect.andThen(Effect.sleep("10 seconds"), Effect.sync(() => (ran.push("slow_safe"), "safe done"))),
    charge: ({ cents }) => Effect.andThen(Effect.sleep("10 seconds"), Effect.sync(() => (ran.push("charge"), `charged ${cents}`)))
  })))

const batch = {
  toolCalls: [
    { id: "q", name: "quick", params: {} },
    { id: "s", name: "slow_safe", params: {} },
    { id: "c", name: "charge", params: { cents: 500 } }
  ]
}

describe("continuing a state saved in the middle of a batch", () => {
  it.effect("keeps finished results, re-runs replay-safe calls, and answers started unsafe calls 'outcome unknown'", () =>
    Effect.gen(function*() {
      const ranBefore: Array<string> = []
      // a plugin that keeps the hook context, so the test can take a snapshot as a checkpointing plugin
      // would, once `quick` has finished and the two slow calls have started
      const context = yield* Deferred.make<Hooks.Context>()
      const ready = yield* Deferred.make<void>()
      const seen = new Set<string>()
      const watch = Hooks.plugin({
        name: "watch",
        beforeToolCall: (_call, ctx) => Effect.as(Deferred.succeed(context, ctx), Hooks.allow),
        onEvent: (event) => {
          if (event._tag === "ToolExecutionEnd" && event.toolCallId === "q") seen.add("q ended")
          if (event._tag === "ToolExecutionStart" && event.toolCallId !== "q") seen.add(`${event.toolCallId} started`)
          return seen.size === 3 ? Deferred.succeed(ready, undefined) : Effect.void
        }
      })
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "pay", plugins: [watch] }).pipe(
          Effect.provide(Layer.merge(makeTools(ranBefore), ScriptedModel.layer([batch])))
        )
      )
      yield* Deferred.await(ready)
      const state = yield* Effect.flatMap(Deferred.await(context), (ctx) => ctx.snapshot)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(ranBefore, ["quick"])
      assert.deepStrictEqual(state.partialResults.map((r) => r.toolCallId), ["q"])
      assert.deepStrictEqual([...state.startedCalls].sort(), ["c", "s"])
      assert.strictEqual(state.messages.at(-1)!.role, "assistant")
      const json = JSON.parse(JSON.stringify(Schema.encodeSync(RunState.RunStateJson)(state)))
      const decoded = yield* Schema.decodeUnknownEffect(RunState.RunStateJson)(json)

      const ranAfter: Array<string> = []
      const { events, plugin } = recorder()
      const resumed = yield* Effect.forkChild(
        Agent.runContinue(decoded, { plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(makeTools(ranAfter), ScriptedModel.layer([{ text: "done" }])))
        )
      )
      yield* TestClock.adjust("1 minute")
      const result = yield* Fiber.join(resumed)
      assert.deepStrictEqual(ranAfter, ["slow_safe"])
      const results = result.state.messages.filter((m) => m.role === "toolResult")
      assert.deepStrictEqual(results.map((m) => m.role === "toolResult" ? m.toolCallId : ""), ["q", "s", "c"])
      assert.deepStrictEqual(results.map(Message.textOf).slice(0, 2), ["quick done", "safe done"])
      assert.match(Message.textOf(results[2]!), /^This call to charge had started when the run was interrupted, and its outcome is unknown/)
      assertValidTranscript(result.state.messages)
      // the restored result produced no new events; the re-run call did
      assert.deepStrictEqual(ofTag(events, "ToolExecutionStart").map((e) => e.toolCallId), ["s"])
      assert.deepStrictEqual(result.state.partialResults, [])
      assert.deepStrictEqual(result.state.startedCalls, [])
      // the interrupted turn is finished and counted (its model call was made), then the next one runs
      assert.strictEqual(state.turn, 0)
      assert.strictEqual(result.state.turn, 2)
      const turnEnds = ofTag(events, "TurnEnd")
      assert.deepStrictEqual(turnEnds.map((e) => [e.turn, e.toolResults.map((r) => r.toolCallId)]), [[1, ["q", "s", "c"]], [2, []]])
    }))

  it.effect("a call goes from started to having a result in one step: a snapshot taken while its afterToolCall " +
    "hook waits shows it started or answered, never neither (D1)", () =>
    Effect.gen(function*() {
      // `a` (10 s) ends first; its afterToolCall hook waits until `b` (30 s) has ended, and `b`'s end
      // takes a snapshot, as a checkpointing plugin would after a call of a tool that is not ReplaySafe
      const ran: Array<string> = []
      const Pay = AgentTool.annotate(
        Tool.make("pay", { parameters: Schema.Struct({ ms: Schema.Finite }), success: Schema.String }),
        { replaySafe: false }
      )
      const kit = Toolkit.make(Pay)
      const tools = ToolRegistry.layer(kit).pipe(Layer.provide(kit.toLayer({
        pay: ({ ms }) => Effect.andThen(Effect.sleep(ms), Effect.sync(() => (ran.push(`${ms}`), `paid after ${ms}`)))
      })))
      const bEnded = yield* Deferred.make<void>()
      const snapshots: Array<RunState.RunState> = []
      const probe = Hooks.plugin({
        name: "probe",
        afterToolCall: (call) => call.id === "a" ? Effect.as(Deferred.await(bEnded), undefined) : Effect.void,
        onEvent: (event, ctx) =>
          event._tag === "ToolExecutionEnd" && event.toolCallId === "b"
            ? Effect.andThen(Effect.map(ctx.snapshot, (state) => void snapshots.push(state)), Deferred.succeed(bEnded, undefined))
            : Effect.void
      })
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "pay twice", plugins: [probe] }).pipe(
          Effect.provide(Layer.merge(
            tools,
            ScriptedModel.layer([
              { toolCalls: [{ id: "a", name: "pay", params: { ms: 10_000 } }, { id: "b", name: "pay", params: { ms: 30_000 } }] },
              { text: "paid" }
            ])
          ))
        )
      )
      yield* TestClock.adjust("1 minute")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(ran, ["10000", "30000"])
      assert.strictEqual(snapshots.length, 1)
      const state = snapshots[0]!
      const answered = state.partialResults.map((r) => r.toolCallId)
      for (const id of ["a", "b"]) {
        assert.isTrue(state.startedCalls.includes(id) || answered.includes(id), `${id} is neither started nor answered`)
      }
      // and so a resume from that snapshot never runs `a` again
      const ranAgain: Array<string> = []
      const resumed = yield* Effect.forkChild(
        Agent.runContinue(state).pipe(
          Effect.provide(Layer.merge(
            ToolRegistry.layer(kit).pipe(Layer.provide(kit.toLayer({
              pay: ({ ms }) => Effect.sync(() => (ranAgain.push(`${ms}`), "paid again"))
            }))),
            ScriptedModel.layer([{ text: "paid" }])
          ))
        )
      )
      yield* TestClock.adjust("1 minute")
      yield* Fiber.join(resumed)
      assert.deepStrictEqual(ranAgain, [])
    }))

  it.effect("a call that was waiting for approval asks again under its id, and is answered when it asks", () =>
    Effect.gen(function*() {
      const Deploy = Tool.make("deploy", { success: Schema.String, needsApproval: true })
      const kit = Toolkit.make(Deploy)
      const tools = ToolRegistry.layer(kit).pipe(Layer.provide(kit.toLayer({ deploy: () => Effect.succeed("deployed") })))
      const state: RunState.RunState = {
        ...RunState.make({
          runId: "r",
          messages: [
            Message.user("ship it"),
            {
              role: "assistant",
              content: [{ type: "tool-call", id: "d", name: "deploy", params: {} }],
              stopReason: "toolUse",
              usage: Message.emptyUsage
            }
          ]
        }),
        turn: 1,
        pendingApprovals: [{ toolCallId: "d", toolName: "deploy", params: {} }]
      }
      const approvals = yield* Approvals.interactive()
      const { events, plugin } = recorder()
      const approver = Hooks.plugin({
        name: "approver",
        onEvent: (event) => event._tag === "ApprovalRequested" ? Effect.asVoid(approvals.approve("d")) : Effect.void
      })
      // a session announces itself through the loop's internal option
      const result = yield* Loop.resume(state, {
        plugins: [plugin, approver],
        announce: [{
          _tag: "SessionResumed",
          sessionId: "s1",
          resumedAtTurn: 2,
          restored: { messages: 2, turns: 1, usage: Message.emptyUsage, elapsedMs: 0, steering: 0, followUps: 0, pendingApprovals: 1 }
        }]
      }).pipe(
        Effect.provideService(Approvals.Approvals, approvals),
        Effect.provide(Layer.merge(tools, ScriptedModel.layer([{ text: "shipped" }])))
      )
      assert.deepStrictEqual(events.slice(0, 3).map((e) => e._tag), ["AgentStart", "SessionResumed", "ApprovalRequested"])
      assert.strictEqual(Message.textOf(result.state.messages[2]!), "deployed")
      assert.deepStrictEqual(result.state.pendingApprovals, [])
    }))
})

describe("resuming a session with a new turn cap", () => {
  it.effect("a cap at or under the saved grace window resumes: the window is fitted to the cap, not a ConfigError", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const saved = RunState.make({ runId: "r", messages: [Message.user("go")] })
      // saved with the defaults: maxTurns 50, graceTurns 3
      yield* store.create("s", { state: saved, config: AgentConfig.makeUnsafe() })
      const result = yield* Session.resume("s", { config: { maxTurns: 2 } }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(Layer.merge(makeTools([]), ScriptedModel.layer([{ text: "done" }])))
      )
      assert.strictEqual(result.outcome._tag, "Completed")
      const { config } = yield* store.load("s")
      assert.deepStrictEqual([config?.maxTurns, config?.graceTurns], [2, 0])
    }))

  it.effect("a smaller cap takes its own default grace window: saved with the defaults and resumed with maxTurns 5, a window of 1", () =>
    Effect.gen(function*() {
      for (const [saved, graceTurns] of [[AgentConfig.makeUnsafe(), 1], [AgentConfig.makeUnsafe({ graceTurns: 2 }), 2]] as const) {
        const store = CheckpointStore.memory()
        yield* store.create("s", { state: RunState.make({ runId: "r", messages: [Message.user("go")] }), config: saved })
        const result = yield* Session.resume("s", { config: { maxTurns: 5 } }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(Layer.merge(makeTools([]), ScriptedModel.layer([{ text: "done" }])))
        )
        assert.strictEqual(result.outcome._tag, "Completed")
        // the default window of a cap of 50 (3) is not kept under a cap of 5; a window chosen (2) that fits is
        const { config } = yield* store.load("s")
        assert.deepStrictEqual([config?.maxTurns, config?.graceTurns], [5, graceTurns])
      }
    }))
})
