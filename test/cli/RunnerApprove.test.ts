/**
 * `effect-agent runner --approve none` as a real process on a local
 * PostgreSQL (skipped, saying why, where there is none): a call that needs
 * approval is denied, as `run` and `serve` deny it. Before, the runner took
 * the flag and ignored it: the call waited for a decision no one would give.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import { fileURLToPath } from "node:url"
import * as Postgres from "../session/postgres.ts"
import { scripted, spawnProgram, tempDir } from "./support.ts"

const main = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url))
const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the runner's --approve test: ${available.unavailable}`)

const cli = (dir: string, args: ReadonlyArray<string>) =>
  spawnProgram(process.execPath, ["--conditions=effect-agent-source", main, ...args], { cwd: dir })

describe.skipIf("unavailable" in available)("effect-agent runner --approve none", () => {
  it.live("denies a call that needs approval (it was ignored: the call waited for ever), and the session goes on", () =>
    Effect.gen(function*() {
      const pg = yield* Postgres.scoped
      const dir = yield* scripted([
        { toolCalls: [{ name: "write_file", params: { path: "b.txt", content: "written" } }] },
        { text: "I could not write b.txt." }
      ])
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
        "write_file",
        "--approve",
        "none"
      ])
      yield* runner.waitFor((line) => line.startsWith("{\"runner\""))
      const client = yield* cli(yield* tempDir, [
        "run",
        "--pg",
        pg.url,
        "--session-id",
        "denied-1",
        "--task",
        "Write b.txt",
        "--max-turns",
        "5"
      ])
      const done = yield* client.exit
      assert.strictEqual(done.code, 0, done.stderr)
      assert.strictEqual(done.stdout, "I could not write b.txt.\n")
      const fs = yield* FileSystem.FileSystem
      assert.isFalse(yield* fs.exists(`${dir}/b.txt`))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 180_000)
})
