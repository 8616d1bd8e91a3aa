/**
 * One durable row through one phase in a fresh process; prints one JSON line.
 *
 * A warm-up (sessions of the phase's shape, at least `warmupTurns` tool turns
 * and `warmupMs`), then the timed run: `rounds` rounds one after another,
 * each `sessions` sessions of T tool turns at once. Measured over the timed
 * run: this process's CPU (`process.cpuUsage`, user + system), PostgreSQL's
 * CPU (its postmaster and every child of it, from /proc), the wall time, the
 * transactions that wrote (transaction ids assigned) and the statements
 * executed in the row's database (`pg_stat_statements`, utility statements
 * such as BEGIN and COMMIT included). After the clock stops, every session's
 * transcript is read back from its store and checked message by message, and
 * the model and tool counts are checked.
 *
 * Usage: node child.ts <row> <json options>
 */
import { performance } from "node:perf_hooks"
import { type Counters, counters, loggedStatements, logOffset, serverCpuUs } from "./postgres.ts"
import { type Row, type RowOptions, Scripts, verifyTranscript } from "./workload.ts"

export const ROWS = ["agent-run", "session-files", "durable-pg-store", "durable-pg-engine", "durable-pg", "langgraph-pg", "langgraph-pg-sync"] as const
export type RowId = (typeof ROWS)[number]

export interface ChildOptions {
  /** `postgres://postgres@127.0.0.1:<port>/`. */
  readonly baseUrl: string
  /** The row's own database (fresh). */
  readonly database: string
  readonly postmasterPid: number
  /** The server's log, where the row's database's statements are lines. */
  readonly logFile: string
  /** A directory of the row's own. */
  readonly dir: string
  readonly turns: number
  readonly sessions: number
  readonly rounds: number
  readonly warmupTurns: number
  readonly warmupMs: number
}

export interface ChildResult {
  readonly row: RowId
  readonly name: string
  /** Tool turns in the timed run (rounds × sessions × T). */
  readonly turns: number
  readonly cpuUs: number
  readonly pgCpuUs: number
  readonly wallMs: number
  /** Transaction ids assigned during the timed run: the transactions that wrote. */
  readonly writingTransactions: number
  /** Statements executed in the row's database, counted in the server's log (`log_statement = all`). */
  readonly statements: number
  /**
   * The same, as `pg_stat_statements` counts them: it misses transaction control (BEGIN, COMMIT) that a driver
   * prepares once and executes again (`@effect/sql-pg` does; `pg`, LangGraph's, sends it as simple queries).
   */
  readonly statementsSeen: number
  /** The row's most frequent statements in the timed run (`pg_stat_statements`' normalized text). */
  readonly topStatements: ReadonlyArray<{ readonly calls: number; readonly query: string }>
  /** Events the sessions published (DurableSession's store), read back after the clock. */
  readonly events: number
}

const rows: Record<RowId, () => Promise<(options: RowOptions) => Promise<Row>>> = {
  "agent-run": async () => (await import("./effect-agent.ts")).agentRun,
  "session-files": async () => (await import("./effect-agent.ts")).sessionFiles,
  "durable-pg-store": async () => (await import("./effect-agent.ts")).durableStore,
  "durable-pg-engine": async () => (await import("./effect-agent.ts")).durableSqlEngine,
  "durable-pg": async () => (await import("./effect-agent.ts")).durableSession,
  "langgraph-pg": async () => (await import("./langgraph.ts")).langGraph,
  "langgraph-pg-sync": async () => (await import("./langgraph.ts")).langGraphSync
}

const isRowId = (name: string | undefined): name is RowId => ROWS.some((r) => r === name)

/** Runs `count` sessions of T turns at once, named `<prefix>-<k>`; answers their ids. */
const sessions = async (row: Row, scripts: Scripts, prefix: string, count: number, turns: number) => {
  const ids: Array<string> = []
  for (let k = 0; k < count; k++) {
    const id = `${prefix}-${k}`
    scripts.open(id, turns)
    ids.push(id)
  }
  await Promise.all(ids.map((id) => row.session(id, turns)))
  return ids
}

/** Reads each session back and checks its transcript and its model calls; answers the events read. */
const verify = async (row: Row, scripts: Scripts, ids: ReadonlyArray<string>, turns: number): Promise<number> => {
  let events = 0
  for (const id of ids) {
    const back = await row.readBack(id)
    verifyTranscript(row.name, id, turns, back.transcript)
    scripts.check(id, turns)
    events += back.events
  }
  return events
}

const main = async (): Promise<void> => {
  const [rowId, json] = process.argv.slice(2)
  if (!isRowId(rowId) || json === undefined) throw new Error(`usage: child.ts <${ROWS.join("|")}> <options>`)
  const options: ChildOptions = JSON.parse(json)
  const scripts = new Scripts()
  const row = await (await rows[rowId]())({ url: `${options.baseUrl}${options.database}`, dir: options.dir, scripts })
  // Warm-up: bounded in sessions (200 rounds) and in time (at most 10 × warmupMs, or 2 minutes).
  const warmupSessions = Math.min(options.sessions, 20)
  const warmupTurns = Math.min(options.turns, 20)
  const started = performance.now()
  const deadline = started + Math.max(10 * options.warmupMs, 120_000)
  let done = 0
  for (let round = 0; round < 200 && (done < options.warmupTurns || performance.now() - started < options.warmupMs); round++) {
    const ids = await sessions(row, scripts, `w${round}`, warmupSessions, warmupTurns)
    await verify(row, scripts, ids, warmupTurns)
    done += warmupSessions * warmupTurns
    if (performance.now() > deadline) break
  }
  const db: Counters = await counters(options.baseUrl)
  await db.resetStatements()
  const toolRunsBefore = scripts.toolRuns
  const xid = await db.nextXid()
  const logFrom = logOffset(options.logFile)
  const pgCpu = serverCpuUs(options.postmasterPid)
  const cpu = process.cpuUsage()
  const start = performance.now()
  const timed: Array<string> = []
  for (let round = 0; round < options.rounds; round++) {
    timed.push(...await sessions(row, scripts, `s${round}`, options.sessions, options.turns))
  }
  const wallMs = performance.now() - start
  const used = process.cpuUsage(cpu)
  const pgCpuUs = serverCpuUs(options.postmasterPid) - pgCpu
  const writingTransactions = await db.nextXid() - xid
  const logTo = logOffset(options.logFile)
  const statementsSeen = await db.statements(options.database)
  const topStatements = await db.topStatements(options.database, 12)
  // The clock has stopped: every transcript is read back and checked.
  const turns = options.rounds * options.sessions * options.turns
  const events = await verify(row, scripts, timed, options.turns)
  const statements = loggedStatements(options.logFile, options.database, logFrom, logTo)
  if (scripts.toolRuns - toolRunsBefore !== turns) {
    throw new Error(`${row.name}: the tool ran ${scripts.toolRuns - toolRunsBefore} times in the timed run, expected ${turns}`)
  }
  await db.close()
  const result: ChildResult = {
    row: rowId,
    name: row.name,
    turns,
    cpuUs: used.user + used.system,
    pgCpuUs,
    wallMs,
    writingTransactions,
    statements,
    statementsSeen,
    topStatements,
    events
  }
  // A row's layers may take a while to stop (the runner hands its shards back): bounded, then the process ends.
  await Promise.race([row.close(), new Promise((resolve) => setTimeout(resolve, 10_000).unref())])
  process.stdout.write(JSON.stringify(result) + "\n")
  process.exit(0)
}

await main()
