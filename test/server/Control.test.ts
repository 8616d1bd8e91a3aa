/**
 * The control route under attack: decisions that name no waiting call, or a
 * call by an id that is not the one the listing gives (issue 29, items 2 and
 * 8), and steering floods (item 9). Real HTTP on the loopback.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Exit, FileSystem, Layer, Scope } from "effect"
import { CheckpointStore } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { followTranscript, toolsLayer } from "../session/fixture.ts"
import {
  agentLayer,
  baseUrl,
  call,
  delegatingAgent,
  hangingFrom,
  post,
  readSse,
  serverLayer,
  type SseMessage
} from "./support.ts"


const eventOf = (message: SseMessage) => JSON.parse(message.data)

/** Reads a session's events from the start until `stop` (or to the end): the events. */
const readUntil = (url: string, id: string, stop: (event: any) => boolean = () => false) =>
  Effect.promise(async () => {
    const read = await readSse(await fetch(`${url}/sessions/${id}/events`), (message) => stop(eventOf(message)))
    return read.messages.map(eventOf)
  })

const isTopApproval = (event: any) => event._tag === "ApprovalRequested"
const isChildApproval = (event: any) => event._tag === "Nested" && event.event._tag === "ApprovalRequested"

layer(serverLayer({}, delegatingAgent), { excludeTestServices: true })("decisions over HTTP", (it) => {
  it.effect(
    "wrong-call attack: approving a sub-agent's call by the id the listing gives never answers the top run's own call_0",
    () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        const created = yield* post(`${url}/sessions`, { task: "numbered", id: "numbered" })
        assert.strictEqual(created.status, 201)
        // The researcher's canary deploy (its own call id call_0, run by the session's call_0) waits.
        yield* readUntil(url, "numbered", isChildApproval)
        const listed = (yield* call(`${url}/sessions/numbered`)).body
        assert.strictEqual(listed.status, "waiting")
        const [waiting] = listed.pendingApprovals
        // The attack: an approval by the call's own id, which names no waiting call.
        const byCallId = yield* post(`${url}/sessions/numbered/control`, { type: "approve", id: waiting.toolCallId })
        // The listing's id answers the researcher's call.
        const byListing = yield* post(`${url}/sessions/numbered/control`, { type: "approve", id: waiting.approvalId })
        // Then the session's own production deploy (call_0 as well) must wait for a decision of its own.
        const events = yield* readUntil(url, "numbered", (event) => isTopApproval(event) || event._tag === "AgentEnd")
        const production = (yield* call(`${url}/sessions/numbered`)).body
        assert.deepStrictEqual(
          {
            listed: { toolCallId: waiting.toolCallId, approvalId: waiting.approvalId, env: waiting.params.env },
            byCallId: [byCallId.status, byCallId.body.type],
            byListing: [byListing.status, byListing.body.status],
            last: events.at(-1)._tag,
            production: [production.status, production.pendingApprovals]
          },
          {
            listed: { toolCallId: "call_0", approvalId: "call_0/call_0", env: "canary" },
            byCallId: [409, "urn:effect-agent:problem:control-rejected"],
            byListing: [202, "applied"],
            last: "ApprovalRequested",
            production: ["waiting", [{
              toolCallId: "call_0",
              approvalId: "call_0",
              toolName: "deploy",
              params: { env: "production" }
            }]]
          }
        )
        // Denied by its own id, it never runs.
        const denied = yield* post(`${url}/sessions/numbered/control`, { type: "deny", id: "call_0", reason: "no" })
        assert.deepStrictEqual([denied.status, denied.body.status], [202, "applied"])
        const all = yield* readUntil(url, "numbered")
        const ends = all.filter((event) => event._tag === "ToolExecutionEnd" && event.toolName === "deploy")
        assert.deepStrictEqual(ends.map((event) => event.result.content[0].text), ["Tool call denied: no"])
        const childEnds = all.filter((event) => event._tag === "Nested" && event.event._tag === "ToolExecutionEnd")
        assert.deepStrictEqual(childEnds.map((event) => event.event.result.content[0].text), ["deployed to canary"])
      })
  )

  it.effect("a decision for no waiting call is a 409 and is not kept: the call that later asks under that id waits", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      yield* post(`${url}/sessions`, { task: "numbered", id: "ahead" })
      yield* readUntil(url, "ahead", isChildApproval)
      // Decisions ahead of the top run's call_0, and for ids nothing will ever use (large ones too).
      const ahead = yield* post(`${url}/sessions/ahead/control`, { type: "approve", id: "call_0" })
      const unknown = yield* post(`${url}/sessions/ahead/control`, { type: "approve", id: "x".repeat(500_000) })
      const denied = yield* post(`${url}/sessions/ahead/control`, { type: "deny", id: "call_1", reason: "no" })
      assert.deepStrictEqual(
        [ahead, unknown, denied].map((response) => [response.status, response.body.type, response.body.detail]),
        [
          [409, "urn:effect-agent:problem:control-rejected", "no call waits for approval as \"call_0\""],
          [409, "urn:effect-agent:problem:control-rejected", `no call waits for approval as "${"x".repeat(47)}…"`],
          [409, "urn:effect-agent:problem:control-rejected", "no call waits for approval as \"call_1\""]
        ]
      )
      // interrupt is the command's (it stops its own process): over HTTP it is refused, saying what ends a run
      const interrupt = yield* post(`${url}/sessions/ahead/control`, { type: "interrupt" })
      assert.deepStrictEqual(
        [interrupt.status, interrupt.body.detail],
        [409, "interrupt: not taken over HTTP (cancel ends a run)"]
      )
      // Without an id, a decision names no call: refused, whatever waits.
      const unnamed = yield* post(`${url}/sessions/ahead/control`, { type: "approve" })
      assert.strictEqual(unnamed.status, 400)
      assert.deepStrictEqual(unnamed.body.errors[0].path, ["payload", "id"])
      yield* post(`${url}/sessions/ahead/control`, { type: "approve", id: "call_0/call_0" })
      yield* readUntil(url, "ahead", (event) => isTopApproval(event) || event._tag === "AgentEnd")
      const info = (yield* call(`${url}/sessions/ahead`)).body
      assert.deepStrictEqual(
        [info.status, info.pendingApprovals.map((pending: any) => [pending.approvalId, pending.params.env])],
        ["waiting", [["call_0", "production"]]]
      )
      yield* post(`${url}/sessions/ahead/control`, { type: "deny", id: "call_0" })
      const end = (yield* readUntil(url, "ahead")).at(-1)
      assert.deepStrictEqual(end.outcome, { _tag: "Completed" })
    }))
})

describe("decisions for a finished session", () => {
  it.effect("are refused (409, a JSON problem saying why), never 202 queued; one for no session is a 404", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      yield* post(`${url}/sessions`, { task: "hello", id: "done" })
      yield* readUntil(url, "done")
      const sent = yield* Effect.forEach([
        ["done", { type: "approve", id: "call_1_1" }],
        ["done", { type: "deny", id: "call_1_1", reason: "late" }],
        ["done", { type: "cancel" }],
        ["gone", { type: "approve", id: "call_1_1" }]
      ] as const, ([id, body]) => post(`${url}/sessions/${id}/control`, body))
      assert.deepStrictEqual(sent.map((response) => [response.status, response.body.type, response.body.detail]), [
        [409, "urn:effect-agent:problem:control-rejected", "no call waits for approval as \"call_1_1\""],
        [409, "urn:effect-agent:problem:control-rejected", "no call waits for approval as \"call_1_1\""],
        [409, "urn:effect-agent:problem:control-rejected", "the session is not running"],
        [404, "urn:effect-agent:problem:session-not-found", "no session gone"]
      ])
    }).pipe(Effect.provide(serverLayer({}, delegatingAgent))))
})

/** A steer whose body is just under the server's 1 MiB limit. */
const bigSteer = (i: number) => ({ type: "steer", text: `${i} `.padEnd(1_048_000, "x") })

/** Sends `body` until the server refuses one (or `max` were sent): the statuses. */
const flood = (url: string, id: string, body: (i: number) => unknown, max: number) =>
  Effect.gen(function*() {
    const statuses: Array<number> = []
    for (let i = 0; i < max; i++) {
      const sent = yield* post(`${url}/sessions/${id}/control`, body(i))
      statuses.push(sent.status)
      if (sent.status !== 202) return { statuses, refused: sent.body }
    }
    return { statuses, refused: undefined }
  })

describe("steering floods", () => {
  it.effect("a flood of steering is refused past the queue's bound with a 429, by count and by size", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      // The run waits on its model while the flood comes (the steering waits for the next model call).
      yield* post(`${url}/sessions`, { task: "steps 2 0", id: "small" })
      yield* readUntil(url, "small", (event) => event._tag === "ToolExecutionEnd")
      const small = yield* flood(url, "small", (i) => ({ type: i % 2 === 0 ? "steer" : "follow_up", text: `${i}` }), 150)
      assert.deepStrictEqual(small.statuses, [...Array.from({ length: 100 }, () => 202), 429])
      assert.deepStrictEqual(
        [small.refused.type, small.refused.queued, small.refused.status],
        ["urn:effect-agent:problem:queue-full", 100, 429]
      )
      yield* post(`${url}/sessions`, { task: "steps 2 0", id: "large" })
      yield* readUntil(url, "large", (event) => event._tag === "ToolExecutionEnd")
      const large = yield* flood(url, "large", bigSteer, 80)
      assert.deepStrictEqual(large.statuses, [202, 202, 202, 202, 429])
      assert.match(large.refused.detail, /^the run's queue is full: 4 messages \(4192212 bytes\) wait for delivery, and it holds at most 100 messages or 4194304 bytes/)
    }).pipe(Effect.provide(serverLayer({}, hangingFrom(1)))))

  it.live("a server restarted after a near-limit flood resumes the session (not CheckpointCorrupt) and delivers it", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped()
      // The first server's model never gives the second reply: the steering waits in the queue when it stops.
      const first = yield* Scope.make()
      const a = yield* Effect.provideContext(
        baseUrl,
        yield* Layer.buildWithScope(serverLayer({ directory }, hangingFrom(1)), first)
      )
      yield* post(`${a}/sessions`, { task: "steps 2 0", id: "flooded" })
      yield* readUntil(a, "flooded", (event) => event._tag === "ToolExecutionEnd")
      const sent = yield* flood(a, "flooded", bigSteer, 80)
      yield* Scope.close(first, Exit.void)
      // A new server on the same directory resumes it, and the steering that was accepted is delivered.
      const second = yield* Scope.make()
      const b = yield* Effect.provideContext(
        baseUrl,
        yield* Layer.buildWithScope(serverLayer({ directory }, agentLayer), second)
      )
      const resumed = (yield* call(`${b}/sessions/flooded`)).body
      assert.deepStrictEqual([resumed.status === "failed", resumed.error, sent.statuses.at(-1)], [false, undefined, 429])
      const events = yield* readUntil(b, "flooded")
      const info = (yield* call(`${b}/sessions/flooded`)).body
      yield* Scope.close(second, Exit.void)
      const accepted = sent.statuses.filter((status) => status === 202).length
      const delivered = events.filter((event) => event._tag === "SteeringDelivered")
      assert.deepStrictEqual(
        {
          status: info.status,
          error: info.error,
          outcome: info.outcome,
          delivered: delivered.flatMap((event) => event.messages).length
        },
        { status: "finished", error: undefined, outcome: { _tag: "Completed" }, delivered: accepted }
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), { timeout: 120_000 })
})

/** A model that answers every request, after a few milliseconds or none: runs of any length, ending at random. */
const answering = Layer.merge(
  ScriptedModel.layer(
    (index, request) => ({
      text: `reply ${request.prompt.content.filter((message) => message.role === "assistant").length}`,
      delay: `${2 + (index * 7) % 13} millis`
    }),
    { record: false }
  ),
  toolsLayer([])
)

/** A small seeded generator (mulberry32): the test's choices are the same on every run. */
const seeded = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/** The texts of user messages. */
const userTexts = (messages: ReadonlyArray<any>): Array<string> =>
  messages.filter((message) => message.role === "user").map((message) =>
    message.content.map((part: any) => part.type === "text" ? part.text : "").join("")
  )

/** The problems of a trajectory's runs: a run that starts before the one before it ended. */
const overlaps = (events: ReadonlyArray<any>): Array<number> => {
  const out: Array<number> = []
  let open = false
  events.forEach((event, i) => {
    if (event._tag === "AgentStart") {
      if (open) out.push(i)
      open = true
    } else if (event._tag === "AgentEnd") open = false
  })
  return out
}

/**
 * Waits until a session's run has ended and its end was saved: its record's `updatedAt` moves past its
 * `createdAt` then (the model takes 2 ms at least), after which a message starts a new run (bounded: 30 s).
 */
const idle = (url: string, id: string) =>
  Effect.gen(function*() {
    yield* readUntil(url, id)
    for (let attempt = 0;; attempt++) {
      const info = (yield* call(`${url}/sessions/${id}`)).body
      if (info.status === "finished" && info.updatedAt > info.createdAt) return
      assert.isBelow(attempt, 1_500, `${id} did not end`)
      yield* Effect.sleep("20 millis")
    }
  })

describe("one run at a time", () => {
  it.live(
    "follow-up race attack: parallel follow_ups and steers, to finished and running sessions, start one run at a " +
      "time; each accepted message is delivered once and kept in the checkpoint",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const directory = yield* fs.makeTempDirectoryScoped()
        const server = yield* Scope.make()
        const url = yield* Effect.provideContext(
          baseUrl,
          yield* Layer.buildWithScope(serverLayer({ directory }, answering), server)
        )
        const random = seeded(29)
        const accepted = new Map<string, Array<string>>()
        const statuses: Array<number> = []
        for (let round = 0; round < 8; round++) {
          const id = `race-${round}`
          yield* post(`${url}/sessions`, { task: `race ${round}`, id })
          // Half the rounds hit a finished session (a follow_up restarts it), half a running one.
          if (round % 2 === 0) yield* idle(url, id)
          const sends = Array.from({ length: 6 }, (_, i) => ({
            type: random() < 0.3 ? "steer" : "follow_up",
            text: `${id} message ${i}`,
            after: Math.floor(random() * 3) * 10
          }))
          const answers = yield* Effect.forEach(
            sends,
            ({ after, text, type }) =>
              Effect.andThen(Effect.sleep(`${after} millis`), post(`${url}/sessions/${id}/control`, { type, text })),
            { concurrency: "unbounded" }
          )
          statuses.push(...answers.map((answer) => answer.status))
          accepted.set(id, sends.filter((_, i) => answers[i]!.status === 202).map((send) => send.text))
          // Until every accepted message was delivered and the session is idle (bounded: 30 s).
          for (let attempt = 0;; attempt++) {
            const events = yield* readUntil(url, id)
            const delivered = events.filter((event) =>
              event._tag === "FollowUpDelivered" || event._tag === "SteeringDelivered"
            ).flatMap((event) => userTexts(event.messages))
            const info = (yield* call(`${url}/sessions/${id}`)).body
            const done = accepted.get(id)!.every((text) => delivered.includes(text))
            if (done && info.status === "finished" && events.at(-1)._tag === "AgentEnd") break
            assert.isBelow(
              attempt,
              1_500,
              `${id}: not every accepted message was delivered: ${
                JSON.stringify({ accepted: accepted.get(id), delivered, status: info.status, last: events.at(-1)._tag })
              }`
            )
            yield* Effect.sleep("20 millis")
          }
        }
        // The server stops: what it kept is what the checks read.
        yield* Scope.close(server, Exit.void)
        const checkpoints = yield* CheckpointStore.fileSystem(`${directory}/checkpoints`)
        for (const [id, texts] of accepted) {
          const lines = (yield* fs.readFileString(`${directory}/sessions/${id}/trajectory.ndjson`)).trim().split("\n")
          const events = lines.map((line) => JSON.parse(line))
          const delivered = events.filter((event) =>
            event._tag === "FollowUpDelivered" || event._tag === "SteeringDelivered"
          ).flatMap((event) => userTexts(event.messages))
          const { finished, state } = yield* checkpoints.load(id)
          const kept = userTexts(state.messages)
          assert.deepStrictEqual(
            {
              overlapping: overlaps(events),
              deliveredTwice: texts.filter((text) => delivered.filter((d) => d === text).length !== 1),
              keptOtherThanOnce: texts.filter((text) => kept.filter((k) => k === text).length !== 1),
              finished: finished?.outcome._tag
            },
            { overlapping: [], deliveredTwice: [], keptOtherThanOnce: [], finished: "Completed" },
            id
          )
        }
        // Follow-ups are never refused here; a steer to a finished session is (409).
        assert.deepStrictEqual(statuses.filter((status) => status !== 202 && status !== 409), [])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 120_000 }
  )
})

/** A model that gives two calls one id, `x`: a staging deploy, then a production one (both need approval). */
const twinsAgent = Layer.merge(
  ScriptedModel.layer(
    followTranscript([
      {
        toolCalls: [
          { id: "x", name: "deploy", params: { env: "staging" } },
          { id: "x", name: "deploy", params: { env: "production" } }
        ]
      },
      { text: "The deploy step is over." }
    ]),
    { record: false }
  ),
  toolsLayer([])
)

/** Stops at the `n`-th event `matches` says yes to. */
const nth = (n: number, matches: (event: any) => boolean) => {
  let seen = 0
  return (event: any) => matches(event) && ++seen === n
}

const pendingOf = (url: string, id: string) =>
  Effect.map(
    call(`${url}/sessions/${id}`),
    (response) => response.body.pendingApprovals.map((pending: any) => [pending.approvalId, pending.params.env])
  )

const toolResults = (events: ReadonlyArray<any>) =>
  events.filter((event) => event._tag === "ToolExecutionEnd")
    .map((event) => [event.toolCallId, event.result.content[0].text])

describe("duplicate call ids", () => {
  it.effect("duplicate-id attack: two calls that share an id are listed apart; parallel decisions for x answer x once, never the other", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      yield* post(`${url}/sessions`, { task: "ship it", id: "twins" })
      yield* readUntil(url, "twins", nth(2, isTopApproval))
      // Each call is listed, under its own approval id, with its own arguments.
      assert.deepStrictEqual(yield* pendingOf(url, "twins"), [["x", "staging"], ["x_2", "production"]])
      // Five approvals and five denials of x at once (reviewers, retries): one answers x; none answers x_2.
      const decisions = yield* Effect.forEach(
        Array.from({ length: 10 }, (_, i) => i % 2 === 0 ? { type: "approve", id: "x" } : { type: "deny", id: "x" }),
        (decision) => post(`${url}/sessions/twins/control`, decision),
        { concurrency: "unbounded" }
      )
      const statuses = decisions.map((decision) => decision.status).sort()
      assert.deepStrictEqual(statuses, [202, ...Array.from({ length: 9 }, () => 409)])
      const applied = decisions.filter((decision) => decision.status === 202).map((decision) => decision.body)
      assert.deepStrictEqual(applied.map((decision) => decision.approvalId), ["x"])
      assert.deepStrictEqual(yield* pendingOf(url, "twins"), [["x_2", "production"]])
      const denied = yield* post(`${url}/sessions/twins/control`, { type: "deny", id: "x_2", reason: "not production" })
      assert.deepStrictEqual([denied.status, denied.body.approvalId], [202, "x_2"])
      const events = yield* readUntil(url, "twins")
      const results = toolResults(events)
      assert.deepStrictEqual(results.map(([id]) => id), ["x", "x_2"])
      assert.strictEqual(
        results[0]![1],
        applied[0].type === "approve" ? "deployed to staging" : "Tool call denied: denied over HTTP"
      )
      assert.deepStrictEqual(results[1], ["x_2", "Tool call denied: not production"])
      assert.deepStrictEqual(events.at(-1).outcome, { _tag: "Completed" })
    }).pipe(Effect.provide(serverLayer({}, twinsAgent))))

  it.live("duplicate-id attack: stopped while the second of two calls sharing an id waits, the server resumes the session (not CheckpointCorrupt)", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped()
      const first = yield* Scope.make()
      const a = yield* Effect.provideContext(baseUrl, yield* Layer.buildWithScope(serverLayer({ directory }, twinsAgent), first))
      yield* post(`${a}/sessions`, { task: "ship it", id: "twins" })
      yield* readUntil(a, "twins", nth(2, isTopApproval))
      const denied = yield* post(`${a}/sessions/twins/control`, { type: "deny", id: "x", reason: "not now" })
      assert.strictEqual(denied.status, 202)
      yield* readUntil(a, "twins", (event) => event._tag === "ApprovalResolved")
      yield* Scope.close(first, Exit.void)
      // Started again on the same directory: the session resumes, and the second call asks again under its own id.
      const second = yield* Scope.make()
      const b = yield* Effect.provideContext(baseUrl, yield* Layer.buildWithScope(serverLayer({ directory }, twinsAgent), second))
      const resumed = (yield* call(`${b}/sessions/twins`)).body
      assert.deepStrictEqual([resumed.status === "failed", resumed.error], [false, undefined])
      let restarted = false
      yield* readUntil(b, "twins", (event) => {
        if (event._tag === "SessionResumed") restarted = true
        return restarted && isTopApproval(event) && event.approvalId === "x_2"
      })
      assert.deepStrictEqual(yield* pendingOf(b, "twins"), [["x_2", "production"]])
      const approved = yield* post(`${b}/sessions/twins/control`, { type: "approve", id: "x_2" })
      assert.strictEqual(approved.status, 202)
      const events = yield* readUntil(b, "twins")
      const info = (yield* call(`${b}/sessions/twins`)).body
      yield* Scope.close(second, Exit.void)
      assert.deepStrictEqual([info.status, info.outcome], ["finished", { _tag: "Completed" }])
      assert.deepStrictEqual(toolResults(events).slice(-2), [
        ["x", "Tool call denied: not now"],
        ["x_2", "deployed to production"]
      ])
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
