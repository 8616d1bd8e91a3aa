import { NodeServices } from "@effect/platform-node"
import { assert, it } from "@effect/vitest"
import { Effect, Fiber, FileSystem, Latch } from "effect"
import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { durableSession } from "../../examples/durable-session.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))

it.live("examples/durable-session.ts: stopped while it publishes, the next run resumes and does not publish again", () =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const dir = yield* fs.makeTempDirectoryScoped({ prefix: "durable-session-test-" })
    const first: Array<string> = []
    const publishing = Latch.makeUnsafe()
    const fiber = yield* Effect.forkChild(durableSession(dir, (line) =>
      Effect.sync(() => {
        first.push(line)
        // the checkpoint after the publish call started: what Ctrl-C leaves behind
        if (first.at(-2)?.startsWith("  publish") && line.startsWith("  checkpoint saved")) publishing.openUnsafe()
      }), "300 millis"))
    yield* publishing.await
    yield* Fiber.interrupt(fiber)
    const shown = first.filter((line) => !line.includes("checkpoint"))
    // the two fetches sleep the same time in parallel: their results arrive in either order
    assert.deepStrictEqual([...shown.slice(0, 3), ...shown.slice(3, 5).sort(), ...shown.slice(5)], [
      "turn 1",
      "  fetch_page {\"url\":\"https://example.org/a\"}",
      "  fetch_page {\"url\":\"https://example.org/b\"}",
      "  ✓ <h1>https://example.org/a</h1> 42 is the answer.",
      "  ✓ <h1>https://example.org/b</h1> 42 is the answer.",
      "turn 2",
      "  publish {\"title\":\"Both pages agree: 42\"}"
    ])

    const second: Array<string> = []
    const result = yield* durableSession(dir, (line) => Effect.sync(() => void second.push(line)), "20 millis")
    assert.strictEqual(result.outcome._tag, "Completed")
    assert.strictEqual(second[0], "resumed at turn 2 (5 messages restored)")
    // an error result: the outcome is unknown, not a success
    assert.match(second[1]!, /^ {2}✗ This call to publish had started when the run was interrupted, and its outcome is unknown/)
    assert.isFalse(second.some((line) => line.startsWith("  publish")))
    const lines = (yield* fs.readFileString(`${dir}/research.ndjson`)).trim().split("\n")
    assert.strictEqual(JSON.parse(lines.at(-1)!)._tag, "AgentEnd")

    // once finished, running it again returns the same result and runs nothing
    const third: Array<string> = []
    const again = yield* durableSession(dir, (line) => Effect.sync(() => void third.push(line)), "20 millis")
    assert.deepStrictEqual([again, third], [result, []])
  }).pipe(Effect.provide(NodeServices.layer)))

it("examples/durable-session.ts run without a directory keeps its session in the OS's temporary directory, nothing where it runs", () => {
  const cwd = mkdtempSync(join(tmpdir(), "durable-session-cwd-"))
  const temp = mkdtempSync(join(tmpdir(), "durable-session-tmp-"))
  try {
    const out = execFileSync(
      process.execPath,
      ["--conditions=effect-agent-source", join(root, "examples/durable-session.ts")],
      { cwd, encoding: "utf8", env: { ...process.env, TMPDIR: temp } }
    )
    const dir = join(temp, "effect-agent-durable-session")
    assert.strictEqual(out.split("\n")[0], `session in ${dir}`)
    assert.include(out, `outcome: Completed (delete ${dir} to start over)`)
    assert.deepStrictEqual(readdirSync(cwd), [])
    assert.include(readdirSync(dir), "research.ndjson")
  } finally {
    rmSync(cwd, { recursive: true, force: true })
    rmSync(temp, { recursive: true, force: true })
  }
})
