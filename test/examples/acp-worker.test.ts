/**
 * `examples/acp-worker.ts` (the ACP block of docs/supervised.md's "External
 * workers"), run as a user runs it, in a workspace, with the agent named
 * after the script: here the ACP agent of the worker's tests, written with
 * the SDK's agent side. Two turns, the second loading the first's session;
 * the agent gets the variable the example names and none other.
 */
import { assert, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { blocks, root, section } from "../pages.ts"

const example = "examples/acp-worker.ts"

it("docs/supervised.md's ACP worker is examples/acp-worker.ts", () => {
  assert.strictEqual(blocks(section("supervised", "External workers"), "ts")[1], Fs.readFileSync(`${root}${example}`, "utf8"))
})

it("examples/acp-worker.ts: two turns of an ACP agent in the workspace, the second loading the first's session", async () => {
  const workspace = Fs.mkdtempSync(Path.join(Os.tmpdir(), "acp-worker-example-"))
  try {
    const agent = Path.join(root, "test/fixtures/workers/fake-acp-agent.mjs")
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--conditions=effect-agent-source", Path.join(root, example), process.execPath, agent],
      { cwd: workspace, env: { ...process.env, GEMINI_API_KEY: "gemini-example", EXAMPLE_SECRET: "not for the agent" } }
    )
    // input counts the cache reads and writes: 100 + 40 + 10
    assert.strictEqual(
      stdout,
      "turn 1 (session sess-1): Done: Make npm test pass\nturn 2: Done: 2 tests still fail: … (150 tokens in, 30 out)\n"
    )
    const calls: ReadonlyArray<{ method: string; env: Record<string, string> }> = Fs
      .readFileSync(Path.join(workspace, "fake-calls.jsonl"), "utf8").trim().split("\n").map((line) => JSON.parse(line))
    assert.deepStrictEqual(calls.map((call) => call.method), [
      "initialize",
      "session/new",
      "session/prompt",
      "initialize",
      "session/load",
      "session/prompt"
    ])
    for (const call of calls) {
      assert.strictEqual(call.env.GEMINI_API_KEY, "gemini-example")
      assert.isUndefined(call.env.EXAMPLE_SECRET)
    }
  } finally {
    Fs.rmSync(workspace, { recursive: true, force: true })
  }
})
