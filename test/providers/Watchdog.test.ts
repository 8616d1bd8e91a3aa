import { assert, describe, it, vi } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import * as Watchdog from "../../src/providers/internal/Watchdog.ts"

const settle = TestClock.withLive(Effect.sleep("10 millis"))

describe("Watchdog", () => {
  it.effect("on a test clock: wakes at each time the check asks for, until it asks for none", () =>
    Effect.gen(function*() {
      const clock = yield* Effect.clockWith(Effect.succeed)
      assert.isFalse(Watchdog.isDefaultClock(clock))
      const woken: Array<number> = []
      Watchdog.startUnsafe(clock, 1_000, (now) => {
        woken.push(now)
        return woken.length < 3 ? now + 1_000 : undefined
      })
      for (let step = 0; step < 5; step++) {
        yield* settle
        yield* TestClock.adjust("1 second")
      }
      yield* settle
      assert.deepStrictEqual(woken, [1_000, 2_000, 3_000])
    }))

  it.effect("on a test clock: a stopped watch never wakes", () =>
    Effect.gen(function*() {
      const clock = yield* Effect.clockWith(Effect.succeed)
      const woken: Array<number> = []
      const watch = Watchdog.startUnsafe(clock, 1_000, (now) => (woken.push(now), now + 1_000))
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* settle
      watch.stop()
      yield* TestClock.adjust("5 seconds")
      yield* settle
      assert.deepStrictEqual(woken, [1_000])
    }))

  it.live("on effect's own clock: a plain timer, re-armed, and stopped without a trace", () =>
    Effect.gen(function*() {
      const clock = yield* Effect.clockWith(Effect.succeed)
      assert.isTrue(Watchdog.isDefaultClock(clock))
      const start = clock.currentTimeMillisUnsafe()
      const woken: Array<number> = []
      Watchdog.startUnsafe(clock, start + 20, (now) => {
        woken.push(now - start)
        return woken.length < 2 ? now + 20 : undefined
      })
      const stopped: Array<number> = []
      const watch = Watchdog.startUnsafe(clock, start + 20, (now) => (stopped.push(now), undefined))
      watch.stop()
      watch.stop()
      yield* Effect.sleep("150 millis")
      assert.strictEqual(woken.length, 2)
      assert.isAtLeast(woken[0]!, 19)
      assert.isAtLeast(woken[1]! - woken[0]!, 19)
      assert.deepStrictEqual(stopped, [])
    }))

  it("on effect's own clock: never checks before the time asked for, even past a timer's range", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] })
    try {
      const clock = Effect.runSync(Effect.clockWith(Effect.succeed))
      assert.isTrue(Watchdog.isDefaultClock(clock))
      const start = Date.now()
      const day = 86_400_000
      const checked: Array<number> = []
      // 30 days is past setTimeout's range (2^31 - 1 ms, about 24.9 days): the timer wakes at the end of it.
      const watch = Watchdog.startUnsafe(clock, start + 30 * day, (now) => (checked.push(now - start), undefined))
      vi.advanceTimersByTime(29 * day)
      assert.deepStrictEqual(checked, [])
      vi.advanceTimersByTime(day)
      assert.deepStrictEqual(checked, [30 * day])
      watch.stop()
    } finally {
      vi.useRealTimers()
    }
  })
})
