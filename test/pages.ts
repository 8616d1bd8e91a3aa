/**
 * The documentation's pages (`README.md`, `CONTRIBUTING.md` and `docs/*.md`)
 * as the tests read them: a page, a section of it by its heading, the fenced
 * blocks of a language, and `checkExample`: a section's `ts` block is a file
 * in `examples/` (which the typecheck compiles), and that file, run as a user
 * would run it, prints the section's `text` block.
 *
 * A code block of a page is covered by a test when it is (or is part of) a
 * file that a test runs: `test/pages.test.ts` fails on one that is not.
 */
import { assert } from "@effect/vitest"
import { execFile } from "node:child_process"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

/** The repository's root, with its trailing slash. */
export const root = fileURLToPath(new URL("..", import.meta.url))

/** A page's path from the root: `"README"` is `README.md`, `"sessions"` is `docs/sessions.md`. */
export const pagePath = (page: string): string =>
  page.endsWith(".md") ? page : page === "README" || page === "CONTRIBUTING" ? `${page}.md` : `docs/${page}.md`

/** Every page of the documentation, by its path from the root. */
export const pages = (): Array<string> => [
  "README.md",
  ...(existsSync(`${root}CONTRIBUTING.md`) ? ["CONTRIBUTING.md"] : []),
  ...readdirSync(`${root}docs`).filter((file) => file.endsWith(".md")).sort().map((file) => `docs/${file}`)
]

const cache = new Map<string, string>()

/** A page's text, read once. */
export const read = (page: string): string => {
  const path = pagePath(page)
  const cached = cache.get(path)
  if (cached !== undefined) return cached
  const text = readFileSync(`${root}${path}`, "utf8")
  cache.set(path, text)
  return text
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/**
 * The text of the section of `page` whose heading (`##` to `####`) is `title`:
 * from its heading up to the next heading of the same or a higher level.
 */
export const section = (page: string, title: string): string => {
  const text = read(page)
  const masked = skipFences(text)
  const heading = new RegExp(`^(#{2,4}) ${escape(title)}\\n`, "m").exec(masked)
  if (heading === null) throw new Error(`${pagePath(page)} has no section "${title}"`)
  const start = heading.index + heading[0].length
  const next = new RegExp(`^#{1,${heading[1]!.length}} `, "m").exec(masked.slice(start))
  return text.slice(heading.index, next === null ? undefined : start + next.index)
}

/** The text with its fenced blocks blanked (same length), so that a `#` in a block is not taken for a heading. */
const skipFences = (text: string): string =>
  text.replace(/^```[^\n]*\n[\s\S]*?^```/gm, (block) => block.replace(/[^\n]/g, " "))

/** The fenced blocks of a language in a text. */
export const blocks = (text: string, lang: string): Array<string> =>
  Array.from(text.matchAll(new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```", "gm")), (match) => match[1]!)

/** A fenced block of a page: its language, its text and the line its fence opens on. */
export interface Block {
  readonly lang: string
  readonly code: string
  readonly line: number
}

/** Every fenced block of a page. */
export const allBlocks = (page: string): Array<Block> => {
  const text = read(page)
  return Array.from(text.matchAll(/^```([^\s`]*)[^\n]*\n([\s\S]*?)^```/gm), (match) => ({
    lang: match[1]!,
    code: match[2]!,
    line: text.slice(0, match.index).split("\n").length
  }))
}

/**
 * Asserts that the section `title` of `page` shows `example` (a path from the
 * root, `examples/<name>.ts`) as its `ts` block, and that running the file as
 * a user runs it prints the section's `text` block.
 */
export const checkExample = async (page: string, title: string, example: string): Promise<void> => {
  const text = section(page, title)
  const [code] = blocks(text, "ts")
  const [printed] = blocks(text, "text")
  assert.strictEqual(code, readFileSync(`${root}${example}`, "utf8"))
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ["--conditions=effect-agent-source", example],
    { cwd: root }
  )
  assert.strictEqual(stdout, printed)
}
