/**
 * The README's sections on sub-agents, handoffs and guardrails: each code
 * block is a file in `examples/` (which the typecheck compiles), and each
 * file, run as a user would run it, prints what the README says it prints.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

const root = fileURLToPath(new URL("../..", import.meta.url))
const readme = readFileSync(`${root}/README.md`, "utf8")

/** The text of a `###` section of the README. */
const section = (title: string): string => {
  const start = readme.indexOf(`### ${title}\n`)
  if (start === -1) throw new Error(`README has no "### ${title}" section`)
  const next = readme.slice(start + 4).search(/\n#{2,3} /)
  return readme.slice(start, next === -1 ? undefined : start + 4 + next)
}

const blocks = (text: string, lang: string) =>
  Array.from(text.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g")), (match) => match[1]!)

const cases = [
  ["Sub-agents", "sub-agents"],
  ["Handoffs", "handoff"],
  ["Guardrails", "guardrails"]
] as const

describe.concurrent("README: sub-agents, handoffs and guardrails", () => {
  for (const [title, name] of cases) {
    it(`${title}: the block is examples/${name}.ts, and it prints what the README shows`, async () => {
      const text = section(title)
      const [code] = blocks(text, "ts")
      const [printed] = blocks(text, "text")
      assert.strictEqual(code, readFileSync(`${root}/examples/${name}.ts`, "utf8"))
      const { stdout } = await promisify(execFile)(
        process.execPath,
        ["--conditions=effect-agent-source", `examples/${name}.ts`],
        { cwd: root }
      )
      assert.strictEqual(stdout, printed)
    }, 30_000)
  }
})
