/**
 * The tests mirror `src/`: every public module (a module an entry point of
 * package.json's `exports` re-exports) has a test file at the same path
 * under `test/`, named for it, that uses it: `src/session/Session.ts` is
 * tested in `test/session/Session.test.ts`. A new public module without its
 * tests fails here. Tests of behaviour across modules (Invariants, Resume,
 * the CLI's process tests…) live beside them under their own names.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))

interface Module {
  /** The name the entry point exports it as. */
  readonly name: string
  /** Its path under `src/`, without the extension. */
  readonly path: string
  readonly entry: string
}

const exportAll = /^export \* as (\w+) from "(\.\/[\w./]+)\.ts"$/

/** The modules an entry point re-exports; any other kind of export is an error, so that none is missed. */
const modulesOf = (entry: string, text: string): ReadonlyArray<Module> =>
  text.split("\n").filter((line) => line.startsWith("export ")).map((line) => {
    const match = exportAll.exec(line)
    if (match === null) throw new Error(`${entry}: an export this test cannot read: ${line}`)
    const file = Path.join(Path.dirname(entry), match[2]!)
    return { name: match[1]!, path: Path.relative("src", file), entry }
  })

/** The entry points: the source file of each export of package.json. */
const entries = (): ReadonlyArray<string> => {
  const pkg = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8"))
  return Object.values<Record<string, string>>(pkg.exports).map((conditions) => {
    const source = conditions["effect-agent-source"]
    if (source === undefined) throw new Error(`an export without its source: ${JSON.stringify(conditions)}`)
    return Path.normalize(source)
  })
}

const publicModules = (): ReadonlyArray<Module> =>
  entries().flatMap((entry) => modulesOf(entry, Fs.readFileSync(Path.join(root, entry), "utf8")))

describe("the tests mirror src/", () => {
  it("reads every entry point of package.json, and each re-exports modules", () => {
    const all = entries()
    assert.include(all, "src/index.ts")
    for (const entry of all) {
      assert.isAbove(publicModules().filter((module) => module.entry === entry).length, 0, entry)
    }
  })

  it("every public module has its test file under the mirrored path, which uses it", () => {
    const missing: Array<string> = []
    for (const module of publicModules()) {
      const test = Path.join("test", `${module.path}.test.ts`)
      const file = Path.join(root, test)
      if (!Fs.existsSync(file)) {
        missing.push(`${test} (for src/${module.path}.ts, exported by ${module.entry})`)
      } else if (!new RegExp(`\\b${module.name}\\b`).test(Fs.readFileSync(file, "utf8"))) {
        missing.push(`${test} never names ${module.name}`)
      }
    }
    assert.deepStrictEqual(missing, [])
  })

  it("an export the reader does not know fails instead of being skipped", () => {
    assert.deepStrictEqual(modulesOf("src/index.ts", "/** @since 0.1.0 */\nexport * as Agent from \"./Agent.ts\"\n"), [
      { name: "Agent", path: "Agent", entry: "src/index.ts" }
    ])
    assert.deepStrictEqual(modulesOf("src/cli/index.ts", "export * as View from \"./View.ts\""), [
      { name: "View", path: "cli/View", entry: "src/cli/index.ts" }
    ])
    assert.throws(() => modulesOf("src/index.ts", "export { run } from \"./Agent.ts\""), /cannot read/)
  })
})
