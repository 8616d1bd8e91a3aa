/**
 * The README's "Traces and metrics: an example": its code block is
 * `examples/tracing.ts`, and the file, run as a user would run it (it
 * starts a local OTLP receiver), prints what the README shows.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

const root = fileURLToPath(new URL("../..", import.meta.url))
const readme = readFileSync(`${root}/README.md`, "utf8")

const section = (title: string): string => {
  const start = readme.indexOf(`### ${title}\n`)
  if (start === -1) throw new Error(`README has no "### ${title}" section`)
  const next = readme.slice(start + 4).search(/\n#{2,3} /)
  return readme.slice(start, next === -1 ? undefined : start + 4 + next)
}

const blocks = (text: string, lang: string) =>
  Array.from(text.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g")), (match) => match[1]!)

describe("README: traces and metrics", () => {
  it("the example is examples/tracing.ts, and it prints the span tree the README shows", async () => {
    const text = section("Traces and metrics: an example")
    const [code] = blocks(text, "ts")
    const [printed] = blocks(text, "text")
    assert.strictEqual(code, readFileSync(`${root}/examples/tracing.ts`, "utf8"))
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--conditions=effect-agent-source", "examples/tracing.ts"],
      { cwd: root }
    )
    assert.strictEqual(stdout, printed)
  })
})
