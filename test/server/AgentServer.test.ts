/**
 * The agent server over real HTTP on the loopback: sessions started, streamed,
 * resumed after a dropped connection with `Last-Event-ID`, approved, denied,
 * steered, cancelled and followed up over HTTP; the typed client; and the
 * errors: 400 naming the field, 404, 409, 413, 421, 401.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Latch, Layer, Redacted, Stream, Tracer } from "effect"
import { AgentServer } from "effect-agent/server"
import * as Http from "node:http"
import * as Sessions from "../../src/server/internal/sessions.ts"
import * as Store from "../../src/server/internal/store.ts"
import {
  agentLayer,
  baseUrl,
  call,
  fetchIdempotent,
  gatedAgent,
  post,
  readSse,
  serverLayer,
  type SseMessage,
  tagOf
} from "./support.ts"

const json = { "content-type": "application/json" }

/** Starts a session and returns its id. */
const start = (url: string, task: string, extra: object = {}) =>
  Effect.map(post(`${url}/sessions`, { task, ...extra }), (response) => {
    assert.strictEqual(response.status, 201, JSON.stringify(response.body))
    return response.body.id as string
  })

/** Reads a session's events (after `lastId`) until `stop`, or to the end. */
const events = (
  url: string,
  id: string,
  options: { readonly lastId?: string; readonly stop?: (message: SseMessage) => boolean } = {}
) =>
  Effect.promise(async () => {
    const headers: Record<string, string> = options.lastId === undefined ? {} : { "last-event-id": options.lastId }
    const response = await fetchIdempotent(`${url}/sessions/${id}/events`, { headers })
    assert.strictEqual(response.status, 200)
    assert.strictEqual(response.headers.get("content-type"), "text/event-stream")
    return readSse(response, options.stop)
  })

const eventOf = (message: SseMessage) => JSON.parse(message.data)
const ids = (messages: ReadonlyArray<SseMessage>) => messages.map((message) => Number(message.id))
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i)

/** The text of the last assistant message of a run's result. */
const answerOf = (end: any): string =>
  end.result.messages.filter((message: any) => message.role === "assistant").at(-1).content
    .filter((part: any) => part.type === "text").map((part: any) => part.text).join("")

/** Holds this server's `slow` calls until a test opens it. */
const slowGate = Latch.makeUnsafe()

layer(serverLayer({}, gatedAgent(slowGate)), { excludeTestServices: true })("the agent server", (it) => {
  it.effect("starts a session and streams its events, each with its id, in order, ending with AgentEnd", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const created = yield* post(`${url}/sessions`, { task: "steps 2 5", config: { maxTurns: 10 } })
      assert.strictEqual(created.status, 201)
      assert.strictEqual(created.body.title, "steps 2 5")
      assert.include(["running", "finished"], created.body.status)
      const read = yield* events(url, created.body.id)
      assert.isTrue(read.ended)
      assert.deepStrictEqual(ids(read.messages), range(0, read.messages.length))
      const tags = read.messages.map(tagOf)
      assert.strictEqual(tags[0], "AgentStart")
      assert.strictEqual(tags.at(-1), "AgentEnd")
      assert.strictEqual(tags.filter((tag) => tag === "TurnStart").length, 3)
      const end = eventOf(read.messages.at(-1)!)
      assert.strictEqual(end.outcome._tag, "Completed")
      assert.strictEqual(answerOf(end), "All 2 steps done.")
      // described, and listed
      const info = yield* call(`${url}/sessions/${created.body.id}`)
      assert.strictEqual(info.body.status, "finished")
      assert.deepStrictEqual(info.body.outcome, { _tag: "Completed" })
      assert.strictEqual(info.body.turns, 3)
      assert.strictEqual(info.body.usage.input, 60)
      const list = yield* call(`${url}/sessions`)
      assert.include(list.body.map((session: { id: string }) => session.id), created.body.id)
      // a finished session's stream replays it and ends
      const again = yield* events(url, created.body.id)
      assert.deepStrictEqual(again.messages, read.messages)
    }))

  it.effect("a client that reconnects mid-run with Last-Event-ID gets every later event once", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      yield* slowGate.close
      const id = yield* start(url, "slow 0")
      // the client goes away while the call runs (held until the gate opens)
      const first = yield* events(url, id, { stop: (message) => tagOf(message) === "ToolExecutionStart" })
      assert.isFalse(first.ended)
      const lastId = first.messages.at(-1)!.id!
      const status = yield* call(`${url}/sessions/${id}`)
      assert.strictEqual(status.body.status, "running", "the run goes on while the client is away")
      yield* slowGate.open
      const rest = yield* events(url, id, { lastId })
      assert.isTrue(rest.ended)
      const whole = yield* events(url, id)
      assert.deepStrictEqual([...first.messages, ...rest.messages], whole.messages)
      assert.deepStrictEqual(ids(whole.messages), range(0, whole.messages.length))
      assert.strictEqual(tagOf(rest.messages.at(-1)!), "AgentEnd")
      // a last id past the end is refused, naming the header
      const past = yield* call(`${url}/sessions/${id}/events`, { headers: { "last-event-id": "99999" } })
      assert.strictEqual(past.status, 400)
      assert.deepStrictEqual(past.body.errors[0].path, ["headers", "last-event-id"])
    }))

  it.effect("a call waiting for approval is approved over HTTP", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const id = yield* start(url, "deploy")
      let toolCallId = ""
      const read = yield* Effect.promise(async () => {
        const response = await fetch(`${url}/sessions/${id}/events`)
        return readSse(response, (message) => {
          const event = eventOf(message)
          if (event._tag === "ApprovalRequested") {
            toolCallId = event.toolCallId
            // answered while the same stream stays open
            void (async () => {
              const info: any = await fetch(`${url}/sessions/${id}`).then((r) => r.json())
              assert.strictEqual(info.status, "waiting")
              assert.strictEqual(info.pendingApprovals[0].toolCallId, toolCallId)
              assert.strictEqual(info.pendingApprovals[0].approvalId, event.approvalId)
              assert.strictEqual(info.pendingApprovals[0].toolName, "deploy")
              const approved = await fetch(`${url}/sessions/${id}/control`, {
                method: "POST",
                headers: json,
                body: JSON.stringify({ type: "approve", id: event.approvalId })
              })
              assert.strictEqual(approved.status, 202)
              assert.deepStrictEqual(
                await approved.json(),
                { sessionId: id, type: "approve", status: "applied", toolCallId, approvalId: event.approvalId }
              )
            })()
          }
          return false
        })
      })
      const all = read.messages.map(eventOf)
      const resolved = all.find((event) => event._tag === "ApprovalResolved")
      assert.strictEqual(resolved.approved, true)
      const ended = all.find((event) => event._tag === "ToolExecutionEnd")
      assert.isFalse(ended.result.isError)
      assert.strictEqual(ended.result.content[0].text, "deployed to staging")
      assert.strictEqual(all.at(-1).outcome._tag, "Completed")
    }))

  it.effect("a call is denied over HTTP with a reason the model reads; approving when none waits is a 409", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const id = yield* start(url, "deploy")
      yield* events(url, id, { stop: (message) => tagOf(message) === "ApprovalRequested" })
      const [waiting] = (yield* call(`${url}/sessions/${id}`)).body.pendingApprovals
      const denied = yield* post(`${url}/sessions/${id}/control`, {
        type: "deny",
        id: waiting.approvalId,
        reason: "not on a Friday"
      })
      assert.strictEqual(denied.status, 202)
      assert.strictEqual(denied.body.status, "applied")
      const read = yield* events(url, id)
      const ended = read.messages.map(eventOf).find((event) => event._tag === "ToolExecutionEnd")
      assert.isTrue(ended.result.isError)
      assert.include(ended.result.content[0].text, "not on a Friday")
      const none = yield* post(`${url}/sessions/${id}/control`, { type: "approve", id: waiting.approvalId })
      assert.strictEqual(none.status, 409)
      assert.strictEqual(none.body.type, "urn:effect-agent:problem:control-rejected")
      assert.include(none.body.detail, "no call waits for approval")
    }))

  it.effect("a run is steered over HTTP: the message goes in before the next model call", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      yield* slowGate.close
      const id = yield* start(url, "slow 150")
      yield* events(url, id, { stop: (message) => tagOf(message) === "ToolExecutionStart" })
      const steered = yield* post(`${url}/sessions/${id}/control`, { type: "steer", text: "Use metric units." })
      assert.strictEqual(steered.status, 202)
      assert.strictEqual(steered.body.status, "queued")
      // queued while the call runs, the steer goes in before the next model call: the call may end now
      yield* slowGate.open
      const read = yield* events(url, id)
      const all = read.messages.map(eventOf)
      const delivered = all.find((event) => event._tag === "SteeringDelivered")
      assert.strictEqual(delivered.messages[0].content[0].text, "Use metric units.")
      const end = all.at(-1)
      const roles = end.result.state.messages.map((message: any) => message.role)
      assert.deepStrictEqual(roles, ["user", "assistant", "toolResult", "user", "assistant"])
      assert.strictEqual(end.result.state.messages[3].content[0].text, "Use metric units.")
      assert.strictEqual(answerOf(end), "Slow work done.")
    }))

  it.effect("a run is cancelled over HTTP; a finished session takes a follow-up, and a steer is refused", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const id = yield* start(url, "hang")
      yield* events(url, id, { stop: (message) => tagOf(message) === "MessageUpdate" })
      const cancelled = yield* post(`${url}/sessions/${id}/control`, { type: "cancel", reason: "enough" })
      assert.strictEqual(cancelled.status, 202)
      const read = yield* events(url, id)
      const end = eventOf(read.messages.at(-1)!)
      assert.deepStrictEqual(end.outcome, { _tag: "Cancelled", reason: "enough" })
      const info = yield* call(`${url}/sessions/${id}`)
      assert.strictEqual(info.body.status, "finished")
      const again = yield* post(`${url}/sessions/${id}/control`, { type: "cancel" })
      assert.strictEqual(again.status, 409)
      assert.include(again.body.detail, "not running")

      const done = yield* start(url, "hello")
      const firstRun = yield* events(url, done)
      const steer = yield* post(`${url}/sessions/${done}/control`, { type: "steer", text: "more" })
      assert.strictEqual(steer.status, 409)
      const followUp = yield* post(`${url}/sessions/${done}/control`, { type: "follow_up", text: "And then?" })
      assert.strictEqual(followUp.status, 202)
      assert.strictEqual(followUp.body.status, "restarted")
      const secondRun = yield* events(url, done, { lastId: firstRun.messages.at(-1)!.id! })
      const before = firstRun.messages.length
      assert.deepStrictEqual(ids(secondRun.messages), range(before, before + secondRun.messages.length))
      const last = eventOf(secondRun.messages.at(-1)!)
      assert.strictEqual(last.outcome._tag, "Completed")
      assert.strictEqual(answerOf(last), "Follow-up answered.")
      assert.strictEqual((yield* call(`${url}/sessions/${done}`)).body.status, "finished")
    }))

  it.effect("a steer to a session that failed resumes it with the steer before its next model call", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const id = yield* start(url, "flaky")
      const first = yield* events(url, id)
      assert.strictEqual(eventOf(first.messages.at(-1)!).error?._tag, "ModelError")
      assert.strictEqual((yield* call(`${url}/sessions/${id}`)).body.status, "failed")
      const steered = yield* post(`${url}/sessions/${id}/control`, { type: "steer", text: "use the cache" })
      assert.deepStrictEqual([steered.status, steered.body.status], [202, "restarted"])
      const second = yield* events(url, id, { lastId: first.messages.at(-1)!.id! })
      const end = eventOf(second.messages.at(-1)!)
      assert.strictEqual(end.outcome._tag, "Completed")
      // delivered as steering, before the model call that answers (not as a follow-up after a run)
      const tags = second.messages.map(tagOf)
      assert.isBelow(tags.indexOf("SteeringDelivered"), tags.indexOf("MessageEnd"))
      assert.notInclude(tags, "FollowUpDelivered")
      assert.strictEqual(answerOf(end), "Answered after: use the cache.")
      assert.strictEqual((yield* call(`${url}/sessions/${id}`)).body.status, "finished")
    }))

  it.effect("the typed client: starts a session and streams its decoded events", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const client = yield* AgentServer.client(url)
      const session = yield* client.sessions.create({ payload: { task: "steps 1 0", id: "typed-1" } })
      assert.strictEqual(session.id, "typed-1")
      const stream = yield* client.sessions.events({ params: { id: "typed-1" }, headers: {} })
      const received = yield* Stream.runCollect(stream)
      assert.strictEqual(received[0]!.id, "0")
      const end = received.at(-1)!.data
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag === "AgentEnd") assert.strictEqual(end.outcome?._tag, "Completed")
      const exists = yield* Effect.flip(client.sessions.create({ payload: { task: "again", id: "typed-1" } }))
      assert.strictEqual(exists._tag, "SessionExists")
      const missing = yield* Effect.flip(client.sessions.get({ params: { id: "nope" } }))
      assert.strictEqual(missing._tag, "SessionNotFound")
    }).pipe(Effect.provide(NodeHttpClient.layerUndici)))

  it.effect("bad input is a 400 problem naming the field; an unknown session a 404; a taken id a 409", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const problem = (response: { status: number; body: any }, status: number, path?: ReadonlyArray<string>) => {
        assert.strictEqual(response.status, status, JSON.stringify(response.body))
        if (path !== undefined) assert.deepStrictEqual(response.body.errors[0].path, path)
      }
      problem(yield* post(`${url}/sessions`, {}), 400, ["payload", "task"])
      problem(yield* post(`${url}/sessions`, { task: "" }), 400, ["payload", "task"])
      problem(yield* post(`${url}/sessions`, { task: "x", id: "../etc" }), 400, ["payload", "id"])
      const turns = yield* post(`${url}/sessions`, { task: "x", config: { maxTurns: 0 } })
      problem(turns, 400, ["payload", "config", "maxTurns"])
      assert.include(turns.body.errors[0].message, "from 1 to 200")
      problem(yield* post(`${url}/sessions`, { task: "x", config: { budgets: { costUsd: -1 } } }), 400, [
        "payload",
        "config",
        "budgets",
        "costUsd"
      ])
      const knob = yield* post(`${url}/sessions`, { task: "x", config: { graceTurns: 1 } })
      problem(knob, 400, ["payload", "config", "graceTurns"])
      assert.include(knob.body.errors[0].message, "internal setting")
      const notJson = yield* call(`${url}/sessions`, { method: "POST", headers: json, body: "{task" })
      assert.strictEqual(notJson.status, 400)
      const id = yield* start(url, "hello", { id: "taken", config: { maxTurns: 5000 } })
      problem(yield* post(`${url}/sessions/${id}/control`, { type: "pause" }), 400)
      problem(yield* post(`${url}/sessions/${id}/control`, { type: "steer" }), 400, ["payload", "text"])
      problem(yield* call(`${url}/sessions/${id}/events`, { headers: { "last-event-id": "x" } }), 400, [
        "headers",
        "last-event-id"
      ])
      const taken = yield* post(`${url}/sessions`, { task: "again", id: "taken" })
      problem(taken, 409)
      assert.strictEqual(taken.body.sessionId, "taken")
      for (const path of ["/sessions/nope", "/sessions/nope/events"]) {
        const missing = yield* call(`${url}${path}`)
        problem(missing, 404)
        assert.strictEqual(missing.body.sessionId, "nope")
        assert.strictEqual(missing.headers.get("content-type"), "application/problem+json")
      }
      problem(yield* post(`${url}/sessions/nope/control`, { type: "cancel" }), 404)
    }))

  it.effect("a body over the limit is a 413, with or without a content-length", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      const task = "x".repeat(AgentServer.defaults.maxBodyBytes)
      const declared = yield* post(`${url}/sessions`, { task })
      assert.strictEqual(declared.status, 413)
      assert.strictEqual(declared.body.limit, AgentServer.defaults.maxBodyBytes)
      // chunked: no content-length to check first; the body is cut off at the limit while it is read
      const chunked = yield* Effect.promise(() =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const request = Http.request(`${url}/sessions`, { method: "POST", headers: json }, (response) => {
            let body = ""
            response.on("data", (chunk) => (body += chunk))
            response.on("end", () => resolve({ status: response.statusCode!, body }))
          })
          request.on("error", reject)
          for (let i = 0; i < 20; i++) request.write(JSON.stringify({ task }).slice(i * 60_000, (i + 1) * 60_000))
          request.end()
        })
      )
      assert.strictEqual(chunked.status, 413)
    }))

  it.effect("without a token, only loopback host names are answered (no DNS rebinding)", () =>
    Effect.gen(function*() {
      const url = new URL(yield* baseUrl)
      const withHost = (host: string) =>
        Effect.promise(() =>
          new Promise<number>((resolve, reject) => {
            Http.get({ host: url.hostname, port: url.port, path: "/sessions", headers: { host } }, (response) => {
              response.resume()
              resolve(response.statusCode!)
            }).on("error", reject)
          })
        )
      assert.strictEqual(yield* withHost(`evil.example:${url.port}`), 421)
      assert.strictEqual(yield* withHost(`localhost:${url.port}`), 200)
      assert.strictEqual(yield* withHost(`127.0.0.1:${url.port}`), 200)
    }))
})

const token = "test-token-123"

layer(serverLayer({ token: Redacted.make(token) }), { excludeTestServices: true })("a server with a token", (it) => {
  it.effect("every route but the page needs the token: 401 without it or with another; Bearer or Basic with it", () =>
    Effect.gen(function*() {
      const url = yield* baseUrl
      for (const path of ["/sessions", "/sessions/x", "/sessions/x/events"]) {
        const none = yield* Effect.promise(() => fetch(`${url}${path}`))
        assert.strictEqual(none.status, 401, path)
        assert.match(none.headers.get("www-authenticate") ?? "", /^Basic realm="effect-agent"/)
      }
      // the inspector's page holds no data: served without the token (it reads the token from its URL's fragment)
      const open = yield* Effect.promise(() => fetch(`${url}/`))
      assert.strictEqual(open.status, 200)
      const unauthorized = yield* post(`${url}/sessions`, { task: "hello" })
      assert.strictEqual(unauthorized.status, 401)
      assert.strictEqual(unauthorized.body.type, "urn:effect-agent:problem:unauthorized")
      const wrong = yield* post(`${url}/sessions`, { task: "hello" }, { authorization: "Bearer nope" })
      assert.strictEqual(wrong.status, 401)
      const bearer = yield* post(`${url}/sessions`, { task: "hello" }, { authorization: `Bearer ${token}` })
      assert.strictEqual(bearer.status, 201)
      const basic = `Basic ${Buffer.from(`anyone:${token}`).toString("base64")}`
      const page = yield* Effect.promise(() => fetch(`${url}/`, { headers: { authorization: basic } }))
      assert.strictEqual(page.status, 200)
      assert.match(page.headers.get("content-type") ?? "", /^text\/html/)
      // a bad body is not even read without the token: 401, not 400
      const bad = yield* post(`${url}/sessions`, {})
      assert.strictEqual(bad.status, 401)
      // the typed client sends it
      const client = yield* AgentServer.client(url, { token: Redacted.make(token) })
      const listed = yield* client.sessions.list()
      assert.include(listed.map((session) => session.id), bearer.body.id)
      const other = yield* AgentServer.client(url, { token: Redacted.make("other") })
      const refused = yield* Effect.flip(other.sessions.list())
      assert.strictEqual(refused._tag, "Unauthorized")
    }).pipe(Effect.provide(NodeHttpClient.layerUndici)))

  it.effect("with a token, any host name is answered", () =>
    Effect.gen(function*() {
      const url = new URL(yield* baseUrl)
      const status = yield* Effect.promise(() =>
        new Promise<number>((resolve, reject) => {
          Http.get({
            host: url.hostname,
            port: url.port,
            path: "/sessions",
            headers: { host: "agents.example.com", authorization: `Bearer ${token}` }
          }, (response) => {
            response.resume()
            resolve(response.statusCode!)
          }).on("error", reject)
        })
      )
      assert.strictEqual(status, 200)
    }))
})

describe("slow clients", () => {
  layer(serverLayer({ sseBuffer: 8 }), { excludeTestServices: true })("a server with a small SSE buffer", (it) => {
    it.effect("a client that stops reading is dropped, never waited for, and catches up with Last-Event-ID", () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        // 6 MB of deltas (and the reply again at the turn's end): more than the kernel (here up to 4 MB for
        // the sender) and Node buffer for a client that reads nothing, with hundreds of events to spare past the
        // buffer of 8 (with 2 MB, once in a loaded run, all but the last few fit and the client was never dropped).
        const id = yield* start(url, "big 600 10000 200")
        // A client that reads nothing while the run streams.
        const response = yield* Effect.promise(() =>
          new Promise<Http.IncomingMessage>((resolve, reject) => {
            Http.get(`${url}/sessions/${id}/events`, resolve).on("error", reject)
          })
        )
        response.pause()
        // The run finishes all the same.
        for (let i = 0; i < 1200; i++) {
          const info = yield* call(`${url}/sessions/${id}`)
          if (info.body.status === "finished") break
          yield* Effect.sleep("50 millis")
        }
        assert.strictEqual((yield* call(`${url}/sessions/${id}`)).body.status, "finished")
        const text = yield* Effect.promise(() =>
          new Promise<string>((resolve) => {
            let body = ""
            response.setEncoding("utf8")
            response.on("data", (chunk) => (body += chunk))
            response.on("end", () => resolve(body))
            response.resume()
          })
        )
        assert.include(text, ": dropped: this client fell too far behind; reconnect with Last-Event-ID")
        const got = Array.from(text.matchAll(/^id: (\d+)$/gm), (match) => Number(match[1]))
        assert.deepStrictEqual(got, range(0, got.length))
        const rest = yield* events(url, id, { lastId: String(got.at(-1)) })
        const all = [...got, ...ids(rest.messages)]
        assert.deepStrictEqual(all, range(0, all.length))
        assert.strictEqual(tagOf(rest.messages.at(-1)!), "AgentEnd")
        assert.isAbove(rest.messages.length, 8)
      }))
  })
})

layer(serverLayer({ config: { maxTurns: 4, budgets: { costUsd: 1 } } }), { excludeTestServices: true })(
  "a server with a default config",
  (it) => {
    it.effect("a request's settings go over the server's, checked, clamped and never past the server's limits", () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        const limitsOf = (id: string) =>
          Effect.map(events(url, id), (read) => {
            const snapshot = read.messages.map(eventOf).find((event) => event._tag === "BudgetSnapshot")
            return snapshot.figures.limits
          })
        const plain = yield* start(url, "hello")
        assert.include(yield* limitsOf(plain), { turns: 4, costUsd: 1, tokens: null })
        const given = yield* start(url, "hello", { config: { budgets: { tokens: 5000 } } })
        assert.include(yield* limitsOf(given), { turns: 4, costUsd: 1, tokens: 5000 })
        // The server's limits are ceilings: a request lowers them, never raises them.
        const lowered = yield* start(url, "hello", { config: { maxTurns: 2, budgets: { costUsd: 0.5 } } })
        assert.include(yield* limitsOf(lowered), { turns: 2, costUsd: 0.5 })
        const raised = yield* start(url, "hello", { config: { maxTurns: 5000, budgets: { costUsd: 2 } } })
        assert.include(yield* limitsOf(raised), { turns: 4, costUsd: 1 })
      }))

    it.effect("a request's cap lowered to the server's takes the lowered cap's grace window: asked to wrap up after turn 3 of 4", () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        // a cap of 200 (5000 clamped) has a window of 3; the server's cap of 4 has 1
        const raised = yield* start(url, "steps 6 0", { config: { maxTurns: 5000 } })
        const read = yield* events(url, raised)
        const wrapUps = read.messages.map(eventOf).filter((event) => event._tag === "WrapUpRequested")
        assert.deepStrictEqual(wrapUps.map((event) => [event.source, event.turn]), [["turns", 3]])
      }))
  }
)

/** Opens a session's events stream: its status, and a way to close it (the client goes). */
const follow = (url: string, id: string) =>
  Effect.promise(async () => {
    const controller = new AbortController()
    const response = await fetch(`${url}/sessions/${id}/events`, { signal: controller.signal })
    const body: any = response.status === 200 ? undefined : await response.json()
    return { status: response.status, body, close: () => controller.abort() }
  })

/** Retries `attempt` until `done` says so (bounded: 200 tries, 20 ms apart): the last result. */
const until = <A>(attempt: Effect.Effect<A>, done: (a: A) => boolean) =>
  Effect.gen(function*() {
    for (let i = 0;; i++) {
      const result = yield* attempt
      if (done(result) || i >= 200) return result
      yield* Effect.sleep("20 millis")
    }
  })

describe("bounds", () => {
  layer(serverLayer({ maxStreams: 5, maxStreamsPerSession: 3 }), { excludeTestServices: true })(
    "a server that takes 5 events streams, 3 to a session",
    (it) => {
      it.effect(
        "SSE flood attack: a stream past the session's bound or the server's is refused with a 429; a client that " +
          "goes frees its place",
        () =>
          Effect.gen(function*() {
            const url = yield* baseUrl
            // Sessions whose runs never end: their streams stay open.
            const a = yield* start(url, "hang")
            const b = yield* start(url, "hang")
            const toA = yield* Effect.forEach(Array.from({ length: 4 }), () => follow(url, a))
            const toB = yield* Effect.forEach(Array.from({ length: 3 }), () => follow(url, b))
            assert.deepStrictEqual(
              {
                a: toA.map((stream) => stream.status),
                b: toB.map((stream) => stream.status),
                refused: [toA[3]!.body.type, toA[3]!.body.limit, toB[2]!.body.type, toB[2]!.body.limit]
              },
              {
                a: [200, 200, 200, 429],
                b: [200, 200, 429],
                refused: [
                  "urn:effect-agent:problem:too-many-streams",
                  3,
                  "urn:effect-agent:problem:too-many-streams",
                  5
                ]
              }
            )
            // A client of `a` goes: `b` may have one more.
            toA[0]!.close()
            const again = yield* until(follow(url, b), (stream) => stream.status === 200)
            assert.strictEqual(again.status, 200)
            for (const stream of [...toA, ...toB, again]) stream.close()
          })
      )
    }
  )

  layer(serverLayer({ maxRunning: 2 }), { excludeTestServices: true })("a server that runs 2 sessions at once", (it) => {
    it.effect(
      "session flood attack: past maxRunning, POST /sessions and a follow_up that would start a run are refused " +
        "with a 429; a message to a running session is queued; a run that ends frees its place",
      () =>
        Effect.gen(function*() {
          const url = yield* baseUrl
          const done = yield* start(url, "hello")
          yield* events(url, done)
          const first = yield* start(url, "hang")
          yield* start(url, "hang")
          const third = yield* post(`${url}/sessions`, { task: "hang" })
          const followUp = yield* post(`${url}/sessions/${done}/control`, { type: "follow_up", text: "more" })
          const steer = yield* post(`${url}/sessions/${first}/control`, { type: "steer", text: "faster" })
          const listed = (yield* call(`${url}/sessions`)).body.map((session: any) => session.id)
          assert.deepStrictEqual(
            {
              third: [third.status, third.body.type, third.body.limit],
              followUp: [followUp.status, followUp.body.type],
              steer: [steer.status, steer.body.status],
              listed: listed.length
            },
            {
              third: [429, "urn:effect-agent:problem:too-many-runs", 2],
              followUp: [429, "urn:effect-agent:problem:too-many-runs"],
              steer: [202, "queued"],
              listed: 3
            }
          )
          // One run is cancelled: once it has ended, a session may start again.
          yield* post(`${url}/sessions/${first}/control`, { type: "cancel" })
          yield* events(url, first)
          const later = yield* until(post(`${url}/sessions`, { task: "hello" }), (response) => response.status !== 429)
          assert.strictEqual(later.status, 201)
        })
    )
  })
})

describe("sessions", () => {
  it.live("two requests for one id at once start one session; the other is told it exists", () =>
    Effect.gen(function*() {
      // a store whose lookups take a while, as a directory's do: the requests overlap there
      const memory = Store.memory()
      const slow: Store.Store = {
        ...memory,
        checkpoints: {
          ...memory.checkpoints,
          load: (id) =>
            Effect.exit(memory.checkpoints.load(id)).pipe(
              Effect.tap(() => Effect.sleep("20 millis")),
              Effect.flatMap((exit) => exit)
            )
        }
      }
      const sessions = yield* Sessions.make<never>({
        store: slow,
        buffer: 16,
        resume: false,
        maxRunning: 32,
        maxStreams: 256,
        maxStreamsPerSession: 16
      })
      const results = yield* Effect.all(
        Array.from({ length: 3 }, () => Effect.result(sessions.create({ task: "steps 1 0", id: "race" }))),
        { concurrency: "unbounded" }
      )
      const told = results.map((result) => result._tag === "Success" ? "created" : result.failure._tag)
      assert.deepStrictEqual(told.sort(), [
        "SessionExists",
        "SessionExists",
        "created"
      ])
      const stream = yield* sessions.events("race", -1, 1000)
      const lines = yield* Stream.runCollect(stream)
      assert.strictEqual(JSON.parse((lines.at(-1) as { json: string }).json)._tag, "AgentEnd")
    }).pipe(Effect.scoped, Effect.provide(agentLayer)))
})

describe("the agent server's name", () => {
  it.live("names the agent in its runs' spans (invoke_agent {name}) and in the sessions' descriptions", () =>
    Effect.gen(function*() {
      const spans: Array<Tracer.NativeSpan> = []
      const tracer = Tracer.make({
        span: (options) => {
          const span = new Tracer.NativeSpan(options)
          spans.push(span)
          return span
        }
      })
      const server = serverLayer({ name: "ops" }).pipe(Layer.provide(Layer.succeed(Tracer.Tracer, tracer)))
      const url = yield* Effect.provideContext(baseUrl, yield* Layer.buildWithScope(server, yield* Effect.scope))
      const id = yield* start(url, "steps 1 0")
      const read = yield* events(url, id)
      assert.strictEqual(eventOf(read.messages.at(-1)!).outcome._tag, "Completed")
      const runs = spans.filter((span) => span.name.startsWith("invoke_agent"))
      assert.deepStrictEqual(runs.map((span) => span.name), ["invoke_agent ops"])
      assert.strictEqual(runs[0]!.attributes.get("gen_ai.agent.name"), "ops")
      assert.isTrue(spans.some((span) => span.name.startsWith("chat")))
      const info = yield* call(`${url}/sessions/${id}`)
      assert.strictEqual(info.body.agent, "ops")
      const listed = yield* call(`${url}/sessions`)
      assert.deepStrictEqual(listed.body.map((session: any) => session.agent), ["ops"])
      // a server without a name names none
      const unnamed = yield* Effect.provideContext(baseUrl, yield* Layer.buildWithScope(serverLayer(), yield* Effect.scope))
      const other = yield* start(unnamed, "steps 1 0")
      assert.notProperty((yield* call(`${unnamed}/sessions/${other}`)).body, "agent")
    }).pipe(Effect.scoped))
})
