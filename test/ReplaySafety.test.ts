/**
 * A tool call that is not ReplaySafe never runs twice across a crash, checked
 * with real processes killed at random moments: a child process
 * (test/replay-safety-child.ts) runs a durable session of such calls, with
 * `afterToolCall` hooks that wait, and is killed with SIGKILL at a random
 * checkpoint or a random time; the next process resumes it and may be killed
 * too, and the last one runs it to the end. Every call's side effect (a line
 * in a file) must have happened at most once, and the session must end with a
 * valid transcript.
 *
 * Sessions run two at a time. The default run kills 4 times (two sessions,
 * killed up to twice each, at moments new on every run);
 * `EFFECT_AGENT_REPLAY_KILLS=200` runs a longer variant (sessions killed up
 * to 5 times each); `EFFECT_AGENT_REPLAY_SEED=n` replays a run's seeds.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Option, Path, Stream } from "effect"
import { Message } from "effect-agent"
import { CheckpointStore } from "effect-agent/session"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { fileURLToPath } from "node:url"
import { assertValidTranscript } from "./support.ts"
import { childScript } from "./children.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const kills = Number(process.env.EFFECT_AGENT_REPLAY_KILLS ?? 4)
/** How many times one session is killed at most: two sessions share the default run's kills. */
const KILLS_PER_TRIAL = Math.max(1, Math.min(5, Math.ceil(kills / 2)))
const baseSeed = Number(process.env.EFFECT_AGENT_REPLAY_SEED ?? Date.now() % 1_000_000)

/** The child script, bundled (see test/children.ts): set before the first test. */
let script = ""
beforeAll(async () => {
  script = await childScript("test/replay-safety-child.ts")
})

const child = (mode: "run" | "resume", dir: string, seed: number) =>
  ChildProcess.make(
    process.execPath,
    [script, mode, dir, String(seed)],
    { cwd: root, forceKillAfter: "2 seconds" }
  )

const lines = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.splitLines)

interface Trial {
  readonly seed: number
  readonly kills: number
  readonly effects: ReadonlyArray<string>
  readonly outcomeUnknown: number
}

/** mulberry32, for kill moments a seed reproduces. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const finishedBefore = (line: string) => line.includes("InvalidContinuation")

/**
 * Runs the session in a process and SIGKILLs it at its `killAt`-th
 * checkpoint, or `delayMs` after its first; `undefined` lets it finish.
 * Returns whether it finished by itself.
 */
const runProcess = (
  mode: "run" | "resume",
  dir: string,
  seed: number,
  kill: { readonly killAt: number } | { readonly delayMs: number } | undefined
) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const process = yield* spawner.spawn(child(mode, dir, seed))
    if (kill === undefined) {
      const [out, err, code] = yield* Effect.all(
        [Stream.runCollect(lines(process.stdout)), Stream.mkString(Stream.decodeText(process.stderr)), process.exitCode],
        { concurrency: 3 }
      )
      // a process killed after the session's last checkpoint, before it printed its result: nothing to resume
      if (code !== 0 && out.some(finishedBefore)) return true
      assert.strictEqual(code, 0, `seed ${seed}: ${out.join("\n")}\n${err}`)
      assert.deepStrictEqual(JSON.parse(out.at(-1)!), { outcome: "Completed" }, `seed ${seed}`)
      return true
    }
    let checkpoints = 0
    const stop = "killAt" in kill
      ? (line: string) => line === "checkpoint" && ++checkpoints === kill.killAt
      : (line: string) => line === "checkpoint"
    const seen = yield* lines(process.stdout).pipe(
      Stream.takeUntil((line) => stop(line) || line.startsWith("{") || finishedBefore(line)),
      Stream.runCollect
    )
    if (seen.some(finishedBefore)) return true
    const printedEnd = seen.some((line) => line.startsWith("{"))
    if (!printedEnd && "delayMs" in kill) yield* Effect.sleep(`${kill.delayMs} millis`)
    // (it may have exited already)
    yield* Effect.ignore(process.kill({ killSignal: "SIGKILL" }))
    const code = yield* Effect.option(process.exitCode)
    return printedEnd && Option.isSome(code) && code.value === 0
  }).pipe(Effect.scoped)

/**
 * One trial: run the session, SIGKILL it at a random moment, resume it and
 * kill it again, up to `kills` times, then resume it to the end, and read
 * what happened.
 */
const trial = (seed: number, kills: number) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    const next = random(seed)
    let killed = 0
    let finished = false
    while (!finished && killed < kills) {
      // the first process saves a checkpoint when the session is created: kill it after that one at the earliest
      const kill = next() < 0.5
        ? { killAt: (killed === 0 ? 2 : 1) + Math.floor(next() * 8) }
        : { delayMs: Math.floor(next() * 150) }
      finished = yield* runProcess(killed === 0 ? "run" : "resume", dir, seed, kill)
      if (!finished) killed++
    }
    if (!finished) yield* runProcess("resume", dir, seed, undefined)

    const effectsFile = path.join(dir, "effects.log")
    const effects = (yield* fs.exists(effectsFile))
      ? (yield* fs.readFileString(effectsFile)).split("\n").filter((line) => line !== "")
      : []
    const { state } = yield* (yield* CheckpointStore.fileSystem(path.join(dir, "store"))).load("pay")
    assertValidTranscript(state.messages)
    assert.strictEqual(Message.textOf(state.messages.at(-1)!), "all paid", `seed ${seed}`)
    const results = state.messages.flatMap((m) => m.role === "toolResult" ? [m] : [])
    const outcomeUnknown = results.filter((r) => Message.textOf(r).includes("its outcome is unknown")).length
    // every call answered "paid" ran
    for (const result of results) {
      if (!result.isError) assert.include(effects, result.toolCallId, `seed ${seed}: ${result.toolCallId} answered but never ran`)
    }
    return { seed, kills: killed, effects, outcomeUnknown } satisfies Trial
  }).pipe(Effect.scoped, Effect.timeout("120 seconds"))

const doubles = (effects: ReadonlyArray<string>): ReadonlyArray<string> => {
  const seen = new Set<string>()
  return effects.filter((id) => seen.has(id) || (seen.add(id), false))
}

describe("a tool that is not ReplaySafe, across SIGKILLs at random moments", () => {
  it.live(`never runs a call twice (${kills} random kills, seeds from ${baseSeed})`, () =>
    Effect.gen(function*() {
      // sessions two at a time until they were killed `kills` times (a session may finish before its kills)
      const outcomes: Array<Trial> = []
      let killed = 0
      const maxSessions = 3 * Math.ceil(kills / KILLS_PER_TRIAL)
      while (killed < kills && outcomes.length < maxSessions) {
        const remaining = kills - killed
        const seeds = remaining > KILLS_PER_TRIAL ? [0, 1] : [0]
        const done = yield* Effect.forEach(
          seeds,
          (i) => trial(baseSeed + outcomes.length + i, Math.min(KILLS_PER_TRIAL, remaining - i * KILLS_PER_TRIAL)),
          { concurrency: 2 }
        )
        outcomes.push(...done)
        killed += done.reduce((n, o) => n + o.kills, 0)
      }
      const trials = outcomes.length
      const doubled = outcomes.flatMap((o) => doubles(o.effects).map((id) => `seed ${o.seed}: ${id}`))
      const unknown = outcomes.reduce((n, o) => n + o.outcomeUnknown, 0)
      const ran = outcomes.reduce((n, o) => n + o.effects.length, 0)
      // the figures, for a long run's report
      if (process.env.EFFECT_AGENT_REPLAY_KILLS !== undefined) {
        console.log(
          `replay safety: ${trials} sessions, ${killed} SIGKILLs mid-session, ${ran} side effects, ` +
            `${unknown} calls answered "outcome unknown", ${doubled.length} doubled side effects`
        )
      }
      assert.deepStrictEqual(doubled, [])
      assert.isAbove(killed, 0)
    }).pipe(Effect.provide(NodeServices.layer)), { timeout: Math.max(120_000, kills * 5_000) })
})
