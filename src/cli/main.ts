#!/usr/bin/env node
/**
 * The `effect-agent` command (the package's `bin`).
 *
 * Built, it is plain JavaScript that an old Node parses (Node 20 is
 * tested), and loads only Node's own modules until it has checked the Node
 * it runs on: on one older than the package's `engines.node`, it says which
 * Node it needs and which one is running, and exits 22, rather than fail
 * somewhere inside a dependency. The command itself is loaded after (see
 * `Cli`), and each subcommand's modules when it runs.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Module from "node:module"

// src/cli/ and dist/cli/ are both two levels below the package's root.
const { engines } = JSON.parse(Fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8"))
const minimum = /^>=\s*(\d+)\.(\d+)(?:\.(\d+))?\s*$/.exec(typeof engines?.node === "string" ? engines.node : "")
if (minimum !== null) {
  const needed = [Number(minimum[1]), Number(minimum[2]), Number(minimum[3] ?? 0)]
  const running = process.versions.node.split(".").map(Number)
  const at = needed.findIndex((part, i) => part !== running[i])
  if (at !== -1 && (running[at] ?? 0) < (needed[at] ?? 0)) {
    const version = needed.slice(0, minimum[3] === undefined ? 2 : 3).join(".")
    process.stderr.write(
      `effect-agent: it needs Node.js ${version} or newer, and this is Node.js ${process.versions.node} ` +
        `(${process.execPath})\n`
    )
    process.exit(22)
  }
}

// The command loads a few hundred modules at each start: caching their compiled code (in the OS's
// temporary directory; NODE_DISABLE_COMPILE_CACHE=1 turns it off) takes a fifth off its start-up time.
Module.enableCompileCache?.()
const { runMain } = await import("./Cli.ts")
runMain()
