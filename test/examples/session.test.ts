import { assert, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../..", import.meta.url))

const durableSessions = (): string => {
  const readme = readFileSync(join(root, "README.md"), "utf8")
  const start = readme.indexOf("## Durable sessions\n")
  const match = /```ts\n([\s\S]*?)```/.exec(readme.slice(start, readme.indexOf("\n## ", start + 1)))
  if (start === -1 || match === null) throw new Error("README has no Durable sessions section with a ts block")
  return match[1]!
}

it("the README's durable session is examples/session.ts, compiled by the typecheck, and safe to run again", () => {
  assert.strictEqual(durableSessions(), readFileSync(join(root, "examples/session.ts"), "utf8"))
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
}, 60_000)
