/**
 * docs/testing.md, the testing guide: every `ts` block of the page is a file
 * of this folder, named on the line before it (`` `first.test.ts` ``), and is
 * that file verbatim; every file of the folder (but this one) is on the page
 * once. The files are tests vitest runs (the `.test.ts` ones) and the modules
 * they import, so every block of the page runs, and the typecheck compiles it.
 */
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

const here = fileURLToPath(new URL(".", import.meta.url))
const page = readFileSync(fileURLToPath(new URL("../../docs/testing.md", import.meta.url)), "utf8")

/** Each `ts` block of the page with the file name on the line before it (after a blank line). */
const blocks = Array.from(
  page.matchAll(/(?:^|\n)([^\n]*)\n\n```ts\n([\s\S]*?)```/g),
  (match) => ({ caption: match[1]!, code: match[2]! })
)

const files = readdirSync(here).filter((name) => name.endsWith(".ts") && name !== "page.test.ts").sort()

describe("docs/testing.md", () => {
  it("names a file of test/guide before each ts block", () => {
    assert.isAbove(blocks.length, 0)
    assert.strictEqual(blocks.length, page.split("```ts\n").length - 1, "every ts block follows a caption line")
    for (const { caption } of blocks) assert.match(caption, /^`[\w-]+(\.test)?\.ts`$/)
  })

  it("shows every file of test/guide once, each block that file verbatim", () => {
    const shown = blocks.map(({ caption }) => caption.slice(1, -1))
    assert.deepStrictEqual(shown.slice().sort(), files)
    for (const { caption, code } of blocks) {
      const name = caption.slice(1, -1)
      assert.strictEqual(code, readFileSync(`${here}/${name}`, "utf8"), `the block of ${name} is not the file`)
    }
  })
})
