/**
 * What the tests of `effect-agent runner --pg` and `run --pg` share: the
 * commands as processes on a local PostgreSQL, with failover settings for a
 * fast local network, a client of the cluster in the test's process, and
 * waits on the cluster's state as PostgreSQL sees it.
 */
import { NodeClusterSocket } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Fiber, Layer, Redacted, Schedule } from "effect"
import { ClusterWorkflowEngine } from "effect/cluster"
import { SqlClient } from "effect/sql"
import { DurableSession } from "effect-agent/session"
import * as Postgres from "../session/postgres.ts"
import { builtCommand } from "./build.ts"
import { runCommand } from "./inProcess.ts"
import { spawnProgram, tempDir } from "./support.ts"


export const available = Postgres.availability()
if ("unavailable" in available) console.log(`skipping the runner command's tests: ${available.unavailable}`)

/**
 * Failover as on a fast local network, through the settings the commands take from the environment: a lock
 * refresh every 3 s (a restart of the database is found that much sooner), assignments read every second, the
 * stored messages of a session that moved read every 300 ms. (The expiration stays long: a loaded machine may
 * take seconds for a refresh, and a dead runner's locks go with its connection.)
 */
export const fast = {
  EFFECT_AGENT_CLUSTER_SHARD_LOCK_REFRESH_INTERVAL: "3 seconds",
  EFFECT_AGENT_CLUSTER_REFRESH_ASSIGNMENTS_INTERVAL: "1 second",
  EFFECT_AGENT_CLUSTER_ENTITY_MESSAGE_POLL_INTERVAL: "300 millis",
  EFFECT_AGENT_CLUSTER_RUNNER_HEALTH_CHECK_INTERVAL: "2 seconds"
}

/** The built command (the bundle the package installs: a runner starts in a fraction of the sources' time). */
export const cli = (dir: string, args: ReadonlyArray<string>, env: Record<string, string> = fast) =>
  Effect.flatMap(Effect.promise(builtCommand), (main) => spawnProgram(process.execPath, [main, ...args], { cwd: dir, env }))

/** A runner on `pg` with the scripted model of `dir` and `--tools tools`, once it says it is ready (its first line). */
export const runner = (pg: Postgres.Postgres, dir: string, tools: string, extra: ReadonlyArray<string> = []) =>
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
export const submit = (pg: Postgres.Postgres, id: string, task: string, extra: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    const dir = yield* tempDir
    // In this process, beside the test (the same command as the built one, its output captured): a process
    // each cost a second of CPU for what the runners' own processes already show. The runners are processes,
    // killed and signalled.
    const running = yield* Effect.forkScoped(
      runCommand(["run", "--pg", pg.url, "--session-id", id, "--task", task, ...extra], { cwd: dir, env: fast })
    )
    return { exit: Fiber.join(running) }
  })

export const turns = [
  { toolCalls: [{ name: "read_file", params: { path: "a.txt" } }] },
  { text: "a.txt says hello world." }
]

/**
 * A client of the cluster in this process, as `run --pg` is one (the command's settings: 300 shards), for the
 * sessions a test starts and polls without following each in a process of its own.
 */
export const clientOf = (pg: Postgres.Postgres) =>
  DurableSession.layerSqlStore.pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "sql" })),
    Layer.provideMerge(PgClient.layer({ url: Redacted.make(pg.url) }))
  )

/** The cluster as PostgreSQL sees it: the runners registered, and the shard locks each database session holds. */
export interface ClusterState {
  readonly runners: ReadonlyArray<string>
  readonly locks: ReadonlyArray<number>
}

export const clusterState = (pg: Postgres.Postgres) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const runners = yield* sql<{ address: string }>`SELECT address FROM cluster_runners`
    const locks = yield* sql<{ n: string }>`SELECT count(*)::text AS n FROM pg_locks
      WHERE locktype = 'advisory' GROUP BY pid`
    const state: ClusterState = { runners: runners.map((row) => row.address), locks: locks.map((row) => Number(row.n)) }
    return state
  }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(pg.url) })))

/** Waits, up to `within`, for the cluster to be in a state (asking again while the database is away). */
export const until = (pg: Postgres.Postgres, what: string, done: (state: ClusterState) => boolean, within: Duration.Input) =>
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

export const sum = (counts: ReadonlyArray<number>) => counts.reduce((a, b) => a + b, 0)

/** Every shard held, by `runners` runners each holding some. */
export const settled = (runners: number) => (state: ClusterState) =>
  state.locks.length === runners && state.locks.every((n) => n > 0) && sum(state.locks) === 300

/**
 * A session whose call marks the runner it runs on (`ran.txt` in that runner's directory) as it starts, and then
 * takes `seconds`: once the mark is there, the call is in flight.
 */
export const marking = (seconds: number) => [
  { toolCalls: [{ name: "bash", params: { command: `echo ran >> ran.txt; sleep ${seconds}` } }] },
  { text: "done." }
]

