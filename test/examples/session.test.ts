import { assert, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { blocks, root, section } from "../pages.ts"

it("docs/sessions.md's session is examples/session.ts, compiled by the typecheck, and safe to run again", () => {
  const [block] = blocks(section("sessions", "Sessions in one process"), "ts")
  assert.strictEqual(block, readFileSync(join(root, "examples/session.ts"), "utf8"))
  const cwd = mkdtempSync(join(tmpdir(), "session-example-"))
  try {
    const run = () =>
      execFileSync(process.execPath, ["--conditions=effect-agent-source", join(root, "examples/session.ts")], {
        cwd,
        encoding: "utf8"
      })
    const answer = "Completed - Three pages agree: checkpoint every turn.\n"
    assert.strictEqual(run(), answer)
    const trajectory = readFileSync(join(cwd, ".sessions/research.ndjson"), "utf8")
    assert.strictEqual(JSON.parse(trajectory.trim().split("\n").at(-1)!)._tag, "AgentEnd")
    // finished: the same answer, from the checkpoint; the session did not run again
    assert.strictEqual(run(), answer)
    assert.strictEqual(readFileSync(join(cwd, ".sessions/research.ndjson"), "utf8"), trajectory)
  } finally {
    rmSync(cwd, { recursive: true, force: true })
  }
})
