/**
 * The `Sessions` service beyond what the conformance matrix compares
 * (test/conformance: one catalogue of scenarios on each of its layers): joining,
 * resuming after a process, a stored result, interruption, refusals with their
 * tags, the bound on kept events, and a runner that refuses what the client asked.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Latch, Layer, Schedule, Schema, Stream } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { WorkflowEngine } from "effect/workflow"
import { Agent, AgentError, type AgentEvent, Approvals, Hooks, Message, ToolRegistry } from "effect-agent"
import { CheckpointStore, DurableSession, Sessions } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { Deploy, followTranscript, threeTurns, toolsLayer, usage } from "./fixture.ts"
import { patience } from "../patience.ts"

type Turns = ReadonlyArray<ScriptedModel.Turn>

/** The in-process layer on `store`, with a scripted model and the fixture's tools (`ran`: the handlers run). */
const inProcess = (
  store: CheckpointStore.Service,
  turns: Turns,
  ran: Array<string>,
  options: Sessions.Options = {},
  onStart?: (name: string) => void
) =>
  Sessions.layer(options).pipe(
    Layer.provide(Layer.mergeAll(
      ScriptedModel.layer(followTranscript(turns)),
      toolsLayer(ran, onStart),
      Layer.succeed(CheckpointStore.CheckpointStore, store)
    ))
  )

/**
 * A runner in this process on the in-memory engine and store, with a scripted model, the fixture's tools and
 * `more` (an `Approvals` policy), and the sessions service over it.
 */
const durable = (
  turns: Turns,
  options: DurableSession.Options = {},
  more: Layer.Layer<never> | Layer.Layer<Approvals.Approvals> = Layer.empty,
  tools: Layer.Layer<ToolRegistry.ToolRegistry> = toolsLayer([]),
  store: Layer.Layer<DurableSession.Store> = DurableSession.layerMemoryStore
) =>
  DurableSession.layerSessions.pipe(
    Layer.provideMerge(DurableSession.layer(options)),
    Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(followTranscript(turns)), tools, more)),
    Layer.provideMerge(Layer.merge(WorkflowEngine.layerMemory, store))
  )

const sessions = Effect.service(Sessions.Sessions)

/** A first process: the session `sessionId` started on `store`, interrupted once its `slow` call runs. */
const interruptedIn = (store: CheckpointStore.Service, turns: Turns, sessionId: string) =>
  Effect.gen(function*() {
    const started = Latch.makeUnsafe()
    yield* Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId, prompt: "go" })
      yield* started.await
      yield* service.interrupt(sessionId)
      yield* service.result(sessionId)
    }).pipe(Effect.provide(inProcess(store, turns, [], {}, (name) => void (name === "slow" && started.openUnsafe()))))
  })

const texts = (messages: ReadonlyArray<Message.Message>) => messages.map((message) => Message.textOf(message))

/**
 * The approval id a call of the session (the first, or `toolCallId`'s) was listed with, once it asks: read from
 * its events every 20 ms, at most 250 times.
 */
const asked = (sessionId: string, toolCallId?: string) =>
  Effect.gen(function*() {
    const service = yield* sessions
    const found = yield* service.events(sessionId).pipe(
      Effect.map((events) =>
        events.find(({ event }) =>
          event._tag === "ApprovalRequested" && (toolCallId === undefined || event.toolCallId === toolCallId)
        )
      ),
      Effect.repeat({ until: (found) => found !== undefined, schedule: Schedule.spaced("20 millis"), times: 250 })
    )
    assert(found !== undefined && found.event._tag === "ApprovalRequested", `${sessionId}: no call asked`)
    return found.event.approvalId ?? found.event.toolCallId
  })

describe("Sessions, in this process", () => {
  const ran: Array<string> = []
  it.live("starting a session again joins it: one run, one set of events, one result", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "join", prompt: "go" })
      yield* service.start({ sessionId: "join", prompt: "go" })
      const result = yield* service.result("join")
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(ran, ["step", "slow"])
      const events = yield* service.events("join")
      assert.strictEqual(events.filter(({ event }) => event._tag === "AgentStart").length, 1)
      assert.deepStrictEqual(events.map(({ seq }) => seq), events.map((_, i) => i + 1))
      assert.deepStrictEqual((yield* service.events("join", events.length - 1)).map(({ event }) => event._tag), [
        "AgentEnd"
      ])
    }).pipe(Effect.provide(inProcess(CheckpointStore.memory(), threeTurns("slow", 5), ran))))

  it.live("a later process: a finished session answers its stored result, and a follow-up goes on with it", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const turns: Turns = [...threeTurns("slow", 5), { text: "and the changelog", usage }]
      const first: Array<string> = []
      const done = yield* Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "later", prompt: "go" })
        return yield* service.result("later")
      }).pipe(Effect.provide(inProcess(store, turns, first)))
      const again: Array<string> = []
      yield* Effect.gen(function*() {
        const service = yield* sessions
        // started again: the store holds it finished, so its stored result, and nothing runs
        yield* service.start({ sessionId: "later", prompt: "go" })
        const stored = yield* service.result("later")
        assert.deepStrictEqual(stored.state.messages, done.state.messages)
        assert.deepStrictEqual(again, [])
        // a follow-up: the session goes on, in this process, from its checkpoint
        const seen = (yield* service.events("later")).at(-1)?.seq ?? 0
        yield* service.followUp("later", "now the changelog")
        const next = yield* service.result("later", seen)
        assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(texts(next.state.messages).slice(-2), ["now the changelog", "and the changelog"])
        assert.deepStrictEqual(next.state.messages.slice(0, done.state.messages.length), done.state.messages)
      }).pipe(Effect.provide(inProcess(store, turns, again)))
      assert.deepStrictEqual(first, ["step", "slow"])
    }))

  it.live("a later process: a session known from the store alone goes on with the typed output it was started with", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const Answer = Schema.Struct({ answer: Schema.Finite })
      const turns: Turns = [
        { toolCalls: [{ id: "f1", name: "final_answer", params: { answer: 41 } }], usage },
        { toolCalls: [{ id: "f2", name: "final_answer", params: { answer: 42 } }], usage }
      ]
      const options = { outputs: { answer: Answer } }
      const first = yield* Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "typed-later", prompt: "the answer?", output: "answer" })
        return yield* service.result("typed-later")
      }).pipe(Effect.provide(inProcess(store, turns, [], options)))
      assert.deepStrictEqual((yield* Agent.typedResult(Answer, first)).output, { answer: 41 })
      // another process follows the session up by its id alone: it goes on asking for the same output
      const next = yield* Effect.gen(function*() {
        const service = yield* sessions
        const seen = (yield* service.events("typed-later")).at(-1)?.seq ?? 0
        yield* service.followUp("typed-later", "check it again")
        return yield* service.result("typed-later", seen).pipe(Effect.timeout(patience))
      }).pipe(Effect.provide(inProcess(store, turns, [], options)))
      assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
      assert.deepStrictEqual((yield* Agent.typedResult(Answer, next)).output, { answer: 42 })
    }))

  it.live("interrupted mid-call, the session ends Cancelled; started again, it resumes and completes", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const started = Latch.makeUnsafe()
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "cut", prompt: "go" })
        yield* started.await
        yield* service.interrupt("cut")
        const cut = yield* service.result("cut")
        assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "interrupted" })
        const seen = (yield* service.events("cut")).at(-1)?.seq ?? 0
        yield* service.start({ sessionId: "cut", prompt: "go" })
        const result = yield* service.result("cut", seen)
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(texts(result.state.messages).at(-1), "all done")
      }).pipe(
        Effect.provide(inProcess(store, threeTurns("slow", 200), ran, {}, (name) => void (name === "slow" && started.openUnsafe())))
      )
      assert.deepStrictEqual(ran, ["step", "slow", "slow"])
    }))

  it.live("started again with a follow-up: an interrupted session takes it when its resumed run would end, a finished one goes on with it; one result each", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const turns: Turns = [...threeTurns("slow", 200), { text: "and the changelog", usage }, { text: "and the notes", usage }]
      yield* interruptedIn(store, turns, "again")
      yield* Effect.gen(function*() {
        const service = yield* sessions
        // a later process: resumed with a follow-up and a wider limit, one run ends it all
        yield* service.start({ sessionId: "again", prompt: [], config: { maxTurns: 9 }, followUp: "now the changelog" })
        const resumed = yield* service.result("again").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(resumed.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(texts(resumed.state.messages).slice(-3), ["all done", "now the changelog", "and the changelog"])
        assert.strictEqual((yield* service.events("again")).filter(({ event }) => Sessions.isEnding(event)).length, 1)
      }).pipe(Effect.provide(inProcess(store, turns, [])))
      yield* Effect.gen(function*() {
        const service = yield* sessions
        // finished: started again with a follow-up, it goes on with it (its stored result is no answer here)
        yield* service.start({ sessionId: "again", prompt: [], followUp: "now the notes" })
        const next = yield* service.result("again").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(texts(next.state.messages).slice(-2), ["now the notes", "and the notes"])
      }).pipe(Effect.provide(inProcess(store, turns, [])))
    }))

  it.live("started again with resume: a session ended by its turn limit goes on under the larger one given now", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "limited", prompt: "go", config: { maxTurns: 1 } })
      const cut = yield* service.result("limited")
      assert.deepStrictEqual(cut.outcome, { _tag: "MaxTurns", limit: 1 })
      const seen = (yield* service.events("limited")).at(-1)?.seq ?? 0
      // started again without resume: its stored result
      yield* service.start({ sessionId: "limited", prompt: [], config: { maxTurns: 5 } })
      assert.deepStrictEqual((yield* service.result("limited", seen)).outcome, { _tag: "MaxTurns", limit: 1 })
      yield* service.start({ sessionId: "limited", prompt: [], config: { maxTurns: 5 }, resume: true })
      const done = yield* service.result("limited", seen).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(done.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(texts(done.state.messages).at(-1), "all done")
    }).pipe(Effect.provide(inProcess(CheckpointStore.memory(), threeTurns("slow", 5), []))))

  it.live("started again with a steer: an interrupted session takes it before its next model call", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const turns: Turns = threeTurns("slow", 200)
      yield* interruptedIn(store, turns, "steered")
      yield* Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "steered", prompt: [], steer: "use the fast path" })
        const resumed = yield* service.result("steered").pipe(Effect.timeout(patience))
        // the turn that was cut short is redone, its model call after the steer
        assert.deepStrictEqual(texts(resumed.state.messages), [
          "go", "", "step 1 done", "use the fast path", "", "slept 200 ms", "all done"
        ])
      }).pipe(Effect.provide(inProcess(store, turns, [])))
    }))

  it.effect("refusals are typed: a bad id, an unknown session, an output the layer lacks; nothing starts", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        const service = yield* sessions
        const badId = yield* Effect.flip(service.start({ sessionId: "../etc", prompt: "go" }))
        assert.strictEqual(badId._tag, "InvalidSessionId")
        const missing = yield* Effect.flip(service.steer("nobody", "hello"))
        assert.strictEqual(missing._tag, "CheckpointMissing")
        assert.strictEqual((yield* Effect.flip(service.approve("nobody", "c1", Approvals.approved)))._tag, "CheckpointMissing")
        assert.strictEqual((yield* Effect.flip(service.result("nobody")))._tag, "CheckpointMissing")
        const output = yield* Effect.flip(service.start({ sessionId: "typed", prompt: "go", output: "Invoice" }))
        assert(output._tag === "ConfigError")
        assert.strictEqual(output.field, "output")
        assert.include(output.rule, `"Invoice"`)
        assert.strictEqual((yield* Effect.flip(service.events("typed")))._tag, "CheckpointMissing")
      }).pipe(Effect.provide(inProcess(CheckpointStore.memory(), threeTurns("slow", 5), ran)))
      assert.deepStrictEqual(ran, [])
    }))

  it.live("a denial answers the call that waits, by its id; the model reads the reason", () =>
    Effect.gen(function*() {
      const turns: Turns = [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
        { text: "not deployed", usage }
      ]
      const ran: Array<string> = []
      yield* Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "deny", prompt: "deploy" })
        const id = yield* asked("deny")
        assert.isFalse(yield* service.approve("deny", "not-that-one", Approvals.approved))
        assert.isTrue(yield* service.approve("deny", id, Approvals.denied("not on a Friday")))
        const result = yield* service.result("deny")
        const answer = result.state.messages.find((message) => message.role === "toolResult")
        assert(answer !== undefined && answer.role === "toolResult")
        assert.isTrue(answer.isError)
        assert.include(Message.textOf(answer), "not on a Friday")
      }).pipe(Effect.provide(inProcess(CheckpointStore.memory(), turns, ran)))
      assert.deepStrictEqual(ran, [])
    }))

  it.live("the events kept are bounded (maxEvents): the oldest go, the numbers go on", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "bounded", prompt: "go" })
      yield* service.result("bounded")
      const kept = yield* service.events("bounded")
      assert.strictEqual(kept.length, 5)
      assert.strictEqual(kept.at(-1)?.event._tag, "AgentEnd")
      assert.isAbove(kept[0]!.seq, 1)
      assert.deepStrictEqual(kept.map(({ seq }) => seq - kept[0]!.seq), [0, 1, 2, 3, 4])
    }).pipe(Effect.provide(inProcess(CheckpointStore.memory(), threeTurns("slow", 5), [], { maxEvents: 5 }))))

  it.live("the sessions kept are bounded (maxSessions): one whose run ended is forgotten here and taken up again from the store", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      for (const sessionId of ["s1", "s2", "s3"]) {
        yield* service.start({ sessionId, prompt: "go" })
        yield* service.result(sessionId)
      }
      // s1 is forgotten here (its events went with it), and its checkpoint answers its result
      assert.deepStrictEqual(yield* service.events("s1"), [])
      assert.deepStrictEqual((yield* service.result("s1")).outcome, { _tag: "Completed" })
      assert.isAbove((yield* service.events("s3")).length, 0)
    }).pipe(Effect.provide(inProcess(CheckpointStore.memory(), threeTurns("slow", 5), [], { maxSessions: 2 }))))

  it.live("a session taken up again after maxSessions forgot it numbers its events on: result(id, seen) finds the next run", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "first", prompt: "go" })
      yield* service.result("first")
      const seen = (yield* service.events("first")).at(-1)!.seq
      for (const sessionId of ["second", "third"]) {
        yield* service.start({ sessionId, prompt: "go" })
        yield* service.result(sessionId)
      }
      // "first" is forgotten here; a follow-up takes it up from its checkpoint, numbered above what it had
      yield* service.followUp("first", "now the changelog")
      const next = yield* service.result("first", seen).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(texts(next.state.messages).slice(-2), ["now the changelog", "and the changelog"])
      assert.isTrue((yield* service.events("first", seen)).every(({ seq }) => seq > seen))
    }).pipe(Effect.provide(inProcess(
      CheckpointStore.memory(),
      [...threeTurns("slow", 5), { text: "and the changelog", usage }],
      [],
      { maxSessions: 1 }
    ))))

  it.live("result(id, 0) is the first run's ending though its events were dropped; an `after` that is no position reads from 0", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "firsts", prompt: "go" })
      const first = yield* service.result("firsts")
      const seen = (yield* service.events("firsts")).at(-1)!.seq
      yield* service.followUp("firsts", "now the changelog")
      const second = yield* service.result("firsts", seen)
      assert.isAbove(second.state.messages.length, first.state.messages.length)
      assert.deepStrictEqual((yield* service.result("firsts", 0)).state.messages, first.state.messages)
      for (const after of [Number.NaN, -1, Number.POSITIVE_INFINITY]) {
        assert.deepStrictEqual((yield* service.result("firsts", after)).state.messages, first.state.messages)
      }
    }).pipe(Effect.provide(inProcess(
      CheckpointStore.memory(),
      [...threeTurns("slow", 5), { text: "and the changelog", usage }],
      [],
      { maxEvents: 3 }
    ))))
})

describe("Sessions: an Approvals policy given to the layer decides the calls, on both layers", () => {
  const turns: Turns = [
    { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
    { text: "done", usage }
  ]
  const denied = Approvals.layer(Approvals.denyAll("deploys are frozen"))
  const layers = {
    "in this process": Sessions.layer().pipe(
      Layer.provide(Layer.mergeAll(
        ScriptedModel.layer(followTranscript(turns)),
        toolsLayer([]),
        CheckpointStore.layerMemory,
        denied
      ))
    ),
    "as workflows": durable(turns, {}, denied)
  }
  it.live("in this process: an interactive handle the app gave does not take the session's calls from approve", () =>
    Effect.gen(function*() {
      const handle = yield* Approvals.interactive()
      yield* Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "mine", prompt: "deploy" })
        const id = yield* asked("mine")
        assert.isTrue(yield* service.approve("mine", id, Approvals.approved))
        const result = yield* service.result("mine").pipe(Effect.timeout(patience))
        assert.include(texts(result.state.messages), "deployed to prod")
        assert.deepStrictEqual(yield* handle.pending, [])
      }).pipe(Effect.provide(Sessions.layer().pipe(
        Layer.provide(Layer.mergeAll(
          ScriptedModel.layer(followTranscript(turns)),
          toolsLayer([]),
          CheckpointStore.layerMemory,
          Approvals.layer(handle)
        ))
      )))
    }))

  for (const [name, layer] of Object.entries(layers)) {
    it.live(`${name}: a denial by the policy, with nothing waiting for approve`, () =>
      Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "frozen", prompt: "deploy" })
        const result = yield* service.result("frozen").pipe(Effect.timeout(patience))
        const answer = result.state.messages.find((message) => message.role === "toolResult")
        assert(answer !== undefined && answer.role === "toolResult")
        assert.isTrue(answer.isError)
        assert.include(Message.textOf(answer), "deploys are frozen")
        assert.deepStrictEqual(texts(result.state.messages).at(-1), "done")
        assert.isFalse(yield* service.approve("frozen", "d1", Approvals.approved))
      }).pipe(Effect.provide(layer)))
  }
})

describe("Sessions.watch: the events as they are published, on both layers", () => {
  const turns: Turns = [...threeTurns("slow", 50), { text: "and the changelog", usage }]
  const layers = {
    "in this process": inProcess(CheckpointStore.memory(), turns, []),
    "as workflows": durable(turns, { idle: "10 seconds" })
  }
  for (const [name, layer] of Object.entries(layers)) {
    it.live(`${name}: each event once, in order, as events answers them, through a follow-up's run`, () =>
      Effect.gen(function*() {
        const service = yield* sessions
        // watched before it starts: the stream waits for the first event
        const until = (endings: number) =>
          service.watch("watched").pipe(
            Stream.takeUntil(({ event }) => Sessions.isEnding(event) && --endings === 0),
            Stream.runCollect,
            Effect.timeout(patience)
          )
        const both = yield* Effect.forkChild(until(2))
        yield* service.start({ sessionId: "watched", prompt: "go" })
        yield* service.result("watched")
        const seen = (yield* service.events("watched")).at(-1)?.seq ?? 0
        yield* service.followUp("watched", "now the changelog")
        yield* service.result("watched", seen)
        const watched = yield* Fiber.join(both)
        assert.deepStrictEqual(watched, yield* service.events("watched"))
        assert.deepStrictEqual(watched.filter(({ event }) => Sessions.isEnding(event)).length, 2)
        // from a position: what follows it, and the same events
        const tail = yield* service.watch("watched", seen).pipe(
          Stream.takeUntil(({ event }) => Sessions.isEnding(event)),
          Stream.runCollect,
          Effect.timeout(patience)
        )
        assert.deepStrictEqual(tail, watched.filter((published) => published.seq > seen))
        // an unknown session: refused as events refuses it
        const missing = yield* Effect.flip(Stream.runCollect(service.watch("nobody")))
        assert.strictEqual(missing._tag, "CheckpointMissing")
      }).pipe(Effect.provide(layer)))
  }
})

describe("Sessions.pending: what waits for a decision, on both layers", () => {
  const turns: Turns = [
    { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
    { text: "done", usage }
  ]
  const layers = {
    "in this process": inProcess(CheckpointStore.memory(), turns, []),
    "as workflows": durable(turns)
  }
  for (const [name, layer] of Object.entries(layers)) {
    it.live(`${name}: the call waiting, by the id approve takes; answered, nothing waits; no plan or feedback`, () =>
      Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "asks", prompt: "deploy" })
        const id = yield* asked("asks")
        const waiting = yield* service.pending("asks")
        assert.deepStrictEqual(
          waiting.approvals.map(({ approvalId, toolCallId, toolName, params }) => ({ approvalId, toolCallId, toolName, params })),
          [{ approvalId: id, toolCallId: "d1", toolName: "deploy", params: { env: "prod" } }]
        )
        assert.deepStrictEqual([waiting.plan, waiting.turn], [undefined, undefined])
        assert.isFalse(yield* service.decidePlan("asks", 1, { _tag: "Approve" }))
        assert.isTrue(yield* service.approve("asks", id, Approvals.approved))
        const result = yield* service.result("asks").pipe(Effect.timeout(patience))
        assert.include(texts(result.state.messages), "deployed to prod")
        assert.deepStrictEqual((yield* service.pending("asks")).approvals, [])
        assert.strictEqual((yield* Effect.flip(service.pending("nobody")))._tag, "CheckpointMissing")
      }).pipe(Effect.provide(layer)))
  }

  it("waitingApprovals: a sub-agent's call inside its Nested event; answered, or its run ended, it no longer waits", () => {
    const base = { runId: "r", turn: 1, timestamp: 0 }
    const ask = (toolCallId: string, approvalId: string): AgentEvent.AgentEvent => ({
      _tag: "ApprovalRequested", ...base, toolCallId, approvalId, toolName: "deploy", params: {}
    })
    const nested = (event: AgentEvent.AgentEvent): AgentEvent.AgentEvent => ({
      _tag: "Nested", ...base, path: ["helper"], calls: ["c7"], event
    })
    const events: Array<AgentEvent.AgentEvent> = [
      ask("c1", "c1"),
      nested(ask("c1", "c7/c1")),
      { _tag: "ApprovalResolved", ...base, toolCallId: "c1", approvalId: "c1", toolName: "deploy", approved: true }
    ]
    assert.deepStrictEqual(Sessions.waitingApprovals(events).map(({ approvalId }) => approvalId), ["c7/c1"])
    const end: AgentEvent.AgentEvent = { _tag: "AgentEnd", ...base, error: new AgentError.ConfigError({ field: "x", rule: "y" }) }
    assert.deepStrictEqual(Sessions.waitingApprovals([...events, end]), [])
  })
})

describe("Sessions.watch in this process: nothing skipped, nothing forgotten", () => {
  it.live("a watcher slower than the run reads every event: the log keeps what it has not read, and the run waits for it", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      // the run waits at its first call's approval: the watcher is reading by then
      yield* service.start({ sessionId: "many", prompt: "deploy, then talk" })
      const id = yield* asked("many")
      const watched = yield* Effect.forkChild(service.watch("many").pipe(
        // a slow reader: a pause every 20 events
        Stream.mapEffect((published) =>
          published.seq % 20 === 0 ? Effect.as(Effect.sleep("2 millis"), published) : Effect.succeed(published)
        ),
        Stream.takeUntil(({ event }) => Sessions.isEnding(event)),
        Stream.runCollect,
        Effect.timeout("30 seconds")
      ))
      yield* Effect.sleep("20 millis")
      yield* service.approve("many", id, Approvals.approved)
      yield* service.result("many").pipe(Effect.timeout("30 seconds"))
      const all = yield* Fiber.join(watched)
      // 1,000 words streamed, an event each, with a log of 10 kept: every number once, in order, from the first
      assert.strictEqual(all[0]?.event._tag, "AgentStart")
      assert.deepStrictEqual(all.map(({ seq }) => seq), all.map((_, i) => all[0]!.seq + i))
      assert.strictEqual(all.filter(({ event }) => event._tag === "MessageUpdate").length >= 1_000, true)
      // the log is bounded again once nobody reads behind it
      assert.isAtMost((yield* service.events("many")).length, 10)
    }).pipe(Effect.provide(Sessions.layer({ maxEvents: 10 }).pipe(
      Layer.provide(Layer.mergeAll(
        ScriptedModel.layer([
          { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
          { text: Array.from({ length: 1_000 }, (_, i) => `w${i} `), usage }
        ]),
        toolsLayer([]),
        CheckpointStore.layerMemory
      ))
    ))))

  it.live("a watcher goes on through maxSessions forgetting its session: it sees the run that takes it up again", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "a", prompt: "go" })
      yield* service.result("a")
      const seen = (yield* service.events("a")).at(-1)!.seq
      const watcher = yield* Effect.forkChild(service.watch("a", seen).pipe(
        Stream.takeUntil(({ event }) => Sessions.isEnding(event)),
        Stream.runCollect,
        Effect.timeout(patience)
      ))
      yield* Effect.yieldNow
      // another session, past maxSessions 1: "a" has nothing its watcher has yet to read, and is forgotten
      yield* service.start({ sessionId: "b", prompt: "go" })
      yield* service.result("b")
      yield* service.start({ sessionId: "c", prompt: "go" })
      yield* service.result("c")
      yield* service.followUp("a", "more")
      yield* service.result("a", seen).pipe(Effect.timeout(patience))
      const watched = yield* Fiber.join(watcher)
      assert.deepStrictEqual(watched, yield* service.events("a", seen))
      assert.strictEqual(watched.at(-1)?.event._tag, "AgentEnd")
    }).pipe(Effect.provide(Sessions.layer({ maxSessions: 1 }).pipe(
      Layer.provide(Layer.mergeAll(
        ScriptedModel.layer(followTranscript([{ text: "first done", usage }, { text: "second done", usage }])),
        toolsLayer([]),
        CheckpointStore.layerMemory
      ))
    ))))
})

describe("Sessions.cancel, in this process", () => {
  it.live("ends the run in flight Cancelled with the reason, delivers nothing queued to it, and a follow-up goes on", () =>
    Effect.gen(function*() {
      const started = Latch.makeUnsafe()
      const ran: Array<string> = []
      const turns: Turns = [...threeTurns("slow", 5_000), { text: "and the changelog", usage }]
      yield* Effect.gen(function*() {
        const service = yield* sessions
        yield* service.start({ sessionId: "stop", prompt: "go" })
        yield* started.await
        yield* service.steer("stop", "this goes with the cancel")
        yield* service.cancel("stop", "enough")
        const cut = yield* service.result("stop").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "enough" })
        // the call in flight is answered, so the transcript stays whole
        const answer = cut.state.messages.at(-1)
        assert(answer !== undefined && answer.role === "toolResult")
        assert.isFalse(texts(cut.state.messages).includes("this goes with the cancel"))
        const seen = (yield* service.events("stop")).at(-1)?.seq ?? 0
        // nothing started after it: the queued steer went with the run
        yield* Effect.sleep("100 millis")
        assert.strictEqual((yield* service.events("stop")).at(-1)?.seq, seen)
        // a cancel with no run in flight leaves the session as it is
        yield* service.cancel("stop", "again")
        yield* service.followUp("stop", "now the changelog")
        const next = yield* service.result("stop", seen).pipe(Effect.timeout(patience))
        assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(texts(next.state.messages).slice(-2), ["now the changelog", "and the changelog"])
      }).pipe(
        Effect.provide(inProcess(CheckpointStore.memory(), turns, ran, {}, (name) => void (name === "slow" && started.openUnsafe())))
      )
    }))

  it.live("a follow-up sent as the cancelled run ends (on its AgentEnd) is not lost: the next run takes it", () =>
    Effect.gen(function*() {
      const started = Latch.makeUnsafe()
      const turns: Turns = [...threeTurns("slow", 5_000), { text: "said hello", usage }]
      // the application's plugin answers the cancelled run's ending with a follow-up, as a UI would the moment it
      // shows the ending: the run has not finished yet
      const service: { current: Sessions.Sessions["Service"] | undefined } = { current: undefined }
      const plugin = Hooks.plugin({
        name: "eager",
        onEvent: (event) =>
          event._tag === "AgentEnd" && event.outcome?._tag === "Cancelled" && service.current !== undefined
            ? Effect.ignore(service.current.followUp("eager", "then just say hello"))
            : Effect.void
      })
      yield* Effect.gen(function*() {
        service.current = yield* sessions
        yield* service.current.start({ sessionId: "eager", prompt: "go" })
        yield* started.await
        yield* service.current.cancel("eager", "enough")
        const cut = yield* service.current.result("eager").pipe(Effect.timeout(patience))
        assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "enough" })
        const first = (yield* service.current.events("eager")).find(({ event }) => Sessions.isEnding(event))!.seq
        const next = yield* service.current.result("eager", first).pipe(Effect.timeout(patience))
        assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
        assert.deepStrictEqual(texts(next.state.messages).slice(-2), ["then just say hello", "said hello"])
      }).pipe(
        Effect.provide(
          inProcess(CheckpointStore.memory(), turns, [], { plugins: [plugin] }, (name) => void (name === "slow" && started.openUnsafe()))
        )
      )
    }))
})

/** A call that holds until the test lets it go: `reached` once it runs, `release` to let it finish. */
const holding = () => {
  const reached = Latch.makeUnsafe()
  const release = Latch.makeUnsafe()
  const Hold = Tool.make("hold", { parameters: Schema.Struct({}), success: Schema.String })
  const Kit = Toolkit.make(Hold, Deploy)
  const tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
    hold: () => Effect.andThen(reached.open, Effect.as(release.await, "released")),
    deploy: ({ env }) => Effect.succeed(`deployed to ${env}`)
  })))
  return { reached, release, tools }
}

/** Waits (every 20 ms, at most 250 times) until the durable session records its idle wait. */
const waitsIdle = (sessionId: string) =>
  Effect.gen(function*() {
    const store = yield* DurableSession.Store
    const wait = yield* Effect.repeat(store.waiting(sessionId), {
      until: (wait) => wait !== undefined,
      schedule: Schedule.spaced("20 millis"),
      times: 250
    })
    assert.isDefined(wait, `${sessionId} never waited idle`)
  })

// Before, a cancel on the durable layer was an interrupt: no reason, and the session ended for good.
describe("Sessions.cancel, on the durable layer", () => {
  it.live("a cancel that comes while the run's last reply streams ends the run Cancelled, not Completed", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "last", prompt: "go" })
      yield* service.events("last").pipe(
        Effect.repeat({
          until: (events) => events.some(({ event }) => event._tag === "TurnStart"),
          schedule: Schedule.spaced("10 millis"),
          times: 300
        })
      )
      yield* service.cancel("last", "too slow")
      const cut = yield* service.result("last").pipe(Effect.timeout(patience))
      assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "too slow" })
      // the model call in flight finished (an activity is not cut short): its reply is in the transcript
      assert.deepStrictEqual(texts(cut.state.messages), ["go", "a slow answer"])
      // (3 s: the cancel must come while the call runs; at load 25–31 seeing its TurnStart took more than the
      // 500 ms it was)
    }).pipe(Effect.provide(durable([{ text: "a slow answer", delay: "3 seconds", usage }], { idle: "1 minute" }))))

  it.live("the run ends Cancelled with the reason at its next step: the call in flight finishes, what was queued waits in its state, and a follow-up goes on", () => {
    const held = holding()
    return Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "stop", prompt: "go" })
      yield* held.reached.await
      yield* service.steer("stop", "this goes with the cancel")
      yield* service.cancel("stop", "enough")
      yield* held.release.open
      const cut = yield* service.result("stop").pipe(Effect.timeout(patience))
      assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "enough" })
      // the call in flight finished (an activity is not cut short), and the run made no model call after it
      assert.deepStrictEqual(texts(cut.state.messages), ["go", "", "released"])
      // the steer queued to it was not delivered: it waits in its state, as in this process
      assert.deepStrictEqual(texts(cut.state.steering), ["this goes with the cancel"])
      const seen = (yield* service.events("stop")).at(-1)!.seq
      yield* service.followUp("stop", "now the changelog")
      const next = yield* service.result("stop", seen).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
      // as Agent.runContinue goes on from the cancelled run's state: its steering first, then the follow-up
      assert.deepStrictEqual(texts(next.state.messages).slice(2), [
        "released",
        "this goes with the cancel",
        "noted",
        "now the changelog",
        "changelog written"
      ])
    }).pipe(Effect.provide(durable(
      [
        { toolCalls: [{ id: "h1", name: "hold", params: {} }], usage },
        { text: "noted", usage },
        { text: "changelog written", usage }
      ],
      { idle: "1 minute" },
      Layer.empty,
      held.tools
    )))
  })

  it.live("a call waiting for approval is cut by the cancel, as in this process, and the run ends Cancelled: approving it later answers nothing", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "unapproved", prompt: "deploy" })
      const id = yield* asked("unapproved")
      yield* service.cancel("unapproved", "not today")
      const cut = yield* service.result("unapproved").pipe(Effect.timeout(patience))
      assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "not today" })
      assert.deepStrictEqual(texts(cut.state.messages), [
        "deploy",
        "",
        "Tool call cancelled before it started: not today. It did not run."
      ])
      const resolved = (yield* service.events("unapproved")).flatMap(({ event }) =>
        event._tag === "ApprovalResolved" ? [event] : []
      )
      assert.deepStrictEqual(resolved.map((event) => [event.approved, event.reason]), [
        [false, "Tool call cancelled before it started: not today. It did not run."]
      ])
      assert.isFalse(yield* service.approve("unapproved", id, Approvals.approved))
      const seen = (yield* service.events("unapproved")).at(-1)!.seq
      yield* service.followUp("unapproved", "then just say so")
      const next = yield* service.result("unapproved", seen).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
      // as Agent.runContinue goes on from a run cut after its calls: the model answers them, then the follow-up
      assert.deepStrictEqual(texts(next.state.messages).slice(3), ["nothing deployed", "then just say so", "said so"])
    }).pipe(Effect.provide(durable([
      { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
      { text: "nothing deployed", usage },
      { text: "said so", usage }
    ], { idle: "1 minute" }))))

  it.live("with no run in flight a cancel changes nothing: a session waiting idle goes on with its next follow-up", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "idle", prompt: "go" })
      yield* service.result("idle")
      yield* waitsIdle("idle")
      yield* service.cancel("idle", "too late")
      const seen = (yield* service.events("idle")).at(-1)!.seq
      yield* service.followUp("idle", "and then?")
      const next = yield* service.result("idle", seen).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(texts(next.state.messages).slice(-2), ["and then?", "second"])
    }).pipe(Effect.provide(durable([{ text: "first", usage }, { text: "second", usage }], { idle: "1 minute" }))))

  it.live("a cancel of a session that has finished changes nothing: it is not interrupted", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "over", prompt: "go" })
      const done = yield* service.result("over")
      yield* service.cancel("over", "too late")
      assert.deepStrictEqual((yield* service.result("over")).state.messages, done.state.messages)
      const refused = yield* Effect.flip(service.followUp("over", "one more thing"))
      assert(refused._tag === "SessionEnded")
      assert.strictEqual(refused.reason, "finished")
    }).pipe(Effect.provide(durable([{ text: "first", usage }], {}))))

  it.live("a cancel that lands as a call asks for approval, before the request is published, cuts the call too", () => {
    // a store where a cancel lands just before the request is published: `cancel` could not have seen the call
    const base = DurableSession.makeMemoryStore()
    const store: DurableSession.Store["Service"] = {
      ...base,
      publish: (sessionId, entries) =>
        entries.some(({ event }) => event._tag === "ApprovalRequested")
          ? Effect.andThen(base.appendCancel(sessionId, "landed early"), base.publish(sessionId, entries))
          : base.publish(sessionId, entries)
    }
    return Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "early", prompt: "deploy" })
      const cut = yield* service.result("early").pipe(Effect.timeout(patience))
      assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "landed early" })
      assert.deepStrictEqual(texts(cut.state.messages).at(-1), "Tool call cancelled before it started: landed early. It did not run.")
    }).pipe(Effect.provide(durable(
      [{ toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage }],
      { idle: "1 minute" },
      Layer.empty,
      toolsLayer([]),
      Layer.succeed(DurableSession.Store, store)
    )))
  })

  it.live("a follow-up that lands as the session goes idle starts its next run at once, and a cancel reaches that run", () => {
    // a store where a follow-up lands in the moment between the run's end and the session's idle wait
    const base = DurableSession.makeMemoryStore()
    let landed = false
    const store: DurableSession.Store["Service"] = {
      ...base,
      setWaiting: (sessionId, wait) =>
        wait === undefined || landed
          ? base.setWaiting(sessionId, wait)
          : Effect.andThen(
            Effect.andThen(Effect.sync(() => void (landed = true)), base.appendInbox(sessionId, "followUp", Message.user("deploy now"))),
            base.setWaiting(sessionId, wait)
          ).pipe(Effect.orDie)
    }
    return Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "landed", prompt: "go" })
      // the follow-up's run asks for approval: the session does not wait idle, so the cancel is kept for it
      yield* asked("landed")
      yield* service.cancel("landed", "changed my mind")
      const first = (yield* service.events("landed")).find(({ event }) => Sessions.isEnding(event))!.seq
      const cut = yield* service.result("landed", first).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(cut.outcome, { _tag: "Cancelled", reason: "changed my mind" })
      assert.deepStrictEqual(texts(cut.state.messages), [
        "go",
        "first",
        "deploy now",
        "",
        "Tool call cancelled before it started: changed my mind. It did not run."
      ])
    }).pipe(Effect.provide(durable(
      [{ text: "first", usage }, { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage }],
      { idle: "1 minute" },
      Layer.empty,
      toolsLayer([]),
      Layer.succeed(DurableSession.Store, store)
    )))
  })

  it.live("a cancel kept as the run ends, before the session waits idle, is dropped: it never cancels the next run", () => {
    // a store where a cancel lands in the moment between the run's end and the session's idle wait
    const base = DurableSession.makeMemoryStore()
    const store: DurableSession.Store["Service"] = {
      ...base,
      setWaiting: (sessionId, wait) =>
        wait === undefined
          ? base.setWaiting(sessionId, wait)
          : Effect.andThen(
            Effect.flatMap(base.appendCancel(sessionId, "a stale cancel"), (kept) =>
              Effect.sync(() => assert.isTrue(kept))),
            base.setWaiting(sessionId, wait)
          )
    }
    return Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "stale", prompt: "go" })
      yield* service.result("stale")
      const seen = (yield* service.events("stale")).at(-1)!.seq
      yield* service.followUp("stale", "and then?")
      const next = yield* service.result("stale", seen).pipe(Effect.timeout(patience))
      assert.deepStrictEqual(next.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(texts(next.state.messages).slice(-2), ["and then?", "second"])
    }).pipe(Effect.provide(durable(
      [{ text: "first", usage }, { text: "second", usage }],
      { idle: "1 minute" },
      Layer.empty,
      toolsLayer([]),
      Layer.succeed(DurableSession.Store, store)
    )))
  })
})

describe("Sessions, as durable workflows (DurableSession.layerSessions)", () => {
  const Invoice = Schema.Struct({ total: Schema.Finite })

  it.live("a typed output: the result's state holds the answer, read typed", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "invoice", prompt: "bill it", output: "Invoice" })
      const result = yield* service.result("invoice")
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual((yield* Agent.typedResult(Invoice, result)).output, { total: 12 })
    }).pipe(Effect.provide(durable([
      { toolCalls: [{ id: "f1", name: "final_answer", params: { total: 12 } }], usage }
    ], { outputs: { Invoice } }))))

  const deployTurns: Turns = [
    { toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage },
    { text: "deployed", usage }
  ]

  it.live("an id no session has is refused as in this process (CheckpointMissing): nothing is planted for a later session", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      for (const refused of [
        service.steer("later", "planted steering"),
        service.followUp("later", "planted follow-up"),
        service.approve("later", "d1", Approvals.approved),
        service.interrupt("later"),
        service.events("later"),
        service.result("later")
      ]) {
        const error = yield* Effect.flip(refused)
        assert(error._tag === "CheckpointMissing")
        assert.strictEqual(error.sessionId, "later")
      }
      yield* service.start({ sessionId: "later", prompt: "go" })
      const result = yield* service.result("later")
      assert.deepStrictEqual(texts(result.state.messages), ["go", "", "step 1 done", "", "slept 5 ms", "all done"])
    }).pipe(Effect.provide(durable(threeTurns("slow", 5), {}))))

  it.live("interrupted, a durable session ends for good: its result and a follow-up say so (SessionEnded), its waiting call takes no decision", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "halt", prompt: "deploy" })
      const id = yield* asked("halt")
      yield* service.interrupt("halt")
      const ended = yield* Effect.flip(service.result("halt")).pipe(Effect.timeout(patience))
      assert(ended._tag === "SessionEnded")
      assert.deepStrictEqual([ended.sessionId, ended.reason], ["halt", "interrupted"])
      assert.isFalse(yield* service.approve("halt", id, Approvals.approved))
      const late = yield* Effect.flip(service.followUp("halt", "and then?"))
      assert(late._tag === "SessionEnded")
      assert.strictEqual(late.reason, "interrupted")
    }).pipe(Effect.provide(durable(deployTurns, {}))))

  it.live("the durable inbox is bounded as a run's steering is: past 100 waiting, SteeringFull and nothing kept; none of the 100 is lost", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "full", prompt: "deploy" })
      const id = yield* asked("full")
      // the run waits for the approval: nothing reads the inbox meanwhile
      for (let i = 0; i < 100; i++) yield* service.steer("full", `note ${i}`)
      const refused = yield* Effect.flip(service.steer("full", "one too many"))
      assert(refused._tag === "SteeringFull")
      assert.deepStrictEqual([refused.kind, refused.queued, refused.limits.messages], ["steer", 100, 100])
      assert.isTrue(yield* service.approve("full", id, Approvals.approved))
      const result = yield* service.result("full")
      const said = texts(result.state.messages)
      assert.deepStrictEqual(said.filter((text) => text.startsWith("note ")), Array.from({ length: 100 }, (_, i) => `note ${i}`))
      assert.notInclude(said, "one too many")
    }).pipe(Effect.provide(durable(deployTurns, {}))))

  it.live("a steer to a session waiting idle continues it, as in this process: it is delivered, never dropped", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "idler", prompt: "go" })
      yield* service.result("idler")
      const seen = (yield* service.events("idler")).at(-1)!.seq
      // the session waits idle now (its wait is recorded before it reads the inbox): the steer wakes it
      yield* Effect.gen(function*() {
        const store = yield* DurableSession.Store
        yield* Effect.repeat(store.waiting("idler"), {
          until: (wait) => wait !== undefined,
          schedule: Schedule.spaced("20 millis"),
          times: 250
        })
      })
      yield* service.steer("idler", "and the changelog too")
      const next = yield* service.result("idler", seen).pipe(Effect.timeout(patience))
      assert.include(texts(next.state.messages), "and the changelog too")
    }).pipe(Effect.provide(durable([...threeTurns("slow", 5), { text: "changelog written", usage }], { idle: "1 minute" }))))

  it.live("messages the session has read no longer count against the bound, though it has not read on yet", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "reread", prompt: "deploy twice" })
      yield* asked("reread", "d1")
      for (let i = 0; i < 100; i++) yield* service.steer("reread", `note ${i}`)
      assert.isTrue(yield* service.approve("reread", "d1", Approvals.approved))
      // the 100 are read before the next model call, which asks for d2: the inbox takes more while it waits
      yield* asked("reread", "d2")
      yield* service.steer("reread", "one more")
      assert.isTrue(yield* service.approve("reread", "d2", Approvals.approved))
      const said = texts((yield* service.result("reread")).state.messages)
      assert.strictEqual(said.filter((text) => text.startsWith("note ")).length, 100)
      assert.include(said, "one more")
    }).pipe(Effect.provide(durable([
      { toolCalls: [{ id: "d1", name: "deploy", params: { env: "staging" } }], usage },
      { toolCalls: [{ id: "d2", name: "deploy", params: { env: "prod" } }], usage },
      { text: "deployed twice", usage }
    ], {}))))

  it.live("where runners keep no session idle, a follow-up to a finished session is refused (SessionEnded), not kept unread", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "done", prompt: "go" })
      yield* service.result("done")
      const refused = yield* Effect.flip(service.followUp("done", "one more thing"))
      assert(refused._tag === "SessionEnded")
      assert.deepStrictEqual([refused.sessionId, refused.reason], ["done", "finished"])
    }).pipe(Effect.provide(durable(threeTurns("slow", 5), {}))))

  it.live("a runner that does not know the output asked for: the result fails with its ConfigError", () =>
    Effect.gen(function*() {
      const service = yield* sessions
      yield* service.start({ sessionId: "unknown-output", prompt: "bill it", output: "Receipt" })
      const error = yield* Effect.flip(service.result("unknown-output"))
      assert(error._tag === "ConfigError")
      assert.strictEqual(error.field, "output")
      assert.include(error.rule, `"Receipt"`)
    }).pipe(Effect.provide(durable(threeTurns("slow", 5), { outputs: { Invoice } }))))
})
