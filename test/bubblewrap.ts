/**
 * Whether bubblewrap works on this machine, for the tests whose outcome
 * depends on it. The probe is `Sandbox.bubblewrap` itself (the very `bwrap`
 * flags commands get, the `bwrap` found on `PATH`), so a test skipped here is
 * one the sandbox would refuse to run. Importing this module on a machine
 * where bubblewrap does not work prints why, once per test file; the tests
 * that need it are skipped with that reason as their note (shown by
 * `--reporter=verbose`).
 */
import { NodeServices } from "@effect/platform-node"
import { it, type Vitest } from "@effect/vitest"
import { Effect, FileSystem, Layer } from "effect"
import { Sandbox } from "effect-agent/sandbox"
import * as Fs from "node:fs"

/** Whether `Sandbox.bubblewrap` can be built here; why not, if not. */
export const bubblewrap: { readonly works: boolean; readonly reason: string } = await Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-bwrap-probe-" })
  return yield* Layer.build(Sandbox.bubblewrap(dir))
}).pipe(
  Effect.scoped,
  Effect.match({
    // The reason as `Sandbox.auto` words it when it falls back.
    onFailure: (error) => ({ works: false, reason: error._tag === "NotSupportedError" ? error.reason : error.message }),
    onSuccess: () => ({ works: true, reason: "" })
  }),
  Effect.provide(NodeServices.layer),
  Effect.runPromise
)

/** Why the tests that need bubblewrap are skipped. */
export const skipReason =
  `bubblewrap cannot run here (${bubblewrap.reason}); install it with apt-get install -y bubblewrap`

if (!bubblewrap.works) console.warn(`SKIPPING the tests that need bubblewrap: ${skipReason}`)

/**
 * `test` where bubblewrap works; elsewhere a test of the same name that is
 * skipped with {@link skipReason} as its note.
 *
 * @example
 * needsBubblewrap(it.live)("commands cannot write outside the workspace", () => …)
 */
export const needsBubblewrap = <R>(test: Vitest.Test<R>): Vitest.Test<R> =>
  bubblewrap.works ? test : (name) => it(name, (context) => context.skip(skipReason))

/**
 * Whether the host's `path` is what a command in the sandbox sees there: the sandbox has its own `/tmp`, so a
 * checkout under `/tmp` (where CI may clone) and the Node that `.ci/run` installs in it are not visible inside.
 */
export const visibleInSandbox = (path: string): boolean => path !== "/tmp" && !path.startsWith("/tmp/")

/**
 * A directory on the host that commands in the sandbox see as it is (read-only), for the tests that plant or
 * probe files there: `preferred` unless it is under `/tmp`, else a new directory under `/var/tmp`, removed
 * when the process exits.
 */
export const hostDirectory = (preferred: string): string => {
  if (visibleInSandbox(preferred)) return preferred
  const dir = Fs.mkdtempSync("/var/tmp/effect-agent-host-")
  process.once("exit", () => Fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

let node: string | undefined

/**
 * A `node` a command in the sandbox can run: this process's, or a copy of it under `/var/tmp` when this one is
 * under `/tmp` (made once per test file, removed when the process exits).
 */
export const sandboxNode = (): string => {
  if (visibleInSandbox(process.execPath)) return process.execPath
  if (node === undefined) {
    node = `${hostDirectory("/tmp")}/node`
    Fs.copyFileSync(process.execPath, node)
    Fs.chmodSync(node, 0o755)
  }
  return node
}
