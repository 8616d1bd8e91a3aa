import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FileSystem, Latch, Layer, Schedule, Schema } from "effect"
import { AiError, Toolkit } from "effect/ai"
import { Agent, type AgentEvent, Approvals, Hooks, Message, RunState, Steering, SubAgent, ToolRegistry } from "effect-agent"
import { CheckpointStore, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, counting, ofTag, recorder, tags } from "../support.ts"
import { Deploy, followTranscript, threeTurns, toolsLayer, usage } from "./fixture.ts"
import { fileURLToPath } from "node:url"
import * as Journal from "../../src/session/internal/journal.ts"
import * as MemoryDisk from "../../src/session/internal/memoryDisk.ts"

type Turns = ReadonlyArray<ScriptedModel.Turn>

const layers = (turns: Turns, ran: Array<string>, onStart?: (name: string) => void, maxSleep?: number) =>
  Layer.merge(ScriptedModel.layer(followTranscript(turns)), toolsLayer(ran, onStart, maxSleep))

const roles = (messages: ReadonlyArray<Message.Message>) => messages.map((m) => m.role)

/**
 * Runs a session until the handler of `tool` has started (by then every hook
 * of the call, checkpoints included, has run), then interrupts it: as far as
 * the checkpoint goes, a crash in the middle of the turn.
 */
const interruptWhenStarted = <E>(
  tool: string,
  turns: Turns,
  session: Effect.Effect<RunState.RunResult, E, ScriptedModel.ScriptedModel | Agent.Requirements>,
  alsoWaitFor: Latch.Latch = Latch.makeUnsafe(true)
) =>
  Effect.gen(function*() {
    const ran: Array<string> = []
    const started = Latch.makeUnsafe()
    const fiber = yield* Effect.forkChild(
      session.pipe(Effect.provide(layers(turns, ran, (name) => void (name === tool && started.openUnsafe()))))
    )
    yield* started.await
    yield* alsoWaitFor.await
    yield* Fiber.interrupt(fiber)
    return ran
  })

/** A plugin that opens a latch at the first checkpoint saved after an event `after` matches. */
const savedAfter = (after: (event: AgentEvent.AgentEvent) => boolean) => {
  const latch = Latch.makeUnsafe()
  let seen = false
  const plugin = Hooks.plugin({
    name: "saved-after",
    onEvent: (event) =>
      Effect.sync(() => {
        if (after(event)) seen = true
        else if (seen && event._tag === "CheckpointSaved") latch.openUnsafe()
      })
  })
  return { latch, plugin }
}

/** Resumes session "s1" with a new model and new tools (sleeping at most 1 ms), as a new process would. */
const resume = (store: CheckpointStore.Service, turns: Turns, options: Partial<Session.ResumeOptions> = {}) =>
  Effect.gen(function*() {
    const ran: Array<string> = []
    const { events, plugin } = recorder()
    const exit = yield* Effect.gen(function*() {
      const result = yield* Session.resume("s1", { ...options, plugins: [...(options.plugins ?? []), plugin] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      const model = yield* ScriptedModel.ScriptedModel
      return { result, calls: yield* model.calls }
    }).pipe(Effect.provide(layers(turns, ran, undefined, 1)), Effect.exit)
    return { exit, events, ran }
  })

/** Answers each call as it asks, by its approval id: `true` approves, a string denies with that reason. */
const approver = (approvals: Approvals.Interactive, decisions: Readonly<Record<string, true | string>>): Hooks.Plugin => ({
  name: "approver",
  onEvent: (event) => {
    const request = event._tag === "Nested" ? event.event : event
    if (request._tag !== "ApprovalRequested") return Effect.void
    const id = request.approvalId ?? request.toolCallId
    const decision = decisions[id]
    if (decision === undefined) return Effect.void
    return Effect.asVoid(decision === true ? approvals.approve(id) : approvals.deny(id, decision))
  }
})

const succeeded = <A, E>(exit: import("effect").Exit.Exit<A, E>): A => {
  if (exit._tag === "Failure") throw new Error(`expected success: ${String(exit.cause)}`)
  return exit.value
}

describe("Session.run", () => {
  it.live("checkpoints at the start and after every turn; the last checkpoint is the run's final state", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const ran: Array<string> = []
      const { events, plugin } = recorder()
      const result = yield* Session.run({ id: "s1", prompt: "go", plugins: [plugin], config: { maxTurns: 9 } }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(layers(threeTurns("slow", 1), ran))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      const saved = ofTag(events, "CheckpointSaved")
      assert.deepStrictEqual(saved.map((e) => [e.turn, e.sessionId]), [[0, "s1"], [1, "s1"], [2, "s1"], [3, "s1"]])
      assert.isTrue(saved.every((e) => e.bytes > 0))
      assert.deepStrictEqual(tags(events).slice(0, 2), ["AgentStart", "CheckpointSaved"])
      assert.deepStrictEqual(tags(events).slice(-4), ["TurnEnd", "BudgetSnapshot", "CheckpointSaved", "AgentEnd"])
      const checkpoint = yield* store.load("s1")
      assert.deepStrictEqual(checkpoint.state, result.state)
      assert.strictEqual(checkpoint.config?.maxTurns, 9)
    }))

  it.live("a session id that already has a checkpoint is refused before the model is called", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const ran: Array<string> = []
      yield* Session.run({ id: "s1", prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(layers([{ text: "hi" }], ran)))
      const again = yield* Effect.gen(function*() {
        const error = yield* Effect.flip(Session.run({ id: "s1", prompt: "again" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
        return { error, calls: yield* (yield* ScriptedModel.ScriptedModel).calls }
      }).pipe(Effect.provide(layers([{ text: "hi" }], ran)))
      assert.deepStrictEqual(again.error, new CheckpointStore.CheckpointExists({ sessionId: "s1" }))
      assert.strictEqual(again.calls, 0)
      assert.strictEqual(Message.textOf((yield* store.load("s1")).state.messages[0]!), "go")
    }))

  it.live("when a checkpoint cannot be written the run stops before going further, and the session fails with the error", () =>
    Effect.gen(function*() {
      const inner = CheckpointStore.memory()
      let saves = 0
      const failing: CheckpointStore.Service = {
        ...inner,
        // the save after turn 1 works; the one before the unsafe call's handler fails
        save: (id, checkpoint) =>
          ++saves < 2
            ? inner.save(id, checkpoint)
            : Effect.fail(new CheckpointStore.CheckpointIoError({ sessionId: id, operation: "write", path: "x", reason: "disk full" }))
      }
      const ran: Array<string> = []
      const { events, plugin } = recorder()
      const error = yield* Effect.flip(Session.run({ id: "s1", prompt: "go", plugins: [plugin] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, failing))).pipe(
        Effect.provide(layers(threeTurns("charge", 1), ran))
      )
      assert.deepStrictEqual(error, new CheckpointStore.CheckpointIoError({ sessionId: "s1", operation: "write", path: "x", reason: "disk full" }))
      assert.deepStrictEqual(ran, ["step"])
      assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
      // the store still holds the last checkpoint that was written: after turn 1
      assert.deepStrictEqual(roles((yield* inner.load("s1")).state.messages), ["user", "assistant", "toolResult"])
    }))
  it.live("an interruption that arrives while a checkpoint is written never rolls the checkpoint back", () =>
    Effect.gen(function*() {
      const inner = CheckpointStore.memory()
      const writing = Latch.makeUnsafe()
      let saves = 0
      // the save after turn 1 lands, then the interruption arrives before the store returns
      const slow: CheckpointStore.Service = {
        ...inner,
        save: (id, checkpoint) =>
          Effect.uninterruptible(Effect.tap(inner.save(id, checkpoint), () =>
            ++saves === 1 ? Effect.andThen(writing.open, Effect.sleep("20 millis")) : Effect.void))
      }
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s1", prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, slow), Effect.provide(layers(threeTurns("slow", 60_000), [])))
      )
      yield* writing.await
      yield* Fiber.interrupt(fiber)
      // the last save of the interrupted run kept turn 1, which had been saved
      const { state } = yield* inner.load("s1")
      assert.deepStrictEqual([roles(state.messages), state.turn], [["user", "assistant", "toolResult"], 1])
    }))
})

describe("a checkpoint too large to read back", () => {
  it.live("fails the run with CheckpointTooLarge when it would be written; the last one saved resumes", () =>
    Effect.gen(function*() {
      // a store that reads heads of at most 32 KiB; a plugin whose saved state grows by 10 KB a turn
      const store = Journal.make(MemoryDisk.make(), { headBytes: 32 * 1024, journalBytes: 1024 * 1024 })
      const notes = (restored: { length: number }) =>
        Hooks.plugin({
          name: "notes",
          afterTurn: () => Effect.sync(() => (restored.length += 10_000, Hooks.proceed)),
          state: {
            save: Effect.sync(() => "n".repeat(restored.length)),
            restore: (saved) => Effect.sync(() => void (restored.length = typeof saved === "string" ? saved.length : 0))
          }
        })
      const turns: Turns = Array.from({ length: 6 }, (_, i) => ({ toolCalls: [{ id: `c${i}`, name: "step", params: { n: i } }] }))
      const failed = yield* Effect.flip(
        Session.run({ id: "s1", prompt: "go", plugins: [notes({ length: 0 })], config: { maxTurns: 6 } }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(layers(turns, []))
        )
      )
      assert.strictEqual(failed._tag, "CheckpointTooLarge")
      assert.include(failed._tag === "CheckpointTooLarge" ? failed : {}, { sessionId: "s1", limit: 32 * 1024 })
      // the last checkpoint written loads: three turns, 30 KB of notes
      const last = yield* store.load("s1")
      assert.deepStrictEqual([last.state.turn, String(last.state.pluginState.notes).length], [3, 30_000])
      const restored = { length: 0 }
      const resumed = yield* Effect.flip(
        Session.resume("s1", { plugins: [notes(restored)] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(layers(turns, [])))
      )
      // it resumed from there (the notes it restored), and stops again where the state outgrows the store
      assert.deepStrictEqual([resumed._tag, restored.length], ["CheckpointTooLarge", 40_000])
    }))
})

describe("Session.resume", () => {
  it.live("after a crash in the middle of a turn, redoes that turn once: transcript, counters, usage, wall time and plugin state restored", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const before = yield* interruptWhenStarted(
        "slow",
        threeTurns("slow", 60_000),
        Session.run({ id: "s1", prompt: "go", plugins: [counting] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      )
      assert.deepStrictEqual(before, ["step", "slow"])
      const checkpoint = (yield* store.load("s1")).state
      assert.deepStrictEqual(roles(checkpoint.messages), ["user", "assistant", "toolResult"])
      assert.deepStrictEqual([checkpoint.turn, checkpoint.pluginState.counter], [1, 1])

      const { events, exit, ran } = yield* resume(store, threeTurns("slow", 1), { plugins: [counting] })
      const { calls, result } = succeeded(exit)
      // the model was called once for the redone turn, once for the last
      assert.strictEqual(calls, 2)
      assert.deepStrictEqual(ran, ["slow"])
      assert.deepStrictEqual(roles(result.state.messages), ["user", "assistant", "toolResult", "assistant", "toolResult", "assistant"])
      assert.deepStrictEqual(result.state.messages.slice(0, 3), checkpoint.messages)
      assertValidTranscript(result.state.messages)
      assert.deepStrictEqual(result.state.usage, { input: 300, output: 60, cacheRead: 0, cacheWrite: 0, reasoning: 0, cost: 0.003 })
      assert.deepStrictEqual([result.state.turn, result.state.pluginState.counter], [3, 2])
      assert.isAtLeast(result.state.elapsedMs, checkpoint.elapsedMs)
      assert.deepStrictEqual(tags(events).slice(0, 3), ["AgentStart", "SessionResumed", "TurnStart"])
      const [opened] = ofTag(events, "SessionResumed")
      assert.deepStrictEqual({ ...opened!, timestamp: 0 }, {
        _tag: "SessionResumed",
        runId: checkpoint.runId,
        turn: 1,
        timestamp: 0,
        sessionId: "s1",
        resumedAtTurn: 2,
        restored: {
          messages: 3,
          turns: 1,
          usage: { input: 100, output: 20, cacheRead: 0, cacheWrite: 0, reasoning: 0, cost: usage.cost },
          elapsedMs: checkpoint.elapsedMs,
          steering: 0,
          followUps: 0,
          pendingApprovals: 0
        }
      })
      assert.deepStrictEqual((yield* store.load("s1")).state, result.state)
    }))

  it.live("a started call to a tool that is not ReplaySafe is not run again: its result says the outcome is unknown", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      yield* interruptWhenStarted("charge", threeTurns("charge", 60_000), Session.run({ id: "s1", prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
      const checkpoint = (yield* store.load("s1")).state
      // saved before the handler started: the call's message, and the call marked as started
      assert.deepStrictEqual(roles(checkpoint.messages), ["user", "assistant", "toolResult", "assistant"])
      assert.deepStrictEqual(checkpoint.startedCalls, ["c2"])

      const { exit, ran } = yield* resume(store, threeTurns("charge", 1))
      const { calls, result } = succeeded(exit)
      assert.deepStrictEqual(ran, [])
      // the turn's model call is not redone: the batch is finished, then the last turn runs
      assert.strictEqual(calls, 1)
      const answer = result.state.messages[4]!
      assert.strictEqual(answer.role === "toolResult" && answer.toolCallId, "c2")
      assert.match(Message.textOf(answer), /^This call to charge had started when the run was interrupted, and its outcome is unknown/)
      assertValidTranscript(result.state.messages)
      assert.strictEqual(result.state.messages.filter((m) => m.role === "assistant").length, 3)
    }))

  it.live("a call to a tool that is not ReplaySafe that finished before the crash keeps its result", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const batch: Turns = [
        {
          toolCalls: [
            { id: "c1", name: "charge", params: { cents: 100, ms: 1 } },
            { id: "c2", name: "slow", params: { ms: 60_000 } }
          ]
        },
        { text: "done" }
      ]
      // parallel calls: the crash comes once the charge has ended and its result was saved
      const charged = savedAfter((event) => event._tag === "ToolExecutionEnd" && event.toolCallId === "c1")
      const before = yield* interruptWhenStarted(
        "slow",
        batch,
        Session.run({ id: "s1", prompt: "go", plugins: [charged.plugin] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)),
        charged.latch
      )
      assert.deepStrictEqual(before.sort(), ["charge", "slow"])
      assert.deepStrictEqual((yield* store.load("s1")).state.partialResults.map((r) => r.toolCallId), ["c1"])
      const { exit, ran } = yield* resume(store, [{ toolCalls: [] }, { text: "done" }])
      const { result } = succeeded(exit)
      assert.deepStrictEqual(ran, ["slow"])
      assert.deepStrictEqual(result.state.messages.slice(2, 4).map(Message.textOf), ["charged 100 cents", "slept 60000 ms"])
    }))

  it.live("a pending approval survives the restart: the resumed run asks again under its id, and is answered then", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const turns: Turns = [{ toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }] }, { text: "deployed" }]
      const asked = savedAfter((event) => event._tag === "ApprovalRequested")
      const nobody = yield* Approvals.interactive()
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s1", prompt: "ship it", plugins: [asked.plugin] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provideService(Approvals.Approvals, nobody),
          Effect.provide(layers(turns, []))
        )
      )
      yield* asked.latch.await
      yield* Fiber.interrupt(fiber)
      const checkpoint = (yield* store.load("s1")).state
      assert.deepStrictEqual(checkpoint.pendingApprovals, [
        { toolCallId: "d1", approvalId: "d1", toolName: "deploy", params: { env: "prod" } }
      ])

      const approvals = yield* Approvals.interactive()
      // a decision before the resumed run asks answers nothing (it would answer whatever next asks as d1)
      assert.isFalse(yield* approvals.approve("d1"))
      const { events, exit, ran } = yield* resume(store, turns, { plugins: [approver(approvals, { d1: true })] })
        .pipe(Effect.provideService(Approvals.Approvals, approvals))
      const { result } = succeeded(exit)
      assert.deepStrictEqual(ran, ["deploy"])
      assert.deepStrictEqual(tags(events).slice(0, 3), ["AgentStart", "SessionResumed", "ApprovalRequested"])
      assert.strictEqual(ofTag(events, "SessionResumed")[0]!.restored.pendingApprovals, 1)
      assert.deepStrictEqual(ofTag(events, "ApprovalResolved").map((e) => [e.toolCallId, e.approved]), [["d1", true]])
      assert.strictEqual(Message.textOf(result.state.messages[2]!), "deployed to prod")
      assert.deepStrictEqual(result.state.pendingApprovals, [])
    }))

  it.live("duplicate-id attack: a reply whose two calls share an id is saved with an id per call, and the checkpoint resumes", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const turns: Turns = [
        {
          toolCalls: [
            { id: "x", name: "deploy", params: { env: "staging" } },
            { id: "x", name: "deploy", params: { env: "production" } }
          ]
        },
        { text: "done" }
      ]
      // The first call is denied as it asks; the run is stopped while the second waits (once it is saved so).
      let asked = 0
      let resolved = false
      const denied = savedAfter((event) => {
        if (event._tag === "ApprovalRequested") asked++
        else if (event._tag === "ApprovalResolved") resolved = true
        else return false
        return asked === 2 && resolved
      })
      const approvals = yield* Approvals.interactive()
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s1", prompt: "ship it", plugins: [denied.plugin, approver(approvals, { x: "no" })] })
          .pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provideService(Approvals.Approvals, approvals), Effect.provide(layers(turns, [])))
      )
      yield* denied.latch.await
      yield* Fiber.interrupt(fiber)
      const checkpoint = (yield* store.load("s1")).state
      const reply = checkpoint.messages[1]
      assert.deepStrictEqual(reply?.role === "assistant" && Message.toolCalls(reply).map((call) => call.id), ["x", "x_2"])
      assert.deepStrictEqual(checkpoint.partialResults.map((r) => [r.toolCallId, Message.textOf(r)]), [
        ["x", "Tool call denied: no"]
      ])
      assert.deepStrictEqual(checkpoint.pendingApprovals, [
        { toolCallId: "x_2", approvalId: "x_2", toolName: "deploy", params: { env: "production" } }
      ])

      const next = yield* Approvals.interactive()
      const { events, exit, ran } = yield* resume(store, turns, { plugins: [approver(next, { x_2: true })] })
        .pipe(Effect.provideService(Approvals.Approvals, next))
      const { result } = succeeded(exit)
      assert.deepStrictEqual(ran, ["deploy"])
      assert.deepStrictEqual(ofTag(events, "ApprovalRequested").map((e) => [e.approvalId, e.params]), [
        ["x_2", { env: "production" }]
      ])
      assertValidTranscript(result.state.messages)
      assert.deepStrictEqual(result.state.messages.filter((m) => m.role === "toolResult").map(Message.textOf), [
        "Tool call denied: no",
        "deployed to production"
      ])
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
    }))

  it.live("a parent's and a sub-agent's pending approvals on the same call id survive a restart under their own ids", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const ran: Array<string> = []
      const deployer = Agent.define({
        name: "deployer",
        description: "deploys",
        input: Schema.Struct({ topic: Schema.String }),
        tools: toolsLayer(ran),
        model: ScriptedModel.layer(followTranscript([
          { toolCalls: [{ id: "c1", name: "deploy", params: { env: "child" } }] },
          { text: "child done" }
        ]))
      })
      const Parent = Toolkit.make(Deploy, Agent.asTool(deployer))
      const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({
        deploy: ({ env }) => Effect.sync(() => (ran.push(`deploy:${env}`), `deployed to ${env}`)),
        deployer: SubAgent.handler(deployer)
      })))
      const model = () =>
        ScriptedModel.layer(followTranscript([
          { toolCalls: [{ id: "c1", name: "deploy", params: { env: "parent" } }, { id: "c2", name: "deployer", params: { topic: "x" } }] },
          { text: "all done" }
        ]))
      // 1. both wait (nobody answers); stopped once the checkpoint holds both
      const nobody = yield* Approvals.interactive()
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s1", prompt: "ship it" }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provideService(Approvals.Approvals, nobody),
          Effect.provide(Layer.merge(tools, model()))
        )
      )
      const childPending = (state: RunState.RunState) => {
        const saved = state.pluginState.subAgents as Record<string, { state: { pendingApprovals: Array<unknown> } }> | undefined
        return saved?.c2?.state.pendingApprovals ?? []
      }
      const both = (state: RunState.RunState) => state.pendingApprovals.length === 1 && childPending(state).length === 1
      const saved = yield* store.load("s1").pipe(
        Effect.flatMap((checkpoint) => both(checkpoint.state) ? Effect.succeed(checkpoint.state) : Effect.fail("not yet")),
        Effect.retry(Schedule.spaced("5 millis")),
        Effect.timeout("5 seconds")
      )
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(saved.pendingApprovals.map((p) => [p.toolCallId, p.approvalId]), [["c1", "c1"]])
      assert.deepStrictEqual(childPending(saved), [
        { toolCallId: "c1", approvalId: "c2/c1", toolName: "deploy", params: { env: "child" } }
      ])
      // 2. resumed, each decided by its id when it asks again: the child's call runs, the parent's is denied
      const approvals = yield* Approvals.interactive()
      const decisions = approver(approvals, { "c2/c1": true, c1: "not the parent" })
      const result = yield* Session.resume("s1", { plugins: [decisions] }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provideService(Approvals.Approvals, approvals),
        Effect.provide(Layer.merge(tools, model()))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      // the child's deploy ran (its tools record "deploy"), the parent's never did ("deploy:parent")
      assert.deepStrictEqual(ran, ["deploy"])
      const texts = result.state.messages.filter((m) => m.role === "toolResult").map(Message.textOf)
      assert.deepStrictEqual(texts, ["Tool call denied: not the parent", "child done"])
    }))

  it.live("call_0 attack: a sub-agent saved in flight whose call does not run again on resume is not resumed by a later call_0", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const ran: Array<string> = []
      // The deployer deploys to the environment its task names: a fresh child for "second" asks for "second".
      const deployer = Agent.define({
        name: "deployer",
        description: "deploys",
        input: Schema.Struct({ topic: Schema.String }),
        prompt: ({ topic }) => topic,
        tools: toolsLayer(ran),
        model: ScriptedModel.layer((_, request) => {
          const replies = request.prompt.content.filter((message) => message.role === "assistant").length
          const first = request.prompt.content.find((message) => message.role === "user")
          const topic = first?.role === "user" && first.content[0]?.type === "text" ? first.content[0].text : "?"
          return replies === 0
            ? { toolCalls: [{ id: "c1", name: "deploy", params: { env: topic } }] }
            : { text: `deployed ${topic}` }
        })
      })
      const Parent = Toolkit.make(Deploy, Agent.asTool(deployer))
      const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({
        deploy: ({ env }) => Effect.sync(() => (ran.push(`deploy:${env}`), `deployed to ${env}`)),
        deployer: SubAgent.handler(deployer)
      })))
      // A provider that numbers calls per response: both turns call the deployer as call_0.
      const model = () =>
        ScriptedModel.layer(followTranscript([
          { toolCalls: [{ id: "call_0", name: "deployer", params: { topic: "first" } }] },
          { toolCalls: [{ id: "call_0", name: "deployer", params: { topic: "second" } }] },
          { text: "all done" }
        ]))
      // 1. the first child waits for approval (nobody answers); stopped once the checkpoint holds it
      const nobody = yield* Approvals.interactive()
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s1", prompt: "ship it" }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provideService(Approvals.Approvals, nobody),
          Effect.provide(Layer.merge(tools, model()))
        )
      )
      yield* store.load("s1").pipe(
        Effect.flatMap((checkpoint) =>
          checkpoint.state.pluginState.subAgents === undefined ? Effect.fail("not yet") : Effect.void
        ),
        Effect.retry(Schedule.spaced("5 millis")),
        Effect.timeout("5 seconds")
      )
      yield* Fiber.interrupt(fiber)
      // 2. resumed, the first call is blocked this time (its child does not run again); the second call_0 runs
      let blocked = false
      const blockOnce = Hooks.plugin({
        name: "block-once",
        beforeToolCall: (call) =>
          Effect.sync(() => call.name === "deployer" && !blocked ? (blocked = true, Hooks.block("not now")) : Hooks.allow)
      })
      const { events, plugin } = recorder()
      const result = yield* Session.resume("s1", { plugins: [blockOnce, plugin] }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provideService(Approvals.Approvals, Approvals.allowAll),
        Effect.provide(Layer.merge(tools, model()))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      // The second call_0 ran a child of its own, for "second", not the first child resumed.
      const asked = events.flatMap((event) =>
        event._tag === "Nested" && event.event._tag === "ApprovalRequested" ? [event.event.params] : []
      )
      assert.deepStrictEqual(asked, [{ env: "second" }])
      assert.deepStrictEqual(ran, ["deploy"])
      const texts = result.state.messages.filter((m) => m.role === "toolResult").map(Message.textOf)
      assert.deepStrictEqual(texts.slice(-1), ["deployed second"])
    }))

  describe("handoffs", () => {
    /** The billing agent, with its own model and tools (`ran`, `onStart`, `maxSleep`: see the fixture's tools). */
    const billing = (
      ran: Array<string>,
      onStart?: (name: string) => void,
      maxSleep?: number,
      call: ScriptedModel.Turn["toolCalls"] = [{ id: "b1", name: "slow", params: { ms: 60_000 } }]
    ) =>
      Agent.define({
        name: "billing",
        description: "handles refunds",
        system: "You are billing.",
        input: Schema.Struct({ topic: Schema.String }),
        prompt: ({ topic }) => `Handle the ${topic}.`,
        tools: toolsLayer(ran, onStart, maxSleep),
        // the transcript it takes over has the triage agent's reply: its own replies come after
        model: ScriptedModel.layer(followTranscript([
          { text: "not billing's" },
          { toolCalls: call },
          { text: "refunded" }
        ]))
      })
    /** The application's agent (triage): it hands off to billing at once; its model must not be asked again. */
    const triage = (definition: ReturnType<typeof billing>) => {
      const Tools = Toolkit.make(Agent.handoff(definition))
      return Layer.merge(
        ToolRegistry.layer(Tools).pipe(
          Layer.provide(Tools.toLayer({ transfer_to_billing: SubAgent.handoffHandler(definition) }))
        ),
        ScriptedModel.layer(followTranscript([
          { toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }] },
          { text: "triage answered after the handoff" }
        ]))
      )
    }

    it.live("the agent handed off to takes the session over; stopped after the handoff, the session resumes in it", () =>
      Effect.gen(function*() {
        const store = CheckpointStore.memory()
        const ran: Array<string> = []
        const started = Latch.makeUnsafe()
        const first = billing(ran, (name) => void (name === "slow" && started.openUnsafe()))
        const fiber = yield* Effect.forkChild(
          Session.run({ id: "s1", prompt: "I want a refund" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(triage(first)))
        )
        yield* started.await
        yield* Fiber.interrupt(fiber)
        const stopped = yield* store.load("s1")
        assert.strictEqual(stopped.agent, "billing")
        assert.isUndefined(stopped.finished)
        assert.strictEqual(stopped.state.system, "You are billing.")
        assert.deepStrictEqual(stopped.state.messages.map((m) => [m.role, Message.textOf(m)]).slice(-2), [
          ["toolResult", "Handed off to billing."],
          ["user", "Handle the refund."]
        ])

        // resumed by an application that defines billing: billing's model and tools answer
        const again: Array<string> = []
        const { events, plugin } = recorder()
        const result = yield* Session.resume("s1", { agents: [billing(again, undefined, 1)], plugins: [plugin] })
          .pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(triage(first)))
        assert.strictEqual(result.agent, "billing")
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.strictEqual(Message.textOf(result.state.messages.at(-1)!), "refunded")
        assert.deepStrictEqual([ran, again], [["slow"], ["slow"]])
        assert.deepStrictEqual(tags(events).slice(0, 2), ["AgentStart", "SessionResumed"])
        assertValidTranscript(result.state.messages)
        const done = yield* store.load("s1")
        assert.deepStrictEqual([done.agent, done.finished?.outcome], ["billing", { _tag: "Completed" }])
        // opened again, the finished session's result says who answered
        const opened = yield* Session.open("s1", { prompt: "x", agents: [billing(again)] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(triage(first))
        )
        assert.strictEqual(opened.agent, "billing")
      }))

    it.live("a call of the agent handed off to that must not run twice, stopped while it ran, is not run again", () =>
      Effect.gen(function*() {
        const store = CheckpointStore.memory()
        const ran: Array<string> = []
        const started = Latch.makeUnsafe()
        const charge = [{ id: "b1", name: "charge", params: { cents: 500, ms: 60_000 } }]
        const first = billing(ran, (name) => void (name === "charge" && started.openUnsafe()), undefined, charge)
        const fiber = yield* Effect.forkChild(
          Session.run({ id: "s1", prompt: "I want a refund" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(triage(first)))
        )
        yield* started.await
        yield* Fiber.interrupt(fiber)
        // billing's charge is not replay-safe in billing's own tools (the application's have no charge)
        assert.deepStrictEqual((yield* store.load("s1")).state.startedCalls, ["b1"])
        const again: Array<string> = []
        const result = yield* Session.resume("s1", { agents: [billing(again, undefined, 1, charge)] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(triage(first))
        )
        assert.deepStrictEqual([ran, again], [["charge"], []])
        const answer = result.state.messages.find((m) => m.role === "toolResult" && m.toolCallId === "b1")
        assert.match(answer === undefined ? "" : Message.textOf(answer), /^This call to charge had started/)
        assert.strictEqual(Message.textOf(result.state.messages.at(-1)!), "refunded")
      }))

    it.live("a session that runs to its end through a handoff returns the agent's answer and saves it finished", () =>
      Effect.gen(function*() {
        const store = CheckpointStore.memory()
        const ran: Array<string> = []
        const { events, plugin } = recorder()
        const result = yield* Session.run({ id: "s1", prompt: "I want a refund", plugins: [plugin] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(triage(billing(ran, undefined, 1)))
        )
        assert.deepStrictEqual([result.agent, result.outcome], ["billing", { _tag: "Completed" }])
        assert.strictEqual(Message.textOf(result.state.messages.at(-1)!), "refunded")
        const ends = ofTag(events, "AgentEnd").map((e) => e.outcome?._tag)
        assert.deepStrictEqual(ends, ["HandedOff", "Completed"])
        // the handoff's checkpoint was not a finished HandedOff; the last one is billing's, finished
        const saved = yield* store.load("s1")
        assert.deepStrictEqual([saved.agent, saved.finished?.outcome._tag], ["billing", "Completed"])
      }))

    it.live("resumed by an application that does not define the agent: CheckpointAgentUnknown, and nothing runs", () =>
      Effect.gen(function*() {
        const store = CheckpointStore.memory()
        const started = Latch.makeUnsafe()
        const first = billing([], (name) => void (name === "slow" && started.openUnsafe()))
        const fiber = yield* Effect.forkChild(
          Session.run({ id: "s1", prompt: "I want a refund" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(triage(first)))
        )
        yield* started.await
        yield* Fiber.interrupt(fiber)
        const before = yield* store.load("s1")
        const error = yield* Effect.flip(Session.resume("s1", {}).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(triage(first))))
        assert.strictEqual(error._tag, "CheckpointAgentUnknown")
        assert.deepStrictEqual(
          error._tag === "CheckpointAgentUnknown" ? [error.sessionId, error.agent, error.known] : [],
          ["s1", "billing", []]
        )
        assert.deepStrictEqual(yield* store.load("s1"), before)
      }))
  })

  it.live("crashing twice: a call that had started before the first crash is still never run after the second", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const turns: Turns = [
        {
          toolCalls: [
            { id: "a", name: "deploy", params: { env: "prod" } },
            { id: "b", name: "charge", params: { cents: 500, ms: 60_000 } }
          ]
        },
        { text: "done" }
      ]
      // 1. the charge runs while the deploy waits for approval: crash
      const first = savedAfter((event) => event._tag === "ApprovalRequested")
      const nobody = yield* Approvals.interactive()
      yield* interruptWhenStarted(
        "charge",
        turns,
        Session.run({ id: "s1", prompt: "go", plugins: [first.plugin] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provideService(Approvals.Approvals, nobody)
        ),
        first.latch
      )
      const once = (yield* store.load("s1")).state
      assert.deepStrictEqual([once.startedCalls, once.pendingApprovals.map((p) => p.toolCallId)], [["b"], ["a"]])
      // 2. resumed, the deploy asks again (a checkpoint is saved while the batch runs): crash again
      const second = savedAfter((event) => event._tag === "ApprovalRequested")
      const stillNobody = yield* Approvals.interactive()
      const ran: Array<string> = []
      const fiber = yield* Effect.forkChild(
        Session.resume("s1", { plugins: [second.plugin] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provideService(Approvals.Approvals, stillNobody),
          Effect.provide(layers(turns, ran))
        )
      )
      yield* second.latch.await
      yield* Fiber.interrupt(fiber)
      const twice = (yield* store.load("s1")).state
      assert.deepStrictEqual([twice.startedCalls, twice.pendingApprovals.map((p) => p.toolCallId)], [["b"], ["a"]])
      // 3. resumed and approved: the deploy runs, the charge never does
      const approvals = yield* Approvals.interactive()
      const last = yield* resume(store, turns, { plugins: [approver(approvals, { a: true })] }).pipe(
        Effect.provideService(Approvals.Approvals, approvals)
      )
      const { result } = succeeded(last.exit)
      assert.deepStrictEqual([...ran, ...last.ran], ["deploy"])
      assert.strictEqual(Message.textOf(result.state.messages[2]!), "deployed to prod")
      assert.match(Message.textOf(result.state.messages[3]!), /^This call to charge had started when the run was interrupted/)
    }))

  it.live("steering delivered before the crash stays in the transcript once; undelivered steering and follow-ups are saved and delivered", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const steering = yield* Steering.make()
      // steer during turn 1 (delivered before turn 2); steer and follow up during turn 2, then crash
      const steer = Hooks.plugin({
        name: "steer",
        onEvent: (event) => {
          if (event._tag !== "ToolExecutionStart") return Effect.void
          return Effect.orDie(
            event.toolName === "step"
              ? steering.steer("use metric units")
              : Effect.andThen(steering.steer("be brief"), steering.followUp("now summarise"))
          )
        }
      })
      yield* interruptWhenStarted(
        "slow",
        threeTurns("slow", 60_000),
        Session.run({ id: "s1", prompt: "go", steering, plugins: [steer] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      )
      const checkpoint = (yield* store.load("s1")).state
      assert.deepStrictEqual(checkpoint.messages.slice(3).map(Message.textOf), ["use metric units"])
      assert.deepStrictEqual(checkpoint.steering.map(Message.textOf), ["be brief"])
      assert.deepStrictEqual(checkpoint.followUps.map(Message.textOf), ["now summarise"])

      const turns: Turns = [...threeTurns("slow", 1), { text: "summary" }]
      const { events, exit } = yield* resume(store, turns)
      const { calls, result } = succeeded(exit)
      assert.strictEqual(calls, 3)
      const [opened] = ofTag(events, "SessionResumed")
      assert.deepStrictEqual([opened!.restored.steering, opened!.restored.followUps], [1, 1])
      assert.deepStrictEqual(
        result.state.messages.map((m) => `${m.role}: ${Message.textOf(m)}`),
        [
          "user: go",
          "assistant: ",
          "toolResult: step 1 done",
          "user: use metric units",
          "user: be brief",
          "assistant: ",
          "toolResult: slept 1 ms",
          "assistant: all done",
          "user: now summarise",
          "assistant: summary"
        ]
      )
      assert.deepStrictEqual([result.state.steering, result.state.followUps], [[], []])
    }))

  it.live("the config saved with the session applies on resume: a turn cap already reached ends the run without a model call", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      yield* interruptWhenStarted(
        "slow",
        threeTurns("slow", 60_000),
        Session.run({ id: "s1", prompt: "go", config: { maxTurns: 2, graceTurns: 0 } }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      )
      // the redone turn 2 is the last one the cap allows
      const first = yield* resume(store, threeTurns("slow", 1))
      const done = succeeded(first.exit)
      assert.deepStrictEqual([done.result.outcome, done.calls], [{ _tag: "MaxTurns", limit: 2 }, 1])
      // resuming again: the cap is spent, the model is not called
      const again = yield* resume(store, threeTurns("slow", 1))
      const spent = succeeded(again.exit)
      assert.deepStrictEqual([spent.result.outcome, spent.calls], [{ _tag: "MaxTurns", limit: 2 }, 0])
      // settings given on resume win over the saved ones
      const raised = yield* resume(store, threeTurns("slow", 1), { config: { maxTurns: 3 } })
      const last = succeeded(raised.exit)
      assert.deepStrictEqual([last.result.outcome, last.calls], [{ _tag: "Completed" }, 1])
    }))

  it.live("a run that fails (the model is down) keeps its last checkpoint, and resuming retries the turn", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const down: Turns = [threeTurns("slow", 1)[0]!, { fail: new AiError.InternalProviderError({ description: "overloaded" }) }]
      const failed = yield* Effect.flip(Session.run({ id: "s1", prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))).pipe(Effect.provide(layers(down, [])))
      assert.strictEqual(failed._tag, "ModelError")
      assert.deepStrictEqual(roles((yield* store.load("s1")).state.messages), ["user", "assistant", "toolResult"])
      const { exit } = yield* resume(store, threeTurns("slow", 1))
      const { calls, result } = succeeded(exit)
      assert.deepStrictEqual([result.outcome._tag, calls, result.state.turn], ["Completed", 2, 3])
    }))

  it.live("a resume whose budget is already spent ends with BudgetExceeded without calling the model", () =>
    Effect.gen(function*() {
      // cost: the session ends on its budget; resuming it does not spend more
      const costly = CheckpointStore.memory()
      const first = yield* Session.run({ id: "s1", prompt: "go", config: { budgets: { costUsd: 0.002 } } }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, costly),
        Effect.provide(layers(threeTurns("slow", 1), []))
      )
      assert.deepStrictEqual(first.outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 0.002, used: 0.002 })
      const again = yield* resume(costly, threeTurns("slow", 1))
      const spent = succeeded(again.exit)
      assert.deepStrictEqual([spent.result.outcome, spent.calls], [first.outcome, 0])

      // wall time: it ran out while a tool was running; the time used is restored with the checkpoint
      const store = CheckpointStore.memory()
      const overtime = Latch.makeUnsafe()
      const session = Session.run({ id: "s1", prompt: "go", config: { budgets: { wallClock: "1 second" } } }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      // (well past the budget, so a slow start of the session on a loaded machine still leaves it spent)
      yield* Effect.forkChild(Effect.andThen(Effect.sleep("1500 millis"), overtime.open))
      yield* interruptWhenStarted("slow", threeTurns("slow", 60_000), session, overtime)
      const saved = (yield* store.load("s1")).state
      assert.isAtLeast(saved.elapsedMs, 1000)
      const late = yield* resume(store, threeTurns("slow", 1))
      const { calls, result } = succeeded(late.exit)
      assert.strictEqual(calls, 0)
      assert.deepStrictEqual(
        result.outcome._tag === "BudgetExceeded" && [result.outcome.budget, result.outcome.limit],
        ["wallClock", 1000]
      )
      assert.deepStrictEqual(ofTag(late.events, "GuardTripped").map((e) => e.guard), ["budget"])
    }))

  it.live("fails with the store's error when there is no checkpoint, and with InvalidContinuation when the session had finished", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const missing = yield* resume(store, [])
      assert.deepStrictEqual(missing.exit._tag === "Failure" && String(missing.exit.cause).includes("CheckpointMissing"), true)
      yield* Session.run({ id: "s1", prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(layers([{ text: "hi" }], [])))
      const finished = yield* resume(store, [{ text: "again" }])
      assert.isTrue(finished.exit._tag === "Failure" && String(finished.exit.cause).includes("InvalidContinuation"))
    }))
})

describe("a guard's saved state is checked as tightly as the guard uses it", () => {
  const bad: ReadonlyArray<readonly [string, unknown, RegExp]> = [
    ["loopDetector", { signature: null, results: null, repeats: 0, warned: false, seen: -1 }, /seen/],
    ["loopDetector", { signature: null, results: null, repeats: 0, warned: false, seen: 0.5 }, /seen/],
    ["loopDetector", { signature: null, results: null, repeats: 0, warned: false, seen: 4 }, /looked at 4 messages; the transcript has 3/],
    ["loopDetector", { signature: null, results: null, repeats: "x", warned: false, seen: 0 }, /repeats/],
    ["loopDetector", "garbage", /Expected/],
    ["stagnationDetector", { counts: { a1b2: 0 }, seen: 3 }, /a1b2/],
    ["stagnationDetector", { counts: {}, seen: -2 }, /seen/]
  ]
  const stateWith = (plugin: string, saved: unknown): RunState.RunState => ({
    ...RunState.make({ runId: "r", messages: threeMessages }),
    turn: 1,
    pluginState: { [plugin]: saved }
  })
  const threeMessages: ReadonlyArray<Message.Message> = [
    Message.user("go"),
    {
      role: "assistant",
      content: [{ type: "tool-call", id: "c1", name: "step", params: { n: 1 } }],
      stopReason: "toolUse",
      usage: Message.emptyUsage
    },
    Message.toolResult({ toolCallId: "c1", toolName: "step", text: "step 1 done", isError: false })
  ]

  it.live("a session whose checkpoint holds one that does not fit fails to resume with CheckpointCorrupt, not a defect", () =>
    Effect.gen(function*() {
      for (const [plugin, saved, problem] of bad) {
        const store = CheckpointStore.memory()
        yield* store.create("s1", { state: stateWith(plugin, saved) })
        const { exit, ran } = yield* resume(store, threeTurns("slow", 1))
        const error = exit._tag === "Failure" ? exit.cause.reasons.find((reason) => reason._tag === "Fail")?.error : undefined
        assert.strictEqual(error?._tag, "CheckpointCorrupt", `${plugin} ${JSON.stringify(saved)}: ${String(exit)}`)
        if (error?._tag !== "CheckpointCorrupt") continue
        assert.strictEqual(error.file, "memory:s1/head.json")
        assert.match(error.problem, new RegExp(`^state\\.pluginState\\.${plugin}: `))
        assert.match(error.problem, problem)
        assert.deepStrictEqual(ran, [])
      }
    }))

  it.live("Agent.runContinue fails with InvalidPluginState before the run starts", () =>
    Effect.gen(function*() {
      const { events, plugin } = recorder()
      const error = yield* Effect.flip(Agent.runContinue(stateWith("loopDetector", bad[0]![1]), {
        plugins: [plugin]
      })).pipe(Effect.provide(layers(threeTurns("slow", 1), [])))
      assert.strictEqual(error._tag, "InvalidPluginState")
      assert.strictEqual(error._tag === "InvalidPluginState" && error.plugin, "loopDetector")
      assert.deepStrictEqual(events, [])
    }))

  it.live("a state that fits is restored: the counters go on from it", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const saved = { signature: null, results: null, repeats: 0, warned: true, seen: 3 }
      yield* store.create("s1", { state: stateWith("loopDetector", saved) })
      const { exit } = yield* resume(store, threeTurns("slow", 1))
      const { result } = succeeded(exit)
      assert.propertyVal(result.state.pluginState.loopDetector, "warned", true)
    }))
})

describe("Session.open", () => {
  /** Opens session "s1" with a new model and new tools, as a new process would. */
  const open = (store: CheckpointStore.Service, turns: Turns, options: Partial<Session.OpenOptions> = {}) =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const { events, plugin } = recorder()
      const exit = yield* Effect.gen(function*() {
        const result = yield* Session.open("s1", {
          prompt: "go",
          ...options,
          plugins: [...(options.plugins ?? []), plugin]
        }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
        return { result, calls: yield* (yield* ScriptedModel.ScriptedModel).calls }
      }).pipe(Effect.provide(layers(turns, ran, undefined, 1)), Effect.exit)
      return { exit, events, ran }
    })

  it.live("starts a new session, resumes it after a crash, and then returns its stored result without running it", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      // 1. a new id: started, as Session.run would
      const crashed = yield* interruptWhenStarted(
        "slow",
        threeTurns("slow", 60_000),
        Session.open("s1", { prompt: "go", config: { maxTurns: 9 } }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      )
      assert.deepStrictEqual(crashed, ["step", "slow"])
      assert.isUndefined((yield* store.load("s1")).finished)
      // 2. unfinished: resumed, with the saved config
      const second = yield* open(store, threeTurns("slow", 1), { prompt: "ignored: the session exists" })
      const resumed = succeeded(second.exit)
      assert.deepStrictEqual(tags(second.events).slice(0, 2), ["AgentStart", "SessionResumed"])
      assert.deepStrictEqual([resumed.result.outcome, resumed.calls], [{ _tag: "Completed" }, 2])
      assert.strictEqual(Message.textOf(resumed.result.state.messages[0]!), "go")
      const checkpoint = yield* store.load("s1")
      assert.deepStrictEqual(checkpoint.finished, { outcome: { _tag: "Completed" }, firstMessage: 3 })
      assert.strictEqual(checkpoint.config?.maxTurns, 9)
      // 3. finished: the result the last run returned, and nothing runs
      const third = yield* open(store, threeTurns("slow", 1))
      const stored = succeeded(third.exit)
      assert.deepStrictEqual(stored.result, resumed.result)
      assert.deepStrictEqual([stored.calls, third.ran, third.events], [0, [], []])
    }))

  it.live("a session that ended on a guard is finished too: its outcome is returned, not run again", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const first = yield* open(store, threeTurns("slow", 1), { config: { budgets: { costUsd: 0.002 } } })
      const ended = succeeded(first.exit)
      assert.deepStrictEqual(ended.result.outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 0.002, used: 0.002 })
      const again = yield* open(store, threeTurns("slow", 1), { config: { budgets: { costUsd: 0.002 } } })
      assert.deepStrictEqual(succeeded(again.exit), { result: ended.result, calls: 0 })
    }))

  it.live("a finished session given a follow-up through resume goes on, and open then returns the new result", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const turns: Turns = [{ text: "first answer" }, { text: "second answer" }]
      succeeded((yield* open(store, turns)).exit)
      const steering = yield* Steering.make()
      yield* steering.followUp("and then?")
      const more = succeeded((yield* resume(store, turns, { steering })).exit)
      assert.deepStrictEqual(more.result.messages.map(Message.textOf), ["and then?", "second answer"])
      const stored = succeeded((yield* open(store, turns)).exit)
      assert.deepStrictEqual(stored, { result: more.result, calls: 0 })
    }))

  it.live("a failed run leaves the session unfinished: open resumes it", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const down: Turns = [threeTurns("slow", 1)[0]!, { fail: new AiError.InternalProviderError({ description: "overloaded" }) }]
      const failed = yield* open(store, down)
      assert.isTrue(failed.exit._tag === "Failure" && String(failed.exit.cause).includes("ModelError"))
      assert.isUndefined((yield* store.load("s1")).finished)
      const retried = succeeded((yield* open(store, threeTurns("slow", 1))).exit)
      assert.deepStrictEqual([retried.result.outcome._tag, retried.calls, retried.result.state.turn], ["Completed", 2, 3])
    }))

  it.live("checkpoints of format version 1 still load: an unfinished one resumes, a finished one returns its result", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.copy(fileURLToPath(new URL("../fixtures/checkpoint-v1", import.meta.url)), dir, { overwrite: true })
      const store = yield* CheckpointStore.fileSystem(dir)
      const stopped = yield* store.load("stopped")
      assert.deepStrictEqual([roles(stopped.state.messages), stopped.state.turn, stopped.config?.maxTurns], [
        ["user", "assistant", "toolResult"],
        1,
        7
      ])
      const resumed = yield* Session.open("stopped", { prompt: "go" }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(layers(threeTurns("slow", 1), []))
      )
      assert.deepStrictEqual([resumed.outcome, resumed.state.turn], [{ _tag: "Completed" }, 3])
      // saved again in the current format, finished
      assert.deepStrictEqual((yield* store.load("stopped")).finished, { outcome: { _tag: "Completed" }, firstMessage: 3 })

      const finished = yield* store.load("finished")
      assert.isUndefined(finished.finished)
      const result = yield* Effect.gen(function*() {
        const result = yield* Session.open("finished", { prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
        return { result, calls: yield* (yield* ScriptedModel.ScriptedModel).calls }
      }).pipe(Effect.provide(layers(threeTurns("slow", 1), [])))
      assert.deepStrictEqual(result, {
        result: { messages: [], state: finished.state, outcome: { _tag: "Completed" }, usage: finished.state.usage },
        calls: 0
      })
    }).pipe(Effect.provide(NodeServices.layer)))
})
