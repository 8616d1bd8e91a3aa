/**
 * The control protocol on a supervised run of the built command (issue 29,
 * item 10): a `cancel` line ends it at once whatever it is doing (the
 * worker's model call, a check, an external CLI's turn), with exit 30 as for
 * a plain run; `steer` and `follow_up` reach our own loop's worker turn, and
 * are refused with a note when the worker is an external CLI, which cannot
 * take them.
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Clock, Effect, FileSystem, Schedule } from "effect"
import { type AgentEvent, Message } from "effect-agent"
import { SupervisorEvent, SupervisorOutcome } from "effect-agent/supervisor"
import { builtCommand } from "./build.ts"
import { startCommand } from "./inProcess.ts"
import { events, isEvent, live, scripted, scriptedArgs, spawn, tempDir } from "./support.ts"

let cli = ""
beforeAll(async () => {
  cli = await builtCommand()
}, 240_000)

const outcomeOf = (trajectory: ReadonlyArray<AgentEvent.AgentEvent>) => {
  const end = trajectory.at(-1)
  return end?._tag === "AgentEnd" && end.outcome !== undefined ? SupervisorOutcome.fromOutcome(end.outcome) : undefined
}

/** A cancel must end the run at once: well before the 120 s that what it interrupts would take. */
const promptly = 30_000

/** The pid a process wrote to `file` once it started (waited for, up to 30 seconds). */
const pidIn = (file: string) =>
  Effect.flatMap(Effect.service(FileSystem.FileSystem), (fs) =>
    fs.readFileString(file).pipe(
      Effect.map((text) => Number.parseInt(text, 10)),
      Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 1500 }),
      Effect.timeout("30 seconds")
    ))

/** Whether a process is still there. */
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe.concurrent("effect-agent run supervised: cancel, steer and follow_up on stdin", () => {
  live("attack: a cancel line while the worker's model call runs ends the supervised run at once: Cancelled, exit 30", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "Thinking very hard...", hang: true }])
      const proc = yield* startCommand(scriptedArgs(dir, "--check", "true", "--emit-jsonl", "-"), { cwd: dir })
      yield* proc.waitFor((line) => line.includes(`"delta":"hard..."`))
      const sent = yield* Clock.currentTimeMillis
      yield* proc.send(`{"type":"cancel","reason":"taking too long"}`)
      const out = yield* proc.exit
      assert.strictEqual(out.code, 30, out.stderr)
      assert.isBelow((yield* Clock.currentTimeMillis) - sent, promptly)
      assert.deepStrictEqual(outcomeOf(yield* events(out.stdout)), { _tag: "Cancelled", reason: "taking too long" })
      assert.include(out.stderr, "■ Cancelled: taking too long")
    }))

  live("attack: a cancel line while a check runs ends the supervised run at once, the check stopped: exit 30", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "never asked" }])
      const check = "echo $$ > check.pid; exec sleep 120"
      const proc = yield* startCommand(scriptedArgs(dir, "--check", check, "--emit-jsonl", "-"), { cwd: dir })
      yield* proc.waitFor(isEvent("CheckStarted"))
      const pid = yield* pidIn(`${dir}/check.pid`)
      const sent = yield* Clock.currentTimeMillis
      yield* proc.send(`{"type":"cancel","reason":"enough"}`)
      const out = yield* proc.exit
      assert.strictEqual(out.code, 30, out.stderr)
      assert.isBelow((yield* Clock.currentTimeMillis) - sent, promptly)
      const trajectory = yield* events(out.stdout)
      assert.deepStrictEqual(outcomeOf(trajectory), { _tag: "Cancelled", reason: "enough" })
      // the baseline never finished, no worker turn started, and the check's process is gone
      assert.deepStrictEqual(trajectory.filter((e) => SupervisorEvent.tagOf(e) === "CheckResult" || SupervisorEvent.tagOf(e) === "WorkerTurnStart"), [])
      assert.isFalse(alive(pid), `the check (pid ${pid}) still runs`)
    }))

  live("attack: steer and follow_up on stdin reach our loop's worker turn: delivered, and the turn goes on with them", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([
        { toolCalls: [{ id: "w1", name: "write_file", params: { path: "notes.txt", content: "notes\n" } }] },
        { text: "Wrote the notes." },
        { text: "Added the summary too." }
      ])
      const proc = yield* startCommand(
        scriptedArgs(dir, "--approve", "ask", "--check", "test -f notes.txt", "--emit-jsonl", "-"),
        { cwd: dir }
      )
      // The worker's call waits for approval: the lines below are all read before it goes on.
      yield* proc.waitFor(isEvent("ApprovalRequested"))
      yield* proc.send(`{"type":"steer","text":"Use metric units."}`)
      yield* proc.send(`{"type":"follow_up","text":"Now add a summary."}`)
      yield* proc.send(`{"type":"approve"}`)
      const out = yield* proc.exit
      assert.strictEqual(out.code, 0, out.stderr)
      const trajectory = yield* events(out.stdout)
      const steered = trajectory.find((e) => e._tag === "SteeringDelivered")
      assert.deepStrictEqual(steered?._tag === "SteeringDelivered" && steered.messages, [Message.user("Use metric units.")])
      const followed = trajectory.find((e) => e._tag === "FollowUpDelivered")
      assert.deepStrictEqual(followed?._tag === "FollowUpDelivered" && followed.messages, [Message.user("Now add a summary.")])
      // within the one worker turn, which ends with the follow-up's answer
      const ends = SupervisorEvent.ofTag(trajectory, "WorkerTurnEnd")
      assert.deepStrictEqual(ends.map((e) => [e.turn, e.text]), [[1, "Added the summary too."]])
      assert.deepStrictEqual(outcomeOf(trajectory), { _tag: "Converged", turns: 1 })
      assert.notInclude(out.stderr, "ignored")
    }))

  live("attack: --worker claude: steer and follow_up are refused with a note; cancel stops the CLI's turn at once, exit 30", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* scripted([])
      // A stand-in for the CLI that works for two minutes.
      const bin = yield* tempDir
      yield* fs.writeFileString(`${bin}/claude`, `#!/bin/sh\necho $$ > ${bin}/claude.pid\nexec sleep 120\n`)
      yield* fs.chmod(`${bin}/claude`, 0o755)
      const proc = yield* spawn(
        cli,
        scriptedArgs(dir, "--check", "true", "--worker", "claude", "--emit-jsonl", "-"),
        { cwd: dir, env: { PATH: `${bin}:${process.env.PATH}` } }
      )
      yield* proc.waitFor(isEvent("WorkerTurnStart"))
      const pid = yield* pidIn(`${bin}/claude.pid`)
      yield* proc.send(`{"type":"steer","text":"Use metric units."}`)
      yield* proc.send(`{"type":"follow_up","text":"Now add a summary."}`)
      const sent = yield* Clock.currentTimeMillis
      yield* proc.send(`{"type":"cancel","reason":"enough"}`)
      const out = yield* proc.exit
      assert.strictEqual(out.code, 30, out.stderr)
      assert.isBelow((yield* Clock.currentTimeMillis) - sent, promptly)
      assert.include(
        out.stderr,
        "stdin line 1: steer: the claude worker (a CLI run) takes no steering or follow-ups, only cancel; ignored"
      )
      assert.include(
        out.stderr,
        "stdin line 2: follow_up: the claude worker (a CLI run) takes no steering or follow-ups, only cancel; ignored"
      )
      const trajectory = yield* events(out.stdout)
      assert.deepStrictEqual(outcomeOf(trajectory), { _tag: "Cancelled", reason: "enough" })
      assert.deepStrictEqual(trajectory.filter((e) => SupervisorEvent.tagOf(e) === "WorkerTurnEnd"), [])
      assert.isFalse(alive(pid), `the CLI (pid ${pid}) still runs`)
    }))
})
