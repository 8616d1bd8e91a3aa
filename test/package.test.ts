/**
 * The package as npm ships it: what `npm pack` puts in the tarball, and the
 * tarball installed into a new project (offline, beside its peers from this
 * clone's node_modules) where the README's quick start runs and typechecks
 * and the command runs.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { builtTarball, npm, root } from "./cli/build.ts"

const run = promisify(execFile)

let tarball = ""
beforeAll(async () => {
  tarball = await builtTarball()
}, 240_000)

const pkg = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8"))

/** Paths that are for working on the package, never for its users. */
const notShipped = /^(test|bench|examples|\.ci|node_modules|coverage)\/|\.test\.ts$|fixtures/

describe.concurrent("the package", () => {
  it("ships dist (built by prepack), src for the source maps, the README, LICENSE and CHANGELOG; no tests or fixtures", async () => {
    assert.match(pkg.scripts.prepack, /npm run build$/)
    const { stdout } = await npm(["pack", "--dry-run", "--json", "--ignore-scripts"], root)
    const listed: ReadonlyArray<string> = JSON.parse(stdout.slice(stdout.indexOf("[")))[0].files.map(
      (file: { readonly path: string }) => file.path
    )
    assert.deepStrictEqual(listed.filter((file) => notShipped.test(file)), [])
    for (const file of ["package.json", "README.md", "LICENSE", "CHANGELOG.md", "src/index.ts", "src/cli/main.ts"]) {
      assert.include(listed, file)
    }
    // the tarball itself, as prepack built it
    const { stdout: entries } = await run("tar", ["-tzf", tarball])
    const files = entries.split("\n").filter((line) => line !== "").map((line) => line.replace(/^package\//, ""))
    assert.deepStrictEqual(files.filter((file) => notShipped.test(file)), [])
    for (const file of ["dist/index.js", "dist/index.d.ts", "dist/index.js.map", "dist/cli/main.js", "dist/testing/index.js"]) {
      assert.include(files, file)
    }
    // the license is the one package.json names
    assert.strictEqual(pkg.license, "MIT")
    const license = Fs.readFileSync(Path.join(root, "LICENSE"), "utf8")
    assert.match(license, /^MIT License\n\nCopyright \(c\) 2026 the effect-agent authors\n/)
  })

  it("installed from its tarball offline with its peers, the quick start runs and typechecks, and the bin runs", async () => {
    const project = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-install-"))
    try {
      Fs.writeFileSync(Path.join(project, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }))
      // The peers from this clone (linked, as file: directories): no registry is needed.
      const linked = ["effect", "@effect/platform-node", "@types/node"].map((name) => `file:${Path.join(root, "node_modules", name)}`)
      await npm(["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", tarball, ...linked], project)
      Fs.copyFileSync(Path.join(root, "examples/quickstart.ts"), Path.join(project, "quickstart.ts"))
      // the published types: the quick start typechecks against dist/*.d.ts, strict, NodeNext
      Fs.writeFileSync(
        Path.join(project, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "ES2022",
            lib: ["ES2022"],
            types: ["node"],
            module: "NodeNext",
            moduleResolution: "NodeNext",
            strict: true,
            exactOptionalPropertyTypes: true,
            noEmit: true,
            skipLibCheck: true
          },
          files: ["quickstart.ts"]
        })
      )
      // the three at once: they only read the installed project
      const tsc = Path.join(root, "node_modules/typescript/bin/tsc")
      const [quickstart, , version] = await Promise.all([
        run(process.execPath, ["quickstart.ts"], { cwd: project }),
        run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: project }),
        run(Path.join(project, "node_modules/.bin/effect-agent"), ["version"], { cwd: project })
      ])
      assert.strictEqual(quickstart.stdout, "Completed - It is 4°C in Oslo: bring a coat.\n")
      assert.strictEqual(version.stdout, `effect-agent ${pkg.version}\n`)
    } finally {
      Fs.rmSync(project, { recursive: true, force: true })
    }
  }, 60_000)
})
