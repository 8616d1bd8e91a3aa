import { assert, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../..", import.meta.url))

/** The first block of `lang` in the README's "Supervised runs" section. */
const block = (lang: string): string => {
  const readme = readFileSync(join(root, "README.md"), "utf8")
  const start = readme.indexOf("## Supervised runs\n")
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1))
  const match = new RegExp("```" + lang + "\\n([\\s\\S]*?)```").exec(section)
  if (start === -1 || match === null) throw new Error(`README has no Supervised runs section with a ${lang} block`)
  return match[1]!
}

it("the README's supervised run is examples/supervised.ts, and it prints what the README shows", () => {
  assert.strictEqual(block("ts"), readFileSync(join(root, "examples/supervised.ts"), "utf8"))
  const stdout = execFileSync(process.execPath, ["--conditions=effect-agent-source", "examples/supervised.ts"], {
    cwd: root,
    encoding: "utf8"
  })
  assert.strictEqual(stdout, block("text"))
  assert.match(stdout, /check add \(baseline\): fail[\s\S]*feedback:[\s\S]*check add: pass[\s\S]*Converged after 2 turns\n$/)
})
