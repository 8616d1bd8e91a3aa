/**
 * Demo: the offline demo, in the test process on virtual time, and as
 * `effect-agent demo` run as a real process.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { Message } from "effect-agent"
import * as Demo from "../../../src/cli/internal/Demo.ts"
import * as View from "../../../src/cli/internal/View.ts"
import { builtCommand } from "../build.ts"
import { live, noEscapes, run, tempDir } from "../support.ts"

describe.concurrent("Demo.run", () => {
  it.effect("steers the trip from flying to the train while the first tools run; writes the answer and totals", () =>
    Effect.gen(function*() {
      let log = ""
      let written = ""
      const fiber = yield* Effect.forkChild(Demo.run({
        view: View.log((text) => void (log += text)),
        write: (text) => void (written += text)
      }))
      // the demo's model and tools take about three seconds of (virtual) time
      for (let step = 0; step < 100 && fiber.pollUnsafe() === undefined; step++) yield* TestClock.adjust("100 millis")
      const result = yield* Fiber.join(fiber)
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      const answer = Message.textOf(result.messages.at(-1)!)
      assert.match(answer, /^Take the 08:25 Bergensbanen from Oslo/)
      assert.include(log, "↪ steering delivered: Actually, I'd rather take the train than fly.")
      assert.include(log, "■ Completed")
      noEscapes(log + written)
      assert.include(written, `Answer: ${answer}\n`)
      assert.match(written, /\d+ turns · \d+ messages · \d+ tokens · \$\d+\.\d{4}\n$/)
    }))
})

describe.concurrent("effect-agent demo", () => {
  live("piped: as run does, the event log on stderr (no escape codes), the answer on stdout", () =>
    Effect.gen(function*() {
      const cli = yield* Effect.promise(builtCommand)
      const out = yield* run(cli, ["demo"], { cwd: yield* tempDir, env: { FORCE_COLOR: "1" } })
      assert.strictEqual(out.code, 0, out.stderr)
      noEscapes(out.stderr)
      assert.include(out.stderr, "↪ steering delivered: Actually, I'd rather take the train than fly.")
      assert.include(out.stderr, "■ Completed")
      assert.match(out.stdout, /^Take the 08:25 Bergensbanen from Oslo.*\n$/)
    }))
})
