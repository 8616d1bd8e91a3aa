/**
 * A sandbox on a host directory: every path resolved inside the workspace on
 * its real path, commands run as host processes ({@link Process}), through
 * a wrapper that may confine them (bubblewrap) or not (local).
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Path from "effect/Path"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as Descriptors from "./descriptors.ts"
import {
  CommandError,
  describe,
  errnoReasons,
  type FileNotFoundError,
  type FileSystemError,
  fromPlatformError,
  fsError,
  PathEscapeError,
  rootRemoval
} from "./errors.ts"
import {
  type DirectoryEntry,
  type ExecOptions,
  type FileInfo,
  type FileType,
  fromOperations,
  type Operations
} from "./model.ts"
import * as Process from "./process.ts"
import { isWithin, resolveLexically } from "./workspace.ts"

/** What a host sandbox needs from the platform. */
export type Requirements = FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner

/** How commands run, from the sandbox's options. */
export interface Settings {
  /** The environment of every command (nothing else is inherited). */
  readonly env: Readonly<Record<string, string>>
  readonly timeout: Duration.Duration
  readonly maxOutputBytes: number
  readonly killGracePeriod: Duration.Duration
}

/** Turns a command's argv into the argv actually spawned, in the working directory `cwd`. */
export type Wrap = (argv: Process.Argv, cwd: string) => Effect.Effect<Process.Argv>

export interface Config extends Settings {
  readonly kind: "local" | "bubblewrap"
  /** The wrapper of the workspace whose real path is `root`. */
  readonly wrap: (root: string) => Wrap
  /** The real paths inside the workspace `root` that file operations refuse (hidden from commands). */
  readonly hidden?: ((root: string) => Effect.Effect<ReadonlyArray<string>>) | undefined
}

const maxSymlinkHops = 40

const fileType = (type: FileSystem.File.Type): FileType =>
  type === "File" ? "file" : type === "Directory" ? "directory" : type === "SymbolicLink" ? "symlink" : "other"

/** A host sandbox on `root`, which must be a directory. */
export const make = (root: string, config: Config): Effect.Effect<
  Operations,
  FileNotFoundError | FileSystemError,
  Requirements
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const real = yield* fs.realPath(root).pipe(Effect.mapError(fromPlatformError("open workspace", root)))
    const info = yield* fs.stat(real).pipe(Effect.mapError(fromPlatformError("open workspace", root)))
    if (info.type !== "Directory") {
      return yield* fsError("open workspace", root, "not a directory")
    }
    return yield* operations(real, config)
  })

const operations = Effect.fnUntraced(function*(root: string, config: Config) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const wrap = config.wrap(root)
  const hidden = config.hidden?.(root)

  // The real path of `absolute` (inside the root), following every symbolic
  // link, including dangling ones and those in parent directories, for paths
  // that do not exist yet too. `realPath` does the work for what exists; the
  // missing tail is resolved below the real path of its nearest existing
  // ancestor.
  const realPathWithin = (
    input: string,
    absolute: string,
    hops: number
  ): Effect.Effect<string, PathEscapeError | FileSystemError> =>
    fs.realPath(absolute).pipe(
      Effect.matchEffect({
        onFailure: (error) =>
          error.reason._tag === "NotFound"
            ? missingPathWithin(input, absolute, hops)
            : Effect.fail(fsError("resolve", input, describe(error))),
        onSuccess: (real) =>
          isWithin(path, root, real)
            ? Effect.succeed(real)
            : Effect.fail(
              new PathEscapeError({ path: input, reason: `it leads to ${real} through a symbolic link` })
            )
      })
    )

  const missingPathWithin = (
    input: string,
    absolute: string,
    hops: number
  ): Effect.Effect<string, PathEscapeError | FileSystemError> =>
    Effect.gen(function*() {
      const parent = path.dirname(absolute)
      if (parent === absolute) return absolute
      const realParent = yield* realPathWithin(input, parent, hops)
      const candidate = path.join(realParent, path.basename(absolute))
      // `realPath` fails on a dangling link, which a write would follow.
      const target = yield* Effect.option(fs.readLink(candidate))
      if (target._tag === "None") return candidate
      if (hops >= maxSymlinkHops) {
        return yield* fsError("resolve", input, errnoReasons.ELOOP!)
      }
      return yield* realPathWithin(input, path.resolve(realParent, target.value), hops + 1)
    })

  /** Refuses a real path that lies in a hidden directory (or is a hidden file). */
  const visible = (input: string, real: string): Effect.Effect<string, FileSystemError> =>
    hidden === undefined ? Effect.succeed(real) : Effect.flatMap(hidden, (paths) =>
      paths.some((hiddenPath) => isWithin(path, hiddenPath, real))
        ? Effect.fail(fsError("resolve", input, "the path is hidden from the sandbox"))
        : Effect.succeed(real))

  const resolve = (input: string) =>
    Effect.flatMap(resolveLexically(path, root, input), (absolute) =>
      Effect.flatMap(realPathWithin(input, absolute, 0), (real) => visible(input, real)))

  const readFileBytes = (input: string) =>
    Effect.flatMap(resolve(input), (real) => Effect.mapError(fs.readFile(real), fromPlatformError("read", input)))

  const writeFile = (input: string, content: string | Uint8Array) =>
    Effect.flatMap(resolve(input), (real) =>
      fs.makeDirectory(path.dirname(real), { recursive: true }).pipe(
        Effect.andThen(
          typeof content === "string" ? fs.writeFileString(real, content) : fs.writeFile(real, content)
        ),
        Effect.mapError(fromPlatformError("write", input))
      ))

  const list = (input: string) =>
    Effect.flatMap(resolve(input), (real) =>
      fs.readDirectoryEntries(real).pipe(
        Effect.map((entries) =>
          entries
            .map((entry): DirectoryEntry => ({ name: entry.name, type: fileType(entry.type) }))
            .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
        ),
        Effect.mapError(fromPlatformError("list", input))
      ))

  const stat = (input: string) =>
    Effect.flatMap(resolve(input), (real) =>
      fs.stat(real).pipe(
        Effect.map((info): FileInfo => ({
          type: fileType(info.type),
          size: Number(info.size),
          modified: info.mtime._tag === "Some" ? info.mtime.value : undefined
        })),
        Effect.mapError(fromPlatformError("stat", input))
      ))

  const remove = (input: string, options?: { readonly recursive?: boolean | undefined }) =>
    Effect.flatMap(resolve(input), (real) =>
      real === root
        ? Effect.fail(rootRemoval(input))
        : Effect.mapError(
          fs.remove(real, { recursive: options?.recursive === true }),
          fromPlatformError("remove", input)
        ))

  const exec = Effect.fnUntraced(function*(options: ExecOptions) {
    const cwdInput = options.cwd ?? "."
    const cwd = yield* resolve(cwdInput)
    const info = yield* Effect.mapError(fs.stat(cwd), fromPlatformError("exec", cwdInput))
    if (info.type !== "Directory") {
      return yield* fsError("exec", cwdInput, "the working directory is not a directory")
    }
    const command = options.command
    const argv: Process.Argv = typeof command === "string" ? ["/bin/sh", "-c", command] : command
    const display = typeof command === "string" ? command : command.join(" ")
    const env = options.env === undefined ? config.env : { ...config.env, ...options.env }
    // A local program is looked up here (bwrap looks it up in the sandbox): the spawn finds only the shell.
    if (config.kind === "local" && !Descriptors.programExists(argv[0], env, cwd)) {
      return yield* new CommandError({ command: display, reason: `program not found: ${argv[0]}` })
    }
    return yield* Process.run(spawner, {
      // Inside the wrapper: under bubblewrap, the descriptors are closed in the sandbox, where the command starts.
      argv: yield* wrap(Descriptors.closingInherited(argv, env), cwd),
      display,
      cwd,
      env,
      stdin: options.stdin,
      timeout: options.timeout === undefined ? config.timeout : Duration.fromInputUnsafe(options.timeout),
      cap: Math.max(0, options.maxOutputBytes ?? config.maxOutputBytes),
      killGracePeriod: config.killGracePeriod,
      // Under bubblewrap every process of the command stays below it, in its PID namespace.
      marked: config.kind === "local"
    })
  })

  return fromOperations({ kind: config.kind, root, exec, readFileBytes, writeFile, list, stat, remove })
})
