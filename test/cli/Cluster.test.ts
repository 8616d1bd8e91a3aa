/**
 * `effect-agent runner --pg URL` and `effect-agent run --pg URL` as real
 * processes, on a local PostgreSQL (skipped, saying why, where there is none).
 */
import { NodeClusterSocket, NodeServices } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Duration, Effect, FileSystem, Layer, Option, Redacted, Schedule } from "effect"
import { ClusterWorkflowEngine } from "effect/cluster"
import { SqlClient } from "effect/sql"
import { Message } from "effect-agent"
import { DurableSession } from "effect-agent/session"
import { fileURLToPath } from "node:url"
import * as Postgres from "../session/postgres.ts"
import { live, scripted, spawnProgram, tempDir } from "./support.ts"

const main = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url))
const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the runner command's tests: ${available.unavailable}`)

/**
 * Failover as on a fast local network, through the settings the commands take from the environment: a lock
 * refresh every 3 s (a restart of the database is found that much sooner), assignments read every second, the
 * stored messages of a session that moved read every 300 ms. (The expiration stays long: a loaded machine may
 * take seconds for a refresh, and a dead runner's locks go with its connection.)
 */
const fast = {
  EFFECT_AGENT_CLUSTER_SHARD_LOCK_REFRESH_INTERVAL: "3 seconds",
  EFFECT_AGENT_CLUSTER_REFRESH_ASSIGNMENTS_INTERVAL: "1 second",
  EFFECT_AGENT_CLUSTER_ENTITY_MESSAGE_POLL_INTERVAL: "300 millis",
  EFFECT_AGENT_CLUSTER_RUNNER_HEALTH_CHECK_INTERVAL: "2 seconds"
}

const cli = (dir: string, args: ReadonlyArray<string>, env: Record<string, string> = fast) =>
  spawnProgram(process.execPath, ["--conditions=effect-agent-source", main, ...args], { cwd: dir, env })

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

/**
 * A client of the cluster in this process, as `run --pg` is one (the command's settings: 300 shards), for the
 * sessions a test starts and polls without following each in a process of its own.
 */
const clientOf = (pg: Postgres.Postgres) =>
  DurableSession.layerSqlStore.pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "sql" })),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(pg.url) }))
  )

/** The cluster as PostgreSQL sees it: the runners registered, and the shard locks each database session holds. */
interface ClusterState {
  readonly runners: ReadonlyArray<string>
  readonly locks: ReadonlyArray<number>
}

const clusterState = (pg: Postgres.Postgres) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const runners = yield* sql<{ address: string }>`SELECT address FROM cluster_runners`
    const locks = yield* sql<{ n: string }>`SELECT count(*)::text AS n FROM pg_locks
      WHERE locktype = 'advisory' GROUP BY pid`
    const state: ClusterState = { runners: runners.map((row) => row.address), locks: locks.map((row) => Number(row.n)) }
    return state
  }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(pg.url) })))

/** Waits, up to `within`, for the cluster to be in a state (asking again while the database is away). */
const until = (pg: Postgres.Postgres, what: string, done: (state: ClusterState) => boolean, within: Duration.Input) =>
  clusterState(pg).pipe(
    Effect.retry({ schedule: Schedule.spaced("250 millis") }),
    Effect.repeat({ until: done, schedule: Schedule.spaced("250 millis") }),
    Effect.timeoutOrElse({
      duration: within,
      orElse: () =>
        Effect.flatMap(
          Effect.option(clusterState(pg)),
          (state) => Effect.die(new Error(`not ${what} within ${Duration.format(Duration.fromInputUnsafe(within))}: ${JSON.stringify(state)}`))
        )
    })
  )

const sum = (counts: ReadonlyArray<number>) => counts.reduce((a, b) => a + b, 0)

/** Every shard held, by `runners` runners each holding some. */
const settled = (runners: number) => (state: ClusterState) =>
  state.locks.length === runners && state.locks.every((n) => n > 0) && sum(state.locks) === 300

/**
 * A session whose call marks the runner it runs on (`ran.txt` in that runner's directory) as it starts, and then
 * takes `seconds`: once the mark is there, the call is in flight.
 */
const marking = (seconds: number) => [
  { toolCalls: [{ name: "bash", params: { command: `echo ran >> ran.txt; sleep ${seconds}` } }] },
  { text: "done." }
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

  // Before, a runner given SIGTERM or SIGINT never exited: its database pool was closed before its sharding (the
  // database was provided around the runner's body, inside the scope of the layers that use it), so the sharding's
  // stop retried for ever; it kept its runner row and its shard locks, and the sessions on its shards stalled.
  it.live(
    "attack: SIGTERM, SIGINT, and SIGTERM after a pg_ctl restart, to a runner while sessions run: it exits 0 in bounded time, its shard locks and runner row released, and every session finishes on the other runner",
    () =>
      Effect.gen(function*() {
        const pg = yield* Postgres.scoped
        const fs = yield* FileSystem.FileSystem
        const client = yield* Layer.build(clientOf(pg))
        yield* runner(pg, yield* scripted(marking(3)), "bash", ["--approve", "all"])
        const cases = [
          { signal: "SIGTERM", restart: false },
          { signal: "SIGINT", restart: false },
          { signal: "SIGTERM", restart: true }
        ] as const
        for (const [round, { restart, signal }] of cases.entries()) {
          const dir = yield* scripted(marking(3))
          const stopping = yield* runner(pg, dir, "bash", ["--approve", "all"])
          yield* until(pg, "settled on two runners", settled(2), "90 seconds")
          if (restart) {
            pg.restart()
            // each runner finds its locks gone at its next refresh, and takes its shards again
            yield* until(pg, "settled again after the restart", settled(2), "90 seconds")
          }
          // Sessions, until one runs on the runner to stop: its call is in flight when the signal comes. (Submitted
          // from this process: run --pg as their client is the other tests'.)
          const ids: Array<string> = []
          for (let batch = 0; batch < 5 && !(yield* fs.exists(`${dir}/ran.txt`)); batch++) {
            for (let i = 0; i < 4; i++) {
              const sessionId = `sig-${round}-${batch}-${i}`
              yield* DurableSession.start({ sessionId, prompt: "go" }).pipe(Effect.provide(client))
              ids.push(sessionId)
            }
            yield* fs.exists(`${dir}/ran.txt`).pipe(
              Effect.repeat({ until: (ran) => ran, schedule: Schedule.spaced("100 millis") }),
              Effect.timeoutOption("20 seconds")
            )
          }
          assert.isTrue(yield* fs.exists(`${dir}/ran.txt`), "no session ran on the runner to stop")
          const signalled = yield* Clock.currentTimeMillis
          yield* stopping.process.signal(signal)
          const stopped = yield* stopping.process.exit
          const took = (yield* Clock.currentTimeMillis) - signalled
          assert.strictEqual(stopped.code, 0, stopped.stderr)
          assert.include(stopped.stderr, "effect-agent runner: stopping: handing its sessions to the other runners")
          assert.include(stopped.stderr, "effect-agent runner: stopped\n")
          // it waits for its calls in flight (3 s); its bound is 140 s (the entity termination timeout, a lock
          // refresh interval, 10 s)
          assert.isBelow(took, 60_000)
          // its runner row is gone, and the other runner holds every shard
          yield* until(
            pg,
            "handed over",
            (state) => !state.runners.includes(`127.0.0.1:${stopping.port}`) && state.locks.length === 1 && state.locks[0] === 300,
            "60 seconds"
          )
          // every session finished, on the runner left
          const statuses = yield* Effect.forEach(ids, (sessionId) => DurableSession.poll(sessionId)).pipe(
            Effect.repeat({
              until: (statuses) => statuses.every((status) => status._tag !== "Unknown" && status._tag !== "Suspended"),
              schedule: Schedule.spaced("250 millis")
            }),
            Effect.timeout("60 seconds"),
            Effect.provide(client)
          )
          for (const [i, status] of statuses.entries()) {
            assert(status._tag === "Finished", `${ids[i]}: ${status._tag}`)
            assert.deepStrictEqual(status.result.outcome, { _tag: "Completed" })
            assert.strictEqual(Message.textOf(status.result.messages.at(-1)!), "done.", ids[i])
          }
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    600_000
  )

  // Before, a second signal did nothing: the runner went on waiting for its calls in flight (up to 2 minutes). The
  // first stops it cleanly, waiting for its call in flight (30 s); the second cuts that short.
  it.live(
    "attack: a second SIGTERM exits a stopping runner at once (exit 1, saying so), and its session finishes on a runner started after",
    () =>
      Effect.gen(function*() {
        const pg = yield* Postgres.scoped
        const fs = yield* FileSystem.FileSystem
        const dir = yield* scripted(marking(30))
        const stopping = yield* runner(pg, dir, "bash", ["--approve", "all"])
        const client = yield* submit(pg, "second-signal", "go")
        // its 30 s call is in flight
        yield* fs.exists(`${dir}/ran.txt`).pipe(
          Effect.repeat({ until: (ran) => ran, schedule: Schedule.spaced("100 millis") }),
          Effect.timeout("30 seconds")
        )
        yield* stopping.process.signal("SIGTERM")
        // the stop has begun (its runner row is gone), and waits for the call in flight
        yield* until(pg, "unregistered", (state) => !state.runners.includes(`127.0.0.1:${stopping.port}`), "30 seconds")
        const signalled = yield* Clock.currentTimeMillis
        yield* stopping.process.signal("SIGTERM")
        const stopped = yield* stopping.process.exit
        assert.isBelow((yield* Clock.currentTimeMillis) - signalled, 10_000)
        assert.strictEqual(stopped.code, 1, stopped.stderr)
        assert.include(stopped.stderr, "effect-agent: a second signal: exiting at once")
        // (the call cut short is not made again: a bash call answers "outcome unknown" when replayed)
        yield* runner(pg, yield* scripted(marking(30)), "bash", ["--approve", "all"])
        const done = yield* client.exit
        assert.strictEqual(done.code, 0, done.stderr)
        assert.strictEqual(done.stdout, "done.\n")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    180_000
  )

  // Before, run --pg took these flags and ignored them: the session ran on the runners' model, tools and approvals.
  live("attack: run --pg refuses every flag it would ignore (exit 22, naming each), before reaching the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const pgArgs = ["run", "--pg", "postgres://postgres@127.0.0.1:1/x", "--task", "t"]
      const approve = yield* (yield* cli(dir, [...pgArgs, "--approve", "all"])).exit
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
      const all = yield* (yield* cli(dir, [...pgArgs, ...ignored.flat()])).exit
      assert.strictEqual(all.code, 22, all.stderr)
      for (const [flag] of ignored) assert.include(all.stderr, `\n  ${flag}: `)
    }))

  live("attack: run --pg refuses a --session-id the rule refuses (exit 22), before reaching the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      yield* Effect.forEach(["../x", ".hidden", "a b", "x".repeat(129)], (id) => Effect.gen(function*() {
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
      }), { concurrency: "unbounded" })
    }))

  live("a cluster setting in the environment that is not a positive duration: exit 22 naming it, before reaching the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const url = "postgres://postgres@127.0.0.1:1/x"
      const [runnerExit, clientExit] = yield* Effect.all([
        Effect.flatMap(
          cli(dir, ["runner", "--pg", url, "--provider", "scripted", "--script", "s.json"], {
            EFFECT_AGENT_CLUSTER_SHARD_LOCK_REFRESH_INTERVAL: "soon"
          }),
          (process) => process.exit
        ),
        Effect.flatMap(
          cli(dir, ["run", "--pg", url, "--task", "t"], { EFFECT_AGENT_CLUSTER_ENTITY_TERMINATION_TIMEOUT: "0 seconds" }),
          (process) => process.exit
        )
      ], { concurrency: "unbounded" })
      assert.strictEqual(runnerExit.code, 22, runnerExit.stderr)
      assert.include(runnerExit.stderr, 'EFFECT_AGENT_CLUSTER_SHARD_LOCK_REFRESH_INTERVAL: expected a duration, such as "5 seconds"')
      assert.strictEqual(clientExit.code, 22, clientExit.stderr)
      assert.include(clientExit.stderr, "EFFECT_AGENT_CLUSTER_ENTITY_TERMINATION_TIMEOUT: expected a duration above zero")
    }))

  live("run --pg without --task exits 22 saying why", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const noTask = yield* (yield* cli(dir, ["run", "--pg", "postgres://postgres@127.0.0.1:1/x"])).exit
      assert.strictEqual(noTask.code, 22)
      assert.include(noTask.stderr, "--pg needs --task")
    }))
})
