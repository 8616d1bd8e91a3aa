/**
 * The descriptors a host process inherited do not reach its commands. Node
 * cannot mark inherited descriptors close-on-exec, so the test starts a Node
 * process (test/sandbox/descriptors-child.ts) with some open, as a shell does
 * with `100</secret/key 101</secret`: a key file on 100, its directory on 101,
 * a low one (5) and a writable pipe on 251, as a job runner leaves. The
 * child runs a bash call in a sandbox (or an external worker's turn), which
 * must see stdin, stdout and stderr only.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn, type StdioOptions } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { bashPaths, closingInherited } from "../../src/sandbox/internal/descriptors.ts"
import { needsBubblewrap } from "../bubblewrap.ts"
import { childScript } from "../children.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))

interface Secret {
  /** The directory holding `key` and `marker.txt`, outside every workspace. */
  readonly dir: string
  readonly key: string
}

/** A fresh secret directory, and a workspace, removed after the test. */
const setUp = Effect.acquireRelease(
  Effect.sync(() => {
    const base = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-fds-")))
    const dir = Path.join(base, "hostsecret")
    const workspace = Path.join(base, "workspace")
    Fs.mkdirSync(dir)
    Fs.mkdirSync(workspace)
    Fs.writeFileSync(Path.join(dir, "key"), "HOST-PRIVATE-KEY\n")
    Fs.writeFileSync(Path.join(dir, "marker.txt"), "other-session-secret\n")
    return { base, secret: { dir, key: Path.join(dir, "key") } satisfies Secret, workspace }
  }),
  ({ base }) => Effect.sync(() => Fs.rmSync(base, { recursive: true, force: true }))
)

interface Exited {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs `argv` with stdin, stdout and stderr, and the key on 5 and 100, the
 * secret directory on 101, and a pipe on 251 (whose other end the test holds).
 */
const withInherited = (
  argv: ReadonlyArray<string>,
  secret: Secret,
  cwd: string,
  env: Readonly<Record<string, string>> | undefined = undefined
) =>
  Effect.acquireUseRelease(
    Effect.sync(() => ({ key: Fs.openSync(secret.key, "r"), dir: Fs.openSync(secret.dir, "r") })),
    ({ dir, key }) =>
      Effect.callback<Exited>((resume) => {
        const stdio: StdioOptions = Array.from({ length: 252 }, () => "ignore" as const)
        // stdin a socket, as Node's pipes are (bash reads ~/.bashrc then, unless told not to)
        stdio[0] = "pipe"
        stdio[1] = "pipe"
        stdio[2] = "pipe"
        stdio[5] = key
        stdio[100] = key
        stdio[101] = dir
        stdio[251] = "pipe"
        const child = spawn(argv[0]!, argv.slice(1), { cwd, stdio, ...(env === undefined ? {} : { env }) })
        child.stdin?.end()
        let stdout = ""
        let stderr = ""
        child.stdout?.on("data", (chunk) => (stdout += chunk))
        child.stderr?.on("data", (chunk) => (stderr += chunk))
        const timer = setTimeout(() => child.kill("SIGKILL"), 50_000)
        child.on("close", (code) => {
          clearTimeout(timer)
          resume(Effect.succeed({ code, stdout, stderr }))
        })
        return Effect.sync(() => child.kill("SIGKILL"))
      }),
    ({ dir, key }) =>
      Effect.sync(() => {
        Fs.closeSync(key)
        Fs.closeSync(dir)
      })
  )

/** The child script, bundled (see test/children.ts): set before the first test. */
let script = ""
beforeAll(async () => {
  script = await childScript("test/sandbox/descriptors-child.ts")
})

const child = (mode: "local" | "bubblewrap" | "worker", workspace: string) => [
  process.execPath,
  script,
  mode,
  workspace,
  Path.join(root, "test/fixtures/workers/fake-claude.mjs")
]

/** A bash call in the sandbox, from a process holding the inherited descriptors. */
const attack = (mode: "local" | "bubblewrap") =>
  Effect.gen(function*() {
    const { secret, workspace } = yield* setUp
    const exited = yield* withInherited(child(mode, workspace), secret, root)
    assert.strictEqual(exited.code, 0, exited.stderr)
    const result: { exitCode: number; stdout: string; stderr: string } = JSON.parse(exited.stdout)
    // The shell of the bash call has stdin, stdout and stderr, and nothing else.
    assert.strictEqual(result.stdout, "0\n1\n2\n")
    assert.include(result.stderr, "100: Bad file descriptor")
    assert.notInclude(result.stdout + result.stderr, "HOST-PRIVATE-KEY")
    assert.notInclude(result.stdout + result.stderr, "marker.txt")
    assert.isFalse(Fs.existsSync(Path.join(secret.dir, "planted")))
  }).pipe(Effect.scoped)

describe("M4: inherited descriptors", () => {
  it.live(
    "M4: a command under Sandbox.local gets stdin, stdout and stderr, not the descriptors its host process inherited",
    () => attack("local"),
    60_000
  )

  needsBubblewrap(it.live)(
    "M4: a command under Sandbox.bubblewrap cannot read a key or write into a directory through inherited descriptors",
    () => attack("bubblewrap"),
    60_000
  )

  it.live("M4: an external worker's CLI does not get the descriptors its host process inherited", () =>
    Effect.gen(function*() {
      const { secret, workspace } = yield* setUp
      Fs.chmodSync(Path.join(root, "test/fixtures/workers/fake-claude.mjs"), 0o755)
      const exited = yield* withInherited(child("worker", workspace), secret, root)
      assert.strictEqual(exited.code, 0, exited.stderr)
      const [call] = Fs.readFileSync(Path.join(workspace, "fake-calls.jsonl"), "utf8").split("\n")
      const fds: Record<string, string> = JSON.parse(call!).fds
      assert.isAbove(Object.keys(fds).length, 0)
      // Node's own descriptors are there (its event loop's); none of those inherited, nothing leads to the secrets.
      assert.deepStrictEqual(Object.entries(fds).filter(([, target]) => target.startsWith(secret.dir)), [])
      for (const fd of ["100", "101", "251"]) assert.isUndefined(fds[fd], `descriptor ${fd}: ${fds[fd]}`)
    }).pipe(Effect.scoped), 60_000)

  it.live("where there is no bash, /bin/sh closes 3 to 9 and refuses to run the command with one above 9 open", () =>
    Effect.gen(function*() {
      const { secret, workspace } = yield* setUp
      const sh = { program: "/bin/sh", bash: false }
      const env = { PATH: process.env.PATH ?? "" }
      const refused = yield* withInherited(closingInherited(["echo", "ran"], env, sh), secret, workspace, env)
      assert.deepStrictEqual([refused.code, refused.stdout], [126, ""])
      assert.match(refused.stderr, /descriptor \d\d+ is open, and \/bin\/sh cannot close it/)
      if (!bashPaths.some((path) => Fs.existsSync(path))) return
      // With only a low one open (bash closes the rest first, then sh opens the key on 5), sh closes it and runs.
      const listed = closingInherited(["sh", "-c", "ls /proc/$$/fd"], env, sh)
      const low = closingInherited(["/bin/sh", "-c", `exec 5<"$0"; exec "$@"`, secret.key, ...listed], env)
      const ran = yield* withInherited(low, secret, workspace, env)
      assert.deepStrictEqual([ran.code, ran.stdout, ran.stderr], [0, "0\n1\n2\n", ""])
    }).pipe(Effect.scoped), 60_000)

  it.live("the command's environment is the one it was given: bash adds no PWD or SHLVL, and reads no ~/.bashrc", () =>
    Effect.gen(function*() {
      if (!bashPaths.some((path) => Fs.existsSync(path))) return
      const { secret, workspace } = yield* setUp
      Fs.writeFileSync(Path.join(workspace, ".bashrc"), "export SOURCED=bashrc\n")
      const env = { PATH: process.env.PATH ?? "", HOME: workspace, ODD: "a b\nc", "NOT-A-NAME": "kept" }
      const exited = yield* withInherited(closingInherited(["env", "-0"], env), secret, workspace, env)
      assert.strictEqual(exited.code, 0, exited.stderr)
      assert.deepStrictEqual(exited.stdout.split("\0").filter((line) => line !== "").sort(), [
        `HOME=${workspace}`,
        "NOT-A-NAME=kept",
        "ODD=a b\nc",
        `PATH=${env.PATH}`
      ])
    }).pipe(Effect.scoped), 60_000)
})
