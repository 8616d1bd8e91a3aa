/**
 * One local PostgreSQL server for the durable rows, started by the bench
 * itself: `initdb` into a temporary directory, `pg_ctl` on 127.0.0.1 and a free
 * port (its unix socket in the same directory), with the durable defaults
 * (`fsync` and `synchronous_commit` on, `full_page_writes` on) and
 * `pg_stat_statements` preloaded, to count statements.
 *
 * The binaries are Debian's (`/usr/lib/postgresql/<version>/bin`, version 15
 * preferred). `initdb` refuses to run as root: as root, the server runs as
 * `nobody` (through `runuser`), which owns the temporary directory.
 *
 * Also here: what a child reads before and after its timed run (the server's
 * CPU from /proc, the next transaction id, the statement count).
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import pg from "pg"

/** The server, as the runner hands it to each child. */
export interface Server {
  /** `postgres://postgres@127.0.0.1:<port>/` (append a database name). */
  readonly baseUrl: string
  /** The server's log: each statement of a row's database is a line (`log_statement = all` on it). */
  readonly logFile: string
  /** The postmaster's process id: its CPU and its children's are the server's. */
  readonly postmasterPid: number
  readonly version: string
}

/** Why there is no server, or where its binaries are. */
export const availability = (): { readonly unavailable: string } | { readonly bin: string } => {
  if (process.platform !== "linux") return { unavailable: "the durable rows run on Linux only (PostgreSQL's CPU is read from /proc)" }
  const root = "/usr/lib/postgresql"
  const versions = fs.existsSync(root)
    ? fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, "bin", "initdb")))
    : []
  if (versions.length === 0) return { unavailable: "no PostgreSQL under /usr/lib/postgresql (apt-get install postgresql-15)" }
  const chosen = versions.includes("15") ? "15" : versions.sort((a, b) => Number(b) - Number(a))[0]!
  const bin = path.join(root, chosen, "bin")
  const lib = spawnSync(path.join(bin, "pg_config"), ["--sharedir"], { encoding: "utf8" })
  const share = lib.status === 0 ? lib.stdout.trim() : path.join("/usr/share/postgresql", chosen)
  if (!fs.existsSync(path.join(share, "extension", "pg_stat_statements.control"))) {
    return { unavailable: `PostgreSQL ${chosen} has no pg_stat_statements (its contrib modules: postgresql-contrib)` }
  }
  if (isRoot() && runuser() === undefined) {
    return { unavailable: "running as root without runuser, and initdb refuses root (apt-get install util-linux)" }
  }
  return { bin }
}

const isRoot = (): boolean => process.getuid?.() === 0

const runuser = (): string | undefined =>
  [...(process.env.PATH ?? "").split(":").filter((dir) => dir !== ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"]
    .map((dir) => path.join(dir, "runuser"))
    .find((file) => fs.existsSync(file))

/** Runs a PostgreSQL binary, as `nobody` when this process is root. */
const run = (bin: string, args: ReadonlyArray<string>): string => {
  const asNobody = isRoot() ? runuser() : undefined
  const [file, argv] = asNobody === undefined ? [bin, [...args]] : [asNobody, ["-u", "nobody", "--", bin, ...args]]
  return execFileSync(file, argv, { stdio: ["ignore", "pipe", "pipe"], timeout: 120_000, encoding: "utf8" })
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * Starts the server (the durable defaults: fsync, synchronous_commit and full_page_writes on), creates
 * `pg_stat_statements` in the `postgres` database, and answers it with its `stop`.
 */
export const start = async (): Promise<Server & { readonly stop: () => void; readonly dir: string }> => {
  const found = availability()
  if ("unavailable" in found) throw new Error(found.unavailable)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-bench-pg-"))
  fs.chmodSync(dir, 0o755)
  if (isRoot()) execFileSync("chown", ["-R", "nobody", dir])
  const data = path.join(dir, "data")
  const port = await freePort()
  const ctl = path.join(found.bin, "pg_ctl")
  run(path.join(found.bin, "initdb"), ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync"])
  const options = [
    "-c listen_addresses=127.0.0.1",
    `-p ${port}`,
    `-k ${dir}`,
    "-c max_connections=200",
    // The durable defaults, said out loud.
    "-c fsync=on",
    "-c synchronous_commit=on",
    "-c full_page_writes=on",
    "-c shared_preload_libraries=pg_stat_statements",
    "-c pg_stat_statements.track=top",
    "-c pg_stat_statements.track_utility=on"
  ].join(" ")
  run(ctl, ["-D", data, "-l", path.join(dir, "log"), "-o", options, "-w", "-t", "120", "start"])
  const stop = () => {
    try {
      run(ctl, ["-D", data, "-m", "immediate", "-w", "stop"])
    } catch {
      // already stopped
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
  process.once("exit", stop)
  const postmasterPid = Number(fs.readFileSync(path.join(data, "postmaster.pid"), "utf8").split("\n")[0])
  const baseUrl = `postgres://postgres@127.0.0.1:${port}/`
  const client = new pg.Client({ connectionString: `${baseUrl}postgres` })
  await client.connect()
  try {
    await client.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    // Each log line starts with its database's name, so a row's statements can be counted in the log.
    await client.query(`ALTER SYSTEM SET log_line_prefix = '${LOG_PREFIX}'`)
    await client.query("SELECT pg_reload_conf()")
    const version = (await client.query<{ server_version: string }>("SHOW server_version")).rows[0]!.server_version
    return {
      baseUrl,
      logFile: path.join(dir, "log"),
      postmasterPid,
      version,
      dir,
      stop: () => {
        process.removeListener("exit", stop)
        stop()
      }
    }
  } finally {
    await client.end()
  }
}

/** `log_line_prefix`: the database's name, then `|`. */
const LOG_PREFIX = "%d|"

/**
 * Creates a fresh database for one child (each row starts on empty tables), its statements logged
 * (`log_statement = all`), or drops it.
 */
/**
 * For a script run by hand: starts a server, creates the database `name` on it, runs `body` with the server, its
 * counters and the database's URL, and stops the server. Without PostgreSQL it says why and runs nothing.
 */
export const withDatabase = async (
  name: string,
  body: (context: { readonly server: Server; readonly counters: Counters; readonly url: string }) => Promise<void>
): Promise<void> => {
  const found = availability()
  if ("unavailable" in found) {
    console.log(`no PostgreSQL: ${found.unavailable}`)
    return
  }
  const server = await start()
  const counted = await counters(server.baseUrl)
  try {
    await createDatabase(server, name)
    await body({ server, counters: counted, url: `${server.baseUrl}${name}` })
  } finally {
    await counted.close()
    server.stop()
  }
}

export const createDatabase = async (server: Pick<Server, "baseUrl">, name: string): Promise<void> => {
  const client = new pg.Client({ connectionString: `${server.baseUrl}postgres` })
  await client.connect()
  try {
    await client.query(`CREATE DATABASE ${name}`)
    await client.query(`ALTER DATABASE ${name} SET log_statement = 'all'`)
  } finally {
    await client.end()
  }
}

export const dropDatabase = async (server: Pick<Server, "baseUrl">, name: string): Promise<void> => {
  const client = new pg.Client({ connectionString: `${server.baseUrl}postgres` })
  await client.connect()
  try {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  } finally {
    await client.end()
  }
}

// -----------------------------------------------------------------------------
// Counters
// -----------------------------------------------------------------------------

const clockTicks = (() => {
  const r = spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" })
  const ticks = r.status === 0 ? Number(r.stdout.trim()) : 100
  return Number.isFinite(ticks) && ticks > 0 ? ticks : 100
})()

/** Fields of /proc/<pid>/stat after the command (which may hold spaces), from field 3 (`state`) on. */
const statFields = (pid: number | string): ReadonlyArray<string> | undefined => {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return text.slice(text.lastIndexOf(")") + 2).split(" ")
  } catch {
    return undefined // gone
  }
}

/**
 * The server's CPU time so far, µs: the postmaster's own and that of its children it has reaped
 * (`cutime`, `cstime`), plus each live child's (backends, checkpointer, WAL writer, autovacuum). A backend
 * that exits moves its time into the postmaster's reaped total, so nothing is lost between two readings.
 */
export const serverCpuUs = (postmasterPid: number): number => {
  const own = statFields(postmasterPid)
  if (own === undefined) throw new Error(`the PostgreSQL postmaster (${postmasterPid}) is gone`)
  // From field 3: utime is field 14 (index 11), stime 15, cutime 16, cstime 17; ppid is field 4 (index 1).
  let ticks = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14])
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    const fields = statFields(entry)
    if (fields === undefined || Number(fields[1]) !== postmasterPid) continue
    ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])
  }
  return (ticks * 1_000_000) / clockTicks
}

/** A connection to the `postgres` database that reads the counters (its own statements are not counted). */
export interface Counters {
  /**
   * The next transaction id (`pg_snapshot_xmax(pg_current_snapshot())`, which assigns none itself). PostgreSQL
   * gives a transaction an id only when it first writes, so the difference of two readings is the number of
   * transactions that wrote, read-only ones (and this connection's readings) not counted.
   */
  readonly nextXid: () => Promise<number>
  /** Statements executed in the database so far since the last reset (`pg_stat_statements`, utility ones included). */
  readonly statements: (database: string) => Promise<number>
  /** The statements of the database by count, most first (to see where they go). */
  readonly topStatements: (database: string, limit: number) => Promise<ReadonlyArray<{ readonly calls: number; readonly query: string }>>
  readonly resetStatements: () => Promise<void>
  readonly close: () => Promise<void>
}

export const counters = async (baseUrl: string): Promise<Counters> => {
  const client = new pg.Client({ connectionString: `${baseUrl}postgres` })
  await client.connect()
  const byDatabase = "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1"
  return {
    nextXid: async () =>
      Number((await client.query<{ x: string }>("SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS x")).rows[0]!.x),
    statements: async (database) =>
      Number((await client.query<{ n: string | null }>(`SELECT sum(s.calls)::text AS n ${byDatabase}`, [database])).rows[0]!.n ?? 0),
    topStatements: async (database, limit) =>
      (await client.query<{ calls: string; query: string }>(
        `SELECT s.calls::text AS calls, s.query ${byDatabase} ORDER BY s.calls DESC LIMIT ${Math.trunc(limit)}`,
        [database]
      )).rows.map((r) => ({ calls: Number(r.calls), query: r.query })),
    resetStatements: async () => {
      await client.query("SELECT pg_stat_statements_reset()")
    },
    close: () => client.end()
  }
}

/** Where the log ends now. */
export const logOffset = (logFile: string): number => fs.statSync(logFile).size

/**
 * The statements of a database logged between two offsets (`log_statement = all`): each is one line
 * `<database>|… LOG:  statement: …` (simple protocol) or `… LOG:  execute <name>: …` (extended protocol, prepared
 * statements included), continuation lines of a statement not counted.
 */
export const loggedStatements = (logFile: string, database: string, from: number, to: number): number => {
  const fd = fs.openSync(logFile, "r")
  try {
    const buffer = Buffer.alloc(to - from)
    const read = fs.readSync(fd, buffer, 0, buffer.length, from)
    let count = 0
    for (const line of buffer.subarray(0, read).toString("utf8").split("\n")) {
      if (line.startsWith(`${database}|`) && /LOG: {2}(statement|execute [^:]*):/.test(line)) count++
    }
    return count
  } finally {
    fs.closeSync(fd)
  }
}
