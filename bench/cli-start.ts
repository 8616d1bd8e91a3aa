/**
 * How long the `effect-agent` command takes to start: `--version`, `--help`,
 * `version`, `run` to its first model request (a Chat Completions server on
 * 127.0.0.1 that notes when the request arrives, then answers "ok") with the
 * default tools and sandbox and with none, and a one-turn `run` on a scripted
 * model to its exit; and the CPU time each start takes (user and system, to
 * its exit: a run's after its one turn). Each figure is the median (min–max)
 * of `--runs` runs, the cases taken in turn within each round so that a
 * change in the machine's load falls on all of them; the load is printed
 * before and after. With more than one command, each after the first is
 * compared with the first (the ratio of the medians). Run from the
 * repository root:
 *
 *   node bench/cli-start.ts                     # the command built from the sources (as the tests build it)
 *   node bench/cli-start.ts --runs 21
 *   node bench/cli-start.ts --command old/dist/bin/effect-agent.js --command dist/bin/effect-agent.js   # side by side
 *
 * Warm: with Node's compile cache (the command turns it on; here in a fresh
 * directory, warmed by one run of each case first), as every start after the
 * first. Cold (`--cold`): with the cache off (NODE_DISABLE_COMPILE_CACHE=1),
 * as the first start after an install. Every run is bounded (60 s).
 */
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Os from "node:os"
import * as Path from "node:path"
import { builtCommand } from "../test/cli/build.ts"
import { fmt, num, stat } from "./stats.ts"

const argv = process.argv.slice(2)
const option = (name: string): Array<string> =>
  argv.flatMap((arg, i) => (arg === name && argv[i + 1] !== undefined ? [argv[i + 1]!] : []))
const runs = Number(option("--runs")[0] ?? 11)
if (!Number.isInteger(runs) || runs < 1 || runs > 200) throw new Error(`--runs: 1 to 200, not ${option("--runs")[0]}`)
const cold = argv.includes("--cold")
const commands = option("--command").map((path) => Path.resolve(path))
if (commands.length === 0) commands.push(await builtCommand())

// One Chat Completions server for every run: a request's arrival is noted against the run that sent it (the
// runs are one at a time), and answered with "ok".
let arrived: ((at: number) => void) | undefined
const server = Http.createServer((request, response) => {
  const at = performance.now()
  request.resume()
  request.on("end", () => {
    arrived?.(at)
    arrived = undefined
    const chunk = (delta: unknown, finish: string | null) =>
      `data: ${JSON.stringify({ id: "c", model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
    response.writeHead(200, { "content-type": "text/event-stream" })
    response.end(chunk({ role: "assistant", content: "ok" }, null) + chunk({}, "stop") + "data: [DONE]\n\n")
  })
})
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
const address = server.address()
if (address === null || typeof address === "string") throw new Error("the model server has no port")
const baseUrl = `http://127.0.0.1:${address.port}/v1`

const scratch = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-cli-start-"))
const workspace = Path.join(scratch, "workspace")
Fs.mkdirSync(workspace)
// A one-turn run on a scripted model (as most of the tests that run the command): no HTTP client is loaded.
const script = Path.join(scratch, "script.json")
Fs.writeFileSync(script, JSON.stringify({ turns: [{ text: "Done." }] }))
const compileCache = Path.join(scratch, "compile-cache")

interface Case {
  readonly name: string
  readonly args: ReadonlyArray<string>
  /** Timed to the first model request, not to the exit. */
  readonly toRequest?: boolean
}

const cases: ReadonlyArray<Case> = [
  { name: "--version", args: ["--version"] },
  { name: "--help", args: ["--help"] },
  { name: "version", args: ["version"] },
  { name: "run: first request", args: ["run", "--base-url", baseUrl, "--task", "hi", "--quiet"], toRequest: true },
  {
    name: "run --sandbox none --tools none: first request",
    args: ["run", "--base-url", baseUrl, "--sandbox", "none", "--tools", "none", "--task", "hi", "--quiet"],
    toRequest: true
  },
  { name: "run --provider scripted: one turn", args: ["run", "--provider", "scripted", "--script", script, "--task", "hi", "--quiet"] }
]

/** Writes the process's CPU time (user and system, microseconds) at its exit to $EFFECT_AGENT_BENCH_CPU. */
const cpuProbe = `data:text/javascript,${
  encodeURIComponent(`
import { writeFileSync } from "node:fs"
process.on("exit", () => {
  const { user, system } = process.cpuUsage()
  writeFileSync(process.env.EFFECT_AGENT_BENCH_CPU, String(user + system))
})
`)
}`
const cpuFile = Path.join(scratch, "cpu")

interface Times {
  /** Milliseconds to the exit, or to the first model request. */
  readonly wall: number
  /** Milliseconds of CPU time to the exit. */
  readonly cpu: number
}

/** One start of the command: its wall and CPU times; fails on a bad exit. */
const once = (command: string, c: Case, warm: boolean): Promise<Times> =>
  new Promise((resolve, reject) => {
    const env: Record<string, string | undefined> = {
      ...process.env,
      XDG_STATE_HOME: Path.join(scratch, "state"),
      NODE_COMPILE_CACHE: compileCache,
      NODE_DISABLE_COMPILE_CACHE: warm ? undefined : "1",
      OPENAI_API_KEY: undefined,
      OPENAI_BASE_URL: undefined,
      EFFECT_AGENT_BENCH_CPU: cpuFile
    }
    Fs.rmSync(cpuFile, { force: true })
    let requestAt: number | undefined
    if (c.toRequest === true) arrived = (at) => void (requestAt = at)
    const start = performance.now()
    const child = spawn(process.execPath, ["--import", cpuProbe, command, ...c.args], {
      cwd: workspace,
      env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout.on("data", (chunk) => void (output += chunk))
    child.stderr.on("data", (chunk) => void (output += chunk))
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000)
    child.on("close", (code, signal) => {
      const end = performance.now()
      clearTimeout(timer)
      arrived = undefined
      if (code !== 0) return reject(new Error(`${c.name}: exit ${code ?? signal}\n${output}`))
      if (c.toRequest === true && requestAt === undefined) return reject(new Error(`${c.name}: no model request`))
      if (!Fs.existsSync(cpuFile)) return reject(new Error(`${c.name}: no CPU time written at the exit`))
      resolve({ wall: (requestAt ?? end) - start, cpu: Number(Fs.readFileSync(cpuFile, "utf8")) / 1000 })
    })
  })

const load = () => Os.loadavg().map((x) => x.toFixed(2)).join(" ")
console.log(
  `node ${process.version}, ${Os.availableParallelism()} cores, ${runs} runs per case, ` +
    `${cold ? "warm and cold" : "warm"} compile cache`
)
console.log(`load average (1, 5, 15 min) before: ${load()}`)

const modes = cold ? [true, false] : [true]
const times = new Map<string, Array<Times>>()
const key = (command: string, c: Case, warm: boolean) => `${command}\0${c.name}\0${warm}`
try {
  // Fills the compile cache, and checks every case works, before anything is timed.
  for (const command of commands) for (const c of cases) await once(command, c, true)
  for (let round = 0; round < runs; round++) {
    for (const warm of modes) {
      for (const c of cases) {
        for (const command of commands) {
          const measured = await once(command, c, warm)
          const list = times.get(key(command, c, warm)) ?? []
          list.push(measured)
          times.set(key(command, c, warm), list)
        }
      }
    }
  }
} finally {
  server.close()
  Fs.rmSync(scratch, { recursive: true, force: true })
}
console.log(`load average (1, 5, 15 min) after: ${load()}\n`)

const figures = (command: string, c: Case, warm: boolean) => {
  const list = times.get(key(command, c, warm)) ?? []
  return { wall: stat(list.map((t) => t.wall)), cpu: stat(list.map((t) => t.cpu)) }
}
const header = modes.flatMap((warm) => (warm ? ["warm (ms)", "warm CPU (ms)"] : ["cold (ms)", "cold CPU (ms)"]))
for (const command of commands) {
  console.log(commands.length > 1 ? `${command}:` : `${command}`)
  console.log(`| case | ${header.join(" | ")} |`)
  console.log(`|---|${header.map(() => "---:").join("|")}|`)
  for (const c of cases) {
    const cells = modes.flatMap((warm) => {
      const { wall, cpu } = figures(command, c, warm)
      return [fmt(wall, 0), fmt(cpu, 0)]
    })
    console.log(`| ${c.name} | ${cells.join(" | ")} |`)
  }
  console.log()
}
// Each command after the first against the first: the ratio of the medians.
for (const command of commands.slice(1)) {
  console.log(`${command} / ${commands[0]}, medians:`)
  console.log(`| case | ${header.join(" | ")} |`)
  console.log(`|---|${header.map(() => "---:").join("|")}|`)
  for (const c of cases) {
    const cells = modes.flatMap((warm) => {
      const [after, before] = [figures(command, c, warm), figures(commands[0]!, c, warm)]
      return [`${num(after.wall.median / before.wall.median)}×`, `${num(after.cpu.median / before.cpu.median)}×`]
    })
    console.log(`| ${c.name} | ${cells.join(" | ")} |`)
  }
  console.log()
}
