/**
 * The same supervised session in this process (`Sessions.layer`) and as a workflow on the
 * in-memory engine, which replays the body from its start each time a durable wait it made completes
 * (`DurableSession.layer({ supervisors })`). The CHANGELOG's promise: "the same events and endings as in this
 * process"; docs/sessions.md: "a replay runs no check again". Each scenario compares what a user sees: the events (but the
 * supervisor's checkpoints, which the durable layer keeps as its records), the ending, how many model calls and
 * check runs were made.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Layer, Schedule, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { WorkflowEngine } from "effect/workflow"
import { Agent, Approvals, Message, SubAgent, ToolRegistry } from "effect-agent"
import { CheckpointStore, DurableSession, Sessions } from "effect-agent/session"
import { Check, SupervisedSession, SupervisorEvent, SupervisorOutcome, Worker } from "effect-agent/supervisor"
import { ScriptedModel } from "effect-agent/testing"
import { patience } from "../patience.ts"

type AgentName = "main" | "billing" | "researcher"
const systems: Record<AgentName, string> = {
  main: "You are the main agent.",
  billing: "You are billing.",
  researcher: "You are the researcher."
}

/** The scenario in progress: its files, its counters. */
interface Current {
  readonly files: Map<string, string>
  modelCalls: number
  checkRuns: number
  readonly script: (agent: AgentName, replies: number, calls: number) => ScriptedModel.Turn | undefined
}
let current: Current | undefined
const now = (): Current => {
  if (current === undefined) throw new Error("no scenario in progress")
  return current
}

const WriteFile = Tool.make("write_file", {
  parameters: Schema.Struct({ path: Schema.String, content: Schema.String }),
  success: Schema.String
})
const Deploy = Tool.make("deploy", {
  parameters: Schema.Struct({ env: Schema.String }),
  success: Schema.String,
  needsApproval: true
})
const writeFile = ({ path, content }: { readonly path: string; readonly content: string }) =>
  Effect.sync(() => (now().files.set(path, content), "written"))
const Basic = Toolkit.make(WriteFile, Deploy)
const basicTools = ToolRegistry.layer(Basic).pipe(Layer.provide(Basic.toLayer({
  write_file: writeFile,
  deploy: ({ env }) => Effect.succeed(`deployed to ${env}`)
})))
const Topic = Schema.Struct({ topic: Schema.String })
const billing = Agent.define({
  name: "billing",
  description: "Handles billing",
  system: systems.billing,
  input: Topic,
  prompt: ({ topic }) => `billing: ${topic}`,
  tools: basicTools
})
const researcher = Agent.define({
  name: "researcher",
  description: "Looks into a topic",
  system: systems.researcher,
  input: Topic,
  prompt: ({ topic }) => `research ${topic}`,
  tools: basicTools
})
const Kit = Toolkit.make(WriteFile, Deploy, Agent.asTool(researcher), Agent.handoff(billing))
const tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
  write_file: writeFile,
  deploy: ({ env }) => Effect.sync(() => (now().files.set("deployed", env), `deployed to ${env}`)),
  researcher: SubAgent.handler(researcher),
  transfer_to_billing: SubAgent.handoffHandler(billing)
})))
const agentOf = (request: ScriptedModel.Request): AgentName => {
  const system = request.prompt.content.find((message) => message.role === "system")
  const text = system === undefined ? "" : typeof system.content === "string" ? system.content : ""
  return text === systems.billing ? "billing" : text === systems.researcher ? "researcher" : "main"
}
const model = ScriptedModel.layer((_index, request) => {
  const scenario = now()
  scenario.modelCalls++
  return scenario.script(
    agentOf(request),
    request.prompt.content.filter((message) => message.role === "assistant").length,
    scenario.modelCalls
  )
}, { record: false })

const okCheck = Check.make("ok.txt says yes", Effect.sync(() => {
  const scenario = now()
  scenario.checkRuns++
  return scenario.files.get("ok.txt") === "yes"
    ? { status: "pass" as const, summary: "yes" }
    : { status: "fail" as const, summary: `got ${scenario.files.get("ok.txt") ?? "nothing"}` }
}))
const notesCheck = Check.make("the notes say what ok.txt says", Effect.sync(() => {
  const scenario = now()
  scenario.checkRuns++
  return scenario.files.get("notes") === scenario.files.get("ok.txt")
    ? { status: "pass" as const, summary: "notes" }
    : { status: "fail" as const, summary: "the notes differ" }
}))
const verifierCheck = Check.make("reviewer", Effect.sync(() => {
  const scenario = now()
  scenario.checkRuns++
  return { status: "pass" as const, summary: "looks good" }
}), { role: "verifier" })

interface Scenario {
  readonly name: string
  readonly supervision: SupervisedSession.Supervision
  readonly approvals?: Approvals.Service | undefined
  /** The typed output the session asks for (the layers' `answer`). */
  readonly output?: boolean | undefined
  readonly script: Current["script"]
  /** Answers what the session asks, until its first result: that result. */
  readonly drive: (sessions: Sessions.Sessions["Service"], sessionId: string) => Effect.Effect<number | void, unknown>
}

interface Seen {
  readonly tags: ReadonlyArray<string>
  readonly outcome: unknown
  readonly modelCalls: number
  readonly checkRuns: number
  readonly files: Record<string, string>
  readonly lastText: string
  /** What the result returns undelivered. */
  readonly followUps: ReadonlyArray<string>
  /** Every run's ending: its outcome's tag and what it returned undelivered. */
  readonly endings: ReadonlyArray<string>
  readonly output: unknown
}

const own = new Set(["CheckpointSaved", "SessionResumed"])

const observe = (scenario: Scenario, layer: Layer.Layer<Sessions.Sessions, unknown>) =>
  Effect.gen(function*() {
    current = { files: new Map(), modelCalls: 0, checkRuns: 0, script: scenario.script }
    const state = current
    return yield* Effect.gen(function*() {
      const sessions = yield* Sessions.Sessions
      yield* sessions.start({
        sessionId: "s",
        prompt: "make ok.txt say yes",
        system: systems.main,
        supervisor: "sup",
        ...(scenario.output === true ? { output: "answer" } : {})
      })
      const after = yield* scenario.drive(sessions, "s").pipe(Effect.tapCause(() =>
        Effect.flatMap(sessions.events("s"), (events) =>
          Effect.logError("events so far", events.map(({ event }) => {
            const own = SupervisorEvent.of(event)
            return own === undefined ? event._tag : `${own._tag}${"feedback" in own ? `(${own.feedback.slice(0, 60)})` : ""}`
          }))
        )))
      const exit = yield* Effect.exit(sessions.result("s", after ?? 0).pipe(Effect.timeout(patience)))
      if (exit._tag === "Failure" && Cause.hasInterrupts(exit.cause)) return yield* Effect.failCause(exit.cause)
      // a result that fails: what it fails with, as a user sees it
      const failed = exit._tag === "Failure" ? Cause.pretty(exit.cause).split("\n")[0] : undefined
      const result = exit._tag === "Success" ? exit.value : undefined
      const events = yield* sessions.events("s")
      const tags = events.map(({ event }) => SupervisorEvent.tagOf(event) ?? event._tag).filter((tag) => !own.has(tag))
      const seen: Seen = {
        tags,
        outcome: result === undefined ? failed : wallTime(SupervisorOutcome.fromOutcome(result.outcome) ?? result.outcome),
        modelCalls: state.modelCalls,
        checkRuns: state.checkRuns,
        files: Object.fromEntries(state.files),
        lastText: result === undefined ? "" : Message.textOf(result.state.messages.at(-1)!),
        followUps: result === undefined ? [] : result.state.followUps.map(Message.textOf),
        output: result?.state.output?.value,
        endings: events.flatMap(({ event }) =>
          event._tag === "AgentEnd"
            ? [`${event.outcome?._tag ?? "none"} ${JSON.stringify(event.result?.state.followUps.map(Message.textOf) ?? [])}`]
            : []
        )
      }
      return seen
    }).pipe(Effect.provide(layer))
  }).pipe(Effect.ensuring(Effect.sync(() => void (current = undefined))))

const outputs = { answer: Schema.Struct({ answer: Schema.Finite }) }

const layers = (scenario: Scenario) => {
  const supervisors = { sup: SupervisedSession.supervisor(scenario.supervision) }
  const app = Layer.mergeAll(model, tools, ...(scenario.approvals === undefined ? [] : [Approvals.layer(scenario.approvals)]))
  const inProcess = Sessions.layer({ supervisors, agents: [billing], outputs }).pipe(
    Layer.provide(Layer.mergeAll(app, CheckpointStore.layerMemory))
  )
  const durable = DurableSession.layerSessions.pipe(
    Layer.provideMerge(DurableSession.layer({ supervisors, agents: [billing], outputs, idle: "10 seconds" })),
    Layer.provideMerge(app),
    Layer.provideMerge(Layer.merge(WorkflowEngine.layerMemory, DurableSession.layerMemoryStore))
  )
  return { inProcess, durable }
}

const waitFor = <A, E, R>(effect: Effect.Effect<A, E, R>, until: (value: A) => boolean) =>
  effect.pipe(
    Effect.repeat({ until, schedule: Schedule.spaced("20 millis"), times: 3000 }),
    Effect.tap((value) => until(value) ? Effect.void : Effect.die(`waited 5 s in vain; last seen ${JSON.stringify(value)}`))
  )

const compare = (scenario: Scenario) =>
  Effect.gen(function*() {
    const { durable, inProcess } = layers(scenario)
    const expected = yield* observe(scenario, inProcess).pipe(Effect.tapCause((cause) => Effect.logError("in process", cause)))
    const actual = yield* observe(scenario, durable).pipe(Effect.tapCause((cause) => Effect.logError("durable", cause)))
    assert.deepStrictEqual(actual, expected)
  })

const write = (id: string, content: string, path = "ok.txt"): ScriptedModel.Turn => ({
  toolCalls: [{ id, name: "write_file", params: { path, content } }],
  usage: { input: 10 }
})
const say = (text: string): ScriptedModel.Turn => ({ text, usage: { input: 5 } })

/** An ending by the wall clock: how much past its limit it went is the machine's, not the layer's. */
const wallTime = (outcome: unknown): unknown =>
  typeof outcome === "object" && outcome !== null && "budget" in outcome && outcome.budget === "wallClock" &&
    "used" in outcome && "limit" in outcome && typeof outcome.used === "number" && typeof outcome.limit === "number"
    ? { ...outcome, used: outcome.used >= outcome.limit ? "past its limit" : "within its limit" }
    : outcome

describe("durable supervised sessions behave as in this process", () => {
  it.live("a plan refined, then approved (iterations 1 and 2)", () =>
    compare({
      name: "refine",
      supervision: { checks: [okCheck], plan: true, maxTurns: 3 },
      script: (_agent, _replies, calls) =>
        [say("plan v1"), say("plan v2"), write("w1", "yes"), say("wrote yes")][calls - 1],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          const first = yield* waitFor(sessions.pending(id), (pending) => pending.plan !== undefined)
          assert.strictEqual(first.plan?.iteration, 1)
          assert.isTrue(yield* sessions.decidePlan(id, 1, { _tag: "Refine", notes: "more detail" }))
          const second = yield* waitFor(sessions.pending(id), (pending) => pending.plan?.iteration === 2)
          assert.strictEqual(second.plan?.plan, "plan v2")
          assert.isTrue(yield* sessions.decidePlan(id, 2, { _tag: "Approve" }))
        })
    }))

  it.live("the worker hands off in its first act turn; the checks fail; its second turn goes on in the agent handed off to", () =>
    compare({
      name: "handoff",
      supervision: { checks: [okCheck], maxTurns: 3 },
      script: (agent, _replies, calls) =>
        agent === "main"
          ? { toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }], usage: { input: 10 } }
          : [undefined, write("b1", "no"), say("billing wrote no"), write("b2", "yes"), say("billing wrote yes")][calls - 1],
      drive: () => Effect.void
    }))

  it.live("concurrent checks and a verifier, the feedback gated by the operator (approveTurns) twice", () =>
    compare({
      name: "gated checks",
      supervision: { checks: [okCheck, notesCheck, verifierCheck], checkConcurrency: 2, approveTurns: true, maxTurns: 4 },
      script: (_agent, _replies, calls) =>
        [write("w1", "no"), say("wrote no"), write("w2", "yes"), say("wrote yes"), write("w3", "yes", "notes"), say("notes")][
          calls - 1
        ],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          yield* waitFor(sessions.pending(id), (pending) => pending.turn?.turn === 1)
          assert.isTrue(yield* sessions.decideTurn(id, 1, { _tag: "Approve" }))
          yield* waitFor(sessions.pending(id), (pending) => pending.turn?.turn === 2)
          assert.isTrue(yield* sessions.decideTurn(id, 2, { _tag: "Replace", feedback: "write the notes" }))
        })
    }))

  it.live("the worker's call needs approval (deploy), approved by the operator", () =>
    compare({
      name: "approval",
      supervision: { checks: [okCheck], maxTurns: 3 },
      script: (_agent, _replies, calls) =>
        [
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "canary" } }], usage: { input: 10 } },
          write("w1", "yes"),
          say("deployed and wrote yes")
        ][calls - 1],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          const waiting = yield* waitFor(sessions.pending(id), (pending) => pending.approvals.length > 0)
          assert.isTrue(yield* sessions.approve(id, waiting.approvals[0]!.approvalId, { approved: true }))
        })
    }))

  it.live("the worker's sub-agent asks for approval (researcher deploys), approved by the operator, in the second act turn", () =>
    compare({
      name: "sub-agent approval",
      supervision: { checks: [okCheck], maxTurns: 3 },
      script: (agent, replies, calls) =>
        agent === "researcher"
          ? replies === 0
            ? { toolCalls: [{ id: "rd", name: "deploy", params: { env: "canary" } }], usage: { input: 1 } }
            : say("researched")
          : [
            write("w1", "no"),
            say("wrote no"),
            { toolCalls: [{ id: "r1", name: "researcher", params: { topic: "logs" } }], usage: { input: 10 } },
            undefined,
            undefined,
            write("w2", "yes"),
            say("wrote yes")
          ][calls - 1],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          const waiting = yield* waitFor(sessions.pending(id), (pending) => pending.approvals.length > 0)
          assert.isTrue(yield* sessions.approve(id, waiting.approvals[0]!.approvalId, { approved: true }))
        })
    }))

  it.live("an Approvals policy given to the runner answers the plan (Refine, then Approve) and gates the feedback", () => {
    let plans = 0
    return compare({
      name: "policy",
      approvals: {
        decide: () => Effect.succeed(Approvals.approved),
        decidePlan: () => Effect.sync(() => ++plans % 2 === 1 ? { _tag: "Refine", notes: "again" } : { _tag: "Approve" }),
        decideTurn: (request) => Effect.succeed({ _tag: "Replace", feedback: `fix it (turn ${request.turn})` })
      },
      supervision: { checks: [okCheck], plan: true, approveTurns: true, maxTurns: 3 },
      script: (_agent, _replies, calls) =>
        [say("plan v1"), say("plan v2"), write("w1", "no"), say("wrote no"), write("w2", "yes"), say("wrote yes")][calls - 1],
      drive: () => Effect.void
    })
  })

  /** Waits for the session's first result, sends a follow-up: the seq the next result comes after. */
  const followUpAfterEnd = (sessions: Sessions.Sessions["Service"], id: string, text: string) =>
    Effect.gen(function*() {
      yield* sessions.result(id).pipe(Effect.timeout(patience))
      const seen = (yield* sessions.events(id)).at(-1)?.seq ?? 0
      yield* sessions.followUp(id, text)
      return seen
    })

  it.live("ended by its turn cap (Unverified), then a follow-up: the same ending, the follow-up returned once", () =>
    compare({
      name: "turn cap, follow-up",
      supervision: { checks: [okCheck], maxTurns: 1 },
      script: (_agent, _replies, calls) => [write("w1", "no"), say("wrote no")][calls - 1],
      drive: (sessions, id) => followUpAfterEnd(sessions, id, "try again")
    }))

  it.live("a plan rejected by the operator, then a follow-up: still rejected, the follow-up returned once", () =>
    compare({
      name: "rejected, follow-up",
      supervision: { checks: [okCheck], plan: true, maxTurns: 3 },
      script: (_agent, _replies, calls) => [say("plan v1")][calls - 1],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          yield* waitFor(sessions.pending(id), (pending) => pending.plan !== undefined)
          assert.isTrue(yield* sessions.decidePlan(id, 1, { _tag: "Reject", notes: "no" }))
          return yield* followUpAfterEnd(sessions, id, "act anyway")
        })
    }))

  it.live("converged, then a follow-up whose round's feedback is gated (approveTurns) and replaced", () =>
    compare({
      name: "converged, gated follow-up",
      supervision: { checks: [okCheck, notesCheck], approveTurns: true, maxTurns: 4 },
      script: (_agent, _replies, calls) =>
        [write("w1", "yes"), write("n0", "yes", "notes"), say("wrote yes"), write("w2", "no"), say("wrote no"), write("w3", "yes"), say("yes again")][
          calls - 1
        ],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          const seen = yield* followUpAfterEnd(sessions, id, "now write no")
          yield* waitFor(sessions.pending(id), (pending) => pending.turn?.turn === 2)
          assert.isTrue(yield* sessions.decideTurn(id, 2, { _tag: "Replace", feedback: "put yes back" }))
          return seen
        })
    }))

  it.live("a wall-clock budget (maxWallClock) while the feedback waits for the operator longer than it", () =>
    compare({
      name: "wall clock",
      supervision: { checks: [okCheck], approveTurns: true, maxTurns: 3, maxWallClock: "1 second" },
      script: (_agent, _replies, calls) => [write("w1", "no"), say("wrote no"), write("w2", "yes"), say("wrote yes")][calls - 1],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          yield* waitFor(sessions.pending(id), (pending) => pending.turn?.turn === 1)
          // the operator takes 1.5 s to read the feedback
          yield* Effect.sleep("1500 millis")
          assert.isTrue(yield* sessions.decideTurn(id, 1, { _tag: "Approve" }))
        })
    }))

  it.live("typed output: converged on the second act turn, then a follow-up asks for a new answer", () =>
    compare({
      name: "typed output",
      output: true,
      supervision: { checks: [okCheck], maxTurns: 4 },
      script: (_agent, _replies, calls) =>
        [
          write("w1", "no"),
          { toolCalls: [{ id: "f1", name: "final_answer", params: { answer: 1 } }], usage: { input: 3 } },
          write("w2", "yes"),
          { toolCalls: [{ id: "f2", name: "final_answer", params: { answer: 2 } }], usage: { input: 3 } },
          { toolCalls: [{ id: "f3", name: "final_answer", params: { answer: 3 } }], usage: { input: 3 } }
        ][calls - 1],
      drive: (sessions, id) => followUpAfterEnd(sessions, id, "answer 3 now")
    }))

  /** A worker of its own (`Supervisor.Options.worker`: a CLI agent, say): each turn counted as a model call. */
  const external = (replies: ReadonlyArray<string | undefined>) =>
    Worker.make("external", (request) =>
      Effect.suspend(() => {
        const scenario = now()
        const reply = replies[scenario.modelCalls++]
        if (reply === undefined) {
          return Effect.fail(new Worker.WorkerError({ worker: "external", reason: "exit", message: "exited 1", exitCode: 1 }))
        }
        if (request.phase === "act" && reply === "yes") scenario.files.set("ok.txt", "yes")
        return Effect.succeed({ text: reply, usage: { inputTokens: 1, outputTokens: 1 }, resumeToken: `t${scenario.modelCalls}` })
      }))

  it.live("an external worker's plan approved by the operator: its plan turn is not made again", () =>
    compare({
      name: "external worker",
      supervision: { checks: [okCheck], plan: true, maxTurns: 3, worker: external(["the plan", "yes", "yes"]) },
      script: () => undefined,
      drive: (sessions, id) =>
        Effect.gen(function*() {
          yield* waitFor(sessions.pending(id), (pending) => pending.plan !== undefined)
          assert.isTrue(yield* sessions.decidePlan(id, 1, { _tag: "Approve" }))
        })
    }))

  it.live("an external worker that fails (WorkerError): WorkerFailed and an AgentEnd that says so", () =>
    compare({
      name: "worker fails",
      supervision: { checks: [okCheck], maxTurns: 3, worker: external([]) },
      script: () => undefined,
      drive: () => Effect.void
    }))

  it.live("a typed plan (planOutput) waiting: pending gives its value, as in this process", () =>
    Effect.gen(function*() {
      const Plan = Schema.Struct({ steps: Schema.Array(Schema.String) })
      const scenario: Scenario = {
        name: "typed plan",
        supervision: { checks: [okCheck], plan: true, planOutput: Plan, maxTurns: 3 },
        script: (_agent, _replies, calls) =>
          [
            { toolCalls: [{ id: "p1", name: "final_answer", params: { steps: ["write yes"] } }], usage: { input: 3 } },
            write("w1", "yes"),
            say("wrote yes")
          ][calls - 1],
        drive: () => Effect.void
      }
      const { durable, inProcess } = layers(scenario)
      const pendingOn = (layer: Layer.Layer<Sessions.Sessions, unknown>) =>
        Effect.gen(function*() {
          current = { files: new Map(), modelCalls: 0, checkRuns: 0, script: scenario.script }
          return yield* Effect.gen(function*() {
            const sessions = yield* Sessions.Sessions
            yield* sessions.start({ sessionId: "s", prompt: "make ok.txt say yes", system: systems.main, supervisor: "sup" })
            const waiting = yield* waitFor(sessions.pending("s"), (pending) => pending.plan !== undefined)
            const plan = waiting.plan!
            assert.isTrue(yield* sessions.decidePlan("s", 1, { _tag: "Approve" }))
            yield* sessions.result("s").pipe(Effect.timeout(patience))
            return { iteration: plan.iteration, value: plan.value }
          }).pipe(Effect.provide(layer))
        }).pipe(Effect.ensuring(Effect.sync(() => void (current = undefined))))
      const expected = yield* pendingOn(inProcess)
      assert.deepStrictEqual(expected, { iteration: 1, value: { steps: ["write yes"] } })
      assert.deepStrictEqual(yield* pendingOn(durable), expected)
    }))

  it.live("handed off and converged, then a follow-up in the agent handed off to, its feedback gated and replaced, a call approved", () =>
    compare({
      name: "handoff, follow-up, gate",
      supervision: { checks: [okCheck], approveTurns: true, maxTurns: 4 },
      script: (agent, _replies, calls) =>
        agent === "main"
          ? { toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }], usage: { input: 10 } }
          : [
            undefined,
            write("b1", "yes"),
            say("billing wrote yes"),
            write("b2", "no"),
            say("billing wrote no"),
            { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage: { input: 10 } },
            write("b3", "yes"),
            say("billing deployed and wrote yes")
          ][calls - 1],
      drive: (sessions, id) =>
        Effect.gen(function*() {
          const seen = yield* followUpAfterEnd(sessions, id, "now write no")
          yield* waitFor(sessions.pending(id), (pending) => pending.turn?.turn === 2)
          assert.isTrue(yield* sessions.decideTurn(id, 2, { _tag: "Replace", feedback: "deploy, then put yes back" }))
          const waiting = yield* waitFor(sessions.pending(id), (pending) => pending.approvals.length > 0)
          assert.isTrue(yield* sessions.approve(id, waiting.approvals[0]!.approvalId, { approved: true }))
          return seen
        })
    }))
})
