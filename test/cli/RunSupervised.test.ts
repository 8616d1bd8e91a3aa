/**
 * `effect-agent run` supervised: --check between turns until they pass, the
 * exit codes of its outcomes, plan decisions as control lines, the workers
 * it does not have, `version --json`, and `demo --supervised` (in the test
 * process: each a run of the same command, see inProcess.ts).
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { type Cause, Effect, FileSystem, Queue, Stream } from "effect"
import * as SupervisedDemo from "../../src/cli/internal/SupervisedDemo.ts"
import * as View from "../../src/cli/internal/View.ts"
import { SupervisorEvent, SupervisorOutcome } from "effect-agent/supervisor"
import { runCommand } from "./inProcess.ts"
import { scripted, scriptedArgs, type Services, tempDir as tempDirOf } from "./support.ts"

const write = (path: string, content: string) => ({ toolCalls: [{ name: "write_file", params: { path, content } }] })

const run = (turns: ReadonlyArray<unknown>, flags: ReadonlyArray<string>, stdin?: string, approve = "all") =>
  Effect.gen(function*() {
    const dir = yield* scripted(turns)
    const out = yield* runCommand(scriptedArgs(dir, "--approve", approve, "--json", ...flags), { cwd: dir, stdin })
    return { ...out, result: JSON.parse(out.stdout.trim().split("\n").at(-1)!), dir }
  })

/**
 * Stdin for a run with `--emit-jsonl -` that answers each event it writes with the line `answer` gives, if any (a
 * question waits by the time its event is out); the events seen.
 */
const answering = (answer: (event: any) => string | undefined) =>
  Effect.map(Queue.unbounded<Uint8Array, Cause.Done>(), (input) => {
    const seen: Array<any> = []
    let pending = ""
    return {
      events: () => seen,
      stdin: Stream.fromQueue(input),
      onStdout: (text: string) => {
        pending += text
        let newline: number
        while ((newline = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, newline)
          pending = pending.slice(newline + 1)
          if (!line.startsWith("{")) continue
          const event = JSON.parse(line)
          seen.push(event)
          const reply = answer(event)
          if (reply !== undefined) Queue.offerUnsafe(input, new TextEncoder().encode(`${reply}\n`))
        }
      }
    }
  })

const live = (name: string, test: () => Effect.Effect<void, unknown, Services>) =>
  it.live(name, () => test().pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

describe("effect-agent run --check", () => {
  live("red, then green after the worker's turn: Converged, exit 0", () =>
    Effect.gen(function*() {
      const out = yield* run([write("done.txt", "yes"), { text: "wrote it" }], ["--check", "test -f done.txt"])
      assert.strictEqual(out.code, 0, out.stderr)
      assert.deepStrictEqual(out.result.outcome, { _tag: "Converged", turns: 1 })
      assert.strictEqual(out.result.answer, "wrote it")
      assert.include(out.stderr, "✗ check test -f done.txt (baseline) fail")
      assert.include(out.stderr, "✓ check test -f done.txt pass")
    }))

  live("a new failure at the turn cap: Unverified, exit 10; the feedback never went out", () =>
    Effect.gen(function*() {
      const out = yield* run(
        [write("note.txt", "still broken"), { text: "tried" }],
        ["--check", "cat note.txt 2>/dev/null; exit 1", "--max-turns", "1"]
      )
      assert.strictEqual(out.code, 10, out.stderr)
      assert.deepStrictEqual(out.result.outcome, {
        _tag: "Unverified",
        budget: "turns",
        limit: 1,
        used: 1,
        failing: ["cat note.txt 2>/dev/null; exit 1"]
      })
      assert.notInclude(out.stderr, "feedback sent")
    }))

  live("a check that fails as it did before the run still fails it; --tolerate-known-failures ends it Tolerated, exit 0", () =>
    Effect.gen(function*() {
      const strict = yield* run([{ text: "looked" }, { text: "looked again" }], ["--check", "exit 1", "--max-turns", "2"])
      assert.strictEqual(strict.code, 10, strict.stderr)
      assert.deepStrictEqual(strict.result.outcome, {
        _tag: "Unverified",
        budget: "turns",
        limit: 2,
        used: 2,
        failing: ["exit 1"]
      })
      assert.include(strict.stderr, "feedback sent")
      const tolerant = yield* run([{ text: "looked" }], ["--check", "exit 1", "--tolerate-known-failures"])
      assert.strictEqual(tolerant.code, 0, tolerant.stderr)
      assert.deepStrictEqual(tolerant.result.outcome, { _tag: "Tolerated", turns: 1, known: ["exit 1"] })
      assert.include(tolerant.stderr, "tolerated: exit 1")
    }))

  live("--plan with --approve ask: reject_plan on stdin ends the run Rejected, exit 30", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "1. write done.txt" }])
      const { events, stdin, onStdout } = yield* answering((event) =>
        SupervisorEvent.tagOf(event) === "PlanProposed" ? `{"type":"reject_plan","notes":"too risky"}` : undefined
      )
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "ask", "--plan", "--check", "true", "--emit-jsonl", "-"),
        { cwd: dir, stdin, onStdout }
      )
      assert.strictEqual(out.code, 30, out.stderr)
      assert.deepStrictEqual(SupervisorOutcome.fromOutcome(events().at(-1).outcome), { _tag: "Rejected", notes: "too risky" })
      assert.include(out.stderr, "☐ plan 1:\n1. write done.txt")
    }))

  live("a plan decision sent before the plan is proposed is refused, not kept for it", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "1. write done.txt" }])
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "ask", "--plan", "--check", "true", "--json"),
        { cwd: dir, stdin: `{"type":"approve_plan"}\n` }
      )
      // nothing waited when the line came; stdin then ended, so the run is interrupted at the plan, as ynh does
      // (nobody can approve it): without a session to resume, exit 30
      assert.strictEqual(out.code, 30, out.stderr)
      assert.deepStrictEqual(JSON.parse(out.stdout).outcome, { _tag: "Cancelled", reason: "interrupted" })
      assert.include(out.stderr, "stdin line 1: approve_plan: no plan waits for a decision; ignored")
    }))

  live("the end of stdin at the plan gate interrupts the run, as in ynh: exit 31, and the session resumes", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "1. write done.txt" }, { text: "1. write done.txt" }, write("done.txt", "yes"), {
        text: "done"
      }])
      const session = `${yield* tempDirOf}/session`
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "ask", "--plan", "--check", "test -f done.txt", "--session-dir", session, "--json"),
        { cwd: dir, stdin: "" }
      )
      assert.strictEqual(out.code, 31, out.stderr)
      assert.include(out.stderr, `effect-agent: interrupted; the session is saved: resume it with effect-agent run --resume ${session}`)
    }))

  live("the end of stdin while a feedback waits (--approve-turns) interrupts the run too: exit 31, and the session resumes to ask again", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "tried" }, write("done.txt", "yes"), { text: "done" }])
      const session = `${yield* tempDirOf}/session`
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "all", "--approve-turns", "--check", "test -f done.txt", "--session-dir", session, "--json"),
        { cwd: dir, stdin: "" }
      )
      assert.strictEqual(out.code, 31, out.stderr)
      assert.include(out.stderr, `effect-agent: interrupted; the session is saved: resume it with effect-agent run --resume ${session}`)
      // resumed, the gate asks again before the worker gets anything
      const { events, stdin, onStdout } = yield* answering((event) =>
        SupervisorEvent.tagOf(event) === "TurnApprovalRequested" ? `{"type":"approve_turn"}` : undefined
      )
      const resumed = yield* runCommand(
        scriptedArgs(dir, "--resume", session, "--approve", "all", "--emit-jsonl", "-").filter((arg) => arg !== "--task" && arg !== "What is in a.txt?"),
        { cwd: dir, stdin, onStdout }
      )
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      assert.deepStrictEqual(SupervisorOutcome.fromOutcome(events().at(-1).outcome), { _tag: "Converged", turns: 2 })
    }))

  /**
   * A `--plan` run answered on stdin: each plan proposed by the next of `decisions`, each call approved by
   * `approve`; the worker proposes "plan A", then "plan B", then writes done.txt. Its output, and its events.
   */
  const planAnswered = (decisions: Array<string>, approve: (id: string) => string) =>
    Effect.gen(function*() {
      const { stdin, onStdout } = yield* answering((event) =>
        SupervisorEvent.tagOf(event) === "PlanProposed"
          ? decisions.shift()
          : event._tag === "ApprovalRequested"
          ? approve(event.approvalId)
          : undefined
      )
      const dir = yield* scripted([{ text: "plan A" }, { text: "plan B" }, write("done.txt", "yes"), { text: "done" }])
      const out = yield* runCommand(
        scriptedArgs(dir, "--approve", "ask", "--plan", "--check", "test -f done.txt", "--emit-jsonl", "-"),
        { cwd: dir, stdin, onStdout }
      )
      return { out, lines: out.stdout.trim().split("\n").map((l) => JSON.parse(l)) }
    })

  live("--plan with --approve ask: refine_plan then approve_plan; the act turn gets the revised plan", () =>
    Effect.gen(function*() {
      const { lines, out } = yield* planAnswered(
        [`{"type":"refine_plan","notes":"use B"}`, `{"type":"approve_plan"}`],
        (id) => JSON.stringify({ type: "approve", id })
      )
      assert.strictEqual(out.code, 0, out.stderr)
      const tags = lines.map(SupervisorEvent.tagOf)
      assert.deepStrictEqual(tags.filter((t) => t.startsWith("Plan")), [
        "PlanProposed",
        "PlanRevised",
        "PlanProposed",
        "PlanApproved"
      ])
      const act = SupervisorEvent.ofTag(lines, "WorkerTurnStart").find((e) => e.phase === "act")
      assert.include(act?.message, "Plan approved:\n\nplan B")
      assert.strictEqual(tags.at(-1), "AgentEnd")
    }))

  live("ynh's spelling: {\"action\": …} lines; replace_feedback at the plan gate refines it, with its feedback", () =>
    Effect.gen(function*() {
      const { lines, out } = yield* planAnswered(
        [`{"action":"replace_feedback","feedback":"use B"}`, `{"action":"approve_plan"}`],
        (id) => JSON.stringify({ action: "approve", id })
      )
      assert.strictEqual(out.code, 0, out.stderr)
      assert.notInclude(out.stderr, "ignored")
      assert.deepStrictEqual(
        SupervisorEvent.ofTag(lines, "PlanRevised").map((e) => e.notes),
        ["use B"]
      )
      assert.include(SupervisorEvent.ofTag(lines, "WorkerTurnStart").find((e) => e.phase === "act")?.message, "plan B")
    }))

  live("--worker claude and codex drive ExternalWorker: with no such CLI on PATH, a spawn WorkerError, exit 20", () =>
    Effect.gen(function*() {
      for (const worker of ["claude", "codex"]) {
        const dir = yield* scripted([])
        const out = yield* runCommand(
          scriptedArgs(dir, "--json", "--check", "true", "--worker", worker),
          { cwd: dir, env: { PATH: dir } }
        )
        assert.strictEqual(out.code, 20, out.stderr)
        assert.strictEqual(JSON.parse(out.stdout).error._tag, "WorkerError")
        assert.include(out.stderr, worker)
      }
    }))

  live("version --json lists the supervised capabilities and the plan-iteration exit code", () =>
    Effect.gen(function*() {
      const out = yield* runCommand(["version", "--json"], { cwd: "." })
      const info = JSON.parse(out.stdout)
      const supervised = [
        "supervised",
        "supervised-session",
        "checks",
        "verifier",
        "plan-approval",
        "turn-approval",
        "demo-supervised"
      ]
      for (const capability of [...supervised, "worker-agent", "worker-claude", "worker-codex", "worker-cursor", "worker-acp"]) {
        assert.include(info.capabilities, capability)
      }
      assert.strictEqual(info.exitCodes.planIterationCap, 15)
    }))
})

describe("effect-agent demo --supervised", () => {
  it.live("red, feedback, green: Converged on the second turn", () =>
    Effect.gen(function*() {
      let log = ""
      const result = yield* SupervisedDemo.run({ view: View.log((text) => void (log += text)) })
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(result.baseline.map((r) => r.status), ["fail"])
      const steps = ["✗ check greet (baseline) fail", "✗ check greet fail", "↪ feedback sent", "✓ check greet pass"]
      const order = [...steps, "■ Converged"].map((text) => log.indexOf(text))
      assert.notInclude(order, -1)
      assert.deepStrictEqual([...order].sort((a, b) => a - b), order)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)
})

describe("effect-agent run --check --session-dir / --resume", () => {
  const sessionIn = Effect.map(tempDirOf, (dir) => `${dir}/session`)

  live("a converged session resumed ends Converged again without a model call; it keeps its checks and task", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const session = yield* sessionIn
      const first = yield* run([write("done.txt", "yes"), { text: "wrote it" }], [
        "--check",
        "test -f done.txt",
        "--session-dir",
        session
      ])
      assert.strictEqual(first.code, 0, first.stderr)
      assert.strictEqual(first.result.session, session)
      const runJson = JSON.parse(yield* fs.readFileString(`${session}/run.json`))
      // how the run is supervised, sealed with the target; no --max-turns: the supervisor's own cap (10 act turns)
      assert.deepStrictEqual(runJson.supervision, {
        checks: ["test -f done.txt"],
        plan: false,
        approveTurns: false,
        worker: "agent"
      })
      // the script has no reply left: a model call would fail the run
      const again = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--approve", "all", "--json"], { cwd: first.dir })
      assert.strictEqual(again.code, 0, again.stderr)
      assert.deepStrictEqual(JSON.parse(again.stdout).outcome, { _tag: "Converged", turns: 1 })
      assert.match(again.stderr, new RegExp(`↻ resumed ${session} at turn 2`))
      assert.notInclude(again.stderr, "check test -f done.txt")

      for (
        const [flags, message] of [
          [["--check", "true"], "--check: a resumed supervised session keeps its checks and plan settings"],
          [["--plan"], "--plan: a resumed supervised session keeps its checks and plan settings"],
          [["--task", "more"], "--task: a resumed supervised session keeps its task"],
          [["--worker", "codex"], "--worker codex: the session's worker is agent"]
        ] as const
      ) {
        const refused = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--approve", "all", ...flags], {
          cwd: first.dir
        })
        assert.strictEqual(refused.code, 22, refused.stderr)
        assert.include(refused.stderr, message)
      }
    }))

  live("an external worker is named again on --resume (it runs outside the sandbox); the hint says so", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([])
      const session = yield* sessionIn
      const out = yield* runCommand(
        scriptedArgs(dir, "--check", "true", "--worker", "claude", "--session-dir", session),
        { cwd: dir, env: { PATH: dir } }
      )
      assert.strictEqual(out.code, 20, out.stderr)
      const bare = yield* runCommand(["run", "--resume", session, "--sandbox", "local"], { cwd: dir, env: { PATH: dir } })
      assert.strictEqual(bare.code, 22, bare.stderr)
      assert.include(bare.stderr, `the session was started with --worker claude, a CLI run outside the sandbox`)
      assert.include(bare.stderr, `pass it again (--sandbox local --worker claude)`)
      const named = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--worker", "claude"], {
        cwd: dir,
        env: { PATH: dir }
      })
      // resumed: the worker is asked again (and, with no claude on PATH, cannot start)
      assert.strictEqual(named.code, 20, named.stderr)
      assert.include(named.stderr, "claude")
    }))

  live("a foreign checkpoint is a resume failure (21) and stays as it was", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const supervised = yield* sessionIn
      const plain = yield* sessionIn
      const one = yield* run([{ text: "done" }], ["--check", "true", "--session-dir", supervised])
      assert.strictEqual(one.code, 0, one.stderr)
      const two = yield* run([{ text: "done" }], ["--session-dir", plain])
      assert.strictEqual(two.code, 0, two.stderr)
      // swap the checkpoints: each run.json now names the other kind of run
      yield* fs.rename(`${supervised}/checkpoint`, `${supervised}/swap`)
      yield* fs.rename(`${plain}/checkpoint`, `${supervised}/checkpoint`)
      yield* fs.rename(`${supervised}/swap`, `${plain}/checkpoint`)
      const heads = yield* Effect.forEach([supervised, plain], (dir) => fs.readFileString(`${dir}/checkpoint/head.json`))

      const asSupervised = yield* runCommand(["run", "--resume", supervised, "--sandbox", "local", "--approve", "all", "--json"], {
        cwd: one.dir
      })
      assert.strictEqual(asSupervised.code, 21, asSupervised.stderr)
      assert.match(JSON.parse(asSupervised.stdout).error.message, /is corrupt: .*head\.json: it holds no supervised run/)
      const asPlain = yield* runCommand(["run", "--resume", plain, "--sandbox", "local", "--approve", "all"], { cwd: two.dir })
      assert.strictEqual(asPlain.code, 21, asPlain.stderr)
      assert.include(asPlain.stderr, "its checkpoint is a supervised run's, and its run.json says it is not")

      yield* fs.writeFileString(`${supervised}/checkpoint/head.json`, "{")
      const corrupt = yield* runCommand(["run", "--resume", supervised, "--sandbox", "local", "--approve", "all"], { cwd: one.dir })
      assert.strictEqual(corrupt.code, 21, corrupt.stderr)
      assert.include(corrupt.stderr, "is corrupt")
      assert.strictEqual(yield* fs.readFileString(`${supervised}/checkpoint/head.json`), "{")
      assert.strictEqual(yield* fs.readFileString(`${plain}/checkpoint/head.json`), heads[1])
    }))
})
