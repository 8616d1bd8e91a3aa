/**
 * `examples/external-worker.ts` (the block of docs/supervised.md's "External
 * workers"), run as a user runs it, in a workspace, with `claude` on the
 * `PATH`: here the stand-in CLI of the worker's tests, which writes the
 * documented stream-json events and records each call. Two turns, the second
 * resuming the first's session; the CLI gets the variable the example names
 * and none other.
 */
import { assert, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { blocks, root, section } from "../pages.ts"

const example = "examples/external-worker.ts"

it("docs/supervised.md's external worker is examples/external-worker.ts", () => {
  assert.strictEqual(blocks(section("supervised", "External workers"), "ts")[0], Fs.readFileSync(`${root}${example}`, "utf8"))
})

it("examples/external-worker.ts: two turns of claude in the workspace, the second resuming the first's session", async () => {
  const workspace = Fs.mkdtempSync(Path.join(Os.tmpdir(), "external-worker-example-"))
  const bin = Fs.mkdtempSync(Path.join(Os.tmpdir(), "external-worker-bin-"))
  try {
    const fake = Path.join(root, "test/fixtures/workers/fake-claude.mjs")
    Fs.chmodSync(fake, 0o755)
    Fs.symlinkSync(fake, Path.join(bin, "claude"))
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--conditions=effect-agent-source", Path.join(root, example)],
      {
        cwd: workspace,
        env: {
          ...process.env,
          PATH: `${bin}${Path.delimiter}${process.env.PATH}`,
          ANTHROPIC_API_KEY: "sk-ant-example",
          EXAMPLE_SECRET: "not for the CLI"
        }
      }
    )
    // the text of each assistant message, and the result's usage (cache writes and reads counted as input)
    assert.strictEqual(stdout, "turn 1: Listing. \n\nDone.\nturn 2: Listing. \n\nDone. (365 tokens in, 25 out)\n")
    const calls: ReadonlyArray<{ argv: ReadonlyArray<string>; env: Record<string, string>; message: string }> = Fs
      .readFileSync(Path.join(workspace, "fake-calls.jsonl"), "utf8").trim().split("\n").map((line) => JSON.parse(line))
    assert.deepStrictEqual(calls.map((call) => call.message), ["Make npm test pass", "2 tests still fail: …"])
    const session = calls[0]!.argv.find((arg) => arg.startsWith("--session-id="))?.slice("--session-id=".length)
    assert.isDefined(session)
    assert.include(calls[0]!.argv, "--permission-mode=acceptEdits")
    assert.include(calls[1]!.argv, `--resume=${session}`)
    for (const call of calls) {
      assert.strictEqual(call.env.ANTHROPIC_API_KEY, "sk-ant-example")
      assert.isUndefined(call.env.EXAMPLE_SECRET)
    }
  } finally {
    Fs.rmSync(workspace, { recursive: true, force: true })
    Fs.rmSync(bin, { recursive: true, force: true })
  }
})
