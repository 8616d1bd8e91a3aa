/**
 * A PostgreSQL server for tests, started as a local process: a copy of a
 * data directory `initdb` made once (per version and user, in the temporary
 * directory), `pg_ctl` on 127.0.0.1 and a free port, stopped (and the
 * directory removed) at the end of the scope, or when the process exits.
 *
 * The binaries are Debian's (`/usr/lib/postgresql/<version>/bin`; `.ci/run`
 * installs the `postgresql` package when they are missing). `initdb` refuses
 * to run as root: as root, the server runs as `nobody` (through `runuser`),
 * which owns the temporary directory.
 */
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

/** A running server. */
export interface Postgres {
  readonly url: string
  /** Restarts the server (fast shutdown: open connections are cut). */
  readonly restart: () => void
  /** Stops the server (fast shutdown: open connections are cut); {@link up} starts it again. */
  readonly down: () => void
  /** Starts the server again after {@link down}. */
  readonly up: () => void
}

/** Why there is no server: printed by the tests that skip. */
export type Unavailable = { readonly unavailable: string }

const binDir = (): string | undefined => {
  const root = "/usr/lib/postgresql"
  if (!fs.existsSync(root)) return undefined
  const versions = fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, "bin", "initdb")))
  versions.sort((a, b) => Number(b) - Number(a))
  return versions.length === 0 ? undefined : path.join(root, versions[0]!, "bin")
}

/** Whether `port` on 127.0.0.1 can be listened on now (0: any); the port listened on, or undefined. */
const bindable = (port: number): Promise<number | undefined> =>
  new Promise((resolve) => {
    const server = net.createServer()
    server.once("error", () => resolve(undefined))
    server.listen(port, "127.0.0.1", () => {
      const address = server.address()
      const bound = typeof address === "object" && address !== null ? address.port : undefined
      server.close(() => resolve(bound))
    })
  })

/**
 * A free TCP port on 127.0.0.1, for a server started next (PostgreSQL, a runner). Chosen below Linux's
 * ephemeral range (32768–60999), which the kernel also gives to outgoing connections: a port it handed out for
 * listening was taken by a connection of another suite before PostgreSQL could bind it (seen at load 28:
 * "could not bind IPv4 address: Address already in use"). Below it, only another test choosing at random can
 * take it, and a server started on it may be restarted on the same port.
 */
export const freePort = async (): Promise<number> => {
  for (let tries = 0; tries < 100; tries++) {
    const port = await bindable(20_000 + Math.floor(Math.random() * 12_000))
    if (port !== undefined) return port
  }
  const any = await bindable(0)
  if (any === undefined) throw new Error("no free port on 127.0.0.1")
  return any
}

const isRoot = (): boolean => process.getuid?.() === 0

/**
 * `runuser`, found on `PATH` or where util-linux puts it (`/usr/sbin`, `/sbin`: not on every `PATH`, as on a CI
 * machine's).
 */
const runuser = (): string | undefined =>
  [...(process.env.PATH ?? "").split(":").filter((dir) => dir !== ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"]
    .map((dir) => path.join(dir, "runuser"))
    .find((file) => fs.existsSync(file))

/** Runs a PostgreSQL binary, as `nobody` when this process is root. */
const run = (bin: string, args: ReadonlyArray<string>): void => {
  const asNobody = isRoot() ? runuser() : undefined
  const [file, argv] = asNobody === undefined ? [bin, [...args]] : [asNobody, ["-u", "nobody", "--", bin, ...args]]
  execFileSync(file, argv, { stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 })
}

/**
 * A data directory as `initdb` leaves it, made once and copied for each server: `initdb` costs a second of CPU,
 * a copy a few milliseconds, and a suite starts some fifteen servers. Made aside and renamed into place, so a
 * process never copies one half made; one made by another user, or left half copied, is never used.
 */
const template = (bin: string, owner: string): string => {
  const uid = process.getuid?.() ?? 0
  const made = path.join(os.tmpdir(), `effect-agent-pg-template-${path.basename(path.dirname(bin))}-${uid}`)
  if (fs.existsSync(path.join(made, "ready")) && fs.lstatSync(made).uid === uid) return path.join(made, "data")
  const aside = fs.mkdtempSync(`${made}-`)
  fs.chmodSync(aside, 0o755)
  const data = path.join(aside, "data")
  fs.mkdirSync(data, { mode: 0o700 })
  if (isRoot()) execFileSync("chown", [owner, data])
  run(path.join(bin, "initdb"), ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync"])
  fs.writeFileSync(path.join(aside, "ready"), "")
  try {
    fs.renameSync(aside, made)
    return path.join(made, "data")
  } catch {
    // Another process put its own in place first, or a stale one is in the way: this one serves this server.
    return data
  }
}

/** Whether a server can be had here, and why not. */
export const availability = (): Unavailable | { readonly bin: string } => {
  if (process.platform !== "linux") return { unavailable: "PostgreSQL tests run on Linux only" }
  const bin = binDir()
  if (bin === undefined) {
    return { unavailable: "no PostgreSQL under /usr/lib/postgresql (apt-get install postgresql)" }
  }
  if (isRoot() && runuser() === undefined) {
    return { unavailable: "running as root without runuser, and initdb refuses root (apt-get install util-linux)" }
  }
  return { bin }
}

/**
 * Starts a server for the scope; fails when it cannot be had (check
 * {@link availability} first to skip instead).
 */
export const scoped = Effect.acquireRelease(
  Effect.tryPromise(async () => {
    const found = availability()
    if ("unavailable" in found) throw new Error(found.unavailable)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "effect-agent-pg-"))
    fs.chmodSync(dir, 0o755)
    if (isRoot()) execFileSync("chown", ["-R", "nobody", dir])
    const data = path.join(dir, "data")
    const ctl = path.join(found.bin, "pg_ctl")
    const log = path.join(dir, "log")
    // `cp -a` keeps the modes PostgreSQL checks (0700) and, as root, the owner
    execFileSync("cp", ["-a", template(found.bin, "nobody"), data])
    const optionsFor = (port: number) =>
      `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c max_connections=300 -c fsync=off`
    // A port taken between its choice and the server's bind is another port's try (three at most).
    let port = await freePort()
    for (let tries = 1;; tries++) {
      try {
        run(ctl, ["-D", data, "-l", log, "-o", optionsFor(port), "-w", "-t", "60", "start"])
        break
      } catch (error) {
        const taken = fs.existsSync(log) && fs.readFileSync(log, "utf8").includes("Address already in use")
        if (!taken || tries >= 3) throw error
        fs.rmSync(log, { force: true })
        port = await freePort()
      }
    }
    const options = optionsFor(port)
    const stop = () => {
      try {
        run(ctl, ["-D", data, "-m", "immediate", "-w", "stop"])
      } catch {
        // already stopped
      }
      fs.rmSync(dir, { recursive: true, force: true })
    }
    process.once("exit", stop)
    const postgres: Postgres & { readonly stop: () => void } = {
      url: `postgres://postgres@127.0.0.1:${port}/postgres`,
      restart: () => run(ctl, ["-D", data, "-l", log, "-m", "fast", "-w", "-t", "60", "restart"]),
      down: () => run(ctl, ["-D", data, "-m", "fast", "-w", "-t", "60", "stop"]),
      up: () => run(ctl, ["-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"]),
      stop: () => {
        process.removeListener("exit", stop)
        stop()
      }
    }
    return postgres
  }),
  (postgres) => Effect.sync(() => postgres.stop())
)
