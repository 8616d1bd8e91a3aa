/**
 * Guardrails on the agent server, over real HTTP on the loopback (issue 29,
 * item 5): an input guardrail checked only the task, so `steer` and
 * `follow_up` carried blocked text to the model; an output guardrail tripped
 * after the answer was streamed, so every SSE client and the trajectory file
 * had the blocked words.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Latch, Layer, Queue, Redacted } from "effect"
import type { Prompt } from "effect/ai"
import { Guardrail, Hooks, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { Kit } from "../session/fixture.ts"
import { baseUrl, readSse, type SseMessage, serverLayer, tagOf, turnsFor } from "./support.ts"

const token = "guardrail-test-token"
const headers = { "content-type": "application/json", authorization: `Bearer ${token}` }

const secret = "hunter2"
const leaked = "bob@example.com"

const secrets = Guardrail.input(({ text }) =>
  Effect.succeed(text.includes(secret) ? Guardrail.trip("the message holds a password") : Guardrail.pass), {
  name: "secrets"
})
const pii = Guardrail.output(({ text }) =>
  Effect.succeed(text.includes("@") ? Guardrail.trip("the answer holds an email address") : Guardrail.pass), {
  name: "pii"
})

/** The sessions whose new run (a follow-up to a finished session) has started, in order: its log is open. */
const resumed = Effect.runSync(Queue.unbounded<string>())
const announcer = Hooks.plugin({
  name: "announcer",
  observe: (event) => void (event._tag === "SessionResumed" && Queue.offerUnsafe(resumed, event.sessionId))
})

/** Every request the model received, as text: what must never hold a blocked message. */
const sentToModel: Array<string> = []

const textOf = (message: Prompt.Message): string =>
  typeof message.content === "string"
    ? message.content
    : message.content.map((part) => part.type === "text" ? part.text : "").join("")

/** `who`: a reply that calls a tool, then an answer with an email address in it; else the server tests' script. */
const script = (_index: number, request: ScriptedModel.Request): ScriptedModel.Turn | undefined => {
  sentToModel.push(JSON.stringify(request.prompt.content))
  const task = textOf(request.prompt.content.find((message) => message.role === "user")!)
  const replies = request.prompt.content.filter((message) => message.role === "assistant").length
  const turns: ReadonlyArray<ScriptedModel.Turn> = task === "who"
    ? [
      { text: ["Looking ", "it ", "up."], toolCalls: [{ name: "step", params: { n: 1 } }] },
      { text: ["Write ", "to ", leaked, " today."] }
    ]
    : turnsFor(task)
  return turns[replies]
}

/** Holds the `slow` calls until a test opens it. */
const gate = Latch.makeUnsafe()

const agent = Layer.merge(
  ScriptedModel.layer(script, { record: false }),
  ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
    step: ({ n }) => Effect.succeed(`step ${n} done`),
    slow: ({ ms }) => Effect.as(gate.await, `slept ${ms} ms`),
    charge: ({ cents }) => Effect.succeed(`charged ${cents} cents`),
    deploy: ({ env }) => Effect.succeed(`deployed to ${env}`)
  })))
)

const directory = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "guardrails-server-"))

const call = (url: string, init: RequestInit = {}) =>
  Effect.promise(async () => {
    const response = await fetch(url, { ...init, headers: { ...headers, ...init.headers } })
    const text = await response.text()
    return { status: response.status, text, body: text === "" ? undefined : JSON.parse(text) }
  })

const post = (url: string, body: unknown) => call(url, { method: "POST", body: JSON.stringify(body) })

const start = (url: string, task: string) =>
  Effect.map(post(`${url}/sessions`, { task }), (response) => {
    assert.strictEqual(response.status, 201, response.text)
    return response.body.id as string
  })

/** Reads a session's events (after `lastId`) until `stop`, or to the end. */
const events = (url: string, id: string, stop?: (message: SseMessage) => boolean, lastId?: string) =>
  Effect.promise(async () => {
    const response = await fetch(`${url}/sessions/${id}/events`, {
      headers: lastId === undefined ? headers : { ...headers, "last-event-id": lastId }
    })
    assert.strictEqual(response.status, 200)
    return readSse(response, stop)
  })

const eventOf = (message: SseMessage) => JSON.parse(message.data)

const inputTrip = { _tag: "GuardrailTripped", guardrail: "secrets", reason: "the message holds a password", phase: "input" }

/** Every file under the server's directory, with its text. */
const files = () =>
  Fs.readdirSync(directory, { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile()).map((entry) => {
    const file = NodePath.join(entry.parentPath, entry.name)
    return { file, text: Fs.readFileSync(file, "utf8") }
  })

layer(
  serverLayer({ token: Redacted.make(token), directory, plugins: [secrets, pii, announcer] }, agent).pipe(
    Layer.tap(() => Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(directory, { recursive: true, force: true }))))
  ),
  { excludeTestServices: true }
)("guardrails on the agent server", (it) => {
  it.effect("attack: a steer over HTTP carried text the input guardrail blocks to the model", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      yield* gate.close
      const id = yield* start(url, "slow 0")
      yield* events(url, id, (message) => tagOf(message) === "ToolExecutionStart")
      const steered = yield* post(`${url}/sessions/${id}/control`, { type: "steer", text: `the password is ${secret}` })
      assert.strictEqual(steered.status, 202)
      yield* gate.open
      const read = yield* events(url, id)
      const all = read.messages.map(eventOf)
      const end = all.at(-1)
      assert.strictEqual(end._tag, "AgentEnd")
      assert.deepStrictEqual(end.outcome, inputTrip)
      assert.deepStrictEqual(all.filter((e) => e._tag === "DeliveryBlocked").map((e) => e.kind), ["steering"])
      assert.isFalse(all.some((e) => e._tag === "SteeringDelivered"))
      for (const request of sentToModel) assert.notInclude(request, secret)
      const info = yield* call(`${url}/sessions/${id}`)
      assert.deepStrictEqual([info.body.status, info.body.outcome], ["finished", inputTrip])
    }))

  it.effect("attack: a follow_up over HTTP carried text the input guardrail blocks to the model (running or restarted)", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      // to a running session: delivered at its natural stop
      yield* gate.close
      const running = yield* start(url, "slow 0")
      yield* events(url, running, (message) => tagOf(message) === "ToolExecutionStart")
      const queued = yield* post(`${url}/sessions/${running}/control`, { type: "follow_up", text: `use ${secret}` })
      assert.strictEqual(queued.body.status, "queued")
      yield* gate.open
      const first = (yield* events(url, running)).messages.map(eventOf)
      assert.deepStrictEqual(first.at(-1).outcome, inputTrip)
      assert.deepStrictEqual(first.filter((e) => e._tag === "DeliveryBlocked").map((e) => e.kind), ["followUp"])
      // to a finished session: a new run from its checkpoint (queued when its run is still ending)
      const done = yield* start(url, "hello")
      const ended = yield* events(url, done)
      assert.deepStrictEqual(eventOf(ended.messages.at(-1)!).outcome, { _tag: "Completed" })
      /** Sends a follow-up to the finished session and reads its new run's events. */
      const followUp = (text: string, after: string) =>
        Effect.gen(function*() {
          const sent = yield* post(`${url}/sessions/${done}/control`, { type: "follow_up", text })
          assert.strictEqual(sent.status, 202, JSON.stringify(sent.body))
          assert.include(["restarted", "queued"], sent.body.status)
          assert.strictEqual(yield* Queue.take(resumed), done)
          return (yield* events(url, done, undefined, after)).messages
        })
      const again = yield* followUp(`log in: ${secret}`, ended.messages.at(-1)!.id!)
      assert.deepStrictEqual(eventOf(again.at(-1)!).outcome, inputTrip)
      for (const request of sentToModel) assert.notInclude(request, secret)
      // a later follow-up that passes goes on, without it
      const next = yield* followUp("And then?", again.at(-1)!.id!)
      assert.deepStrictEqual(eventOf(next.at(-1)!).outcome, { _tag: "Completed" })
      for (const request of sentToModel) assert.notInclude(request, secret)
    }))

  it.effect("attack: an SSE client and the trajectory file got a blocked answer's words before the output guardrail tripped", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const id = yield* start(url, "who")
      // a client that follows the session live, from its first event
      const read = yield* events(url, id)
      assert.isTrue(read.ended)
      for (const message of read.messages) assert.notInclude(message.data, leaked)
      for (const message of read.messages) assert.notInclude(message.data, "today")
      const all = read.messages.map(eventOf)
      assert.deepStrictEqual(all.at(-1).outcome, {
        _tag: "GuardrailTripped",
        guardrail: "pii",
        reason: "the answer holds an email address",
        phase: "output"
      })
      // what passed streamed; the answer's end says it was withheld
      assert.include(JSON.stringify(all), "Looking it up.")
      const ends = all.filter((e) => e._tag === "MessageEnd").map((e) => JSON.stringify(e.message))
      assert.match(ends.at(-1)!, /withheld/)
      // nothing the server wrote holds it: the trajectory, the checkpoint, the record
      const written = files().filter(({ file }) => file.includes(id))
      assert.isTrue(written.some(({ file }) => file.endsWith("trajectory.ndjson")))
      assert.isTrue(written.some(({ file }) => file.includes("checkpoints")))
      for (const { file, text } of written) assert.notInclude(text, leaked, file)
      const info = yield* call(`${url}/sessions/${id}`)
      assert.notInclude(info.text, leaked)
    }))
})
