/**
 * `npm test`: the typecheck and the tests at once, and the command the
 * process tests run built beside them, so that a two-core machine is busy
 * from the start. Fails when either the typecheck or the tests fail.
 *
 *   node scripts/test.ts [vitest arguments]
 *
 * With arguments (`npm test -- test/Agent.test.ts`) the command is built by
 * the first test that needs it, as under `npx vitest`, not ahead.
 *
 * `npm test` runs `scripts/check-node.js` first (`node --import`): on a Node
 * too old for this TypeScript file, it says so instead.
 */
import { spawn } from "node:child_process"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { builtPackage } from "../test/cli/build.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const args = process.argv.slice(2)

// Node's on-disk compile cache: the processes the tests start load the same modules again and again.
process.env.NODE_COMPILE_CACHE ??= Path.join(root, "node_modules/.cache/node-compile-cache")

interface Ran {
  readonly code: number
  readonly output: string
}

/**
 * Runs node on a script; its output is kept when `quiet`, else shown as it comes. A `background` process
 * runs at a lower priority: its result is needed only at the end, while the build is in the way of the
 * tests that run the command.
 */
const node = (script: string, scriptArgs: ReadonlyArray<string>, quiet: boolean, background = false): Promise<Ran> =>
  new Promise((resolve) => {
    const child = spawn(process.execPath, [Path.join(root, script), ...scriptArgs], {
      cwd: root,
      stdio: quiet ? ["ignore", "pipe", "pipe"] : "inherit"
    })
    if (background && child.pid !== undefined) {
      try {
        Os.setPriority(child.pid, 10)
      } catch {
        // not allowed here: it runs at the normal priority
      }
    }
    let output = ""
    child.stdout?.on("data", (chunk) => void (output += chunk))
    child.stderr?.on("data", (chunk) => void (output += chunk))
    child.on("error", (error) => resolve({ code: 1, output: `${script}: ${error.message}\n` }))
    child.on("close", (code, signal) => resolve({ code: code ?? (signal === null ? 1 : 128), output }))
  })

// Incremental: a run after a small change checks what the change can affect (the state is kept beside the
// other caches; a clean clone checks everything). Single-threaded: as fast here (3.4 s either way on an idle
// two-core machine), for half the CPU, which the tests beside it need.
const typecheck = node("node_modules/typescript/bin/tsc", [
  "-p",
  "tsconfig.json",
  "--incremental",
  "--singleThreaded",
  "--tsBuildInfoFile",
  "node_modules/.cache/tsc/typecheck.tsbuildinfo"
], true, true)
// A failed build is reported by the tests that need it (they try it again).
const build = args.length === 0 ? builtPackage().then(() => "", (error: unknown) => String(error)) : Promise.resolve("")
const tests = node("node_modules/vitest/vitest.mjs", ["run", ...args], false)

const [checked, tested, buildError] = await Promise.all([typecheck, tests, build])
if (buildError !== "") process.stderr.write(`\nThe command's build failed: ${buildError}\n`)
if (checked.code === 0) {
  process.stdout.write("\nTypecheck (tsc -p tsconfig.json): no errors\n")
} else {
  process.stdout.write(`\nTypecheck (tsc -p tsconfig.json) failed:\n${checked.output}`)
}
process.exitCode = checked.code !== 0 ? checked.code : tested.code
