/**
 * `effect-agent run --emit-jsonl … --jsonl-format ynh`: the trajectory in
 * ynh's format, `{"timestamp", "type", "turn"?, "data"?}` lines with
 * snake_case kinds, mapped from the run's events. Each scenario is a real run
 * of the command (in the test process, see inProcess.ts) on a scripted model,
 * its lines compared with a golden file under `test/golden/ynh/` (times, ids
 * and durations normalised; `UPDATE_GOLDEN=1` rewrites them). Together they
 * write every kind ynh has a counterpart for, and every way a run ends writes
 * `session_end` last, with the command's exit code. The default format is
 * unchanged (our events), and `Trajectory.ndjson` writes the same format for
 * a run made in code.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { type Cause, Effect, FileSystem, Layer, Queue, Schema, Stream } from "effect"
import { Agent, AgentEvent, ToolRegistry } from "effect-agent"
import { YnhTrajectory } from "effect-agent/cli"
import { Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import * as NodeFs from "node:fs"
import * as NodePath from "node:path"
import { runCommand } from "./inProcess.ts"
import { scripted, scriptedArgs, type Services, tempDir } from "./support.ts"

const goldenDir = NodePath.join(import.meta.dirname, "..", "golden", "ynh")

const write = (path: string, content: string) => ({ toolCalls: [{ name: "write_file", params: { path, content } }] })

type Line = { readonly timestamp: string; readonly type: string; readonly turn?: number; readonly data?: any }

const parse = (text: string): Array<Line> =>
  text.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line))

/** A check's time in the feedback's words (`[new, 0.0s]`). */
const seconds = (text: unknown) => typeof text === "string" ? text.replace(/, \d+\.\d+s\]/g, ", #s]") : text

/** What a run changes from one time to the next: its times, its id, how long things took. */
const normalise = (lines: ReadonlyArray<Line>): Array<Line> =>
  lines.map((line) => {
    const data = typeof line.data === "object" && line.data !== null
      ? Object.fromEntries(Object.entries(line.data).map(([key, value]) =>
        key === "session_id"
          ? [key, "<session>"]
          : key === "duration_ms" || key === "elapsed_ms"
          ? [key, 0]
          : [key, seconds(value)]
      ))
      : seconds(line.data)
    return { ...line, timestamp: "<time>", ...(line.data === undefined ? {} : { data }) }
  })

/** The lines compared with `test/golden/ynh/<name>.jsonl` (written anew with UPDATE_GOLDEN=1). */
const golden = (name: string, lines: ReadonlyArray<Line>) => {
  // every line has ynh's shape: an RFC 3339 time, in order, a kind, a turn ≥ 1 when there is one
  for (const [i, line] of lines.entries()) {
    assert.match(line.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, `${name}: line ${i}'s time`)
    if (i > 0) assert.isAtLeast(Date.parse(line.timestamp), Date.parse(lines[i - 1]!.timestamp), `${name}: line ${i}`)
    assert.match(line.type, /^[a-z_]+$/, `${name}: line ${i}'s type`)
    if (line.turn !== undefined) assert.isAtLeast(line.turn, 1, `${name}: line ${i}'s turn`)
    assert.deepStrictEqual(
      Object.keys(line).filter((key) => !["timestamp", "type", "turn", "data"].includes(key)),
      [],
      `${name}: line ${i} has ynh's keys only`
    )
  }
  const file = NodePath.join(goldenDir, `${name}.jsonl`)
  const text = normalise(lines).map((line) => JSON.stringify(line)).join("\n") + "\n"
  if (process.env.UPDATE_GOLDEN === "1") {
    NodeFs.mkdirSync(goldenDir, { recursive: true })
    NodeFs.writeFileSync(file, text)
  }
  assert.deepStrictEqual(parse(text), parse(NodeFs.readFileSync(file, "utf8")), `${name}: as test/golden/ynh/${name}.jsonl`)
}

const types = (lines: ReadonlyArray<Line>) => lines.map((line) => line.type)

/** The last line is `session_end`, with the exit code the command exited with. */
const endsWith = (lines: ReadonlyArray<Line>, code: number) => {
  assert.strictEqual(lines.at(-1)?.type, "session_end")
  assert.strictEqual(lines.at(-1)?.data.exit_code, code)
  assert.strictEqual(types(lines).filter((type) => type === "session_end").length, 1)
}

/** Stdin that answers each ynh line written on stdout with the line `answer` gives, if any. */
const answering = (answer: (line: Line) => string | undefined) =>
  Effect.map(Queue.unbounded<Uint8Array, Cause.Done>(), (input) => {
    let pending = ""
    return {
      stdin: Stream.fromQueue(input),
      onStdout: (text: string) => {
        pending += text
        let newline: number
        while ((newline = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, newline)
          pending = pending.slice(newline + 1)
          if (!line.startsWith("{")) continue
          const reply = answer(JSON.parse(line))
          if (reply !== undefined) Queue.offerUnsafe(input, new TextEncoder().encode(`${reply}\n`))
        }
      }
    }
  })

const live = (name: string, test: () => Effect.Effect<void, unknown, Services>) =>
  it.live(name, () => test().pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

const ynh = ["--jsonl-format", "ynh", "--emit-jsonl", "-"]

describe("run --jsonl-format ynh", () => {
  live("a plain run: session_start, turn_start, assistant_message, budget_snapshot per turn, converged, session_end", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([
        { toolCalls: [{ name: "read_file", params: { path: "a.txt" } }], usage: { input: 10, output: 5 } },
        { text: "hello world", usage: { input: 20, output: 3 } }
      ])
      const out = yield* runCommand(scriptedArgs(dir, "--approve", "all", "--max-tokens", "1000", ...ynh), { cwd: dir })
      assert.strictEqual(out.code, 0, out.stderr)
      const lines = parse(out.stdout)
      golden("plain", lines)
      endsWith(lines, 0)
      assert.deepStrictEqual(lines[0]?.data.budget_sources, { turns: "default", tokens: "flag", wall: "default" })
    }))

  live("a supervised run stopped by its turn cap, resumed into the same file: sensors, budget_exceeded, session_resumed", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([write("x.txt", "no"), { text: "tried" }, write("done.txt", "yes"), { text: "done" }])
      const out = yield* tempDir
      const session = `${out}/session`
      const file = `${out}/trajectory.jsonl`
      const check = "cat x.txt 2>/dev/null; test -f done.txt"
      const first = yield* runCommand(
        scriptedArgs(dir, "--approve", "all", "--check", check, "--max-turns", "1", "--session-dir", session, "--jsonl-format", "ynh", "--emit-jsonl", file),
        { cwd: dir }
      )
      assert.strictEqual(first.code, 10, first.stderr)
      const stopped = parse(yield* FileSystem.FileSystem.pipe(Effect.flatMap((fs) => fs.readFileString(file))))
      endsWith(stopped, 10)
      const second = yield* runCommand(
        ["run", "--resume", session, "--sandbox", "local", "--approve", "all", "--max-turns", "3", "--jsonl-format", "ynh", "--emit-jsonl", file],
        { cwd: dir }
      )
      assert.strictEqual(second.code, 0, second.stderr)
      const lines = parse(yield* FileSystem.FileSystem.pipe(Effect.flatMap((fs) => fs.readFileString(file))))
      golden("supervised-resumed", lines)
      // one session_start, then the resumed run's session_resumed, at the turn after the last one done
      assert.deepStrictEqual(types(lines).filter((type) => type.startsWith("session_")), [
        "session_start",
        "session_end",
        "session_resumed",
        "session_end"
      ])
      const resumed = lines.find((line) => line.type === "session_resumed")!
      assert.strictEqual(resumed.data.session_id, lines[0]!.data.session_id)
      assert.strictEqual(resumed.data.resumed_at_turn, 2)
      assert.strictEqual(resumed.data.restored_turns, 1)
      endsWith(lines.slice(stopped.length), 0)
    }))

  live("a plan refined then approved on stdin: plan, plan_approval_required, plan_revised, then the act turn", () =>
    Effect.gen(function*() {
      const decisions = [`{"action":"replace_feedback","feedback":"use B"}`, `{"action":"approve_plan"}`]
      const { stdin, onStdout } = yield* answering((line) =>
        line.type === "plan_approval_required" ? decisions.shift() : undefined
      )
      const dir = yield* scripted([{ text: "plan A" }, { text: "plan B" }, { text: "done" }])
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "ask", "--plan", "--check", "true", ...ynh),
        { cwd: dir, stdin, onStdout }
      )
      assert.strictEqual(out.code, 0, out.stderr)
      const lines = parse(out.stdout)
      golden("plan", lines)
      endsWith(lines, 0)
    }))

  live("--approve-turns: turn_approval_required, then feedback_sent once approved", () =>
    Effect.gen(function*() {
      const { stdin, onStdout } = yield* answering((line) =>
        line.type === "turn_approval_required" ? `{"action":"approve_turn"}` : undefined
      )
      const dir = yield* scripted([write("x.txt", "no"), { text: "tried" }, write("done.txt", "yes"), { text: "done" }])
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "all", "--approve-turns", "--check", "cat x.txt 2>/dev/null; test -f done.txt", ...ynh),
        { cwd: dir, stdin, onStdout }
      )
      assert.strictEqual(out.code, 0, out.stderr)
      const lines = parse(out.stdout)
      golden("turn-approval", lines)
      endsWith(lines, 0)
    }))

  live("the same reply three times with a check failing: stuck_detected, exit 13", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([write("x.txt", "no"), { text: "same" }, { text: "same" }, { text: "same" }])
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "all", "--check", "cat x.txt 2>/dev/null; exit 1", ...ynh),
        { cwd: dir }
      )
      assert.strictEqual(out.code, 13, out.stderr)
      const lines = parse(out.stdout)
      golden("stuck", lines)
      endsWith(lines, 13)
    }))

  live("known failures tolerated (--tolerate-known-failures): converged naming them, exit 0", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "looked" }])
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "all", "--check", "exit 1", "--tolerate-known-failures", ...ynh),
        { cwd: dir }
      )
      assert.strictEqual(out.code, 0, out.stderr)
      const lines = parse(out.stdout)
      golden("tolerated", lines)
      endsWith(lines, 0)
    }))

  live("every way out ends with session_end: a model failure (20), the end of stdin at the plan gate (30)", () =>
    Effect.gen(function*() {
      const failing = yield* scripted([{ fail: "the model is down" }])
      const failed = yield* runCommand(scriptedArgs(failing, "--approve", "all", ...ynh), { cwd: failing })
      assert.strictEqual(failed.code, 20, failed.stderr)
      golden("model-failure", parse(failed.stdout))
      endsWith(parse(failed.stdout), 20)

      const planning = yield* scripted([{ text: "1. write done.txt" }])
      const stopped = yield* runCommand(
        scriptedArgs(planning, "--approve", "ask", "--plan", "--check", "true", ...ynh),
        { cwd: planning, stdin: "" }
      )
      assert.strictEqual(stopped.code, 30, stopped.stderr)
      golden("interrupted", parse(stopped.stdout))
      endsWith(parse(stopped.stdout), 30)
    }))

  live("the default format is unchanged: our events, AgentStart to AgentEnd", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "hello" }])
      const out = yield* runCommand(scriptedArgs(dir, "--approve", "all", "--emit-jsonl", "-"), { cwd: dir })
      assert.strictEqual(out.code, 0, out.stderr)
      const events = out.stdout.trim().split("\n").map((line) => Schema.decodeUnknownSync(AgentEvent.AgentEventJson)(JSON.parse(line)))
      assert.strictEqual(events[0]?._tag, "AgentStart")
      assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
      assert.notInclude(out.stdout, `"type":"session_start"`)
    }))

  live("--jsonl-format without --emit-jsonl is a config error (22), not ignored", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "hello" }])
      const out = yield* runCommand(scriptedArgs(dir, "--jsonl-format", "ynh"), { cwd: dir })
      assert.strictEqual(out.code, 22)
      assert.include(out.stderr, "--jsonl-format: it is the format of --emit-jsonl")
    }))
})

describe("Trajectory.ndjson with YnhTrajectory.format", () => {
  live("a run made in code writes ynh's lines, session_end on its AgentEnd with the command's exit code", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const file = `${yield* tempDir}/trajectory.jsonl`
      const result = yield* Agent.run({
        prompt: "Say hi",
        config: { maxTurns: 1 },
        plugins: [Trajectory.ndjson(file, { format: YnhTrajectory.format({ backend: "agent", model: "scripted" }) })]
      }).pipe(Effect.provide(Layer.mergeAll(
        ScriptedModel.layer([{ toolCalls: [{ name: "nothing", params: {} }] }]),
        ToolRegistry.layerEntries()
      )))
      assert.strictEqual(result.outcome._tag, "MaxTurns")
      const lines = parse(yield* fs.readFileString(file))
      assert.deepStrictEqual(types(lines), [
        "session_start",
        "turn_start",
        "assistant_message",
        "budget_snapshot",
        "budget_exceeded",
        "session_end"
      ])
      assert.deepStrictEqual(lines.at(-1)?.data, {
        exit_code: 10,
        reason: "MaxTurns: the turn cap of 1 turn was reached",
        total_turns: 1,
        outcome: "MaxTurns"
      })
    }))
})
