/**
 * Shared fixtures of the sandbox tests: a workspace beside an "outside"
 * directory, with symbolic links leading out of the workspace, and helpers to
 * check that processes are gone.
 */
import { NodeServices } from "@effect/platform-node"
import { Effect, FileSystem, Layer, Path } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import { Sandbox } from "effect-agent/sandbox"

export interface Workspace {
  /** The workspace root (real path). */
  readonly root: string
  /** A directory beside the workspace, holding `secret.txt`. */
  readonly outside: string
}

/**
 * Builds, in a scoped temp directory (under `directory`, default the OS's):
 *
 * ```
 * outside/secret.txt          "secret"
 * workspace/inside.txt        "inside"
 * workspace/sub/              (empty directory)
 * workspace/link-out      ->  ../outside/secret.txt   (symlink to a file outside)
 * workspace/dir-out       ->  ../outside              (symlinked parent directory)
 * workspace/dangling-out  ->  ../outside/new.txt      (dangling, leads outside)
 * workspace/link-in       ->  inside.txt              (stays inside)
 * ```
 */
export const makeWorkspace = (directory?: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const base = yield* fs.realPath(yield* fs.makeTempDirectoryScoped({ directory, prefix: "effect-agent-sandbox-" }))
    const root = path.join(base, "workspace")
    const outside = path.join(base, "outside")
    yield* fs.makeDirectory(path.join(root, "sub"), { recursive: true })
    yield* fs.makeDirectory(outside)
    yield* fs.writeFileString(path.join(outside, "secret.txt"), "secret")
    yield* fs.writeFileString(path.join(root, "inside.txt"), "inside")
    yield* fs.symlink("../outside/secret.txt", path.join(root, "link-out"))
    yield* fs.symlink("../outside", path.join(root, "dir-out"))
    yield* fs.symlink("../outside/new.txt", path.join(root, "dangling-out"))
    yield* fs.symlink("inside.txt", path.join(root, "link-in"))
    return { root, outside } satisfies Workspace
  })

/** What the outside directory holds now: its entries and the secret's content. */
export const outsideState = (workspace: Workspace) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    return {
      entries: (yield* fs.readDirectory(workspace.outside)).sort(),
      secret: yield* fs.readFileString(path.join(workspace.outside, "secret.txt"))
    }
  })

/** A process is alive when /proc has it and it is not a zombie. */
export const isAlive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z"
  } catch {
    return false
  }
}

/** Live processes running exactly `argv` (seen from the host, whatever their PID namespace). */
export const processesRunning = (argv: ReadonlyArray<string>): Array<number> => {
  const wanted = `${argv.join("\0")}\0`
  const found: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const pid = Number(entry)
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8") === wanted && isAlive(pid)) found.push(pid)
    } catch {
      // the process exited while we looked
    }
  }
  return found
}

/** Polls until `check` holds or `millis` pass; returns the last value of `check`. */
export const eventually = (check: () => boolean, millis = 20_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + millis
    while (!check() && Date.now() < deadline) yield* Effect.sleep("20 millis")
    return check()
  })

/** The local sandbox on a workspace, with the Node platform. */
export const localLayer = (root: string, options?: Sandbox.HostOptions) =>
  Sandbox.local(root, options).pipe(Layer.provide(NodeServices.layer))

/** The bubblewrap sandbox on a workspace, with the Node platform. */
export const bubblewrapLayer = (root: string, options?: Sandbox.BubblewrapOptions) =>
  Sandbox.bubblewrap(root, options).pipe(Layer.provide(NodeServices.layer))
