/**
 * Where an agent's commands run and its files live. Tools that touch the
 * machine (the built-in `bash`, `read_file`, `write_file`, …) go through the
 * `Sandbox` service, and the app chooses the Layer:
 *
 * - {@link local}: a directory on the host. Every path is resolved inside the
 *   workspace root, on the real path, so `..`, absolute paths and symbolic
 *   links that lead outside are refused with a {@link PathEscapeError}.
 *   Commands run with the host's privileges, in the workspace; they can read
 *   the host process's environment through `/proc`, keys included.
 * - {@link bubblewrap}: the same file access, and commands run under `bwrap`
 *   with the host read-only, the workspace read-write, a private `/tmp`, every
 *   namespace unshared and no network unless asked; without the network, the
 *   host's Unix sockets are out of reach too.
 * - {@link auto}: bubblewrap when `bwrap` works on this machine, else local
 *   (unless secrets are in the environment and the caller says so).
 * - {@link memory}: an in-memory workspace for tests of apps; it cannot run
 *   commands.
 *
 * Every path is relative to the workspace root (an absolute path is accepted
 * when it lies inside the root). A command that times out, or whose fiber is
 * interrupted, is killed with its whole process tree.
 *
 * @example
 * ```ts
 * import { NodeServices } from "@effect/platform-node"
 * import { Effect, Layer } from "effect"
 * import { Sandbox } from "effect-agent/sandbox"
 *
 * const program = Effect.gen(function*() {
 *   const sandbox = yield* Sandbox.Sandbox
 *   yield* sandbox.writeFile("hello.txt", "hi\n")
 *   const result = yield* sandbox.exec({ command: "cat hello.txt", timeout: "5 seconds" })
 *   return result.stdout // "hi\n"
 * })
 *
 * program.pipe(Effect.provide(Sandbox.auto("/tmp/work").pipe(Layer.provide(NodeServices.layer))))
 * ```
 *
 * @since 0.1.0
 */
import {
  Clock,
  Context,
  Duration,
  Effect,
  Fiber,
  FileSystem,
  Layer,
  Path,
  PlatformError,
  Schema,
  Stream
} from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"

// -----------------------------------------------------------------------------
// Errors
// -----------------------------------------------------------------------------

/**
 * A path leads outside the workspace: through `..`, as an absolute path, or
 * through a symbolic link (checked on the real path). `path` is the path as
 * it was given.
 *
 * @since 0.1.0
 */
export class PathEscapeError extends Schema.TaggedError<PathEscapeError>()("PathEscapeError", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `path escapes the workspace: ${this.path} (${this.reason})`
  }
}

/**
 * No file or directory at `path` (as it was given).
 *
 * @since 0.1.0
 */
export class FileNotFoundError extends Schema.TaggedError<FileNotFoundError>()("FileNotFoundError", {
  path: Schema.String
}) {
  override get message(): string {
    return `no such file or directory: ${this.path}`
  }
}

/**
 * Any other failure of a file operation: a directory where a file was
 * expected, permission denied, a directory that is not empty…
 *
 * @since 0.1.0
 */
export class FileSystemError extends Schema.TaggedError<FileSystemError>()("FileSystemError", {
  operation: Schema.String,
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `${this.operation} ${this.path}: ${this.reason}`
  }
}

/**
 * The sandbox cannot do this at all (the in-memory sandbox running a
 * command, bubblewrap on a machine where `bwrap` does not work).
 *
 * @since 0.1.0
 */
export class NotSupportedError extends Schema.TaggedError<NotSupportedError>()("NotSupportedError", {
  operation: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `${this.operation} is not supported: ${this.reason}`
  }
}

/**
 * A command could not be started (no such program, bad arguments). A command
 * that starts and fails is not an error: its exit code is in the
 * {@link CommandResult}.
 *
 * @since 0.1.0
 */
export class CommandError extends Schema.TaggedError<CommandError>()("CommandError", {
  command: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `cannot run ${this.command}: ${this.reason}`
  }
}

/**
 * {@link auto} would fall back to {@link local}, where commands could read
 * the host process's environment, while variables holding secrets are set
 * there (`variables`, by name). `reason` says why bubblewrap does not work.
 *
 * @since 0.1.0
 */
export class IsolationUnavailableError extends Schema.TaggedError<IsolationUnavailableError>()(
  "IsolationUnavailableError",
  { reason: Schema.String, variables: Schema.Array(Schema.String) }
) {
  override get message(): string {
    const names = this.variables.join(", ")
    return `bubblewrap is not usable here (${this.reason}) and ${names} ${
      this.variables.length === 1 ? "is" : "are"
    } in the environment, which commands without isolation could read`
  }
}

/**
 * Any failure of a sandbox operation.
 *
 * @since 0.1.0
 */
export type SandboxError = PathEscapeError | FileNotFoundError | FileSystemError | NotSupportedError | CommandError

// -----------------------------------------------------------------------------
// Models
// -----------------------------------------------------------------------------

/**
 * Which implementation a sandbox is.
 *
 * @since 0.1.0
 */
export type Kind = "local" | "bubblewrap" | "memory"

/**
 * A command to run: a shell script (run by `/bin/sh -c`) or an argument vector
 * (run directly, no shell). `cwd` is relative to the workspace root; `env`
 * adds variables to the sandbox's allowlisted environment; `stdin` is written
 * to the command and then closed (without it, stdin is empty).
 *
 * @since 0.1.0
 */
export interface ExecOptions {
  readonly command: string | readonly [string, ...Array<string>]
  readonly cwd?: string | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly stdin?: string | undefined
  /** Unset: the sandbox's timeout. */
  readonly timeout?: Duration.Input | undefined
  /** Bytes kept of each of stdout and stderr. Unset: the sandbox's cap. */
  readonly maxOutputBytes?: number | undefined
}

/**
 * What a command did. `exitCode` is `null` when the command did not exit by
 * itself (it timed out or was killed by a signal). Output over the cap keeps
 * its beginning and its end around a `[... N bytes truncated ...]` marker,
 * and `truncated` is set.
 *
 * @since 0.1.0
 */
export const CommandResult = Schema.Struct({
  exitCode: Schema.NullOr(Schema.Finite),
  stdout: Schema.String,
  stderr: Schema.String,
  durationMs: Schema.Finite,
  timedOut: Schema.Boolean,
  truncated: Schema.Boolean
})
/** @since 0.1.0 */
export type CommandResult = typeof CommandResult.Type

/**
 * The type of a file system entry. A symbolic link is reported as a link,
 * never followed, in {@link Sandbox.list}.
 *
 * @since 0.1.0
 */
export type FileType = "file" | "directory" | "symlink" | "other"

/**
 * One entry of a directory listing.
 *
 * @since 0.1.0
 */
export interface DirectoryEntry {
  readonly name: string
  readonly type: FileType
}

/**
 * What {@link Sandbox.stat} reports.
 *
 * @since 0.1.0
 */
export interface FileInfo {
  readonly type: FileType
  readonly size: number
  readonly modified: Date | undefined
}

// -----------------------------------------------------------------------------
// Service
// -----------------------------------------------------------------------------

/**
 * The sandbox service. Paths are relative to `root`.
 *
 * @since 0.1.0
 */
export class Sandbox extends Context.Service<Sandbox, {
  readonly kind: Kind
  /** The workspace root (its real path, for host sandboxes). */
  readonly root: string
  readonly exec: (
    options: ExecOptions
  ) => Effect.Effect<
    CommandResult,
    CommandError | NotSupportedError | PathEscapeError | FileNotFoundError | FileSystemError
  >
  readonly readFile: (path: string) => Effect.Effect<string, PathEscapeError | FileNotFoundError | FileSystemError>
  readonly readFileBytes: (
    path: string
  ) => Effect.Effect<Uint8Array, PathEscapeError | FileNotFoundError | FileSystemError>
  /** Writes a file, creating its parent directories. */
  readonly writeFile: (
    path: string,
    content: string | Uint8Array
  ) => Effect.Effect<void, PathEscapeError | FileNotFoundError | FileSystemError>
  readonly list: (
    path: string
  ) => Effect.Effect<ReadonlyArray<DirectoryEntry>, PathEscapeError | FileNotFoundError | FileSystemError>
  readonly stat: (path: string) => Effect.Effect<FileInfo, PathEscapeError | FileNotFoundError | FileSystemError>
  /** Removes a file, or a directory (`recursive` to remove one that is not empty). */
  readonly remove: (
    path: string,
    options?: { readonly recursive?: boolean | undefined }
  ) => Effect.Effect<void, PathEscapeError | FileNotFoundError | FileSystemError>
}>()("effect-agent/Sandbox") {}

// -----------------------------------------------------------------------------
// Options
// -----------------------------------------------------------------------------

/**
 * Host environment variables passed to commands by default. Anything else
 * (API keys, tokens) stays out unless listed in `envAllowlist` or set in
 * `env`.
 *
 * @since 0.1.0
 */
export const defaultEnvAllowlist: ReadonlyArray<string> = [
  "PATH",
  "HOME",
  "USER",
  "LOGNAME",
  "LANG",
  "LC_ALL",
  "LC_CTYPE",
  "TERM",
  "TZ"
]

/**
 * Options of the host sandboxes ({@link local}, {@link bubblewrap},
 * {@link auto}).
 *
 * @since 0.1.0
 */
export interface HostOptions {
  /** Host variables commands inherit. Default: {@link defaultEnvAllowlist}. */
  readonly envAllowlist?: ReadonlyArray<string> | undefined
  /** Variables set for every command (over the inherited ones). */
  readonly env?: Readonly<Record<string, string>> | undefined
  /** Default command timeout. Default: 2 minutes. */
  readonly timeout?: Duration.Input | undefined
  /** Default bytes kept of each of stdout and stderr. Default: 1 MiB. */
  readonly maxOutputBytes?: number | undefined
  /** How long a killed process tree gets after SIGTERM before SIGKILL. Default: 2 seconds. */
  readonly killGracePeriod?: Duration.Input | undefined
}

/**
 * Options of {@link bubblewrap}.
 *
 * @since 0.1.0
 */
export interface BubblewrapOptions extends HostOptions {
  /** Let commands reach the network. Default: `false`. */
  readonly network?: boolean | undefined
  /** The `bwrap` program. Default: `"bwrap"`, looked up on the allowlisted `PATH`. */
  readonly bwrap?: string | undefined
}

/**
 * Options of {@link auto}.
 *
 * @since 0.1.0
 */
export interface AutoOptions extends BubblewrapOptions {
  /**
   * Host variables commands must not read (API keys, tokens). While one of
   * them is set (not empty), `auto` does not fall back to {@link local}: it
   * fails with an {@link IsolationUnavailableError}. Default: none.
   */
  readonly secretVariables?: ReadonlyArray<string> | undefined
}

const secretName = /API_?KEY|SECRET|PASSWORD|PASSWD|PRIVATE_?KEY|ACCESS_?KEY|CREDENTIAL|(^|_)TOKEN(_|$)/i

/**
 * Whether a variable's name says it holds a secret: `*API_KEY*`, `*SECRET*`,
 * `*PASSWORD*`, `*PRIVATE_KEY*`, `*ACCESS_KEY*`, `*CREDENTIAL*`, or `TOKEN`
 * as a word (`GITHUB_TOKEN`, not `TOKENIZERS_PARALLELISM`). Case is ignored.
 * Meant to err on the side of caution, for {@link AutoOptions}.
 *
 * @since 0.1.0
 */
export const isSecretName = (name: string): boolean => secretName.test(name)

// -----------------------------------------------------------------------------
// Output capture
// -----------------------------------------------------------------------------

/**
 * Keeps the first and last halves of a byte stream up to a cap, counting what
 * falls between. A command's output is read to its end (a child blocked on a
 * full pipe would never exit) but memory stays bounded.
 */
class CappedOutput {
  private readonly head: Array<Uint8Array> = []
  private readonly tail: Array<Uint8Array> = []
  private headLength = 0
  private tailLength = 0
  dropped = 0
  private readonly headCap: number
  private readonly tailCap: number
  constructor(cap: number) {
    this.headCap = Math.ceil(cap / 2)
    this.tailCap = Math.floor(cap / 2)
  }
  push(chunk: Uint8Array): void {
    const room = this.headCap - this.headLength
    if (room > 0) {
      const part = room >= chunk.length ? chunk : chunk.subarray(0, room)
      this.head.push(part)
      this.headLength += part.length
      if (part.length === chunk.length) return
      chunk = chunk.subarray(room)
    }
    this.tail.push(chunk)
    this.tailLength += chunk.length
    while (this.tailLength > this.tailCap) {
      const first = this.tail[0]!
      const excess = this.tailLength - this.tailCap
      if (first.length <= excess) {
        this.tail.shift()
        this.tailLength -= first.length
        this.dropped += first.length
      } else {
        this.tail[0] = first.subarray(excess)
        this.tailLength -= excess
        this.dropped += excess
      }
    }
  }
  text(): string {
    if (this.dropped === 0) return new TextDecoder().decode(Buffer.concat([...this.head, ...this.tail]))
    // Cut both halves at character boundaries: the head before a character
    // it splits, the tail after the continuation bytes it starts with.
    const head = Buffer.concat(this.head)
    const headEnd = completeLength(head)
    const tail = Buffer.concat(this.tail)
    let tailStart = 0
    while (tailStart < tail.length && tailStart < 3 && (tail[tailStart]! & 0xc0) === 0x80) tailStart++
    const dropped = this.dropped + head.length - headEnd + tailStart
    const decoder = new TextDecoder()
    return `${decoder.decode(head.subarray(0, headEnd))}\n[... ${dropped} bytes truncated ...]\n${
      decoder.decode(tail.subarray(tailStart))
    }`
  }
}

/** The length of the longest prefix of `bytes` that does not end inside a UTF-8 character. */
const completeLength = (bytes: Uint8Array): number => {
  let lead = bytes.length - 1
  while (lead >= 0 && bytes.length - lead <= 3 && (bytes[lead]! & 0xc0) === 0x80) lead--
  if (lead < 0) return bytes.length
  const byte = bytes[lead]!
  const size = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1
  return lead + size > bytes.length ? lead : bytes.length
}

// -----------------------------------------------------------------------------
// Host sandboxes
// -----------------------------------------------------------------------------

const errnoReasons: Record<string, string> = {
  EISDIR: "is a directory",
  ENOTDIR: "not a directory",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOTEMPTY: "directory not empty",
  EEXIST: "already exists",
  ELOOP: "too many levels of symbolic links",
  ENAMETOOLONG: "name too long",
  ENOSPC: "no space left on device",
  EROFS: "read-only file system"
}

const describe = (error: PlatformError.PlatformError): string => {
  const cause: unknown = error.reason.cause
  const code = typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined
  return (code !== undefined ? errnoReasons[code] : undefined) ?? error.reason._tag
}

const fromPlatformError = (operation: string, path: string) => (error: PlatformError.PlatformError) =>
  error.reason._tag === "NotFound"
    ? new FileNotFoundError({ path })
    : fsError(operation, path, describe(error))

const fileType = (type: FileSystem.File.Type): FileType =>
  type === "File" ? "file" : type === "Directory" ? "directory" : type === "SymbolicLink" ? "symlink" : "other"

/** A sandbox from its operations; `readFile` decodes `readFileBytes` as UTF-8. */
const fromOperations = (operations: Omit<Sandbox["Service"], "readFile">): Sandbox["Service"] =>
  Sandbox.of({
    ...operations,
    readFile: (path) => Effect.map(operations.readFileBytes(path), (bytes) => new TextDecoder().decode(bytes))
  })

const fsError = (operation: string, path: string, reason: string) => new FileSystemError({ operation, path, reason })

const rootRemoval = (path: string) => fsError("remove", path, "the workspace root cannot be removed")

const isWithin = (path: Path.Path, root: string, absolute: string): boolean => {
  const relative = path.relative(root, absolute)
  return !(relative === ".." || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative))
}

/** The absolute path of `input` under `root`, checked lexically (`..`, absolute paths). */
const resolveLexically = (
  path: Path.Path,
  root: string,
  input: string
): Effect.Effect<string, PathEscapeError | FileSystemError> => {
  if (input.includes("\0")) return Effect.fail(fsError("resolve", input, "the path contains a NUL character"))
  const absolute = path.resolve(root, input)
  return isWithin(path, root, absolute)
    ? Effect.succeed(absolute)
    : Effect.fail(new PathEscapeError({ path: input, reason: "it resolves outside the workspace" }))
}

const maxSymlinkHops = 40
const outputGrace = Duration.millis(250)

type Argv = readonly [string, ...Array<string>]

interface HostConfig {
  readonly root: string
  readonly kind: "local" | "bubblewrap"
  /** Turns the command's argv into the argv actually spawned. */
  readonly wrap: (argv: Argv, cwd: string) => Effect.Effect<Argv>
  readonly env: Record<string, string>
  readonly timeout: Duration.Duration
  readonly maxOutputBytes: number
  readonly killGracePeriod: Duration.Duration
}

const makeHost = Effect.fnUntraced(function*(config: HostConfig) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const root = config.root

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

  const resolve = (input: string) =>
    Effect.flatMap(resolveLexically(path, root, input), (absolute) => realPathWithin(input, absolute, 0))

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
    const argv: Argv = typeof options.command === "string" ? ["/bin/sh", "-c", options.command] : options.command
    const [program, ...args] = yield* config.wrap(argv, cwd)
    const display = typeof options.command === "string" ? options.command : options.command.join(" ")
    const timeout = options.timeout === undefined ? config.timeout : Duration.fromInputUnsafe(options.timeout)
    const cap = Math.max(0, options.maxOutputBytes ?? config.maxOutputBytes)
    const command = ChildProcess.make(program, args, {
      cwd,
      env: options.env === undefined ? config.env : { ...config.env, ...options.env },
      extendEnv: false,
      // Its own process group (the spawner's default on POSIX), so a kill
      // reaches every descendant that did not start a session of its own.
      detached: true,
      forceKillAfter: config.killGracePeriod,
      stdin: options.stdin === undefined ? "ignore" : Stream.make(new TextEncoder().encode(options.stdin))
    })
    return yield* runCommand(spawner, command, display, timeout, cap)
  })

  return fromOperations({ kind: config.kind, root, exec, readFileBytes, writeFile, list, stat, remove })
})

/**
 * Runs a command in its own scope: the scope's release (on exit, timeout or
 * interruption) kills the command's process group, SIGTERM then SIGKILL after
 * the grace period (the Node spawner's `forceKillAfter`).
 */
const runCommand = (
  spawner: ChildProcessSpawner.ChildProcessSpawner["Service"],
  command: ChildProcess.StandardCommand,
  display: string,
  timeout: Duration.Duration,
  cap: number
): Effect.Effect<CommandResult, CommandError> =>
  Effect.scoped(Effect.gen(function*() {
    const start = yield* Clock.currentTimeMillis
    const handle = yield* spawner.spawn(command).pipe(
      Effect.mapError((error) =>
        new CommandError({ command: display, reason: describeSpawnError(command.command, error) })
      )
    )
    const stdout = new CappedOutput(cap)
    const stderr = new CappedOutput(cap)
    const readers = yield* Effect.forkChild(
      Effect.all([
        Stream.runForEach(handle.stdout, (chunk) => Effect.sync(() => stdout.push(chunk))),
        Stream.runForEach(handle.stderr, (chunk) => Effect.sync(() => stderr.push(chunk)))
      ], { concurrency: 2, discard: true }).pipe(Effect.ignore)
    )
    const exit = yield* handle.exitCode.pipe(
      Effect.map((code): number | null => code),
      Effect.orElseSucceed(() => null), // killed by a signal
      Effect.timeoutOption(timeout)
    )
    // Output still in the pipes after the exit; a background process holding
    // them open is not waited for (it is killed with the group).
    if (exit._tag === "Some") yield* Effect.timeoutOption(Fiber.join(readers), outputGrace)
    const end = yield* Clock.currentTimeMillis
    return {
      exitCode: exit._tag === "Some" ? exit.value : null,
      stdout: stdout.text(),
      stderr: stderr.text(),
      durationMs: end - start,
      timedOut: exit._tag === "None",
      truncated: stdout.dropped > 0 || stderr.dropped > 0
    }
  }))

const describeSpawnError = (program: string, error: PlatformError.PlatformError): string =>
  error.reason._tag === "NotFound"
    ? `program not found: ${program}`
    : error.reason._tag === "BadArgument"
    ? error.reason.description ?? "bad argument"
    : describe(error)

const hostConfig = Effect.fnUntraced(function*(
  root: string,
  options: HostOptions | undefined,
  kind: "local" | "bubblewrap",
  wrap: (root: string) => HostConfig["wrap"]
) {
  const fs = yield* FileSystem.FileSystem
  const real = yield* fs.realPath(root).pipe(Effect.mapError(fromPlatformError("open workspace", root)))
  const info = yield* fs.stat(real).pipe(Effect.mapError(fromPlatformError("open workspace", root)))
  if (info.type !== "Directory") {
    return yield* fsError("open workspace", root, "not a directory")
  }
  const env: Record<string, string> = {}
  for (const name of options?.envAllowlist ?? defaultEnvAllowlist) {
    const value = process.env[name]
    if (value !== undefined) env[name] = value
  }
  Object.assign(env, options?.env)
  return {
    root: real,
    kind,
    wrap: wrap(real),
    env,
    timeout: Duration.fromInputUnsafe(options?.timeout ?? "2 minutes"),
    maxOutputBytes: options?.maxOutputBytes ?? 1024 * 1024,
    killGracePeriod: Duration.fromInputUnsafe(options?.killGracePeriod ?? "2 seconds")
  } satisfies HostConfig
})

type HostRequirements = FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner

const makeLocal = (root: string, options?: HostOptions) =>
  Effect.flatMap(hostConfig(root, options, "local", () => (argv) => Effect.succeed(argv)), makeHost)

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
 * The host's Unix sockets a command could reach through the read-only view
 * of `/` (the Docker daemon's, an ssh ControlMaster's, a database's, the
 * session bus'), on their real paths, looked up anew for each command: the
 * socket files under `/run` (whatever network namespace bound them), and
 * every other pathname socket bound in this network namespace. Those under
 * `/tmp`, which commands see as a private tmpfs, are left out unless they lie
 * in the workspace, and so are those under `/dev` and `/proc`, fresh too.
 */
const hostSockets = (fs: FileSystem.FileSystem, path: Path.Path, root: string) =>
  Effect.gen(function*() {
    const directories: Array<readonly [given: string, real: string]> = []
    for (const dir of socketDirectories) {
      const real = yield* Effect.option(fs.realPath(dir))
      if (real._tag === "Some") directories.push([dir, real.value])
    }
    const walked = [...new Set(directories.map(([, real]) => real))]
    // The walk starts on real paths and follows no link: what it finds is a socket, on its real path.
    const walks = yield* Effect.forEach(walked, (dir) => socketFilesUnder(fs, path, dir))
    const sockets = new Set(walks.flatMap((walk) => walk.found))
    // A bound socket under a directory walked to its end was found there.
    const isWalked = (socket: string) =>
      walks.every((walk) => walk.complete) && directories.some(([given]) => isWithin(path, given, socket))
    const others = new Set((yield* boundSockets(fs)).filter((socket) => !isWalked(socket)))
    yield* Effect.forEach(others, (candidate) =>
      fs.realPath(candidate).pipe(
        Effect.flatMap((real) => Effect.map(fs.stat(real), (info) => ({ real, type: info.type }))),
        Effect.map(({ real, type }) => {
          const fresh = isWithin(path, "/dev", real) || isWithin(path, "/proc", real) ||
            (isWithin(path, "/tmp", real) && !isWithin(path, root, real))
          if (type === "Socket" && !fresh) sockets.add(real)
        }),
        Effect.ignore
      ), { concurrency: 16, discard: true })
    return { sockets: [...sockets].sort(), directories: walked }
  })

/**
 * The `bwrap` arguments that hide the host's Unix sockets ({@link hostSockets}):
 * a tmpfs over each directory directly under `/run` that holds sockets (one
 * mount where there may be dozens of sockets: a bind costs about a millisecond
 * of the command's start), `/dev/null` over every other socket (a connection to
 * it is refused). `/run` itself stays (NixOS keeps its programs under
 * `/run/current-system`), and so does a directory holding the workspace.
 */
const hideSockets = (fs: FileSystem.FileSystem, path: Path.Path) => (root: string) =>
  Effect.map(hostSockets(fs, path, root), ({ directories, sockets }) => {
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
 * a workspace under `/tmp` stays visible), every namespace unshared, a new
 * session (no terminal injection), and death with the parent: killing `bwrap`
 * kills the sandbox's init, which takes every process of the PID namespace
 * with it.
 *
 * Without the network, no host socket is reachable either: the network
 * namespace keeps the abstract ones out, and the pathname ones, which the
 * read-only `/` would show, are hidden ({@link hideSockets}). A socket removed
 * between its lookup and the start of `bwrap` makes the command fail ("Can't
 * create file at …"), a narrow window. With the network, commands share the
 * host's network namespace, and its sockets.
 */
const bwrapArgv = (
  bwrap: string,
  network: boolean,
  hide: (root: string) => Effect.Effect<ReadonlyArray<string>>
) =>
(root: string) =>
(argv: Argv, cwd: string): Effect.Effect<Argv> =>
  Effect.map(network ? Effect.succeed([]) : hide(root), (hidden): Argv => [
    bwrap,
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    "--bind",
    root,
    root,
    ...hidden,
    "--unshare-all",
    ...(network ? ["--share-net"] : []),
    "--die-with-parent",
    "--new-session",
    "--chdir",
    cwd,
    "--",
    ...argv
  ])

const makeBubblewrap = Effect.fnUntraced(function*(root: string, options?: BubblewrapOptions) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const wrap = bwrapArgv(options?.bwrap ?? "bwrap", options?.network === true, hideSockets(fs, path))
  const config = yield* hostConfig(root, options, "bubblewrap", wrap)
  const sandbox = yield* makeHost(config)
  // Probe with the very flags commands get: in some containers user
  // namespaces or a fresh /proc are refused.
  const probe = yield* sandbox.exec({ command: ["true"], timeout: "10 seconds" }).pipe(
    Effect.mapError((error) => new NotSupportedError({ operation: "bubblewrap", reason: error.message }))
  )
  if (probe.exitCode !== 0) {
    const detail = probe.timedOut ? "timed out" : probe.stderr.trim() || `exit code ${probe.exitCode}`
    return yield* new NotSupportedError({ operation: "bubblewrap", reason: `bwrap does not work here: ${detail}` })
  }
  return sandbox
})

/**
 * A sandbox on a host directory. Every path is resolved inside `root` on its
 * real path; commands run with the host's privileges, with `root` (or the
 * given `cwd` inside it) as working directory, the allowlisted environment,
 * and a kill of their whole process group on timeout or interruption.
 *
 * Processes a command leaves in the background are killed when it exits.
 * A process that starts its own session (`setsid`) escapes the group kill,
 * and a local command can write anywhere its user can, and read the host
 * process's whole environment (API keys included) through
 * `/proc/<pid>/environ`, whatever `envAllowlist` says: use
 * {@link bubblewrap} where that matters. The file operations check paths
 * just before using them; a process swapping a directory for a link in
 * between, or a hard link made to an outside file, is not detected.
 *
 * @since 0.1.0
 */
export const local = (root: string, options?: HostOptions): Layer.Layer<Sandbox, SandboxError, HostRequirements> =>
  Layer.effect(Sandbox, makeLocal(root, options))

/**
 * A sandbox whose commands run under bubblewrap (`bwrap`): the host
 * read-only, the workspace read-write, a private `/tmp`, all namespaces
 * unshared, no network unless `network: true`, killed with its parent. File
 * operations are those of {@link local}. Building the layer fails with a
 * {@link NotSupportedError} when `bwrap` does not work on the machine.
 *
 * Without the network, commands reach no host service over a Unix socket
 * either (the Docker daemon's, an ssh ControlMaster's, the session bus'):
 * abstract sockets stay in the host's network namespace, and the pathname
 * sockets the read-only `/` would show are hidden, looked up before each
 * command (every socket under `/run`, and every other one bound in the host's
 * network namespace). With `network: true`, commands share the host's network
 * namespace and its sockets.
 *
 * @since 0.1.0
 */
export const bubblewrap = (
  root: string,
  options?: BubblewrapOptions
): Layer.Layer<Sandbox, SandboxError, HostRequirements> => Layer.effect(Sandbox, makeBubblewrap(root, options))

/**
 * {@link bubblewrap} when `bwrap` works on this machine, else {@link local};
 * the chosen one is the service's `kind`, and a log line says which and why.
 * Under `local`, commands can read the host process's environment through
 * `/proc` whatever the allowlist: with `secretVariables`, `auto` fails with an
 * {@link IsolationUnavailableError} rather than fall back while one is set.
 *
 * @since 0.1.0
 */
export const auto = (
  root: string,
  options?: AutoOptions
): Layer.Layer<Sandbox, SandboxError | IsolationUnavailableError, HostRequirements> =>
  Layer.effect(
    Sandbox,
    makeBubblewrap(root, options).pipe(
      Effect.tap((sandbox) => Effect.logInfo(`Sandbox.auto: using bubblewrap for ${sandbox.root}`)),
      Effect.catchTag("NotSupportedError", (error) => fallBack(root, options, error))
    )
  )

/** {@link local} in place of bubblewrap, with a warning; refused while a secret variable is set. */
const fallBack = (
  root: string,
  options: AutoOptions | undefined,
  error: NotSupportedError
): Effect.Effect<Sandbox["Service"], SandboxError | IsolationUnavailableError, HostRequirements> => {
  const set = new Set((options?.secretVariables ?? []).filter((name) => (process.env[name] ?? "") !== ""))
  if (set.size > 0) {
    return Effect.fail(new IsolationUnavailableError({ reason: error.reason, variables: [...set].sort() }))
  }
  return makeLocal(root, options).pipe(
    Effect.tap((sandbox) =>
      Effect.logWarning(`Sandbox.auto: using local (no isolation) for ${sandbox.root}: ${error.reason}`)
    )
  )
}

// -----------------------------------------------------------------------------
// In-memory sandbox
// -----------------------------------------------------------------------------

const memoryRoot = "/workspace"

/**
 * An in-memory workspace, rooted at `/workspace`, holding `files` (paths
 * relative to the root, text or bytes). For tests of apps: file operations
 * behave like {@link local} (`..` and outside absolute paths are refused), and
 * every command fails with a {@link NotSupportedError}.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Sandbox } from "effect-agent/sandbox"
 *
 * const program = Effect.flatMap(Sandbox.Sandbox, (sandbox) => sandbox.readFile("src/a.ts"))
 * program.pipe(Effect.provide(Sandbox.memory({ "src/a.ts": "export const a = 1\n" })))
 * ```
 *
 * @since 0.1.0
 */
export const memory = (files: Readonly<Record<string, string | Uint8Array>> = {}): Layer.Layer<Sandbox> =>
  Layer.effect(
    Sandbox,
    Effect.gen(function*() {
      const path = yield* Path.Path
      const encoder = new TextEncoder()
      // Keyed by the path relative to the root ("" is the root).
      const store = new Map<string, { readonly bytes: Uint8Array; readonly modified: Date }>()
      const directories = new Set<string>([""])

      const relative = (input: string) =>
        Effect.map(resolveLexically(path, memoryRoot, input), (absolute) => path.relative(memoryRoot, absolute))
      const parentsOf = (rel: string): Array<string> => {
        const parents: Array<string> = []
        for (let dir = path.dirname(rel); dir !== "." && dir !== ""; dir = path.dirname(dir)) parents.push(dir)
        return parents
      }
      const put = (rel: string, bytes: Uint8Array, modified: Date) => {
        store.set(rel, { bytes, modified })
        for (const dir of parentsOf(rel)) directories.add(dir)
      }
      const now = yield* Clock.currentTimeMillis
      for (const [name, content] of Object.entries(files)) {
        const rel = yield* Effect.orDie(relative(name))
        put(rel, typeof content === "string" ? encoder.encode(content) : content, new Date(now))
      }

      const readFileBytes = (input: string) =>
        Effect.flatMap(relative(input), (rel) => {
          const file = store.get(rel)
          if (file !== undefined) return Effect.succeed(file.bytes)
          return Effect.fail(
            directories.has(rel)
              ? fsError("read", input, errnoReasons.EISDIR!)
              : new FileNotFoundError({ path: input })
          )
        })

      const writeFile = (input: string, content: string | Uint8Array) =>
        Effect.flatMap(relative(input), (rel) =>
          Effect.flatMap(Clock.currentTimeMillis, (millis) => {
            if (directories.has(rel)) {
              return Effect.fail(fsError("write", input, errnoReasons.EISDIR!))
            }
            if (parentsOf(rel).some((dir) => store.has(dir))) {
              return Effect.fail(fsError("write", input, errnoReasons.ENOTDIR!))
            }
            put(rel, typeof content === "string" ? encoder.encode(content) : content, new Date(millis))
            return Effect.void
          }))

      const children = (rel: string): Array<DirectoryEntry> => {
        const prefix = rel === "" ? "" : `${rel}/`
        const found = new Map<string, FileType>()
        for (const dir of directories) {
          if (dir !== rel && dir.startsWith(prefix) && !dir.slice(prefix.length).includes("/")) {
            found.set(dir.slice(prefix.length), "directory")
          }
        }
        for (const name of store.keys()) {
          if (name.startsWith(prefix) && !name.slice(prefix.length).includes("/")) {
            found.set(name.slice(prefix.length), "file")
          }
        }
        return [...found].map(([name, type]) => ({ name, type })).sort((a, b) => (a.name < b.name ? -1 : 1))
      }

      const list = (input: string) =>
        Effect.flatMap(relative(input), (rel) =>
          directories.has(rel)
            ? Effect.succeed(children(rel))
            : Effect.fail(
              store.has(rel)
                ? fsError("list", input, errnoReasons.ENOTDIR!)
                : new FileNotFoundError({ path: input })
            ))

      const stat = (input: string) =>
        Effect.flatMap(relative(input), (rel): Effect.Effect<FileInfo, FileNotFoundError> => {
          const file = store.get(rel)
          if (file !== undefined) {
            return Effect.succeed({ type: "file", size: file.bytes.length, modified: file.modified })
          }
          if (directories.has(rel)) return Effect.succeed({ type: "directory", size: 0, modified: undefined })
          return Effect.fail(new FileNotFoundError({ path: input }))
        })

      const remove = (input: string, options?: { readonly recursive?: boolean | undefined }) =>
        Effect.flatMap(relative(input), (rel): Effect.Effect<void, FileNotFoundError | FileSystemError> => {
          if (store.delete(rel)) return Effect.void
          if (rel === "") {
            return Effect.fail(rootRemoval(input))
          }
          if (!directories.has(rel)) return Effect.fail(new FileNotFoundError({ path: input }))
          if (options?.recursive !== true && children(rel).length > 0) {
            return Effect.fail(fsError("remove", input, errnoReasons.ENOTEMPTY!))
          }
          const prefix = `${rel}/`
          for (const name of [...store.keys()]) if (name.startsWith(prefix)) store.delete(name)
          for (const dir of [...directories]) if (dir === rel || dir.startsWith(prefix)) directories.delete(dir)
          return Effect.void
        })

      return fromOperations({
        kind: "memory",
        root: memoryRoot,
        exec: () =>
          Effect.fail(
            new NotSupportedError({ operation: "exec", reason: "the in-memory sandbox cannot run commands" })
          ),
        readFileBytes,
        writeFile,
        list,
        stat,
        remove
      })
    })
  ).pipe(Layer.provide(Path.layer))
