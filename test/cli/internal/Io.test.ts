/**
 * Io: the command's output streams and environment, as the process gives
 * them.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Io from "../../../src/cli/internal/Io.ts"
import { afterEach, vi } from "vitest"

afterEach(() => {
  vi.restoreAllMocks()
})

describe("Io.layerProcess", () => {
  it.effect("is the process's working directory, environment and streams; colours unless NO_COLOR is set", () =>
    Effect.gen(function*() {
      const io = yield* Effect.provide(Effect.service(Io.Io), Io.layerProcess)
      assert.strictEqual(io.cwd, process.cwd())
      assert.strictEqual(io.env, process.env)
      assert.strictEqual(io.color, (process.env.NO_COLOR ?? "") === "")
      const dumb = process.env.TERM === "dumb"
      assert.strictEqual(io.stdout.isTerminal, process.stdout.isTTY === true && !dumb)
      assert.strictEqual(io.stderr.isTerminal, process.stderr.isTTY === true && !dumb)
      assert.strictEqual(io.stdout.columns(), process.stdout.columns ?? 80)
    }))

  it.effect("writes each piece at once, in order, to the stream it is for", () =>
    Effect.gen(function*() {
      const written: Array<readonly [string, string]> = []
      vi.spyOn(process.stdout, "write").mockImplementation((text) => (written.push(["stdout", String(text)]), true))
      vi.spyOn(process.stderr, "write").mockImplementation((text) => (written.push(["stderr", String(text)]), true))
      const io = yield* Effect.provide(Effect.service(Io.Io), Io.layerProcess)
      io.stderr.write("── turn 1\n")
      io.stdout.write("the answer\n")
      io.stderr.write("■ Completed\n")
      // synchronous: written before anything else runs
      assert.deepStrictEqual(written, [
        ["stderr", "── turn 1\n"],
        ["stdout", "the answer\n"],
        ["stderr", "■ Completed\n"]
      ])
    }))
})
