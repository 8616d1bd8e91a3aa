/**
 * The README's examples: a `###` section's `ts` block is a file in
 * `examples/` (which the typecheck compiles), and that file, run as a user
 * would run it, prints the section's `text` block.
 */
import { assert } from "@effect/vitest"
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

const root = fileURLToPath(new URL("..", import.meta.url))

/** The README, read once. */
export const readme = readFileSync(`${root}/README.md`, "utf8")

/** The text of a `###` section of the README, up to the next `##` or `###` heading. */
export const section = (title: string): string => {
  const start = readme.indexOf(`### ${title}\n`)
  if (start === -1) throw new Error(`README has no "### ${title}" section`)
  const next = readme.slice(start + 4).search(/\n#{2,3} /)
  return readme.slice(start, next === -1 ? undefined : start + 4 + next)
}

/** The fenced blocks of a language in a text. */
export const blocks = (text: string, lang: string): Array<string> =>
  Array.from(text.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g")), (match) => match[1]!)

/** Asserts that section `title`'s code is `examples/<name>.ts` and that running it prints what the section shows. */
export const checkExample = async (title: string, name: string): Promise<void> => {
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
}
