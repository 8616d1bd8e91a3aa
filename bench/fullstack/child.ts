/**
 * Runs one full-stack client through one phase in a fresh process and prints
 * one JSON line: the client CPU time (`process.cpuUsage`, user + system, all
 * of the process's threads) and the wall time of the timed sessions, after a
 * warm-up. Every session is checked: the tool ran T times and the final text
 * is exact.
 *
 * Usage: node child.ts <client> <json options>
 *
 * With `BENCH_CPU_PROF=<file>`, the timed run (only it) is profiled with the
 * inspector and the profile written there (`.cpuprofile`, for Chrome's
 * DevTools or any profile viewer).
 */
import { writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { performance } from "node:perf_hooks"
import type { Client, MakeClient } from "./clients/types.ts"
import { finalText } from "./wire.ts"

export const CLIENTS = ["bare", "pi", "ai", "openai", "effect-agent", "effect-agent-fetch"] as const
export type ClientId = (typeof CLIENTS)[number]

export interface ChildOptions {
  /** The server's root, `http://127.0.0.1:<port>`. */
  readonly server: string
  /** `fast` (a response in one write) or `spaced` (one event per write). */
  readonly mode: "fast" | "spaced"
  /** Tool turns per session. */
  readonly turns: number
  /** Sessions at once. */
  readonly sessions: number
  /** Least tool turns of warm-up (on the fast endpoint), and least wall time of it, ms. */
  readonly warmupTurns: number
  readonly warmupMs: number
}

export interface ChildResult {
  readonly client: string
  /** Client CPU time of the timed run, µs (user + system). */
  readonly cpuUs: number
  readonly userUs: number
  readonly systemUs: number
  readonly wallMs: number
  /** Tool turns in the timed run (sessions × T). */
  readonly turns: number
  readonly events: number
}

const clients: Record<ClientId, () => Promise<MakeClient>> = {
  bare: async () => (await import("./clients/bare.ts")).make,
  pi: async () => (await import("./clients/pi.ts")).make,
  ai: async () => (await import("./clients/ai.ts")).make,
  openai: async () => (await import("./clients/openai.ts")).make,
  "effect-agent": async () => (await import("./clients/effect-agent.ts")).undici,
  "effect-agent-fetch": async () => (await import("./clients/effect-agent.ts")).fetch
}

const isClientId = (name: string | undefined): name is ClientId => CLIENTS.some((c) => c === name)

const sessions = async (client: Client, count: number, turns: number): Promise<number> => {
  const all: Array<Promise<number>> = []
  for (let s = 0; s < count; s++) {
    all.push(client.session(turns).then((outcome) => {
      const problems: Array<string> = []
      if (outcome.toolRuns !== turns) problems.push(`the tool ran ${outcome.toolRuns} times, expected ${turns}`)
      if (outcome.text !== finalText(turns)) problems.push(`final text ${JSON.stringify(outcome.text)}`)
      if (problems.length > 0) throw new Error(`${client.name}: session of T=${turns} failed: ${problems.join("; ")}`)
      return outcome.events
    }))
  }
  return (await Promise.all(all)).reduce((a, b) => a + b, 0)
}

const main = async (): Promise<void> => {
  const [name, json] = process.argv.slice(2)
  if (!isClientId(name) || json === undefined) throw new Error(`usage: child.ts <${CLIENTS.join("|")}> <options>`)
  const options: ChildOptions = JSON.parse(json)
  const make = await clients[name]()
  const fast = await make(`${options.server}/fast/v1`)
  const until = performance.now() + options.warmupMs
  let done = 0
  while (done < options.warmupTurns || performance.now() < until) {
    const turns = Math.min(options.turns, 50)
    await sessions(fast, Math.min(options.sessions, 20), turns)
    done += Math.min(options.sessions, 20) * turns
  }
  await fast.close()
  const client = await make(`${options.server}/${options.mode}/v1`)
  await sessions(client, Math.min(options.sessions, 10), Math.min(options.turns, 10))
  const profile = process.env.BENCH_CPU_PROF
  const inspector = profile === undefined ? undefined : new Session()
  if (inspector !== undefined) {
    inspector.connect()
    await inspector.post("Profiler.enable")
    await inspector.post("Profiler.setSamplingInterval", { interval: Number(process.env.BENCH_CPU_PROF_INTERVAL ?? 500) })
    await inspector.post("Profiler.start")
  }
  const cpu = process.cpuUsage()
  const start = performance.now()
  const events = await sessions(client, options.sessions, options.turns)
  const wallMs = performance.now() - start
  const used = process.cpuUsage(cpu)
  if (inspector !== undefined && profile !== undefined) {
    const { profile: taken } = await inspector.post("Profiler.stop")
    writeFileSync(profile, JSON.stringify(taken))
    inspector.disconnect()
  }
  await client.close()
  const result: ChildResult = {
    client: client.name,
    cpuUs: used.user + used.system,
    userUs: used.user,
    systemUs: used.system,
    wallMs,
    turns: options.sessions * options.turns,
    events
  }
  process.stdout.write(JSON.stringify(result) + "\n")
  process.exit(0)
}

await main()
