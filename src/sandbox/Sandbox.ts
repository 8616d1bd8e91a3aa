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
 *   in a view of the host: the system's directories read-only, the workspace
 *   read-write, private `/tmp` and home directory, the paths granted
 *   (`allowRead`, `allowWrite`), and nothing else of the host; every namespace
 *   unshared, no capability, and no network unless asked (without it, the
 *   host's Unix sockets are out of reach too). Paths in `hide`, the
 *   effect-agent state directory and the secrets of `/etc` are hidden.
 * - {@link auto}: bubblewrap when `bwrap` works on this machine, else local
 *   (unless secrets are in the environment and the caller says so).
 * - {@link memory}: an in-memory workspace for tests of apps; it cannot run
 *   commands.
 *
 * Every path is relative to the workspace root (an absolute path is accepted
 * when it lies inside the root). A command gets stdin, stdout and stderr and
 * no other descriptor: it starts in a shell that closes those the host
 * process inherited (which Node cannot mark close-on-exec), inside the
 * sandbox under bubblewrap, and then execs it. A command that exits, times out, or whose
 * fiber is interrupted, ends with its whole process tree: the processes that
 * descend from it or (under {@link local}) carry its marker
 * (`EFFECT_AGENT_COMMAND`, in its environment), `setsid` ones too, are found
 * in `/proc` and killed.
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
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import * as Bubblewrap from "./internal/bubblewrap.ts"
import { IsolationUnavailableError, type NotSupportedError, type SandboxError } from "./internal/errors.ts"
import * as Host from "./internal/host.ts"
import * as Memory from "./internal/memory.ts"
import type { Operations } from "./internal/model.ts"
import * as Process from "./internal/process.ts"

// -----------------------------------------------------------------------------
// Errors
// -----------------------------------------------------------------------------

export {
  CommandError,
  FileNotFoundError,
  FileSystemError,
  IsolationUnavailableError,
  NotSupportedError,
  PathEscapeError,
  type SandboxError
} from "./internal/errors.ts"

// -----------------------------------------------------------------------------
// Models
// -----------------------------------------------------------------------------

export {
  CommandResult,
  type DirectoryEntry,
  type ExecOptions,
  type FileInfo,
  type FileType,
  type Kind
} from "./internal/model.ts"

// -----------------------------------------------------------------------------
// Service
// -----------------------------------------------------------------------------

/**
 * The sandbox service: `kind`, the workspace `root` (its real path, for host
 * sandboxes), and the operations, on paths relative to the root: `exec`,
 * `readFile`, `readFileBytes`, `writeFile` (creating parent directories),
 * `list`, `stat` and `remove` (`recursive` to remove a directory that is not
 * empty).
 *
 * @category services
 * @since 0.1.0
 */
export class Sandbox extends Context.Service<Sandbox, Operations>()("effect-agent/Sandbox") {}

// -----------------------------------------------------------------------------
// Options
// -----------------------------------------------------------------------------

/**
 * Host environment variables passed to commands by default. Anything else
 * (API keys, tokens) stays out unless listed in `envAllowlist` or set in
 * `env`.
 *
 * @category options
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
 * @category options
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
 * @category options
 * @since 0.1.0
 */
export interface BubblewrapOptions extends HostOptions {
  /** Let commands reach the network. Default: `false`. */
  readonly network?: boolean | undefined
  /** The `bwrap` program. Default: `"bwrap"`, looked up on the allowlisted `PATH`. */
  readonly bwrap?: string | undefined
  /**
   * Host paths commands may read, beyond the workspace and the system's
   * directories (absolute, or relative to the current directory): each is
   * shown read-only on its real path, as it is on the host (a grant holding
   * `/tmp` or `$HOME` shows the host's; `/dev` and `/proc` stay the
   * sandbox's own), looked up before each command (a path that does not exist
   * then is skipped). A path inside the workspace needs no grant. Default:
   * none.
   */
  readonly allowRead?: ReadonlyArray<string> | undefined
  /**
   * Host paths commands may read and write (a cache, a second checkout), as
   * {@link allowRead}; a path in both lists is read-only. Default: none.
   */
  readonly allowWrite?: ReadonlyArray<string> | undefined
  /**
   * Host paths commands must not see, even inside the workspace or a granted
   * path (absolute, or relative to the current directory): an empty
   * directory is mounted over each directory, and an empty file over each
   * file, looked up before each command (a path that does not exist then is
   * skipped). The workspace stays visible when a hidden directory holds it;
   * inside the workspace, file operations refuse hidden paths too. Always
   * hidden besides: the secrets of `/etc` (`shadow`, `gshadow`, `sudoers`,
   * SSH host keys, `ssl/private`, VPN and network credentials, …). The
   * `effect-agent` command adds its own: its state directory (the key that
   * seals its sessions), its session directory and the server's store.
   * Default: nothing else.
   */
  readonly hide?: ReadonlyArray<string> | undefined
}

/**
 * Options of {@link auto}.
 *
 * @category options
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
 * @category utils
 * @since 0.1.0
 */
export const isSecretName = (name: string): boolean => secretName.test(name)

// -----------------------------------------------------------------------------
// Layers
// -----------------------------------------------------------------------------

/** The settings of host commands: the options with their defaults. Reads the host environment. */
const hostSettings = (options: HostOptions | undefined): Host.Settings => ({
  env: Process.allowlistedEnv(options?.envAllowlist ?? defaultEnvAllowlist, options?.env),
  timeout: Duration.fromInputUnsafe(options?.timeout ?? "2 minutes"),
  maxOutputBytes: options?.maxOutputBytes ?? 1024 * 1024,
  killGracePeriod: Duration.fromInputUnsafe(options?.killGracePeriod ?? "2 seconds")
})

const makeLocal = (root: string, options: HostOptions | undefined) =>
  Effect.suspend(() =>
    Host.make(root, { ...hostSettings(options), kind: "local", wrap: () => (argv) => Effect.succeed(argv) })
  )

const makeBubblewrap = (root: string, options: BubblewrapOptions | undefined) =>
  Effect.flatMap(Path.Path, (path) => {
    const settings = hostSettings(options)
    return Bubblewrap.make(root, settings, {
      bwrap: options?.bwrap ?? "bwrap",
      network: options?.network === true,
      hide: (options?.hide ?? []).map((hidden) => path.resolve(hidden)),
      allowRead: (options?.allowRead ?? []).map((granted) => path.resolve(granted)),
      allowWrite: (options?.allowWrite ?? []).map((granted) => path.resolve(granted)),
      home: settings.env.HOME
    })
  })

/**
 * A sandbox on a host directory. Every path is resolved inside `root` on its
 * real path; commands run with the host's privileges, with `root` (or the
 * given `cwd` inside it) as working directory, the allowlisted environment,
 * and a kill of their whole process tree when they exit, time out or are
 * interrupted: `SIGTERM`, then `SIGKILL` after `killGracePeriod`.
 *
 * The tree is the processes that carry the command's marker in their
 * environment or descend from it, found in `/proc`: a process that starts its
 * own session (`setsid`) is killed too. One that replaced its environment
 * (`env -i`) and lost its parent before the kill escapes, and so does every
 * one on a system without `/proc` (macOS) that left the command's process
 * group. A local command can write anywhere its user can, and read the host
 * process's whole environment (API keys included) through
 * `/proc/<pid>/environ`, whatever `envAllowlist` says, and open its
 * descriptors again through `/proc/<pid>/fd` (a command starts without
 * them, but that is no boundary): use
 * {@link bubblewrap} where that matters. The file operations check paths
 * just before using them; a process swapping a directory for a link in
 * between, or a hard link made to an outside file, is not detected.
 *
 * @category layers
 * @since 0.1.0
 */
export const local = (root: string, options?: HostOptions): Layer.Layer<Sandbox, SandboxError, Host.Requirements> =>
  Layer.effect(Sandbox, makeLocal(root, options))

/**
 * A sandbox whose commands run under bubblewrap (`bwrap`), in a view of the
 * host made of:
 *
 * - the system's directories, read-only: `/usr`, and `/bin`, `/sbin`,
 *   `/lib*` as the host has them, `/etc` (its secrets hidden), and on NixOS
 *   `/nix/store` and `/run/current-system`;
 * - the workspace, read-write;
 * - a fresh `/dev`, `/proc`, `/tmp` and `/var/tmp`, and an empty home
 *   directory at `$HOME` (what commands write there ends with them);
 * - the paths granted with `allowRead` (read-only) and `allowWrite`.
 *
 * Nothing else of the host is there: not the user's home, `/root`, `/home`,
 * `/opt`, `/var`, `/run`, `/sys`, nor the sessions, stores and keys they hold.
 * All namespaces are unshared, commands get no capability (root in the
 * sandbox cannot unmount or remount what the view is made of), no network
 * unless `network: true`, and they are killed with their parent. File
 * operations are those of {@link local}. Building the layer fails with a
 * {@link NotSupportedError} when `bwrap` does not work on the machine.
 *
 * Without the network, commands reach no host service over a Unix socket
 * either (the Docker daemon's, an ssh ControlMaster's, the session bus'):
 * abstract sockets stay in the host's network namespace, and the pathname
 * sockets the view shows (in a granted path, the workspace) are hidden,
 * looked up before each command. With `network: true`, commands share the
 * host's network namespace and the sockets the view shows. The paths in
 * `hide`, the effect-agent state directory and the secrets of `/etc` are
 * covered, even inside a granted path ({@link BubblewrapOptions}).
 *
 * @example
 * ```ts
 * import { NodeServices } from "@effect/platform-node"
 * import { Layer } from "effect"
 * import { Sandbox } from "effect-agent/sandbox"
 *
 * // The agent's checkout, a read-only toolchain, and a cache it may write; its sessions stay hidden.
 * export const sandbox = Sandbox.bubblewrap("/srv/work/app", {
 *   allowRead: ["/opt/node"],
 *   allowWrite: ["/srv/cache/npm"],
 *   hide: ["/srv/work/sessions"]
 * }).pipe(Layer.provide(NodeServices.layer))
 * ```
 *
 * @category layers
 * @since 0.1.0
 */
export const bubblewrap = (
  root: string,
  options?: BubblewrapOptions
): Layer.Layer<Sandbox, SandboxError, Host.Requirements> => Layer.effect(Sandbox, makeBubblewrap(root, options))

/**
 * {@link bubblewrap} when `bwrap` works on this machine, else {@link local};
 * the chosen one is the service's `kind`, and a log line says which and why.
 * Under `local`, commands can read the host process's environment through
 * `/proc` whatever the allowlist: with `secretVariables`, `auto` fails with an
 * {@link IsolationUnavailableError} rather than fall back while one is set.
 *
 * @category layers
 * @since 0.1.0
 */
export const auto = (
  root: string,
  options?: AutoOptions
): Layer.Layer<Sandbox, SandboxError | IsolationUnavailableError, Host.Requirements> =>
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
): Effect.Effect<Sandbox["Service"], SandboxError | IsolationUnavailableError, Host.Requirements> => {
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
 * Effect.runPromise(program.pipe(Effect.provide(Sandbox.memory({ "src/a.ts": "export const a = 1\n" }))))
 *   .then((text) => console.log(text.trimEnd())) // Output: export const a = 1
 * ```
 *
 * @category layers
 * @since 0.1.0
 */
export const memory = (files: Readonly<Record<string, string | Uint8Array>> = {}): Layer.Layer<Sandbox> =>
  Layer.effect(Sandbox, Memory.make(files)).pipe(Layer.provide(Path.layer))
