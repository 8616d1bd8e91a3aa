/**
 * Sessions of `effect-agent run`, with real processes: SIGINT in the middle
 * of a tool call, then `--resume` to completion; resuming what cannot be
 * resumed; a finished session continued with a follow-up.
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import { type AgentEvent, Message } from "effect-agent"
import { builtCommand } from "./build.ts"
import { runCommand } from "./inProcess.ts"
import { isEvent, live, readEvents, run, scripted, scriptedArgs, spawn, tempDir } from "./support.ts"
import { crc32 } from "node:zlib"

let cli = ""
beforeAll(async () => {
  cli = await builtCommand()
}, 240_000)

const tagsOf = (events: ReadonlyArray<AgentEvent.AgentEvent>) => events.map((event) => event._tag)

/**
 * A run with a session (outside the workspace, the scripted run's directory, where the agent cannot write) in
 * the middle of a call to bash that is not safe to replay: its checkpoint is saved as the call starts. The
 * script's second turn, `after`, is what a resumed run answers.
 */
const midCall = (after: string) =>
  Effect.gen(function*() {
    const dir = yield* scripted([
      { text: "Running the slow job.", toolCalls: [{ id: "b1", name: "bash", params: { command: "sleep 30; echo done" } }] },
      { text: after }
    ])
    const session = `${yield* tempDir}/session`
    const proc = yield* spawn(
      cli,
      scriptedArgs(dir, "--approve", "all", "--session-dir", session, "--emit-jsonl", "-"),
      { cwd: dir }
    )
    yield* proc.waitFor((line, index, lines) =>
      isEvent("CheckpointSaved")(line) && lines.slice(0, index).some(isEvent("ToolExecutionStart"))
    )
    return { dir, session, proc }
  })

describe.concurrent("sessions", () => {
  live("SIGINT while a tool runs exits 31; --resume finishes the run without running the call again", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const { dir, proc: first, session } = yield* midCall("The job was interrupted; I did not run it again.")
      yield* first.signal("SIGINT")
      const stopped = yield* first.exit
      assert.strictEqual(stopped.code, 31, stopped.stderr)
      assert.include(
        stopped.stderr,
        `effect-agent: interrupted; the session is saved: resume it with effect-agent run --resume ${session} ` +
          "--sandbox local --approve all\n"
      )
      // the sleep was killed with the run, and the log shows the call cancelled, not vanished
      assert.isBelow(Date.now() - started, 20_000)
      assert.match(stopped.stderr, /✗ bash \d+ ms → cancelled: interrupted\n/)

      // the resumed run needs the directory, and what widens the agent's reach again (the rest is in run.json)
      const resumed = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--approve", "all", "--json"], {
        cwd: dir
      })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      // the resumed run's log names the session, not its id in the store
      assert.match(resumed.stderr, new RegExp(`↻ resumed ${session} at turn 1 \\(\\d+ messages restored\\)`))
      const result = JSON.parse(resumed.stdout)
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.strictEqual(result.answer, "The job was interrupted; I did not run it again.")
      assert.strictEqual(result.session, session)
      assert.strictEqual(result.turns, 2)

      const trajectory = yield* readEvents(`${session}/trajectory.ndjson`)
      const tags = tagsOf(trajectory)
      const resumedAt = tags.lastIndexOf("AgentStart")
      assert.strictEqual(tags.filter((tag) => tag === "AgentStart").length, 2)
      const interrupted = trajectory[resumedAt - 1]
      assert.deepStrictEqual(interrupted?._tag === "AgentEnd" && interrupted.outcome, { _tag: "Cancelled", reason: "interrupted" })
      assert.strictEqual(tags[resumedAt + 1], "SessionResumed")
      // the call that had started is answered without running it; one model call finishes the run
      const answered = trajectory.slice(resumedAt).find((event) => event._tag === "ToolExecutionEnd")
      assert.match(
        answered?._tag === "ToolExecutionEnd" ? Message.textOf(answered.result) : "",
        /^This call to bash had started when the run was interrupted/
      )
      assert.strictEqual(tagsOf(trajectory.slice(resumedAt)).filter((tag) => tag === "TurnStart").length, 1)
      assert.strictEqual(tags.at(-1), "AgentEnd")
    }))

  live("ynh's interrupt line, {\"action\":\"interrupt\"}, stops the run as SIGINT does: exit 31, and --resume finishes it", () =>
    Effect.gen(function*() {
      const { dir, proc: first, session } = yield* midCall("Resumed.")
      yield* first.send(`{"action":"interrupt"}`)
      const stopped = yield* first.exit
      assert.strictEqual(stopped.code, 31, stopped.stderr)
      assert.include(stopped.stderr, `effect-agent: interrupted; the session is saved: resume it with effect-agent run --resume ${session}`)
      const resumed = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--approve", "all", "--json"], {
        cwd: dir
      })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      assert.strictEqual(JSON.parse(resumed.stdout).answer, "Resumed.")
    }))

  live("a finished session resumed with --task continues with it as a follow-up", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "It says hello world." }, { text: "In French: bonjour le monde." }])
      const session = `${yield* tempDir}/session`
      const first = yield* runCommand(scriptedArgs(dir, "--session-dir", session), { cwd: dir })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.strictEqual(first.stdout, "It says hello world.\n")
      const again = yield* runCommand(scriptedArgs(dir, "--session-dir", session), { cwd: dir })
      assert.strictEqual(again.code, 22)
      assert.include(again.stderr, `${session} already holds a session: resume it with --resume ${session}`)
      const more = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--task", "And in French?"], { cwd: dir })
      assert.strictEqual(more.code, 0, more.stderr)
      assert.strictEqual(more.stdout, "In French: bonjour le monde.\n")
      assert.include(more.stderr, "↪ follow-up delivered: And in French?")
    }))

  live("a session ended by --max-turns goes on when resumed with a larger --max-turns, and completes", () =>
    Effect.gen(function*() {
      const step = (n: number) => ({ text: `step ${n}`, toolCalls: [{ id: `c${n}`, name: "read_file", params: { path: "a.txt" } }] })
      const dir = yield* scripted([step(1), step(2), step(3), { text: "All done." }])
      const session = `${yield* tempDir}/session`
      const first = yield* runCommand(scriptedArgs(dir, "--max-turns", "2", "--session-dir", session, "--json"), { cwd: dir })
      assert.strictEqual(first.code, 10, first.stderr)
      const more = yield* run(
        cli,
        ["run", "--resume", session, "--sandbox", "local", "--max-turns", "10", "--json"],
        { cwd: dir }
      )
      assert.strictEqual(more.code, 0, more.stderr)
      const report = JSON.parse(more.stdout)
      assert.deepStrictEqual([report.outcome, report.turns, report.answer], [{ _tag: "Completed" }, 4, "All done."])
      // the resumed run's events are the session's trajectory's, after the first run's
      const tags = tagsOf(yield* readEvents(`${session}/trajectory.ndjson`))
      assert.deepStrictEqual(tags.filter((tag) => tag === "AgentStart" || tag === "SessionResumed" || tag === "AgentEnd"), [
        "AgentStart", "AgentEnd", "AgentStart", "SessionResumed", "AgentEnd"
      ])
    }))

  live("a directory that holds a session's checkpoints but no run.json takes no new session (exit 22): it would resume the old one", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "The first answer." }, { text: "The second answer." }])
      const session = `${yield* tempDir}/session`
      const first = yield* runCommand(scriptedArgs(dir, "--session-dir", session), { cwd: dir })
      assert.strictEqual(first.code, 0, first.stderr)
      const fs = yield* FileSystem.FileSystem
      yield* fs.remove(`${session}/run.json`)
      const again = yield* runCommand([...scriptedArgs(dir, "--session-dir", session)], { cwd: dir })
      assert.strictEqual(again.code, 22, again.stderr)
      assert.include(again.stderr, `${session} already holds a session's checkpoints: resume it with --resume ${session}`)
      assert.strictEqual(again.stdout, "")
      assert.isFalse(yield* fs.exists(`${session}/run.json`))
    }))

  live("21: nothing to resume, a corrupt checkpoint, a checkpoint from another version", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const missing = yield* runCommand(["run", "--resume", "nowhere"], { cwd: yield* tempDir })
      assert.strictEqual(missing.code, 21, missing.stderr)
      assert.match(missing.stderr, /effect-agent: \/.*\/nowhere holds no session to resume \(no run\.json\)\n/)

      const dir = yield* scripted([{ text: "Done." }])
      const session = `${yield* tempDir}/session`
      assert.strictEqual((yield* runCommand(scriptedArgs(dir, "--session-dir", session), { cwd: dir })).code, 0)
      const head = `${session}/checkpoint/head.json`
      const saved = yield* fs.readFileString(head)

      yield* fs.writeFileString(head, saved.slice(0, 40))
      const corrupt = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--json"], { cwd: dir })
      assert.strictEqual(corrupt.code, 21, corrupt.stderr)
      assert.match(
        JSON.parse(corrupt.stdout).error.message,
        new RegExp(`^cannot resume ${session}: the checkpoint of session checkpoint is corrupt: .*head\\.json`)
      )

      // a newer version's head, its checksum (the last key: a CRC-32 of the JSON before it) made again
      const newerHead = saved.replace(/"version":\s*2/, "\"version\":99")
      const json = `${newerHead.slice(0, newerHead.lastIndexOf(",\"checksum\":"))}}`
      yield* fs.writeFileString(head, `${json.slice(0, -1)},"checksum":"${crc32(json).toString(16).padStart(8, "0")}"}`)
      const newer = yield* runCommand(["run", "--resume", session, "--sandbox", "local"], { cwd: dir })
      assert.strictEqual(newer.code, 21, newer.stderr)
      assert.include(newer.stderr, "has checkpoint version 99; this library reads version 2")
    }))
})
