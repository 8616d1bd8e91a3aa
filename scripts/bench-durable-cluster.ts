/**
 * Durable sessions across runner processes on one PostgreSQL: N sessions of
 * T turns (a scripted model; each turn calls a step and a charge that sleep
 * 40–160 ms) over R runner processes, submitted once the cluster has
 * settled; one runner is SIGKILLed (and not restarted) once 40% of the model
 * calls are made, and its sessions finish on the others. Prints throughput,
 * the model calls made again (and by which runner the first call was made:
 * the killed one, or one that stayed up), how often a runner lost its shard
 * locks, the pause of a session across the kill (failover), the load and the
 * settings. A benchmark, not a test; it fails (exit 1) when a session did
 * not complete, or made more model calls again than kills it lived through
 * (the must-show: at most once more than its turns, per kill).
 *
 * Usage (from the repository root; PostgreSQL from /usr/lib/postgresql):
 *   node --conditions=effect-agent-source scripts/bench-durable-cluster.ts [--sessions 1000] [--turns 10] \
 *     [--runners 3] [--sharding '{"shardLockRefreshInterval":"2 seconds"}'] [--model-ms 3000] [--join]
 *
 * It reuses the cluster tests' fixture (test/session/cluster-fixture.ts) and local server (postgres.ts).
 */
import { NodeServices } from "@effect/platform-node"
import { Effect, Schedule } from "effect"
import { DurableSession } from "effect-agent/session"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { database, node, sharding } from "../test/session/cluster-fixture.ts"
import * as Postgres from "../test/session/postgres.ts"

const option = (name: string, fallback: number): number => {
  const at = process.argv.indexOf(`--${name}`)
  return at === -1 ? fallback : Number(process.argv[at + 1])
}
const sessions = option("sessions", 1000)
const turns = option("turns", 10)
const runnerCount = option("runners", 3)
// `--sharding '{"shardLockRefreshInterval":"5 seconds"}'`: settings over the fixture's, for the runners too
// `--join`: at 40% a runner joins instead of one dying; `--model-ms N`: each model call takes N ms
const join = process.argv.includes("--join")
const modelMs = option("model-ms", 0)
process.env.EFFECT_AGENT_MODEL_MS = String(modelMs)
const shardingAt = process.argv.indexOf("--sharding")
if (shardingAt !== -1) process.env.EFFECT_AGENT_SHARDING = process.argv[shardingAt + 1]

/** How many times each runner lost its shard locks (a refresh that timed out: it gives up all its shards). */
const lockLosses = (logDir: string): Array<number> =>
  fs.readdirSync(logDir).filter((name) => /^runner-\d+\.log$/.test(name)).sort().map((name) =>
    fs.readFileSync(path.join(logDir, name), "utf8").split("Shard lock storage is unhealthy").length - 1
  )

const modelLines = (logDir: string) => {
  const file = path.join(logDir, "model.log")
  return fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0) : []
}

interface Call {
  readonly at: number
  readonly pid: number
}

/** The model calls of each session, by turn, from the log (`<sid> <turn> <time> <pid>` a line). */
const modelCalls = (lines: ReadonlyArray<string>): Map<string, Map<number, Array<Call>>> => {
  const bySession = new Map<string, Map<number, Array<Call>>>()
  for (const line of lines) {
    const [sid, turn, at, pid] = line.split(" ")
    const byTurn = bySession.get(sid!) ?? new Map<number, Array<Call>>()
    bySession.set(sid!, byTurn)
    const list = byTurn.get(Number(turn)) ?? []
    byTurn.set(Number(turn), list)
    list.push({ at: Number(at), pid: Number(pid) })
  }
  return bySession
}

/**
 * Per session: the model calls made again (calls of a turn after its first), against the kills the session lived
 * through (it had a call before the kill and one after); each repeat is put down to the runner that made the
 * first call: the killed one, or a survivor (a shard that moved between runners that stayed up).
 */
const extraCalls = (calls: Map<string, Map<number, Array<Call>>>, killedAt: number, killedPid: number | undefined) => {
  const violations: Array<string> = []
  let maxExtra = 0
  let livedThroughKill = 0
  let repeatedAfterKilledRunner = 0
  let repeatedAfterSurvivor = 0
  const survivorRepeatDelays: Array<number> = []
  for (const [sid, byTurn] of calls) {
    const all = Array.from(byTurn.values()).flat()
    const kills = killedPid !== undefined && all.some((call) => call.at <= killedAt) &&
        all.some((call) => call.at > killedAt)
      ? 1
      : 0
    livedThroughKill += kills
    let extra = 0
    for (const list of byTurn.values()) {
      extra += list.length - 1
      for (let i = 1; i < list.length; i++) {
        if (list[i - 1]!.pid === killedPid) repeatedAfterKilledRunner++
        else {
          repeatedAfterSurvivor++
          survivorRepeatDelays.push(list[i - 1]!.at - killedAt)
        }
      }
    }
    maxExtra = Math.max(maxExtra, extra)
    if (extra > kills) violations.push(`${sid}: ${extra} calls again, lived through ${kills} kill(s)`)
  }
  survivorRepeatDelays.sort((a, b) => a - b)
  return {
    violations,
    summary: {
      sessionsThroughKill: livedThroughKill,
      maxModelCallsAgainPerSession: maxExtra,
      sessionsOverBound: violations.length,
      repeatedAfterKilledRunner,
      repeatedAfterSurvivor,
      survivorRepeatMsAfterKill: survivorRepeatDelays.length === 0
        ? undefined
        : { min: survivorRepeatDelays[0], max: survivorRepeatDelays.at(-1) }
    }
  }
}

const program = Effect.gen(function*() {
  const pg = yield* Postgres.scoped
  const logDir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-bench-"))
  yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
  const children: Array<ReturnType<typeof spawn>> = []
  /** The shards each runner holds, as it last said. */
  const held: Array<number> = []
  yield* Effect.addFinalizer(() => Effect.sync(() => children.forEach((child) => child.kill("SIGKILL"))))
  const startRunner = Effect.fnUntraced(function*(r: number) {
    const port = yield* Effect.promise(Postgres.freePort)
    const out = fs.openSync(path.join(logDir, `runner-${r}.log`), "a")
    const child = spawn(
      process.execPath,
      ["--conditions=effect-agent-source", "test/session/durable-runner.ts", pg.url, String(port), logDir],
      { stdio: ["ignore", "pipe", out] }
    )
    children.push(child)
    held.push(0)
    yield* Effect.callback<void>((resume) => {
      child.stdout?.on("data", (data: Buffer) => {
        fs.writeSync(out, data)
        for (const line of data.toString().split("\n")) {
          if (line === "ready") resume(Effect.void)
          const shards = /^shards (\d+)$/.exec(line)
          if (shards !== null) held[r] = Number(shards[1])
        }
      })
    })
  })
  for (let r = 0; r < runnerCount; r++) yield* startRunner(r)
  // Sessions are submitted once the cluster has settled: every shard held, by every runner. (Submitted while
  // runners still join, a session can start on a shard that then moves to the joining runner: its call in
  // flight is interrupted after `entityTerminationTimeout` and made again there.)
  const settling = Date.now()
  const shardCount = sharding().shardsPerGroup ?? 300
  const settled = () => held.every((n) => n > 0) && held.reduce((a, b) => a + b, 0) === shardCount
  yield* Effect.sync(settled).pipe(
    Effect.repeat({ until: (done) => done, schedule: Schedule.spaced("200 millis") }),
    Effect.andThen(Effect.sleep("1 second")),
    Effect.repeat({ until: settled, schedule: Schedule.spaced("200 millis") }),
    Effect.timeout("120 seconds")
  )
  const settleSeconds = (Date.now() - settling) / 1000
  let report: Record<string, unknown> = {}
  let violations: ReadonlyArray<string> = []
  const ids = Array.from({ length: sessions }, (_, i) => `b${i}-t${turns}`)
  const total = sessions * (turns + 1)
  yield* Effect.gen(function*() {
    const started = Date.now()
    yield* Effect.forEach(ids, (sessionId) => DurableSession.start({ sessionId, prompt: sessionId }), {
      concurrency: 20,
      discard: true
    })
    const submitted = Date.now()
    // Kill the last runner once 40% of the model calls are made.
    yield* Effect.sync(() => modelLines(logDir).length).pipe(
      Effect.repeat({ until: (n) => n >= total * 0.4, schedule: Schedule.spaced("200 millis") })
    )
    const killedAt = Date.now()
    // With --join, a runner joins instead: shards move between live runners, and none dies.
    const killedPid = join ? undefined : children.at(-1)!.pid
    if (join) yield* startRunner(runnerCount)
    else children.at(-1)!.kill("SIGKILL")
    const statuses = yield* Effect.forEach(ids, DurableSession.poll, { concurrency: 20 }).pipe(
      Effect.repeat({
        until: (all) => all.every((status) => status._tag === "Finished" || status._tag === "Failed"),
        schedule: Schedule.spaced("1 second")
      })
    )
    const finished = Date.now()
    const completed = statuses.filter((s) => s._tag === "Finished" && s.result.outcome._tag === "Completed").length
    const calls = modelCalls(modelLines(logDir))
    const perSession = extraCalls(calls, killedAt, killedPid)
    // The longest pause of a session across the kill: its last model call before it, its first after.
    const pauses: Array<number> = []
    for (const byTurn of calls.values()) {
      const times = Array.from(byTurn.values()).flat().map((call) => call.at)
      const before = times.filter((t) => t <= killedAt)
      const after = times.filter((t) => t > killedAt)
      if (before.length > 0 && after.length > 0) pauses.push(Math.min(...after) - Math.max(...before))
    }
    pauses.sort((a, b) => a - b)
    const seconds = (finished - started) / 1000
    const totalCalls = modelLines(logDir).length
    report = {
      sessions,
      turns,
      runners: runnerCount,
      at40Percent: join ? "a runner joins" : "a runner is killed",
      modelMs,
      completed,
      seconds,
      settleSeconds,
      submitSeconds: (submitted - started) / 1000,
      turnsPerSecond: Math.round((sessions * turns) / seconds),
      modelCalls: totalCalls,
      modelCallsAgain: totalCalls - total,
      ...perSession.summary,
      lockLossesPerRunner: lockLosses(logDir),
      failoverPauseMs: { p50: pauses[Math.floor(pauses.length / 2)], max: pauses.at(-1) },
      loadAverage: os.loadavg().map((l) => Math.round(l * 10) / 10),
      cores: os.cpus().length,
      sharding: sharding()
    }
    violations = [
      ...statuses.flatMap((status, i) =>
        status._tag === "Finished" && status.result.outcome._tag === "Completed"
          ? []
          : [`${ids[i]}: ${status._tag === "Finished" ? status.result.outcome._tag : status._tag}`]
      ),
      ...perSession.violations
    ]
  }).pipe(Effect.provide(node(pg.url, undefined, logDir)))
  console.log(JSON.stringify(report, null, 2))
  if (violations.length > 0) {
    // the must-show: per session, at most one model call more than its turns per kill it lived through
    console.error(`sessions not completed, or with more model calls again than kills:\n${violations.join("\n")}`)
    console.error(`the runners' logs are kept in ${logDir}`)
    return yield* Effect.fail(new Error(`${violations.length} sessions failed the check`))
  }
  fs.rmSync(logDir, { recursive: true, force: true })
})

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(NodeServices.layer))).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
