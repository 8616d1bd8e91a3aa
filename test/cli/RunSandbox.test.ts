/**
 * `--sandbox auto` where bubblewrap does not work (a `bwrap` on PATH that
 * fails): it falls back to plain processes in the workspace, unless a secret
 * is in the environment, which such commands could read through `/proc`.
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { builtCommand } from "./build.ts"
import { live, run, scripted } from "./support.ts"

let cli = ""
/** A directory whose `bwrap` fails as bwrap fails where user namespaces are refused. */
let failingBwrap = ""
beforeAll(async () => {
  cli = await builtCommand()
  failingBwrap = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-fake-bwrap-"))
  Fs.writeFileSync(
    Path.join(failingBwrap, "bwrap"),
    "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n",
    { mode: 0o755 }
  )
  return () => Fs.rmSync(failingBwrap, { recursive: true, force: true })
}, 240_000)

const turns = [{ toolCalls: [{ name: "read_file", params: { path: "a.txt" } }] }, { text: "It says hello world." }]

/** `run` on a scripted model reading a.txt, with the failing bwrap first on PATH. */
const runWithoutBubblewrap = (flags: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.gen(function*() {
    const dir = yield* scripted(turns)
    const args = ["run", "--provider", "scripted", "--script", `${dir}/script.json`, "--task", "What is in a.txt?"]
    return yield* run(cli, [...args, ...flags], {
      cwd: dir,
      env: { PATH: `${failingBwrap}:${process.env.PATH}`, ...env }
    })
  })

const refusal = (names: string, verb = "is", pronoun = "it") =>
  "bubblewrap is not usable here (bwrap does not work here: bwrap: setting up uid map: Permission denied) and " +
  `${names} ${verb} in the environment: install bubblewrap, or pass --sandbox local to accept that commands can ` +
  `read ${pronoun}`

describe.concurrent("--sandbox auto without bubblewrap", () => {
  live("no secret in the environment: commands run without isolation, with a warning", () =>
    Effect.gen(function*() {
      const out = yield* runWithoutBubblewrap([], {})
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(out.stdout, "It says hello world.\n")
      assert.include(out.stderr, "Sandbox.auto: using local (no isolation) for ")
    }))

  live("an API key in the environment: exit 22 with what to do, and nothing runs", () =>
    Effect.gen(function*() {
      const out = yield* runWithoutBubblewrap(["--json"], { OPENAI_API_KEY: "sk-test-key-123" })
      assert.strictEqual(out.code, 22, out.stderr)
      assert.include(out.stderr, refusal("OPENAI_API_KEY"))
      const result = JSON.parse(out.stdout)
      assert.deepStrictEqual([result.exitCode, result.turns], [22, 0])
      assert.notInclude(out.stdout + out.stderr, "sk-test-key-123")
    }))

  live("--api-key-env's variable and any variable named like a secret count too", () =>
    Effect.gen(function*() {
      const named = yield* runWithoutBubblewrap(["--api-key-env", "WORK_KEY"], { WORK_KEY: "k-1" })
      assert.strictEqual(named.code, 22, named.stderr)
      assert.include(named.stderr, refusal("WORK_KEY"))
      const tokens = yield* runWithoutBubblewrap([], { GITHUB_TOKEN: "ghp-1", AWS_SECRET_ACCESS_KEY: "a-1" })
      assert.strictEqual(tokens.code, 22, tokens.stderr)
      assert.include(tokens.stderr, refusal("AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN", "are", "them"))
      // set but empty: no secret
      const empty = yield* runWithoutBubblewrap([], { OPENAI_API_KEY: "" })
      assert.strictEqual(empty.code, 0, empty.stderr)
    }))

  live("--sandbox local says so: the run goes on with the key in the environment", () =>
    Effect.gen(function*() {
      const out = yield* runWithoutBubblewrap(["--sandbox", "local"], { OPENAI_API_KEY: "sk-test-key-123" })
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(out.stdout, "It says hello world.\n")
      assert.notInclude(out.stderr, "no isolation")
    }))
})
