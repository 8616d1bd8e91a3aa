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
import * as Path from "node:path"

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

/** Whether `path` lies outside `/tmp`, which the sandbox replaces with a private one. */
const outsideTmp = (path: string): boolean => path !== "/tmp" && !path.startsWith("/tmp/")

/**
 * A directory on the host outside `/tmp`, for the tests that plant or probe files where a granted path
 * (`allowRead`, `allowWrite`) or the host's own view would show them: `preferred` unless it is under `/tmp`
 * (where CI may clone), else a new directory under `/var/tmp`, removed when the process exits.
 */
export const hostDirectory = (preferred: string): string => {
  if (outsideTmp(preferred)) return preferred
  const dir = Fs.mkdtempSync("/var/tmp/effect-agent-host-")
  process.once("exit", () => Fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/**
 * A `node` a command in the sandbox can run: this process's own, and the grant (`allowRead`) that shows it.
 * The sandbox shows the host's system directories only, so a Node installed elsewhere (nvm under the home
 * directory, `/opt`, a checkout under `/tmp`) is there only when its directory is granted.
 */
export const sandboxNode: { readonly program: string; readonly allowRead: ReadonlyArray<string> } = {
  program: Fs.realpathSync(process.execPath),
  allowRead: [Path.dirname(Fs.realpathSync(process.execPath))]
}
