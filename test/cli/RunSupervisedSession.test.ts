/**
 * Supervised sessions of `effect-agent run`, with real processes: a
 * supervised run (plan, then three act turns checked in between) killed with
 * SIGKILL at random moments and resumed with `--resume` each time goes on in
 * the phase it was in, redoes at most the turn it was in (and of it, at most
 * the model call that was cut short), and ends
 * `Converged` with each model call in its transcript once. The seed of the
 * kills' delays is in every assertion's message; `SUPERVISED_KILL_SEED`
 * replays one, and `SUPERVISED_KILLS` sets how many kills a run gets
 * (default 3, at most 10).
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem, Schema } from "effect"
import { AgentEvent } from "effect-agent"
import { SupervisorEvent, SupervisorOutcome } from "effect-agent/supervisor"
import { builtCommand } from "./build.ts"
import { isEvent, live, scripted, scriptedArgs, spawn, tempDir } from "./support.ts"

let cli = ""
beforeAll(async () => {
  cli = await builtCommand()
}, 240_000)

/** A small deterministic generator (mulberry32), so that a failing seed can be replayed. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const decode = Schema.decodeUnknownSync(AgentEvent.AgentEventJson)

/** The events of a process's stdout; a line cut by the kill (the last one) is left out. */
const eventsOf = (stdout: string): Array<AgentEvent.AgentEvent> =>
  stdout.split("\n").filter((line) => line !== "").flatMap((line) => {
    try {
      return [decode(JSON.parse(line))]
    } catch {
      return []
    }
  })

const write = (path: string) => ({ toolCalls: [{ name: "write_file", params: { path, content: "x" } }], delay: 120 })

// The check passes before the task (no step1), fails once step1 is written, and passes once step3 is.
const check = "test ! -e step1.txt || test -e step3.txt"
const script = [
  { text: "Plan: write step1, step2, step3.", delay: 400 },
  write("step1.txt"),
  { text: "wrote step1", delay: 120 },
  write("step2.txt"),
  { text: "wrote step2", delay: 120 },
  write("step3.txt"),
  { text: "wrote step3", delay: 120 }
]

interface Saved {
  readonly phase: "plan" | "act"
  readonly turns: number
}

describe("supervised sessions", () => {
  live("killed with SIGKILL at random moments and resumed each time: the same phase, one turn redone at most, Converged", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const seed = Number(process.env.SUPERVISED_KILL_SEED ?? Date.now() % 1_000_000)
      const kills = Math.min(10, Math.max(0, Number(process.env.SUPERVISED_KILLS ?? 3)))
      const next = random(seed)
      const note = `seed ${seed}`
      const dir = yield* scripted(script)
      const session = `${yield* tempDir}/session`
      const head = `${session}/checkpoint/head.json`
      const readSaved = Effect.map(fs.readFileString(head), (text): Saved => {
        const json = JSON.parse(text)
        const supervisor = json.state.pluginState["effect-agent/supervisor"]
        return { phase: supervisor.phase, turns: supervisor.turns }
      })
      const first = ["--approve", "all", "--plan", "--check", check, "--emit-jsonl", "-"]
      const all: Array<AgentEvent.AgentEvent> = []
      let killed = 0
      let redone = 0
      let last: { code: number; stdout: string; stderr: string } | undefined
      for (let attempt = 0; attempt <= kills; attempt++) {
        const args = attempt === 0
          ? scriptedArgs(dir, ...first, "--session-dir", session)
          : ["run", "--resume", session, "--sandbox", "local", "--approve", "all", "--emit-jsonl", "-"]
        const before = attempt === 0 ? undefined : yield* readSaved
        const proc = yield* spawn(cli, args, { cwd: dir })
        // The first process has saved its first checkpoint when the baseline starts; a resumed one had one, and
        // says so before it is killed (a kill right after its AgentStart left its SessionResumed unwritten, seed
        // 500946, and the check below had nothing to check).
        yield* proc.waitFor(attempt === 0 ? isEvent("CheckStarted") : isEvent("SessionResumed"))
        if (attempt < kills) {
          yield* Effect.sleep(Math.floor(next() * 900))
          yield* proc.signal("SIGKILL")
        }
        const exited = yield* proc.exit
        const events = eventsOf(exited.stdout)
        all.push(...events)
        if (before !== undefined) {
          // The resumed run says where it resumes, and goes on in the phase its checkpoint was in.
          assert.deepStrictEqual(events.slice(0, 2).map((e) => e._tag), ["AgentStart", "SessionResumed"], note)
          const start = SupervisorEvent.ofTag(events, "WorkerTurnStart")[0]
          if (start !== undefined) {
            assert.strictEqual(start.phase, before.phase, note)
            if (before.phase === "act") assert.strictEqual(start.turn, before.turns + 1, note)
          }
        }
        if (exited.code === 137 || exited.code === -9 || (attempt < kills && exited.code !== 0)) {
          assert.notStrictEqual(exited.code, 0, note)
          killed++
          // What the killed process had started and not saved is all that is redone: at most its one turn.
          const ended = events.filter((e) => SupervisorEvent.tagOf(e) === "WorkerTurnEnd").length
          const started = events.filter((e) => SupervisorEvent.tagOf(e) === "WorkerTurnStart").length
          redone += started > ended ? 1 : 0
          assert.isAtMost(started - ended, 1, note)
          continue
        }
        last = exited
        break
      }
      assert.isDefined(last, `${note}: no process ran to its end`)
      assert.strictEqual(last!.code, 0, `${note}: ${last!.stderr}`)
      const end = all.at(-1)
      assert.deepStrictEqual(end?._tag === "AgentEnd" && end.outcome && SupervisorOutcome.fromOutcome(end.outcome), { _tag: "Converged", turns: 3 }, note)

      // Across every process: each act turn ended once in the run that saved it; no more turns than kills redone.
      const ends = SupervisorEvent.ofTag(all, "WorkerTurnEnd")
      const actEnds = ends.filter((e) => e.phase === "act").map((e) => e.turn)
      assert.deepStrictEqual([...new Set(actEnds)], [1, 2, 3], note)
      assert.isAtMost(ends.length, 4 + killed, note)
      assert.isAtMost(redone, killed, note)
      // saved in the middle of a turn too: a kill costs at most the model call it cut short
      const modelCalls = all.filter((e) => e._tag === "TurnStart").length
      assert.isAtMost(modelCalls, script.length + killed, note)

      // The final checkpoint's transcript has each model call once: the plan, then two calls per act turn.
      const saved = JSON.parse(yield* fs.readFileString(head))
      assert.strictEqual(saved.journal.entries, 3 + 3 * 3 + 2, note)
      const journal = (yield* fs.readFileString(`${session}/checkpoint/journal-${saved.journal.generation}.ndjson`))
        .split("\n").filter((line) => line !== "").slice(0, saved.journal.entries).map((line) => JSON.parse(line))
      const replies = journal.filter((m) => m.role === "assistant").map((m) =>
        m.content.map((p: { type: string; text?: string; name?: string; params?: { path?: string } }) =>
          p.type === "text" ? p.text : `${p.name}:${p.params?.path}`
        ).join("")
      )
      assert.deepStrictEqual(replies, [
        "Plan: write step1, step2, step3.",
        "write_file:step1.txt",
        "wrote step1",
        "write_file:step2.txt",
        "wrote step2",
        "write_file:step3.txt",
        "wrote step3"
      ], note)
      assert.strictEqual(saved.state.pluginState["effect-agent/supervisor"].outcome._tag, "Converged", note)
      // every kill was a real one (the default run has a few)
      assert.isAtLeast(killed, Math.min(kills, 1), note)
    }))
})

describe("supervised sessions with --approve-turns", () => {
  live("attack: SIGINT while the turn gate waits, then --resume: the gate is asked again before the worker gets the feedback", () =>
    Effect.gen(function*() {
      // The check passes before the task, fails once step1 is written, and passes once step2 is.
      const gated = [
        write("step1.txt"),
        { text: "wrote step1" },
        write("step2.txt"),
        { text: "wrote step2" }
      ]
      const dir = yield* scripted(gated)
      const session = `${yield* tempDir}/session`
      const flags = ["--approve", "all", "--approve-turns", "--check", "test ! -e step1.txt || test -e step2.txt"]
      const first = yield* spawn(cli, scriptedArgs(dir, ...flags, "--session-dir", session, "--emit-jsonl", "-"), {
        cwd: dir
      })
      const requested = decode(JSON.parse(yield* first.waitFor(isEvent("TurnApprovalRequested"))))
      const feedback = SupervisorEvent.ofTag([requested], "TurnApprovalRequested")[0]?.feedback ?? ""
      assert.include(feedback, "The checks after turn 1 did not pass")
      yield* first.signal("SIGINT")
      const stopped = yield* first.exit
      assert.strictEqual(stopped.code, 31, stopped.stderr)

      // Resumed (the gate is the session's: --approve-turns need not be given again): the gate asks first.
      const resumed = yield* spawn(
        cli,
        ["run", "--resume", session, "--sandbox", "local", "--approve", "all", "--emit-jsonl", "-"],
        { cwd: dir }
      )
      const firstAsk = yield* resumed.waitFor((line) => isEvent("TurnApprovalRequested")(line) || isEvent("WorkerTurnStart")(line))
      assert.isTrue(isEvent("TurnApprovalRequested")(firstAsk), `the worker got the feedback unapproved: ${firstAsk}`)
      const asked = decode(JSON.parse(firstAsk))
      assert.strictEqual(SupervisorEvent.ofTag([asked], "TurnApprovalRequested")[0]?.feedback, feedback)
      yield* resumed.send(`{"type":"replace_feedback","text":"Write step2.txt now."}`)
      const out = yield* resumed.exit
      assert.strictEqual(out.code, 0, out.stderr)
      const events = eventsOf(out.stdout)
      const starts = SupervisorEvent.ofTag(events, "WorkerTurnStart")
      assert.deepStrictEqual(starts.map((e) => [e.turn, e.message]), [[2, "Write step2.txt now."]])
      const end = events.at(-1)
      assert.deepStrictEqual(end?._tag === "AgentEnd" && end.outcome && SupervisorOutcome.fromOutcome(end.outcome), { _tag: "Converged", turns: 2 })
    }))
})
