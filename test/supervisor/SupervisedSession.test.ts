/**
 * SupervisedSession: a supervised run's checkpoints in a CheckpointStore.
 * Stopped in the middle of an act turn, the agent worker's transcript is
 * restored exactly and continues where it was (the turn that was cut short
 * is redone once, each completed model call is in the transcript once); a
 * plan-phase session resumes in the plan phase; a checkpoint that is not a
 * supervised run's, or whose supervisor state is damaged, is a typed error
 * and stays as it was.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schedule, Schema } from "effect"
import { TestClock } from "effect/testing"
import { WorkflowEngine } from "effect/workflow"
import { Tool, Toolkit } from "effect/ai"
import { Agent, AgentTool, Approvals, type AgentEvent, Guardrail, Message, Outcome, RunState, Steering, ToolRegistry } from "effect-agent"
import { CheckpointStore, DurableSession, Sessions } from "effect-agent/session"
import { Check, SupervisedSession, Supervisor, SupervisorEvent, SupervisorOutcome, Worker } from "effect-agent/supervisor"
import { ScriptedModel } from "effect-agent/testing"
import { database, engine } from "../session/cluster-fixture.ts"
import * as Postgres from "../session/postgres.ts"
import { patience } from "../patience.ts"

const WriteFile = Tool.make("write_file", {
  parameters: Schema.Struct({ path: Schema.String, content: Schema.String }),
  success: Schema.String
})
const Tools = Toolkit.make(WriteFile)
const toolsOn = (files: Map<string, string>) =>
  ToolRegistry.layer(Tools).pipe(Layer.provide(Tools.toLayer({
    write_file: ({ path, content }) => Effect.sync(() => (files.set(path, content), "written"))
  })))

const okCheck = (files: Map<string, string>) =>
  Check.make("ok.txt says yes", Effect.sync(() =>
    files.get("ok.txt") === "yes"
      ? { status: "pass", summary: "yes" }
      : { status: "fail", summary: `got ${files.get("ok.txt") ?? "nothing"}` }))

const task = "make ok.txt say yes"

describe("SupervisedSession", () => {
  it.effect("stopped mid act turn: the agent's transcript is restored exactly and each completed call is in it once", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const files = new Map<string, string>()
      const secondTurn = yield* Deferred.make<void>()
      // Process 1: act turn 1 (a tool call, then a reply) fails the check; in act turn 2 a tool call, and the
      // model call after it hangs.
      const first = ScriptedModel.layer([
        { toolCalls: [{ id: "w1", name: "write_file", params: { path: "ok.txt", content: "no" } }], usage: { input: 10 } },
        { text: "wrote no", usage: { input: 20 } },
        { toolCalls: [{ id: "w2", name: "write_file", params: { path: "ok.txt", content: "yes" } }], usage: { input: 30 } },
        { text: "thinking", hang: true }
      ])
      const events: Array<AgentEvent.AgentEvent> = []
      const fiber = yield* Effect.forkChild(
        SupervisedSession.run({
          id: "s1",
          task,
          checks: [okCheck(files)],
          onEvent: (event) =>
            Effect.andThen(
              Effect.sync(() => void events.push(event)),
              SupervisorEvent.tagOf(event) === "WorkerTurnStart" && event.turn === 2 ? Deferred.succeed(secondTurn, void 0) : Effect.void
            )
        }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(Layer.merge(first, toolsOn(files))))
      )
      yield* Deferred.await(secondTurn)
      // the hanging model call has started
      yield* Effect.repeat(Effect.yieldNow, { until: () => events.filter((e) => e._tag === "TurnStart").length === 4 })
      yield* Fiber.interrupt(fiber)

      // saved in the middle of act turn 2: the feedback, the call and its result are in, the hanging call is not
      const saved = yield* SupervisedSession.load("s1").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      assert.deepStrictEqual([saved.phase, saved.turns, saved.inTurn], ["act", 1, true])
      const before = saved.agentState!.messages
      const feedback = saved.pendingMessage
      assert.include(feedback, "- ok.txt says yes [new, 0.0s]: got no")
      assert.deepStrictEqual(before.map((m) => [m.role, Message.textOf(m)]), [
        ["user", task],
        ["assistant", ""],
        ["toolResult", "written"],
        ["assistant", "wrote no"],
        ["user", feedback],
        ["assistant", ""],
        ["toolResult", "written"]
      ])
      assert.strictEqual(RunState.validate(saved.agentState!), undefined)

      // Process 2: resumed from the store, with a model that has the rest of the script.
      const second = ScriptedModel.layer([{ text: "fixed", usage: { input: 40 } }])
      const resumedEvents: Array<AgentEvent.AgentEvent> = []
      const result = yield* Effect.gen(function*() {
        const result = yield* SupervisedSession.resume({
          id: "s1",
          checks: [okCheck(files)],
          onEvent: (event) => Effect.sync(() => void resumedEvents.push(event))
        }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
        const requests = yield* ScriptedModel.ScriptedModel.use((recorder) => recorder.requests)
        // the one model call of the resumed run sees the restored transcript, nothing more
        const prompt = requests[0]!.prompt.content
        assert.deepStrictEqual(prompt.map((m) => m.role), ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"])
        assert.strictEqual(requests.length, 1)
        return result
      }).pipe(Effect.provide(Layer.merge(second, toolsOn(files))))

      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      // every completed model call's tokens once, across the stop
      assert.strictEqual(result.usage.input, 100)
      const after = result.state.messages
      assert.deepStrictEqual(after.slice(0, before.length), before)
      // the turn goes on from there: the feedback is not sent a second time, w2 does not run again
      assert.deepStrictEqual(after.slice(before.length).map((m) => [m.role, Message.textOf(m)]), [
        ["assistant", "fixed"]
      ])
      // each completed model call once: the calls w1 and w2 once each, four assistant messages in all
      const calls = after.flatMap((m) => m.role === "assistant" ? m.content.filter((p) => p.type === "tool-call") : [])
      assert.deepStrictEqual(calls.map((c) => c.type === "tool-call" ? c.id : ""), ["w1", "w2"])
      assert.strictEqual(after.filter((m) => m.role === "assistant").length, 4)
      // the resumed run says so, once, right after its AgentStart; its only worker turn is the redone turn 2
      const tags = resumedEvents.map(SupervisorEvent.tagOf)
      assert.deepStrictEqual(tags.slice(0, 2), ["AgentStart", "SessionResumed"])
      const resumed = resumedEvents[1]
      assert.deepStrictEqual(
        resumed?._tag === "SessionResumed" && [resumed.sessionId, resumed.resumedAtTurn, resumed.restored.messages],
        ["s1", 2, 7]
      )
      const starts = SupervisorEvent.ofTag(resumedEvents, "WorkerTurnStart")
      assert.deepStrictEqual(starts.map((e) => [e.turn, e.message]), [[2, feedback]])
      // the last checkpoint is the run as it ended: resumed again, it ends Converged without a turn
      const last = yield* SupervisedSession.load("s1").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      assert.deepStrictEqual(last.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(last.agentState?.messages, after)
      let asked = 0
      const again = yield* SupervisedSession.resume({
        id: "s1",
        worker: Worker.make("never", () => Effect.die(`asked ${++asked}`))
      }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      assert.deepStrictEqual(again.outcome, { _tag: "Converged", turns: 2 })
      assert.strictEqual(asked, 0)
    }))

  it.effect("an external worker's session: the resume token and the messages are kept; plan phase resumes in plan", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const asked: Array<Worker.TurnRequest> = []
      const hang = yield* Deferred.make<void>()
      const worker = (replies: ReadonlyArray<string | undefined>) =>
        Worker.make("fake", (request) =>
          Effect.suspend(() => {
            asked.push(request)
            const reply = replies[asked.length - 1]
            return reply === undefined
              ? Effect.andThen(Deferred.succeed(hang, void 0), Effect.never)
              : Effect.succeed({ text: reply, usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: "tok" })
          }))
      const approvals: Approvals.Service = {
        decide: () => Effect.succeed(Approvals.approved),
        decidePlan: () => Effect.succeed({ _tag: "Refine", notes: "shorter" })
      }
      const fiber = yield* Effect.forkChild(
        SupervisedSession.run({ id: "p", task, plan: true, worker: worker(["plan v1", undefined]) }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provideService(Approvals.Approvals, approvals)
        )
      )
      yield* Deferred.await(hang)
      yield* Fiber.interrupt(fiber)
      const saved = yield* SupervisedSession.load("p").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      assert.deepStrictEqual([saved.phase, saved.planIteration, saved.resumeToken], ["plan", 2, "tok"])
      assert.strictEqual(saved.agentState, undefined)
      const stored = yield* store.load("p")
      assert.deepStrictEqual(stored.state.messages.map(Message.textOf), [Supervisor.planRequest(task), "plan v1"])

      asked.length = 0
      const result = yield* SupervisedSession.resume({ id: "p", worker: worker(["plan v2", "done"]) }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(asked.map((r) => [r.phase, r.message, r.resumeToken]), [
        ["plan", Supervisor.revisionRequest("shorter"), "tok"],
        ["act", Supervisor.actRequest("plan v2", task), "tok"]
      ])
      assert.strictEqual(result.plan, "plan v2")
    }))

  it.effect("a plain session's checkpoint, or a damaged supervisor state: CheckpointCorrupt, and the store keeps it", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const state = RunState.make({ runId: "r", messages: [Message.user("hi")] })
      yield* store.create("plain", { state })
      const never = Worker.make("w", () => Effect.die("never"))
      const plain = yield* Effect.flip(SupervisedSession.resume({ id: "plain", worker: never }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
      assert.strictEqual(plain._tag, "CheckpointCorrupt")
      assert.include(plain.message, "holds no supervised run")
      assert.deepStrictEqual((yield* store.load("plain")).state, state)

      const damaged = { ...state, pluginState: { [SupervisedSession.key]: { version: 1, phase: "later" } } }
      yield* store.create("damaged", { state: damaged })
      const error = yield* Effect.flip(SupervisedSession.load("damaged").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
      assert.strictEqual(error._tag, "CheckpointCorrupt")
      assert.include(error.message, "its supervised run does not decode")
      assert.deepStrictEqual((yield* store.load("damaged")).state, damaged)

      const missing = yield* Effect.flip(SupervisedSession.load("nothing").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
      assert.strictEqual(missing._tag, "CheckpointMissing")
    }))

  it.effect("a new session under a taken id fails with CheckpointExists before any turn", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      yield* store.create("taken", { state: RunState.make({ runId: "r" }) })
      let turns = 0
      const worker = Worker.make("w", () =>
        Effect.sync(() => (turns++, { text: "x", usage: { inputTokens: 0, outputTokens: 0 }, resumeToken: undefined })))
      const error = yield* Effect.flip(SupervisedSession.run({ id: "taken", task, worker }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
      assert.strictEqual(error._tag, "CheckpointExists")
      assert.strictEqual(turns, 0)
    }))
})

describe("SupervisedSession: stopped while a call that is not replay-safe runs", () => {
  it.effect("the resumed turn answers it 'outcome unknown' and does not run it again", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const files = new Map<string, string>()
      let writes = 0
      const started = yield* Deferred.make<void>()
      // a write that is not safe to repeat (tools are replay-safe unless annotated otherwise)
      const Unsafe = Toolkit.make(AgentTool.annotate(WriteFile, { replaySafe: false }))
      const hanging = ToolRegistry.layer(Unsafe).pipe(Layer.provide(Unsafe.toLayer({
        write_file: () =>
          Effect.andThen(Effect.sync(() => void writes++), Effect.andThen(Deferred.succeed(started, void 0), Effect.never))
      })))
      const script = ScriptedModel.layer([
        { toolCalls: [{ id: "w1", name: "write_file", params: { path: "ok.txt", content: "yes" } }] }
      ])
      const fiber = yield* Effect.forkChild(
        SupervisedSession.run({ id: "u", task, checks: [okCheck(files)] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(Layer.merge(script, hanging))
        )
      )
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      const saved = yield* SupervisedSession.load("u").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      assert.deepStrictEqual([saved.phase, saved.turns, saved.inTurn], ["act", 0, true])
      assert.deepStrictEqual(saved.agentState!.startedCalls, ["w1"])

      const rest = ScriptedModel.layer([
        { toolCalls: [{ id: "w2", name: "write_file", params: { path: "ok.txt", content: "yes" } }] },
        { text: "wrote it again, knowingly" }
      ])
      const unsafeOn = ToolRegistry.layer(Unsafe).pipe(Layer.provide(Unsafe.toLayer({
        write_file: ({ path, content }) => Effect.sync(() => (writes++, files.set(path, content), "written"))
      })))
      const result = yield* SupervisedSession.resume({ id: "u", checks: [okCheck(files)] }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(Layer.merge(rest, unsafeOn))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 1 })
      assert.strictEqual(writes, 2) // w1 once (before the stop, never again), then w2
      const answered = result.state.messages.find((m) => m.role === "toolResult" && m.toolCallId === "w1")
      assert.match(answered === undefined ? "" : Message.textOf(answered), /had started when the run was interrupted/)
      assert.strictEqual(result.state.messages.filter((m) => m.role === "user").length, 1)
    }))
})

describe("SupervisedSession: stopped while the turn gate waits (approveTurns)", () => {
  it.effect("attack: interrupted at the gate, then resumed: the unapproved feedback does not reach the worker; the gate is asked again", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const files = new Map<string, string>()
      const asked: Array<Worker.TurnRequest> = []
      const worker = Worker.make("w", (request) =>
        Effect.sync(() => {
          asked.push(request)
          files.set("ok.txt", asked.length === 1 ? "no" : "yes")
          return { text: `turn ${asked.length}`, usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: undefined }
        }))
      // Process 1: the gate waits for an operator who never answers; the run is stopped there.
      const waiting = yield* Deferred.make<Approvals.TurnRequest>()
      const silent: Approvals.Service = {
        decide: () => Effect.succeed(Approvals.approved),
        decideTurn: (request) => Effect.andThen(Deferred.succeed(waiting, request), Effect.never)
      }
      const fiber = yield* Effect.forkChild(
        SupervisedSession.run({ id: "g", task, checks: [okCheck(files)], approveTurns: true, worker }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provideService(Approvals.Approvals, silent)
        )
      )
      const pending = yield* Deferred.await(waiting)
      yield* Fiber.interrupt(fiber)
      const saved = yield* SupervisedSession.load("g").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
      assert.deepStrictEqual([saved.phase, saved.turns, saved.awaitingApproval], ["act", 1, true])
      assert.strictEqual(saved.pendingMessage, pending.feedback)
      assert.strictEqual(asked.length, 1)

      // Resumed without a gate to ask: refused before any turn, and the checkpoint stays as it was.
      const ungated = yield* Effect.flip(SupervisedSession.resume({ id: "g", checks: [okCheck(files)], worker }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
      assert.deepStrictEqual([ungated._tag, ungated._tag === "ConfigError" && ungated.field], ["ConfigError", "approveTurns"])
      assert.strictEqual(asked.length, 1)
      assert.deepStrictEqual(yield* SupervisedSession.load("g").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)), saved)

      // Resumed with the gate: it is asked the same feedback before the worker gets anything; the replacement goes.
      const requests: Array<Approvals.TurnRequest> = []
      const events: Array<AgentEvent.AgentEvent> = []
      const operator: Approvals.Service = {
        decide: () => Effect.succeed(Approvals.approved),
        decideTurn: (request) =>
          Effect.sync(() => {
            requests.push(request)
            return { _tag: "Replace", feedback: "Write yes into ok.txt." } as const
          })
      }
      const result = yield* SupervisedSession.resume({
        id: "g",
        checks: [okCheck(files)],
        approveTurns: true,
        worker,
        onEvent: (event) => Effect.sync(() => void events.push(event))
      }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provideService(Approvals.Approvals, operator))
      assert.deepStrictEqual(requests.map((r) => [r.turn, r.feedback]), [[1, pending.feedback]])
      assert.deepStrictEqual(asked.slice(1).map((r) => r.message), ["Write yes into ok.txt."])
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      const tags = events.map(SupervisorEvent.tagOf).filter((tag) =>
        tag === "TurnApprovalRequested" || tag === "FeedbackSent" || tag === "WorkerTurnStart"
      )
      assert.deepStrictEqual(tags, ["TurnApprovalRequested", "FeedbackSent", "WorkerTurnStart"])
      assert.isUndefined((yield* SupervisedSession.load("g").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))).awaitingApproval)
    }))
})

describe("SupervisedSession with approveTurns: stopped at random moments (randomized, bounded)", () => {
  /** A small deterministic generator (mulberry32), so that a failing seed can be replayed. */
  const random = (seed: number) => () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }

  it.effect("attack: 100 sessions stopped up to 3 times at random moments: the worker never gets feedback the gate did not approve", () =>
    Effect.gen(function*() {
      const seed = Number(process.env.SUPERVISED_GATE_SEED ?? Date.now() % 1_000_000)
      const next = random(seed)
      let stoppedAtGate = 0
      for (let run = 0; run < 100; run++) {
        const note = `seed ${seed}, run ${run}`
        const store = CheckpointStore.memory()
        // What outlives a process: the work done (the workspace), what the worker got, what the gate let through.
        let done = 0
        const received: Array<string> = []
        const approved = new Set<string>()
        let waiting = false
        const worker = Worker.make("w", (request) =>
          Effect.gen(function*() {
            yield* Effect.sleep("5 millis")
            received.push(request.message)
            done++
            return { text: `turn ${done}`, usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: undefined }
          }))
        const check = Check.make("three turns", Effect.map(Effect.sleep("2 millis"), () =>
          done >= 3 ? { status: "pass", summary: "done" } as const : { status: "fail", summary: `${done} of 3` } as const))
        const operator: Approvals.Service = {
          decide: () => Effect.succeed(Approvals.approved),
          decideTurn: (request) =>
            Effect.gen(function*() {
              waiting = true
              yield* Effect.sleep("12 millis")
              waiting = false
              const replace = next() < 0.5
              const text = replace ? `Replaced: ${request.feedback}` : request.feedback
              approved.add(text)
              return replace ? { _tag: "Replace", feedback: text } as const : { _tag: "Approve" } as const
            }).pipe(Effect.onInterrupt(() => Effect.sync(() => void (waiting = false))))
        }
        const options = { id: "s", checks: [check], approveTurns: true, worker }
        let finished: Supervisor.Result | undefined
        for (let attempt = 0; attempt <= 3 && finished === undefined; attempt++) {
          const saved = yield* Effect.exit(SupervisedSession.load("s").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store)))
          const process = saved._tag === "Success"
            ? SupervisedSession.resume(options)
            : SupervisedSession.run({ ...options, task })
          const fiber = yield* Effect.forkChild(process.pipe(
            Effect.provideService(CheckpointStore.CheckpointStore, store),
            Effect.provideService(Approvals.Approvals, operator)
          ))
          if (attempt < 3) {
            yield* TestClock.adjust(Math.floor(next() * 40))
            if (waiting) stoppedAtGate++
            yield* Fiber.interrupt(fiber)
          } else {
            yield* TestClock.adjust("1 second")
            finished = yield* Fiber.join(fiber)
          }
        }
        // (a turn redone after a stop finds its work done: the run may converge in fewer turns than three)
        assert.strictEqual(finished?.outcome._tag, "Converged", note)
        // the task first (again, when its turn was redone); every other message passed the gate
        assert.strictEqual(received[0], task, note)
        for (const message of received) {
          if (message !== task) assert.isTrue(approved.has(message), `${note}: unapproved ${message}`)
        }
      }
      console.log(`supervised gate: ${stoppedAtGate} of 300 stops came while the gate waited (seed ${seed})`)
      assert.isAtLeast(stoppedAtGate, 10, `seed ${seed}`)
    }))
})

describe("SupervisedSession: checkpoints of version 1 (issue 30)", () => {
  const v1 = {
    version: 1,
    runId: "r1",
    task: "fix it",
    phase: "act",
    planIteration: 1,
    pendingMessage: "feedback",
    turns: 2,
    usage: { inputTokens: 30, outputTokens: 7, costUsd: 0.25 },
    elapsedMs: 10,
    baseline: [],
    outcome: { _tag: "Unverified", budget: "turns", limit: 2, used: 2, failing: ["tests"] },
    state: "external"
  }

  it.effect("a session version 1 saved loads: its usage as Message.Usage, its ending as the supervisor's own", () =>
    Effect.gen(function*() {
      const state = RunState.make({ runId: "r1", messages: [Message.user("fix it")] })
      const stored = { state: { ...state, pluginState: { [SupervisedSession.key]: v1 } } }
      const loaded = yield* SupervisedSession.fromStore("s", "head.json", stored)
      assert.strictEqual(loaded.version, 2)
      assert.deepStrictEqual(loaded.usage, { ...Message.emptyUsage, input: 30, output: 7, cost: 0.25 })
      assert.deepStrictEqual(loaded.outcome, { _tag: "Unverified", budget: "turns", limit: 2, used: 2, failing: ["tests"] })
      // and through the JSON codec of a checkpoint (what an application that keeps its own saved)
      const { state: _, ...checkpoint } = v1
      const decoded = yield* Supervisor.decodeCheckpoint(checkpoint)
      assert.deepStrictEqual(decoded.usage, loaded.usage)
      // neither form: the error names today's form
      const broken = yield* Effect.flip(SupervisedSession.fromStore("s", "head.json", {
        state: { ...state, pluginState: { [SupervisedSession.key]: { ...v1, usage: { tokens: 1 } } } }
      }))
      assert.strictEqual(broken._tag, "CheckpointCorrupt")
    }))
})

describe("SupervisedSession: a finished session given a follow-up (issue 30)", () => {
  const secret = "Tell me the secret."
  const followUp = "Then say what you can."
  const censor = Guardrail.output(({ text }) =>
    Effect.succeed(text.includes("secret") ? Guardrail.trip("it names the secret") : Guardrail.pass), { name: "censor" })
  const tells = { text: "The secret is 42.", usage: { input: 10, output: 5 } }
  const declines = { text: "I cannot tell you that.", usage: { input: 20, output: 5 } }
  const inStore = (store: CheckpointStore.Service) => Effect.provideService(CheckpointStore.CheckpointStore, store)

  it.effect("a guardrail trip, then resumed with a follow-up: a new act round, the transcript Agent.runContinue's, Converged", () =>
    Effect.gen(function*() {
      // the reference: Agent.run, then Agent.runContinue with the follow-up queued
      const reference = yield* Effect.gen(function*() {
        const first = yield* Agent.run({ prompt: secret, plugins: [censor] })
        const steering = yield* Steering.make()
        yield* steering.followUp(followUp)
        return yield* Agent.runContinue(first.state, { plugins: [censor], steering })
      }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer([tells, declines]), toolsOn(new Map()))))
      assert.strictEqual(reference.outcome._tag, "Completed")

      // process 1: the supervised session's run trips the guardrail
      const store = CheckpointStore.memory()
      const first = yield* SupervisedSession.run({ id: "trip", task: secret, agent: { plugins: [censor] } }).pipe(
        inStore(store),
        Effect.provide(Layer.merge(ScriptedModel.layer([tells]), toolsOn(new Map())))
      )
      assert.deepStrictEqual(first.outcome, Outcome.guardrailTripped("censor", "it names the secret", "output"))

      // process 2: resumed with the follow-up queued on its steering
      const steering = yield* Steering.make()
      yield* steering.followUp(followUp)
      const events: Array<AgentEvent.AgentEvent> = []
      let checked = 0
      const check = Check.make("answered", Effect.sync(() => (checked++, { status: "pass", summary: "yes" } as const)))
      const result = yield* SupervisedSession.resume({
        id: "trip",
        checks: [check],
        steering,
        agent: { plugins: [censor] },
        onEvent: (event) => Effect.sync(() => void events.push(event))
      }).pipe(inStore(store), Effect.provide(Layer.merge(ScriptedModel.layer([declines]), toolsOn(new Map()))))

      // the follow-up's round: one act turn with it as the message, the checks after it, and the run converges
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.strictEqual(result.turns, 2)
      assert.strictEqual(result.reply, "I cannot tell you that.")
      assert.strictEqual(checked, 1)
      assert.deepStrictEqual(result.state.messages, reference.state.messages)
      assert.deepStrictEqual(result.state.messages.map((m) => [m.role, Message.textOf(m)]).slice(-2), [
        ["user", followUp],
        ["assistant", "I cannot tell you that."]
      ])
      assert.deepStrictEqual(result.state.followUps, [])
      assert.deepStrictEqual(result.usage.input, 30)
      // delivered as Agent.runContinue delivers a follow-up: FollowUpDelivered, in the worker's turn
      const tags = events.map(SupervisorEvent.tagOf).filter((tag) =>
        ["AgentStart", "SessionResumed", "WorkerTurnStart", "FollowUpDelivered", "WorkerTurnEnd", "CheckResult", "AgentEnd"]
          .includes(tag)
      )
      assert.deepStrictEqual(tags, [
        "AgentStart",
        "SessionResumed",
        "WorkerTurnStart",
        "FollowUpDelivered",
        "WorkerTurnEnd",
        "CheckResult",
        "AgentEnd"
      ])
      assert.deepStrictEqual(SupervisorEvent.ofTag(events, "WorkerTurnStart").map((e) => [e.turn, e.message]), [[2, followUp]])
      const delivered = events.find((e) => e._tag === "FollowUpDelivered")
      assert.deepStrictEqual(delivered?._tag === "FollowUpDelivered" ? delivered.messages.map(Message.textOf) : [], [followUp])
      const end = events.at(-1)
      assert.deepStrictEqual(
        end?._tag === "AgentEnd" ? end.outcome : undefined,
        SupervisorOutcome.toOutcome({ _tag: "Converged", turns: 2 })
      )
      // the session's checkpoint is the continued run's end
      const saved = yield* SupervisedSession.load("trip").pipe(inStore(store))
      assert.deepStrictEqual(saved.outcome, { _tag: "Converged", turns: 2 })
      assert.isUndefined(saved.pendingFollowUps)
      assert.deepStrictEqual(saved.agentState?.messages, result.state.messages)
    }))

  it.effect("a converged session resumed with a follow-up: the worker gets it, the checks run again; resumed with none, it ends as it ended", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const asked: Array<Worker.TurnRequest> = []
      const worker = Worker.make("w", (request) =>
        Effect.sync(() => {
          asked.push(request)
          return { text: `turn ${asked.length}`, usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: undefined }
        }))
      let checked = 0
      const check = Check.make("always", Effect.sync(() => (checked++, { status: "pass", summary: "ok" } as const)))
      const options = { id: "c", checks: [check], baseline: false, worker }
      const first = yield* SupervisedSession.run({ ...options, task }).pipe(inStore(store))
      assert.deepStrictEqual(first.outcome, { _tag: "Converged", turns: 1 })

      // nothing queued (a steering handle, empty): the stored ending, no turn, no check
      const idle = yield* SupervisedSession.resume({ ...options, steering: yield* Steering.make() }).pipe(inStore(store))
      assert.deepStrictEqual(idle.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual([asked.length, checked], [1, 1])

      const steering = yield* Steering.make()
      yield* steering.followUp("Also update the docs.")
      const events: Array<AgentEvent.AgentEvent> = []
      const result = yield* SupervisedSession.resume({
        ...options,
        steering,
        onEvent: (event) => Effect.sync(() => void events.push(event))
      }).pipe(inStore(store))
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(asked.map((r) => [r.phase, r.message]), [["act", task], ["act", "Also update the docs."]])
      assert.strictEqual(checked, 2)
      // an external worker gets the text; the run says the follow-up was delivered, before the turn's reply
      const tags = events.map(SupervisorEvent.tagOf).filter((tag) =>
        ["WorkerTurnStart", "FollowUpDelivered", "WorkerTurnEnd", "CheckResult"].includes(tag)
      )
      assert.deepStrictEqual(tags, ["WorkerTurnStart", "FollowUpDelivered", "WorkerTurnEnd", "CheckResult"])
      // the session's transcript has the follow-up and its reply
      const stored = yield* store.load("c")
      assert.deepStrictEqual(stored.state.messages.map(Message.textOf), [task, "turn 1", "Also update the docs.", "turn 2"])
    }))

  it.effect("stopped during the follow-up's turn: the checkpoint holds the follow-up, and the resumed run delivers it", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const asked: Array<string> = []
      const hang = yield* Deferred.make<void>()
      const worker = (hangOn: string | undefined) =>
        Worker.make("w", (request) =>
          Effect.suspend(() => {
            asked.push(request.message)
            return request.message === hangOn
              ? Effect.andThen(Deferred.succeed(hang, void 0), Effect.never)
              : Effect.succeed({ text: `re: ${request.message}`, usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: undefined })
          }))
      yield* SupervisedSession.run({ id: "f", task, worker: worker(undefined) }).pipe(inStore(store))
      const steering = yield* Steering.make()
      yield* steering.followUp("Also the docs.")
      const fiber = yield* Effect.forkChild(
        SupervisedSession.resume({ id: "f", worker: worker("Also the docs."), steering }).pipe(inStore(store))
      )
      yield* Deferred.await(hang)
      yield* Fiber.interrupt(fiber)
      const saved = yield* SupervisedSession.load("f").pipe(inStore(store))
      assert.isUndefined(saved.outcome)
      assert.deepStrictEqual([saved.turns, saved.pendingMessage], [1, "Also the docs."])
      assert.deepStrictEqual(saved.pendingFollowUps?.map(Message.textOf), ["Also the docs."])

      // resumed with nothing queued: it goes on with the saved follow-up, delivered once
      const events: Array<AgentEvent.AgentEvent> = []
      const result = yield* SupervisedSession.resume({
        id: "f",
        worker: worker(undefined),
        onEvent: (event) => Effect.sync(() => void events.push(event))
      }).pipe(inStore(store))
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(asked, [task, "Also the docs.", "Also the docs."])
      assert.deepStrictEqual(events.filter((e) => e._tag === "FollowUpDelivered").length, 1)
      const resumed = events.find((e) => e._tag === "SessionResumed")
      assert.strictEqual(resumed?._tag === "SessionResumed" ? resumed.restored.followUps : undefined, 1)
      assert.isUndefined((yield* SupervisedSession.load("f").pipe(inStore(store))).pendingFollowUps)
    }))

  it.effect("ended by a budget, resumed with nothing queued under the same limits: the same ending, its failing checks named", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      let turns = 0
      const worker = Worker.make("w", () =>
        Effect.sync(() => (turns++, { text: `turn ${turns}`, usage: { inputTokens: 60, outputTokens: 0 }, resumeToken: undefined })))
      const fails = Check.make("f", Effect.succeed({ status: "fail", summary: "no" } as const))
      const options = { id: "b", worker, checks: [fails], baseline: false, maxTokens: 100 }
      const first = yield* SupervisedSession.run({ ...options, task }).pipe(inStore(store))
      assert.deepStrictEqual(first.outcome, { _tag: "Unverified", budget: "tokens", limit: 100, used: 120, failing: ["f"] })
      const again = yield* SupervisedSession.resume(options).pipe(inStore(store))
      // no act turn, no round of checks: the ending and the last round are the run's
      assert.strictEqual(turns, 2)
      assert.deepStrictEqual(again.outcome, first.outcome)
      assert.deepStrictEqual(again.checks, first.checks)
      assert.deepStrictEqual((yield* SupervisedSession.load("b").pipe(inStore(store))).outcome, first.outcome)
    }))

  it.effect("the checks pass with a follow-up queued and no turn left: Converged, the follow-up saved undelivered, delivered once later", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const asked: Array<string> = []
      const worker = Worker.make("w", (request) =>
        Effect.sync(() => {
          asked.push(request.message)
          return { text: `turn ${asked.length}`, usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: undefined }
        }))
      const steering = yield* Steering.make()
      let rounds = 0
      // the first round queues a follow-up while it runs, and passes
      const check = Check.make("passes", Effect.suspend(() =>
        Effect.andThen(
          rounds++ === 0 ? steering.followUp("One more thing.") : Effect.void,
          Effect.succeed({ status: "pass", summary: "ok" } as const)
        )))
      const options = { id: "cap", worker, checks: [check], baseline: false }
      const first = yield* SupervisedSession.run({ ...options, task, maxTurns: 1, steering }).pipe(inStore(store))
      assert.deepStrictEqual(first.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(first.state.followUps.map(Message.textOf), ["One more thing."])
      const saved = yield* SupervisedSession.load("cap").pipe(inStore(store))
      assert.deepStrictEqual(saved.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(saved.pendingFollowUps?.map(Message.textOf), ["One more thing."])

      // resumed under the same cap: still no turn for it, the same ending, the follow-up still returned
      const same = yield* SupervisedSession.resume({ ...options, maxTurns: 1 }).pipe(inStore(store))
      assert.deepStrictEqual(same.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(same.state.followUps.map(Message.textOf), ["One more thing."])
      assert.deepStrictEqual(asked, [task])

      // resumed with room: the saved follow-up is the next act round's message, delivered once
      const later = yield* SupervisedSession.resume({ ...options, maxTurns: 5 }).pipe(inStore(store))
      assert.deepStrictEqual(later.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(asked, [task, "One more thing."])
      assert.deepStrictEqual(later.state.followUps, [])
      assert.isUndefined((yield* SupervisedSession.load("cap").pipe(inStore(store))).pendingFollowUps)
    }))

  it.effect("a rejected plan stays rejected: a follow-up does not start the act phase, and comes back undelivered", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      let turns = 0
      const worker = Worker.make("w", () =>
        Effect.sync(() => (turns++, { text: "a plan", usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: undefined })))
      const reject: Approvals.Service = {
        decide: () => Effect.succeed(Approvals.approved),
        decidePlan: () => Effect.succeed({ _tag: "Reject", notes: "no" })
      }
      const first = yield* SupervisedSession.run({ id: "r", task, plan: true, worker }).pipe(
        inStore(store),
        Effect.provideService(Approvals.Approvals, reject)
      )
      assert.deepStrictEqual(first.outcome, { _tag: "Rejected", notes: "no" })
      const steering = yield* Steering.make()
      yield* steering.followUp("Act anyway.")
      const again = yield* SupervisedSession.resume({ id: "r", plan: true, worker, steering }).pipe(inStore(store))
      assert.deepStrictEqual(again.outcome, { _tag: "Rejected", notes: "no" })
      assert.strictEqual(turns, 1)
      assert.deepStrictEqual(again.state.followUps.map(Message.textOf), ["Act anyway."])
    }))
})

describe("SupervisedSession.supervisor: supervised sessions through the Sessions service", () => {
  const turns: ReadonlyArray<ScriptedModel.Turn> = [
    { toolCalls: [{ id: "w1", name: "write_file", params: { path: "ok.txt", content: "no" } }], usage: { input: 10 } },
    { text: "wrote no", usage: { input: 20 } },
    { toolCalls: [{ id: "w2", name: "write_file", params: { path: "ok.txt", content: "yes" } }], usage: { input: 30 } },
    { text: "wrote yes", usage: { input: 40 } },
    { text: "and the notes", usage: { input: 50 } }
  ]
  const sessionsOn = (store: CheckpointStore.Service, files: Map<string, string>) =>
    Sessions.layer({ supervisors: { ok: SupervisedSession.supervisor({ checks: [okCheck(files)], maxTurns: 3 }) } }).pipe(
      Layer.provide(Layer.mergeAll(
        ScriptedModel.layer(turns),
        toolsOn(files),
        Layer.succeed(CheckpointStore.CheckpointStore, store)
      ))
    )

  it.live("a session under a supervisor: checked turns, its events, its outcome; a follow-up is a new act round", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const files = new Map<string, string>()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions.Sessions
        yield* sessions.start({ sessionId: "fix", prompt: task, supervisor: "ok" })
        const result = yield* sessions.result("fix").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(result.outcome), { _tag: "Converged", turns: 2 })
        assert.strictEqual(files.get("ok.txt"), "yes")
        const events = yield* sessions.events("fix")
        const tags = events.map(({ event }) => SupervisorEvent.tagOf(event) ?? event._tag)
        assert.deepStrictEqual(tags.filter((tag) => tag === "WorkerTurnStart").length, 2)
        // one ending, the supervisor's, and last: the worker's runs are inside it
        assert.deepStrictEqual(tags.filter((tag) => tag === "AgentEnd").length, 1)
        assert.deepStrictEqual(tags.at(-1), "AgentEnd")
        // the checkpoint is the supervisor's: the store holds a supervised run
        const saved = yield* SupervisedSession.load("fix").pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
        assert.strictEqual(saved.turns, 2)
        // a follow-up: one more act round, checked, whose ending is the next result
        const seen = events.at(-1)?.seq ?? 0
        yield* sessions.followUp("fix", "write the notes too")
        const next = yield* sessions.result("fix", seen).pipe(Effect.timeout(patience))
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(next.outcome), { _tag: "Converged", turns: 3 })
        assert.deepStrictEqual(Message.textOf(next.state.messages.at(-1)!), "and the notes")
      }).pipe(Effect.provide(sessionsOn(store, files)))
      // a later process: started without its supervisor, the plain loop does not take the checkpoint up
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions.Sessions
        yield* sessions.start({ sessionId: "fix", prompt: task })
        const refused = yield* Effect.flip(sessions.result("fix").pipe(Effect.timeout(patience)))
        assert.strictEqual(refused._tag, "ConfigError")
        assert.include(refused.message, "start it again with its supervisor")
      }).pipe(Effect.provide(sessionsOn(store, new Map())))
      // another: read before it is started (known from the store alone), then started under its supervisor
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions.Sessions
        assert.deepStrictEqual(yield* sessions.events("fix"), [])
        yield* sessions.start({ sessionId: "fix", prompt: [], supervisor: "ok" })
        const again = yield* sessions.result("fix").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(again.outcome), { _tag: "Converged", turns: 3 })
      }).pipe(Effect.provide(sessionsOn(store, new Map([["ok.txt", "yes"]]))))
      // and another: followed up by its id alone, it goes on under the supervisor its checkpoint names
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions.Sessions
        const seen = (yield* sessions.events("fix")).at(-1)?.seq ?? 0
        yield* sessions.followUp("fix", "write the notes too")
        const next = yield* sessions.result("fix", seen).pipe(Effect.timeout(patience))
        // its supervisor's turn cap (3) leaves no round for it: converged as it was, the follow-up returned
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(next.outcome), { _tag: "Converged", turns: 3 })
        assert.deepStrictEqual(next.state.followUps.map(Message.textOf), ["write the notes too"])
      }).pipe(Effect.provide(sessionsOn(store, new Map([["ok.txt", "yes"]]))))
    }))

  it.live("its plan waits for a decision by its iteration (pending, decidePlan); approved, the act phase runs", () =>
    Effect.gen(function*() {
      const files = new Map<string, string>()
      const planned: ReadonlyArray<ScriptedModel.Turn> = [
        { text: "1. write yes to ok.txt", usage: { input: 5 } },
        { toolCalls: [{ id: "w1", name: "write_file", params: { path: "ok.txt", content: "yes" } }], usage: { input: 10 } },
        { text: "wrote yes", usage: { input: 20 } }
      ]
      const layer = Sessions.layer({
        supervisors: { planned: SupervisedSession.supervisor({ checks: [okCheck(files)], plan: true, maxTurns: 2 }) }
      }).pipe(Layer.provide(Layer.mergeAll(ScriptedModel.layer(planned), toolsOn(files), CheckpointStore.layerMemory)))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions.Sessions
        yield* sessions.start({ sessionId: "plan", prompt: task, supervisor: "planned" })
        const waiting = yield* sessions.pending("plan").pipe(
          Effect.repeat({ until: (pending) => pending.plan !== undefined, schedule: Schedule.spaced("20 millis"), times: 3000 })
        )
        assert.deepStrictEqual([waiting.plan?.iteration, waiting.plan?.plan], [1, "1. write yes to ok.txt"])
        // a decision for another iteration answers nothing
        assert.isFalse(yield* sessions.decidePlan("plan", 2, { _tag: "Approve" }))
        assert.isFalse(yield* sessions.decideTurn("plan", 1, { _tag: "Approve" }))
        assert.isTrue(yield* sessions.decidePlan("plan", 1, { _tag: "Approve" }))
        const result = yield* sessions.result("plan").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(result.outcome), { _tag: "Converged", turns: 1 })
        assert.strictEqual((yield* sessions.pending("plan")).plan, undefined)
      }).pipe(Effect.provide(layer))
    }))

  it.effect("refusals are typed: a supervisor the layer lacks, a task that is not text; nothing starts", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions.Sessions
      const unknown = yield* Effect.flip(sessions.start({ sessionId: "a", prompt: task, supervisor: "nope" }))
      assert.strictEqual(unknown._tag, "ConfigError")
      assert.include(unknown.message, `it knows ["ok"]`)
      const messages = yield* Effect.flip(sessions.start({ sessionId: "b", prompt: [Message.user(task)], supervisor: "ok" }))
      assert.strictEqual(messages._tag, "ConfigError")
      assert.include(messages.message, "task is text")
      assert.strictEqual((yield* Effect.flip(sessions.events("a")))._tag, "CheckpointMissing")
    }).pipe(Effect.provide(sessionsOn(CheckpointStore.memory(), new Map()))))
})

describe("SupervisedSession.supervisor on the durable layer: supervised sessions as workflows", () => {
  /** A runner in this process on the in-memory engine (which replays a body that waited), and the sessions over it. */
  const inMemory = Layer.merge(WorkflowEngine.layerMemory, DurableSession.layerMemoryStore)
  const durableOn = (
    turns: ReadonlyArray<ScriptedModel.Turn>,
    files: Map<string, string>,
    supervision: SupervisedSession.Supervision,
    checked: { runs: number },
    engineAndStore: Layer.Layer<WorkflowEngine.WorkflowEngine | DurableSession.Store, unknown> = inMemory
  ) => {
    const counted = Check.make("ok.txt says yes", Effect.suspend(() => {
      checked.runs++
      return okCheck(files).run
    }))
    return DurableSession.layerSessions.pipe(
      Layer.provideMerge(DurableSession.layer({
        supervisors: { ok: SupervisedSession.supervisor({ ...supervision, checks: [counted] }) },
        idle: "10 seconds"
      })),
      Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(turns), toolsOn(files))),
      Layer.provideMerge(engineAndStore)
    )
  }
  const waitFor = <A>(effect: Effect.Effect<A, unknown>, until: (value: A) => boolean) =>
    effect.pipe(Effect.repeat({ until, schedule: Schedule.spaced("20 millis"), times: 3000 }))

  const planned = (engineAndStore?: Layer.Layer<WorkflowEngine.WorkflowEngine | DurableSession.Store, unknown>) =>
    Effect.gen(function*() {
      const files = new Map<string, string>()
      const checked = { runs: 0 }
      const turns: ReadonlyArray<ScriptedModel.Turn> = [
        { text: "1. write yes to ok.txt", usage: { input: 5 } },
        { toolCalls: [{ id: "w1", name: "write_file", params: { path: "ok.txt", content: "yes" } }], usage: { input: 10 } },
        { text: "wrote yes", usage: { input: 20 } },
        { text: "and the notes", usage: { input: 30 } }
      ]
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions.Sessions
        yield* sessions.start({ sessionId: "plan", prompt: task, supervisor: "ok" })
        const waiting = yield* waitFor(sessions.pending("plan"), (pending) => pending.plan !== undefined)
        assert.deepStrictEqual([waiting.plan?.iteration, waiting.plan?.plan], [1, "1. write yes to ok.txt"])
        assert.strictEqual(checked.runs, 1, "the baseline ran before the plan")
        // a decision for another iteration, or for a turn, answers nothing
        assert.isFalse(yield* sessions.decidePlan("plan", 2, { _tag: "Approve" }))
        assert.isFalse(yield* sessions.decideTurn("plan", 1, { _tag: "Approve" }))
        assert.isTrue(yield* sessions.decidePlan("plan", 1, { _tag: "Approve" }))
        // the second decision of the same plan is not kept
        assert.isFalse(yield* sessions.decidePlan("plan", 1, { _tag: "Reject", notes: "late" }))
        const result = yield* sessions.result("plan").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(result.outcome), { _tag: "Converged", turns: 1 })
        assert.strictEqual(files.get("ok.txt"), "yes")
        // the body waited, then ran again from its start: the baseline and the plan turn came from its records
        assert.strictEqual(checked.runs, 2)
        const events = yield* sessions.events("plan")
        const tags = events.map(({ event }) => SupervisorEvent.tagOf(event) ?? event._tag)
        const count = (tag: string) => tags.filter((seen) => seen === tag).length
        assert.deepStrictEqual(
          [count("PlanProposed"), count("PlanApproved"), count("CheckResult"), count("WorkerTurnStart"), count("AgentEnd")],
          [1, 1, 2, 2, 1]
        )
        assert.strictEqual(new Set(events.map(({ seq }) => seq)).size, events.length)
        assert.deepStrictEqual((yield* sessions.pending("plan")).plan, undefined)
        // a follow-up: one more act round, checked, whose ending is the next result
        yield* sessions.followUp("plan", "write the notes too")
        const next = yield* sessions.result("plan", events.at(-1)?.seq ?? 0).pipe(Effect.timeout(patience))
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(next.outcome), { _tag: "Converged", turns: 2 })
        assert.deepStrictEqual(Message.textOf(next.state.messages.at(-1)!), "and the notes")
        assert.strictEqual(checked.runs, 3)
      }).pipe(Effect.provide(durableOn(turns, files, { plan: true, maxTurns: 3 }, checked, engineAndStore)))
    })

  it.live("its plan waits durably (pending, decidePlan by iteration); the body replays: no check and no model call is made again; a follow-up is a new act round", () =>
    planned())

  it.live("the same on PostgreSQL, a runner in this process (skipped when PostgreSQL cannot start)", (context) =>
    Effect.gen(function*() {
      const available = Postgres.availability()
      if ("unavailable" in available) {
        console.log(`skipped: ${available.unavailable}`)
        return context.skip()
      }
      const pg = yield* Postgres.scoped
      yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
      const port = yield* Effect.promise(Postgres.freePort)
      yield* planned(DurableSession.layerSqlStore.pipe(Layer.provideMerge(engine(pg.url, port))))
    }).pipe(Effect.scoped), 120_000)

  it.live("a turn's feedback waits durably for the operator (approveTurns): decideTurn replaces it, by its turn", () =>
    Effect.gen(function*() {
      const files = new Map<string, string>()
      const checked = { runs: 0 }
      const turns: ReadonlyArray<ScriptedModel.Turn> = [
        { toolCalls: [{ id: "w1", name: "write_file", params: { path: "ok.txt", content: "no" } }], usage: { input: 10 } },
        { text: "wrote no", usage: { input: 20 } },
        { toolCalls: [{ id: "w2", name: "write_file", params: { path: "ok.txt", content: "yes" } }], usage: { input: 30 } },
        { text: "wrote yes", usage: { input: 40 } },
        // the second session's
        { toolCalls: [{ id: "w3", name: "write_file", params: { path: "ok.txt", content: "no" } }], usage: { input: 10 } },
        { text: "wrote no", usage: { input: 20 } }
      ]
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions.Sessions
        yield* sessions.start({ sessionId: "gated", prompt: task, supervisor: "ok" })
        const waiting = yield* waitFor(sessions.pending("gated"), (pending) => pending.turn !== undefined)
        assert.strictEqual(waiting.turn?.turn, 1)
        assert.include(waiting.turn?.feedback, "got no")
        assert.isFalse(yield* sessions.decideTurn("gated", 2, { _tag: "Approve" }))
        assert.isTrue(yield* sessions.decideTurn("gated", 1, { _tag: "Replace", feedback: "Write yes, not no." }))
        const result = yield* sessions.result("gated").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(SupervisorOutcome.fromOutcome(result.outcome), { _tag: "Converged", turns: 2 })
        // the worker's second act turn was given the operator's text
        const texts = result.state.messages.filter((message) => message.role === "user").map(Message.textOf)
        assert.include(texts, "Write yes, not no.")
        assert.strictEqual(checked.runs, 3)
        // answered Interrupt, the run ends Cancelled, as a cancel ends it (the workflow does not end for good)
        files.delete("ok.txt")
        yield* sessions.start({ sessionId: "stopped", prompt: task, supervisor: "ok" })
        const asked = yield* waitFor(sessions.pending("stopped"), (pending) => pending.turn !== undefined)
        assert.isTrue(yield* sessions.decideTurn("stopped", asked.turn!.turn, { _tag: "Interrupt" }))
        const ended = yield* sessions.result("stopped").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(ended.outcome, { _tag: "Cancelled", reason: "interrupted by the operator" })
        assert.deepStrictEqual((yield* sessions.pending("stopped")).turn, undefined)
        assert.strictEqual(checked.runs, 5)
      }).pipe(Effect.provide(durableOn(turns, files, { approveTurns: true, maxTurns: 3 }, checked)))
    }))

  it.live("a cancel while its plan waits for the operator ends the run Cancelled there; the plan takes no decision after", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions.Sessions
      yield* sessions.start({ sessionId: "halted", prompt: task, supervisor: "ok" })
      yield* waitFor(sessions.pending("halted"), (pending) => pending.plan !== undefined)
      yield* sessions.cancel("halted", "not now")
      const result = yield* sessions.result("halted").pipe(Effect.timeout(patience))
      assert.deepStrictEqual(result.outcome, { _tag: "Cancelled", reason: "not now" })
      assert.deepStrictEqual((yield* sessions.pending("halted")).plan, undefined)
      assert.isFalse(yield* sessions.decidePlan("halted", 1, { _tag: "Approve" }))
    }).pipe(Effect.provide(durableOn([{ text: "1. write yes", usage: { input: 5 } }], new Map(), { plan: true }, { runs: 0 }))))

  it.live("refusals: a supervisor the runner lacks ends the session with ConfigError; a task that is not text is refused at start", () =>
    Effect.gen(function*() {
      const sessions = yield* Sessions.Sessions
      yield* sessions.start({ sessionId: "nope", prompt: task, supervisor: "nope" })
      const unknown = yield* Effect.flip(sessions.result("nope").pipe(Effect.timeout(patience)))
      assert.strictEqual(unknown._tag, "ConfigError")
      assert.include(unknown.message, `it knows ["ok"]`)
      const messages = yield* Effect.flip(sessions.start({ sessionId: "b", prompt: [Message.user(task)], supervisor: "ok" }))
      assert.strictEqual(messages._tag, "ConfigError")
      assert.include(messages.message, "task is text")
    }).pipe(Effect.provide(durableOn([], new Map(), {}, { runs: 0 }))))
})
