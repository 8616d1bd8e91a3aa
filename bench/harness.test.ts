/**
 * The benchmark's workload and its checks: the script every adapter plays,
 * the verification that fails a wrong session loudly, the bare loop (the
 * one adapter with no dependency outside this repository), the in-memory
 * Chat Completions server, and the two rows over it (effect-agent's, whose
 * dependencies are the repository's; pi-agent-core's, when the benchmark's
 * own dependencies are installed).
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { adapter as bare } from "./adapters/bare.ts"
import { adapter, fetchAdapter, partsAdapter } from "./adapters/effect-agent.ts"
import { agentRun, sessionFiles } from "./durable/effect-agent.ts"
import { expected, Scripts, verifyTranscript } from "./durable/workload.ts"
import { lastMessage, MemoryServer, route, SESSION_HEADER } from "./memory-fetch.ts"
import { bodyOf } from "./sse.ts"
import {
  type Adapter,
  DELTAS_PER_TURN,
  NOOP,
  WAIT,
  batchFinalText,
  batchScript,
  finalText,
  noopResult,
  sessionScript,
  turns,
  verifyBatch,
  verifySession
} from "./workload.ts"

describe("bench workload", () => {
  it("plays T tool turns of 20 deltas and one noop call, then the final answer, then refuses", () => {
    const script = sessionScript("test", 2)
    const first = script.next()
    assert.strictEqual(first.deltas.length, DELTAS_PER_TURN)
    assert.strictEqual(first.text, first.deltas.join(""))
    assert.deepStrictEqual(first.calls, [{ id: "call_0", name: NOOP, args: { i: 0 }, json: "{\"i\":0}" }])
    assert.deepStrictEqual(script.next().calls.map((c) => c.args), [{ i: 1 }])
    const last = script.next()
    assert.deepStrictEqual(last.calls, [])
    assert.strictEqual(last.text, finalText(2))
    assert.strictEqual(last.deltas.length, DELTAS_PER_TURN)
    assert.throws(() => script.next(), /model called 4 times, the script has 3 turns/)
  })

  it("checks each request ends with the previous turn's tool result", () => {
    const script = sessionScript("test", 3)
    script.check(undefined, undefined)
    script.next()
    assert.throws(() => script.check(undefined, undefined), /expected the result of call_0/)
    assert.throws(() => script.check("call_0", "ok 7"), /expected the result of call_0 \(ok 0\)/)
    script.check("call_0", noopResult(0))
    script.check("call_0", undefined)
  })

  it("fails a session that ran the tool too few times or ended with other text", () => {
    const good = { events: 3 * DELTAS_PER_TURN, toolRuns: 2, text: finalText(2), modelCalls: 3, keep: null }
    verifySession("x", 2, good)
    assert.throws(() => verifySession("x", 2, { ...good, toolRuns: 1 }), /the tool ran 1 times, expected 2/)
    assert.throws(() => verifySession("x", 2, { ...good, modelCalls: 2 }), /the model was called 2 times, expected 3/)
    assert.throws(() => verifySession("x", 2, { ...good, text: "done" }), /final text "done"/)
    assert.throws(() => verifySession("x", 2, { ...good, events: 5 }), /only 5 events delivered/)
  })

  it("scripts the batch as one turn of all the waits, then the answer", () => {
    const spec = { calls: 5, ms: 1, maxParallel: 2 }
    const script = batchScript("test", spec)
    const ask = script.next()
    assert.deepStrictEqual(ask.calls.map((c) => [c.name, c.id]), [0, 1, 2, 3, 4].map((n) => [WAIT, `call_${n}`]))
    assert.throws(() => script.check("call_3", undefined), /expected the result of call_4 last, got call_3/)
    script.check("call_4", undefined)
    assert.strictEqual(script.next().text, batchFinalText(5))
    assert.throws(() => verifyBatch("x", spec, { text: batchFinalText(5), toolRuns: 4, maxInFlight: 2, modelCalls: 2 }), /ran 4 tools/)
  })
})

describe("bench bare loop", () => {
  it("runs a session through the script and passes verification", async () => {
    let turns = 0
    const outcome = await bare.session(5, () => turns++)
    verifySession(bare.name, 5, outcome)
    assert.strictEqual(turns, 5)
    assert.strictEqual(outcome.text, finalText(5))
    // agent start/end, and per turn: start, 20 deltas, message end, then call, tool start/end and turn end on tool turns.
    assert.strictEqual(outcome.events, 2 + 6 * (1 + DELTAS_PER_TURN + 1) + 5 * 4)
  })

  it("bounds the batch by maxParallel and keeps every result", async () => {
    const spec = { calls: 7, ms: 5, maxParallel: 3 }
    const outcome = await bare.batch(spec)
    verifyBatch(bare.name, spec, outcome)
    assert.strictEqual(outcome.maxInFlight, 3)
  })
})

describe("bench in-memory server", () => {
  const request = (messages: ReadonlyArray<unknown>) =>
    JSON.stringify({ model: "m", messages, stream: true, tools: [{ type: "function", function: { name: "noop" } }] })
  const tool = (id: string, content: unknown, first = true) =>
    first ? { role: "tool", tool_call_id: id, content } : { role: "tool", content, tool_call_id: id }

  it("reads the last message of a string or byte body, whatever its key order or content shape", () => {
    const history = [{ role: "user", content: "go {\"role\":\"x\"} }" }, { role: "assistant", content: "a\\\"}{" }]
    const body = request([...history, tool("call_3", "ok 3")])
    assert.deepStrictEqual(lastMessage(body), { role: "tool", toolCallId: "call_3", text: "ok 3" })
    const parts = [{ type: "text", text: "ok 4" }]
    const bytes = new TextEncoder().encode(request([...history, tool("call_4", parts, false)]))
    assert.deepStrictEqual(lastMessage(bytes.subarray(0)), { role: "tool", toolCallId: "call_4", text: "ok 4" })
    assert.deepStrictEqual(lastMessage(request(history)), { role: "assistant", toolCallId: undefined, text: "a\\\"}{" })
    assert.throws(() => lastMessage("{\"messages\":[]}"), /the request has no message/)
  })

  it("streams the turn's SSE body in one chunk, and answers 400 and keeps the error on a wrong history", async () => {
    const script = sessionScript("test", 2)
    const server = new MemoryServer(script)
    const url = "http://x/v1/chat/completions"
    const first = await server.fetch(url, { body: request([{ role: "user", content: "go" }]) })
    assert.strictEqual(first.status, 200)
    const reader = first.body!.getReader()
    const chunk = await reader.read()
    assert.deepStrictEqual(chunk.value, bodyOf(turns.toolTurn(0)))
    assert.isTrue((await reader.read()).done)
    const wrong = await server.fetch(url, { body: request([tool("call_0", "ok 7")]) })
    assert.strictEqual(wrong.status, 400)
    const message = server.error!.message
    assert.match(message, /expected the result of call_0 \(ok 0\) last in its request, got call_0 \(ok 7\)/)
    assert.throws(() => server.rethrow(), /expected the result of call_0/)
    assert.strictEqual(script.calls, 1)
  })

  it("routes the global fetch by session header while a route is open, and restores it", async () => {
    const original = globalThis.fetch
    const server = new MemoryServer(sessionScript("test", 1))
    const session = route(server)
    assert.notStrictEqual(globalThis.fetch, original)
    const response = await fetch("http://bench.invalid/v1/chat/completions", {
      method: "POST",
      headers: { [SESSION_HEADER]: session.id },
      body: request([{ role: "user", content: "go" }])
    })
    assert.strictEqual(response.status, 200)
    assert.strictEqual(server.script.calls, 1)
    session.close()
    assert.strictEqual(globalThis.fetch, original)
  })
})

describe("bench effect-agent over an in-memory fetch", () => {
  it("runs a session through OpenAiChat on FetchHttpClient and passes verification", async () => {
    let turns = 0
    const outcome = await fetchAdapter.session(5, () => turns++)
    verifySession(fetchAdapter.name, 5, outcome)
    assert.strictEqual(turns, 5)
    assert.strictEqual(outcome.modelCalls, 6)
  })

  it("bounds the batch by maxParallelTools", async () => {
    const spec = { calls: 7, ms: 5, maxParallel: 3 }
    const outcome = await fetchAdapter.batch(spec)
    verifyBatch(fetchAdapter.name, spec, outcome)
    assert.strictEqual(outcome.maxInFlight, 3)
  })
})

describe("bench effect-agent over the provider's decoding", () => {
  it("the SSE row and the parts row each run a session that passes verification, with the same events", async () => {
    const bytes = await adapter.session(4)
    verifySession(adapter.name, 4, bytes)
    const parts = await partsAdapter.session(4)
    verifySession(partsAdapter.name, 4, parts)
    // The parts row hands the loop what the decoder made from the same bodies: the run sees the same events.
    assert.strictEqual(parts.events, bytes.events)
    assert.strictEqual(parts.modelCalls, 5)
  })
})

// pi-agent-core is one of the benchmark's own dependencies (bench/package.json), installed by `npm run bench`:
// without them, its adapter cannot load. The specifier is a variable so the repository's typecheck, which
// covers this file, does not need them either.
const piProvider = "./adapters/pi-provider.ts"
const piInstalled = existsSync(fileURLToPath(new URL("./node_modules/@mariozechner/pi-agent-core", import.meta.url)))
if (!piInstalled) console.log("bench pi-agent-core over pi-ai's provider: skipped, bench/node_modules is not installed")

describe.skipIf(!piInstalled)("bench pi-agent-core over pi-ai's provider on an in-memory fetch", () => {
  it("runs a session through the openai-completions provider, and puts the global fetch back", async () => {
    const { adapter }: { adapter: Adapter } = await import(piProvider)
    const original = globalThis.fetch
    let turns = 0
    const outcome = await adapter.session(5, () => turns++)
    verifySession(adapter.name, 5, outcome)
    assert.strictEqual(turns, 5)
    assert.strictEqual(outcome.modelCalls, 6)
    assert.strictEqual(globalThis.fetch, original)
    const spec = { calls: 7, ms: 5, maxParallel: 3 }
    verifyBatch(adapter.name, spec, await adapter.batch(spec))
  })
})

// The durable rows (bench/durable/, `npm run bench -- --durable`) need a PostgreSQL server and are not run here:
// only their check, and the two rows that need no database, on a tiny workload.
describe("bench durable rows' check", () => {
  it("expects the prompt, each turn's text and call and its result, then the final answer; any other transcript fails", () => {
    const want = expected("s-1", 2)
    assert.deepStrictEqual(want.map((e) => e.role), ["user", "assistant", "tool", "assistant", "tool", "assistant"])
    assert.deepStrictEqual(want[1]!.calls, ["call_0 noop {\"i\":0}"])
    assert.deepStrictEqual(want[4], { role: "tool", text: noopResult(1), calls: [], toolCallId: "call_1" })
    assert.strictEqual(want[5]!.text, finalText(2))
    verifyTranscript("x", "s-1", 2, want)
    assert.throws(() => verifyTranscript("x", "s-1", 2, want.slice(0, 5)), /has 5 messages, expected 6/)
    const swapped = [...want.slice(0, 4), { ...want[4]!, text: noopResult(0) }, want[5]!]
    assert.throws(() => verifyTranscript("x", "s-1", 2, swapped), /session s-1, message 4/)
  })

  it("Agent.run and Session on files run sessions whose transcripts, read back, are the script's", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "bench-durable-"))
    try {
      for (const make of [agentRun, sessionFiles]) {
        const scripts = new Scripts()
        const row = await make({ url: "", dir, scripts })
        scripts.open("a-1", 3)
        scripts.open("a-2", 3)
        await Promise.all([row.session("a-1", 3), row.session("a-2", 3)])
        for (const id of ["a-1", "a-2"]) {
          verifyTranscript(row.name, id, 3, (await row.readBack(id)).transcript)
          scripts.check(id, 3)
        }
        assert.strictEqual(scripts.toolRuns, 6)
        await row.close()
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
