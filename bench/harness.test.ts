/**
 * The benchmark's workload and its checks: the script every adapter plays,
 * the verification that fails a wrong session loudly, and the bare loop (the
 * one adapter with no dependency outside this repository).
 */
import { assert, describe, it } from "@effect/vitest"
import { adapter as bare } from "./adapters/bare.ts"
import {
  DELTAS_PER_TURN,
  NOOP,
  WAIT,
  batchFinalText,
  batchScript,
  finalText,
  noopResult,
  sessionScript,
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
