/**
 * The agent server under load: N sessions at once (200 by default) on a
 * scripted model, each started over HTTP and followed by its own SSE client
 * to its end. Checks that every session finishes and that no client lost or
 * got twice an event (ids 0, 1, 2, … to `AgentEnd`, the same as a replay of
 * the whole log afterwards), and reports throughput and the server's memory
 * per session.
 *
 * The server runs in a child process (this file with `--serve`), so its
 * memory is its own: the bench asks it for `process.memoryUsage()` after a
 * full GC, idle, with every session running (mid-turn: the model is slow),
 * and after they have all ended.
 *
 * Run it: `node --conditions=effect-agent-source bench/server.ts [--sessions 200] [--turns 6]
 * [--delay 1000] [--memory]` (`--memory`: sessions in memory instead of a directory, with fsynced checkpoints).
 * Two phases: "held" (each model call takes `--delay` ms, so all sessions are alive at once: memory at peak)
 * and "flat out" (no delay: throughput).
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Effect, Layer, Redacted, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { HttpServer } from "effect/http"
import type { Prompt } from "effect/ai"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import { createServer } from "node:http"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { fileURLToPath } from "node:url"
import { ToolRegistry } from "../src/index.ts"
import { AgentServer } from "../src/server/index.ts"
import { ScriptedModel } from "../src/testing/index.ts"

const args = process.argv.slice(2)
const option = (name: string, fallback: number) => {
  const at = args.indexOf(`--${name}`)
  return at === -1 ? fallback : Number(args[at + 1])
}

// -----------------------------------------------------------------------------
// The server (child process)
// -----------------------------------------------------------------------------

const Step = Tool.make("step", { parameters: Schema.Struct({ n: Schema.Finite }), success: Schema.String })
const Kit = Toolkit.make(Step)
const tools = ToolRegistry.layer(Kit).pipe(
  Layer.provide(Kit.toLayer({ step: ({ n }) => Effect.succeed(`step ${n} checked`) }))
)

/** The task says how many turns and how slow: `T D` (T tool turns, then an answer; each model call D ms). */
const taskOf = (prompt: Prompt.Prompt) => {
  const first = prompt.content.find((message) => message.role === "user")
  const text = first === undefined ? "" : first.content.map((part) => (part.type === "text" ? part.text : "")).join("")
  const [turns, delay] = text.split(" ").map(Number)
  return { turns: turns ?? 1, delay: delay ?? 0 }
}

/** 20 text deltas and one tool call a turn, as the loop benchmark streams. */
const script: ScriptedModel.Script = (_index, request) => {
  const { turns, delay } = taskOf(request.prompt)
  const replies = request.prompt.content.filter((message) => message.role === "assistant").length
  const text = Array.from({ length: 20 }, (_, i) => `word${i} `)
  const usage = { input: 100 + 40 * replies, output: 20, cost: 0.0001 }
  const timing = delay > 0 ? { delay } : {}
  return replies < turns
    ? { text, toolCalls: [{ name: "step", params: { n: replies + 1 } }], usage, ...timing }
    : { text: "All steps checked.", usage, ...timing }
}

/** The token the server requires, made by the clients' process and given to the server's in its environment. */
const tokenVariable = "EFFECT_AGENT_BENCH_TOKEN"

const serve = (directory: string | undefined) => {
  // Every session runs at once, each with its client: the server's bounds on both (32 runs, 256 streams by default)
  // are raised out of the way of what is measured.
  const server = AgentServer.layer({
    directory,
    token: Redacted.make(process.env[tokenVariable] ?? ""),
    maxRunning: 100_000,
    maxStreams: 100_000
  }).pipe(
    Layer.provide(Layer.merge(ScriptedModel.layer(script, { record: false }), tools)),
    Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" }))
  )
  const main = Effect.gen(function*() {
    const url = yield* HttpServer.addressFormattedWith(Effect.succeed)
    process.stdout.write(JSON.stringify({ url }) + "\n")
    // "memory" on stdin: a full GC, then the heap and RSS
    Readline.createInterface({ input: process.stdin }).on("line", () => {
      globalThis.gc?.()
      globalThis.gc?.()
      const { heapUsed, rss } = process.memoryUsage()
      process.stdout.write(JSON.stringify({ heapUsed, rss }) + "\n")
    })
    return yield* Effect.never
  })
  NodeRuntime.runMain(Effect.provide(main, Layer.orDie(Layer.merge(server, NodeServices.layer))))
}

// -----------------------------------------------------------------------------
// The clients (this process)
// -----------------------------------------------------------------------------

interface Memory {
  readonly heapUsed: number
  readonly rss: number
}

const token = Redacted.value(AgentServer.randomToken())
const authorized = { authorization: `Bearer ${token}` }

const startServer = (directory: string | undefined) => {
  const self = fileURLToPath(import.meta.url)
  const where = directory === undefined ? [] : [directory]
  const child = spawn(
    process.execPath,
    ["--expose-gc", "--conditions=effect-agent-source", self, "--serve", ...where],
    { stdio: ["pipe", "pipe", "inherit"], env: { ...process.env, [tokenVariable]: token } }
  )
  const lines = Readline.createInterface({ input: child.stdout! })
  const waiting: Array<(line: string) => void> = []
  lines.on("line", (line) => waiting.shift()?.(line))
  const next = () => new Promise<string>((resolve) => waiting.push(resolve))
  return {
    url: next().then((line) => JSON.parse(line).url as string),
    memory: (): Promise<Memory> => {
      const answer = next()
      child.stdin!.write("memory\n")
      return answer.then((line) => JSON.parse(line))
    },
    stop: () => new Promise<void>((resolve) => (child.on("exit", () => resolve()), child.kill("SIGTERM")))
  }
}

/** Reads a session's SSE stream to its end: the ids and the last event's tag and outcome. */
const follow = async (url: string, id: string) => {
  const response = await fetch(`${url}/sessions/${id}/events`, { headers: authorized })
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  const ids: Array<number> = []
  let buffer = ""
  let last = ""
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    buffer += decoder.decode(value, { stream: true })
    let end: number
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const idLine = frame.match(/^id: (\d+)$/m)
      const data = frame.match(/^data: (.*)$/m)
      if (idLine !== null && data !== null) {
        ids.push(Number(idLine[1]))
        last = data[1]!
      }
    }
  }
  const event = JSON.parse(last)
  return { ids, tag: event._tag as string, outcome: event.outcome?._tag as string | undefined }
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`
const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`

const phase = async (
  url: string,
  name: string,
  sessions: number,
  turns: number,
  delay: number,
  memory: () => Promise<Memory>
) => {
  const idle = await memory()
  const started = performance.now()
  const created: Array<Promise<void>> = []
  const runs = Array.from({ length: sessions }, async (_, i) => {
    const id = `${name}-${i}`
    const start = fetch(`${url}/sessions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...authorized },
      body: JSON.stringify({ task: `${turns} ${delay}`, id, config: { maxTurns: turns + 5 } })
    }).then(async (response) => {
      if (response.status !== 201) throw new Error(`${id}: ${response.status} ${await response.text()}`)
    })
    created.push(start)
    await start
    return { id, ...(await follow(url, id)) }
  })
  // With slow model calls, every session is running once all are created: the memory at peak.
  let peak: Memory | undefined
  let running = 0
  if (delay > 0) {
    await Promise.all(created)
    peak = await memory()
    const listed: unknown = await fetch(`${url}/sessions`, { headers: authorized }).then((response) => response.json())
    if (!Array.isArray(listed)) throw new Error(`GET /sessions: not a list: ${JSON.stringify(listed)}`)
    running = listed.filter((session: unknown) =>
      typeof session === "object" && session !== null && "status" in session && session.status === "running"
    ).length
  }
  const results = await Promise.all(runs)
  const seconds = (performance.now() - started) / 1000
  const after = await memory()

  let lost = 0
  let unfinished = 0
  let events = 0
  for (const result of results) {
    events += result.ids.length
    if (result.tag !== "AgentEnd" || result.outcome !== "Completed") unfinished++
    if (result.ids.some((id, i) => id !== i)) lost++
  }
  // A replay of each whole log afterwards holds exactly what the live client got.
  const sample = results.filter((_, i) => i % 10 === 0)
  for (const result of sample) {
    const replay = await follow(url, result.id)
    if (replay.ids.length !== result.ids.length) lost++
  }
  const turnsDone = sessions * (turns + 1)
  console.log(
    `\n${name}: ${sessions} sessions × ${turns + 1} turns (model calls ${delay} ms), each with an SSE client`
  )
  console.log(`  finished: ${sessions - unfinished} of ${sessions}; clients that lost or repeated an event: ${lost}`)
  console.log(
    `  ${seconds.toFixed(2)} s: ${(sessions / seconds).toFixed(0)} sessions/s, ` +
      `${(turnsDone / seconds).toFixed(0)} turns/s, ` +
      `${(events / seconds).toFixed(0)} events/s delivered (${events} events)`
  )
  if (peak !== undefined) {
    console.log(
      `  server heap: idle ${mb(idle.heapUsed)}; ${running} of ${sessions} running: ${mb(peak.heapUsed)} ` +
        `(${kb((peak.heapUsed - idle.heapUsed) / sessions)} per session); ` +
        `all ended: ${mb(after.heapUsed)} (${kb((after.heapUsed - idle.heapUsed) / sessions)} per session kept); ` +
        `RSS while running ${mb(peak.rss)}`
    )
  } else {
    console.log(`  server heap: before ${mb(idle.heapUsed)}, after ${mb(after.heapUsed)}; RSS after ${mb(after.rss)}`)
  }
  return { unfinished, lost }
}

const bench = async () => {
  const sessions = option("sessions", 200)
  const turns = option("turns", 6)
  const delay = option("delay", 1000)
  const inMemory = args.includes("--memory")
  const directory = inMemory ? undefined : Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-server-bench-"))
  const server = startServer(directory)
  const url = await server.url
  console.log(`server ${url}, sessions ${inMemory ? "in memory" : `in ${directory} (checkpoints fsynced)`}; ` +
    `node ${process.version}, ${Os.cpus().length} cores`)
  try {
    const held = await phase(url, "held", sessions, turns, delay, server.memory)
    const flat = await phase(url, "flat", sessions, turns, 0, server.memory)
    if (held.unfinished + held.lost + flat.unfinished + flat.lost > 0) process.exitCode = 1
  } finally {
    await server.stop()
    if (directory !== undefined) Fs.rmSync(directory, { recursive: true, force: true })
  }
}

if (args[0] === "--serve") serve(args[1])
else await bench()
