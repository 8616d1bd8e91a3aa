/**
 * On a Node older than package.json's `engines.node`: `npm install` refuses
 * (engine-strict in `.npmrc`), `npm test` and `npm run demo` say which Node
 * they need and which one is running and exit 22, and so does the built
 * command, before it loads anything that Node cannot run; none of them dies
 * inside a dependency or on ERR_UNKNOWN_FILE_EXTENSION ".ts".
 *
 * The old Node is one already on the PATH with npm beside it (a CI machine's
 * Node 20), or else Node 20 installed from the npm registry (as `.ci/run`
 * installs Node 24) into node_modules/.cache/old-node the first time. Where
 * there is none and it cannot be installed (no registry), these tests are
 * skipped, saying why.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { execFile, execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { builtCommand, npm, root } from "./build.ts"

const pkg = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8"))
/** `22.19` of `>=22.19`. */
const needed = /^>=(\d+\.\d+(?:\.\d+)?)$/.exec(pkg.engines.node)?.[1]

const oldNodeDir = Path.join(root, "node_modules/.cache/old-node")
const oldNodeBin = Path.join(oldNodeDir, "node_modules/node/bin/node")

/** Whether version `a` (`20.19.2`) is older than `b` (`22.19`). */
const older = (a: string, b: string): boolean => {
  const [x, y] = [a, b].map((version) => version.split(".").map(Number))
  for (let i = 0; i < 3; i++) {
    const d = (x![i] ?? 0) - (y![i] ?? 0)
    if (d !== 0) return d < 0
  }
  return false
}

/** A Node on the PATH older than engines.node (18 at least, which the npm beside it runs on), or undefined. */
const oldNodeOnPath = (): { readonly node: string; readonly version: string } | undefined => {
  for (const dir of (process.env.PATH ?? "").split(Path.delimiter)) {
    const node = Path.join(dir, "node")
    if (dir === "" || !Fs.existsSync(node) || !Fs.existsSync(Path.join(dir, "npm"))) continue
    try {
      const version = execFileSync(node, ["--version"], { encoding: "utf8", timeout: 10_000 }).trim().replace(/^v/, "")
      if (needed !== undefined && older(version, needed) && !older(version, "18")) {
        return { node: Fs.realpathSync(node), version }
      }
    } catch {
      // not a Node that runs here
    }
  }
  return undefined
}

/** Node 20, installed once (into a directory of its own, renamed into place: another run may install it too). */
const installOldNode = async (): Promise<{ readonly node: string; readonly version: string } | { readonly why: string }> => {
  if (!Fs.existsSync(oldNodeBin)) {
    const staging = `${oldNodeDir}.${process.pid}`
    try {
      Fs.mkdirSync(staging, { recursive: true })
      await npm(["install", "--prefix", staging, "--no-save", "--no-audit", "--no-fund", "node@20"], staging)
      Fs.renameSync(staging, oldNodeDir)
    } catch (error) {
      if (!Fs.existsSync(oldNodeBin)) {
        const why = error instanceof Error ? error.message.split("\n")[0] : String(error)
        return { why: `Node 20 could not be installed from the npm registry (${why})` }
      }
    } finally {
      Fs.rmSync(staging, { recursive: true, force: true })
    }
  }
  const { stdout } = await promisify(execFile)(oldNodeBin, ["--version"])
  // As the old Node names itself (process.execPath: its real path, node_modules may be a link).
  return { node: Fs.realpathSync(oldNodeBin), version: stdout.trim().replace(/^v/, "") }
}

let old: Awaited<ReturnType<typeof installOldNode>> = { why: "not installed yet" }
beforeAll(async () => {
  old = oldNodeOnPath() ?? await installOldNode()
  if ("why" in old) console.warn(`SKIPPING the tests on an old Node: ${old.why}`)
}, 300_000)

/** The old Node, or the test is skipped saying why. */
const oldNode = (skip: (note: string) => never) => ("why" in old ? skip(old.why) : old)

interface Ran {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs a program to its exit (60 s at most), with the old Node first on the PATH. */
const run = (node: string, file: string, args: ReadonlyArray<string>, cwd: string): Promise<Ran> =>
  new Promise((resolve) => {
    // Not the settings of an npm this test may run under (npm test sets npm_*), which the npm run here would take.
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(npm_|NODE$|INIT_CWD$)/i.test(name)))
    env.PATH = `${Path.dirname(node)}${Path.delimiter}${process.env.PATH ?? ""}`
    execFile(file, [...args], { cwd, env, timeout: 60_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
      resolve({ code, stdout, stderr })
    })
  })

describe("on Node 20", () => {
  it("package.json says which Node is needed, and .nvmrc which one to install", () => {
    assert.isDefined(needed, `engines.node is ">=MAJOR.MINOR": ${pkg.engines.node}`)
    assert.strictEqual(Fs.readFileSync(Path.join(root, ".nvmrc"), "utf8"), "24\n")
  })

  it("npm install refuses, naming the Node needed and the one running", async ({ skip }) => {
    const { node, version } = oldNode(skip)
    // The package's manifest, lockfile and npm settings, in a directory of their own: a dry run installs nothing.
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-old-node-"))
    try {
      for (const file of ["package.json", "package-lock.json", ".npmrc"]) {
        Fs.copyFileSync(Path.join(root, file), Path.join(dir, file))
      }
      const out = await run(node, "npm", ["install", "--dry-run", "--offline", "--no-audit", "--no-fund"], dir)
      assert.notStrictEqual(out.code, 0, out.stdout)
      assert.include(out.stderr, "EBADENGINE")
      assert.include(out.stderr, `Required: {"node":"${pkg.engines.node}"}`)
      assert.include(out.stderr, `Actual:   {"node":"v${version}"`)
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("npm test and npm run demo exit 22 with a sentence naming both Nodes", async ({ skip }) => {
    const { node, version } = oldNode(skip)
    const sentence = `${pkg.name}'s scripts need Node.js ${needed} or newer, and this is Node.js ${version} (${node})`
    // The scripts run on the Node first on the PATH: the old one (were it not, npm test would run the suite).
    assert.strictEqual((await run(node, "node", ["--version"], root)).stdout, `v${version}\n`)
    for (const script of [["test"], ["run", "demo"]]) {
      const out = await run(node, "npm", script, root)
      assert.strictEqual(out.code, 22, `npm ${script.join(" ")}: ${out.stderr}`)
      assert.include(out.stderr, sentence)
      assert.notInclude(out.stderr, "ERR_UNKNOWN_FILE_EXTENSION")
    }
  }, 120_000)

  it("the built command exits 22 with one sentence naming both Nodes, before loading the rest", async ({ skip }) => {
    const { node, version } = oldNode(skip)
    const command = await builtCommand()
    for (const args of [["--version"], ["run", "--task", "hi"], ["demo"]]) {
      const out = await run(node, node, [command, ...args], root)
      assert.strictEqual(out.code, 22, out.stderr)
      assert.strictEqual(out.stdout, "")
      assert.strictEqual(
        out.stderr,
        `effect-agent: it needs Node.js ${needed} or newer, and this is Node.js ${version} (${node})\n`
      )
    }
  }, 300_000)
})
