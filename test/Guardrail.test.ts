/**
 * Guardrails: an input check beside the first model call, an output check
 * on the final answer; a trip ends the run `GuardrailTripped` with a valid
 * transcript.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FileSystem, Latch, Layer, Schema, Stream } from "effect"
import { TestClock } from "effect/testing"
import { Agent, type AgentEvent, Guardrail, Hooks, Message, Outcome, type RunState, Steering, ToolRegistry } from "effect-agent"
import {
  ClusterWorkflowEngine,
  MessageStorage,
  RunnerHealth,
  Runners,
  RunnerStorage,
  Sharding,
  ShardingConfig
} from "effect/cluster"
import { CheckpointStore, DurableSession, Session, Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as Fs from "node:fs"
import * as NodePath from "node:path"
import { assertValidTranscript, makeTrace, ofTag, runOk, tags, toolsLayer } from "./support.ts"

describe("Guardrail.input", () => {
  it.live("a trip interrupts the model call in flight and ends the run with the reason", () =>
    Effect.gen(function*() {
      const calling = Latch.makeUnsafe()
      const started = Hooks.plugin({
        name: "started",
        observe: (event) => void (event._tag === "TurnStart" && calling.openUnsafe())
      })
      const guard = Guardrail.input(({ text }) =>
        // trips once the model call is under way
        Effect.as(calling.await, text.includes("password") ? Guardrail.trip("the prompt holds a password") : Guardrail.pass), { name: "secrets" })
      // the model never answers: only the trip can end this run
      const { events, requests, result } = yield* runOk([{ hang: true }], {
        prompt: "my password is hunter2",
        plugins: [started, guard]
      })
      assert.strictEqual(requests.length, 1)
      assert.deepStrictEqual(result.outcome, {
        _tag: "GuardrailTripped",
        guardrail: "secrets",
        reason: "the prompt holds a password",
        phase: "input"
      })
      assertValidTranscript(result.state.messages)
      const tripped = ofTag(events, "GuardTripped")
      assert.deepStrictEqual(tripped.map((e) => [e.guard, e.detail]), [["guardrail:secrets", "the prompt holds a password"]])
      assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
    }))

  it.live("the model call does not wait for the check, but the first turn's tools do", () =>
    Effect.gen(function*() {
      const order: Array<string> = []
      const trace = makeTrace()
      const guard = Guardrail.input(() =>
        Effect.sleep("50 millis").pipe(Effect.andThen(Effect.sync(() => (order.push("checked"), Guardrail.pass))))
      )
      const seen = Hooks.plugin({
        name: "seen",
        observe: (event) => {
          if (event._tag === "MessageEnd" && event.message.role === "assistant") order.push("replied")
          if (event._tag === "ToolExecutionStart") order.push("tool")
        }
      })
      const { result } = yield* runOk([
        { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { text: "3" }
      ], { plugins: [seen, guard], trace })
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(order.slice(0, 3), ["replied", "checked", "tool"])
      assert.deepStrictEqual(trace.started, ["add"])
    }))

  it.live("a trip after the model answered still ends the run: it does not complete before the check", () =>
    Effect.gen(function*() {
      const guard = Guardrail.input(() => Effect.as(Effect.sleep("30 millis"), Guardrail.trip("off topic")))
      const { result } = yield* runOk([{ text: "sure, here you go" }], { plugins: [guard] })
      assert.deepStrictEqual(result.outcome, { _tag: "GuardrailTripped", guardrail: "input", reason: "off topic", phase: "input" })
    }))
})

describe("Guardrail.output", () => {
  it.effect("a trip on the final answer ends the run with the reason; replies that call tools are not checked", () =>
    Effect.gen(function*() {
      const checked: Array<string> = []
      const pii = Guardrail.output(({ text }) =>
        Effect.sync(() => {
          checked.push(text)
          return text.includes("@") ? Guardrail.trip("the answer holds an email address") : Guardrail.pass
        }), { name: "pii" })
      const { events, result } = yield* runOk([
        { text: "let me look", toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { text: "write to bob@example.com" }
      ], { plugins: [pii] })
      assert.deepStrictEqual(checked, ["write to bob@example.com"])
      assert.deepStrictEqual(result.outcome, {
        _tag: "GuardrailTripped",
        guardrail: "pii",
        reason: "the answer holds an email address",
        phase: "output"
      })
      assertValidTranscript(result.state.messages)
      // withheld: the transcript holds a reply that says so, not the answer
      assert.strictEqual(
        Message.textOf(result.state.messages.at(-1)!),
        "[This answer was withheld: the output guardrail pii tripped (the answer holds an email address).]"
      )
      assert.notInclude(JSON.stringify(result), "bob@example.com")
      assert.deepStrictEqual(ofTag(events, "GuardTripped").map((e) => e.guard), ["guardrail:pii"])
    }))

  it.effect("a typed final answer is checked too: a trip ends the run without an output", () =>
    Effect.gen(function*() {
      const checked: Array<unknown> = []
      const limit = Guardrail.output(({ output }) =>
        Effect.sync(() => {
          checked.push(output)
          return (output as { amount: number }).amount > 100 ? Guardrail.trip("over the refund limit") : Guardrail.pass
        }), { name: "limit" })
      const result = yield* Agent.run({
        prompt: "refund",
        plugins: [limit],
        output: Schema.Struct({ amount: Schema.Finite })
      }).pipe(
        Effect.provide(ScriptedModel.layer([{ toolCalls: [{ name: "final_answer", params: { amount: 250 } }] }])),
        Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty)
      )
      assert.deepStrictEqual(checked, [{ amount: 250 }])
      assert.deepStrictEqual(result.outcome, {
        _tag: "GuardrailTripped",
        guardrail: "limit",
        reason: "over the refund limit",
        phase: "output"
      })
      assert.strictEqual(result.output, undefined)
      assertValidTranscript(result.state.messages)
    }))

  it.effect("an answer that passes completes the run", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk([{ text: "fine" }], {
        plugins: [Guardrail.output(() => Effect.succeed(Guardrail.pass))]
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
    }))
})

// -----------------------------------------------------------------------------
// Issue 29, item 5: guardrails bypassed. Every text that reaches the model passes the input guardrails;
// a blocked answer reaches no consumer of events.
// -----------------------------------------------------------------------------

const secret = "hunter2"
const secrets = Guardrail.input(({ text }) =>
  Effect.succeed(text.includes(secret) ? Guardrail.trip("the message holds a password") : Guardrail.pass), {
  name: "secrets"
})
const inputTrip = Outcome.guardrailTripped("secrets", "the message holds a password", "input")

const leaked = "bob@example.com"
const pii = Guardrail.output(({ text }) =>
  Effect.succeed(text.includes("@") ? Guardrail.trip("the answer holds an email address") : Guardrail.pass), {
  name: "pii"
})
const outputTrip = Outcome.guardrailTripped("pii", "the answer holds an email address", "output")

/** Continues a run on a script: its result and the requests the model received. */
const continueWith = (state: RunState.RunState, options: Agent.ContinueOptions, script: ScriptedModel.Script) =>
  Effect.gen(function*() {
    const result = yield* Agent.runContinue(state, options)
    const requests = yield* ScriptedModel.ScriptedModel.use((model) => model.requests)
    return { result, requests }
  }).pipe(
    Effect.provide(ScriptedModel.layer(script)),
    Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty)
  )

/** Everything the model was sent, as one text. */
const sent = (requests: ReadonlyArray<ScriptedModel.Request>) => JSON.stringify(requests.map((r) => r.prompt.content))

describe("Guardrail.input: every text that reaches the model passes it", () => {
  it.effect("attack: steering the input guardrail would block reached the model unchecked (only the task was checked)", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      const steerDuringTool = Hooks.plugin({
        name: "steer",
        onEvent: (event) =>
          event._tag === "ToolExecutionStart" ? Effect.orDie(steering.steer(`my password is ${secret}`)) : Effect.void
      })
      const { events, requests, result } = yield* runOk([
        { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { text: "noted" }
      ], { prompt: "add 1 and 2", steering, plugins: [secrets, steerDuringTool] })
      assert.strictEqual(requests.length, 1, "no model call after the blocked steering")
      assert.notInclude(sent(requests), secret)
      assert.deepStrictEqual(result.outcome, inputTrip)
      assert.notInclude(JSON.stringify(result.state), secret)
      assertValidTranscript(result.state.messages)
      // accounted for: announced as blocked, never as delivered
      assert.deepStrictEqual(ofTag(events, "DeliveryBlocked").map((e) => [e.kind, e.plugin, e.messages]), [
        ["steering", "guardrail:secrets", [Message.user(`my password is ${secret}`)]]
      ])
      assert.strictEqual(ofTag(events, "SteeringDelivered").length, 0)
      assert.deepStrictEqual(ofTag(events, "GuardTripped").map((e) => e.guard), ["guardrail:secrets"])
    }))

  it.effect("attack: a follow-up the input guardrail would block reached the model unchecked", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      yield* steering.followUp(`and log in with ${secret}`)
      const { events, requests, result } = yield* runOk([{ text: "hello" }, { text: "logged in" }], {
        prompt: "say hello",
        steering,
        plugins: [secrets]
      })
      assert.strictEqual(requests.length, 1)
      assert.notInclude(sent(requests), secret)
      assert.deepStrictEqual(result.outcome, inputTrip)
      assert.notInclude(JSON.stringify(result.state), secret)
      assert.deepStrictEqual(ofTag(events, "DeliveryBlocked").map((e) => e.kind), ["followUp"])
      assert.strictEqual(ofTag(events, "FollowUpDelivered").length, 0)
    }))

  it.effect("attack: messages a plugin's steering and followUp hooks inject reached the model unchecked", () =>
    Effect.gen(function*() {
      for (const hook of ["steering", "followUp"] as const) {
        let given = false
        const relay = Hooks.plugin({
          name: "relay",
          [hook]: () =>
            Effect.sync(() => given ? [] : (given = true, [Message.user(`the password is ${secret}`)]))
        })
        const { requests, result } = yield* runOk([{ text: "a" }, { text: "b" }], { plugins: [secrets, relay] })
        assert.notInclude(sent(requests), secret, hook)
        assert.deepStrictEqual(result.outcome, inputTrip, hook)
      }
    }))

  it.effect("attack: a continued run's new prompt reached the model unchecked (a continued run was never checked)", () =>
    Effect.gen(function*() {
      const first = yield* runOk([{ text: "hello" }], { prompt: "say hello", plugins: [secrets] })
      assert.deepStrictEqual(first.result.outcome, { _tag: "Completed" })
      const state = { ...first.result.state, messages: [...first.result.state.messages, Message.user(`use ${secret}`)] }
      const continued = yield* continueWith(state, { plugins: [secrets] }, [{ text: "done" }])
      assert.deepStrictEqual(continued.result.outcome, inputTrip)
      assert.strictEqual(continued.requests.length, 0, "the new prompt is checked before the model call")
      assertValidTranscript(continued.result.state.messages)
    }))

  it.effect("a task that tripped is checked again when its run is continued with a follow-up", () =>
    Effect.gen(function*() {
      const first = yield* runOk([{ text: "never", delay: "1 minute" }], { prompt: `log in with ${secret}`, plugins: [secrets] })
      assert.deepStrictEqual(first.result.outcome, inputTrip)
      const steering = yield* Steering.make()
      yield* steering.followUp("hello?")
      const continued = yield* continueWith(first.result.state, { steering, plugins: [secrets] }, [{ text: "with it" }])
      assert.deepStrictEqual(continued.result.outcome, inputTrip)
      assert.strictEqual(continued.requests.length, 0, "the blocked task is not sent again")
    }))

  it.effect("a continued run checks only what has not passed (saved with its state); a state that is not its own fails", () =>
    Effect.gen(function*() {
      const checked: Array<string> = []
      const log = Guardrail.input(({ text }) => Effect.sync(() => (checked.push(text), Guardrail.pass)), { name: "log" })
      const first = yield* runOk([{ text: "hello" }], { prompt: "say hello", plugins: [log] })
      assert.deepStrictEqual(first.result.state.pluginState["guardrail:log"], { checked: 2 })
      const next = { ...first.result.state, messages: [...first.result.state.messages, Message.user("and goodbye")] }
      yield* continueWith(next, { plugins: [log] }, [{ text: "bye" }])
      assert.deepStrictEqual(checked, ["say hello", "and goodbye"])
      // a saved mark that is not its own, or past the transcript, fails the run before it starts
      for (const saved of ["everything", { checked: 9 }, { checked: -1 }]) {
        const corrupt = { ...next, pluginState: { ...next.pluginState, "guardrail:log": saved } }
        const error = yield* Effect.flip(continueWith(corrupt, { plugins: [log] }, [{ text: "ok" }]))
        assert.deepStrictEqual([error._tag, error._tag === "InvalidPluginState" && error.plugin], [
          "InvalidPluginState",
          "guardrail:log"
        ], JSON.stringify(saved))
      }
      assert.strictEqual(checked.length, 2)
    }))

  it.effect("steering and follow-ups that pass are delivered, each checked once", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make()
      yield* steering.steer("use metric units")
      yield* steering.followUp("and tomorrow?")
      const checked: Array<string> = []
      const log = Guardrail.input(({ text }) => Effect.sync(() => (checked.push(text), Guardrail.pass)))
      const { events, result } = yield* runOk([{ text: "4°C" }, { text: "6°C" }], {
        prompt: "weather?",
        steering,
        plugins: [log]
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(checked.slice().sort(), ["and tomorrow?", "use metric units", "weather?"])
      assert.strictEqual(ofTag(events, "SteeringDelivered").length, 1)
      assert.strictEqual(ofTag(events, "FollowUpDelivered").length, 1)
    }))
})

describe("Guardrail.output: a blocked answer reaches no consumer", () => {
  it.effect("attack: runStream, observe and onEvent got the blocked answer word by word before the trip", () =>
    Effect.gen(function*() {
      const observed: Array<string> = []
      const onEvent: Array<string> = []
      const spies = Hooks.plugin({
        name: "spies",
        observe: (event) => void observed.push(JSON.stringify(event)),
        onEvent: (event) => Effect.sync(() => void onEvent.push(JSON.stringify(event)))
      })
      const events = yield* Stream.runCollect(Agent.runStream({ prompt: "who?", plugins: [pii, spies] })).pipe(
        Effect.provide(ScriptedModel.layer([{ text: `write to ${leaked} today` }])),
        Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty)
      )
      for (const [who, seen] of [["stream", events.map((e) => JSON.stringify(e))], ["observe", observed], ["onEvent", onEvent]] as const) {
        assert.isAbove(seen.length, 5, who)
        for (const event of seen) assert.notInclude(event, leaked, who)
        for (const event of seen) assert.notInclude(event, "today", who)
      }
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      assert.deepStrictEqual(end._tag === "AgentEnd" ? end.outcome : undefined, outputTrip)
      // the reply is withheld: its events carry the withheld text, never a delta of the blocked one
      assert.deepStrictEqual(ofTag(events, "MessageUpdate"), [])
      const ends = ofTag(events, "MessageEnd").map((e) => Message.textOf(e.message))
      assert.strictEqual(ends.length, 1)
      assert.match(ends[0]!, /withheld/)
    }))

  it.effect("attack: a typed final answer that trips streamed its arguments (OutputDelta, ToolExecutionStart) first", () =>
    Effect.gen(function*() {
      const limit = Guardrail.output(({ output }) =>
        Effect.succeed(JSON.stringify(output).includes("31337.75") ? Guardrail.trip("over the refund limit") : Guardrail.pass))
      const events = yield* Stream.runCollect(Agent.runStream({
        prompt: "refund",
        plugins: [limit],
        output: Schema.Struct({ amount: Schema.Finite })
      })).pipe(
        // (an amount no timestamp or duration of an event could spell: "250" was one now and then)
        Effect.provide(ScriptedModel.layer([{ toolCalls: [{ name: "final_answer", params: { amount: 31337.75 } }] }])),
        Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty)
      )
      for (const event of events) assert.notInclude(JSON.stringify(event), "31337.75")
      assert.strictEqual(ofTag(events, "ToolExecutionStart").length, 0)
      const end = events.at(-1)!
      assert.strictEqual(end._tag === "AgentEnd" ? end.outcome?._tag : undefined, "GuardrailTripped")
    }))

  it.effect("a reply the deadline cuts short before its check is withheld unchecked: its partial words reach no one", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(runOk([{ text: ["write ", "to ", "bob@"], hang: true }], {
        plugins: [pii],
        config: { budgets: { wallClock: 1000 } }
      }))
      yield* TestClock.adjust("2 seconds")
      const { events, result } = yield* Fiber.join(fiber)
      assert.strictEqual(result.outcome._tag, "BudgetExceeded")
      for (const event of events) assert.notInclude(JSON.stringify(event), "bob@")
      assert.notInclude(JSON.stringify(result), "bob@")
      assert.match(Message.textOf(result.state.messages.at(-1)!), /withheld: the run stopped before/)
      assertValidTranscript(result.state.messages)
    }))

  it.effect("a reply that calls tools is released as it ends, a final answer once it passed; without an output guardrail nothing is held", () =>
    Effect.gen(function*() {
      const script: ReadonlyArray<ScriptedModel.Turn> = [
        { text: ["let ", "me ", "add"], toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { text: ["it ", "is ", "3"] }
      ]
      const held = yield* runOk(script, { plugins: [pii] })
      const free = yield* runOk(script)
      assert.deepStrictEqual(held.result.outcome, { _tag: "Completed" })
      assert.deepStrictEqual(held.result.state.messages, free.result.state.messages)
      const updates = (events: ReadonlyArray<AgentEvent.AgentEvent>) =>
        ofTag(events, "MessageUpdate").flatMap((e) => e.delta.type === "text" ? [e.delta.delta] : [])
      // per token without one, per reply with one
      assert.deepStrictEqual(updates(free.events), ["let ", "me ", "add", "it ", "is ", "3"])
      assert.deepStrictEqual(updates(held.events), ["let me add", "it is 3"])
      // the first reply's end comes before its tool runs, the answer's after the check
      const order = tags(held.events)
      assert.isBelow(order.indexOf("MessageEnd"), order.indexOf("ToolExecutionStart"))
    }))
})

/** Every file under a directory, with its text. */
const filesUnder = (dir: string): ReadonlyArray<{ readonly file: string; readonly text: string }> =>
  (Fs.readdirSync(dir, { recursive: true, withFileTypes: true }))
    .filter((entry) => entry.isFile())
    .map((entry) => {
      const file = NodePath.join(entry.parentPath, entry.name)
      return { file, text: Fs.readFileSync(file, "utf8") }
    })

describe("guardrails in a session", () => {
  it.live("attack: a session's checkpoint files and its trajectory file held the blocked answer", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const store = yield* CheckpointStore.fileSystem(NodePath.join(dir, "sessions"))
      const trajectory = NodePath.join(dir, "trajectory.ndjson")
      const result = yield* Session.run({
        id: "s1",
        prompt: "who do I write to?",
        plugins: [pii, Trajectory.ndjson(trajectory)]
      }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(Layer.merge(
        ScriptedModel.layer([
          { text: "let me add", toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
          { text: `write to ${leaked}` }
        ]),
        toolsLayer()
      )))
      assert.deepStrictEqual(result.outcome, outputTrip)
      assert.notInclude(JSON.stringify(result), leaked)
      const files = filesUnder(dir)
      assert.isAtLeast(files.length, 3, files.map((f) => f.file).join())
      for (const { file, text } of files) assert.notInclude(text, leaked, file)
      assert.include(files.find((f) => f.file === trajectory)?.text, "let me add", "what passed is written")
      // the finished session's stored result is the withheld one
      const reopened = yield* Session.open("s1", { prompt: "unused" }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(Layer.merge(ScriptedModel.layer([]), toolsLayer()))
      )
      assert.deepStrictEqual(reopened.outcome, outputTrip)
      assert.match(Message.textOf(reopened.state.messages.at(-1)!), /withheld/)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("attack: a resumed session's follow-up reached the model unchecked", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const model = Layer.merge(ScriptedModel.layer([{ text: "hello" }, { text: "logged in" }]), toolsLayer())
      const first = yield* Session.run({ id: "s1", prompt: "say hello", plugins: [secrets] }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(model)
      )
      assert.deepStrictEqual(first.outcome, { _tag: "Completed" })
      const steering = yield* Steering.make()
      yield* steering.followUp(`log in with ${secret}`)
      const { requests, result } = yield* Effect.gen(function*() {
        const result = yield* Session.resume("s1", { steering, plugins: [secrets] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
        const requests = yield* ScriptedModel.ScriptedModel.use((m) => m.requests)
        return { requests, result }
      }).pipe(Effect.provide(model))
      assert.deepStrictEqual(result.outcome, inputTrip)
      assert.strictEqual(requests.length, 0)
      // the checkpoint does not keep it either: a later follow-up does not carry it to the model
      const saved = yield* store.load("s1")
      assert.notInclude(JSON.stringify(saved), secret)
    }))
})

/** The cluster's workflow engine, in memory: every activity result (a withheld reply too) is encoded and stored. */
const clusterEngine = ClusterWorkflowEngine.layer.pipe(
  Layer.provideMerge(Sharding.layer),
  Layer.provide(Runners.layerNoop),
  Layer.provideMerge(MessageStorage.layerMemory),
  Layer.provide(RunnerStorage.layerMemory),
  Layer.provide(RunnerHealth.layerNoop),
  Layer.provide(ShardingConfig.layer({ entityMessagePollInterval: 50, sendRetryInterval: 10 })),
  Layer.orDie
)

/** A runner of durable sessions on the cluster's engine, with these plugins, on a script; the model's requests recorded. */
const durableRunner = (script: ScriptedModel.Script, plugins: ReadonlyArray<Hooks.PluginInput>) =>
  DurableSession.layer({ plugins }).pipe(
    Layer.provideMerge(Layer.mergeAll(ScriptedModel.layer(script), toolsLayer(), DurableSession.layerMemoryStore)),
    Layer.provideMerge(clusterEngine)
  )

describe("guardrails in a durable session", () => {
  it.live("attack: a durable session's steering and follow-ups reached the model unchecked", () =>
    Effect.gen(function*() {
      for (const kind of ["steer", "followUp"] as const) {
        const sessionId = `d-${kind}`
        const { requests, result } = yield* Effect.gen(function*() {
          // in its inbox before the session starts (the public calls refuse an id no session has yet): taken at
          // its first poll of that kind
          const store = yield* DurableSession.Store
          yield* store.appendInbox(sessionId, kind === "steer" ? "steering" : "followUp", Message.user(`my password is ${secret}`))
          const result = yield* DurableSession.run({ sessionId, prompt: "say hello" })
          const requests = yield* ScriptedModel.ScriptedModel.use((model) => model.requests)
          const published = (yield* DurableSession.events(sessionId)).map((entry) => entry.event)
          assert.deepStrictEqual(ofTag(published, "DeliveryBlocked").map((e) => e.kind), [kind === "steer" ? "steering" : "followUp"])
          return { requests, result }
        }).pipe(Effect.provide(durableRunner([{ text: "hello" }, { text: "logged in" }], [secrets])))
        assert.deepStrictEqual(result.outcome, inputTrip, kind)
        assert.notInclude(sent(requests), secret, kind)
        assert.notInclude(JSON.stringify(result.state), secret, kind)
      }
    }))

  it.live("attack: a durable session published a blocked answer's words", () =>
    Effect.gen(function*() {
      const { published, result } = yield* Effect.gen(function*() {
        const result = yield* DurableSession.run({ sessionId: "d-out", prompt: "who?" })
        const published = (yield* DurableSession.events("d-out")).map((entry) => entry.event)
        return { published, result }
      }).pipe(Effect.provide(durableRunner([
        { text: "let me add", toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
        { text: `write to ${leaked}` }
      ], [pii])))
      assert.deepStrictEqual(result.outcome, outputTrip)
      assert.notInclude(JSON.stringify(result), leaked)
      assert.isAbove(published.length, 5)
      for (const event of published) assert.notInclude(JSON.stringify(event), leaked)
      assert.include(JSON.stringify(published), "let me add")
    }))
})

// -----------------------------------------------------------------------------
// The same attacks, at random: steering and follow-ups (some blocked) sent at random events, answers (some
// blocked) among replies that call tools, cancels and deadlines that cut replies, both delivery modes.
// -----------------------------------------------------------------------------

/** A small seeded generator (mulberry32): the same seed, the same scenario. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/** A random run: its script, the messages sent and when, its cancel, deadline and delivery modes. */
const scenarioOf = (seed: number) => {
  const next = random(seed)
  const pick = <A>(items: ReadonlyArray<A>): A => items[Math.floor(next() * items.length)]!
  const turns: Array<ScriptedModel.Turn> = []
  const toolTurns = Math.floor(next() * 4)
  for (let t = 0; t < toolTurns; t++) {
    // a reply that calls tools is released unchecked: its words are never the blocked ones
    turns.push({ text: ["step ", `${t}`], toolCalls: [{ name: "add", params: { a: t, b: 1 } }], delay: `${pick([0, 200])} millis` })
  }
  // answers: the model may answer several times (follow-ups restart it), some with the blocked words
  for (let a = 0; a < 12; a++) {
    turns.push(pick<ScriptedModel.Turn>([
      { text: ["answer ", `${a}`] },
      { text: ["write ", "to ", leaked] },
      { text: ["reach ", leaked, " now"], delay: "1500 millis" },
      { text: ["slow ", "answer"], delay: "1500 millis" }
    ]))
  }
  const sends = Array.from({ length: Math.floor(next() * 5) }, (_, i) => ({
    kind: pick(["steer", "followUp"] as const),
    atEvent: Math.floor(next() * 30),
    text: next() < 0.4 ? `message ${seed}-${i}: the password is ${secret}` : `message ${seed}-${i}`
  }))
  return {
    turns,
    sends,
    cancelAtEvent: next() < 0.2 ? Math.floor(next() * 30) : null,
    wallClock: next() < 0.3 ? pick([500, 1000, 2000]) : null,
    steeringMode: pick(["all", "oneAtATime"] as const),
    followUpMode: pick(["all", "oneAtATime"] as const)
  }
}

describe("guardrails on random runs", () => {
  it.effect("no blocked message reaches the model, no blocked answer reaches a consumer, every message is accounted for", () =>
    Effect.gen(function*() {
      const runs = 300
      let blockedDeliveries = 0
      let withheld = 0
      for (let seed = 1; seed <= runs; seed++) {
        const scenario = scenarioOf(seed)
        const steering = yield* Steering.make({ steeringMode: scenario.steeringMode, followUpMode: scenario.followUpMode })
        let seen = 0
        const triggers = Hooks.plugin({
          name: "triggers",
          onEvent: () =>
            Effect.gen(function*() {
              const n = seen++
              for (const send of scenario.sends) {
                if (send.atEvent === n) yield* Effect.orDie(send.kind === "steer" ? steering.steer(send.text) : steering.followUp(send.text))
              }
              if (n === scenario.cancelAtEvent) yield* steering.cancel("random cancel")
            })
        })
        const streamed: Array<string> = []
        const fiber = yield* Effect.forkChild(
          Effect.gen(function*() {
            yield* Stream.runForEach(
              Agent.runStream({
                prompt: "go",
                steering,
                plugins: [secrets, pii, triggers],
                config: { maxTurns: 12, budgets: { wallClock: scenario.wallClock } }
              }),
              (event) => Effect.sync(() => void streamed.push(JSON.stringify(event)))
            )
            return yield* ScriptedModel.ScriptedModel.use((model) => model.requests)
          }).pipe(Effect.provide(Layer.merge(ScriptedModel.layer(scenario.turns), toolsLayer())))
        )
        // drive virtual time until the run ends (bounded)
        for (let step = 0; step < 200 && fiber.pollUnsafe() === undefined; step++) yield* TestClock.adjust("100 millis")
        const exit = yield* Fiber.await(fiber)
        assert.strictEqual(exit._tag, "Success", `seed ${seed}: ${String(exit)}`)
        assert(exit._tag === "Success")
        // no blocked message reached the model
        assert.notInclude(sent(exit.value), secret, `seed ${seed}`)
        const events = streamed.map((line) => JSON.parse(line) as AgentEvent.Encoded)
        const end = events.at(-1)
        assert.strictEqual(end?._tag, "AgentEnd", `seed ${seed}`)
        // no blocked answer reached the stream (nor, so, any plugin: they see the same events)
        for (const line of streamed) assert.notInclude(line, leaked, `seed ${seed}`)
        // every message sent before the end is delivered, blocked, or returned in the state: exactly once
        const result = end?._tag === "AgentEnd" && "result" in end ? end.result : undefined
        assert(result !== undefined, `seed ${seed}: no result`)
        const texts = (messages: ReadonlyArray<unknown>) => messages.map((m) => JSON.stringify(m))
        const accounted = [
          ...events.flatMap((e) =>
            e._tag === "SteeringDelivered" || e._tag === "FollowUpDelivered" || e._tag === "DeliveryBlocked"
              ? texts(e.messages)
              : []
          ),
          ...texts(result.state.steering),
          ...texts(result.state.followUps)
        ]
        for (const send of scenario.sends.filter((send) => send.atEvent < events.length - 1)) {
          const count = accounted.filter((text) => text.includes(`"${send.text}"`)).length
          assert.strictEqual(count, 1, `seed ${seed}: ${send.text} accounted for ${count} times`)
        }
        // no blocked message in the transcript (so none was sent to the model, now or in a continued run)
        assert.notInclude(JSON.stringify(result.state.messages), secret, `seed ${seed}`)
        assertValidTranscript(Schema.decodeUnknownSync(Schema.toCodecJson(Message.Transcript))(result.state.messages))
        if (events.some((e) => e._tag === "DeliveryBlocked")) {
          blockedDeliveries++
          assert.deepStrictEqual(result.outcome, inputTrip, `seed ${seed}`)
        }
        if (JSON.stringify(result.state.messages).includes("withheld")) withheld++
      }
      // the scenarios do exercise both guardrails
      assert.isAbove(blockedDeliveries, runs / 10)
      assert.isAbove(withheld, runs / 10)
    }))
})
