/**
 * What the built command loads to start: its tree (names, flags, help) and
 * the platform, and each subcommand's modules only when it runs, so that
 * `--help`, `--version` and `version` answer without loading a run (the
 * providers, the sandbox, the server, the cluster, undici), nor all of
 * `effect`. Checked by the modules Node loads (a load hook), not by a clock;
 * `bench/cli-start.ts` measures the time: first in the package's unbundled
 * `dist/cli/main.js`, whose modules the bundle's chunks follow, then in the
 * bundle (`dist/bin/effect-agent.js`, the `bin`), chunk by chunk.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { builtCommand, builtPackage } from "./build.ts"
import { environment } from "./support.ts"

/** Writes the URL of every module Node loads to the file in $EFFECT_AGENT_TEST_LOADED, at the exit. */
const tracer = `data:text/javascript,${
  encodeURIComponent(`
import { registerHooks } from "node:module"
import { writeFileSync } from "node:fs"
const loaded = []
registerHooks({ load(url, context, next) { loaded.push(url); return next(url, context) } })
process.on("exit", () => writeFileSync(process.env.EFFECT_AGENT_TEST_LOADED, loaded.join("\\n")))
`)
}`

/** The built package's unbundled command, module by module. */
const unbundled = async () => Path.join(await builtPackage(), "dist/cli/main.js")

/**
 * Runs the built command (by default the unbundled one) to its exit (60 s at most): its exit code, output, and
 * the modules it loaded.
 */
const start = async (args: ReadonlyArray<string>, cwd: string, command?: string) => {
  command ??= await unbundled()
  const list = Path.join(cwd, `loaded-${Math.random().toString(36).slice(2)}.txt`)
  const env = { ...environment({ EFFECT_AGENT_TEST_LOADED: list }) }
  return new Promise<{ readonly code: number; readonly stderr: string; readonly loaded: ReadonlyArray<string> }>(
    (resolve) => {
      execFile(process.execPath, ["--import", tracer, command, ...args], { cwd, env, timeout: 60_000 }, (error, _, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
        const loaded = Fs.existsSync(list) ? Fs.readFileSync(list, "utf8").split("\n") : []
        resolve({ code, stderr, loaded })
      })
    }
  )
}

/** What a run needs, by what it is: none of it is loaded by a command that runs nothing. */
const runModules: ReadonlyArray<readonly [string, RegExp]> = [
  ["the run's command modules", /\/dist\/cli\/internal\/(Runner|Serve|Cluster|Demo|SupervisedDemo|View|Settings)\.js$/],
  ["the loop", /\/dist\/(Agent|internal\/loop)\.js$/],
  ["the providers", /\/dist\/providers\//],
  ["the sandbox", /\/dist\/sandbox\//],
  ["the server", /\/dist\/server\//],
  ["sessions", /\/dist\/session\//],
  ["undici", /\/node_modules\/undici\/|\/platform-node\/dist\/(Undici|NodeHttpClient)\.js$/],
  ["the cluster and PostgreSQL", /\/node_modules\/(@effect\/sql-pg|@redis|pg)\/|\/effect\/dist\/cluster\//],
  // the ACP worker's SDK (and the zod it validates with): loaded by an ACP turn only
  ["the ACP SDK", /\/node_modules\/(@agentclientprotocol\/sdk|zod)\//]
]

const loadedOf = (loaded: ReadonlyArray<string>, what: ReadonlyArray<string>) =>
  runModules.filter(([name]) => what.includes(name)).flatMap(([name, pattern]) =>
    loaded.filter((url) => pattern.test(url)).map((url) => `${name}: ${url}`)
  )

const everything = runModules.map(([name]) => name)

describe.concurrent("the command's start", () => {
  it("--help, --version, version and each subcommand's --help load none of a run's modules", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-start-"))
    try {
      for (
        const args of [["--help"], ["--version"], ["version"], ["version", "--json"], ["run", "--help"], [
          "serve",
          "--help"
        ], ["runner", "--help"], ["demo", "--help"]]
      ) {
        const out = await start(args, dir)
        assert.strictEqual(out.code, 0, `${args.join(" ")}: ${out.stderr}`)
        assert.isTrue(out.loaded.some((url) => url.endsWith("/dist/cli/internal/Commands.js")), "the trace works")
        assert.deepStrictEqual(loadedOf(out.loaded, everything), [], args.join(" "))
        // Nor all of effect: `from "effect"` loads every module of it; the tree imports those it uses.
        assert.deepStrictEqual(out.loaded.filter((url) => /\/node_modules\/effect\/dist\/index\.js$/.test(url)), [])
      }
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)

  it("a run loads what it uses: not the server, the cluster, or undici when it sends no request", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-start-"))
    try {
      const demo = await start(["demo"], dir)
      assert.strictEqual(demo.code, 0, demo.stderr)
      assert.deepStrictEqual(loadedOf(demo.loaded, ["the server", "undici", "the cluster and PostgreSQL", "the ACP SDK"]), [])
      // An offline run on a script file: the loop, the sandbox and the tools, but no HTTP client.
      Fs.writeFileSync(Path.join(dir, "script.json"), JSON.stringify({ turns: [{ text: "Done." }] }))
      const run = await start(["run", "--provider", "scripted", "--script", "script.json", "--task", "hi", "--quiet"], dir)
      assert.strictEqual(run.code, 0, run.stderr)
      assert.isTrue(run.loaded.some((url) => url.endsWith("/dist/cli/internal/Runner.js")))
      assert.deepStrictEqual(
        loadedOf(run.loaded, ["the server", "undici", "the cluster and PostgreSQL", "the ACP SDK"]),
        []
      )
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)

  it("the bundle (the bin) loads the chunks of what runs: none of a run's for --version, none of the server's, the cluster's or undici's for an offline run", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-start-"))
    try {
      const bin = await builtCommand()
      assert.match(bin, /\/dist\/bin\/effect-agent\.js$/)
      // rolldown names a chunk after the first module in it: Runner, Serve, Cluster, PgClient, Undici, …
      const chunks = (loaded: ReadonlyArray<string>) =>
        loaded.filter((url) => url.includes("/dist/bin/")).map((url) => Path.basename(url).replace(/-[\w-]{8}\.js$/, ""))
      const version = await start(["--version"], dir, bin)
      assert.strictEqual(version.code, 0, version.stderr)
      assert.include(chunks(version.loaded), "Cli")
      // all of it in the bundle: no module of its own (dist/cli/), nor any outside it (node_modules/)
      const outside = (url: string) => url.startsWith("file:") && !url.includes("/package/dist/bin/")
      assert.deepStrictEqual(version.loaded.filter(outside), [])
      const run = ["Runner", "Serve", "Cluster", "PgClient", "Undici", "NodeHttpClient", "Demo", "View", "acp"]
      assert.deepStrictEqual(chunks(version.loaded).filter((name) => run.includes(name)), [])
      Fs.writeFileSync(Path.join(dir, "script.json"), JSON.stringify({ turns: [{ text: "Done." }] }))
      const offline = await start(["run", "--provider", "scripted", "--script", "script.json", "--task", "hi", "--quiet"], dir, bin)
      assert.strictEqual(offline.code, 0, offline.stderr)
      assert.include(chunks(offline.loaded), "Runner")
      assert.deepStrictEqual(
        chunks(offline.loaded).filter((name) => ["Serve", "Cluster", "PgClient", "Undici", "NodeHttpClient", "acp"].includes(name)),
        []
      )
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
