/**
 * The README's section on the agent server: its code block is
 * `examples/agent-server.ts` (which the typecheck compiles), and the file,
 * run as a user runs it, prints what the README shows; so is its
 * subsection on supervised sessions and typed output's, with
 * `examples/agent-server-supervised.ts`; the screenshot it shows is in the
 * repository.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { checkExample } from "../readmeExample.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))
const readme = readFileSync(`${root}/README.md`, "utf8")

const section = (() => {
  const start = readme.indexOf("## The agent server\n")
  const end = readme.indexOf("\n## ", start + 1)
  return readme.slice(start, end)
})()

const blocks = (lang: string) =>
  Array.from(section.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g")), (match) => match[1]!)

describe("README: the agent server", () => {
  it("its block is examples/agent-server.ts, which prints what the README shows", async () => {
    assert.strictEqual(blocks("ts")[0], readFileSync(`${root}/examples/agent-server.ts`, "utf8"))
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--conditions=effect-agent-source", "examples/agent-server.ts"],
      { cwd: root }
    )
    assert.strictEqual(stdout, blocks("text")[0])
  })

  it("its subsection on supervised sessions is examples/agent-server-supervised.ts, which prints what it shows", () =>
    checkExample("Supervised sessions and typed output on the server", "agent-server-supervised"))

  it("shows the inspector's screenshot, which is in docs/", () => {
    const image = /!\[[^\]]+\]\((docs\/[^)]+\.png)\)/.exec(section)
    assert.isNotNull(image)
    assert.isTrue(existsSync(`${root}/${image![1]}`))
  })
})
