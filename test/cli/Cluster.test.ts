/**
 * `effect-agent runner --pg URL` and `effect-agent run --pg URL` as real
 * processes, on a local PostgreSQL (skipped, saying why, where there is none).
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Option } from "effect"
import * as Postgres from "../session/postgres.ts"
import { live, scripted, tempDir } from "./support.ts"
import { available, fast, runner, submit, turns } from "./cluster-support.ts"
import { runCommand } from "./inProcess.ts"

/** The command in this process, for what it refuses before it reaches the database. */
const inProcess = (dir: string, args: ReadonlyArray<string>, env: Record<string, string> = fast) =>
  runCommand(args, { cwd: dir, env })

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
      // the same id again follows the session that has it: its answer, nothing run again (--quiet: no progress)
      const again = yield* (yield* submit(pg, "cli-1", "x", ["--quiet"])).exit
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(again.stdout, "a.txt says hello world.\n")
      assert.strictEqual(again.stderr, "")
      // --emit-jsonl -: the session's events, a JSON line each, in the order published (and no answer as text)
      const lines = yield* (yield* submit(pg, "cli-1", "x", ["--quiet", "--emit-jsonl", "-"])).exit
      assert.strictEqual(lines.code, 0, lines.stderr)
      const events = lines.stdout.trim().split("\n").map((line) => JSON.parse(line) as { readonly _tag: string })
      assert.strictEqual(events[0]!._tag, "AgentStart")
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
      assert.strictEqual(events.filter((event) => event._tag === "ToolExecutionStart").length, 1)
      // --json: the report, as run gives it
      const json = yield* (yield* submit(pg, "cli-1", "x", ["--quiet", "--json"])).exit
      assert.strictEqual(json.code, 0, json.stderr)
      const report = JSON.parse(json.stdout)
      assert.deepStrictEqual(
        [report.exitCode, report.outcome, report.answer, report.turns, report.error],
        [0, { _tag: "Completed" }, "a.txt says hello world.", 2, null]
      )
      assert.strictEqual(report.summary.split(":")[0], "Completed")
      assert.isString(report.runId)
      assert.deepStrictEqual(Object.keys(report.usage).sort(), ["cacheRead", "cacheWrite", "input", "output", "reasoning"])
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
        // the client waited for the database, and said so once
        assert.strictEqual(done.stderr.split("cannot reach the database").length - 1, 1, done.stderr)
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

  // Before, run --pg took these flags and ignored them: the session ran on the runners' model, tools and approvals.
  live("attack: run --pg refuses every flag it would ignore (exit 22, naming each), before reaching the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const pgArgs = ["run", "--pg", "postgres://postgres@127.0.0.1:1/x", "--task", "t"]
      const approve = yield* inProcess(dir, [...pgArgs, "--approve", "all"])
      assert.strictEqual(approve.code, 22, approve.stderr)
      assert.include(approve.stderr, "effect-agent: run --pg does not take flags it would ignore:\n  --approve: ")
      const ignored: ReadonlyArray<readonly [string, ...Array<string>]> = [
        ["--provider", "scripted"],
        ["--model", "m"],
        ["--base-url", "http://127.0.0.1:1/v1"],
        ["--api-key-env", "KEY"],
        ["--script", "s.json"],
        ["--tools", "bash"],
        ["--mcp", "server"],
        ["--workspace", "/"],
        ["--sandbox", "local"],
        ["--allow-read", "/"],
        ["--allow-write", "/tmp"],
        ["--approve", "all"],
        ["--resume", "/tmp/s"],
        ["--session-dir", "/tmp/s"],
        ["--emit-jsonl", "events.jsonl"],
        ["--otlp", "http://127.0.0.1:1"],
        ["--stdin-eof", "cancel"],
        ["--check", "true"],
        ["--verifier", "true"],
        ["--plan"],
        ["--max-plan-iterations", "2"],
        ["--approve-turns"],
        ["--tolerate-known-failures"],
        ["--worker", "claude"]
      ]
      const all = yield* inProcess(dir, [...pgArgs, ...ignored.flat()])
      assert.strictEqual(all.code, 22, all.stderr)
      for (const [flag] of ignored) assert.include(all.stderr, `\n  ${flag}: `)
    }))

  live("attack: run --pg refuses a --session-id the rule refuses (exit 22), before reaching the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      yield* Effect.forEach(["../x", ".hidden", "a b", "x".repeat(129)], (id) => Effect.gen(function*() {
        const refused = yield* inProcess(dir, [
          "run",
          "--pg",
          "postgres://postgres@127.0.0.1:1/x",
          "--session-id",
          id,
          "--task",
          "t"
        ])
        assert.strictEqual(refused.code, 22, refused.stderr)
        assert.include(refused.stderr, `--session-id ${JSON.stringify(id)}: Expected a session id`)
      }), { concurrency: "unbounded" })
    }))

  live("a cluster setting in the environment that is not a positive duration: exit 22 naming it, before reaching the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const url = "postgres://postgres@127.0.0.1:1/x"
      const [runnerExit, clientExit] = yield* Effect.all([
        inProcess(dir, ["runner", "--pg", url, "--provider", "scripted", "--script", "s.json"], {
          EFFECT_AGENT_CLUSTER_SHARD_LOCK_REFRESH_INTERVAL: "soon"
        }),
        inProcess(dir, ["run", "--pg", url, "--task", "t"], { EFFECT_AGENT_CLUSTER_ENTITY_TERMINATION_TIMEOUT: "0 seconds" })
      ], { concurrency: "unbounded" })
      assert.strictEqual(runnerExit.code, 22, runnerExit.stderr)
      assert.include(runnerExit.stderr, 'EFFECT_AGENT_CLUSTER_SHARD_LOCK_REFRESH_INTERVAL: expected a duration, such as "5 seconds"')
      assert.strictEqual(clientExit.code, 22, clientExit.stderr)
      assert.include(clientExit.stderr, "EFFECT_AGENT_CLUSTER_ENTITY_TERMINATION_TIMEOUT: expected a duration above zero")
    }))

  live("run --pg without --task exits 22 saying why", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const noTask = yield* inProcess(dir, ["run", "--pg", "postgres://postgres@127.0.0.1:1/x"])
      assert.strictEqual(noTask.code, 22)
      assert.include(noTask.stderr, "--pg needs --task")
    }))
})
