/**
 * Sub-agents: child runs started by a sub-agent tool, with their own
 * transcript, tools and model, tied to the run that called them (stops,
 * approvals, budgets, events); and handoffs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Latch, Layer, Schedule, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, AgentEvent, Approvals, Hooks, Message, SubAgent, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { assertValidTranscript, Deploy, makeTrace, ofTag, recorder, roundTrip, type Trace, toolsLayer } from "./support.ts"

const Topic = Schema.Struct({ topic: Schema.String })

const ProbeTool = Tool.make("probe", { success: Schema.String })

/** A sub-agent with the test tools (recording into `trace`) and a scripted model of its own. */
const child = <const Name extends string>(
  name: Name,
  script: ScriptedModel.Script,
  trace: Trace,
  extra: Partial<SubAgent.Options<Name, typeof Topic, string>> = {}
) =>
  Agent.define({
    name,
    description: `the ${name}`,
    system: `You are the ${name}.`,
    input: Topic,
    prompt: ({ topic }) => `Work on ${topic}.`,
    tools: toolsLayer(trace),
    model: ScriptedModel.layer(script),
    ...extra
  })

/** A registry whose only tool runs `definition`. */
const toolsOf = <const Name extends string>(definition: SubAgent.Definition<Name, typeof Topic>) => {
  const tool = Agent.asTool(definition)
  const toolkit = Toolkit.make(tool)
  return ToolRegistry.layer(toolkit).pipe(
    Layer.provide(toolkit.toLayer(Object.fromEntries([[definition.name, SubAgent.handler(definition)]]) as never))
  )
}

const nestedOf = (events: ReadonlyArray<AgentEvent.AgentEvent>, agent: string) =>
  ofTag(events, "Nested").filter((event) => event.path.join("/") === agent).map((event) => event.event)

const call = (name: string, topic: string, id = `call-${name}`) => ({ id, name, params: { topic } })

describe("Agent.asTool", () => {
  it.live("a parent calling two children in parallel gets both typed outputs; each child saw only its input", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const researcher = Agent.define({
        ...child("researcher", [
          { toolCalls: [{ name: "sleep", params: { ms: 30, label: "research" } }], usage: { input: 10, output: 2 } },
          { toolCalls: [{ name: "final_answer", params: { papers: ["a", "b"] } }], usage: { input: 20, output: 5 } }
        ], trace),
        output: Schema.Struct({ papers: Schema.Array(Schema.String) })
      })
      const writer = Agent.define({
        ...child("writer", [
          { toolCalls: [{ name: "sleep", params: { ms: 30, label: "write" } }], usage: { input: 7, output: 1 } },
          { toolCalls: [{ name: "final_answer", params: { title: "Effects", words: 900 } }], usage: { input: 9, output: 3 } }
        ], trace),
        output: Schema.Struct({ title: Schema.String, words: Schema.Int })
      })
      const Tools = Toolkit.make(Agent.asTool(researcher), Agent.asTool(writer))
      const answers: Array<unknown> = []
      const registry = ToolRegistry.layer(Tools).pipe(
        Layer.provide(Tools.toLayer({
          // the handlers' answers are typed: `papers` is a string array, `words` a number
          researcher: (params, ctx) =>
            Effect.tap(SubAgent.handler(researcher)(params, ctx), (out) => Effect.sync(() => answers.push(out.papers.length))),
          writer: (params, ctx) =>
            Effect.tap(SubAgent.handler(writer)(params, ctx), (out) => Effect.sync(() => answers.push(out.words + 1)))
        }))
      )
      const { events, plugin } = recorder()
      const result = yield* Agent.run({ prompt: "secret parent context: write about effects", plugins: [plugin] }).pipe(
        Effect.provide(registry),
        Effect.provide(ScriptedModel.layer([
          { toolCalls: [call("researcher", "effects"), call("writer", "effects")], usage: { input: 100, output: 10 } },
          { text: "done", usage: { input: 200, output: 20 } }
        ]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(answers.slice().sort(), [2, 901])
      const results = result.messages.filter((m) => m.role === "toolResult")
      assert.deepStrictEqual(results.map((m) => [m.toolName, JSON.parse(Message.textOf(m)), m.isError]), [
        ["researcher", { papers: ["a", "b"] }, false],
        ["writer", { title: "Effects", words: 900 }, false]
      ])
      // both children's tools were in flight together
      assert.deepStrictEqual(trace.started.slice().sort(), ["research", "write"])
      assert.strictEqual(trace.finished.length, 2)
      // the child's transcript: its system prompt and its input only
      const childStart = nestedOf(events, "researcher").find((event) => event._tag === "AgentStart")
      assert.deepStrictEqual(
        childStart?._tag === "AgentStart" && childStart.messages.map(Message.textOf),
        ["Work on effects."]
      )
      // every event of each child reached the parent's observers, from AgentStart to AgentEnd
      for (const agent of ["researcher", "writer"]) {
        const inner = nestedOf(events, agent)
        assert.strictEqual(inner[0]?._tag, "AgentStart")
        assert.strictEqual(inner.at(-1)?._tag, "AgentEnd")
        assert.isTrue(inner.every((event) => event.runId !== result.state.runId))
      }
      // the children's usage rolled up into the parent's, and the snapshot shows it per agent
      assert.deepStrictEqual([result.usage.input, result.usage.output], [100 + 200 + 10 + 20 + 7 + 9, 10 + 20 + 2 + 5 + 1 + 3])
      const last = ofTag(events, "BudgetSnapshot").at(-1)!
      assert.deepStrictEqual(last.figures.agents?.["researcher"]?.turns, 2)
      assert.deepStrictEqual(last.figures.agents?.["writer"]?.usage.input, 16)
      // nested events keep their shape through JSON (a trajectory keeps them)
      for (const event of ofTag(events, "Nested")) roundTrip(AgentEvent.AgentEvent, event)
    }))

  it.live("a text sub-agent answers with its final reply; one that gives no valid typed output answers why", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const plain = child("plain", [{ text: "just text" }], trace)
      const strict = Agent.define({
        ...child("strict", [
          { toolCalls: [{ name: "final_answer", params: { n: "x" } }] },
          { toolCalls: [{ name: "final_answer", params: { n: "y" } }] }
        ], trace),
        output: Schema.Struct({ n: Schema.Int }),
        outputRetries: 1
      })
      const Tools = Toolkit.make(Agent.asTool(plain), Agent.asTool(strict))
      const registry = ToolRegistry.layer(Tools).pipe(
        Layer.provide(Tools.toLayer({ plain: SubAgent.handler(plain), strict: SubAgent.handler(strict) }))
      )
      const result = yield* Agent.run({ prompt: "go" }).pipe(
        Effect.provide(registry),
        Effect.provide(ScriptedModel.layer([{ toolCalls: [call("plain", "a"), call("strict", "b")] }, { text: "ok" }]))
      )
      const [plainResult, strictResult] = result.messages.filter((m) => m.role === "toolResult")
      assert.strictEqual(Message.textOf(plainResult!), "just text")
      assert.isTrue(strictResult?.role === "toolResult" && strictResult.isError)
      const failure = JSON.parse(Message.textOf(strictResult!))
      assert.strictEqual(failure.outcome._tag, "OutputInvalid")
      assert.match(failure.reason, /^strict did not finish/)
    }))

  it.live("interrupting the parent interrupts the children and runs their tools' finalizers", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const started = Latch.makeUnsafe()
      const slow = (name: string) =>
        child(name, [{ toolCalls: [{ name: "sleep", params: { ms: 60_000, label: name } }] }, { text: "never" }], trace)
      const a = slow("a")
      const b = slow("b")
      const Tools = Toolkit.make(Agent.asTool(a), Agent.asTool(b))
      const registry = ToolRegistry.layer(Tools).pipe(
        Layer.provide(Tools.toLayer({ a: SubAgent.handler(a), b: SubAgent.handler(b) }))
      )
      const { events, plugin } = recorder()
      let toolsStarted = 0
      const watch = Hooks.plugin({
        name: "watch",
        observe: (event) => {
          if (event._tag === "Nested" && event.event._tag === "ToolExecutionStart" && ++toolsStarted === 2) {
            started.openUnsafe()
          }
        }
      })
      const fiber = yield* Effect.forkChild(
        Agent.run({ prompt: "go", plugins: [plugin, watch] }).pipe(
          Effect.provide(registry),
          Effect.provide(ScriptedModel.layer([{ toolCalls: [call("a", "x"), call("b", "y")] }, { text: "no" }]))
        )
      )
      yield* started.await
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(trace.started.slice().sort(), ["a", "b"])
      assert.deepStrictEqual(trace.finished, [])
      assert.deepStrictEqual(trace.finalized.slice().sort(), ["a", "b"])
      const end = events.at(-1)
      assert.deepStrictEqual(end?._tag === "AgentEnd" && end.outcome, { _tag: "Cancelled", reason: "interrupted" })
      assertValidTranscript(end?._tag === "AgentEnd" && end.result !== undefined ? end.result.state.messages : [])
      // each child ended too, Cancelled, with every call answered
      for (const agent of ["a", "b"]) {
        const childEnd = nestedOf(events, agent).at(-1)
        assert.deepStrictEqual(childEnd?._tag === "AgentEnd" && childEnd.outcome, { _tag: "Cancelled", reason: "interrupted" })
      }
    }))

  it.live("the parent's Approvals service decides the child's calls", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const asked: Array<Approvals.Request> = []
      const deployer = child("deployer", [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }, { id: "d2", name: "deploy", params: { env: "staging" } }] },
        { text: "staging deployed, prod refused" }
      ], trace)
      const approvals = Approvals.policy((request) => {
        asked.push(request)
        return (request.params as { env: string }).env === "prod" ? Approvals.denied("not on a Friday") : Approvals.approved
      })
      const result = yield* Agent.run({ prompt: "deploy" }).pipe(
        Effect.provide(toolsOf(deployer)),
        Effect.provide(ScriptedModel.layer([{ toolCalls: [call("deployer", "release")] }, { text: "ok" }])),
        Effect.provideService(Approvals.Approvals, approvals)
      )
      assert.deepStrictEqual(asked.map((r) => [r.toolCallId, r.toolName]), [["d1", "deploy"], ["d2", "deploy"]])
      // the requests came from the child's run, not the parent's
      assert.isTrue(asked.every((r) => r.runId !== result.state.runId))
      assert.deepStrictEqual(trace.started, ["deploy:staging"])
      assert.strictEqual(Message.textOf(result.messages[2]!), "staging deployed, prod refused")
    }))

  for (const first of ["child", "parent"] as const) {
    it.live(`a parent and a child both waiting on call id c1 are told apart: deciding the ${first}'s first`, () =>
      Effect.gen(function*() {
        const trace = makeTrace()
        const deployer = child("deployer", [
          { toolCalls: [{ id: "c1", name: "deploy", params: { env: "child" } }] },
          { text: "child done" }
        ], trace)
        const Parent = Toolkit.make(Deploy, Agent.asTool(deployer))
        const registry = ToolRegistry.layer(Parent).pipe(
          Layer.provide(Parent.toLayer({
            deploy: ({ env }) => Effect.sync(() => (trace.started.push(`deploy:${env}`), `deployed to ${env}`)),
            deployer: SubAgent.handler(deployer)
          }))
        )
        const approvals = yield* Approvals.interactive()
        const { events, plugin } = recorder()
        const fiber = yield* Agent.run({ prompt: "deploy", plugins: [plugin] }).pipe(
          Effect.provide(registry),
          Effect.provide(ScriptedModel.layer([
            { toolCalls: [{ id: "c1", name: "deploy", params: { env: "parent" } }, call("deployer", "x", "c2")] },
            { text: "ok" }
          ])),
          Effect.provideService(Approvals.Approvals, approvals),
          Effect.forkChild
        )
        const waiting = () => Effect.map(approvals.pending, (pending) => pending.map((request) => request.approvalId))
        const until = (ids: ReadonlyArray<string>) =>
          Effect.repeat(waiting(), {
            until: (now) => now.length === ids.length && ids.every((id) => now.includes(id)),
            schedule: Schedule.spaced("5 millis")
          }).pipe(Effect.timeout("5 seconds"))
        yield* until(["c1", "c2/c1"])
        const requests = yield* approvals.pending
        assert.deepStrictEqual(requests.map((r) => [r.toolCallId, r.approvalId]).sort(), [["c1", "c1"], ["c1", "c2/c1"]])
        if (first === "child") {
          assert.isTrue(yield* approvals.approve("c2/c1"))
          yield* until(["c1"])
          assert.isTrue(yield* approvals.deny("c1", "not the parent"))
        } else {
          // the plain call id answers the top run's call
          assert.isTrue(yield* approvals.deny("c1", "not the parent"))
          yield* until(["c2/c1"])
          assert.deepStrictEqual(trace.started, [])
          assert.isTrue(yield* approvals.approve("c2/c1"))
        }
        const result = yield* Fiber.join(fiber)
        assert.deepStrictEqual(trace.started, ["deploy:child"])
        const denied = result.messages.find((m) => m.role === "toolResult" && m.toolCallId === "c1")
        assert.strictEqual(denied && Message.textOf(denied), "Tool call denied: not the parent")
        // the events carry the ids: the top run's, and the child's (Nested)
        assert.deepStrictEqual(ofTag(events, "ApprovalRequested").map((e) => e.approvalId), ["c1"])
        assert.deepStrictEqual(
          nestedOf(events, "deployer").flatMap((e) => e._tag === "ApprovalResolved" ? [[e.approvalId, e.approved]] : []),
          [["c2/c1", true]]
        )
      }))
  }

  it.live("a child's spend stops at the parent's cost budget; the parent then ends BudgetExceeded", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      // a runaway child: it never stops calling tools, each call costing $0.30
      const runaway = child("runaway", () => ({ toolCalls: [{ name: "add", params: { a: 1, b: 1 } }], usage: { cost: 0.3 } }), trace, {
        config: { maxTurns: 100, maxRepeatedBatches: null }
      })
      const { events, plugin } = recorder()
      const result = yield* Effect.gen(function*() {
        const result = yield* Agent.run({ prompt: "go", plugins: [plugin], config: { budgets: { costUsd: 1 } } })
        return { result, parentCalls: yield* (yield* ScriptedModel.ScriptedModel).calls }
      }).pipe(
        Effect.provide(toolsOf(runaway)),
        Effect.provide(ScriptedModel.layer([{ toolCalls: [call("runaway", "spend")], usage: { cost: 0.1 } }, { text: "x" }]))
      )
      // 0.1 (parent) + 3 × 0.3 (child) reaches $1 before the child's 4th call
      assert.strictEqual(trace.started.length, 3)
      assert.strictEqual(result.parentCalls, 1)
      assert.strictEqual(result.result.outcome._tag, "BudgetExceeded")
      assert.strictEqual(result.result.outcome._tag === "BudgetExceeded" && result.result.outcome.budget, "costUsd")
      assert.closeTo(result.result.usage.cost ?? 0, 1, 1e-9)
      const answer = result.result.messages.find((m) => m.role === "toolResult")!
      assert.isTrue(answer.role === "toolResult" && answer.isError)
      assert.match(Message.textOf(answer), /"reason":"runaway did not finish: its costUsd budget ran out/)
      const childTrip = nestedOf(events, "runaway").find((event) => event._tag === "GuardTripped")
      assert.match(childTrip?._tag === "GuardTripped" ? childTrip.detail : "", /the top run's costUsd budget is exhausted/)
    }))

  it.live("maxDepth: a sub-agent deeper than the limit is not started, and the caller reads why", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      // a chain a → b → c → d: d would run at depth 4, past the default of 3
      const d = child("d", [{ text: "d answered" }], trace)
      const c = child("c", [{ toolCalls: [call("d", "deep")] }, { text: "c answered" }], trace, { tools: toolsOf(d) })
      const b = child("b", [{ toolCalls: [call("c", "deep")] }, { text: "b answered" }], trace, { tools: toolsOf(c) })
      const a = child("a", [{ toolCalls: [call("b", "deep")] }, { text: "a answered" }], trace, { tools: toolsOf(b) })
      const { events, plugin } = recorder()
      const result = yield* Agent.run({ prompt: "go", plugins: [plugin] }).pipe(
        Effect.provide(toolsOf(a)),
        Effect.provide(ScriptedModel.layer([{ toolCalls: [call("a", "deep")] }, { text: "top answered" }]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      // each nested event names the calls that started the agents of its path, one per agent: where a UI puts it
      const nested = ofTag(events, "Nested")
      assert.deepStrictEqual(new Set(nested.map((event) => event.path.join("/"))), new Set(["a", "a/b", "a/b/c"]))
      for (const event of nested) assert.deepStrictEqual(event.calls, event.path.map((agent) => `call-${agent}`))
      const dResult = nestedOf(events, "a/b/c").find((e) => e._tag === "ToolExecutionEnd")
      assert.isTrue(dResult?._tag === "ToolExecutionEnd" && dResult.result.isError)
      assert.deepStrictEqual(JSON.parse(dResult?._tag === "ToolExecutionEnd" ? Message.textOf(dResult.result) : ""), {
        _tag: "SubAgentFailed",
        agent: "d",
        reason: "d was not started: it would run at depth 4, and sub-agents may run at most 3 deep"
      })
      assert.strictEqual(nestedOf(events, "a/b/c/d").length, 0)
      // a definition's own maxDepth lowers the limit below it
      const shallow = child("shallow", [{ toolCalls: [call("d", "deep")] }, { text: "ok" }], trace, {
        tools: toolsOf(d),
        maxDepth: 1
      })
      const { events: more, plugin: recording } = recorder()
      yield* Agent.run({ prompt: "go", plugins: [recording] }).pipe(
        Effect.provide(toolsOf(shallow)),
        Effect.provide(ScriptedModel.layer([{ toolCalls: [call("shallow", "deep")] }, { text: "top" }]))
      )
      const refused = nestedOf(more, "shallow").find((e) => e._tag === "ToolExecutionEnd")
      assert.match(refused?._tag === "ToolExecutionEnd" ? Message.textOf(refused.result) : "", /at most 1 deep/)
    }))

  it.live("a child knows its identity: its parent's run id, its depth and path, and the parent's deadline", () =>
    Effect.gen(function*() {
      const seen: Array<SubAgent.Identity | undefined> = []
      const Probe = Toolkit.make(ProbeTool)
      const probeTools = ToolRegistry.layer(Probe).pipe(
        Layer.provide(Probe.toLayer({ probe: () => Effect.map(SubAgent.current, (id) => (seen.push(id), "ok")) }))
      )
      const inner = Agent.define({
        name: "inner",
        description: "probes",
        input: Topic,
        tools: probeTools,
        model: ScriptedModel.layer([{ toolCalls: [{ name: "probe", params: {} }] }, { text: "done" }])
      })
      const before = Date.now()
      const result = yield* Agent.run({ prompt: "go", config: { budgets: { wallClock: "1 hour" } } }).pipe(
        Effect.provide(toolsOf(inner)),
        Effect.provide(ScriptedModel.layer([{ toolCalls: [call("inner", "x")] }, { text: "top" }]))
      )
      const identity = seen[0]!
      assert.strictEqual(identity.parentRunId, result.state.runId)
      assert.deepStrictEqual([identity.agent, identity.depth, identity.path], ["inner", 1, ["inner"]])
      assert.isTrue(identity.deadline !== undefined && identity.deadline <= before + 3_600_000 + 1_000)
      assert.isTrue(identity.deadline !== undefined && identity.deadline > Date.now() + 3_500_000)
      assert.strictEqual(yield* SubAgent.current, undefined)
    }))
})

describe("Agent.handoff", () => {
  it.live("a handoff ends the run HandedOff and the target answers from the history; the result says who", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const billing = child("billing", [{ text: "refund issued" }], trace)
      const Tools = Toolkit.make(Agent.handoff(billing))
      const registry = ToolRegistry.layer(Tools).pipe(
        Layer.provide(Tools.toLayer({
          transfer_to_billing: SubAgent.handoffHandler(billing, {
            history: (messages) => messages.filter((m) => m.role === "user")
          })
        }))
      )
      const { events, plugin } = recorder()
      const result = yield* Agent.run({ prompt: "I want my money back", plugins: [plugin] }).pipe(
        Effect.provide(registry),
        Effect.provide(ScriptedModel.layer([{ toolCalls: [call("transfer_to_billing", "refund")] }, { text: "never" }]))
      )
      assert.strictEqual(result.agent, "billing")
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "refund issued")
      const ends = ofTag(events, "AgentEnd")
      assert.deepStrictEqual(ends.map((e) => e.outcome), [{ _tag: "HandedOff", to: "billing" }, { _tag: "Completed" }])
      // the parent's transcript is valid, its handoff call answered
      assertValidTranscript(ends[0]!.result!.state.messages)
      // the target started from the kept history and the handoff's input, with its own system prompt
      assert.deepStrictEqual(result.state.messages.map(Message.textOf), ["I want my money back", "Work on refund.", "refund issued"])
      assert.strictEqual(result.state.system, "You are the billing.")
    }))
})
