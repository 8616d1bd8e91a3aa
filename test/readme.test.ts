import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const readme = readFileSync(`${root}/README.md`, "utf8")

const section = (heading: string): string => {
  const start = readme.indexOf(`## ${heading}\n`)
  if (start === -1) throw new Error(`README has no "## ${heading}" section`)
  const end = readme.indexOf("\n## ", start + 1)
  return readme.slice(start, end === -1 ? undefined : end)
}

const firstTsBlock = (text: string): string => {
  const match = /```ts\n([\s\S]*?)```/.exec(text)
  if (match === null) throw new Error("no ts block")
  return match[1]!
}

describe("README", () => {
  it("gives the two set-up commands", () => {
    const setUp = section("Set up")
    assert.include(setUp, "npm install && npm test")
    assert.include(setUp, "npm run demo")
  })

  it("its quick start is examples/quickstart.ts, which the typecheck compiles, and it runs", () => {
    const quickstart = readFileSync(`${root}/examples/quickstart.ts`, "utf8")
    assert.strictEqual(firstTsBlock(section("Quick start")), quickstart)
    const out = execFileSync(process.execPath, ["--conditions=effect-agent-source", "examples/quickstart.ts"], {
      cwd: root,
      encoding: "utf8"
    })
    assert.strictEqual(out, "Completed - It is 4°C in Oslo: bring a coat.\n")
  })
})
