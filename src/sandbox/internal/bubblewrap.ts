/**
 * The bubblewrap sandbox: the host sandbox whose commands run under `bwrap`
 * with the host read-only, the workspace read-write, a private `/tmp`, every
 * namespace unshared and, without the network, no host socket in reach.
 *
 * @internal
 */
import { Effect, FileSystem, Path } from "effect"
import { type FileNotFoundError, type FileSystemError, NotSupportedError } from "./errors.ts"
import * as Host from "./host.ts"
import * as HostSockets from "./hostSockets.ts"
import type { Operations } from "./model.ts"
import type { Argv } from "./process.ts"
import { isWithin } from "./workspace.ts"

export interface Options {
  /** The `bwrap` program. */
  readonly bwrap: string
  /** Whether commands share the host's network namespace. */
  readonly network: boolean
  /** Absolute host paths commands must not see (nor file operations reach, inside the workspace). */
  readonly hide: ReadonlyArray<string>
}

/** A hidden path that exists: its real path, and whether it is a directory. */
interface Hidden {
  readonly real: string
  readonly directory: boolean
}

/** A hidden path as it is now, on its real path; `undefined` when it does not exist. */
const lookUp = (fs: FileSystem.FileSystem, given: string): Effect.Effect<Hidden | undefined> =>
  fs.realPath(given).pipe(
    Effect.flatMap((real) => Effect.map(fs.stat(real), (info) => ({ real, directory: info.type === "Directory" }))),
    Effect.orElseSucceed(() => undefined)
  )

/** The hidden paths that exist now, on their real paths, each once. */
const existing = (fs: FileSystem.FileSystem, hide: ReadonlyArray<string>): Effect.Effect<ReadonlyArray<Hidden>> =>
  Effect.map(Effect.forEach(hide, (given) => lookUp(fs, given)), (found) => {
    const byPath = new Map<string, Hidden>()
    for (const hidden of found) if (hidden !== undefined) byPath.set(hidden.real, hidden)
    return [...byPath.values()]
  })

/** Covers a hidden path: an empty tmpfs over a directory, `/dev/null` over anything else. */
const cover = (hidden: Hidden): ReadonlyArray<string> =>
  hidden.directory ? ["--tmpfs", hidden.real] : ["--ro-bind", "/dev/null", hidden.real]

/**
 * The mounts that hide what commands must not see, looked up before each
 * command: the hidden paths, and without the network the host's sockets.
 * A hidden path holding the workspace is covered before the workspace is
 * bound (the workspace stays visible); every other one after it (one inside
 * the workspace is hidden too).
 */
const hiding = (fs: FileSystem.FileSystem, path: Path.Path, options: Options) => (root: string) =>
  Effect.gen(function*() {
    const hidden = yield* existing(fs, options.hide)
    const sockets = options.network ? [] : yield* hideSockets(fs, path)(root)
    const holdsWorkspace = (entry: Hidden) => isWithin(path, entry.real, root)
    return {
      beforeWorkspace: hidden.filter(holdsWorkspace).flatMap(cover),
      afterWorkspace: [...hidden.filter((entry) => !holdsWorkspace(entry)).flatMap(cover), ...sockets]
    }
  })

/** The real paths file operations must not reach: the hidden paths inside the workspace. */
const hiddenInside = (fs: FileSystem.FileSystem, path: Path.Path, hide: ReadonlyArray<string>) => (root: string) =>
  Effect.map(
    existing(fs, hide),
    (hidden) => hidden.flatMap(({ real }) => real !== root && isWithin(path, root, real) ? [real] : [])
  )

/**
 * The `bwrap` arguments that hide the host's Unix sockets ({@link HostSockets.find}):
 * a tmpfs over each directory directly under `/run` that holds sockets (one
 * mount where there may be dozens of sockets: a bind costs about a millisecond
 * of the command's start), `/dev/null` over every other socket (a connection to
 * it is refused). `/run` itself stays (NixOS keeps its programs under
 * `/run/current-system`), and so does a directory holding the workspace.
 */
const hideSockets = (fs: FileSystem.FileSystem, path: Path.Path) => (root: string) =>
  Effect.map(HostSockets.find(fs, path, root), ({ directories, sockets }) => {
    const hidden = new Map<string, ReadonlyArray<string>>()
    for (const socket of sockets) {
      const dir = directories.find((dir) => isWithin(path, dir, socket) && socket !== dir)
      const top = dir === undefined ? undefined : path.join(dir, path.relative(dir, socket).split(path.sep)[0]!)
      if (top !== undefined && top !== socket && !isWithin(path, top, root)) hidden.set(top, ["--tmpfs", top])
      else hidden.set(socket, ["--ro-bind", "/dev/null", socket])
    }
    return [...hidden.keys()].sort().flatMap((key) => hidden.get(key)!)
  })

/**
 * The `bwrap` argument vector: the host read-only, a minimal `/dev`, a fresh
 * `/proc`, a private `/tmp`, the workspace read-write (mounted after `/tmp`, so
 * a workspace under `/tmp` stays visible), the hidden paths covered
 * ({@link hiding}), every namespace unshared, a new session (no terminal
 * injection), and death with the parent: killing `bwrap` kills the sandbox's
 * init, which takes every process of the PID namespace with it.
 *
 * Without the network, no host socket is reachable either: the network
 * namespace keeps the abstract ones out, and the pathname ones, which the
 * read-only `/` would show, are hidden ({@link hideSockets}). A socket removed
 * between its lookup and the start of `bwrap` makes the command fail ("Can't
 * create file at …"), a narrow window. With the network, commands share the
 * host's network namespace, and its sockets.
 */
const argv = (
  options: Options,
  hide: (root: string) => Effect.Effect<{
    readonly beforeWorkspace: ReadonlyArray<string>
    readonly afterWorkspace: ReadonlyArray<string>
  }>
) =>
(root: string): Host.Wrap =>
(command: Argv, cwd: string) =>
  Effect.map(hide(root), ({ afterWorkspace, beforeWorkspace }): Argv => [
    options.bwrap,
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    ...beforeWorkspace,
    "--bind",
    root,
    root,
    ...afterWorkspace,
    "--unshare-all",
    ...(options.network ? ["--share-net"] : []),
    "--die-with-parent",
    "--new-session",
    "--chdir",
    cwd,
    "--",
    ...command
  ])

/**
 * A bubblewrap sandbox on `root`, probed with the very flags commands get: in
 * some containers user namespaces or a fresh `/proc` are refused, and that is
 * a `NotSupportedError`.
 */
export const make = (
  root: string,
  settings: Host.Settings,
  options: Options
): Effect.Effect<Operations, FileNotFoundError | FileSystemError | NotSupportedError, Host.Requirements> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const sandbox = yield* Host.make(root, {
      ...settings,
      kind: "bubblewrap",
      wrap: argv(options, hiding(fs, path, options)),
      hidden: hiddenInside(fs, path, options.hide)
    })
    const probe = yield* sandbox.exec({ command: ["true"], timeout: "10 seconds" }).pipe(
      Effect.mapError((error) => new NotSupportedError({ operation: "bubblewrap", reason: error.message }))
    )
    if (probe.exitCode !== 0) {
      const detail = probe.timedOut ? "timed out" : probe.stderr.trim() || `exit code ${probe.exitCode}`
      return yield* new NotSupportedError({ operation: "bubblewrap", reason: `bwrap does not work here: ${detail}` })
    }
    return sandbox
  })
