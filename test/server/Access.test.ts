/**
 * Who may use the agent server, over real HTTP on the loopback: a token by
 * default (made and logged once, with the inspector's URL that carries it),
 * the tokenless mode only by name (and loudly), the `Origin` check (the
 * server's own origin and the listed ones, with CORS for those), JSON bodies
 * only (`415` otherwise), and no state change on `GET`.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { HttpRouter } from "effect/http"
import { AgentServer } from "effect-agent/server"
import * as Http from "node:http"
import { createServer } from "node:http"
import { captureLogs } from "../support.ts"
import { agentLayer, baseUrl, readSse, serverLayer, tagOf } from "./support.ts"

/** A request as a browser or a program may send it, with exactly these headers: its status, headers and body. */
const request = (
  url: string,
  options: { readonly method?: string; readonly headers?: Record<string, string>; readonly body?: string } = {}
) =>
  Effect.promise(() =>
    new Promise<{ status: number; headers: Http.IncomingHttpHeaders; body: any }>((resolve, reject) => {
      const outgoing = Http.request(url, { method: options.method ?? "GET", headers: options.headers ?? {} }, (response) => {
        let text = ""
        response.on("data", (chunk) => (text += chunk))
        response.on("end", () => {
          let body: unknown = text
          try {
            body = text === "" ? undefined : JSON.parse(text)
          } catch {
            // not JSON
          }
          resolve({ status: response.statusCode!, headers: response.headers, body })
        })
      })
      outgoing.on("error", reject)
      outgoing.end(options.body)
    })
  )

const sessionIds = (url: string, headers: Record<string, string> = {}) =>
  Effect.map(request(`${url}/sessions`, { headers }), (response) => {
    assert.strictEqual(response.status, 200)
    return (response.body as Array<{ id: string }>).map((session) => session.id).sort()
  })

/** Waits (on its events) until the session's call asks for approval. */
const untilWaiting = (url: string, id: string, headers: Record<string, string> = {}) =>
  Effect.promise(async () =>
    readSse(await fetch(`${url}/sessions/${id}/events`, { headers }), (message) => tagOf(message) === "ApprovalRequested")
  )

describe("JSON bodies only", () => {
  layer(serverLayer(), { excludeTestServices: true })("a server", (it) => {
    it.effect("a POST whose body is not declared JSON (a typeless Blob, text/plain, a form) is a 415 and changes nothing", () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        const body = JSON.stringify({ task: "deploy", id: "smuggled" })
        for (
          const contentType of [
            undefined,
            "",
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "application/problem+json"
          ]
        ) {
          const response = yield* request(`${url}/sessions`, {
            method: "POST",
            headers: contentType === undefined ? {} : { "content-type": contentType },
            body
          })
          assert.strictEqual(response.status, 415, String(contentType))
          assert.strictEqual(response.body.type, "urn:effect-agent:problem:unsupported-media-type")
          assert.strictEqual(response.body.contentType, contentType ?? "")
          assert.include(response.body.detail, "Content-Type: application/json")
        }
        assert.deepStrictEqual(yield* sessionIds(url), [])

        // JSON, with a charset or in capitals, is taken
        for (const [id, contentType] of [["a", "application/json; charset=utf-8"], ["b", "Application/JSON"]]) {
          const created = yield* request(`${url}/sessions`, {
            method: "POST",
            headers: { "content-type": contentType! },
            body: JSON.stringify({ task: "deploy", id })
          })
          assert.strictEqual(created.status, 201, contentType)
        }

        // a control command as text/plain (what a form sends) neither approves the waiting call nor anything else
        yield* untilWaiting(url, "a")
        const approve = yield* request(`${url}/sessions/a/control`, {
          method: "POST",
          headers: { "content-type": "text/plain" },
          body: JSON.stringify({ type: "approve" })
        })
        assert.strictEqual(approve.status, 415)
        const a = yield* request(`${url}/sessions/a`)
        assert.deepStrictEqual([a.body.status, a.body.pendingApprovals.length], ["waiting", 1])
      }))

    it.effect("a GET changes no state: the control route does not answer it", () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        const created = yield* request(`${url}/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ task: "deploy", id: "got" })
        })
        assert.strictEqual(created.status, 201)
        yield* untilWaiting(url, "got")
        const got = yield* request(`${url}/sessions/got/control?type=approve`)
        assert.strictEqual(got.status, 404)
        const info = yield* request(`${url}/sessions/got`)
        assert.deepStrictEqual([info.body.status, info.body.pendingApprovals.length], ["waiting", 1])
      }))
  })
})

const token = "origin-test-token"
const bearer = { authorization: `Bearer ${token}` }
const listed = "http://app.example:3000"

layer(serverLayer({ token: Redacted.make(token), allowedOrigins: [`${listed}/`] }), { excludeTestServices: true })(
  "the Origin check",
  (it) => {
    it.effect("a request from a page of another origin is a 403, even with the token; own and listed origins pass", () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        const port = new URL(url).port
        const create = (id: string, origin: string | undefined) =>
          request(`${url}/sessions`, {
            method: "POST",
            headers: {
              ...bearer,
              "content-type": "application/json",
              ...(origin === undefined ? {} : { origin })
            },
            body: JSON.stringify({ task: "hello", id })
          })
        for (
          const origin of [
            "http://evil.example",
            "null",
            `http://127.0.0.1:${Number(port) + 1}`,
            `http://localhost:${port}`,
            `https://evil.example:${port}`.replace("evil.example", "127.0.0.2"),
            "http://app.example:3001"
          ]
        ) {
          const refused = yield* create("refused", origin)
          assert.strictEqual(refused.status, 403, origin)
          assert.strictEqual(refused.body.type, "urn:effect-agent:problem:forbidden-origin")
          assert.strictEqual(refused.body.origin, origin)
          assert.isUndefined(refused.headers["access-control-allow-origin"])
          // reading is refused too
          assert.strictEqual((yield* request(`${url}/sessions`, { headers: { ...bearer, origin } })).status, 403)
        }
        assert.deepStrictEqual(yield* sessionIds(url, bearer), [])

        // the server's own origin (its page), a listed one (with CORS), and a program (no Origin)
        assert.strictEqual((yield* create("own", url)).status, 201)
        const fromListed = yield* create("listed", listed)
        assert.strictEqual(fromListed.status, 201)
        assert.strictEqual(fromListed.headers["access-control-allow-origin"], listed)
        assert.strictEqual((yield* create("program", undefined)).status, 201)
        assert.deepStrictEqual(yield* sessionIds(url, bearer), ["listed", "own", "program"])

        // a listed origin's preflight is answered; another's is refused
        const preflight = (origin: string) =>
          request(`${url}/sessions`, {
            method: "OPTIONS",
            headers: {
              origin,
              "access-control-request-method": "POST",
              "access-control-request-headers": "authorization, content-type"
            }
          })
        const allowed = yield* preflight(listed)
        assert.strictEqual(allowed.status, 204)
        assert.strictEqual(allowed.headers["access-control-allow-origin"], listed)
        assert.include(String(allowed.headers["access-control-allow-headers"]), "authorization")
        assert.include(String(allowed.headers["access-control-allow-methods"]), "POST")
        const other = yield* preflight("http://evil.example")
        assert.strictEqual(other.status, 403)
        assert.isUndefined(other.headers["access-control-allow-origin"])

        // the listed origin still needs the token
        const anonymous = yield* request(`${url}/sessions`, { headers: { origin: listed } })
        assert.strictEqual(anonymous.status, 401)
      }))
  }
)

describe("the token", () => {
  it.live("a server given no token makes one, logs it once with the inspector's URL, and requires it (401)", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      const server = AgentServer.layer({}).pipe(
        Layer.provide(agentLayer),
        Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" })),
        Layer.provide(logs.layer)
      )
      const url = yield* Effect.provideContext(baseUrl, yield* Layer.buildWithScope(server, yield* Effect.scope))
      const told = logs.lines.filter((line) => line.includes("token"))
      assert.strictEqual(told.length, 1, logs.lines.join("\n"))
      assert.match(told[0]!, /^Info: /)
      const made = /#token=([A-Za-z0-9_-]+)$/.exec(told[0]!)?.[1]
      assert.isDefined(made)
      assert.include(told[0]!, `${url}/#token=${made}`)
      assert.isAtLeast(made!.length, 43)
      // required: without it, with another, and with it
      assert.strictEqual((yield* request(`${url}/sessions`)).status, 401)
      assert.strictEqual((yield* request(`${url}/sessions`, { headers: { authorization: "Bearer x" } })).status, 401)
      assert.strictEqual((yield* request(`${url}/sessions`, { headers: { authorization: `Bearer ${made}` } })).status, 200)
      // the page itself is served without it (it reads it from the fragment)
      assert.strictEqual((yield* request(`${url}/`)).status, 200)
      // and with the token, any Host name is answered (the check of a tokenless server is not needed)
      const elsewhere = yield* request(`${url}/sessions`, {
        headers: { authorization: `Bearer ${made}`, host: "agents.example.com" }
      })
      assert.strictEqual(elsewhere.status, 200)
    }).pipe(Effect.scoped))

  it.live("another server given no token makes another", () =>
    Effect.gen(function*() {
      const tokens: Array<string> = []
      for (let i = 0; i < 2; i++) {
        const logs = captureLogs()
        const server = AgentServer.layer({}).pipe(
          Layer.provide(agentLayer),
          Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" })),
          Layer.provide(logs.layer)
        )
        yield* Effect.scoped(Layer.build(server))
        tokens.push(/#token=([A-Za-z0-9_-]+)/.exec(logs.lines.join("\n"))![1]!)
      }
      assert.notStrictEqual(tokens[0], tokens[1])
    }))

  it.live("routes given no token log it with the page's path (they do not know where they are served)", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      const server = HttpRouter.serve(AgentServer.routes({}), { disableListenLog: true, disableLogger: true }).pipe(
        Layer.provide(agentLayer),
        Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" })),
        Layer.provide(logs.layer)
      )
      const url = yield* Effect.provideContext(baseUrl, yield* Layer.buildWithScope(server, yield* Effect.scope))
      const told = logs.lines.filter((line) => line.includes("token"))
      assert.strictEqual(told.length, 1, logs.lines.join("\n"))
      const made = /Bearer ([A-Za-z0-9_-]+) /.exec(told[0]!)?.[1]
      assert.include(told[0]!, `/#token=${made}`)
      assert.strictEqual((yield* request(`${url}/sessions`)).status, 401)
      assert.strictEqual((yield* request(`${url}/sessions`, { headers: { authorization: `Bearer ${made}` } })).status, 200)
    }).pipe(Effect.scoped))

  it.live("token: \"none\" serves without one, only when asked by name, and says so loudly; loopback Host names only", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      const server = AgentServer.layer({ token: "none" }).pipe(
        Layer.provide(agentLayer),
        Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" })),
        Layer.provide(logs.layer)
      )
      const url = yield* Effect.provideContext(baseUrl, yield* Layer.buildWithScope(server, yield* Effect.scope))
      assert.deepStrictEqual(logs.lines.filter((line) => line.includes("token")).map((line) => line.split(":")[0]), [
        "Warn"
      ])
      assert.include(logs.lines.join("\n"), "WITHOUT A TOKEN")
      assert.strictEqual((yield* request(`${url}/sessions`)).status, 200)
      const port = new URL(url).port
      const rebound = yield* request(`${url}/sessions`, { headers: { host: `evil.example:${port}` } })
      assert.strictEqual(rebound.status, 421)
    }).pipe(Effect.scoped))
})
