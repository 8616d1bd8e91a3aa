#!/usr/bin/env node
/**
 * The `effect-agent` command (the package's `bin`).
 *
 * @since 0.1.0
 */
import * as Module from "node:module"

// The command loads a few hundred modules at each start: caching their compiled code (in the OS's
// temporary directory; NODE_DISABLE_COMPILE_CACHE=1 turns it off) takes a fifth off its start-up time.
Module.enableCompileCache?.()
const { runMain } = await import("./Cli.ts")
runMain()
