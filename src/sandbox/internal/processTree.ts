/**
 * A command's whole process tree, found and killed through `/proc` (Linux):
 * every descendant of the command's own process and, for a command given a
 * marker in its environment ({@link markerVariable}, one per command), every
 * process that carries it and every descendant of one. A process group kill
 * misses the processes that started a session of their own (`setsid`,
 * daemons); this finds them by their parent or their marker. Under bubblewrap
 * no marker is needed: the command's PID namespace keeps every one of its
 * processes below it.
 *
 * The sweep freezes the tree first (`SIGSTOP`, round after round until a scan
 * finds no new member: a frozen process forks no more, and its children stay
 * its children), then asks it to stop (`SIGTERM`, then `SIGCONT`), waits the
 * grace period, freezes again what is left or was started meanwhile, and
 * kills it (`SIGKILL`). Only processes started since the command are looked
 * at: a process older than the command is never signalled.
 *
 * What escapes a marked command: a process that both replaced its environment
 * (an `exec` with the marker removed: `env -i`) and lost its parent
 * (re-parented to init) before a scan found it; a process of another user (a
 * setuid program); and everything on a system without `/proc` (macOS), where
 * only the process group is killed.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"

/** The environment variable that marks a command's processes: `EFFECT_AGENT_COMMAND=<random id>`. */
export const markerVariable = "EFFECT_AGENT_COMMAND"

/** A new marker value, for one command. */
export const newMarker = (): string => globalThis.crypto.randomUUID()

/** A process, as one scan of `/proc` saw it. */
interface Process {
  readonly pid: number
  readonly parent: number
  /** When it started, in clock ticks since boot (`/proc/<pid>/stat`, field 22): with the pid, its identity. */
  readonly start: number
  readonly zombie: boolean
  readonly marked: boolean
}

/** A process's identity: its pid and when it started (a pid may be reused, not both). */
export interface Identity {
  readonly pid: number
  readonly start: number
}

/** Rounds of one freeze, at most (each a scan of `/proc`). */
const maxRounds = 64
/** How often the grace period and the final wait look whether the tree is gone. */
const pollInterval = Duration.millis(10)
/** How long killed processes get to be gone from `/proc` (a process in uninterruptible sleep takes a while). */
const killWait = Duration.seconds(2)

/** The fields of `/proc/<pid>/stat` after the command name: state, parent, and start time. */
const parseStat = (pid: number, stat: string) => {
  // The command name is in parentheses and may hold anything, parentheses too: the fields follow the last `)`.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  const parent = Number(fields[1])
  const start = Number(fields[19])
  return Number.isFinite(parent) && Number.isFinite(start) ? { pid, state: fields[0]!, parent, start } : undefined
}

/** Reads a small file of `/proc` into `buffer`; `undefined` when it cannot be read (the process is gone). */
const readSmall = (file: string, buffer: Buffer): string | undefined => {
  let fd: number | undefined
  try {
    fd = Fs.openSync(file, "r")
    return buffer.toString("latin1", 0, Fs.readSync(fd, buffer, 0, buffer.length, 0))
  } catch {
    return undefined
  } finally {
    if (fd !== undefined) Fs.closeSync(fd)
  }
}

const statBuffer = Buffer.alloc(4096)

/** A process's identity, from `/proc`; `undefined` when it is gone (or `/proc` is not there). */
export const identify = (pid: number): Effect.Effect<Identity | undefined> =>
  Effect.sync(() => {
    const stat = readSmall(`/proc/${pid}/stat`, statBuffer)
    const parsed = stat === undefined ? undefined : parseStat(pid, stat)
    return parsed === undefined ? undefined : { pid, start: parsed.start }
  })

/** Processes read between two yields, so that a scan of a busy machine does not hold the event loop long. */
const scanChunk = 256

/**
 * The processes started since `since` (ticks), with whether each carries
 * `marker` (`NAME=value`) in its environment. Processes older than that are
 * left out, their environment unread. Nothing on a system without `/proc`.
 *
 * The reads are synchronous: a scan reads a small file per process, and
 * Node's asynchronous reads cost about ten times as much (2 ms against 30 for
 * 130 processes); the scan yields every {@link scanChunk} processes.
 */
const scan = (marker: string | undefined, since: number): Effect.Effect<ReadonlyArray<Process>> =>
  Effect.gen(function*() {
    let entries: Array<string>
    try {
      entries = Fs.readdirSync("/proc")
    } catch {
      return []
    }
    const self = globalThis.process.pid
    const wanted = marker === undefined ? undefined : `\0${marker}\0`
    const found: Array<Process> = []
    for (let index = 0; index < entries.length; index++) {
      if (index > 0 && index % scanChunk === 0) yield* Effect.yieldNow
      const entry = entries[index]!
      if (!/^\d+$/.test(entry) || Number(entry) === self) continue
      const stat = readSmall(`/proc/${entry}/stat`, statBuffer)
      const parsed = stat === undefined ? undefined : parseStat(Number(entry), stat)
      if (parsed === undefined || parsed.start < since) continue
      const zombie = parsed.state === "Z" || parsed.state === "X"
      let marked = false
      // A zombie's environment is gone; it needs no signal, but its parent link still counts.
      if (!zombie && wanted !== undefined) {
        try {
          marked = `\0${Fs.readFileSync(`/proc/${entry}/environ`, "latin1")}`.includes(wanted)
        } catch {
          // gone, or another user's
        }
      }
      found.push({ pid: parsed.pid, parent: parsed.parent, start: parsed.start, zombie, marked })
    }
    return found
  })

/**
 * The tree in a scan: the marked processes, those in `known` (same pid and
 * start), and every descendant of one of them. Zombies are left out (they
 * take no signal) but their live children are not.
 */
const treeIn = (processes: ReadonlyArray<Process>, known: ReadonlyMap<number, number>): Array<Process> => {
  const children = new Map<number, Array<Process>>()
  for (const process of processes) {
    const siblings = children.get(process.parent)
    if (siblings === undefined) children.set(process.parent, [process])
    else siblings.push(process)
  }
  const inTree = new Set<number>()
  const stack = processes.filter((process) => process.marked || known.get(process.pid) === process.start)
  while (stack.length > 0) {
    const process = stack.pop()!
    if (inTree.has(process.pid)) continue
    inTree.add(process.pid)
    for (const child of children.get(process.pid) ?? []) stack.push(child)
  }
  return processes.filter((process) => inTree.has(process.pid) && !process.zombie)
}

const signal = (pid: number, name: NodeJS.Signals) =>
  Effect.sync(() => {
    try {
      globalThis.process.kill(pid, name)
    } catch {
      // gone already, or not ours to signal (another user's)
    }
  })

/**
 * Freezes the tree: stops every member a scan finds, scanning again until a
 * scan finds none that is not stopped yet (bounded in rounds). `tree` gains
 * the members; the live members of the last scan are returned.
 */
const freeze = (
  marker: string | undefined,
  since: number,
  tree: Map<number, number>
): Effect.Effect<ReadonlyArray<Process>> =>
  Effect.gen(function*() {
    let members: ReadonlyArray<Process> = []
    for (let round = 0; round < maxRounds; round++) {
      members = treeIn(yield* scan(marker, since), tree)
      const fresh = members.filter((process) => tree.get(process.pid) !== process.start)
      if (fresh.length === 0) break
      for (const process of fresh) tree.set(process.pid, process.start)
      yield* Effect.forEach(fresh, (process) => signal(process.pid, "SIGSTOP"), { discard: true })
    }
    return members
  })

/** Waits until no member of the tree is alive, or `wait` has passed; returns the live members. */
const awaitGone = (
  marker: string | undefined,
  since: number,
  tree: ReadonlyMap<number, number>,
  wait: Duration.Duration
): Effect.Effect<ReadonlyArray<Process>> =>
  Effect.gen(function*() {
    const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(wait)
    while (true) {
      const alive = treeIn(yield* scan(marker, since), tree)
      if (alive.length === 0 || (yield* Clock.currentTimeMillis) >= deadline) return alive
      yield* Effect.sleep(pollInterval)
    }
  })

/**
 * Kills the tree of the command whose own process is `root` (`undefined` when
 * it could not be identified: then every process is looked at, not only
 * those started since it), and of the processes marked `marker`
 * (`NAME=value`; `undefined`: the tree is the command's descendants only, as
 * in a PID namespace that keeps every process below the command): `SIGTERM`,
 * `grace` to stop, then `SIGKILL`. Returns the pids still alive at the end
 * (none, unless a process could not be killed).
 */
export const kill = (
  marker: string | undefined,
  root: Identity | undefined,
  grace: Duration.Duration
): Effect.Effect<ReadonlyArray<number>> =>
  Effect.gen(function*() {
    const since = root?.start ?? 0
    const tree = new Map<number, number>(root === undefined ? [] : [[root.pid, root.start]])
    const frozen = yield* freeze(marker, since, tree)
    if (frozen.length === 0) return []
    yield* Effect.forEach(frozen, (process) => signal(process.pid, "SIGTERM"), { discard: true })
    yield* Effect.forEach(frozen, (process) => signal(process.pid, "SIGCONT"), { discard: true })
    if ((yield* awaitGone(marker, since, tree, grace)).length === 0) return []
    // What outlived the grace period, and what it started meanwhile: frozen, then killed, until none is left.
    const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(killWait)
    while (true) {
      const survivors = yield* freeze(marker, since, tree)
      yield* Effect.forEach(survivors, (process) => signal(process.pid, "SIGKILL"), { discard: true })
      if (survivors.length === 0) return []
      if ((yield* Clock.currentTimeMillis) >= deadline) return survivors.map((process) => process.pid)
      yield* Effect.sleep(pollInterval)
    }
  })
