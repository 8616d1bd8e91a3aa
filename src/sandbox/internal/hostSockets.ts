/**
 * The host's Unix sockets a confined command could reach through what its
 * view of the host shows (the Docker daemon's, an ssh ControlMaster's, a
 * database's, the session bus'), for bubblewrap to hide.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import type * as Path from "effect/Path"
import { isWithin } from "./workspace.ts"

/** Where host services keep their Unix sockets, walked for them before every command. */
const socketDirectories = ["/run", "/var/run"]
const socketWalkDepth = 10
const socketWalkEntries = 10_000

/** The paths of the pathname sockets bound in this network namespace (`/proc/net/unix`, path last). */
const boundSockets = (fs: FileSystem.FileSystem): Effect.Effect<Array<string>> =>
  fs.readFileString("/proc/net/unix").pipe(
    Effect.map((table) =>
      table.split("\n").slice(1).flatMap((line) => {
        const match = /^(?:\S+\s+){7}(\/.*)$/.exec(line)
        return match === null ? [] : [match[1]!]
      })
    ),
    Effect.orElseSucceed(() => [])
  )

/** The socket files under `dir`, not following links, and whether the walk's bounds let it see everything. */
const socketFilesUnder = (fs: FileSystem.FileSystem, path: Path.Path, dir: string) =>
  Effect.gen(function*() {
    const found: Array<string> = []
    const stack: Array<readonly [string, number]> = [[dir, 0]]
    let seen = 0
    let complete = true
    while (stack.length > 0) {
      const [current, depth] = stack.pop()!
      const entries = yield* Effect.orElseSucceed(fs.readDirectoryEntries(current), () => [])
      for (const entry of entries) {
        if (++seen > socketWalkEntries) return { found, complete: false }
        const child = path.join(current, entry.name)
        if (entry.type === "Socket") found.push(child)
        else if (entry.type !== "Directory") continue
        else if (depth < socketWalkDepth) stack.push([child, depth + 1])
        else complete = false
      }
    }
    return { found, complete }
  })

/**
 * The host's Unix sockets that a view made of the `visible` trees (real
 * paths) shows, on their real paths, looked up anew for each command: the
 * socket files under `/run` (whatever network namespace bound them), and
 * every other pathname socket bound in this network namespace. `directories`
 * are the real paths walked (those of `/run` and `/var/run` that the view
 * shows some of).
 */
export const find = (
  fs: FileSystem.FileSystem,
  path: Path.Path,
  visible: ReadonlyArray<string>
): Effect.Effect<{ readonly sockets: ReadonlyArray<string>; readonly directories: ReadonlyArray<string> }> =>
  Effect.gen(function*() {
    const shown = (real: string) => visible.some((tree) => isWithin(path, tree, real))
    const directories: Array<readonly [given: string, real: string]> = []
    for (const dir of socketDirectories) {
      const real = yield* Effect.option(fs.realPath(dir))
      if (real._tag === "Some" && visible.some((tree) => isWithin(path, tree, real.value) || isWithin(path, real.value, tree))) {
        directories.push([dir, real.value])
      }
    }
    const walked = [...new Set(directories.map(([, real]) => real))]
    // The walk starts on real paths and follows no link: what it finds is a socket, on its real path.
    const walks = yield* Effect.forEach(walked, (dir) => socketFilesUnder(fs, path, dir))
    const sockets = new Set(walks.flatMap((walk) => walk.found).filter(shown))
    // A bound socket under a directory walked to its end was found there.
    const isWalked = (socket: string) =>
      walks.every((walk) => walk.complete) && directories.some(([given]) => isWithin(path, given, socket))
    const others = new Set((yield* boundSockets(fs)).filter((socket) => !isWalked(socket)))
    yield* Effect.forEach(others, (candidate) =>
      fs.realPath(candidate).pipe(
        Effect.flatMap((real) => Effect.map(fs.stat(real), (info) => ({ real, type: info.type }))),
        Effect.map(({ real, type }) => {
          if (type === "Socket" && shown(real)) sockets.add(real)
        }),
        Effect.ignore
      ), { concurrency: 16, discard: true })
    return { sockets: [...sockets].sort(), directories: walked }
  })
