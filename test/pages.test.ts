/**
 * No page carries an untested block: every TypeScript or JavaScript block of
 * README.md, CONTRIBUTING.md and docs/*.md is a file of the repository (in
 * `examples/` or `test/`), or a part of one, that a test runs: a test file
 * itself, or a file a test file names (`examples/<name>.ts`, as
 * `checkExample` takes it) or imports. The typecheck compiles those files;
 * the tests that name them check that the page shows them as they are.
 */
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import * as Path from "node:path"
import { allBlocks, pages, root } from "./pages.ts"

/** The languages of a block that is code to run. */
const code = /^(ts|tsx|mts|cts|typescript|js|jsx|mjs|cjs|javascript)$/

/** The files under a directory of the root, by their path from the root. */
const filesUnder = (dir: string): Array<string> =>
  readdirSync(`${root}${dir}`, { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`
    if (entry.isDirectory()) return entry.name === "node_modules" ? [] : filesUnder(path)
    return /\.(ts|tsx|mts|cts|js|mjs|cjs)$/.test(entry.name) ? [path] : []
  })

/** What vitest runs (its `include`). */
const isTestFile = (path: string) => /^(test|bench)\/.*\.test\.ts$/.test(path)

const sources = [...filesUnder("examples"), ...filesUnder("test")]
const text = new Map(sources.map((path) => [path, readFileSync(`${root}${path}`, "utf8")]))
const testFiles = [...filesUnder("test"), ...filesUnder("bench").filter(isTestFile)].filter(isTestFile)
const testText = new Map(testFiles.map((path) => [path, text.get(path) ?? readFileSync(`${root}${path}`, "utf8")]))

/** The files a test file imports by a relative path, resolved from the root. */
const importsOf = (testFile: string, source: string): Array<string> =>
  Array.from(
    source.matchAll(/\bfrom\s+"(\.{1,2}\/[^"]+)"|\bimport\(\s*"(\.{1,2}\/[^"]+)"\s*\)/g),
    (match) => Path.normalize(Path.join(Path.dirname(testFile), match[1] ?? match[2]!))
  )

/** Whether a test runs the file: it is a test file, or a test file names it or imports it. */
const runByATest = (path: string): boolean =>
  isTestFile(path) ||
  testFiles.some((testFile) => {
    const source = testText.get(testFile)!
    return source.includes(`"${path}"`) || source.includes(`/${path}"`) || importsOf(testFile, source).includes(path)
  })

/** Whether `block` is the whole of `file`, or a part of it that starts on a line of its own. */
const holds = (file: string, block: string) => file === block || file.startsWith(block) || file.includes(`\n${block}`)

describe("the pages' code", () => {
  it("every TypeScript and JavaScript block of the README, CONTRIBUTING.md and docs/*.md is a file a test runs", () => {
    const uncovered: Array<string> = []
    let count = 0
    for (const page of pages()) {
      for (const block of allBlocks(page)) {
        if (!code.test(block.lang)) continue
        count++
        const files = sources.filter((path) => holds(text.get(path)!, block.code))
        if (!files.some(runByATest)) {
          uncovered.push(
            `${page}:${block.line} (${block.lang}) "${block.code.split("\n")[0]}": ` +
              (files.length === 0 ? "no file in examples/ or test/ holds it" : `${files.join(", ")} is run by no test`)
          )
        }
      }
    }
    assert.isAbove(count, 0)
    assert.deepStrictEqual(uncovered, [])
  })
})
