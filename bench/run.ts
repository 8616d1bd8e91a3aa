/**
 * The benchmark driver: installs the bench's dependencies when missing, runs
 * every adapter through every phase in child processes (adapters interleaved,
 * their order rotated each run), aggregates min / median / max of each figure
 * and of its ratio to the bare loop of the same run, prints the tables and
 * writes bench/RESULTS.md.
 *
 * Usage (from the repository root): npm run bench [-- options]
 *   --runs N       measured runs per adapter and phase (default 5; each child warms up first)
 *   --quick        one run: a smoke test of the harness with the full workload, labelled as such
 *   --smoke        tiny workload, one run, nothing written: checks the harness works
 *   --only a,b     adapters to run (bare, pi, ai, openai, effect-agent, effect-agent-onevent,
 *                  effect-agent-parts, effect-agent-scripted, effect-agent-traced, pi-provider, effect-agent-fetch);
 *                  bare is always included
 *   --phases p,q   phases to run (single200, single1000, concurrent, setup, batch)
 *   --no-write     print only
 *   --fullstack    the full-stack benchmark instead (bench/fullstack/run.ts; `--fullstack --help` lists its options)
 *   --durable      the durable rows instead, on a PostgreSQL it starts (bench/durable/run.ts; `--durable --help`);
 *                  `--phases durable` is the same
 */
import { spawnSync } from "node:child_process"
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import type { AdapterId, ChildOptions, ChildResult, Phase } from "./child.ts"
import { sseBody } from "./sse.ts"
import { fmt, num, ratio, type Stat, stat } from "./stats.ts"
import { turns } from "./workload.ts"

// The markers of the full-stack section of RESULTS.md (bench/fullstack/run.ts writes between them).
const FULLSTACK_START = "<!-- fullstack:start -->"
const FULLSTACK_END = "<!-- fullstack:end -->"
// The markers of the durable rows' section of RESULTS.md (bench/durable/run.ts writes between them).
const DURABLE_START = "<!-- durable:start -->"
const DURABLE_END = "<!-- durable:end -->"
// The markers of the section of figures other scripts measured (the agent server, the cluster), kept by hand.
const MEASURED_START = "<!-- measured:start -->"
const MEASURED_END = "<!-- measured:end -->"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const rootDir = path.dirname(benchDir)

// -----------------------------------------------------------------------------
// Options
// -----------------------------------------------------------------------------

const ALL_ADAPTERS: ReadonlyArray<AdapterId> = [
  "bare",
  "pi",
  "ai",
  "openai",
  "effect-agent",
  "effect-agent-onevent",
  "effect-agent-parts",
  "effect-agent-scripted",
  "effect-agent-traced",
  "pi-provider",
  "effect-agent-fetch"
]

interface PhaseSpec {
  readonly id: string
  readonly title: string
  readonly phase: Phase
  readonly options: ChildOptions
}

const args = process.argv.slice(2)
const flag = (name: string) => args.includes(`--${name}`)
const value = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}
const smoke = flag("smoke")
const quick = flag("quick") || smoke
const runs = Number(value("runs") ?? (quick ? 1 : 5))
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${value("runs")}`)
const write = !flag("no-write") && !smoke

const batch = { calls: 50, ms: 20, maxParallel: 8 }
const IDEAL_BATCH_MS = Math.ceil(batch.calls / batch.maxParallel) * batch.ms
const size = smoke
  ? { short: 20, long: 50, sessions: 50, setup: 50, warmup: 100, warmupMs: 0 }
  : { short: 200, long: 1000, sessions: 1000, setup: 1000, warmup: quick ? 200 : 1000, warmupMs: quick ? 1000 : 3000 }

const ALL_PHASES: ReadonlyArray<PhaseSpec> = [
  {
    id: "single200",
    title: `One session, T = ${size.short}`,
    phase: "single",
    options: { turns: size.short, sessions: 1, warmupTurns: size.warmup, warmupMs: size.warmupMs, batch }
  },
  {
    id: "single1000",
    title: `One session, T = ${size.long}`,
    phase: "single",
    options: { turns: size.long, sessions: 1, warmupTurns: size.warmup, warmupMs: size.warmupMs, batch }
  },
  {
    id: "concurrent",
    title: `${size.sessions} concurrent sessions, T = 10`,
    phase: "concurrent",
    options: { turns: 10, sessions: size.sessions, warmupTurns: size.warmup, warmupMs: size.warmupMs, batch }
  },
  {
    id: "setup",
    title: `Setup: ${size.setup} sessions of 1 turn, one after another`,
    phase: "setup",
    options: { turns: 1, sessions: size.setup, warmupTurns: size.warmup, warmupMs: size.warmupMs, batch }
  },
  {
    id: "batch",
    title: `Parallel batch: ${batch.calls} tools × ${batch.ms} ms, maxParallelTools ${batch.maxParallel}`,
    phase: "batch",
    options: { turns: 1, sessions: 1, warmupTurns: 0, warmupMs: 0, batch }
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

// With --fullstack, the options are the full-stack benchmark's (bench/fullstack/run.ts); with --durable (or
// `--phases durable`), the durable rows' (bench/durable/run.ts).
const fullstack = flag("fullstack")
const durable = flag("durable") || value("phases") === "durable"

const phases = fullstack || durable ? [] : (() => {
  const ids = pick("phases", ALL_PHASES.map((p) => p.id))
  return ALL_PHASES.filter((p) => ids.includes(p.id))
})()

// -----------------------------------------------------------------------------
// Dependencies
// -----------------------------------------------------------------------------

const npm = (cwd: string, ...npmArgs: Array<string>) => {
  console.error(`$ (cd ${path.relative(process.cwd(), cwd) || "."} && npm ${npmArgs.join(" ")})`)
  const result = spawnSync("npm", npmArgs, { cwd, stdio: "inherit", shell: process.platform === "win32" })
  if (result.status !== 0) throw new Error(`npm ${npmArgs.join(" ")} failed in ${cwd}`)
}

/** Installs bench/ (the peers) when missing or older than its lockfile; the root (effect, effect-agent) when missing. */
const ensureDependencies = () => {
  const installed = path.join(benchDir, "node_modules", ".package-lock.json")
  const lock = path.join(benchDir, "package-lock.json")
  if (!existsSync(installed) || statSync(installed).mtimeMs < statSync(lock).mtimeMs) {
    npm(benchDir, "ci", "--no-audit", "--no-fund")
  }
  if (!existsSync(path.join(rootDir, "node_modules", "effect", "package.json"))) {
    npm(rootDir, "ci", "--no-audit", "--no-fund")
  }
}

// -----------------------------------------------------------------------------
// Running
// -----------------------------------------------------------------------------

const runChild = (adapter: AdapterId, spec: PhaseSpec): ChildResult => {
  const child = spawnSync(
    process.execPath,
    [
      "--expose-gc",
      // 1,000 concurrent AI SDK sessions peak above 1.5 GB.
      "--max-old-space-size=8192",
      path.join(benchDir, "child.ts"),
      adapter,
      spec.phase,
      JSON.stringify(spec.options)
    ],
    { cwd: benchDir, encoding: "utf8", maxBuffer: 16 * 1024 * 1024 }
  )
  if (child.status !== 0) {
    throw new Error(`${adapter} / ${spec.id} failed (exit ${child.status}):\n${child.stderr}`)
  }
  const line = child.stdout.trim().split("\n").at(-1)
  if (line === undefined || line === "") throw new Error(`${adapter} / ${spec.id} printed nothing:\n${child.stderr}`)
  return JSON.parse(line)
}

/** results[phase][adapter] = one ChildResult per run. */
type Results = Map<string, Map<AdapterId, Array<ChildResult>>>

const runAll = (adapters: ReadonlyArray<AdapterId>): Results => {
  const results: Results = new Map(phases.map((p) => [p.id, new Map(adapters.map((a) => [a, []]))]))
  for (let run = 0; run < runs; run++) {
    for (const spec of phases) {
      // Interleaved: every adapter once per run, the order rotated so none always goes first.
      const order = adapters.map((_, i) => adapters[(i + run) % adapters.length]!)
      for (const adapter of order) {
        const started = Date.now()
        const result = runChild(adapter, spec)
        results.get(spec.id)!.get(adapter)!.push(result)
        console.error(`run ${run + 1}/${runs} ${spec.id.padEnd(10)} ${adapter.padEnd(12)} ${((Date.now() - started) / 1000).toFixed(1)} s`)
      }
    }
  }
  return results
}

// -----------------------------------------------------------------------------
// Aggregation and formatting
// -----------------------------------------------------------------------------

/** A metric of one child's result. */
type Metric = (r: ChildResult) => number

const usPerTurn: Metric = (r) => (r.ms * 1000) / r.turns
const eventsPerTurn: Metric = (r) => r.events / r.turns
const usPerEvent: Metric = (r) => (r.ms * 1000) / r.events
const peakMB: Metric = (r) => r.peakBytes / 1024 / 1024
const peakLiveMB: Metric = (r) => r.peakLiveBytes / 1024 / 1024
const retainedKB: Metric = (r) => r.retainedBytes / 1024
const sessionsOf = (spec: PhaseSpec) => spec.options.sessions
const wallMs: Metric = (r) => r.ms

/** Per-run ratios to the bare loop of the same run. */
const ratios = (mine: ReadonlyArray<ChildResult>, bare: ReadonlyArray<ChildResult>, metric: Metric): Stat =>
  stat(mine.map((r, i) => metric(r) / metric(bare[i]!)))

interface Column {
  readonly header: string
  readonly cell: (mine: ReadonlyArray<ChildResult>, bare: ReadonlyArray<ChildResult>) => string
}

const value_ = (header: string, metric: Metric, digits?: number): Column => ({
  header,
  cell: (mine) => fmt(stat(mine.map(metric)), digits)
})
const vsBare = (header: string, metric: Metric): Column => ({
  header,
  cell: (mine, bare) => ratio(ratios(mine, bare, metric))
})

const columnsFor = (spec: PhaseSpec): ReadonlyArray<Column> => {
  if (spec.phase === "single") {
    return [
      value_("µs / turn", usPerTurn),
      vsBare("× bare", usPerTurn),
      value_("events / turn", eventsPerTurn, 1),
      value_("µs / event", usPerEvent),
      value_("peak heap MB", peakMB),
      vsBare("× bare", peakMB),
      value_("peak live MB", peakLiveMB),
      vsBare("× bare", peakLiveMB),
      value_("retained KB", retainedKB, 0),
      vsBare("× bare", retainedKB)
    ]
  }
  if (spec.phase === "setup") {
    const perSession: Metric = (r) => (r.ms * 1000) / spec.options.sessions
    return [
      value_("µs / session", perSession),
      vsBare("× bare", perSession),
      value_("events / session", (r) => r.events / spec.options.sessions, 1)
    ]
  }
  if (spec.phase === "concurrent") {
    const n = sessionsOf(spec)
    const peakPerSession: Metric = (r) => r.peakBytes / 1024 / n
    const livePerSession: Metric = (r) => r.peakLiveBytes / 1024 / n
    const afterPerSession: Metric = (r) => r.retainedBytes / 1024 / n
    return [
      value_("µs / turn", usPerTurn),
      vsBare("× bare", usPerTurn),
      value_("events / turn", eventsPerTurn, 1),
      value_("KB / session, peak", peakPerSession),
      vsBare("× bare", peakPerSession),
      value_("KB / session, peak live", livePerSession),
      vsBare("× bare", livePerSession),
      value_("KB / session, after", afterPerSession),
      vsBare("× bare", afterPerSession)
    ]
  }
  return [
    value_("wall ms", wallMs),
    {
      header: `× ideal (${IDEAL_BATCH_MS} ms)`,
      // A library without a cap runs the whole batch at once: the ideal of a capped batch does not apply.
      cell: (mine) =>
        mine.some((r) => r.maxInFlight > batch.maxParallel)
          ? "n/a (no cap)"
          : ratio(stat(mine.map((r) => r.ms / IDEAL_BATCH_MS)))
    },
    vsBare("× bare", wallMs),
    value_("max in flight", (r) => r.maxInFlight, 0),
    { header: "concurrency cap", cell: (mine) => mine[0]!.cap }
  ]
}

const markdownTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string =>
  [
    `| ${header.join(" | ")} |`,
    `|${header.map((_, i) => (i === 0 ? "---" : "--:")).join("|")}|`,
    ...rows.map((r) => `| ${r.join(" | ")} |`)
  ].join("\n")

const textTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ")
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

interface Table {
  readonly title: string
  readonly header: ReadonlyArray<string>
  readonly rows: ReadonlyArray<ReadonlyArray<string>>
}

const tables = (results: Results, adapters: ReadonlyArray<AdapterId>): ReadonlyArray<Table> =>
  phases.map((spec) => {
    const byAdapter = results.get(spec.id)!
    const bare = byAdapter.get("bare")!
    const columns = columnsFor(spec)
    return {
      title: spec.title,
      header: ["adapter", ...columns.map((c) => c.header)],
      rows: adapters.map((a) => {
        const mine = byAdapter.get(a)!
        return [mine[0]!.adapter, ...columns.map((c) => c.cell(mine, bare))]
      })
    }
  })

/** µs per turn at the long T over the short T, per run: flat in history means ≈ 1. */
const flatness = (results: Results, adapters: ReadonlyArray<AdapterId>): Table | undefined => {
  const short = results.get("single200")
  const long = results.get("single1000")
  if (short === undefined || long === undefined) return undefined
  return {
    title: `Growth with history: µs / turn at T = ${size.long} ÷ at T = ${size.short}`,
    header: ["adapter", "ratio"],
    rows: adapters.map((a) => {
      const s = short.get(a)!
      const l = long.get(a)!
      return [l[0]!.adapter, ratio(stat(l.map((r, i) => usPerTurn(r) / usPerTurn(s[i]!))))]
    })
  }
}

/**
 * effect-agent against the targets of issues 8 and 19 (medians). Issue 8's are the loop's own cost, which
 * it measured over `ScriptedModel` (the test double that builds decoded parts): they are checked on that
 * row. Issue 19's are the provider path's: the provider-shaped row against pi-agent-core's fake model, and
 * the two real provider paths over an in-memory fetch against each other.
 */
const targets = (results: Results): Table | undefined => {
  const get = (phase: string, adapter: AdapterId) => results.get(phase)?.get(adapter)
  const bare = (phase: string) => get(phase, "bare")
  const rows: Array<Array<string>> = []
  const row = (target: string, measured: number | undefined, limit: number, unit: string, context = "") => {
    if (measured === undefined) return
    rows.push([target, `${num(measured)}${unit}`, `≤ ${limit}${unit}`, (measured <= limit ? "met" : "missed") + context])
  }
  const median = (xs: ReadonlyArray<ChildResult> | undefined, metric: Metric) => xs === undefined ? undefined : stat(xs.map(metric)).median
  const medianRatio = (phase: string, metric: Metric, base: AdapterId, of: AdapterId) => {
    const mine = get(phase, of)
    const other = get(phase, base)
    return mine === undefined || other === undefined ? undefined : ratios(mine, other, metric).median
  }
  const growth = (of: AdapterId) => {
    const short = get("single200", of)
    const long = get("single1000", of)
    return short === undefined || long === undefined
      ? undefined
      : stat(long.map((r, i) => usPerTurn(r) / usPerTurn(short[i]!))).median
  }
  // Issue 19: the provider path.
  row(
    `issue 19: OpenAiChat's parts without the wire, µs / turn at T = ${size.long}, × pi-agent-core (neither parses JSON)`,
    medianRatio("single1000", usPerTurn, "pi", "effect-agent-parts"),
    1,
    "×"
  )
  row(`issue 19: OpenAiChat's parts without the wire, µs / turn, T = ${size.long} ÷ T = ${size.short}`, growth("effect-agent-parts"), 1.3, "×")
  row(
    `issue 19: provider-shaped row, µs / turn at T = ${size.long}, × pi-agent-core (whose fake model parses no JSON)`,
    medianRatio("single1000", usPerTurn, "pi", "effect-agent"),
    1,
    "×"
  )
  row(`issue 19: provider-shaped row, µs / turn, T = ${size.long} ÷ T = ${size.short}`, growth("effect-agent"), 1.3, "×")
  row(
    `issue 19: µs / turn at T = ${size.long}, effect-agent over fetch ÷ pi-agent-core over pi-ai's provider, both in memory`,
    medianRatio("single1000", usPerTurn, "pi-provider", "effect-agent-fetch"),
    1,
    "×"
  )
  // Issue 8: the loop's own cost, over ScriptedModel.
  const loop: AdapterId = "effect-agent-scripted"
  const ea = (phase: string) => get(phase, loop)
  row(`issue 8: the loop (ScriptedModel), µs / turn at T = ${size.long}, × bare`, medianRatio("single1000", usPerTurn, "bare", loop), 3, "×")
  row(`issue 8: the loop, µs / event at T = ${size.long}`, median(ea("single1000"), usPerEvent), 2, " µs")
  row(`issue 8: the loop, µs / turn, T = ${size.long} ÷ T = ${size.short}`, growth(loop), 1.3, "×")
  const n = size.sessions
  row(`issue 8: the loop, ${n} sessions: µs / turn, × bare`, medianRatio("concurrent", usPerTurn, "bare", loop), 5, "×")
  row(`issue 8: the loop, ${n} sessions: heap / session at peak, live`, median(ea("concurrent"), (r) => r.peakLiveBytes / 1024 / n), 60, " KB")
  // Garbage included, the peak is bounded below by V8's young generation, not by the loop: the bare
  // loop's figure, given alongside, shows where that bound is on this machine.
  const barePeak = median(bare("concurrent"), (r) => r.peakBytes / 1024 / n)
  row(
    `issue 8: the loop, ${n} sessions: heap / session at peak, garbage included`,
    median(ea("concurrent"), (r) => r.peakBytes / 1024 / n),
    60,
    " KB",
    barePeak === undefined ? "" : ` (bare loop: ${num(barePeak)} KB)`
  )
  row(`issue 8: the loop, ${n} sessions: heap / session after`, median(ea("concurrent"), (r) => r.retainedBytes / 1024 / n), 20, " KB")
  row("issue 8: the loop, parallel batch, × ideal", median(ea("batch"), (r) => r.ms / IDEAL_BATCH_MS), 1.1, "×")
  if (rows.length === 0) return undefined
  return {
    title: "effect-agent against its targets: issue 19 (the provider path) and issue 8 (the loop's own cost)",
    header: ["target", "measured (median)", "target", ""],
    rows
  }
}

/**
 * The floor of any provider's decoding of a turn, measured in this process: `JSON.parse` of the `data:` lines of
 * one tool turn's SSE body (what every real provider parses; pi-agent-core's fake model parses nothing), the
 * median of 7 timings of 2,000 turns after a warm-up.
 */
const decodingFloor = (): Table => {
  const lines = new TextDecoder().decode(sseBody(turns.toolTurn(0))).split("\n")
    .filter((line) => line.startsWith("data: {")).map((line) => line.slice(6))
  let sink = 0
  const once = () => {
    for (const line of lines) sink += JSON.parse(line) === null ? 0 : 1
  }
  for (let i = 0; i < 5_000; i++) once()
  const timings: Array<number> = []
  for (let run = 0; run < 7; run++) {
    const start = performance.now()
    for (let i = 0; i < 2_000; i++) once()
    timings.push(((performance.now() - start) * 1000) / 2_000)
  }
  if (sink === 0) throw new Error("nothing parsed")
  return {
    title: "The floor of a provider's decoding, in this process",
    header: ["work per tool turn", "µs (median of 7)", "events"],
    rows: [["`JSON.parse` of the turn's `data:` lines alone", num(stat(timings).median), String(lines.length)]]
  }
}

// -----------------------------------------------------------------------------
// Report
// -----------------------------------------------------------------------------

const versionOf = (dir: string, pkg: string): string => {
  try {
    return JSON.parse(readFileSync(path.join(dir, "node_modules", pkg, "package.json"), "utf8")).version
  } catch {
    return "not installed"
  }
}

const gitHead = (): string => {
  const r = spawnSync("git", ["rev-parse", "--short", "HEAD"], { cwd: rootDir, encoding: "utf8" })
  return r.status === 0 ? r.stdout.trim() : "unknown"
}

/** Load averages when the run started: a busy machine makes every figure noisier. */
const loadAtStart = os.loadavg()

const machine = (): ReadonlyArray<string> => [
  `- Load average at start: ${loadAtStart.map((l) => l.toFixed(2)).join(" / ")} (1 / 5 / 15 min)`,
  `- Load average at end: ${os.loadavg().map((l) => l.toFixed(2)).join(" / ")} (1 / 5 / 15 min)`,
  `- Date: ${new Date().toISOString()}`,
  `- Machine: ${os.availableParallelism()} cores (nproc), ${os.cpus()[0]?.model ?? "unknown CPU"}, ${Math.round(os.totalmem() / 1024 ** 3)} GB, ${os.type()} ${os.release()}`,
  `- Node ${process.version}; effect-agent ${gitHead()}; effect ${versionOf(rootDir, "effect")}; ` +
  `@mariozechner/pi-agent-core ${versionOf(benchDir, "@mariozechner/pi-agent-core")}; ai ${versionOf(benchDir, "ai")}; ` +
  `@openai/agents ${versionOf(benchDir, "@openai/agents")}`
]

const report = (all: ReadonlyArray<Table>, adapters: ReadonlyArray<AdapterId>): string => {
  const left = ALL_ADAPTERS.filter((a) => !adapters.includes(a))
  const label = smoke
    ? "SMOKE RUN: tiny workload, not a measurement."
    : quick
    ? `QUICK RUN: ${runs} run per adapter and phase on a shared, busy machine; a harness check, not the measured result.`
    : `${runs} runs per adapter and phase after a warm-up in each child process.`
  return [
    "# Benchmarks",
    "",
    `**${label}**`,
    "",
    ...machine(),
    ...(left.length === 0 ? [] : [`- Not in this run (\`--only\`): ${left.join(", ")}`]),
    "",
    "Reproduce: `npm run bench` from the repository root (`npm run bench -- --help` lists the options).",
    "",
    "## Workload",
    "",
    "A scripted in-memory model (no network, no timers) streams, per turn, 20 small text deltas and then one",
    "call to a no-op tool `noop({ i })`; after T turns it streams a final answer (20 deltas) and stops. Each",
    "library runs it through its own loop, with a fake model written against its documented model interface:",
    "arguments validated by the library, the tool executed, its result appended, the model called again, and",
    "every event the library emits delivered to a consumer that counts it. After each session the harness",
    "checks the tool ran T times, the model was called T + 1 times, each request ended with the previous",
    "turn's tool result, and the final text is exact; any mismatch fails the run.",
    "",
    "- **bare loop**: a hand-written loop over the same stream (async generator of parts, JSON arguments",
    "  parsed and checked by hand, events to a callback): the lower limit.",
    "- **pi-agent-core**: `Agent.prompt` with a `streamFn` emitting pi-ai's `AssistantMessageEventStream`; events via `subscribe`.",
    "- **ai**: `ToolLoopAgent.stream` with `stopWhen: isStepCount(T + 1)` over a `LanguageModelV4`; events = `fullStream` parts.",
    "- **@openai/agents**: `Runner.run(agent, input, { stream: true })` with a custom `Model`; events = the run's stream events; tracing disabled.",
    "- **effect-agent**: `Agent.run` over a provider-shaped model: each turn is the Chat Completions SSE body a server",
    "  would send for it (a role chunk, the 20 deltas, the call's id and name then its arguments in two pieces, the",
    "  finish and usage chunks, `[DONE]`), in memory, one read per turn, decoded by the `OpenAiChat` provider's own",
    "  code (its body reader, decoder and wire check) into the parts the loop takes; only the HTTP request is left",
    "  out (the full-stack benchmark below has it). Tools through `ToolRegistry.layer`, events via a plugin's",
    "  `observe` (the synchronous observer an app that counts or renders uses). Issue 19's in-memory target is checked against it.",
    "- **effect-agent (onEvent)**: the same, with the events counted by a plugin's `onEvent` instead, an `Effect.sync` per event (an observer that needs services).",
    "- **effect-agent (OpenAiChat's parts, no wire)**: the same loop handed, per call, fresh copies of the parts `OpenAiChat`'s",
    "  decoder made from the turn's SSE body (decoded once per process), in one chunk, as the provider's direct path hands",
    "  over the parts of one read: issue 19's provider-shaped model (the parts a provider's decoder produces), without the",
    "  SSE framing and `JSON.parse` that the row above pays and pi-agent-core's fake model does not.",
    "- **effect-agent (ScriptedModel, test double)**: the same loop over `ScriptedModel` (request recording off), which builds the decoded parts itself: the loop's own cost, without a provider's decoding. Issue 8's targets (the loop's own cost) are checked against it.",
    "",
    "Two rows compare the libraries' real provider paths like for like, over an in-memory `fetch`: an in-memory",
    "Chat Completions server (`bench/memory-fetch.ts`) reads each request's JSON body, checks its last message is",
    "the previous turn's tool result (any mismatch answers HTTP 400 and fails the run), and answers with a",
    "`Response` whose body stream delivers the turn's SSE body, the same bytes as the effect-agent row above",
    "(`bench/sse.ts`), in one chunk. Both rows pay request encoding (the whole history, each turn), the `fetch`",
    "call, the body read, SSE framing, `JSON.parse`, the provider's decoding and the loop; only the socket is",
    "left out. The server parses only the request's last message, so its own cost does not grow with the history.",
    "",
    "- **pi-agent-core (pi-ai provider, in-memory fetch)**: `Agent.prompt` with its default `streamFn`, pi-ai's",
    "  `openai-completions` provider (the `openai` SDK client it makes per request, which takes the global",
    "  `fetch`: the global is routed to the session's server by a per-session header while sessions run).",
    "- **effect-agent (OpenAiChat over fetch, in memory)**: `Agent.run` over `OpenAiChat.layer` on",
    "  `FetchHttpClient.layer`, built once per process; each run is given its session's server as",
    "  `FetchHttpClient.Fetch`. Tools and events as in the effect-agent row.",
    "",
    "Each adapter and phase runs in its own child process (`node --expose-gc`): a full GC, a warm-up (one session",
    "of the timed run's T first, so that what an adapter builds per turn on first use, such as the SSE bodies the",
    "provider rows decode, is built before timing; then at least",
    `${size.warmup.toLocaleString("en-US")} turns, at least the timed run's workload with as many sessions at once, and at least ${size.warmupMs / 1000} s:`,
    "every loop measured here, the bare one included, still got 30–50% faster per turn over its first second",
    "of sessions), then the timed run (no forced GC between warm-up and timed run: it would deoptimize the",
    "warmed code). Adapters are",
    "interleaved within each run, their order rotated. Figures are median (min–max) over the runs; every",
    "`× bare` is the ratio to the bare loop of the same run, then aggregated. Peak heap is sampled once per",
    "tool run in a separate, untimed run of the same workload, above a post-GC baseline (uncollected",
    "garbage included); retained is what the libraries' result objects (the transcript an app would keep)",
    "hold after a full GC. Peak live is a third untimed run: the heap right after a full GC at 20 evenly",
    "spaced tool runs and at the end, above the baseline: what the sessions hold. The garbage-included",
    "peak is bounded below by V8's young generation rather than by the library: Node sizes new space by",
    "the machine's memory (64 MB semi-spaces here, so up to 64 KB per session of not-yet-scavenged",
    "garbage at 1,000 sessions, whatever the loop), which is why even the bare loop peaks near it.",
    "",
    "In the batch, pi-agent-core and ai have no concurrency cap: they start all 50 calls at once, so",
    "their wall time is one sleep plus overhead and the capped ideal does not apply (`n/a`). @openai/agents",
    "uses its own cap (`maxFunctionToolConcurrency`), effect-agent its `maxParallelTools`, the bare loop a pool.",
    "",
    ...all.flatMap((t) => [`## ${t.title}`, "", markdownTable(t.header, t.rows), ""])
  ].join("\n")
}

// -----------------------------------------------------------------------------
// Main
// -----------------------------------------------------------------------------

const main = () => {
  if (flag("help")) {
    console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0])
    return
  }
  ensureDependencies()
  const requested = pick("only", ALL_ADAPTERS)
  const adapters: ReadonlyArray<AdapterId> = ["bare", ...requested.filter((a) => a !== "bare")]
  console.error(`${runs} run(s) × ${phases.length} phase(s) × ${adapters.length} adapter(s)${quick ? " (quick)" : ""}`)
  const results = runAll(adapters)
  const all = [...tables(results, adapters)]
  const flat = flatness(results, adapters)
  if (flat !== undefined) all.splice(2, 0, flat)
  const goals = targets(results)
  if (goals !== undefined) all.unshift(goals, decodingFloor())
  for (const t of all) console.log(`\n${t.title}\n${textTable(t.header, t.rows)}`)
  if (write) {
    const out = path.join(benchDir, "RESULTS.md")
    // The full-stack and durable sections, written by `--fullstack` and `--durable`, and the figures of other
    // scripts are kept.
    const previous = existsSync(out) ? readFileSync(out, "utf8") : ""
    const keep = (startMarker: string, endMarker: string) => {
      const start = previous.indexOf(startMarker)
      const end = previous.indexOf(endMarker)
      return start >= 0 && end > start ? `\n${previous.slice(start, end + endMarker.length)}\n` : ""
    }
    writeFileSync(
      out,
      report(all, adapters) + keep(FULLSTACK_START, FULLSTACK_END) + keep(DURABLE_START, DURABLE_END) +
        keep(MEASURED_START, MEASURED_END)
    )
    console.log(`\nwritten ${path.relative(process.cwd(), out)}`)
  }
}

if (fullstack) {
  ensureDependencies()
  await (await import("./fullstack/run.ts")).main()
} else if (durable) {
  ensureDependencies()
  await (await import("./durable/run.ts")).main()
} else {
  main()
}
