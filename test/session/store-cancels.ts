/**
 * What a durable store promises of cancels, the same on every store (the
 * memory store, PostgreSQL): kept only while the session may have a run in
 * flight, one at most, bounded apart from the messages, and atomic with the
 * record of an idle wait.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { Message } from "effect-agent"
import type { DurableSession } from "effect-agent/session"

/** Checks `store`'s cancels on sessions whose ids start with `prefix`. */
export const storeCancels = (store: DurableSession.Store["Service"], prefix: string) =>
  Effect.gen(function*() {
    const id = `${prefix}-c1`
    // a session the store does not know has no run: nothing is kept for whoever starts it
    assert.isFalse(yield* store.appendCancel(id, "too early"))
    yield* store.register(id, 1)
    // a cancel is what one sends to a run flooded with messages: a full inbox does not keep it out
    for (let i = 0; i < 100; i++) yield* store.appendInbox(id, "steering", Message.user(`m${i}`))
    assert.isTrue(yield* store.appendCancel(id, "x".repeat(5_000)))
    // one at most: a second while it is held keeps nothing (the first reason stands)
    assert.isTrue(yield* store.appendCancel(id, "second"))
    const held = yield* store.readInbox(id, "cancel", 0)
    assert.strictEqual(held.length, 1)
    // its reason is cut
    assert.strictEqual(Message.textOf(held[0]!.message), `${"x".repeat(4_095)}…`)
    // the messages' own bound is as it was: the cancel does not count in it
    const full = yield* Effect.flip(store.appendInbox(id, "followUp", Message.user("one too many")))
    assert(full._tag === "SteeringFull")
    assert.strictEqual(full.queued, 100)
    assert.strictEqual((yield* store.readInbox(id, "steering", 0)).length, 100)
    // read past it, it leaves at the next read of cancels: the next cancel is kept
    assert.deepStrictEqual(yield* store.readInbox(id, "cancel", held[0]!.seq), [])
    assert.isTrue(yield* store.appendCancel(id, "third"))
    assert.deepStrictEqual(
      (yield* store.readInbox(id, "cancel", held[0]!.seq)).map((entry) => Message.textOf(entry.message)),
      ["third"]
    )
    // waiting idle for a follow-up, or finished: no run in flight, nothing kept
    const idle = `${prefix}-c2`
    yield* store.register(idle, 1)
    yield* store.setWaiting(idle, 0)
    assert.isFalse(yield* store.appendCancel(idle, "idle"))
    yield* store.setWaiting(idle, undefined)
    yield* store.finish(idle, 2)
    assert.isFalse(yield* store.appendCancel(idle, "finished"))
    assert.deepStrictEqual(yield* store.readInbox(idle, "cancel", 0), [])
    // Atomic with the idle wait: of a cancel and a wait recorded at once (the wait then read, as an idle take
    // reads), either the cancel is refused or the read finds it, never kept unseen (it would cancel the next run).
    const races = Array.from({ length: 40 }, (_, i) => `${prefix}-race${i}`)
    const outcomes = yield* Effect.forEach(races, (sessionId) =>
      Effect.andThen(
        store.register(sessionId, 1),
        Effect.all([
          store.appendCancel(sessionId, "raced"),
          Effect.andThen(store.setWaiting(sessionId, 0), store.readInbox(sessionId, "cancel", 0))
        ], { concurrency: "unbounded" })
      ), { concurrency: 8 })
    for (const [kept, read] of outcomes) assert.strictEqual(read.length, kept ? 1 : 0)
  })
