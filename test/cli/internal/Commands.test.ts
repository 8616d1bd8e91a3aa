/**
 * Commands: the command tree (`run`, `demo`, `version`), its help and its
 * errors for invalid flags, in the test process; and the built bin's
 * `version`.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Stream } from "effect"
import { ExitCode } from "effect-agent/cli"
import * as Commands from "../../../src/cli/internal/Commands.ts"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Fs from "node:fs"
import { builtCommand, builtPackage, root } from "../build.ts"
import { runCommand } from "../inProcess.ts"
import { live, run, tempDir } from "../support.ts"

const pkg: { readonly name: string; readonly version: string } = JSON.parse(
  Fs.readFileSync(`${root}/package.json`, "utf8")
)

describe.concurrent("Commands.version", () => {
  live("prints the name and version; with --json the capabilities and exit codes too", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const plain = yield* runCommand(["version"], { cwd: dir })
      assert.deepStrictEqual(plain, { code: 0, stdout: `${pkg.name} ${pkg.version}\n`, stderr: "" })
      const json = yield* runCommand(["version", "--json"], { cwd: dir })
      assert.strictEqual(json.code, 0, json.stderr)
      const info = JSON.parse(json.stdout)
      assert.deepStrictEqual([info.name, info.version, info.node], [pkg.name, pkg.version, process.version])
      assert.deepStrictEqual(info.capabilities, Commands.capabilities)
      assert.strictEqual(info.exitCodes.configError, 22)
    }))

  it.effect("packageInfo is the package's own package.json", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* Commands.packageInfo, { name: pkg.name, version: pkg.version })
    }).pipe(Effect.provide(NodeServices.layer)))

  it("the capabilities name each subcommand, provider and sandbox, once", () => {
    for (const capability of ["run", "demo", "resume", "provider-openai", "provider-anthropic", "sandbox-bubblewrap"]) {
      assert.include(Commands.capabilities, capability)
    }
    assert.strictEqual(new Set(Commands.capabilities).size, Commands.capabilities.length)
  })
})

describe.concurrent("Commands.root", () => {
  live("--help lists the subcommands with their descriptions, on stdout", () =>
    Effect.gen(function*() {
      const help = yield* runCommand(["--help"], { cwd: yield* tempDir })
      assert.strictEqual(help.code, 0, help.stderr)
      assert.strictEqual(help.stderr, "")
      for (const command of [Commands.run, Commands.demo, Commands.version]) assert.include(help.stdout, command.name)
      assert.include(help.stdout, "Run an agent on a task")
      assert.include(help.stdout, "Run the offline demo")
    }))

  live("an invalid flag: the error and a pointer to the help on stderr, not the whole help; exit 22", () =>
    Effect.gen(function*() {
      const out = yield* runCommand(["version", "--bogus"], { cwd: yield* tempDir })
      assert.strictEqual(out.code, 22)
      assert.strictEqual(out.stdout, "")
      assert.include(out.stderr, "--bogus")
      assert.match(out.stderr, /\n\nSee: effect-agent version --help\n$/)
      assert.notInclude(out.stderr, "SUBCOMMANDS")
    }))
})

describe.concurrent("the built bin", () => {
  live("bin is the bundle dist/bin/effect-agent.js, runs by its shebang, and version --json lists the capabilities and exit codes", () =>
    Effect.gen(function*() {
      const cli = yield* Effect.promise(builtCommand)
      const fs = yield* FileSystem.FileSystem
      const pkg = yield* Effect.promise(builtPackage)
      const json = JSON.parse(yield* fs.readFileString(`${pkg}/package.json`))
      assert.deepStrictEqual(json.bin, { "effect-agent": "dist/bin/effect-agent.js" })
      // the file itself, run by its shebang
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      const bin = `${pkg}/${json.bin["effect-agent"]}`
      const handle = yield* spawner.spawn(ChildProcess.make(bin, ["version", "--json"]))
      const [code, stdout] = yield* Effect.all([handle.exitCode, Stream.mkString(Stream.decodeText(handle.stdout))], {
        concurrency: 2
      })
      assert.strictEqual(Number(code), 0)
      const info = JSON.parse(stdout)
      assert.strictEqual(info.name, "effect-agent")
      assert.strictEqual(info.version, json.version)
      for (const capability of ["resume", "control-protocol", "mcp", "sandbox-bubblewrap", "sandbox-local"]) {
        assert.include(info.capabilities, capability)
      }
      // the installed command reports the codes test/cli/ExitCode.test.ts pins
      assert.deepStrictEqual(info.exitCodes, ExitCode.codes)
      const plain = yield* run(cli, ["version"], { cwd: pkg })
      assert.strictEqual(plain.stdout, `effect-agent ${json.version}\n`)
    }))
})
