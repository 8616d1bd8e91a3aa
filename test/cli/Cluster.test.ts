/**
 * `effect-agent runner --pg URL` and `effect-agent run --pg URL` as real
 * processes, on a local PostgreSQL (skipped, saying why, where there is none).
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Option } from "effect"
import { fileURLToPath } from "node:url"
import * as Postgres from "../session/postgres.ts"
import { live, scripted, spawnProgram, tempDir } from "./support.ts"

const main = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url))
const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the runner command's tests: ${available.unavailable}`)

const cli = (dir: string, args: ReadonlyArray<string>) =>
  spawnProgram(process.execPath, ["--conditions=effect-agent-source", main, ...args], { cwd: dir })

/** A runner on `pg` with the scripted model of `dir` and `--tools tools`, once it says it is ready (its first line). */
const runner = (pg: Postgres.Postgres, dir: string, tools: string, extra: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    const port = yield* Effect.promise(Postgres.freePort)
    const process = yield* cli(dir, [
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
      tools,
      ...extra
    ])
    const ready = JSON.parse(yield* process.waitFor((line) => line.startsWith("{\"runner\"")))
    return { process, port, ready }
  })

/** `run --pg` submitting (or following) session `id` with `task`, from a directory of its own. */
const submit = (pg: Postgres.Postgres, id: string, task: string, extra: ReadonlyArray<string> = []) =>
  Effect.flatMap(tempDir, (dir) => cli(dir, ["run", "--pg", pg.url, "--session-id", id, "--task", task, ...extra]))

const turns = [
  { toolCalls: [{ name: "read_file", params: { path: "a.txt" } }] },
  { text: "a.txt says hello world." }
]

describe.skipIf("unavailable" in available)("effect-agent runner and run --pg", () => {
  it.live("a runner runs the sessions run --pg submits; run follows one to its answer and exits 0", () =>
    Effect.gen(function*() {
      const pg = yield* Postgres.scoped
      const dir = yield* scripted(turns)
      const { port, ready } = yield* runner(pg, dir, "read_file")
      assert.strictEqual(ready.runner, `127.0.0.1:${port}`)
      const client = yield* submit(pg, "cli-1", "What is in a.txt?", ["--max-turns", "5"])
      const done = yield* client.exit
      assert.strictEqual(done.code, 0, done.stderr)
      assert.strictEqual(done.stdout, "a.txt says hello world.\n")
      assert.include(done.stderr, "session cli-1 submitted")
      assert.include(done.stderr, "⚙ read_file")
      // the same id again follows the session that has it: its answer, nothing run again
      const again = yield* (yield* submit(pg, "cli-1", "x")).exit
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(again.stdout, "a.txt says hello world.\n")
      // the runner is killed with the scope: a session never depends on its runner stopping cleanly
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 180_000)

  it.live(
    "attack: PostgreSQL restarted under effect-agent runner --pg: the runner lives on, and run --pg follows its session through the restarts to its answer",
    () =>
      Effect.gen(function*() {
        const pg = yield* Postgres.scoped
        // The first model call takes 3 s: the session is in flight when the database goes away.
        const dir = yield* scripted([{ ...turns[0], delay: 3000 }, turns[1]])
        const started = yield* runner(pg, dir, "read_file")
        const client = yield* submit(pg, "cli-pg-1", "What is in a.txt?")
        yield* Effect.sleep("2 seconds")
        // Down for longer than the runner's supervisor pass and the client's poll are apart, then a fast restart.
        pg.down()
        yield* Effect.sleep("2500 millis")
        pg.up()
        yield* Effect.sleep("1 second")
        pg.restart()
        const done = yield* client.exit
        assert.strictEqual(done.code, 0, done.stderr)
        assert.strictEqual(done.stdout, "a.txt says hello world.\n")
        // the runner is still running, and runs another session
        assert.isTrue(Option.isNone(yield* Effect.timeoutOption(started.process.exit, "200 millis")), "the runner exited")
        const next = yield* (yield* submit(pg, "cli-pg-2", "What is in a.txt?")).exit
        assert.strictEqual(next.code, 0, next.stderr)
        assert.strictEqual(next.stdout, "a.txt says hello world.\n")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    180_000
  )

  // Before, the runner took --approve none and ignored it: the call waited for a decision no one would give.
  it.live("runner --approve none denies a call that needs approval, as run and serve do, and the session goes on", () =>
    Effect.gen(function*() {
      const pg = yield* Postgres.scoped
      const dir = yield* scripted([
        { toolCalls: [{ name: "write_file", params: { path: "b.txt", content: "written" } }] },
        { text: "I could not write b.txt." }
      ])
      yield* runner(pg, dir, "write_file", ["--approve", "none"])
      const done = yield* (yield* submit(pg, "denied-1", "Write b.txt", ["--max-turns", "5"])).exit
      assert.strictEqual(done.code, 0, done.stderr)
      assert.strictEqual(done.stdout, "I could not write b.txt.\n")
      const fs = yield* FileSystem.FileSystem
      assert.isFalse(yield* fs.exists(`${dir}/b.txt`))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 180_000)

  live("attack: run --pg refuses a --session-id the rule refuses (exit 22), before reaching the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      for (const id of ["../x", ".hidden", "a b", "x".repeat(129)]) {
        const refused = yield* (yield* cli(dir, [
          "run",
          "--pg",
          "postgres://postgres@127.0.0.1:1/x",
          "--session-id",
          id,
          "--task",
          "t"
        ])).exit
        assert.strictEqual(refused.code, 22, refused.stderr)
        assert.include(refused.stderr, `--session-id ${JSON.stringify(id)}: Expected a session id`)
      }
    }))

  live("run --pg without --task exits 22 saying why", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const noTask = yield* (yield* cli(dir, ["run", "--pg", "postgres://postgres@127.0.0.1:1/x"])).exit
      assert.strictEqual(noTask.code, 22)
      assert.include(noTask.stderr, "--pg needs --task")
    }))
})
