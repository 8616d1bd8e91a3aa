/**
 * The durable rows (issue 33): what a turn costs when it is kept, on one local
 * PostgreSQL started here (durable defaults), next to LangGraph.js with its
 * PostgreSQL checkpointer. Rows interleaved, their order rotated each run;
 * each row and phase in its own process (`child.ts`) on a fresh database.
 *
 * Usage (from the repository root): npm run bench -- --durable [options]
 *   --runs N       runs per row and phase (default 3)
 *   --quick        one run, shorter warm-ups (a harness check; RESULTS.md says so)
 *   --smoke        tiny workload, one run, nothing written
 *   --only a,b     rows (agent-run, session-files, durable-pg-store, durable-pg-engine, durable-pg, langgraph-pg, langgraph-pg-sync)
 *   --phases p,q   phases (t20, t200, concurrent)
 *   --no-write     print only
 *
 * Without PostgreSQL (Debian's, under /usr/lib/postgresql, with pg_stat_statements) it says why and
 * writes nothing.
 */
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { fmt, num, ratio, type Stat, stat } from "../stats.ts"
import type { ChildOptions, ChildResult, RowId } from "./child.ts"
import { availability, createDatabase, dropDatabase, type Server, start } from "./postgres.ts"

const here = path.dirname(fileURLToPath(import.meta.url))
const benchDir = path.dirname(here)
const rootDir = path.dirname(benchDir)

const ALL_ROWS: ReadonlyArray<RowId> = ["agent-run", "session-files", "durable-pg-store", "durable-pg-engine", "durable-pg", "langgraph-pg", "langgraph-pg-sync"]
/** The peer every ratio is to. */
const PEER: RowId = "langgraph-pg"

const args = process.argv.slice(2)
const flag = (name: string) => args.includes(`--${name}`)
const value = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}
const smoke = flag("smoke")
const quick = flag("quick") || smoke
const runs = Number(value("runs") ?? (quick ? 1 : 3))
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${value("runs")}`)
const write = !flag("no-write") && !smoke

interface PhaseSpec {
  readonly id: string
  readonly title: string
  readonly turns: number
  readonly sessions: number
  /** Rounds of `sessions` sessions, one after another. */
  readonly rounds: number
}

const size = smoke
  ? { short: 3, long: 6, sessions: 4, concurrentTurns: 2, shortRounds: 2 }
  : { short: 20, long: 200, sessions: 100, concurrentTurns: 10, shortRounds: 5 }
const warmup = smoke
  ? { warmupTurns: 2, warmupMs: 0 }
  : quick
  ? { warmupTurns: 60, warmupMs: 1000 }
  : { warmupTurns: 200, warmupMs: 3000 }

const ALL_PHASES: ReadonlyArray<PhaseSpec> = [
  {
    id: "t20",
    title: `One session, T = ${size.short} (${size.shortRounds} sessions one after another)`,
    turns: size.short,
    sessions: 1,
    rounds: size.shortRounds
  },
  { id: "t200", title: `One session, T = ${size.long}`, turns: size.long, sessions: 1, rounds: 1 },
  {
    id: "concurrent",
    title: `${size.sessions} concurrent sessions, T = ${size.concurrentTurns}`,
    turns: size.concurrentTurns,
    sessions: size.sessions,
    rounds: 1
  }
]

const pick = <A extends string>(name: string, all: ReadonlyArray<A>): ReadonlyArray<A> => {
  const raw = value(name)
  if (raw === undefined) return all
  const wanted = raw.split(",")
  const unknown = wanted.filter((w) => !all.some((a) => a === w))
  if (unknown.length > 0) throw new Error(`--${name}: unknown ${unknown.join(", ")}; one of ${all.join(", ")}`)
  return all.filter((a) => wanted.includes(a))
}

const phases = (() => {
  // `--phases durable` (how bench/run.ts is asked for these rows) is all of them.
  const ids = value("phases") === "durable" ? ALL_PHASES.map((p) => p.id) : pick("phases", ALL_PHASES.map((p) => p.id))
  return ALL_PHASES.filter((p) => ids.includes(p.id))
})()

// -----------------------------------------------------------------------------
// Running
// -----------------------------------------------------------------------------

let databases = 0

const runChild = async (row: RowId, spec: PhaseSpec, server: Server): Promise<ChildResult> => {
  const database = `bench_${process.pid}_${databases++}`
  await createDatabase(server, database)
  const dir = mkdtempSync(path.join(os.tmpdir(), "effect-agent-bench-files-"))
  try {
    const options: ChildOptions = {
      baseUrl: server.baseUrl,
      database,
      postmasterPid: server.postmasterPid,
      logFile: server.logFile,
      dir,
      turns: spec.turns,
      sessions: spec.sessions,
      rounds: spec.rounds,
      ...warmup
    }
    const child = spawnSync(process.execPath, [path.join(here, "child.ts"), row, JSON.stringify(options)], {
      cwd: benchDir,
      encoding: "utf8",
      maxBuffer: 16 * 1024 * 1024,
      timeout: 20 * 60 * 1000
    })
    if (child.status !== 0) {
      throw new Error(`${row} / ${spec.id} failed (${child.status ?? child.signal}):\n${child.stderr}\n${child.stdout}`)
    }
    return JSON.parse(child.stdout.trim().split("\n").at(-1) ?? "")
  } finally {
    rmSync(dir, { recursive: true, force: true })
    await dropDatabase(server, database)
  }
}

type Results = Map<string, Map<RowId, Array<ChildResult>>>

const runAll = async (rows: ReadonlyArray<RowId>, server: Server): Promise<Results> => {
  const results: Results = new Map(phases.map((p) => [p.id, new Map(rows.map((r) => [r, []]))]))
  for (let run = 0; run < runs; run++) {
    for (const spec of phases) {
      const order = rows.map((_, i) => rows[(i + run) % rows.length]!)
      for (const row of order) {
        const r = await runChild(row, spec, server)
        results.get(spec.id)!.get(row)!.push(r)
        console.error(
          `run ${run + 1}/${runs} ${spec.id.padEnd(10)} ${row.padEnd(18)} ` +
            `${(r.cpuUs / r.turns).toFixed(0).padStart(6)} µs CPU, ${(r.pgCpuUs / r.turns).toFixed(0).padStart(6)} µs PostgreSQL, ` +
            `${(r.wallMs / r.turns).toFixed(2)} ms wall, ${(r.writingTransactions / r.turns).toFixed(1)} writing tx, ` +
            `${(r.statements / r.turns).toFixed(1)} statements / turn`
        )
      }
    }
  }
  return results
}

// -----------------------------------------------------------------------------
// Aggregation
// -----------------------------------------------------------------------------

type Metric = (r: ChildResult) => number
const cpu: Metric = (r) => r.cpuUs / r.turns
const pgCpu: Metric = (r) => r.pgCpuUs / r.turns
const both: Metric = (r) => (r.cpuUs + r.pgCpuUs) / r.turns
const wall: Metric = (r) => r.wallMs / r.turns
const writes: Metric = (r) => r.writingTransactions / r.turns
const statements: Metric = (r) => r.statements / r.turns

const ratios = (mine: ReadonlyArray<ChildResult>, base: ReadonlyArray<ChildResult>, metric: Metric): Stat =>
  stat(mine.map((r, i) => metric(r) / metric(base[i]!)))

interface Table {
  readonly title: string
  readonly header: ReadonlyArray<string>
  readonly rows: ReadonlyArray<ReadonlyArray<string>>
}

const tables = (results: Results, rows: ReadonlyArray<RowId>): Array<Table> =>
  phases.map((spec) => {
    const byRow = results.get(spec.id)!
    const peer = byRow.get(PEER)
    const vsPeer = (mine: ReadonlyArray<ChildResult>, metric: Metric) =>
      peer === undefined ? "–" : ratio(ratios(mine, peer, metric))
    return {
      title: spec.title,
      header: [
        "row",
        "CPU µs / turn",
        "× LangGraph",
        "PostgreSQL CPU µs / turn",
        "× LangGraph",
        "wall ms / turn",
        "× LangGraph",
        "writing transactions / turn",
        "statements / turn"
      ],
      rows: rows.map((r) => {
        const mine = byRow.get(r)!
        return [
          mine[0]!.name,
          fmt(stat(mine.map(cpu))),
          vsPeer(mine, cpu),
          fmt(stat(mine.map(pgCpu))),
          r === "agent-run" || r === "session-files" ? "–" : vsPeer(mine, pgCpu),
          fmt(stat(mine.map(wall))),
          vsPeer(mine, wall),
          r === "agent-run" ? "–" : r === "session-files" ? "(files)" : fmt(stat(mine.map(writes)), 1),
          r === "agent-run" || r === "session-files" ? "–" : fmt(stat(mine.map(statements)), 1)
        ]
      })
    }
  })

/** Issue 33's goal, on the medians of the per-run ratios: DurableSession at most 0.5× LangGraph, at most 2 writes a turn. */
const goals = (results: Results): Table | undefined => {
  const out: Array<Array<string>> = []
  for (const [id, engine] of [["durable-pg-engine", "own SQL engine"], ["durable-pg", "cluster"]] as const) {
    for (const spec of phases) {
      const mine = results.get(spec.id)?.get(id)
      const peer = results.get(spec.id)?.get(PEER)
      if (mine === undefined) continue
      const row = (what: string, measured: number, limit: number, unit: string) =>
        out.push([`${engine}, ${spec.title}: ${what}`, `${num(measured)}${unit}`, `≤ ${limit}${unit}`, measured <= limit ? "met" : "missed"])
      if (peer !== undefined) {
        row("CPU (this process), × LangGraph", ratios(mine, peer, cpu).median, 0.5, "×")
        row("CPU (this process + PostgreSQL), × LangGraph", ratios(mine, peer, both).median, 0.5, "×")
        row("wall, × LangGraph", ratios(mine, peer, wall).median, 0.5, "×")
      }
      row("writing transactions / turn", stat(mine.map(writes)).median, 2, "")
    }
  }
  return out.length === 0
    ? undefined
    : { title: "`DurableSession` against issue 33's goal (medians)", header: ["goal", "measured", "goal", ""], rows: out }
}

/** Where the statements go: the most frequent ones of the durable rows, in the first phase's first run. */
const statementTables = (results: Results, rows: ReadonlyArray<RowId>): Array<Table> => {
  const spec = phases[0]
  if (spec === undefined) return []
  return rows.filter((r) => r === "durable-pg-store" || r === "durable-pg-engine" || r === "durable-pg" || r === PEER || r === "langgraph-pg-sync").flatMap((r) => {
    const first = results.get(spec.id)?.get(r)?.[0]
    if (first === undefined || first.topStatements.length === 0) return []
    return [{
      title: `${first.name}: its most frequent statements, ${spec.title} (run 1; \`pg_stat_statements\` saw ` +
        `${num(first.statementsSeen / first.turns, 1)} a turn of the ${num(first.statements / first.turns, 1)} logged)`,
      header: ["statement (normalized; `pg_stat_statements`)", "per turn"],
      rows: first.topStatements.map((s) => [
        `\`${s.query.replace(/\s+/g, " ").replace(/\|/g, "\\|").replace(/`/g, "'").slice(0, 140)}\``,
        num(s.calls / first.turns, 2)
      ])
    }]
  })
}

// -----------------------------------------------------------------------------
// Report
// -----------------------------------------------------------------------------

const markdownTable = (t: Table): string =>
  [
    `| ${t.header.join(" | ")} |`,
    `|${t.header.map((_, i) => (i === 0 ? "---" : "--:")).join("|")}|`,
    ...t.rows.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")

const textTable = (t: Table): string => {
  const widths = t.header.map((h, i) => Math.max(h.length, ...t.rows.map((r) => r[i]!.length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ")
  return [line(t.header), widths.map((w) => "-".repeat(w)).join("  "), ...t.rows.map(line)].join("\n")
}

const uptime = (): string => {
  const r = spawnSync("uptime", [], { encoding: "utf8" })
  return r.status === 0 ? r.stdout.trim() : `load average: ${os.loadavg().map((l) => l.toFixed(2)).join(", ")}`
}

const versionOf = (dir: string, pkg: string): string => {
  try {
    return JSON.parse(readFileSync(path.join(dir, "node_modules", pkg, "package.json"), "utf8")).version
  } catch {
    return "not installed"
  }
}

const gitHead = (): string => {
  const r = spawnSync("git", ["rev-parse", "--short", "HEAD"], { cwd: rootDir, encoding: "utf8" })
  return r.status === 0 ? r.stdout.trim() : "unknown"
}

export const START = "<!-- durable:start -->"
export const END = "<!-- durable:end -->"

const report = (all: ReadonlyArray<Table>, server: Server, loadStart: string, loadEnd: string): string => {
  const label = quick
    ? `QUICK RUN: ${runs} run per row and phase, short warm-ups, on a shared machine; a harness check, not the measured result.`
    : `${runs} runs per row and phase, rows interleaved, after a warm-up in each row's process.`
  return [
    START,
    "## Durable rows: a turn kept on PostgreSQL, next to LangGraph.js",
    "",
    `**${label}**`,
    "",
    `- Load at start: \`${loadStart}\``,
    `- Load at end: \`${loadEnd}\``,
    `- Date: ${new Date().toISOString()}; Node ${process.version}; effect-agent ${gitHead()}; effect ${versionOf(rootDir, "effect")}, ` +
    `@effect/sql-pg ${versionOf(rootDir, "@effect/sql-pg")}; PostgreSQL ${server.version}; ` +
    `@langchain/langgraph ${versionOf(benchDir, "@langchain/langgraph")}, @langchain/langgraph-checkpoint-postgres ` +
    `${versionOf(benchDir, "@langchain/langgraph-checkpoint-postgres")}, @langchain/core ${versionOf(benchDir, "@langchain/core")}, ` +
    `pg ${versionOf(benchDir, "pg")}`,
    "",
    "Reproduce: `npm run bench -- --durable` from the repository root (`--durable --help` lists the options).",
    "",
    "One PostgreSQL server, started by the bench (`bench/durable/postgres.ts`: `initdb` into a temporary directory",
    "on the machine's disk, 127.0.0.1), with the durable defaults: `fsync`, `synchronous_commit` and",
    "`full_page_writes` on. Each row and phase runs in its own process on a database of its own, created empty",
    "for it. The workload: a scripted zero-latency model, one tool call a turn (the turn's text, then",
    "`noop({ i })`), T tool turns, then a final answer. After the clock stops, every session's transcript is",
    "read back from where it was kept (the checkpoint files; the workflow's stored result; LangGraph's latest",
    "checkpoint) and compared message by message with the script's; the model calls and tool runs are counted.",
    "",
    "- **`Agent.run`**: no persistence, the floor. **`Session` on files**: `CheckpointStore.fileSystem` in a",
    "  temporary directory on the same disk (a head and a journal, fsynced, each turn).",
    "- **`DurableSession`**: `DurableSession.run` on `ClusterWorkflowEngine` over a `SingleRunner` (SQL message",
    "  and runner storage) and `@effect/sql-pg`'s `PgClient` (10 connections), `DurableSession.layerSqlStore`;",
    "  effect's default sharding settings. **Its store alone**: the same on `WorkflowEngine.layerMemory` (the",
    "  activities kept in memory, not durable): what the session's events, inbox and rows cost, apart from the",
    "  engine. **Own SQL engine**: `DurableSession.run` on `DurableSession.layerSqlEngine()` (its default lease",
    "  and poll) and `layerSqlStore` on the same `PgClient`: the sessions' own engine, in the store's database.",
    "- **LangGraph.js**: `createReactAgent` with `PostgresSaver` (its `pg` pool, 10 connections), one thread per",
    "  session, a `BaseChatModel` playing the script and one `tool()`. Its default is `durability: \"async\"` (a",
    "  step's checkpoint is written while the next step runs; `invoke` returns once all are written): the peer",
    "  of every ratio. The `durability: \"sync\"` row writes each step's checkpoint before the next starts.",
    "",
    "Per tool turn, medians (min–max) over the runs, ratios per run to LangGraph's default row, then the median.",
    "*CPU*: the row's process (`process.cpuUsage`, user + system). *PostgreSQL CPU*: the server's, apart (its",
    "postmaster, the children it reaped and every live child, from `/proc/<pid>/stat`; background work such as the",
    "checkpointer and autovacuum included, 10 ms ticks). *Writing transactions*: transaction ids assigned during",
    "the timed run (`pg_snapshot_xmax(pg_current_snapshot())` before and after): PostgreSQL gives a transaction an",
    "id only when it first writes, so read-only transactions are not counted, and the readings assign none",
    "(`pg_stat_database.xact_commit` counts every commit, reads included, and is flushed up to a second late; a",
    "subtransaction that writes gets an id of its own, and would count). *Statements*: the lines the server logged",
    "for the row's database (`log_statement = all` on it, for every row alike; each simple query and each execute of",
    "a prepared one, BEGIN and COMMIT included). `pg_stat_statements`, whose counts the tables of the most frequent",
    "statements show, misses the BEGIN and COMMIT that `@effect/sql-pg` prepares once and executes again (`pg`,",
    "LangGraph's driver, sends them as simple queries, which it counts).",
    "",
    ...all.flatMap((t) => [`### ${t.title}`, "", markdownTable(t), ""]),
    END
  ].join("\n")
}

/** Replaces the durable section of RESULTS.md (or appends it). */
const writeSection = (section: string) => {
  const file = path.join(benchDir, "RESULTS.md")
  const current = existsSync(file) ? readFileSync(file, "utf8") : "# Benchmarks\n"
  const start = current.indexOf(START)
  const end = current.indexOf(END)
  const next = start >= 0 && end > start
    ? current.slice(0, start) + section + current.slice(end + END.length)
    : `${current.trimEnd()}\n\n${section}\n`
  writeFileSync(file, next)
}

export const main = async (): Promise<void> => {
  if (flag("help")) {
    console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0])
    return
  }
  const found = availability()
  if ("unavailable" in found) {
    console.error(`durable rows: skipped, ${found.unavailable}`)
    return
  }
  const rows = pick("only", ALL_ROWS)
  const loadStart = uptime()
  const server = await start()
  try {
    console.error(
      `${runs} run(s) × ${phases.length} phase(s) × ${rows.length} row(s); PostgreSQL ${server.version} in ${server.dir}; ${loadStart}`
    )
    const results = await runAll(rows, server)
    const all = tables(results, rows)
    const goal = goals(results)
    if (goal !== undefined) all.unshift(goal)
    all.push(...statementTables(results, rows))
    const loadEnd = uptime()
    for (const t of all) console.log(`\n${t.title}\n${textTable(t)}`)
    console.log(`\nload at start: ${loadStart}\nload at end:   ${loadEnd}`)
    if (write) {
      writeSection(report(all, server, loadStart, loadEnd))
      console.log(`\nwritten ${path.relative(process.cwd(), path.join(benchDir, "RESULTS.md"))}`)
    }
  } finally {
    server.stop()
  }
}
