/**
 * Runs one adapter through one phase in a fresh process (so heaps and JIT
 * state of different libraries never mix) and prints one JSON line: the
 * timed run first (no instrumentation but the event counter), then two
 * untimed memory runs of the same workload: one samples the heap once per tool
 * run (garbage included), one samples the live heap after forced full GCs.
 *
 * Usage: node --expose-gc child.ts <adapter> <phase> <json options>
 */
import { performance } from "node:perf_hooks"
import type { Adapter, BatchSpec, SessionOutcome } from "./workload.ts"
import { verifyBatch, verifySession } from "./workload.ts"

export type Phase = "single" | "concurrent" | "batch" | "setup"

export interface ChildOptions {
  /** Tool turns per session (single, concurrent). */
  readonly turns: number
  /** Concurrent sessions (concurrent), or sessions one after another (setup). */
  readonly sessions: number
  /** Tool turns run as warm-up before measuring (single, concurrent). */
  readonly warmupTurns: number
  /** Least wall time of warm-up, ms (single, concurrent): until the JIT has settled. */
  readonly warmupMs: number
  /** The batch (batch). */
  readonly batch: BatchSpec
}

/** One child's measurements. */
export interface ChildResult {
  readonly adapter: string
  readonly phase: Phase
  readonly cap: string
  /** Wall time of the timed run, ms. */
  readonly ms: number
  /** Tool turns in the timed run (sessions × T). */
  readonly turns: number
  /** Events delivered in the timed run. */
  readonly events: number
  /** Peak heap above the pre-run baseline during the memory run, bytes (garbage included). */
  readonly peakBytes: number
  /** Peak live heap above the baseline: the largest heap right after one of the live run's full GCs, bytes. */
  readonly peakLiveBytes: number
  /** Heap above the baseline after the memory run and a full GC, every session's result still alive, bytes. */
  readonly retainedBytes: number
  /** Largest number of batch tools seen running at once. */
  readonly maxInFlight: number
}

/** Adapter ids; each loads only its own library. */
export const ADAPTERS = [
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
] as const
export type AdapterId = (typeof ADAPTERS)[number]

const isAdapterId = (name: string | undefined): name is AdapterId => ADAPTERS.some((a) => a === name)

const adapters: Record<AdapterId, () => Promise<Adapter>> = {
  bare: async () => (await import("./adapters/bare.ts")).adapter,
  pi: async () => (await import("./adapters/pi.ts")).adapter,
  ai: async () => (await import("./adapters/ai.ts")).adapter,
  openai: async () => (await import("./adapters/openai.ts")).adapter,
  "effect-agent": async () => (await import("./adapters/effect-agent.ts")).adapter,
  "effect-agent-onevent": async () => (await import("./adapters/effect-agent.ts")).onEventAdapter,
  "effect-agent-parts": async () => (await import("./adapters/effect-agent.ts")).partsAdapter,
  "effect-agent-scripted": async () => (await import("./adapters/effect-agent.ts")).scriptedAdapter,
  "effect-agent-traced": async () => (await import("./adapters/effect-agent.ts")).tracedAdapter,
  "pi-provider": async () => (await import("./adapters/pi-provider.ts")).adapter,
  "effect-agent-fetch": async () => (await import("./adapters/effect-agent.ts")).fetchAdapter
}

const gc = (): void => {
  if (globalThis.gc === undefined) throw new Error("run node with --expose-gc")
  globalThis.gc()
  globalThis.gc()
}

const heap = (): number => process.memoryUsage().heapUsed

/** A heap sampler for memory runs. */
const sampler = () => {
  const base = heap()
  let peak = base
  return {
    base,
    sample: () => {
      const h = heap()
      if (h > peak) peak = h
    },
    peak: () => peak - base
  }
}

/** Runs `count` sessions at once and verifies each after they all ended. */
const sessions = async (
  adapter: Adapter,
  count: number,
  turns: number,
  onTurn?: () => void
): Promise<ReadonlyArray<SessionOutcome>> => {
  const all: Array<Promise<SessionOutcome>> = []
  for (let s = 0; s < count; s++) all.push(adapter.session(turns, onTurn))
  return Promise.all(all)
}

const verified = (adapter: Adapter, turns: number, outcomes: ReadonlyArray<SessionOutcome>) => {
  for (const outcome of outcomes) verifySession(adapter.name, turns, outcome)
  return outcomes
}

/**
 * Untimed sessions until at least `warmupTurns` turns and as many turns as the timed run have run, with
 * as many sessions at once as the timed run, for at least `warmupMs` (a shorter warm-up leaves code still
 * being optimized while it is timed: every loop here, the bare one included, got 30–50% faster per turn
 * over its first second of 1,000-turn sessions).
 */
const warmup = async (adapter: Adapter, options: ChildOptions, concurrent: number): Promise<void> => {
  const turns = Math.min(options.turns, 200)
  const target = Math.max(options.warmupTurns, concurrent * options.turns)
  const until = performance.now() + options.warmupMs
  // First one session of the timed run's T, so that whatever an adapter builds per turn on first use (the
  // SSE bodies the provider rows decode, which a server would have at hand) is built before it is timed:
  // the shorter sessions below reach turn 200 only.
  verified(adapter, options.turns, await sessions(adapter, 1, options.turns))
  let done = options.turns
  while (done < target || performance.now() < until) {
    verified(adapter, turns, await sessions(adapter, concurrent, turns))
    done += concurrent * turns
  }
}

/**
 * The timed run, in its own frame so nothing of it outlives it (suspended async frames keep their temporaries).
 * No forced GC right before it: a full GC deoptimizes the code whose embedded objects died (V8 traces it as
 * "embedded weak objects cleared"), which throws the warm-up away (measured: a 1,000-turn effect-agent
 * session took 1.7× as long right after `gc()` as without it). The heap is collected before the warm-up instead.
 */
const timedRun = async (adapter: Adapter, count: number, turns: number) => {
  const start = performance.now()
  const outcomes = await sessions(adapter, count, turns)
  const ms = performance.now() - start
  return { ms, events: verified(adapter, turns, outcomes).reduce((n, o) => n + o.events, 0) }
}

/**
 * Runs one tiny session and drops it. Some libraries keep a module-level
 * reference to their last run (the AI SDK does), which would count the timed
 * run's garbage in the memory run's baseline; after this, only a 1-turn
 * session can be left behind.
 */
const flush = async (adapter: Adapter): Promise<void> => {
  verifySession(adapter.name, 1, await adapter.session(1))
}

/**
 * The memory run, in its own frame: a post-GC baseline, the heap sampled once
 * per tool run for the peak, then a full GC with every result still alive
 * for what the results retain.
 */
const memoryRun = async (adapter: Adapter, count: number, turns: number) => {
  gc()
  const memory = sampler()
  const kept = await sessions(adapter, count, turns, memory.sample)
  memory.sample()
  gc()
  const retainedBytes = heap() - memory.base
  return { peakBytes: memory.peak(), retainedBytes, sessions: verified(adapter, turns, kept).length }
}

/** Full GCs per live run, spread evenly over its tool runs. */
const LIVE_SAMPLES = 20

/**
 * The live run: the heap right after a full GC at `LIVE_SAMPLES` evenly spaced
 * tool runs, and once more when every session has ended (results still alive).
 * The garbage-included peak of `memoryRun` is bounded below by V8's young
 * generation, not by the library: new space is sized by the machine's memory
 * (64 MB semi-spaces on a 24 GB machine, 64 KB per session at 1,000 sessions),
 * and garbage that fills it counts until the next scavenge. This run measures
 * what the sessions hold.
 */
const liveRun = async (adapter: Adapter, count: number, turns: number) => {
  gc()
  const base = heap()
  let live = base
  let toolRuns = 0
  const every = Math.max(1, Math.floor((count * turns) / LIVE_SAMPLES))
  const sampleLive = () => {
    gc()
    live = Math.max(live, heap())
  }
  const kept = await sessions(adapter, count, turns, () => {
    if (++toolRuns % every === 0) sampleLive()
  })
  sampleLive()
  return { peakLiveBytes: live - base, sessions: verified(adapter, turns, kept).length }
}

const measureSessions = async (adapter: Adapter, phase: Phase, count: number, options: ChildOptions): Promise<ChildResult> => {
  gc()
  await warmup(adapter, options, count)
  const timed = await timedRun(adapter, count, options.turns)
  await flush(adapter)
  const memory = await memoryRun(adapter, count, options.turns)
  await flush(adapter)
  const live = await liveRun(adapter, count, options.turns)
  return {
    adapter: adapter.name,
    phase,
    cap: adapter.cap,
    ms: timed.ms,
    turns: count * options.turns,
    events: timed.events,
    peakBytes: memory.peakBytes,
    peakLiveBytes: live.peakLiveBytes,
    retainedBytes: memory.retainedBytes,
    maxInFlight: 0
  }
}

const measureBatch = async (adapter: Adapter, spec: BatchSpec): Promise<ChildResult> => {
  verifyBatch(adapter.name, spec, await adapter.batch(spec))
  gc()
  const start = performance.now()
  const outcome = await adapter.batch(spec)
  const ms = performance.now() - start
  verifyBatch(adapter.name, spec, outcome)
  return {
    adapter: adapter.name,
    phase: "batch",
    cap: adapter.cap,
    ms,
    turns: 1,
    events: 0,
    peakBytes: 0,
    peakLiveBytes: 0,
    retainedBytes: 0,
    maxInFlight: outcome.maxInFlight
  }
}

/**
 * Sessions one after another, each of T turns, as a server that starts many
 * sessions on one long-lived process does: what a session costs to set up
 * (layers, config, registry, the run's own state) shows next to its turns.
 */
const measureSetup = async (adapter: Adapter, options: ChildOptions): Promise<ChildResult> => {
  const sequential = async (count: number) => {
    let events = 0
    for (let s = 0; s < count; s++) {
      const outcome = await adapter.session(options.turns)
      verifySession(adapter.name, options.turns, outcome)
      events += outcome.events
    }
    return events
  }
  const until = performance.now() + options.warmupMs
  let done = 0
  while (done < options.warmupTurns || performance.now() < until) {
    await sequential(100)
    done += 100 * options.turns
  }
  const start = performance.now()
  const events = await sequential(options.sessions)
  const ms = performance.now() - start
  return {
    adapter: adapter.name,
    phase: "setup",
    cap: adapter.cap,
    ms,
    turns: options.sessions * options.turns,
    events,
    peakBytes: 0,
    peakLiveBytes: 0,
    retainedBytes: 0,
    maxInFlight: 0
  }
}

const main = async (): Promise<void> => {
  const [name, phase, json] = process.argv.slice(2)
  if (!isAdapterId(name) || json === undefined) throw new Error(`usage: child.ts <${ADAPTERS.join("|")}> <phase> <options>`)
  const options: ChildOptions = JSON.parse(json)
  const adapter = await adapters[name]()
  const result = phase === "single"
    ? await measureSessions(adapter, "single", 1, options)
    : phase === "concurrent"
    ? await measureSessions(adapter, "concurrent", options.sessions, options)
    : phase === "batch"
    ? await measureBatch(adapter, options.batch)
    : phase === "setup"
    ? await measureSetup(adapter, options)
    : undefined
  if (result === undefined) throw new Error(`unknown phase ${phase}`)
  process.stdout.write(JSON.stringify(result) + "\n")
}

await main()
