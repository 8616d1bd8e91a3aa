/**
 * Check: a command in the Sandbox (exit 0 passes, output captured, cleaned
 * and capped), or any Effect returning a verdict (its failures are failing
 * verdicts); results mark baseline failures known.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Sandbox } from "effect-agent/sandbox"
import { Check } from "effect-agent/supervisor"

const workspace = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "check-"))
const local = (root: string) => Sandbox.local(root).pipe(Layer.provide(NodeServices.layer))

describe("Check.command", () => {
  const root = workspace()
  Fs.writeFileSync(Path.join(root, "ok"), "")

  it.live("exit 0 passes; a failure's summary is its exit code and last line, its details the output", () =>
    Effect.gen(function*() {
      const ok = yield* Check.run(Check.command("has ok", "test -f ok && echo found"))
      assert.deepStrictEqual([ok.check, ok.role, ok.status, ok.summary], [
        "has ok",
        "blocking",
        "pass",
        "exit 0: found"
      ])
      const bad = yield* Check.run(
        Check.command("tests", "echo 'FAIL a'; echo '2 failed' >&2; exit 3", { role: "advisory" }))
      assert.deepStrictEqual([bad.role, bad.status, bad.summary], ["advisory", "fail", "exit 3: 2 failed"])
      assert.strictEqual(bad.details, "FAIL a\n\n2 failed\n")
      assert.isAtLeast(bad.durationMs, 0)
    }).pipe(Effect.provide(local(root))))

  it.live("a timeout fails the check (the sandbox kills the command)", () =>
    Effect.gen(function*() {
      const result = yield* Check.run(Check.command("slow", "sleep 5", { timeout: "100 millis" }))
      assert.strictEqual(result.status, "fail")
      assert.match(result.summary, /^timed out/)
    }).pipe(Effect.provide(local(workspace()))))

  it.live("output is hostile: escapes are dropped, the summary is one capped line, details keep the tail", () =>
    Effect.gen(function*() {
      const script = "printf '\\033[31mred\\033[0m\\n'; seq 1 5000; printf 'last \\007line\\n'; exit 1"
      const result = yield* Check.run(Check.command("noisy", script))
      assert.notMatch(result.details, /\u001b|\u0007/)
      assert.match(result.summary, /^exit 1: last line$/)
      assert.isAtMost(result.details.length, 8_000)
      assert.match(result.details, /5000\nlast line\n$/)
      assert.isTrue(result.details.startsWith("…"))
    }).pipe(Effect.provide(local(workspace()))))
})

describe("Check.make", () => {
  it.effect("an Effect's verdict, timed; its failure is a failing verdict with the error's message", () =>
    Effect.gen(function*() {
      const ok = yield* Check.run(Check.make("ok", Effect.succeed({ status: "pass", summary: "fine" })))
      assert.deepStrictEqual([ok.status, ok.summary, ok.details], ["pass", "fine", ""])
      const failed = yield* Check.run(Check.make("broken", Effect.fail(new Error("no database"))))
      assert.deepStrictEqual([failed.status, failed.summary], ["fail", "the check failed: no database"])
      const long = yield* Check.run(
        Check.make("long", Effect.succeed({ status: "fail", summary: "x".repeat(1000), durationMs: 42 })))
      assert.strictEqual(long.summary.length, 300)
      assert.strictEqual(long.durationMs, 42)
    }))

  it.effect("a failure as in the baseline (durations aside) is known, and blocks unless tolerated; another is new", () =>
    Effect.gen(function*() {
      const failing = Check.make("tests", Effect.succeed({ status: "fail", summary: "3 failed in 1.5s" }))
      const known = yield* Check.run(failing, Check.failureKey("3 failed in 2.25s"))
      assert.strictEqual(known.status, "known")
      assert.isTrue(Check.blocks(known))
      assert.isFalse(Check.blocks(known, { tolerateKnown: true }))
      assert.isTrue(Check.blocks(yield* Check.run(failing), { tolerateKnown: true }))
      assert.strictEqual((yield* Check.run(failing, Check.failureKey("2 failed in 1.5s"))).status, "fail")
      assert.isTrue(Check.blocks(yield* Check.run(failing)))
      const failed: Check.Verdict = { status: "fail", summary: "no" }
      const advisory = Check.make("lint", Effect.succeed({ status: "fail", summary: "style" }), { role: "advisory" })
      assert.isFalse(Check.blocks(yield* Check.run(advisory)))
      assert.isTrue(Check.blocks(yield* Check.run(Check.make("v", Effect.succeed(failed), { role: "verifier" }))))
    }))

  it.effect("the output counts, not the last line alone: another test failing, or more of them, is a new failure", () =>
    Effect.gen(function*() {
      // vitest ends every run with a failure on the same separator line; what failed is above it
      const suite = (failing: string, at: string) =>
        Check.make("tests", Effect.succeed({
          status: "fail",
          summary: "exit 1: ⎯⎯⎯⎯[1/1]⎯",
          details: ` FAIL  test/a.test.ts > ${failing}\n Tests  1 failed | 3 passed (4)\n Start at  ${at}\n Duration  1.${
            at.length
          }2s\n⎯⎯⎯⎯[1/1]⎯`
        }))
      const baseline = yield* Check.run(suite("adds", "02:41:18"))
      const key = Check.failureKey(baseline.summary, baseline.details)
      // the same failure, another day and duration: known
      assert.strictEqual((yield* Check.run(suite("adds", "14:03:59"), key)).status, "known")
      // another test failing behind the same last line: new
      assert.strictEqual((yield* Check.run(suite("subtracts", "02:41:18"), key)).status, "fail")
    }))
})
