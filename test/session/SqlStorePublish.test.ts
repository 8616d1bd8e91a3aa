/**
 * The durable store on PostgreSQL publishes a batch of events in one statement: publishers of one session at once
 * (a model call's live publisher beside the body's) each keep their batch in order, every event once, numbered
 * without a gap or a twice-used place.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { type AgentEvent } from "effect-agent"
import { DurableSession } from "effect-agent/session"
import { database } from "./cluster-fixture.ts"
import * as Postgres from "./postgres.ts"

const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the store's publish tests: ${available.unavailable}`)

const event = (n: number): AgentEvent.AgentEvent => ({ _tag: "TurnStart", runId: "r", turn: n, timestamp: n })

describe.skipIf("unavailable" in available)("DurableSession's store on PostgreSQL: publish", () => {
  it.live("batches published at once by many publishers: each event once, each batch in order, places 1…n", () =>
    Effect.gen(function*() {
      const pg = yield* Postgres.scoped
      yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
      yield* Effect.gen(function*() {
        const store = yield* DurableSession.Store
        // 12 publishers × 4 batches of 5; every publisher also sends its first batch again (an activity that ran
        // twice), and the batches overlap by id across publishers p and p+1 (a replay publishing what was)
        const batch = (p: number, b: number) =>
          Array.from({ length: 5 }, (_, i) => {
            const n = p * 100 + b * 5 + i
            return { id: `e${b === 0 && i === 0 && p > 0 ? (p - 1) * 100 + 1 : n}`, event: event(n) }
          })
        yield* Effect.forEach(
          Array.from({ length: 12 }, (_, p) => p),
          (p) =>
            Effect.forEach([0, 1, 2, 3, 0], (b) => store.publish("s1", batch(p, b)), { discard: true }),
          { concurrency: "unbounded", discard: true }
        )
        const published = yield* store.events("s1", 0)
        const ids = published.map((entry) => entry.id)
        assert.strictEqual(new Set(ids).size, ids.length, "each event once")
        assert.deepStrictEqual(published.map((entry) => entry.seq), published.map((_, i) => i + 1))
        // 12 × 20 ids, less the 11 first ids of p > 0 that are another publisher's
        assert.strictEqual(ids.length, 12 * 20 - 11)
        // within a batch, the events keep their order (those of no other batch: an event shared with another
        // publisher's batch is where its first publication put it)
        for (let p = 0; p < 12; p++) {
          for (let b = 1; b < 4; b++) {
            const places = batch(p, b).map(({ id }) => ids.indexOf(id))
            assert.deepStrictEqual([...places].sort((x, y) => x - y), places, `batch ${p}/${b} in order`)
          }
        }
        // the events come back as they went
        assert.deepStrictEqual(published.find((entry) => entry.id === "e205")?.event, event(205))
        // a batch whose events are all kept already changes nothing
        yield* store.publish("s1", batch(3, 2))
        assert.strictEqual((yield* store.events("s1", 0)).length, ids.length)
      }).pipe(Effect.provide(DurableSession.layerSqlStore.pipe(Layer.provideMerge(database(pg.url)))))
    }).pipe(Effect.scoped))
})
