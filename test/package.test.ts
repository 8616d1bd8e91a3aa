/**
 * The package as npm ships it: what `npm pack` puts in the tarball, and the
 * tarball installed into a new project (offline, beside its peers from this
 * clone's node_modules) where the README's quick start runs and typechecks
 * and the command runs. Its Effect packages are peers, so that an app has
 * one copy of each; `@effect/sql-pg` is optional (only the cluster needs
 * it), and the project here has none.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Inspector } from "effect-agent/server"
import { execFile, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { builtTarball, npm, root } from "./cli/build.ts"

const run = promisify(execFile)

/**
 * Runs `command` until its stderr says `waitFor`, then stops it with SIGTERM, as an operator would; its stderr
 * and exit code. Fails when it exits first, or says nothing of the kind within 60 s.
 */
const untilStopped = (command: string, args: ReadonlyArray<string>, cwd: string, waitFor: string) =>
  new Promise<{ readonly code: number | null; readonly stderr: string }>((resolve, reject) => {
    const child = spawn(command, args, { cwd, env: { ...process.env, OPENAI_API_KEY: "unused" } })
    let stderr = ""
    let asked = false
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000)
    child.stderr.on("data", (chunk) => {
      stderr += chunk
      if (!asked && stderr.includes(waitFor)) {
        asked = true
        child.kill("SIGTERM")
      }
    })
    child.on("error", reject)
    child.on("close", (code) => {
      clearTimeout(timer)
      if (asked) resolve({ code, stderr })
      else reject(new Error(`${command} ${args.join(" ")} ended (${code}) before it said ${waitFor}:\n${stderr}`))
    })
  })

let tarball = ""
beforeAll(async () => {
  tarball = await builtTarball()
}, 240_000)

const pkg = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8"))

/** Paths that are for working on the package, never for its users. */
// (bench's code and its packages stay out; its two pages, which the docs link, go in)
const notShipped = /^(test|examples|\.ci|node_modules|coverage)\/|^bench\/(?!README\.md$|RESULTS\.md$)|\.test\.ts$|fixtures/

/** `effect-agent/providers` for the export `./providers`. */
const entryName = (exportPath: string) => exportPath === "." ? "effect-agent" : `effect-agent/${exportPath.slice(2)}`

/** Modules of the core entry point (it may hold more). */
const core = ["Agent", "AgentConfig", "AgentEvent", "Hooks", "Message", "Steering", "ToolRegistry"]

/** The modules of each other entry point, exactly. */
const platform: Record<string, ReadonlyArray<string>> = {
  "effect-agent/cli": ["Cli", "ExitCode", "YnhTrajectory"],
  "effect-agent/protocol": ["Control", "UntrustedConfig"],
  "effect-agent/providers": ["Anthropic", "OpenAiChat", "OpenAiResponses", "Pricing", "Provider", "Redaction"],
  "effect-agent/sandbox": ["BuiltinTools", "HostProcess", "Sandbox"],
  "effect-agent/server": ["AgentServer", "Inspector"],
  "effect-agent/session": ["CheckpointStore", "DurableSession", "Session", "Sessions", "Trajectory"],
  "effect-agent/supervisor": [
    "AgentWorker",
    "Check",
    "ExternalWorker",
    "SupervisedSession",
    "Supervisor",
    "SupervisorEvent",
    "SupervisorOutcome",
    "Worker"
  ],
  "effect-agent/testing": ["ScriptedModel"]
}

/**
 * A program that imports every entry point as a user does, uses a part of
 * each (so that their types are checked too), and prints the modules each one
 * exports.
 */
const entries = `import { type Config, Effect, Layer } from "effect"
import type { LanguageModel } from "effect/ai"
import type { HttpClient } from "effect/http"
import type { ChildProcessSpawner } from "effect/process"
import * as Core from "effect-agent"
import * as Cli from "effect-agent/cli"
import * as Protocol from "effect-agent/protocol"
import * as Providers from "effect-agent/providers"
import * as Sandbox from "effect-agent/sandbox"
import * as Server from "effect-agent/server"
import * as Session from "effect-agent/session"
import * as Supervisor from "effect-agent/supervisor"
import * as Testing from "effect-agent/testing"

const options: Providers.Provider.Options = { model: "gpt-4o", retry: { maxRetries: 1 } }
const model: Layer.Layer<
  LanguageModel.LanguageModel,
  Providers.Provider.MissingApiKey | Config.ConfigError,
  HttpClient.HttpClient
> = Providers.OpenAiChat.layer(options)
const code: Cli.ExitCode.ExitCode = Cli.ExitCode.fromOutcome(Core.Outcome.completed)
const sandbox: Effect.Effect<unknown, unknown> = Effect.scoped(Layer.build(Sandbox.Sandbox.memory({ "a.txt": "a" })))
const store: Session.CheckpointStore.Service = Session.CheckpointStore.memory()
const config: Core.AgentConfig.AgentConfig = Core.AgentConfig.makeUnsafe({ maxTurns: 3 })
const scripted = Testing.ScriptedModel.layer([{ text: "hi" }])
const worker: Supervisor.Worker.Worker<ChildProcessSpawner.ChildProcessSpawner> =
  Supervisor.ExternalWorker.claude({ cwd: ".", env: ["ANTHROPIC_API_KEY"] })
const server = Server.AgentServer.layer({ directory: ".sessions", config: { maxTurns: 10 } })
const check: Supervisor.Check.Check<Sandbox.Sandbox.Sandbox> = Supervisor.Check.command("tests", "npm test")
const line: Protocol.Control.Command = { type: "steer", text: "Use metric units." }
const limits: Effect.Effect<Core.AgentConfig.AgentConfig, Core.AgentError.ConfigError> = Protocol.UntrustedConfig.decode({ maxTurns: 10 })
void [model, code, sandbox, store, config, scripted, worker, server, check, line, limits]

const modules = { Core, Cli, Protocol, Providers, Sandbox, Server, Session, Supervisor, Testing }
const names = (module: object) => Object.keys(module).sort()
console.log(JSON.stringify({ inspector: Server.Inspector.html, modules: {
  "effect-agent": names(modules.Core),
  "effect-agent/cli": names(modules.Cli),
  "effect-agent/protocol": names(modules.Protocol),
  "effect-agent/providers": names(modules.Providers),
  "effect-agent/sandbox": names(modules.Sandbox),
  "effect-agent/server": names(modules.Server),
  "effect-agent/session": names(modules.Session),
  "effect-agent/supervisor": names(modules.Supervisor),
  "effect-agent/testing": names(modules.Testing)
} }))
`

describe.concurrent("the package", () => {
  it("ships dist (built by prepack), src for the source maps, the README and the docs it links, LICENSE and CHANGELOG; no tests or fixtures", async () => {
    assert.match(pkg.scripts.prepack, /npm run build$/)
    const { stdout } = await npm(["pack", "--dry-run", "--json", "--ignore-scripts"], root)
    const listed: ReadonlyArray<string> = JSON.parse(stdout.slice(stdout.indexOf("[")))[0].files.map(
      (file: { readonly path: string }) => file.path
    )
    assert.deepStrictEqual(listed.filter((file) => notShipped.test(file)), [])
    for (const file of ["package.json", "README.md", "LICENSE", "CHANGELOG.md", "src/index.ts", "src/cli/main.ts"]) {
      assert.include(listed, file)
    }
    // every file the README and the docs pages link to, so their links hold in the package too
    const pages = ["README.md", ...Fs.readdirSync(Path.join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)]
    for (const page of pages) {
      for (const [, target] of Fs.readFileSync(Path.join(root, page), "utf8").matchAll(/\]\(([^)#:\s]+)(#[^)]*)?\)/g)) {
        const file = Path.posix.normalize(Path.posix.join(Path.posix.dirname(page), target!))
        if (!file.startsWith("examples/") && !file.startsWith("src/")) assert.include(listed, file, `${page} links ${target}`)
      }
    }
    // the tarball itself, as prepack built it
    const { stdout: entries } = await run("tar", ["-tzf", tarball])
    const files = entries.split("\n").filter((line) => line !== "").map((line) => line.replace(/^package\//, ""))
    assert.deepStrictEqual(files.filter((file) => notShipped.test(file)), [])
    for (
      const file of [
        "dist/index.js",
        "dist/index.d.ts",
        "dist/index.js.map",
        "dist/cli/main.js",
        "dist/bin/effect-agent.js",
        "dist/bin/THIRD-PARTY-LICENSES.md"
      ]
    ) {
      assert.include(files, file)
    }
    // the command's bundle carries the license of each package it holds code of, with its text
    const { stdout: notices } = await run("tar", ["-xzOf", tarball, "package/dist/bin/THIRD-PARTY-LICENSES.md"])
    for (const name of ["effect", "@effect/platform-node", "undici", "ws", "@agentclientprotocol/sdk"]) {
      assert.match(notices, new RegExp(`^## ${name.replace("/", "\\/")} \\d`, "m"), name)
    }
    assert.include(notices, "Permission is hereby granted, free of charge")
    assert.include(notices, "Apache License")
    // every entry point package.json exports, built
    for (const entry of Object.values<Record<string, string>>(pkg.exports)) {
      assert.include(files, entry.default!.replace(/^\.\//, ""))
      assert.include(files, entry.types!.replace(/^\.\//, ""))
      assert.include(files, entry["effect-agent-source"]!.replace(/^\.\//, ""))
    }
    // the license is the one package.json names
    assert.strictEqual(pkg.license, "MIT")
    const license = Fs.readFileSync(Path.join(root, "LICENSE"), "utf8")
    assert.match(license, /^MIT License\n\nCopyright \(c\) 2026 the effect-agent authors\n/)
  }, 240_000)

  it("depends on nothing of its own: effect and @effect/platform-node are peers; @effect/sql-pg and the ACP SDK optional ones", () => {
    assert.isUndefined(pkg.dependencies)
    assert.deepStrictEqual(pkg.peerDependencies, {
      "@agentclientprotocol/sdk": "^2.4.0",
      "@effect/platform-node": "^4.1.0",
      "@effect/sql-pg": "^4.0.5",
      effect: "^4.1.0"
    })
    assert.deepStrictEqual(pkg.peerDependenciesMeta, {
      "@agentclientprotocol/sdk": { optional: true },
      "@effect/sql-pg": { optional: true }
    })
    // the clone's own tests and examples use them
    for (const name of Object.keys(pkg.peerDependencies)) assert.property(pkg.devDependencies, name)
  })

  it("installed from its tarball offline: the quick start and each entry point run and typecheck; the bin runs", async () => {
    const project = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-install-"))
    try {
      Fs.writeFileSync(Path.join(project, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }))
      // The peers from this clone (linked, as file: directories): no registry is needed. No @effect/sql-pg: it is
      // an optional peer, which only an app's durable sessions on PostgreSQL need.
      const linked = ["effect", "@effect/platform-node", "@types/node"].map((name) => `file:${Path.join(root, "node_modules", name)}`)
      await npm(["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", tarball, ...linked], project)
      Fs.copyFileSync(Path.join(root, "examples/quickstart.ts"), Path.join(project, "quickstart.ts"))
      Fs.writeFileSync(Path.join(project, "entries.ts"), entries)
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
          files: ["quickstart.ts", "entries.ts"]
        })
      )
      // at once: they only read the installed project. The types are checked by the compiler this clone builds
      // them with (TypeScript 7) and by TypeScript 5, which many apps still use.
      const tsc = Path.join(root, "node_modules/typescript/bin/tsc")
      const tsc5 = Path.join(root, "node_modules/typescript-5/bin/tsc")
      const bin = Path.join(project, "node_modules/.bin/effect-agent")
      const [quickstart, , , version, entryModules, runner] = await Promise.all([
        run(process.execPath, ["quickstart.ts"], { cwd: project }),
        run(process.execPath, [tsc, "-p", "tsconfig.json", "--singleThreaded"], { cwd: project }),
        run(process.execPath, [tsc5, "-p", "tsconfig.json"], { cwd: project }),
        run(bin, ["version"], { cwd: project }),
        run(process.execPath, ["entries.ts"], { cwd: project }),
        // a command of the cluster, though the app has no @effect/sql-pg: the bundle has its own client, which
        // tries the database (none listens on port 1) until it is stopped
        untilStopped(bin, ["runner", "--pg", "postgres://127.0.0.1:1/none"], project, "cannot reach the database")
      ])
      // one copy of each peer: the package has no node_modules of its own
      assert.isFalse(Fs.existsSync(Path.join(project, "node_modules/effect-agent/node_modules")))
      assert.isFalse(Fs.existsSync(Path.join(project, "node_modules/@effect/sql-pg")))
      assert.match(runner.stderr, /cannot reach the database \(durable session store: migrate failed: PgConnection/)
      assert.include(runner.stderr, "effect-agent runner: stopped")
      assert.strictEqual(runner.code, 0)
      assert.strictEqual(quickstart.stdout, "Completed - It is 4°C in Oslo: bring a coat.\n")
      // every entry point resolves from the installed package, with the modules it promises
      const printed = JSON.parse(entryModules.stdout)
      const modules: Record<string, ReadonlyArray<string>> = printed.modules
      // the inspector's page ships built: the installed package serves the page of this clone
      assert.strictEqual(printed.inspector, Inspector.html)
      assert.deepStrictEqual(Object.keys(modules).sort(), Object.keys(pkg.exports).map(entryName).sort())
      const coreModules = modules["effect-agent"] ?? []
      for (const name of core) assert.include(coreModules, name)
      for (const [entry, names] of Object.entries(platform)) {
        assert.deepStrictEqual(modules[entry], names)
        // the core no longer re-exports the platform's modules
        for (const name of names) assert.notInclude(coreModules, name)
      }
      assert.strictEqual(version.stdout, `effect-agent ${pkg.version}\n`)
    } finally {
      Fs.rmSync(project, { recursive: true, force: true })
    }
  }, 240_000)
})
