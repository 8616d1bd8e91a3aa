/**
 * The bubblewrap sandbox: the host sandbox whose commands run under `bwrap`
 * in a view of the host made of the system's directories (read-only), the
 * workspace (read-write), the paths the operator grants, and fresh `/tmp`,
 * `/var/tmp`, home, `/dev` and `/proc`; every namespace unshared, every
 * capability dropped and, without the network, no host socket in reach.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Path from "effect/Path"
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
  /** Absolute host paths commands may read. */
  readonly allowRead: ReadonlyArray<string>
  /** Absolute host paths commands may read and write. */
  readonly allowWrite: ReadonlyArray<string>
  /** The commands' `HOME`, where they get an empty directory of their own; `undefined`: none. */
  readonly home: string | undefined
}

/**
 * The host's system directories, shown read-only: the programs and libraries
 * (`/usr`, and `/bin`, `/sbin`, `/lib*` as the host has them: links into
 * `/usr` or directories), the configuration (`/etc`, but for
 * {@link etcSecrets}), and on NixOS the store and the current system.
 * Nothing else of the host: no home directory, `/root`, `/home`, `/opt`,
 * `/srv`, `/mnt`, `/media`, `/var`, `/run` or `/sys`.
 */
export const systemPaths: ReadonlyArray<string> = [
  "/usr",
  "/bin",
  "/sbin",
  "/lib",
  "/lib32",
  "/lib64",
  "/libx32",
  "/etc",
  "/nix/store",
  "/run/current-system"
]

/**
 * Entries of `/etc` that tools read and distributions often make links to
 * elsewhere (`/run/systemd/resolve/stub-resolv.conf`,
 * `/var/lib/ca-certificates`): what they lead to is shown too, read-only.
 */
const etcLinks = ["/etc/resolv.conf", "/etc/hosts", "/etc/localtime", "/etc/ssl/certs", "/etc/pki/tls/certs"]

/**
 * The secrets of `/etc`, always hidden: password hashes, sudo rules, private
 * keys and certificates' keys, network and VPN credentials, Kerberos keytabs,
 * system credentials (and every `/etc/ssh/ssh_host_*_key`, looked up before
 * each command). Readable by root only on the host, but an agent run as root
 * (in a container, on CI) would read them.
 */
export const etcSecrets: ReadonlyArray<string> = [
  "/etc/shadow",
  "/etc/shadow-",
  "/etc/gshadow",
  "/etc/gshadow-",
  "/etc/sudoers",
  "/etc/sudoers.d",
  "/etc/security/opasswd",
  "/etc/ssl/private",
  "/etc/pki/tls/private",
  "/etc/letsencrypt",
  "/etc/ipsec.secrets",
  "/etc/ipsec.d/private",
  "/etc/ppp/chap-secrets",
  "/etc/ppp/pap-secrets",
  "/etc/wireguard",
  "/etc/openvpn",
  "/etc/NetworkManager/system-connections",
  "/etc/wpa_supplicant",
  "/etc/krb5.keytab",
  "/etc/credstore",
  "/etc/credstore.encrypted",
  "/etc/libvirt/secrets",
  "/etc/docker/key.json",
  "/etc/mysql/debian.cnf"
]

/** A path that exists: its real path, and whether it is a directory. */
interface Found {
  readonly real: string
  readonly directory: boolean
}

/** A path as it is now, on its real path; `undefined` when it does not exist. */
const lookUp = (fs: FileSystem.FileSystem, given: string): Effect.Effect<Found | undefined> =>
  fs.realPath(given).pipe(
    Effect.flatMap((real) => Effect.map(fs.stat(real), (info) => ({ real, directory: info.type === "Directory" }))),
    Effect.orElseSucceed(() => undefined)
  )

/** The paths that exist now, on their real paths, each once. */
const existing = (fs: FileSystem.FileSystem, paths: ReadonlyArray<string>): Effect.Effect<ReadonlyArray<Found>> =>
  Effect.map(Effect.forEach(paths, (given) => lookUp(fs, given)), (found) => {
    const byPath = new Map<string, Found>()
    for (const entry of found) if (entry !== undefined) byPath.set(entry.real, entry)
    return [...byPath.values()]
  })

/** The host's SSH host private keys (`/etc/ssh/ssh_host_*_key`). */
const sshHostKeys = (fs: FileSystem.FileSystem): Effect.Effect<ReadonlyArray<string>> =>
  fs.readDirectory("/etc/ssh").pipe(
    Effect.map((names) => names.filter((name) => /^ssh_host_.*_key$/.test(name)).map((name) => `/etc/ssh/${name}`)),
    Effect.orElseSucceed(() => [])
  )

/** One mount of the view: where it goes, and its `bwrap` arguments. */
interface Mount {
  readonly at: string
  readonly args: ReadonlyArray<string>
}

/** The system's part of the view: its mounts, and the real paths they show. */
interface SystemView {
  readonly mounts: ReadonlyArray<Mount>
  readonly trees: ReadonlyArray<string>
}

/**
 * The system's directories ({@link systemPaths}) and what the links of
 * `/etc` lead to ({@link etcLinks}), looked up once: each is bound read-only
 * on its real path, and a link is made again as it is (`/bin -> usr/bin`).
 */
const systemView = (fs: FileSystem.FileSystem, path: Path.Path): Effect.Effect<SystemView> =>
  Effect.gen(function*() {
    const mounts: Array<Mount> = []
    const trees: Array<string> = []
    const show = (real: string) => {
      if (trees.some((tree) => isWithin(path, tree, real))) return
      mounts.push({ at: real, args: ["--ro-bind", real, real] })
      trees.push(real)
    }
    for (const given of systemPaths) {
      const real = yield* Effect.option(fs.realPath(given))
      if (real._tag === "None") continue
      show(real.value)
      if (real.value === given) continue
      const link = yield* Effect.option(fs.readLink(given))
      mounts.push({ at: given, args: ["--symlink", link._tag === "Some" ? link.value : real.value, given] })
    }
    for (const given of etcLinks) {
      const real = yield* Effect.option(fs.realPath(given))
      if (real._tag === "Some") show(real.value)
    }
    return { mounts, trees }
  })

/** Covers a hidden path: an empty tmpfs over a directory, `/dev/null` over anything else. */
const cover = (hidden: Found): ReadonlyArray<string> =>
  hidden.directory ? ["--tmpfs", hidden.real] : ["--ro-bind", "/dev/null", hidden.real]

/** Whether one of the two paths holds the other. */
const overlaps = (path: Path.Path, a: string, b: string) => isWithin(path, a, b) || isWithin(path, b, a)

/** How deep a path is: `/` 0, `/usr` 1, `/usr/lib` 2. */
const depth = (path: Path.Path, at: string) => at.split(path.sep).filter((part) => part !== "").length

/**
 * The view's mounts up to the workspace, and its covers after it, looked up
 * before each command:
 *
 * - the system's directories (but for those a grant shows), a fresh `/dev`
 *   and `/proc`, private `/tmp`, `/var/tmp` and home directory (but for those
 *   a grant shows: a granted path is shown as it is on the host, `/dev` and
 *   `/proc` excepted), and the granted paths (a path granted both ways is
 *   read-only; one inside the workspace is the workspace's already), all
 *   mounted parents first;
 * - the covers of what commands must not see among what the view shows: the
 *   hidden paths, the secrets of `/etc` and, without the network, the host's
 *   sockets, after the grants (a hidden path inside a granted one stays
 *   hidden). A hidden path holding the workspace is covered before the
 *   workspace is bound (the workspace stays visible), every other one after.
 */
const lookedUp = (fs: FileSystem.FileSystem, path: Path.Path, options: Options, system: SystemView) =>
(root: string) =>
  Effect.gen(function*() {
    const readOnly = yield* existing(fs, options.allowRead)
    const writable = (yield* existing(fs, options.allowWrite)).filter((entry) =>
      !readOnly.some((other) => other.real === entry.real)
    )
    const grants = [
      ...readOnly.map((entry): Mount => ({ at: entry.real, args: ["--ro-bind", entry.real, entry.real] })),
      ...writable.map((entry): Mount => ({ at: entry.real, args: ["--bind", entry.real, entry.real] }))
    ].filter((grant) => !isWithin(path, root, grant.at))
    const granted = (at: string) => grants.some((grant) => isWithin(path, grant.at, at))
    const home = options.home !== undefined && path.isAbsolute(options.home) && options.home !== "/" &&
        !isWithin(path, root, options.home)
      ? [options.home]
      : []
    const fresh: Array<Mount> = [
      ...system.mounts.filter((mount) => !granted(mount.at)),
      ...["/tmp", "/var/tmp", ...home].filter((at) => !granted(at)).map((at): Mount => ({ at, args: ["--tmpfs", at] })),
      { at: "/dev", args: ["--dev", "/dev"] },
      { at: "/proc", args: ["--proc", "/proc"] }
    ]
    // A stable sort: at the same depth, the system, the fresh directories, then the grants.
    const mounts = [...fresh, ...grants].sort((a, b) => depth(path, a.at) - depth(path, b.at))
    const visible = [...system.trees, ...grants.map((grant) => grant.at), root]
    const hidden = (yield* existing(fs, [...options.hide, ...etcSecrets, ...(yield* sshHostKeys(fs))]))
      .filter((entry) => visible.some((tree) => overlaps(path, tree, entry.real)))
    const sockets = options.network ? [] : yield* hideSockets(fs, path)(root, visible)
    const holdsWorkspace = (entry: Found) => isWithin(path, entry.real, root)
    return {
      beforeWorkspace: [...mounts.flatMap((mount) => mount.args), ...hidden.filter(holdsWorkspace).flatMap(cover)],
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
 * The `bwrap` arguments that hide the host's Unix sockets that the view shows
 * ({@link HostSockets.find}): a tmpfs over each directory directly under
 * `/run` that holds sockets (one mount where there may be dozens of sockets:
 * a bind costs about a millisecond of the command's start), `/dev/null` over
 * every other socket (a connection to it is refused). `/run` itself stays,
 * and so does a directory holding the workspace.
 */
const hideSockets = (fs: FileSystem.FileSystem, path: Path.Path) =>
(root: string, visible: ReadonlyArray<string>) =>
  Effect.map(HostSockets.find(fs, path, visible), ({ directories, sockets }) => {
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
 * The `bwrap` argument vector. The view ({@link lookedUp}): the system's
 * directories read-only ({@link systemView}); a minimal `/dev`, a fresh
 * `/proc`, private `/tmp` and `/var/tmp`, and an empty home directory of the
 * commands' own (unless the workspace holds it); the granted paths; the
 * workspace read-write (mounted after all of them, so a workspace under
 * `/tmp` or the home directory stays visible); the covers; the rest of `/` an
 * empty, read-only directory. Every namespace unshared, every capability
 * dropped (a command run as root could otherwise unmount a cover, or remount
 * the view read-write), a new session (no terminal injection), and death with
 * the parent: killing `bwrap` kills the sandbox's init, which takes every
 * process of the PID namespace with it.
 *
 * Without the network, no host socket is reachable either: the network
 * namespace keeps the abstract ones out, and the pathname ones that the view
 * shows are hidden ({@link hideSockets}). A socket removed between its lookup
 * and the start of `bwrap` makes the command fail ("Can't create file at …"),
 * a narrow window. With the network, commands share the host's network
 * namespace, and its sockets.
 */
const argv = (
  options: Options,
  lookUpNow: (root: string) => Effect.Effect<{
    readonly beforeWorkspace: ReadonlyArray<string>
    readonly afterWorkspace: ReadonlyArray<string>
  }>
) =>
(root: string): Host.Wrap =>
(command: Argv, cwd: string) =>
  Effect.map(lookUpNow(root), ({ afterWorkspace, beforeWorkspace }): Argv => [
    options.bwrap,
    "--unshare-all",
    ...(options.network ? ["--share-net"] : []),
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
    ...beforeWorkspace,
    "--bind",
    root,
    root,
    ...afterWorkspace,
    "--remount-ro",
    "/",
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
    const system = yield* systemView(fs, path)
    const sandbox = yield* Host.make(root, {
      ...settings,
      kind: "bubblewrap",
      wrap: argv(options, lookedUp(fs, path, options, system)),
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
