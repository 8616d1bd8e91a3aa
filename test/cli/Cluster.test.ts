/**
 * `effect-agent runner --pg URL` and `effect-agent run --pg URL` as real
 * processes, on a local PostgreSQL (skipped, saying why, where there is none).
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { fileURLToPath } from "node:url"
import * as Postgres from "../session/postgres.ts"
import { live, scripted, spawnProgram, tempDir } from "./support.ts"

const main = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url))
const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the runner command's tests: ${available.unavailable}`)

const cli = (dir: string, args: ReadonlyArray<string>) =>
  spawnProgram(process.execPath, ["--conditions=effect-agent-source", main, ...args], { cwd: dir })

const turns = [
  { toolCalls: [{ name: "read_file", params: { path: "a.txt" } }] },
  { text: "a.txt says hello world." }
]

describe.skipIf("unavailable" in available)("effect-agent runner and run --pg", () => {
  it.live("a runner runs the sessions run --pg submits; run follows one to its answer and exits 0", () =>
    Effect.gen(function*() {
      const pg = yield* Postgres.scoped
      const dir = yield* scripted(turns)
      const port = yield* Effect.promise(Postgres.freePort)
      const runner = yield* cli(dir, [
        "runner",
        "--pg",
        pg.url,
        "--port",
        String(port),
        "--provider",
        "scripted",
        "--script",
        `${dir}/script.json`,
        "--sandbox",
        "local",
        "--tools",
        "read_file"
      ])
      const ready = JSON.parse(yield* runner.waitFor((line) => line.startsWith("{\"runner\"")))
      assert.strictEqual(ready.runner, `127.0.0.1:${port}`)
      const client = yield* cli(yield* tempDir, [
        "run",
        "--pg",
        pg.url,
        "--session-id",
        "cli-1",
        "--task",
        "What is in a.txt?",
        "--max-turns",
        "5"
      ])
      const done = yield* client.exit
      assert.strictEqual(done.code, 0, done.stderr)
      assert.strictEqual(done.stdout, "a.txt says hello world.\n")
      assert.include(done.stderr, "session cli-1 submitted")
      assert.include(done.stderr, "⚙ read_file")
      // the same id again follows the session that has it: its answer, nothing run again
      const again = yield* (yield* cli(yield* tempDir, ["run", "--pg", pg.url, "--session-id", "cli-1", "--task", "x"]))
        .exit
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(again.stdout, "a.txt says hello world.\n")
      // the runner is killed with the scope: a session never depends on its runner stopping cleanly
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 180_000)

  live("run --pg without --task exits 22 saying why", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const noTask = yield* (yield* cli(dir, ["run", "--pg", "postgres://postgres@127.0.0.1:1/x"])).exit
      assert.strictEqual(noTask.code, 22)
      assert.include(noTask.stderr, "--pg needs --task")
    }))
})
