/**
 * Durable sessions across runner processes on one PostgreSQL: N sessions of
 * T turns (a scripted model; each turn calls a step and a charge that sleep
 * 40–160 ms) over R runner processes; one runner is SIGKILLed (and not
 * restarted) once 40% of the model calls are made, and its sessions finish
 * on the others. Prints throughput, the longest pause of a session across
 * the kill (failover), and the settings. A benchmark, not a test: it asserts
 * only that every session completed.
 *
 * Usage (from the repository root; PostgreSQL from /usr/lib/postgresql):
 *   node --conditions=effect-agent-source scripts/bench-durable-cluster.ts [--sessions 1000] [--turns 10] [--runners 3]
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

const modelLines = (logDir: string) => {
  const file = path.join(logDir, "model.log")
  return fs.existsSync(file) ? fs.readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0) : []
}

const program = Effect.gen(function*() {
  const pg = yield* Postgres.scoped
  const logDir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-bench-"))
  yield* DurableSession.migrateSql.pipe(Effect.provide(database(pg.url)))
  const children: Array<ReturnType<typeof spawn>> = []
  yield* Effect.addFinalizer(() => Effect.sync(() => children.forEach((child) => child.kill("SIGKILL"))))
  for (let r = 0; r < runnerCount; r++) {
    const port = yield* Effect.promise(Postgres.freePort)
    const out = fs.openSync(path.join(logDir, `runner-${r}.log`), "a")
    const child = spawn(
      process.execPath,
      ["--conditions=effect-agent-source", "test/session/durable-runner.ts", pg.url, String(port), logDir],
      { stdio: ["ignore", "pipe", out] }
    )
    children.push(child)
    yield* Effect.callback<void>((resume) => {
      child.stdout?.on("data", (data: Buffer) => {
        if (data.toString().includes("ready")) resume(Effect.void)
      })
    })
  }
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
    children.at(-1)!.kill("SIGKILL")
    const statuses = yield* Effect.forEach(ids, DurableSession.poll, { concurrency: 20 }).pipe(
      Effect.repeat({
        until: (all) => all.every((status) => status._tag === "Finished" || status._tag === "Failed"),
        schedule: Schedule.spaced("1 second")
      })
    )
    const finished = Date.now()
    const completed = statuses.filter((s) => s._tag === "Finished" && s.result.outcome._tag === "Completed").length
    // The longest pause of a session across the kill: its last model call before it, its first after.
    const bySession = new Map<string, Array<number>>()
    for (const line of modelLines(logDir)) {
      const [sid, , at] = line.split(" ")
      const times = bySession.get(sid!) ?? []
      times.push(Number(at))
      bySession.set(sid!, times)
    }
    const pauses: Array<number> = []
    for (const times of bySession.values()) {
      const before = times.filter((t) => t <= killedAt)
      const after = times.filter((t) => t > killedAt)
      if (before.length > 0 && after.length > 0) pauses.push(Math.min(...after) - Math.max(...before))
    }
    pauses.sort((a, b) => a - b)
    const seconds = (finished - started) / 1000
    const modelCalls = modelLines(logDir).length
    console.log(JSON.stringify(
      {
        sessions,
        turns,
        runners: runnerCount,
        completed,
        seconds,
        submitSeconds: (submitted - started) / 1000,
        turnsPerSecond: Math.round((sessions * turns) / seconds),
        modelCalls,
        modelCallsAgain: modelCalls - total,
        failoverPauseMs: { p50: pauses[Math.floor(pauses.length / 2)], max: pauses.at(-1) },
        loadAverage: os.loadavg().map((l) => Math.round(l * 10) / 10),
        cores: os.cpus().length,
        sharding: sharding()
      },
      null,
      2
    ))
  }).pipe(Effect.provide(node(pg.url, undefined, logDir)))
  fs.rmSync(logDir, { recursive: true, force: true })
})

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(NodeServices.layer))).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
