/**
 * `--emit-jsonl`: every event written once, in order, whichever fiber emits
 * it (the calls of a parallel batch each emit their own), to a file (runs in
 * the test process, see inProcess.ts) or to stdout; and a stdout whose reader
 * is gone (`| head`) ends the writing quietly (the built command, in a real
 * pipe).
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem, Schedule } from "effect"
import type { AgentEvent } from "effect-agent"
import { spawn } from "node:child_process"
import { builtCommand } from "./build.ts"
import { runCommand } from "./inProcess.ts"
import { environment, events, live, readEvents, scripted, spawn as spawnCommand, tempDir } from "./support.ts"

let cli = ""
beforeAll(async () => {
  cli = await builtCommand()
}, 240_000)

type Call = { readonly id: string; readonly name: string; readonly params: Record<string, unknown> }

/** `run` on the scripted model of `dir`, in the local sandbox, every call approved. */
const runArgs = (dir: string, ...more: ReadonlyArray<string>) => [
  "run",
  "--provider",
  "scripted",
  "--script",
  `${dir}/script.json`,
  "--sandbox",
  "local",
  "--approve",
  "all",
  "--quiet",
  "--task",
  "Read them all.",
  ...more
]

/**
 * What a user of the events relies on: each call's start and end once, the
 * start first, the run between its `AgentStart` and `AgentEnd`, and the
 * events in the order they happened (their timestamps never go back).
 */
const assertWhole = (written: ReadonlyArray<AgentEvent.AgentEvent>, calls: ReadonlyArray<Call>, note: string) => {
  const ids = calls.map((call) => call.id).sort()
  const of = (tag: "ToolExecutionStart" | "ToolExecutionEnd") =>
    written.flatMap((event) => event._tag === tag ? [event.toolCallId] : [])
  assert.deepStrictEqual([...of("ToolExecutionStart")].sort(), ids, `${note}: the starts`)
  assert.deepStrictEqual([...of("ToolExecutionEnd")].sort(), ids, `${note}: the ends`)
  for (const id of ids) {
    const start = written.findIndex((event) => event._tag === "ToolExecutionStart" && event.toolCallId === id)
    const end = written.findIndex((event) => event._tag === "ToolExecutionEnd" && event.toolCallId === id)
    assert.isBelow(start, end, `${note}: ${id} ends after it starts`)
  }
  assert.strictEqual(written[0]?._tag, "AgentStart", note)
  assert.strictEqual(written.at(-1)?._tag, "AgentEnd", note)
  for (let i = 1; i < written.length; i++) {
    assert.isAtLeast(written[i]!.timestamp, written[i - 1]!.timestamp, `${note}: event ${i} is in order`)
  }
}

/** How many events of each tag. */
const tally = (written: ReadonlyArray<AgentEvent.AgentEvent>) => {
  const counts: Record<string, number> = {}
  for (const event of written) counts[event._tag] = (counts[event._tag] ?? 0) + 1
  return counts
}

/**
 * Runs `turns` with `--emit-jsonl FILE` (outside the workspace) and with
 * `--emit-jsonl -`; checks the file has every event, once and in order, and
 * as many of each kind as stdout had.
 */
const emitted = (turns: ReadonlyArray<unknown>, calls: ReadonlyArray<Call>, note: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const dir = yield* scripted(turns)
    for (let i = 1; i <= 8; i++) yield* fs.writeFileString(`${dir}/f${i}.txt`, `file ${i}\n`)
    const file = `${yield* tempDir}/events.jsonl`
    const toFile = yield* runCommand(runArgs(dir, "--emit-jsonl", file), { cwd: dir })
    assert.strictEqual(toFile.code, 0, toFile.stderr)
    const written = yield* readEvents(file)
    assertWhole(written, calls, `${note}, the file`)
    const toStdout = yield* runCommand(runArgs(dir, "--emit-jsonl", "-"), { cwd: dir })
    assert.strictEqual(toStdout.code, 0, toStdout.stderr)
    const printed = yield* events(toStdout.stdout)
    assertWhole(printed, calls, `${note}, stdout`)
    assert.deepStrictEqual(tally(written), tally(printed), note)
  })

/** mulberry32: a seeded generator, so that a failing script can be played again. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

describe.concurrent("--emit-jsonl", () => {
  live("M5: a turn of 8 parallel read_file calls: the file has every event of each call, once and in order", () =>
    Effect.gen(function*() {
      const calls = Array.from({ length: 8 }, (_, i): Call => ({
        id: `call_${i + 1}`,
        name: "read_file",
        params: { path: `f${i + 1}.txt` }
      }))
      // Three runs: the events lost before were a matter of timing.
      for (let run = 1; run <= 3; run++) {
        yield* emitted([{ toolCalls: calls }, { text: "done" }], calls, `run ${run}`)
      }
    }))

  live("M5: random batches of parallel calls (seeded, 4 scripts of 1 to 3 turns of 2 to 12 calls)", () =>
    Effect.gen(function*() {
      const seed = Number(process.env.EFFECT_AGENT_JSONL_SEED ?? Date.now() % 1_000_000)
      const next = random(seed)
      const between = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))
      for (let script = 0; script < 4; script++) {
        const calls: Array<Call> = []
        const turns: Array<unknown> = []
        for (let turn = 0, count = between(1, 3); turn < count; turn++) {
          const batch = Array.from({ length: between(2, 12) }, (_, i): Call => {
            const id = `s${script}t${turn}c${i}`
            const kind = between(0, 2)
            return kind === 0
              ? { id, name: "list_files", params: { path: "." } }
              : { id, name: "read_file", params: { path: kind === 1 ? `f${between(1, 8)}.txt` : "missing.txt" } }
          })
          calls.push(...batch)
          turns.push({ toolCalls: batch })
        }
        turns.push({ text: "done" })
        yield* emitted(turns, calls, `seed ${seed} (EFFECT_AGENT_JSONL_SEED), script ${script}`)
      }
    }))
})

interface Closed {
  readonly code: number | null
  readonly signal: string | null
  readonly read: number
  readonly stderr: string
}

/**
 * Runs the built command with `args` in `cwd`, its stdout a pipe that this
 * process reads `bytes` of and then closes (as `| head -c 3000` does).
 */
const readThenClose = (args: ReadonlyArray<string>, cwd: string, bytes: number) =>
  Effect.callback<Closed>((resume) => {
    const child = spawn(process.execPath, [cli, ...args], {
      cwd,
      env: environment({}),
      stdio: ["ignore", "pipe", "pipe"]
    })
    let read = 0
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => {
      read += chunk.length
      if (read >= bytes) child.stdout.destroy()
    })
    child.stderr.on("data", (chunk) => (stderr += chunk))
    const timer = setTimeout(() => child.kill("SIGKILL"), 50_000)
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      resume(Effect.succeed({ code, signal, read, stderr }))
    })
    return Effect.sync(() => child.kill("SIGKILL"))
  })

describe.concurrent("--emit-jsonl FILE when the run is stopped", () => {
  live("SIGINT while a tool runs: the file ends with the run's ending, written while it was open", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* scripted([
        { toolCalls: [{ id: "b1", name: "bash", params: { command: "touch started && sleep 30" } }] },
        { text: "never" }
      ])
      const file = `${yield* tempDir}/events.jsonl`
      const proc = yield* spawnCommand(cli, [...runArgs(dir, "--emit-jsonl", file)].filter((arg) => arg !== "--quiet"), {
        cwd: dir
      })
      // the call has started (bounded: 30 s)
      yield* fs.exists(`${dir}/started`).pipe(
        Effect.repeat({ until: (started) => started, schedule: Schedule.spaced("50 millis"), times: 600 })
      )
      yield* proc.signal("SIGINT")
      const stopped = yield* proc.exit
      assert.strictEqual(stopped.code, 30, stopped.stderr)
      // before, the run's last events came after the command had closed the file: "stopped writing", and no ending
      assert.notInclude(stopped.stderr, "stopped writing")
      const written = yield* readEvents(file)
      const end = written.at(-1)
      assert(end?._tag === "AgentEnd", `the file ends with ${end?._tag}`)
      assert.deepStrictEqual(end.outcome, { _tag: "Cancelled", reason: "interrupted" })
      assert.deepStrictEqual(written.filter((event) => event._tag === "ToolExecutionStart").length, 1)
    }))
})

describe.concurrent("--emit-jsonl - into a pipe closed early", () => {
  /**
   * Eight reads, then eight more a second later, twice, then a reply that
   * never comes: the run cannot end by itself, and it writes after the pipe
   * is closed.
   */
  const turns = () => {
    const reads = (turn: number) =>
      Array.from({ length: 8 }, (_, i) => ({ id: `t${turn}c${i}`, name: "read_file", params: { path: "a.txt" } }))
    return [{ toolCalls: reads(1) }, { toolCalls: reads(2), delay: 1000 }, { toolCalls: reads(3), delay: 1000 }, {
      hang: true
    }]
  }

  live("L5: | head -c 3000 ends the run quietly: no EPIPE stack trace, exit 30, stderr says stdout was closed", () =>
    Effect.gen(function*() {
      const dir = yield* scripted(turns())
      const closed = yield* readThenClose(runArgs(dir, "--emit-jsonl", "-"), dir, 3000)
      assert.deepStrictEqual([closed.code, closed.signal], [30, null], closed.stderr)
      assert.isAtLeast(closed.read, 3000)
      assert.strictEqual(closed.stderr, "effect-agent: stdout was closed\n")
    }))

  live("L5: with a session, the run stops as SIGTERM stops it: exit 31, the session saved to resume", () =>
    Effect.gen(function*() {
      const dir = yield* scripted(turns())
      const session = `${yield* tempDir}/session`
      const closed = yield* readThenClose(runArgs(dir, "--emit-jsonl", "-", "--session-dir", session), dir, 3000)
      assert.deepStrictEqual([closed.code, closed.signal], [31, null], closed.stderr)
      assert.match(closed.stderr, /^effect-agent: stdout was closed; the session is saved: resume it with effect-agent run --resume /)
      assert.notInclude(closed.stderr, "EPIPE")
    }))
})
