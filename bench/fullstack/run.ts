/**
 * The full-stack benchmark: each library's loop over its own OpenAI-compatible
 * provider against a local model server in its own process (`server.ts`),
 * measured by the client process's CPU time per turn.
 *
 * Usage (from the repository root): npm run bench -- --fullstack [options]
 *   --runs N       runs per client and phase (default 3; clients interleaved, order rotated)
 *   --quick        one run, shorter warm-ups (a harness check; RESULTS.md says so)
 *   --smoke        tiny workload, one run, nothing written
 *   --only a,b     clients (bare, pi, ai, openai, effect-agent, effect-agent-fetch); bare is always included
 *   --phases p,q   phases (spaced50, spaced200, fast50, fast200, concurrent)
 *   --no-write     print only
 */
import { spawn, spawnSync } from "node:child_process"
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { fmt, num, ratio, type Stat, stat } from "../stats.ts"
import type { ChildOptions, ChildResult, ClientId } from "./child.ts"

const here = path.dirname(fileURLToPath(import.meta.url))
const benchDir = path.dirname(here)
const rootDir = path.dirname(benchDir)

const ALL_CLIENTS: ReadonlyArray<ClientId> = ["bare", "pi", "ai", "openai", "effect-agent", "effect-agent-fetch"]

const args = process.argv.slice(2)
const flag = (name: string) => args.includes(`--${name}`)
const value = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}
const smoke = flag("smoke")
const quick = flag("quick") || smoke
const runs = Number(value("runs") ?? (quick ? 1 : 3))
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${value("runs")}`)
const write = !flag("no-write") && !smoke

interface PhaseSpec {
  readonly id: string
  readonly title: string
  readonly mode: ChildOptions["mode"]
  readonly turns: number
  readonly sessions: number
}

const size = smoke ? { short: 5, long: 10, sessions: 10, concurrentTurns: 3 } : {
  short: 50,
  long: 200,
  sessions: 100,
  concurrentTurns: 10
}
const warmup = smoke
  ? { warmupTurns: 20, warmupMs: 0 }
  : quick
  ? { warmupTurns: 300, warmupMs: 1500 }
  : { warmupTurns: 1000, warmupMs: 3000 }

const ALL_PHASES: ReadonlyArray<PhaseSpec> = [
  { id: "spaced50", title: `Events one per read, T = ${size.short}`, mode: "spaced", turns: size.short, sessions: 1 },
  { id: "spaced200", title: `Events one per read, T = ${size.long}`, mode: "spaced", turns: size.long, sessions: 1 },
  { id: "fast50", title: `Events as fast as possible, T = ${size.short}`, mode: "fast", turns: size.short, sessions: 1 },
  { id: "fast200", title: `Events as fast as possible, T = ${size.long}`, mode: "fast", turns: size.long, sessions: 1 },
  {
    id: "concurrent",
    title: `${size.sessions} concurrent sessions, T = ${size.concurrentTurns}, events one per read`,
    mode: "spaced",
    turns: size.concurrentTurns,
    sessions: size.sessions
  }
]

const pick = <A extends string>(name: string, all: ReadonlyArray<A>): ReadonlyArray<A> => {
  const raw = value(name)
  if (raw === undefined) return all
  const wanted = raw.split(",")
  const unknown = wanted.filter((w) => !all.some((a) => a === w))
  if (unknown.length > 0) throw new Error(`--${name}: unknown ${unknown.join(", ")}; one of ${all.join(", ")}`)
  return all.filter((a) => wanted.includes(a))
}

const phases = (() => {
  const ids = pick("phases", ALL_PHASES.map((p) => p.id))
  return ALL_PHASES.filter((p) => ids.includes(p.id))
})()

// -----------------------------------------------------------------------------
// The server and the children
// -----------------------------------------------------------------------------

const startServer = () =>
  new Promise<{ readonly url: string; readonly stop: () => void }>((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(here, "server.ts")], { stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    child.stdout.on("data", (data: Buffer) => {
      out += data.toString()
      const match = /listening (\d+)/.exec(out)
      if (match !== null) resolve({ url: `http://127.0.0.1:${match[1]}`, stop: () => child.kill() })
    })
    child.on("exit", (code) => reject(new Error(`the server exited (${code}) before listening`)))
  })

interface Stats {
  readonly requests: number
  readonly mismatches: number
  readonly problems: ReadonlyArray<string>
}

const stats = async (server: string): Promise<Stats> => (await fetch(`${server}/stats`)).json() as Promise<Stats>
const reset = async (server: string): Promise<void> => {
  await fetch(`${server}/reset`, { method: "POST" })
}

interface Measured extends ChildResult {
  readonly requests: number
  readonly mismatches: number
}

const runChild = async (client: ClientId, spec: PhaseSpec, server: string): Promise<Measured> => {
  await reset(server)
  const options: ChildOptions = { server, mode: spec.mode, turns: spec.turns, sessions: spec.sessions, ...warmup }
  const child = spawnSync(process.execPath, [path.join(here, "child.ts"), client, JSON.stringify(options)], {
    cwd: benchDir,
    encoding: "utf8",
    maxBuffer: 16 * 1024 * 1024,
    timeout: 20 * 60 * 1000
  })
  if (child.status !== 0) {
    throw new Error(`${client} / ${spec.id} failed (${child.status ?? child.signal}):\n${child.stderr}\n${child.stdout}`)
  }
  const line = child.stdout.trim().split("\n").at(-1) ?? ""
  const result: ChildResult = JSON.parse(line)
  const seen = await stats(server)
  if (seen.mismatches > 0) console.error(`${client} / ${spec.id}: ${seen.mismatches} mismatches: ${seen.problems[0]}`)
  return { ...result, requests: seen.requests, mismatches: seen.mismatches }
}

type Results = Map<string, Map<ClientId, Array<Measured>>>

const runAll = async (clients: ReadonlyArray<ClientId>, server: string): Promise<Results> => {
  const results: Results = new Map(phases.map((p) => [p.id, new Map(clients.map((c) => [c, []]))]))
  for (let run = 0; run < runs; run++) {
    for (const spec of phases) {
      const order = clients.map((_, i) => clients[(i + run) % clients.length]!)
      for (const client of order) {
        const measured = await runChild(client, spec, server)
        results.get(spec.id)!.get(client)!.push(measured)
        console.error(
          `run ${run + 1}/${runs} ${spec.id.padEnd(10)} ${measured.client.padEnd(24)} ` +
            `${(measured.cpuUs / measured.turns).toFixed(0).padStart(6)} µs CPU / turn, ` +
            `${(measured.wallMs / measured.turns).toFixed(2)} ms wall / turn, ${measured.mismatches} mismatches`
        )
      }
    }
  }
  return results
}

// -----------------------------------------------------------------------------
// Aggregation
// -----------------------------------------------------------------------------

type Metric = (r: Measured) => number
const cpuPerTurn: Metric = (r) => r.cpuUs / r.turns
const wallPerTurn: Metric = (r) => r.wallMs / r.turns

/** Per-run ratios of a client's metric to another client's in the same run. */
const ratios = (mine: ReadonlyArray<Measured>, base: ReadonlyArray<Measured>, metric: Metric): Stat =>
  stat(mine.map((r, i) => metric(r) / metric(base[i]!)))

interface Table {
  readonly title: string
  readonly header: ReadonlyArray<string>
  readonly rows: ReadonlyArray<ReadonlyArray<string>>
}

const tables = (results: Results, clients: ReadonlyArray<ClientId>): Array<Table> =>
  phases.map((spec) => {
    const byClient = results.get(spec.id)!
    const bare = byClient.get("bare")!
    const pi = byClient.get("pi")
    return {
      title: spec.title,
      header: ["client", "CPU µs / turn", "× pi-agent-core", "× bare", "wall ms / turn", "events / turn", "mismatches"],
      rows: clients.map((c) => {
        const mine = byClient.get(c)!
        return [
          mine[0]!.client,
          fmt(stat(mine.map(cpuPerTurn))),
          pi === undefined ? "–" : ratio(ratios(mine, pi, cpuPerTurn)),
          ratio(ratios(mine, bare, cpuPerTurn)),
          fmt(stat(mine.map(wallPerTurn))),
          num(stat(mine.map((r) => r.events / r.turns)).median),
          String(mine.reduce((n, r) => n + r.mismatches, 0))
        ]
      })
    }
  })

/** effect-agent against the targets of issue 19 (medians of the per-run ratios). */
const targets = (results: Results): Table | undefined => {
  const rows: Array<Array<string>> = []
  const medianRatio = (phase: string, mine: ClientId, base: ClientId) => {
    const a = results.get(phase)?.get(mine)
    const b = results.get(phase)?.get(base)
    return a === undefined || b === undefined ? undefined : ratios(a, b, cpuPerTurn).median
  }
  const row = (target: string, measured: number | undefined, limit: number) => {
    if (measured === undefined) return
    rows.push([target, `${num(measured)}×`, `≤ ${limit}×`, measured <= limit ? "met" : "missed"])
  }
  for (const phase of ["spaced50", "spaced200"]) {
    const t = phase === "spaced50" ? size.short : size.long
    row(`events one per read, T = ${t}: effect-agent (undici) ÷ pi-agent-core`, medianRatio(phase, "effect-agent", "pi"), 0.8)
    row(`events one per read, T = ${t}: effect-agent (undici) ÷ bare node:http loop`, medianRatio(phase, "effect-agent", "bare"), 2)
  }
  for (const phase of ["fast50", "fast200"]) {
    const t = phase === "fast50" ? size.short : size.long
    row(`events as fast as possible, T = ${t}: effect-agent (undici) ÷ pi-agent-core`, medianRatio(phase, "effect-agent", "pi"), 0.8)
    row(
      `events as fast as possible, T = ${t}: effect-agent (fetch) ÷ pi-agent-core`,
      medianRatio(phase, "effect-agent-fetch", "pi"),
      1
    )
  }
  row(`${size.sessions} concurrent sessions: effect-agent (undici) ÷ pi-agent-core`, medianRatio("concurrent", "effect-agent", "pi"), 0.8)
  if (rows.length === 0) return undefined
  return { title: "effect-agent against its targets (issue 19), client CPU per turn", header: ["target", "measured (median)", "target", ""], rows }
}

// -----------------------------------------------------------------------------
// Report
// -----------------------------------------------------------------------------

const markdownTable = (t: Table): string =>
  [
    `| ${t.header.join(" | ")} |`,
    `|${t.header.map((_, i) => (i === 0 ? "---" : "--:")).join("|")}|`,
    ...t.rows.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")

const textTable = (t: Table): string => {
  const widths = t.header.map((h, i) => Math.max(h.length, ...t.rows.map((r) => r[i]!.length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ")
  return [line(t.header), widths.map((w) => "-".repeat(w)).join("  "), ...t.rows.map(line)].join("\n")
}

const uptime = (): string => {
  const r = spawnSync("uptime", [], { encoding: "utf8" })
  return r.status === 0 ? r.stdout.trim() : `load average: ${os.loadavg().map((l) => l.toFixed(2)).join(", ")}`
}

const versionOf = (pkg: string): string => {
  try {
    return JSON.parse(readFileSync(path.join(benchDir, "node_modules", pkg, "package.json"), "utf8")).version
  } catch {
    return "not installed"
  }
}

const gitHead = (): string => {
  const r = spawnSync("git", ["rev-parse", "--short", "HEAD"], { cwd: rootDir, encoding: "utf8" })
  return r.status === 0 ? r.stdout.trim() : "unknown"
}

export const START = "<!-- fullstack:start -->"
export const END = "<!-- fullstack:end -->"

const report = (all: ReadonlyArray<Table>, loadStart: string, loadEnd: string): string => {
  const label = quick
    ? `QUICK RUN: ${runs} run per client and phase, short warm-ups; a harness check, not the measured result.`
    : `${runs} runs per client and phase, clients interleaved, after a warm-up in each client process.`
  return [
    START,
    "## Full stack: each library's own provider over HTTP",
    "",
    `**${label}**`,
    "",
    `- Load at start: \`${loadStart}\``,
    `- Load at end: \`${loadEnd}\``,
    `- Date: ${new Date().toISOString()}; Node ${process.version}; effect-agent ${gitHead()}; ` +
    `pi-agent-core ${versionOf("@mariozechner/pi-agent-core")}, pi-ai ${versionOf("@mariozechner/pi-ai")}; ` +
    `ai ${versionOf("ai")}, @ai-sdk/openai-compatible ${versionOf("@ai-sdk/openai-compatible")}; ` +
    `@openai/agents ${versionOf("@openai/agents")}; openai ${versionOf("openai")}`,
    "",
    "Reproduce: `npm run bench -- --fullstack` from the repository root.",
    "",
    "A local model server in its own process (`bench/fullstack/server.ts`, bare `node:http`) streams",
    "recorded-shape Chat Completions SSE: per turn a role chunk, 20 text deltas, the call `noop({ i })` (id and",
    "name, then its arguments in two pieces), the finish chunk, a usage chunk and `[DONE]`; after T tool turns",
    "the final answer. It checks every request's history (each earlier call, with its arguments, followed by",
    "its result) and counts the requests that fail (`mismatches`, must be 0). Each library runs its own loop",
    "over its own provider: effect-agent's `OpenAiChat` on undici (`NodeHttpClient.layerUndici`) and on",
    "`fetch` (`FetchHttpClient.layer`), pi-agent-core's `Agent` over pi-ai's `openai-completions` (the `openai`",
    "SDK on fetch), the AI SDK's `ToolLoopAgent` over `@ai-sdk/openai-compatible`, the Agents SDK's runner",
    "over its `OpenAIChatCompletionsModel`, and a bare `node:http` loop (keep-alive agent, SSE split by hand,",
    "`JSON.parse` per event) as the limit. Each client and phase runs in its own process: a warm-up on the",
    "fast endpoint, then the timed sessions; the figure is the client process's CPU time",
    "(`process.cpuUsage`, user + system) per tool turn. *One per read*: the server writes each event",
    "separately, about 1 ms apart, so each arrives in its own read, as a real model's tokens do; *as fast as",
    "possible*: the whole response in one write. Ratios are per run, then the median.",
    "",
    ...all.flatMap((t) => [`### ${t.title}`, "", markdownTable(t), ""]),
    END
  ].join("\n")
}

/** Replaces the full-stack section of RESULTS.md (or appends it). */
const writeSection = (section: string) => {
  const file = path.join(benchDir, "RESULTS.md")
  const current = existsSync(file) ? readFileSync(file, "utf8") : "# Benchmarks\n"
  const start = current.indexOf(START)
  const end = current.indexOf(END)
  const next = start >= 0 && end > start
    ? current.slice(0, start) + section + current.slice(end + END.length)
    : `${current.trimEnd()}\n\n${section}\n`
  writeFileSync(file, next)
}

export const main = async (): Promise<void> => {
  if (flag("help")) {
    console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0])
    return
  }
  const requested = pick("only", ALL_CLIENTS)
  const clients: ReadonlyArray<ClientId> = ["bare", ...requested.filter((c) => c !== "bare")]
  const loadStart = uptime()
  const server = await startServer()
  try {
    console.error(`${runs} run(s) × ${phases.length} phase(s) × ${clients.length} client(s); ${loadStart}`)
    const results = await runAll(clients, server.url)
    const all = tables(results, clients)
    const goals = targets(results)
    if (goals !== undefined) all.unshift(goals)
    const loadEnd = uptime()
    for (const t of all) console.log(`\n${t.title}\n${textTable(t)}`)
    console.log(`\nload at start: ${loadStart}\nload at end:   ${loadEnd}`)
    if (write) {
      writeSection(report(all, loadStart, loadEnd))
      console.log(`\nwritten ${path.relative(process.cwd(), path.join(benchDir, "RESULTS.md"))}`)
    }
  } finally {
    server.stop()
  }
}
