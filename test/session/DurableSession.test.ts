import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Latch, Layer, Option, Schedule, Schema, Stream } from "effect"
import { LanguageModel, Tool, Toolkit } from "effect/ai"
import {
  ClusterError,
  ClusterWorkflowEngine,
  EntityAddress,
  EntityId,
  EntityType,
  Message as ClusterMessage,
  MessageStorage,
  RunnerHealth,
  Runners,
  RunnerStorage,
  Sharding,
  ShardingConfig
} from "effect/cluster"
import { Activity, WorkflowEngine } from "effect/workflow"
import {
  Agent,
  type AgentEvent,
  AgentTool,
  Approvals,
  Guardrail,
  Message,
  type RunState,
  Steering,
  SubAgent,
  ToolRegistry
} from "effect-agent"
import { CheckpointStore, DurableSession, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as Body from "../../src/session/internal/durable/body.ts"
import { assertValidTranscript, recorder } from "../support.ts"
import { Deploy, followTranscript, threeTurns, toolsLayer, usage } from "./fixture.ts"
import { storeCancels } from "./store-cancels.ts"
import { SqlClient } from "effect/sql"
import { patience } from "../patience.ts"
import * as SqlEngine from "./sql-engine.ts"

type Turns = ReadonlyArray<ScriptedModel.Turn>

/** The cluster's workflow engine, in memory: every activity result is encoded and stored as on a real cluster. */
const clusterEngine = ClusterWorkflowEngine.layer.pipe(
  Layer.provideMerge(Sharding.layer),
  Layer.provide(Runners.layerNoop),
  Layer.provideMerge(MessageStorage.layerMemory),
  Layer.provide(RunnerStorage.layerMemory),
  Layer.provide(RunnerHealth.layerNoop),
  Layer.provide(ShardingConfig.layer({ entityMessagePollInterval: 50, sendRetryInterval: 10 }))
)

const engines = {
  memory: WorkflowEngine.layerMemory,
  cluster: Layer.orDie(clusterEngine)
} as const

/** The engines a session runs on: effect's two, and the SQL engine (with its store) where PostgreSQL can be had. */
type Engine = keyof typeof engines | "sql"
const allEngines: ReadonlyArray<Engine> = "unavailable" in SqlEngine.available
  ? ["memory", "cluster"]
  : ["memory", "cluster", "sql"]
if ("unavailable" in SqlEngine.available) console.log(`the SQL engine's rows skip: ${SqlEngine.available.unavailable}`)

/** The engine of a runner and its store: the memory store, or the SQL engine's (in its database). */
const backendOf = (engine: Engine): Layer.Layer<WorkflowEngine.WorkflowEngine | DurableSession.Store> =>
  engine === "sql" ? SqlEngine.backend() : Layer.merge(engines[engine], DurableSession.layerMemoryStore)

/** A runner of sessions: the workflow registered with an engine, a scripted model, the fixture's tools. */
const runner = (engine: Engine, turns: Turns, ran: Array<string>, options: DurableSession.Options = {}) =>
  DurableSession.layer(options).pipe(
    Layer.provideMerge(Layer.merge(ScriptedModel.layer(followTranscript(turns)), toolsLayer(ran))),
    Layer.provideMerge(backendOf(engine))
  )

/** Scenarios: each is a prompt, a script and a config, run the three ways. */
const scenarios: ReadonlyArray<{
  readonly name: string
  readonly turns: Turns
  readonly config?: Agent.RunOptions["config"]
}> = [
  { name: "three turns with a tool that must not run twice", turns: threeTurns("charge", 1) },
  {
    name: "a batch of parallel calls within the cap",
    turns: [
      {
        toolCalls: [
          { id: "p1", name: "step", params: { n: 1 } },
          { id: "p2", name: "slow", params: { ms: 5 } },
          { id: "p3", name: "step", params: { n: 3 } }
        ],
        usage
      },
      { text: "done", usage }
    ],
    config: { maxParallelTools: 2 }
  },
  {
    // Two calls the model gave one id: each is its own activity, with its own result (not the first's twice).
    name: "duplicate-id attack: two calls share an id",
    turns: [
      {
        toolCalls: [{ id: "x", name: "step", params: { n: 1 } }, { id: "x", name: "step", params: { n: 2 } }],
        usage
      },
      { text: "done", usage }
    ]
  },
  {
    name: "the turn cap ends the run",
    turns: [
      { toolCalls: [{ id: "a", name: "step", params: { n: 1 } }], usage },
      { toolCalls: [{ id: "b", name: "step", params: { n: 2 } }], usage },
      { text: "never", usage }
    ],
    config: { maxTurns: 2 }
  }
]

const comparable = (result: RunState.RunResult) => ({
  messages: result.messages,
  outcome: result.outcome,
  usage: result.usage,
  turn: result.state.turn
})

describe("DurableSession", () => {
  for (const scenario of scenarios) {
    for (const engine of allEngines) {
      it.live(`${scenario.name}: the same transcript and outcome as Agent.run and Session.run (${engine})`, () =>
        Effect.gen(function*() {
          const prompt = "go"
          const inProcess = yield* Agent.run({ prompt, runId: "r", config: scenario.config }).pipe(
            Effect.provide(Layer.merge(ScriptedModel.layer(followTranscript(scenario.turns)), toolsLayer([])))
          )
          const store = CheckpointStore.memory()
          const session = yield* Session.run({ id: "s", prompt, runId: "r", config: scenario.config }).pipe(
            Effect.provideService(CheckpointStore.CheckpointStore, store),
            Effect.provide(Layer.merge(ScriptedModel.layer(followTranscript(scenario.turns)), toolsLayer([])))
          )
          const ran: Array<string> = []
          const durable = yield* DurableSession.run({ sessionId: "d1", prompt, config: scenario.config }).pipe(
            Effect.provide(runner(engine, scenario.turns, ran))
          )
          assertValidTranscript(durable.messages)
          assert.deepStrictEqual(comparable(durable), comparable(inProcess))
          assert.deepStrictEqual(comparable(session), comparable(inProcess))
          assert.isAbove(durable.messages.length, 2)
        }))
    }
  }

  it.live("events are published from activities, once each, numbered in order; the same events as Agent.run", () =>
    Effect.gen(function*() {
      const turns = threeTurns("slow", 1)
      const { events: local, plugin } = recorder()
      yield* Agent.run({ prompt: "go", plugins: [plugin] }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer(followTranscript(turns)), toolsLayer([])))
      )
      const published = yield* Effect.gen(function*() {
        yield* DurableSession.run({ sessionId: "e1", prompt: "go" })
        return yield* DurableSession.events("e1")
      }).pipe(Effect.provide(runner("cluster", turns, [])))
      assert.deepStrictEqual(published.map((entry) => entry.seq), published.map((_, i) => i + 1))
      assert.strictEqual(new Set(published.map((entry) => entry.id)).size, published.length)
      assert.deepStrictEqual(published.map((entry) => entry.event._tag), local.map((event) => event._tag))
    }))

  for (const engine of ["memory", "cluster"] as const) {
    it.live(`a quick model call's events go out in one batch, and a long tool call's start while the call runs (${engine})`, () =>
      Effect.gen(function*() {
        const batches: Array<ReadonlyArray<string>> = []
        const base = DurableSession.makeMemoryStore()
        const counting: DurableSession.Store["Service"] = {
          ...base,
          publish: (sessionId, entries) =>
            Effect.andThen(
              Effect.sync(() =>
                void batches.push(entries.map(({ event }) =>
                  "toolCallId" in event && typeof event.toolCallId === "string"
                    ? `${event._tag} ${event.toolCallId}`
                    : event._tag
                ))
              ),
              base.publish(sessionId, entries)
            )
        }
        // the model answers at once; c2 (slow) takes 300 ms, more than the 20 ms a batch lingers
        const turns = threeTurns("slow", 300)
        yield* DurableSession.run({ sessionId: "b1", prompt: "go" }).pipe(
          Effect.provide(DurableSession.layer().pipe(
            Layer.provideMerge(Layer.mergeAll(
              ScriptedModel.layer(followTranscript(turns)),
              toolsLayer([]),
              Layer.succeed(DurableSession.Store, counting)
            )),
            Layer.provideMerge(engines[engine])
          ))
        )
        const shown = JSON.stringify(batches)
        // each model call: its start, its deltas and its end together (before, the deltas and the end apart)
        const calls = batches.filter((batch) => batch.includes("MessageEnd"))
        assert.strictEqual(calls.length, 3, shown)
        for (const batch of calls) {
          assert.includeMembers([...batch], ["MessageStart", "MessageUpdate", "MessageEnd"], shown)
        }
        // a long call's start is out before it ends
        const batchOf = (tag: string) => batches.findIndex((batch) => batch.includes(tag))
        assert.isAtLeast(batchOf("ToolExecutionStart c2"), 0, shown)
        assert.isBelow(batchOf("ToolExecutionStart c2"), batchOf("ToolExecutionEnd c2"), shown)
      }))
  }

  it.live("a model call's deltas are published as they stream, before the call ends, each once", () =>
    Effect.gen(function*() {
      const gate = yield* Latch.make(false)
      const { head, tail } = ScriptedModel.streamParts({ text: ["Hel", "lo ", "world"], usage }, 0)
      const parts = [...head, ...tail]
      const firstDelta = parts.findIndex((part) => part.type === "text-delta") + 1
      // The model streams its first delta, then waits for the gate.
      const model = yield* LanguageModel.make({
        generateText: () => Effect.die("not used"),
        streamText: () =>
          Stream.fromIterable(parts.slice(0, firstDelta)).pipe(
            Stream.concat(Stream.fromEffectDrain(gate.await)),
            Stream.concat(Stream.fromIterable(parts.slice(firstDelta)))
          )
      })
      const layer = DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(
          Layer.succeed(LanguageModel.LanguageModel, model),
          toolsLayer([]),
          DurableSession.layerMemoryStore
        )),
        Layer.provideMerge(engines.cluster)
      )
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "td1", prompt: "go" }))
        const during = yield* Effect.repeat(DurableSession.events("td1"), {
          until: (events) => deltasOf(events).length > 0,
          schedule: Schedule.spaced("10 millis"),
          times: 1000
        })
        // The call is still waiting on the gate: its first delta is out, its end is not.
        assert.deepStrictEqual(deltasOf(during), ["Hel"])
        const answered = (entry: DurableSession.Published) =>
          entry.event._tag === "MessageEnd" && entry.event.message.role === "assistant"
        assert.isFalse(during.some(answered))
        yield* gate.open
        const result = yield* Fiber.join(fiber)
        const published = yield* DurableSession.events("td1")
        assert.deepStrictEqual(deltasOf(published), ["Hel", "lo ", "world"])
        assert.strictEqual(textOf(result.messages[1]!), "Hello world")
        assert.strictEqual(new Set(published.map((entry) => entry.id)).size, published.length)
        assert.deepStrictEqual(published.map((entry) => entry.seq), published.map((_, i) => i + 1))
      }).pipe(Effect.provide(layer))
    }))

  it.live("an approval resolved from outside: the body replays, no model call or tool call runs twice", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        { toolCalls: [{ id: "c1", name: "charge", params: { cents: 5, ms: 1 } }], usage },
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
        { text: "deployed", usage }
      ]
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "a1", prompt: "ship it" }))
        // Wait until the approval request is published.
        yield* waitFor("a1", "ApprovalRequested")
        const status = yield* DurableSession.poll("a1")
        assert.strictEqual(status._tag, "Suspended")
        yield* DurableSession.approve("a1", "d1", { approved: true })
        const result = yield* Fiber.join(fiber)
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        const model = yield* ScriptedModel.ScriptedModel
        assert.strictEqual((yield* model.calls), 3)
        const events = (yield* DurableSession.events("a1")).map((entry) => entry.event)
        assert.deepStrictEqual(
          events.filter((event) => event._tag === "TurnStart").map((event) => event.turn),
          [1, 2, 3]
        )
        assert.strictEqual(count(events, "ApprovalRequested"), 1)
        assert.strictEqual(count(events, "AgentStart"), 1)
        assert.strictEqual(count(events, "AgentEnd"), 1)
      }).pipe(Effect.provide(runner("cluster", turns, ran)))
      assert.deepStrictEqual(ran, ["charge", "deploy"])
    }))

  it.live("duplicate-id attack: two calls that share an id wait under their own ids; approving x answers the first only", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        {
          toolCalls: [
            { id: "x", name: "deploy", params: { env: "staging" } },
            { id: "x", name: "deploy", params: { env: "production" } }
          ],
          usage
        },
        { text: "done", usage }
      ]
      const ran: Array<string> = []
      const result = yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "dup", prompt: "ship it" }))
        yield* waitFor("dup", "ApprovalRequested", 2)
        const requested = (yield* DurableSession.events("dup")).flatMap(({ event }) =>
          event._tag === "ApprovalRequested" ? [[event.approvalId, event.params]] : []
        )
        assert.deepStrictEqual(requested, [["x", { env: "staging" }], ["x_2", { env: "production" }]])
        assert.isTrue(yield* DurableSession.approve("dup", "x", { approved: true }))
        yield* waitFor("dup", "ApprovalResolved")
        // The same decision again answers nothing: x was decided, and the production deploy is x_2.
        assert.isFalse(yield* DurableSession.approve("dup", "x", { approved: true }))
        assert.isTrue(yield* DurableSession.approve("dup", "x_2", { approved: false, reason: "not production" }))
        return yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
      }).pipe(Effect.provide(runner("cluster", turns, ran)))
      assert.deepStrictEqual(ran, ["deploy"])
      assertValidTranscript(result.messages)
      assert.deepStrictEqual(
        result.messages.flatMap((m) => m.role === "toolResult" ? [[m.toolCallId, textOf(m)]] : []),
        [["x", "deployed to staging"], ["x_2", "Tool call denied: not production"]]
      )
    }))

  it.live(
    "attack (a replay interleaves concurrent calls differently): each event of a batch is published once, none from the stopped run",
    () =>
      Effect.gen(function*() {
        // One call waits for approval while the other runs: the session suspends mid-batch, and its replay
        // meets the calls in another order (the approved call's activity runs, the other's is memoized).
        const turns: Turns = [
          {
            toolCalls: [
              { id: "s1", name: "slow", params: { ms: 30 } },
              { id: "d1", name: "deploy", params: { env: "prod" } },
              { id: "s2", name: "slow", params: { ms: 60 } }
            ],
            usage
          },
          { text: "deployed", usage }
        ]
        const ran: Array<string> = []
        yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(
            DurableSession.run({ sessionId: "cb1", prompt: "ship it", config: { maxParallelTools: 3 } })
          )
          yield* waitFor("cb1", "ApprovalRequested")
          yield* untilStatus("cb1", (status) => status._tag === "Suspended")
          assert.isTrue(yield* DurableSession.approve("cb1", "d1", { approved: true }))
          const result = yield* Fiber.join(fiber)
          assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
          const published = yield* DurableSession.events("cb1")
          assert.deepStrictEqual(published.map((entry) => entry.seq), published.map((_, i) => i + 1))
          assert.strictEqual(new Set(published.map((entry) => entry.id)).size, published.length)
          const events = published.map((entry) => entry.event)
          for (const [tag, n] of [
            ["AgentStart", 1],
            ["TurnStart", 2],
            ["ApprovalRequested", 1],
            ["ApprovalResolved", 1],
            ["ToolExecutionStart", 3],
            ["ToolExecutionEnd", 3],
            ["TurnEnd", 2],
            ["AgentEnd", 1]
          ] as const) {
            assert.strictEqual(count(events, tag), n, tag)
          }
          assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
          for (const id of ["s1", "d1", "s2"]) {
            const ends = events.filter((event) => event._tag === "ToolExecutionEnd" && event.toolCallId === id)
            assert.strictEqual(ends.length, 1, id)
          }
        }).pipe(Effect.provide(runner("cluster", turns, ran)))
        assert.deepStrictEqual([...ran].sort(), ["deploy", "slow", "slow"])
      })
  )

  it.live("the application's approval policy decides at once, each call once, without a durable wait", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        {
          toolCalls: [
            { id: "d1", name: "deploy", params: { env: "staging" } },
            { id: "d2", name: "deploy", params: { env: "prod" } }
          ],
          usage
        },
        { text: "half deployed", usage }
      ]
      const asked: Array<string> = []
      const policy = Approvals.policy((request) => {
        asked.push(request.toolCallId)
        return request.toolCallId === "d1" ? Approvals.approved : Approvals.denied("not on fridays")
      })
      const ran: Array<string> = []
      const result = yield* DurableSession.run({ sessionId: "p1", prompt: "ship it" }).pipe(
        Effect.timeout(patience),
        Effect.provide(runner("cluster", turns, ran).pipe(Layer.provide(Layer.succeed(Approvals.Approvals, policy))))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(ran, ["deploy"])
      assert.deepStrictEqual([...asked].sort(), ["d1", "d2"])
      const denied = result.messages.find((message) => message.role === "toolResult" && message.toolCallId === "d2")
      assert(denied !== undefined && denied.role === "toolResult")
      assert.isTrue(denied.isError)
      assert.include(textOf(denied), "not on fridays")
    }))

  it.live("a call id the model uses again in a later turn is decided again, not given the earlier decision", () =>
    Effect.gen(function*() {
      // Some OpenAI-compatible servers number calls per response ("call_0" every turn).
      const turns: Turns = [
        { toolCalls: [{ id: "call_0", name: "deploy", params: { env: "staging" } }], usage },
        { toolCalls: [{ id: "call_0", name: "deploy", params: { env: "prod" } }], usage },
        { text: "staging only", usage }
      ]
      const asked: Array<unknown> = []
      const policy = Approvals.policy((request) => {
        asked.push(request.params)
        return JSON.stringify(request.params) === '{"env":"prod"}'
          ? Approvals.denied("not on fridays")
          : Approvals.approved
      })
      const ran: Array<string> = []
      const viaPolicy = yield* DurableSession.run({ sessionId: "r1", prompt: "ship it" }).pipe(
        Effect.timeout(patience),
        Effect.provide(runner("cluster", turns, ran).pipe(Layer.provide(Layer.succeed(Approvals.Approvals, policy))))
      )
      assert.deepStrictEqual(asked, [{ env: "staging" }, { env: "prod" }])
      assert.deepStrictEqual(ran, ["deploy"])
      const results = viaPolicy.messages.filter((message) => message.role === "toolResult")
      assert.deepStrictEqual(results.map((message) => message.role === "toolResult" && message.isError), [false, true])

      // Without a policy: the second call waits for its own approval.
      const waited: Array<string> = []
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "r2", prompt: "ship it" }))
        assert.isFalse(yield* DurableSession.approve("r2", "call_0", { approved: true }), "nothing asked yet")
        yield* waitFor("r2", "ApprovalRequested")
        assert.isTrue(yield* DurableSession.approve("r2", "call_0", { approved: true }))
        yield* waitFor("r2", "ApprovalRequested", 2)
        assert.strictEqual((yield* untilStatus("r2", (status) => status._tag === "Suspended"))._tag, "Suspended")
        assert.isTrue(yield* DurableSession.approve("r2", "call_0", { approved: false, reason: "not prod" }))
        const result = yield* Fiber.join(fiber)
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        const denied = result.messages.filter((message) => message.role === "toolResult").at(-1)
        assert(denied !== undefined && denied.role === "toolResult" && denied.isError)
        assert.include(textOf(denied), "not prod")
      }).pipe(Effect.provide(runner("cluster", turns, waited)))
      assert.deepStrictEqual(waited, ["deploy"])
    }))

  // Before, approve found the call waiting in the published events and completed its deferred: until the call's
  // ApprovalResolved was published, a second decision for it returned true too, answering nothing (the deferred keeps
  // its first completion). A client that retried until true took a duplicate for an answer, and waited forever.
  for (const engine of allEngines) {
    const deploys: Turns = [
      { toolCalls: [{ id: "d1", name: "deploy", params: { env: "staging" } }], usage },
      { text: "done", usage }
    ]
    const results = (result: RunState.RunResult) =>
      result.messages.flatMap((m) => m.role === "toolResult" ? [[m.toolCallId, textOf(m)]] : [])

    it.live(`a decision sent twice: the first answers the call (true), the second answers nothing (false) (${engine})`, () =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const result = yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "twice", prompt: "ship it" }))
          yield* waitFor("twice", "ApprovalRequested")
          assert.isTrue(yield* DurableSession.approve("twice", "d1", { approved: true }))
          assert.isFalse(yield* DurableSession.approve("twice", "d1", { approved: false, reason: "too late" }))
          return yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
        }).pipe(Effect.provide(runner(engine, deploys, ran)))
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(results(result), [["d1", "deployed to staging"]])
        assert.deepStrictEqual(ran, ["deploy"])
      }))

    it.live(`two decisions sent at once for one waiting call: exactly one returns true, and the call gets it (${engine})`, () =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const { answered, result } = yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "at-once", prompt: "ship it" }))
          yield* waitFor("at-once", "ApprovalRequested")
          const answered = yield* Effect.all([
            DurableSession.approve("at-once", "d1", { approved: true }),
            DurableSession.approve("at-once", "d1", { approved: false, reason: "not today" })
          ], { concurrency: "unbounded" })
          return { answered, result: yield* Fiber.join(fiber).pipe(Effect.timeout(patience)) }
        }).pipe(Effect.provide(runner(engine, deploys, ran)))
        assert.strictEqual(answered.filter((kept) => kept).length, 1, JSON.stringify(answered))
        assert.deepStrictEqual(
          results(result),
          [["d1", answered[0] ? "deployed to staging" : "Tool call denied: not today"]]
        )
        assert.deepStrictEqual(ran, answered[0] ? ["deploy"] : [])
      }))

    it.live(`a call id reused across turns, each approved as it asks (approve retried until it answers), completes (${engine})`, () =>
      Effect.gen(function*() {
        const turns: Turns = [
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "staging" } }], usage },
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
          { text: "both deployed", usage }
        ]
        const ran: Array<string> = []
        const result = yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "reused", prompt: "ship it" }))
          // A client that answers whatever asks under d1: it tries until an approve answers (bounded).
          for (let asked = 0; asked < 2; asked++) {
            const answered = yield* DurableSession.approve("reused", "d1", { approved: true }).pipe(
              Effect.repeat({ until: (answered) => answered, schedule: Schedule.spaced("20 millis"), times: 3000 })
            )
            assert.isTrue(answered, `the call asked ${asked + 1}. under d1`)
          }
          return yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
        }).pipe(Effect.provide(runner(engine, turns, ran)))
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(results(result), [["d1", "deployed to staging"], ["d1", "deployed to prod"]])
        assert.deepStrictEqual(ran, ["deploy", "deploy"])
      }))
  }

  it.live("a decision kept but not delivered (its approve failed after the store kept it) reaches the call with the next approve", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "staging" } }], usage },
        { text: "done", usage }
      ]
      const ran: Array<string> = []
      const result = yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "kept", prompt: "ship it" }))
        yield* waitFor("kept", "ApprovalRequested")
        // What an approve whose delivery met a database that went away leaves: the decision kept, the call waiting.
        const store = yield* DurableSession.Store
        const key = Body.approvalKey(Body.turnKey(0, 1), { approvalId: "d1", turn: 1, toolName: "deploy", params: {} })
        assert.isTrue((yield* store.claimDecision("kept", key, { approved: false, reason: "kept first" })).claimed)
        // The retry answers nothing of its own (false), and delivers the decision kept.
        assert.isFalse(yield* DurableSession.approve("kept", "d1", { approved: true }))
        return yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
      }).pipe(Effect.provide(runner("memory", turns, ran)))
      assert.deepStrictEqual(
        result.messages.flatMap((m) => m.role === "toolResult" ? [[m.toolCallId, textOf(m)]] : []),
        [["d1", "Tool call denied: kept first"]]
      )
      assert.deepStrictEqual(ran, [])
    }))

  // Before, the body ran the loop itself: DurableSession had no typed output.
  it.live("through the front door: a typed output, read typed by Agent.typedResult, as Agent.run gives it", () =>
    Effect.gen(function*() {
      const Answer = Schema.Struct({ answer: Schema.String, confidence: Schema.Finite })
      const turns: Turns = [
        { toolCalls: [{ id: "f1", name: "final_answer", params: { answer: "42", confidence: 0.9 } }], usage }
      ]
      const ran: Array<string> = []
      const result = yield* DurableSession.run({ sessionId: "typed-1", prompt: "the answer?", output: "answer" }).pipe(
        Effect.provide(runner("cluster", turns, ran, { outputs: { answer: Answer } }))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      const typed = yield* Agent.typedResult(Answer, result)
      assert.deepStrictEqual(typed.output, { answer: "42", confidence: 0.9 })
      const direct = yield* Agent.run({ prompt: "the answer?", output: Answer }).pipe(
        Effect.provide(Layer.mergeAll(ScriptedModel.layer(followTranscript(turns)), toolsLayer([])))
      )
      assert.deepStrictEqual(typed.output, direct.output)
      assert.deepStrictEqual(result.messages, direct.messages)
      // a session that names an output the runner does not know fails, saying which it knows
      const unknown = yield* DurableSession.run({ sessionId: "typed-2", prompt: "the answer?", output: "other" }).pipe(
        Effect.provide(runner("cluster", turns, ran, { outputs: { answer: Answer } })),
        Effect.flip
      )
      assert.strictEqual(unknown._tag, "ConfigError")
      assert.include(unknown.message, `"other"`)
      assert.include(unknown.message, `["answer"]`)
    }))

  // Before, a handoff in a DurableSession was answered "cannot hand off". Each agent's run counts its turns from
  // 1: the agent handed off to has activities of its own (model/1.1), not the replies of the run that handed off;
  // its own tools' calls are activities too (Backend.tools), not made again when the session replays.
  it.live("through the front door: a handoff goes on in the agent handed off to; its call that waits is approved by its id", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const deployer = Agent.define({
        name: "deployer",
        description: "deploys",
        input: Schema.Struct({ topic: Schema.String }),
        tools: toolsLayer(ran),
        // it reads the history the handoff keeps: the run's reply that handed off is its first
        model: ScriptedModel.layer(followTranscript([
          { text: "(the reply that handed off)" },
          { toolCalls: [{ id: "c0", name: "charge", params: { cents: 5, ms: 1 } }], usage },
          { toolCalls: [{ id: "c1", name: "deploy", params: { env: "prod" } }], usage },
          { text: "deployed by deployer", usage }
        ]))
      })
      const Tools = Toolkit.make(Agent.handoff(deployer))
      const tools = ToolRegistry.layer(Tools).pipe(
        Layer.provide(Tools.toLayer({ transfer_to_deployer: SubAgent.handoffHandler(deployer) }))
      )
      const turns: Turns = [{ toolCalls: [{ id: "h1", name: "transfer_to_deployer", params: { topic: "x" } }], usage }]
      const layer = DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(
          ScriptedModel.layer(followTranscript(turns)),
          tools,
          DurableSession.layerMemoryStore
        )),
        Layer.provideMerge(engines.cluster)
      )
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "handoff-1", prompt: "ship it" }))
        yield* waitFor("handoff-1", "ApprovalRequested")
        assert.isTrue(yield* DurableSession.approve("handoff-1", "c1", { approved: true }))
        const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.strictEqual(result.agent, "deployer")
        assert.strictEqual(textOf(result.messages.at(-1)!), "deployed by deployer")
        assertValidTranscript(result.state.messages)
        const events = (yield* DurableSession.events("handoff-1")).map((entry) => entry.event)
        const ends = events.flatMap((event) => event._tag === "AgentEnd" ? [event.outcome?._tag] : [])
        assert.deepStrictEqual(ends, ["HandedOff", "Completed"])
        assert.deepStrictEqual(
          events.filter((event) => event._tag === "TurnStart").map((event) => event.turn),
          [1, 1, 2, 3]
        )
      }).pipe(Effect.provide(layer))
      // the agent's own tools are activities too: the replay after the approval does not charge again
      assert.deepStrictEqual(ran, ["charge", "deploy"])
    }))

  // Before, on WorkflowEngine.layerMemory the sub-agent's wait was made inside its parent call's activity, with the
  // workflow's instance: the memory engine gives an activity an instance of its own, so it took the wait for an
  // interrupt and ran the activity again (the sub-agent, up to 10 times), and approve never answered.
  for (const engine of allEngines) {
    it.live(`a sub-agent's call waiting for approval is answered by its approval id (${engine})`, () =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const deployer = Agent.define({
          name: "deployer",
          description: "deploys",
          input: Schema.Struct({ topic: Schema.String }),
          tools: toolsLayer(ran),
          model: ScriptedModel.layer(followTranscript([
            { toolCalls: [{ id: "c1", name: "deploy", params: { env: "child" } }], usage },
            { text: "child done", usage }
          ]))
        })
        const Parent = Toolkit.make(Deploy, Agent.asTool(deployer))
        const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({
          deploy: ({ env }) => Effect.sync(() => (ran.push(`deploy:${env}`), `deployed to ${env}`)),
          deployer: SubAgent.handler(deployer)
        })))
        const turns: Turns = [
          { toolCalls: [{ id: "c2", name: "deployer", params: { topic: "x" } }], usage },
          { text: "all done", usage }
        ]
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.merge(ScriptedModel.layer(followTranscript(turns)), tools)),
          Layer.provideMerge(backendOf(engine))
        )
        yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "sub1", prompt: "ship it" }))
          const nested = yield* Effect.repeat(DurableSession.events("sub1"), {
            until: (events) => events.some((entry) => entry.event._tag === "Nested" &&
              entry.event.event._tag === "ApprovalRequested"),
            schedule: Schedule.spaced("10 millis"),
            times: 1000
          })
          const request = nested.map((entry) => entry.event).find((event) =>
            event._tag === "Nested" && event.event._tag === "ApprovalRequested"
          )
          assert(request !== undefined && request._tag === "Nested" && request.event._tag === "ApprovalRequested")
          assert.strictEqual(request.event.approvalId, "c2/c1")
          assert.isFalse(yield* DurableSession.approve("sub1", "c1", { approved: true }), "the child's own call id")
          assert.isTrue(yield* DurableSession.approve("sub1", "c2/c1", { approved: true }))
          const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
          assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        }).pipe(Effect.provide(layer))
        assert.deepStrictEqual(ran, ["deploy"])
      }))

    // Before, the session resumed after the approval made the parent's call again from its start: the sub-agent
    // started over (its tools and model calls made again) as a new run, whose events were all published again
    // (its AgentStart … ApprovalRequested a second time, after the AgentEnd of the run that was stopped).
    it.live(`a sub-agent's call that the session waited for: the sub-agent goes on from where it was; its events once each, its tools and model calls once (${engine})`, () =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        let childCalls = 0
        const childTurns: Turns = [
          { toolCalls: [{ id: "s1", name: "step", params: { n: 1 } }], usage },
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
          { text: "child done", usage }
        ]
        const deployer = Agent.define({
          name: "deployer",
          description: "deploys",
          input: Schema.Struct({ topic: Schema.String }),
          tools: toolsLayer(ran),
          model: ScriptedModel.layer((_index, request) => {
            childCalls++
            return childTurns[request.prompt.content.filter((message) => message.role === "assistant").length]
          }, { record: false })
        })
        const Parent = Toolkit.make(Agent.asTool(deployer))
        const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({ deployer: SubAgent.handler(deployer) })))
        const turns: Turns = [
          { toolCalls: [{ id: "c2", name: "deployer", params: { topic: "x" } }], usage },
          { text: "all done", usage }
        ]
        const { events: local, plugin } = recorder()
        const reference = yield* Agent.run({ prompt: "ship it", plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(ScriptedModel.layer(followTranscript(turns)), tools)),
          Effect.provideService(Approvals.Approvals, Approvals.allowAll)
        )
        assert.deepStrictEqual([ran, childCalls], [["step", "deploy"], 3])
        ran.length = 0
        childCalls = 0
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.merge(ScriptedModel.layer(followTranscript(turns)), tools)),
          Layer.provideMerge(backendOf(engine))
        )
        yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "goes-on", prompt: "ship it" }))
          yield* Effect.repeat(DurableSession.events("goes-on"), {
            until: (events) => events.some((entry) => innerTag(entry.event) === "ApprovalRequested"),
            schedule: Schedule.spaced("10 millis"),
            times: 1000
          })
          // the session waits (suspended) before it is approved: it is resumed, and replays
          assert.strictEqual((yield* untilStatus("goes-on", (status) => status._tag === "Suspended"))._tag, "Suspended")
          assert.isTrue(yield* DurableSession.approve("goes-on", "c2/d1", { approved: true }))
          const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
          assertValidTranscript(result.state.messages)
          assert.deepStrictEqual(result.messages, reference.messages)
          assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
          // what the sub-agents spent counts once, in the run that replayed the call's parts too
          assert.deepStrictEqual(result.usage, reference.usage)
          const published = yield* DurableSession.events("goes-on")
          assert.deepStrictEqual(published.map((entry) => tagOf(entry.event)), local.map(tagOf))
        }).pipe(Effect.provide(layer))
        assert.deepStrictEqual([ran, childCalls], [["step", "deploy"], 3])
      }))
  }

  it.live("a sub-agent's call waiting for approval, cancelled: it is denied, the sub-agent ends its run, then the session's run ends Cancelled", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const childTurns: Turns = [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
        { text: "child stopped", usage }
      ]
      const deployer = Agent.define({
        name: "deployer",
        description: "deploys",
        input: Schema.Struct({ topic: Schema.String }),
        tools: toolsLayer(ran),
        model: ScriptedModel.layer(followTranscript(childTurns), { record: false })
      })
      const Parent = Toolkit.make(Agent.asTool(deployer))
      const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({ deployer: SubAgent.handler(deployer) })))
      const turns: Turns = [
        { toolCalls: [{ id: "c2", name: "deployer", params: { topic: "x" } }], usage },
        { text: "never reached", usage }
      ]
      const layer = DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(followTranscript(turns)), tools, DurableSession.layerMemoryStore)),
        Layer.provideMerge(engines.cluster)
      )
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "sub-cancel", prompt: "ship it" }))
        yield* Effect.repeat(DurableSession.events("sub-cancel"), {
          until: (events) => events.some((entry) => innerTag(entry.event) === "ApprovalRequested"),
          schedule: Schedule.spaced("10 millis"),
          times: 1000
        })
        yield* DurableSession.cancel("sub-cancel", "stop the deploy")
        const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
        assert.deepStrictEqual(result.outcome, { _tag: "Cancelled", reason: "stop the deploy" })
        assertValidTranscript(result.state.messages)
        // the sub-agent's call was denied with the cancel, and the sub-agent answered its call before the run ended
        assert.deepStrictEqual(result.messages.map(textOf), ["ship it", "", "child stopped"])
        const resolved = (yield* DurableSession.events("sub-cancel")).flatMap((entry) => {
          let event = entry.event
          while (event._tag === "Nested") event = event.event
          return event._tag === "ApprovalResolved" ? [[event.approvalId, event.approved, event.reason]] : []
        })
        assert.deepStrictEqual(resolved, [["c2/d1", false, "the run was cancelled: stop the deploy"]])
        const model = yield* ScriptedModel.ScriptedModel
        assert.strictEqual(yield* model.calls, 1)
      }).pipe(Effect.provide(layer))
      assert.deepStrictEqual(ran, [])
    }))

  it.live("a grandchild's call that the session waited for: both sub-agents go on from where they were, each event once", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const calls = { scout: 0, researcher: 0 }
      const scripted = (agent: keyof typeof calls, turns: Turns) =>
        ScriptedModel.layer((_index, request) => {
          calls[agent]++
          return turns[request.prompt.content.filter((message) => message.role === "assistant").length]
        }, { record: false })
      const scout = Agent.define({
        name: "scout",
        description: "deploys",
        input: Schema.Struct({ topic: Schema.String }),
        tools: toolsLayer(ran),
        model: scripted("scout", [
          { toolCalls: [{ id: "s1", name: "step", params: { n: 1 } }], usage },
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
          { text: "scout done", usage }
        ])
      })
      const Middle = Toolkit.make(Agent.asTool(scout))
      const researcher = Agent.define({
        name: "researcher",
        description: "sends the scout",
        input: Schema.Struct({ topic: Schema.String }),
        tools: ToolRegistry.layer(Middle).pipe(Layer.provide(Middle.toLayer({ scout: SubAgent.handler(scout) }))),
        model: scripted("researcher", [
          { toolCalls: [{ id: "q1", name: "scout", params: { topic: "y" } }], usage },
          { text: "researcher done", usage }
        ])
      })
      const Parent = Toolkit.make(Agent.asTool(researcher))
      const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({ researcher: SubAgent.handler(researcher) })))
      const turns: Turns = [
        { toolCalls: [{ id: "c2", name: "researcher", params: { topic: "x" } }], usage },
        { text: "all done", usage }
      ]
      const { events: local, plugin } = recorder()
      const reference = yield* Agent.run({ prompt: "go", plugins: [plugin] }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer(followTranscript(turns)), tools)),
        Effect.provideService(Approvals.Approvals, Approvals.allowAll)
      )
      assert.deepStrictEqual([ran, calls], [["step", "deploy"], { scout: 3, researcher: 2 }])
      ran.length = 0
      calls.scout = calls.researcher = 0
      const layer = DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(followTranscript(turns)), tools, DurableSession.layerMemoryStore)),
        Layer.provideMerge(engines.cluster)
      )
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "deep", prompt: "go" }))
        yield* Effect.repeat(DurableSession.events("deep"), {
          until: (events) => events.some((entry) => innerTag(entry.event) === "ApprovalRequested"),
          schedule: Schedule.spaced("10 millis"),
          times: 1000
        })
        assert.strictEqual((yield* untilStatus("deep", (status) => status._tag === "Suspended"))._tag, "Suspended")
        assert.isTrue(yield* DurableSession.approve("deep", "c2/q1/d1", { approved: true }))
        const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
        assert.deepStrictEqual(result.messages, reference.messages)
        assert.deepStrictEqual(result.usage, reference.usage)
        const published = yield* DurableSession.events("deep")
        assert.deepStrictEqual(published.map((entry) => tagOf(entry.event)), local.map(tagOf))
      }).pipe(Effect.provide(layer))
      assert.deepStrictEqual([ran, calls], [["step", "deploy"], { scout: 3, researcher: 2 }])
    }))

  describe("a sub-agent that uses a call id again in its next turn (a provider numbering calls per response)", () => {
    /** The parent's call c2 runs a deployer whose two turns both call call_0: staging, then production. */
    const setup = (policy?: Approvals.Service) => {
      const ran: Array<string> = []
      const ChildTools = Toolkit.make(Deploy)
      const deployer = Agent.define({
        name: "deployer",
        description: "deploys",
        input: Schema.Struct({ topic: Schema.String }),
        tools: ToolRegistry.layer(ChildTools).pipe(Layer.provide(ChildTools.toLayer({
          deploy: ({ env }) => Effect.sync(() => (ran.push(`deploy:${env}`), `deployed to ${env}`))
        }))),
        model: ScriptedModel.layer(followTranscript([
          { toolCalls: [{ id: "call_0", name: "deploy", params: { env: "staging" } }], usage },
          { toolCalls: [{ id: "call_0", name: "deploy", params: { env: "production" } }], usage },
          { text: "child done", usage }
        ]))
      })
      const Parent = Toolkit.make(Deploy, Agent.asTool(deployer))
      const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({
        deploy: ({ env }) => Effect.sync(() => (ran.push(`deploy:${env}`), `deployed to ${env}`)),
        deployer: SubAgent.handler(deployer)
      })))
      const turns: Turns = [
        { toolCalls: [{ id: "c2", name: "deployer", params: { topic: "x" } }], usage },
        { text: "all done", usage }
      ]
      const base = Layer.mergeAll(ScriptedModel.layer(followTranscript(turns)), tools, DurableSession.layerMemoryStore)
      const layer = DurableSession.layer().pipe(
        Layer.provideMerge(policy === undefined ? base : Layer.merge(base, Layer.succeed(Approvals.Approvals, policy))),
        Layer.provideMerge(engines.cluster)
      )
      return { ran, layer }
    }
    const childResults = (result: RunState.RunResult) =>
      result.messages.filter((message) => message.role === "toolResult").map(textOf)

    it.live("with a policy, the second call_0 is decided on its own, not given the first decision", () =>
      Effect.gen(function*() {
        const asked: Array<unknown> = []
        const policy = Approvals.policy((request) => {
          asked.push([request.approvalId, request.params])
          return JSON.stringify(request.params).includes("production") ? Approvals.denied("not prod") : Approvals.approved
        })
        const { layer, ran } = setup(policy)
        const result = yield* DurableSession.run({ sessionId: "again1", prompt: "ship it" }).pipe(
          Effect.timeout(patience),
          Effect.provide(layer)
        )
        assert.deepStrictEqual(asked, [["c2/call_0", { env: "staging" }], ["c2/call_0", { env: "production" }]])
        assert.deepStrictEqual(ran, ["deploy:staging"])
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(childResults(result), ["child done"])
      }))

    // Before, the session replayed after each decision and ran the sub-agent again, its model included: a model
    // that asked for production where it had asked for staging asked anew (the key has the call's tool and
    // arguments). Now the sub-agent goes on from where it was: its model is not asked again, and the call approved
    // is the very call that runs.
    it.live("wrong-call attack: a sub-agent whose model would ask another call when asked again is not asked again", () =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        let asked = 0
        const ChildTools = Toolkit.make(Deploy)
        const deployer = Agent.define({
          name: "deployer",
          description: "deploys",
          input: Schema.Struct({ topic: Schema.String }),
          tools: ToolRegistry.layer(ChildTools).pipe(Layer.provide(ChildTools.toLayer({
            deploy: ({ env }) => Effect.sync(() => (ran.push(`deploy:${env}`), `deployed to ${env}`))
          }))),
          model: ScriptedModel.layer((_index, request) =>
            request.prompt.content.some((message) => message.role === "tool")
              ? { text: "child done", usage }
              : {
                toolCalls: [{ id: "call_0", name: "deploy", params: { env: asked++ === 0 ? "staging" : "production" } }],
                usage
              }, { record: false })
        })
        const Parent = Toolkit.make(Agent.asTool(deployer))
        const tools = ToolRegistry.layer(Parent).pipe(Layer.provide(Parent.toLayer({ deployer: SubAgent.handler(deployer) })))
        const turns: Turns = [
          { toolCalls: [{ id: "c2", name: "deployer", params: { topic: "x" } }], usage },
          { text: "all done", usage }
        ]
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(followTranscript(turns)), tools, DurableSession.layerMemoryStore)),
          Layer.provideMerge(engines.cluster)
        )
        yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "replayed", prompt: "ship it" }))
          const requests = (events: ReadonlyArray<DurableSession.Published>) =>
            events.flatMap((entry) =>
              entry.event._tag === "Nested" && entry.event.event._tag === "ApprovalRequested" ? [entry.event.event] : []
            )
          const first = yield* Effect.repeat(DurableSession.events("replayed"), {
            until: (events) => requests(events).length >= 1,
            schedule: Schedule.spaced("10 millis"),
            times: 1000
          })
          assert.deepStrictEqual(requests(first).map((request) => request.params), [{ env: "staging" }])
          assert.strictEqual((yield* untilStatus("replayed", (status) => status._tag === "Suspended"))._tag, "Suspended")
          assert.isTrue(yield* DurableSession.approve("replayed", "c2/call_0", { approved: true }))
          const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
          assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
          assert.deepStrictEqual(
            requests(yield* DurableSession.events("replayed")).map((request) => request.params),
            [{ env: "staging" }]
          )
        }).pipe(Effect.provide(layer))
        assert.strictEqual(asked, 1)
        assert.deepStrictEqual(ran, ["deploy:staging"])
        // a sub-agent that its call's activity runs again from its start asks its model again: its key tells the
        // calls apart, so a decision never answers another call asked where it was
        const key = (env: string) =>
          Body.approvalKey("1", { approvalId: "c2/call_0", turn: 1, toolName: "deploy", params: { env } })
        assert.notStrictEqual(key("staging"), key("production"))
      }))

    it.live("wrong-call attack: without a policy, approving the first call_0 does not approve the second", () =>
      Effect.gen(function*() {
        const { layer, ran } = setup()
        yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "again2", prompt: "ship it" }))
          const nestedRequests = (events: ReadonlyArray<DurableSession.Published>) =>
            events.filter((entry) => entry.event._tag === "Nested" && entry.event.event._tag === "ApprovalRequested")
          const waitNested = (n: number) =>
            Effect.repeat(DurableSession.events("again2"), {
              until: (events) => nestedRequests(events).length >= n,
              schedule: Schedule.spaced("10 millis"),
              times: 1000
            })
          yield* waitNested(1)
          assert.isTrue(yield* DurableSession.approve("again2", "c2/call_0", { approved: true }))
          // the production deploy asks for its own decision, and waits for it: it is answered by this denial
          const second = nestedRequests(yield* waitNested(2)).at(-1)?.event
          assert.deepStrictEqual(
            second?._tag === "Nested" && second.event._tag === "ApprovalRequested" && second.event.params,
            { env: "production" }
          )
          assert.isTrue(yield* DurableSession.approve("again2", "c2/call_0", { approved: false, reason: "not prod" }))
          const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
          assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
          assert.deepStrictEqual(childResults(result), ["child done"])
        }).pipe(Effect.provide(layer))
        // the sub-agent runs again in each replay of the session (its staging deploy too); production never
        assert.deepStrictEqual([...new Set(ran)], ["deploy:staging"])
      }))
  })

  it.live("with an interactive handle (one process's), a call waits on its durable deferred as without one", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
        { text: "deployed", usage }
      ]
      const handle = yield* Approvals.interactive()
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "ia1", prompt: "ship it" }))
        yield* waitFor("ia1", "ApprovalRequested")
        assert.strictEqual((yield* untilStatus("ia1", (status) => status._tag === "Suspended"))._tag, "Suspended")
        assert.deepStrictEqual(yield* handle.pending, [])
        yield* DurableSession.approve("ia1", "d1", { approved: true })
        const result = yield* Fiber.join(fiber)
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      }).pipe(
        Effect.provide(runner("cluster", turns, ran).pipe(Layer.provide(Layer.succeed(Approvals.Approvals, handle))))
      )
      assert.deepStrictEqual(ran, ["deploy"])
    }))

  it.live("steering queued before the session's next turn is delivered once", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
        { text: "ok", usage }
      ]
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "st1", prompt: "go" }))
        yield* waitFor("st1", "ApprovalRequested")
        yield* DurableSession.steer("st1", "use the blue button")
        yield* DurableSession.approve("st1", "d1", { approved: false, reason: "not today" })
        const result = yield* Fiber.join(fiber)
        const steered = result.messages.filter((message) => textOf(message) === "use the blue button")
        assert.strictEqual(steered.length, 1)
        const events = (yield* DurableSession.events("st1")).map((entry) => entry.event)
        assert.strictEqual(count(events, "SteeringDelivered"), 1)
      }).pipe(Effect.provide(runner("cluster", turns, [])))
    }))

  it.effect("the memory store keeps a cancel only while a run may be in flight, one at most, bounded apart from the messages", () =>
    storeCancels(DurableSession.makeMemoryStore(), "memory"))

  // The take that read the cancel is recorded: the body replayed (the engine resumes a session by running its
  // body again, as another runner does after a crash) ends the run at the same step, with the same reason.
  it.live("a cancelled run replayed ends at the same step: each model call and event once, the next run not cancelled", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
        { text: "nothing deployed", usage },
        { text: "said so", usage }
      ]
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        yield* DurableSession.start({ sessionId: "cr1", prompt: "deploy" })
        yield* waitFor("cr1", "ApprovalRequested")
        yield* DurableSession.cancel("cr1", "not today")
        yield* waitFor("cr1", "AgentEnd")
        // the session waits idle (suspended): the follow-up resumes it, and its body replays the cancelled run
        yield* DurableSession.followUp("cr1", "then just say so")
        yield* waitFor("cr1", "AgentEnd", 2)
        const ends = (yield* DurableSession.events("cr1")).flatMap((entry) =>
          entry.event._tag === "AgentEnd" && entry.event.result !== undefined ? [entry.event.result] : []
        )
        const result = ends.at(-1)!
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(result.state.messages.map(textOf), [
          "deploy",
          "",
          "Tool call cancelled before it started: not today. It did not run.",
          "nothing deployed",
          "then just say so",
          "said so"
        ])
        const model = yield* ScriptedModel.ScriptedModel
        assert.strictEqual(yield* model.calls, 3)
        const events = (yield* DurableSession.events("cr1")).map((entry) => entry.event)
        assert.deepStrictEqual(
          events.flatMap((event) => event._tag === "AgentEnd" ? [event.outcome] : []),
          [{ _tag: "Cancelled", reason: "not today" }, { _tag: "Completed" }]
        )
        assert.strictEqual(count(events, "ApprovalRequested"), 1)
        assert.strictEqual(count(events, "TurnStart"), 3)
      }).pipe(Effect.provide(runner("cluster", turns, ran, { idle: "1 minute" })))
      assert.deepStrictEqual(ran, [])
    }))

  it.live("an idle session waits for a follow-up, then carries on with it", () =>
    Effect.gen(function*() {
      const turns: Turns = [{ text: "first", usage }, { text: "second", usage }]
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "i1", prompt: "hello" }))
        yield* waitFor("i1", "TurnEnd")
        yield* DurableSession.followUp("i1", "and then?")
        const result = yield* Fiber.join(fiber)
        assert.deepStrictEqual(result.messages.map(textOf), ["hello", "first", "and then?", "second"])
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      }).pipe(Effect.provide(runner("cluster", turns, [], { idle: "1 second" })))
    }))

  // Before, only a run that completed waited for a follow-up: one that a guardrail ended finished the session, and
  // the follow-up was never delivered. Every ending the loop decides is continued, as Agent.runContinue does.
  for (const engine of allEngines) {
    it.live(`an idle session whose run a guardrail ended carries on with a follow-up, as Agent.runContinue (${engine})`, () =>
      Effect.gen(function*() {
        const guardrail = Guardrail.output(({ text }) =>
          Effect.succeed(text.includes("secret") ? Guardrail.trip("the answer holds the secret") : Guardrail.pass), {
          name: "secrets"
        })
        const turns: Turns = [{ text: "The secret is 42.", usage }, { text: "I cannot tell you that.", usage }]
        const reference = yield* Effect.gen(function*() {
          const ended = yield* Agent.run({ prompt: "the secret?", plugins: [guardrail] })
          const steering = yield* Steering.make()
          yield* steering.followUp("Then say what you can.")
          return yield* Agent.runContinue(ended.state, { plugins: [guardrail], steering })
        }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer(followTranscript(turns)), toolsLayer([]))))
        yield* Effect.gen(function*() {
          const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "trip1", prompt: "the secret?" }))
          yield* waitFor("trip1", "AgentEnd")
          const ended = (yield* DurableSession.events("trip1")).flatMap((entry) =>
            entry.event._tag === "AgentEnd" ? [entry.event.outcome?._tag] : []
          )
          assert.deepStrictEqual(ended, ["GuardrailTripped"])
          yield* DurableSession.followUp("trip1", "Then say what you can.")
          const result = yield* Fiber.join(fiber).pipe(Effect.timeout(patience))
          assert.deepStrictEqual(result.state.messages, reference.state.messages)
          assert.deepStrictEqual(result.outcome, reference.outcome)
          assert.deepStrictEqual(result.messages.map(textOf), [
            "the secret?",
            "[This answer was withheld: the output guardrail secrets tripped (the answer holds the secret).]",
            "Then say what you can.",
            "I cannot tell you that."
          ])
        }).pipe(Effect.provide(runner(engine, turns, [], { idle: "1 second", plugins: [guardrail] })))
      }))
  }

  it.live("a call that must not run twice whose intent record exists answers \"outcome unknown\", unrun", () =>
    Effect.gen(function*() {
      const turns = threeTurns("charge", 1)
      const ran: Array<string> = []
      const result = yield* Effect.gen(function*() {
        // As if the runner had died in `tool/2/c2` after writing its intent: the record is there.
        const store = yield* DurableSession.Store
        const executionId = yield* DurableSession.SessionWorkflow.executionId({
          sessionId: "u1",
          version: 1,
          request: { prompt: "go" }
        })
        const key = yield* Activity.idempotencyKey("tool/2/c2").pipe(
          Effect.provideService(
            WorkflowEngine.WorkflowInstance,
            WorkflowEngine.WorkflowInstance.initial(DurableSession.SessionWorkflow, executionId)
          )
        )
        assert.isTrue(yield* store.claimIntent("u1", key))
        return yield* DurableSession.run({ sessionId: "u1", prompt: "go" })
      }).pipe(Effect.provide(runner("cluster", turns, ran)))
      assert.deepStrictEqual(ran, ["step"])
      const answer = result.messages.find((message) => message.role === "toolResult" && message.toolCallId === "c2")
      assert(answer !== undefined && answer.role === "toolResult")
      assert.isTrue(answer.isError)
      assert.include(Message.textOf(answer), "outcome is unknown")
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
    }))

  it.live("a storage failure suspends the session; the supervisor resumes it and it completes, no turn twice", () =>
    Effect.gen(function*() {
      const turns = threeTurns("slow", 1)
      const failing = { on: false }
      const base = DurableSession.makeMemoryStore()
      const flaky: DurableSession.Store["Service"] = {
        ...base,
        publish: (sessionId, entries) =>
          failing.on
            ? Effect.fail(new DurableSession.StoreError({ operation: "publish", detail: "connection refused" }))
            : base.publish(sessionId, entries)
      }
      const layer = DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(
          ScriptedModel.layer(followTranscript(turns)),
          toolsLayer([]),
          Layer.succeed(DurableSession.Store, flaky)
        )),
        Layer.provideMerge(engines.cluster)
      )
      yield* Effect.gen(function*() {
        failing.on = true
        yield* DurableSession.start({ sessionId: "f1", prompt: "go" })
        const suspended = yield* untilStatus("f1", (status) => status._tag === "Suspended")
        assert.deepStrictEqual(suspended, { _tag: "Suspended", failed: true })
        assert.deepStrictEqual(yield* DurableSession.suspended, [{ sessionId: "f1", failed: true }])
        failing.on = false
        assert.deepStrictEqual(yield* DurableSession.resumeSuspended, ["f1"])
        const finished = yield* untilStatus("f1", (status) => status._tag === "Finished")
        assert(finished._tag === "Finished")
        assert.deepStrictEqual(finished.result.outcome, { _tag: "Completed" })
        assertValidTranscript(finished.result.messages)
        const model = yield* ScriptedModel.ScriptedModel
        assert.strictEqual(yield* model.calls, 3)
        const events = (yield* DurableSession.events("f1")).map((entry) => entry.event)
        assert.strictEqual(count(events, "AgentStart"), 1)
        assert.strictEqual(count(events, "AgentEnd"), 1)
      }).pipe(Effect.provide(layer))
    }))

  // What DurableSessionCluster's "PostgreSQL restarted" test met (1 run in 10 to 20): a run given up while it waits
  // for an activity (its runner lost the shard's lock) leaves behind the interrupt its entity client sends for that
  // activity's request, and the replay's activity, the same request, is aborted by it. Effect 4.1 answers such an
  // activity Suspended (not failed), and the session stayed suspended as if it waited on something, for good.
  it.live(
    "attack (PostgreSQL restarted): an activity aborted by the interrupt a given-up run left behind suspends the " +
      "session as failed; the supervisor resumes it, the call is made again, and it completes",
    () =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const slowStarted = yield* Latch.make()
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.mergeAll(
            ScriptedModel.layer(followTranscript(threeTurns("slow", 2000))),
            toolsLayer(ran, (name) => name === "slow" && slowStarted.openUnsafe()),
            DurableSession.layerMemoryStore
          )),
          Layer.provideMerge(engines.cluster)
        )
        yield* Effect.gen(function*() {
          yield* DurableSession.start({ sessionId: "abort1", prompt: "go" })
          yield* slowStarted.await.pipe(Effect.timeout("20 seconds"))
          yield* interruptActivity("abort1", "tool/2/c2")
          assert.deepStrictEqual(yield* untilStatus("abort1", (status) => status._tag === "Suspended"), {
            _tag: "Suspended",
            failed: true
          })
          assert.deepStrictEqual(yield* DurableSession.resumeSuspended, ["abort1"])
          const finished = yield* untilStatus("abort1", (status) => status._tag === "Finished")
          assert(finished._tag === "Finished")
          assert.deepStrictEqual(finished.result.outcome, { _tag: "Completed" })
          assertValidTranscript(finished.result.messages)
          const answer = finished.result.messages.find((m) => m.role === "toolResult" && m.toolCallId === "c2")
          assert(answer !== undefined && answer.role === "toolResult" && !answer.isError)
          assert.strictEqual(Message.textOf(answer), "slept 2000 ms")
          // the aborted call was made again; no turn was
          assert.deepStrictEqual(ran, ["step", "slow", "slow"])
          const model = yield* ScriptedModel.ScriptedModel
          assert.strictEqual(yield* model.calls, 3)
        }).pipe(Effect.provide(layer))
      })
  )

  it.live(
    "attack (PostgreSQL restarted): a session whose first activity cannot reach the store is still found by the supervisor and resumed",
    () =>
      Effect.gen(function*() {
        const turns = threeTurns("slow", 1)
        const failing = { on: true }
        const base = DurableSession.makeMemoryStore()
        // The database goes away while the session's first activity records it: only writes made inside the
        // workflow fail (the submitter's own write went through before).
        const flaky: DurableSession.Store["Service"] = {
          ...base,
          register: (sessionId, at) =>
            Effect.flatMap(Effect.serviceOption(WorkflowEngine.WorkflowInstance), (instance) =>
              failing.on && Option.isSome(instance)
                ? Effect.fail(new DurableSession.StoreError({ operation: "register", detail: "connection refused" }))
                : base.register(sessionId, at))
        }
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.mergeAll(
            ScriptedModel.layer(followTranscript(turns)),
            toolsLayer([]),
            Layer.succeed(DurableSession.Store, flaky)
          )),
          Layer.provideMerge(engines.cluster)
        )
        yield* Effect.gen(function*() {
          yield* DurableSession.start({ sessionId: "reg1", prompt: "go" })
          assert.deepStrictEqual(yield* untilStatus("reg1", (status) => status._tag === "Suspended"), {
            _tag: "Suspended",
            failed: true
          })
          // The supervisor lists the sessions the store knows: this one is among them.
          assert.deepStrictEqual(yield* DurableSession.suspended, [{ sessionId: "reg1", failed: true }])
          failing.on = false
          assert.deepStrictEqual(yield* DurableSession.resumeSuspended, ["reg1"])
          const finished = yield* untilStatus("reg1", (status) => status._tag === "Finished")
          assert(finished._tag === "Finished")
          assert.deepStrictEqual(finished.result.outcome, { _tag: "Completed" })
          assertValidTranscript(finished.result.messages)
        }).pipe(Effect.provide(layer))
      })
  )

  it.live(
    "attack: a submit lost after the session was recorded (its client died, the database went away) is made again " +
      "by the supervisor, once it is older than 10 s, and the session finishes",
    () =>
      Effect.gen(function*() {
        const store = DurableSession.makeMemoryStore()
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.mergeAll(
            ScriptedModel.layer(followTranscript(threeTurns("slow", 1))),
            toolsLayer([]),
            Layer.succeed(DurableSession.Store, store)
          )),
          Layer.provideMerge(engines.cluster)
        )
        // What DurableSession.start records before it submits: the session and its payload. The submit never came.
        const json = Schema.encodeSync(Schema.fromJsonString(Schema.toCodecJson(DurableSession.Payload)))
        const now = Date.now()
        yield* store.submit("lost1", now - 60_000, json({ sessionId: "lost1", version: 1, request: { prompt: "go" } }))
        yield* store.submit("fresh1", now, json({ sessionId: "fresh1", version: 1, request: { prompt: "go" } }))
        yield* store.submit("halted1", now - 60_000, json({ sessionId: "halted1", version: 1, request: { prompt: "go" } }))
        yield* Effect.gen(function*() {
          // interrupted before its workflow began: it has ended for good, and is never submitted again
          yield* DurableSession.interrupt("halted1")
          assert.deepStrictEqual(yield* DurableSession.poll("lost1"), { _tag: "Unknown" })
          // the lost one is submitted again; the fresh one may still be on its way, and is left alone
          assert.deepStrictEqual(yield* DurableSession.resumeSuspended, ["lost1"])
          const finished = yield* untilStatus("lost1", (status) => status._tag === "Finished")
          assert(finished._tag === "Finished")
          assert.deepStrictEqual(finished.result.outcome, { _tag: "Completed" })
          assert.deepStrictEqual(Message.textOf(finished.result.messages.at(-1)!), "all done")
          assertValidTranscript(finished.result.messages)
          // its workflow began: it is no longer waiting for a submit, and nothing is submitted twice
          assert.deepStrictEqual(
            (yield* store.sessions).map(({ sessionId, status }) => [sessionId, status]),
            [["lost1", "finished"], ["fresh1", "submitted"], ["halted1", "finished"]]
          )
          assert.deepStrictEqual(yield* DurableSession.resumeSuspended, [])
        }).pipe(Effect.provide(layer))
      })
  )

  it.live(
    "attack (PostgreSQL restarted): supervise outlives a pass that dies as the engine does when its database goes away, and resumes on",
    () =>
      Effect.gen(function*() {
        const turns = threeTurns("slow", 1)
        const failing = { publish: true, sessions: 3 }
        const base = DurableSession.makeMemoryStore()
        const flaky: DurableSession.Store["Service"] = {
          ...base,
          publish: (sessionId, entries) =>
            failing.publish
              ? Effect.fail(new DurableSession.StoreError({ operation: "publish", detail: "connection refused" }))
              : base.publish(sessionId, entries),
          // The first passes die, as `ClusterWorkflowEngine.poll` does when a query meets a restarting server.
          sessions: Effect.suspend(() =>
            failing.sessions-- > 0
              ? Effect.die(
                new ClusterError.PersistenceError({ cause: new Error("the database system is shutting down") })
              )
              : base.sessions
          )
        }
        const layer = DurableSession.layer().pipe(
          Layer.provideMerge(Layer.mergeAll(
            ScriptedModel.layer(followTranscript(turns)),
            toolsLayer([]),
            Layer.succeed(DurableSession.Store, flaky)
          )),
          Layer.provideMerge(engines.cluster)
        )
        yield* Effect.gen(function*() {
          const supervisor = yield* Effect.forkChild(DurableSession.supervise({ every: "20 millis" }))
          yield* DurableSession.start({ sessionId: "sup1", prompt: "go" })
          yield* untilStatus("sup1", (status) => status._tag === "Suspended")
          failing.publish = false
          // Only the supervisor resumes it.
          const finished = yield* untilStatus("sup1", (status) => status._tag === "Finished")
          assert(finished._tag === "Finished", finished._tag)
          assert.deepStrictEqual(finished.result.outcome, { _tag: "Completed" })
          assert.isTrue(failing.sessions < 0, "the dying passes ran")
          assert.isUndefined(supervisor.pollUnsafe(), "the supervisor still runs")
          yield* Fiber.interrupt(supervisor)
        }).pipe(Effect.provide(layer))
      })
  )

  it.live(
    "attack: a session id with a NUL byte (or any id the rule refuses) is refused with InvalidSessionId by every entry and store",
    () =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const bad = ["nul\u0000byte", "", ".hidden", "a/b", "x".repeat(129), "tab\there"]
        yield* Effect.gen(function*() {
          const store = yield* DurableSession.Store
          for (const sessionId of bad) {
            const refused = <A, E extends { readonly _tag: string }, R>(what: string, effect: Effect.Effect<A, E, R>) =>
              Effect.map(Effect.flip(effect), (error) => {
                assert.strictEqual(error._tag, "InvalidSessionId", `${what} ${JSON.stringify(sessionId)}`)
                assert(error instanceof CheckpointStore.InvalidSessionId)
                assert.strictEqual(error.sessionId, sessionId)
              })
            yield* refused("start", DurableSession.start({ sessionId, prompt: "go" }))
            yield* refused("run", DurableSession.run({ sessionId, prompt: "go" }))
            yield* refused("poll", DurableSession.poll(sessionId))
            yield* refused("resume", DurableSession.resume(sessionId))
            yield* refused("interrupt", DurableSession.interrupt(sessionId))
            yield* refused("steer", DurableSession.steer(sessionId, "hi"))
            yield* refused("followUp", DurableSession.followUp(sessionId, "hi"))
            yield* refused("approve", DurableSession.approve(sessionId, "d1", { approved: true }))
            yield* refused("events", DurableSession.events(sessionId))
            yield* refused("store.register", store.register(sessionId, 0))
            yield* refused("store.appendInbox", store.appendInbox(sessionId, "steering", Message.user("hi")))
            yield* refused("store.claimIntent", store.claimIntent(sessionId, "k"))
            yield* refused("store.publish", store.publish(sessionId, []))
            yield* refused("store.events", store.events(sessionId, 0))
            yield* refused("store.forget", store.forget(sessionId))
            // A checkpoint store (Session's) refuses it the same way.
            yield* refused("Session.run", Session.run({ id: sessionId, prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, CheckpointStore.memory())))
          }
          // Nothing was recorded, and nothing is left for the supervisor to resume again and again.
          assert.deepStrictEqual(yield* store.sessions, [])
          assert.deepStrictEqual(yield* DurableSession.suspended, [])
          // The one schema says the same.
          for (const sessionId of bad) assert.isFalse(Schema.is(CheckpointStore.SessionId)(sessionId), sessionId)
          // A valid id still runs.
          const result = yield* DurableSession.run({ sessionId: "ok-1.a_b", prompt: "go" })
          assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        }).pipe(Effect.provide(runner("cluster", [{ text: "hi", usage }], ran)))
        assert.deepStrictEqual(ran, [])
      })
  )

  it.live("the wall-clock budget counts from the durable start: a session resumed past it ends BudgetExceeded", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
        { text: "deployed", usage }
      ]
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(
          DurableSession.run({ sessionId: "w1", prompt: "go", config: { budgets: { wallClock: 400 } } })
        )
        yield* waitFor("w1", "ApprovalRequested")
        // The approval comes after the budget ran out: the replay knows the time spent since the start.
        yield* Effect.sleep("800 millis")
        yield* DurableSession.approve("w1", "d1", { approved: true })
        const result = yield* Fiber.join(fiber)
        assert.strictEqual(result.outcome._tag, "BudgetExceeded")
        const model = yield* ScriptedModel.ScriptedModel
        assert.strictEqual(yield* model.calls, 1)
      }).pipe(Effect.provide(runner("cluster", turns, ran)))
      assert.deepStrictEqual(ran, [])
    }))

  it.live("reap forgets finished sessions older than the retention, and no other", () =>
    Effect.gen(function*() {
      yield* Effect.gen(function*() {
        yield* DurableSession.run({ sessionId: "r1", prompt: "go" })
        assert.isAbove((yield* DurableSession.events("r1")).length, 0)
        assert.deepStrictEqual(yield* DurableSession.reap("1 hour"), [])
        assert.deepStrictEqual(yield* DurableSession.reap(0), ["r1"])
        assert.deepStrictEqual(yield* DurableSession.events("r1"), [])
      }).pipe(Effect.provide(runner("memory", [{ text: "hi", usage }], [])))
    }))

  it.live.skipIf("unavailable" in SqlEngine.available)(
    "on the SQL engine, a long tool call's start is published while it runs, with the model call that asked for it",
    () =>
      Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(DurableSession.run({ sessionId: "long1", prompt: "go" }))
        // c2 (slow) takes 1.5 s: its start, and the model call that asked for it, are out long before it ends
        const seen = yield* DurableSession.events("long1").pipe(
          Effect.repeat({
            until: (events) => events.some((entry) => entry.event._tag === "ToolExecutionStart" && entry.event.toolCallId === "c2"),
            schedule: Schedule.spaced("20 millis")
          }),
          Effect.timeout("30 seconds")
        )
        const tags = seen.map((entry) => entry.event._tag === "ToolExecutionStart" || entry.event._tag === "ToolExecutionEnd"
          ? `${entry.event._tag} ${entry.event.toolCallId}` : entry.event._tag)
        assert.notInclude(tags, "ToolExecutionEnd c2", JSON.stringify(tags))
        assert.strictEqual(tags.filter((tag) => tag === "MessageEnd").length, 2, JSON.stringify(tags))
        const result = yield* Fiber.join(fiber)
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        const published = yield* DurableSession.events("long1")
        assert.deepStrictEqual(published.map((entry) => entry.seq), published.map((_, i) => i + 1))
      }).pipe(Effect.provide(runner("sql", threeTurns("slow", 1500), [])))
  )

  it.live.skipIf("unavailable" in SqlEngine.available)(
    "on the SQL engine, a turn whose tool call is safe to run again is one writing transaction (issue 33)",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // transaction ids are given only to transactions that write (this read takes none)
        const nextXid = Effect.map(
          sql<{ xid: string }>`SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xid`,
          ([row]) => Number(row?.xid)
        )
        const before = yield* nextXid
        const result = yield* DurableSession.run({ sessionId: "w1", prompt: "go", config: { maxTurns: 30 } })
        const writes = (yield* nextXid) - before
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.strictEqual(result.messages.filter((m) => m.role === "toolResult").length, 20)
        // 20 tool turns: one write each, and a few a session (its record, its start and end, the engine's row);
        // two a turn or more before (a model call's and a tool call's, each apart from its events)
        assert.isAtMost(writes, 30, `${writes} writing transactions for 20 turns`)
      }).pipe(Effect.provide(DurableSession.layer().pipe(
        Layer.provideMerge(Layer.merge(
          ScriptedModel.layer(followTranscript([
            ...Array.from({ length: 20 }, (_, i): ScriptedModel.Turn => ({
              toolCalls: [{ id: `s${i}`, name: "step", params: { n: i } }],
              usage
            })),
            { text: "done", usage }
          ])),
          toolsLayer([])
        )),
        Layer.provideMerge(SqlEngine.backend())
      )))
  )

  it.live.skipIf("unavailable" in SqlEngine.available)(
    "on the SQL engine, reap forgets the session's engine rows too (its execution, results, deferreds), and no " +
      "other session's; the id starts anew after",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const rows = (table: string) =>
          Effect.map(sql<{ n: number }>`SELECT count(*)::integer AS n FROM ${sql(table)}`, ([row]) => row?.n ?? 0)
        const counts = Effect.all([
          rows("effect_agent_wf_executions"),
          rows("effect_agent_wf_activities"),
          rows("effect_agent_events")
        ])
        yield* DurableSession.run({ sessionId: "rq1", prompt: "go" })
        const one = yield* counts
        assert.isTrue(one.every((n) => n > 0), String(one))
        yield* DurableSession.run({ sessionId: "rq2", prompt: "go" })
        const two = yield* counts
        assert.deepStrictEqual(yield* DurableSession.reap("1 hour"), [])
        // rq1 alone is old enough: the session store's updated_at, set back an hour
        yield* sql`UPDATE effect_agent_sessions SET updated_at = updated_at - 3600000 WHERE session_id = 'rq1'`
        assert.deepStrictEqual(yield* DurableSession.reap("30 minutes"), ["rq1"])
        assert.deepStrictEqual(yield* counts, two.map((n, i) => n - one[i]!))
        assert.deepStrictEqual(yield* DurableSession.events("rq1"), [])
        const again = yield* DurableSession.run({ sessionId: "rq1", prompt: "go" })
        assert.deepStrictEqual(again.outcome, { _tag: "Completed" })
      }).pipe(Effect.provide(DurableSession.layer().pipe(
        Layer.provideMerge(Layer.merge(ScriptedModel.layer(followTranscript([{ text: "hi", usage }])), toolsLayer([]))),
        Layer.provideMerge(SqlEngine.backend())
      )))
  )

  it.live("a config that does not validate is a ConfigError before anything starts", () =>
    Effect.gen(function*() {
      const error = yield* DurableSession.run({ sessionId: "c1", prompt: "go", config: { maxTurns: -1 } }).pipe(
        Effect.flip,
        Effect.provide(runner("memory", [], []))
      )
      assert.strictEqual(error._tag, "ConfigError")
    }))
})

/** Polls (a bounded while) until the session's status passes `done`. */
/**
 * Sends the interrupt an entity client sends for the request of the activity `name` (attempt 1) of a session's
 * run when the run is interrupted while it waits for it (on the in-memory cluster engine).
 */
const interruptActivity = (sessionId: string, name: string) =>
  Effect.gen(function*() {
    const sharding = yield* Sharding.Sharding
    const storage = yield* MessageStorage.MessageStorage
    const entityId = EntityId.make(
      yield* DurableSession.SessionWorkflow.executionId({ sessionId, version: 1, request: { prompt: "" } })
    )
    const address = EntityAddress.make({
      entityType: EntityType.make(`Workflow/${DurableSession.SessionWorkflow._tag}`),
      entityId,
      shardId: sharding.getShardId(entityId, "default")
    })
    const requestId = yield* storage.requestIdForPrimaryKey({ address, tag: "activity", id: `${name}/1` })
    assert(Option.isSome(requestId), `the request of ${name}`)
    yield* sharding.sendOutgoing(
      ClusterMessage.OutgoingEnvelope.interrupt({ address, id: yield* sharding.getSnowflake, requestId: requestId.value }),
      false
    )
  })

const untilStatus = (sessionId: string, done: (status: DurableSession.Status) => boolean) =>
  Effect.repeat(DurableSession.poll(sessionId), {
    until: done,
    schedule: Schedule.spaced("20 millis"),
    times: 500
  })

/** A domain error with a Date: a durable session keeps it as JSON, and it comes back as it was. */
class DatabaseDown extends Schema.TaggedError<DatabaseDown>()("DatabaseDown", { host: Schema.String, since: Schema.Date }) {}

const Query = AgentTool.annotate(
  Tool.make("query", { parameters: Schema.Struct({ sql: Schema.String }), success: Schema.String, failure: DatabaseDown }),
  { fatal: true }
)
const Crash = Tool.make("crash", { success: Schema.String })
const BrokenKit = Toolkit.make(Query, Crash)
const brokenTools = ToolRegistry.layer(BrokenKit).pipe(Layer.provide(BrokenKit.toLayer({
  query: () => Effect.fail(new DatabaseDown({ host: "db-1", since: new Date("2026-01-02T03:04:05.000Z") })),
  crash: () => Effect.die(new Error("boom"))
})))

/** A runner on the cluster engine (activity results and endings stored encoded) over the broken tools. */
const brokenRunner = (turns: Turns, strict: boolean) =>
  DurableSession.layer().pipe(
    Layer.provideMerge(Layer.mergeAll(
      ScriptedModel.layer(followTranscript(turns)),
      brokenTools,
      DurableSession.layerMemoryStore,
      Layer.succeed(ToolRegistry.FailOnDefect, strict)
    )),
    Layer.provideMerge(engines.cluster)
  )

describe("DurableSession: tool defects and typed fatal errors (issue 31)", () => {
  const crashing: Turns = [{ toolCalls: [{ id: "c1", name: "crash", params: {} }], usage }, { text: "done", usage }]

  it.live("a defect is marked on the published ToolExecutionEnd; with FailOnDefect the session fails with it", () =>
    Effect.gen(function*() {
      const lenient = yield* Effect.gen(function*() {
        const result = yield* DurableSession.run({ sessionId: "defect1", prompt: "go" })
        const ends = (yield* DurableSession.events("defect1")).flatMap(({ event }) =>
          event._tag === "ToolExecutionEnd" ? [event.defect] : []
        )
        return { outcome: result.outcome._tag, ends }
      }).pipe(Effect.provide(brokenRunner(crashing, false)))
      assert.deepStrictEqual(lenient, { outcome: "Completed", ends: ["Error: boom"] })
      const strict = yield* Effect.flip(DurableSession.run({ sessionId: "defect2", prompt: "go" })).pipe(
        Effect.provide(brokenRunner(crashing, true))
      )
      assert.deepStrictEqual(
        strict._tag === "ToolFatalError" && [strict.toolName, strict.toolCallId, strict.defect],
        ["crash", "c1", "Error: boom"]
      )
    }))

  // Before, the tool call's activity failed with the error, and the engine suspended the session (failed) for
  // the supervisor to resume, where it failed again: the session never ended.
  it.live("a fatal domain error ends the session failed, and comes back typed: AgentTool.unwrapFatal, Effect.catchTag", () =>
    Effect.gen(function*() {
      const turns: Turns = [{ toolCalls: [{ id: "q1", name: "query", params: { sql: "select" } }], usage }]
      yield* Effect.gen(function*() {
        const caught = yield* DurableSession.run({ sessionId: "fatal1", prompt: "go" }).pipe(
          AgentTool.unwrapFatal(Query),
          Effect.map(() => "completed"),
          Effect.catchTag("DatabaseDown", (down) => Effect.succeed(`${down.host} since ${down.since.toISOString()}`)),
          Effect.timeout(patience)
        )
        assert.strictEqual(caught, "db-1 since 2026-01-02T03:04:05.000Z")
        const status = yield* DurableSession.poll("fatal1")
        assert.deepStrictEqual(
          status._tag === "Failed" && status.error._tag === "ToolFatalError" && [status.error.toolCallId, status.error.error],
          ["q1", { _tag: "DatabaseDown", host: "db-1", since: "2026-01-02T03:04:05.000Z" }]
        )
      }).pipe(Effect.provide(brokenRunner(turns, false)))
    }))
})

/** Waits (a bounded while) until the session has published `n` events of `tag` (one by default). */
const waitFor = (sessionId: string, tag: AgentEvent.Tag, n = 1) => {
  const enough = (events: ReadonlyArray<DurableSession.Published>) =>
    events.filter((entry) => entry.event._tag === tag).length >= n
  return Effect.repeat(DurableSession.events(sessionId), {
    until: enough,
    schedule: Schedule.spaced("10 millis"),
    times: 1000
  }).pipe(
    Effect.flatMap((events) => enough(events) ? Effect.void : Effect.die(`no ${n} × ${tag} from ${sessionId}`))
  )
}

const count = (events: ReadonlyArray<AgentEvent.AgentEvent>, tag: AgentEvent.Tag) =>
  events.filter((event) => event._tag === tag).length

const textOf = (message: Message.Message): string => Message.textOf(message)

/** An event's tag, a sub-agent's with the path of agents it comes from. */
const tagOf = (event: AgentEvent.AgentEvent): string =>
  event._tag === "Nested" ? `${event.path.join("/")}:${tagOf(event.event)}` : event._tag

/** The tag of the event inside `Nested` ones. */
const innerTag = (event: AgentEvent.AgentEvent): string => event._tag === "Nested" ? innerTag(event.event) : event._tag

/** The text deltas among published events, in order. */
const deltasOf = (events: ReadonlyArray<DurableSession.Published>): ReadonlyArray<string> =>
  events.flatMap((entry) =>
    entry.event._tag === "MessageUpdate" && entry.event.delta.type === "text" ? [entry.event.delta.delta] : []
  )
