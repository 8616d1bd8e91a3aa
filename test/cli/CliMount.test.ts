/**
 * `Cli.root` mounted in another `effect/cli` program, as `effect-agent/cli`
 * documents it: run in a process of its own, with nothing provided but the
 * platform, it writes to the process's streams, and a run that ends badly
 * fails with the exit code `ExitCode.fromExit` reads.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { promisify } from "node:util"
import { root } from "./build.ts"

/** `my-tool agent <effect-agent's arguments>`: prints the exit code effect-agent's own bin would exit with. */
const host = `
import { NodeHttpClient, NodeServices, NodeTerminal } from "@effect/platform-node"
import { Effect, Layer, Terminal } from "effect"
import { Command } from "effect/cli"
import { Cli, ExitCode } from "effect-agent/cli"

const agent = Command.make("agent").pipe(Command.withSubcommands([Cli.root]))
const tool = Command.make("my-tool").pipe(Command.withSubcommands([agent]))
const exit = await Effect.runPromise(
  Command.runWith(tool, { version: "1.0.0" })(process.argv.slice(1)).pipe(
    Effect.provide(Layer.effect(Terminal.Terminal, NodeTerminal.make(() => false))),
    Effect.provide(Layer.mergeAll(NodeServices.layer, NodeHttpClient.layerUndici)),
    Effect.exit
  )
)
console.log("code", ExitCode.fromExit(exit, { code: ExitCode.codes.cancelled }, (text) => process.stderr.write(text)))
`

const runHost = (args: ReadonlyArray<string>) =>
  promisify(execFile)(
    process.execPath,
    ["--conditions=effect-agent-source", "--input-type=module", "--eval", host, ...args],
    { cwd: root, env: { PATH: process.env.PATH, HOME: process.env.HOME } }
  )

describe("Cli.root", () => {
  it("mounted in another effect/cli program, runs on the process's streams and ends with its exit code", async () => {
    const { version } = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8"))
    const ok = await runHost(["agent", "effect-agent", "version"])
    assert.strictEqual(ok.stdout, `effect-agent ${version}\ncode 0\n`)
    const refused = await runHost(["agent", "effect-agent", "run", "--max-turns", "0", "--task", "hi"])
    assert.strictEqual(refused.stdout, "code 22\n")
    assert.include(refused.stderr, "--max-turns: 0 is not a limit a run can have")
  })
})
