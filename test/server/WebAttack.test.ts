/**
 * The attack of issue 29: a web page on another origin drives an agent server
 * on the loopback into running commands. In headless Chromium, a page served
 * from another 127.0.0.1 origin sends the requests any page may send without
 * the server's consent (a `no-cors` fetch whose body is a typeless `Blob`, a
 * form posted as `text/plain`) to start a session and to approve the call a
 * session waits on. Against a server without a token (asked for by name) and
 * a server with the default (a token it makes): nothing changes state.
 *
 * Without a browser these tests are skipped, and say so.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { AgentServer } from "effect-agent/server"
import { createServer } from "node:http"
import { captureLogs } from "../support.ts"
import { attackUrl, serveAttackPage } from "./attackPage.ts"
import { browser, closeBrowser, executablePath, missing, openPage } from "./chromium.ts"
import { agentLayer, baseUrl, readSse, serverLayer, tagOf } from "./support.ts"

if (missing !== undefined) console.warn(`SKIPPING the web page attack's browser tests: ${missing}`)
afterAll(closeBrowser)

const json = { "content-type": "application/json" }

/**
 * A session of the developer's own, waiting for its deploy to be approved;
 * the page opens; once it has had an answer to every attempt, the sessions
 * are listed: only the developer's, still waiting.
 */
const attack = (url: string, headers: Record<string, string>) =>
  Effect.gen(function*() {
    const created = yield* Effect.promise(() =>
      fetch(`${url}/sessions`, {
        method: "POST",
        headers: { ...json, ...headers },
        body: JSON.stringify({ task: "deploy", id: "mine" })
      })
    )
    assert.strictEqual(created.status, 201)
    yield* Effect.promise(async () =>
      readSse(
        await fetch(`${url}/sessions/mine/events`, { headers }),
        (message) => tagOf(message) === "ApprovalRequested"
      )
    )
    const attacker = yield* Effect.acquireRelease(Effect.promise(serveAttackPage), (page) => Effect.promise(page.close))
    const { page } = yield* openPage(yield* browser, attackUrl(attacker.origin, url, "mine"))
    yield* Effect.promise(() =>
      page.waitForFunction("document.title.startsWith('done')", null, { timeout: 20_000 })
    )
    // every attempt reached the server and was answered
    const title = yield* Effect.promise(() => page.title())
    assert.strictEqual(title.split("; ").length, 4, title)
    const sessions = yield* Effect.promise(() =>
      fetch(`${url}/sessions`, { headers }).then((response) => response.json() as Promise<Array<any>>)
    )
    assert.deepStrictEqual(
      sessions.map((session) => [session.id, session.status, session.pendingApprovals.length]),
      [["mine", "waiting", 1]]
    )
  })

describe.skipIf(executablePath === undefined)("a web page on another origin, in headless Chromium", () => {
  it.live("cannot start a session or approve a call with typeless-Blob or text/plain form POSTs (token: \"none\")", () =>
    Effect.gen(function*() {
      const context = yield* Layer.buildWithScope(serverLayer({ token: "none" }), yield* Effect.scope)
      yield* attack(yield* Effect.provideContext(baseUrl, context), {})
    }).pipe(Effect.scoped))

  it.live("cannot start a session or approve a call on a server with the default access (a token it made)", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      const server = AgentServer.layer({}).pipe(
        Layer.provide(agentLayer),
        Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" })),
        Layer.provide(logs.layer)
      )
      const context = yield* Layer.buildWithScope(server, yield* Effect.scope)
      const url = yield* Effect.provideContext(baseUrl, context)
      const told = logs.lines.filter((line) => line.includes("#token="))
      assert.strictEqual(told.length, 1, logs.lines.join("\n"))
      const token = decodeURIComponent(told[0]!.split(`${url}/#token=`)[1]!)
      assert.strictEqual(AgentServer.inspectorUrl(url, Redacted.make(token)), `${url}/#token=${token}`)
      yield* attack(url, { authorization: `Bearer ${token}` })
    }).pipe(Effect.scoped))
})
