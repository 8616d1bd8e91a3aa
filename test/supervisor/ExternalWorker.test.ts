/**
 * ExternalWorker: the Claude Code, Codex and Cursor workers against fake CLIs
 * (test/fixtures/workers) that emit the documented event shapes and record
 * each call's argv, environment and message: session reuse across turns,
 * unknown events skipped, text accumulated and usage summed, EOF, exits and
 * protocol errors as typed WorkerErrors, the allowlisted environment, the
 * caps and the timeout that kills the process.
 */
import { NodeServices } from "@effect/platform-node"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { ChildProcessSpawner } from "effect/process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { ExternalWorker, Worker } from "effect-agent/supervisor"
import { isAlive } from "../sandbox/fixtures.ts"

const fixtures = fileURLToPath(new URL("../fixtures/workers/", import.meta.url))
const fakeClaude = Path.join(fixtures, "fake-claude.mjs")
const fakeCodex = Path.join(fixtures, "fake-codex.mjs")
const fakeCursor = Path.join(fixtures, "fake-cursor.mjs")

const workspaces: Array<string> = []
beforeAll(() => {
  // git keeps the mode, but a copy or an archive may not.
  for (const fake of [fakeClaude, fakeCodex, fakeCursor]) Fs.chmodSync(fake, 0o755)
})
afterAll(() => {
  for (const dir of workspaces) Fs.rmSync(dir, { recursive: true, force: true })
})

const workspace = (): string => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-worker-"))
  workspaces.push(dir)
  return dir
}

interface Call {
  readonly argv: ReadonlyArray<string>
  readonly env: Record<string, string>
  readonly message: string
  readonly pid: number
}

/** The calls the fake CLI recorded in the workspace. */
const calls = (cwd: string): ReadonlyArray<Call> => {
  const file = Path.join(cwd, "fake-calls.jsonl")
  if (!Fs.existsSync(file)) return []
  return Fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))
}

const turn = (
  worker: Worker.Worker<ChildProcessSpawner.ChildProcessSpawner>,
  message: string,
  resumeToken?: string,
  phase: "plan" | "act" = "act"
) => worker.turn({ message, phase, resumeToken }).pipe(Effect.provide(NodeServices.layer))

/** The error of a turn that must fail. */
const failure = (effect: Effect.Effect<unknown, Worker.WorkerError>) => Effect.flip(effect)

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

describe("ExternalWorker.claude", () => {
  const claude = (cwd: string, options?: Partial<ExternalWorker.Options>) =>
    ExternalWorker.claude({ executable: fakeClaude, cwd, model: "claude-test", ...options })

  it.live("chooses a session id on the first turn and resumes it on the next; text and usage from the events", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const worker = claude(cwd)
      assert.strictEqual(worker.name, "claude")
      const first = yield* turn(worker, "Fix the parser")
      assert.match(first.resumeToken ?? "", uuid)
      // the text of each assistant message (its blocks joined), messages apart; tool and unknown events skipped
      assert.strictEqual(first.text, "Listing. \n\nDone.")
      // the result's usage, input including the cache writes and reads: 25 + 40 + 300
      assert.deepStrictEqual(first.usage, { inputTokens: 365, outputTokens: 25 })
      const second = yield* turn(worker, "Two checks fail: fix them", first.resumeToken)
      assert.strictEqual(second.resumeToken, first.resumeToken)
      const [one, two] = calls(cwd)
      assert.deepStrictEqual(one?.argv, [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        `--session-id=${first.resumeToken}`,
        "--model=claude-test",
        "--permission-mode=acceptEdits"
      ])
      assert.deepStrictEqual(two?.argv, [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        `--resume=${first.resumeToken}`,
        "--model=claude-test",
        "--permission-mode=acceptEdits"
      ])
      // the message goes on stdin, never on the command line
      assert.deepStrictEqual([one?.message, two?.message], ["Fix the parser", "Two checks fail: fix them"])
    }))

  it.live("a new session id for each conversation; plan turns run in plan mode; extra args on every turn", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const worker = claude(cwd, { args: ["--max-turns=30"] })
      const a = yield* turn(worker, "Plan it", undefined, "plan")
      const b = yield* turn(worker, "Plan it again")
      assert.notStrictEqual(a.resumeToken, b.resumeToken)
      assert.deepStrictEqual(calls(cwd).map((call) => call.argv.slice(5)), [
        ["--model=claude-test", "--max-turns=30", "--permission-mode=plan"],
        ["--model=claude-test", "--max-turns=30", "--permission-mode=acceptEdits"]
      ])
    }))

  it.live("the session id the stream reports is the one resumed next", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const worker = claude(cwd)
      const first = yield* turn(worker, "Fix it")
      const second = yield* turn(worker, "scenario:forked", first.resumeToken)
      assert.strictEqual(second.resumeToken, "6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab")
    }))

  it.live("without a result usage, the messages' usages are summed, each message once", () =>
    Effect.gen(function*() {
      const reply = yield* turn(claude(workspace()), "scenario:no-result-usage")
      // msg_A (10 + 40 + 100 in, 20 out) is sent twice, counted once; msg_B (15 + 0 + 200 in, 5 out)
      assert.deepStrictEqual(reply.usage, { inputTokens: 365, outputTokens: 25 })
    }))

  it.live("output that ends before the result event is an eof WorkerError", () =>
    Effect.gen(function*() {
      const error = yield* failure(turn(claude(workspace()), "scenario:eof"))
      assert.strictEqual(error._tag, "WorkerError")
      assert.strictEqual(error.worker, "claude")
      assert.strictEqual(error.reason, "eof")
      assert.strictEqual(error.exitCode, 0)
    }))

  it.live("a non-zero exit is an exit WorkerError with the code and stderr, the named key redacted", () =>
    Effect.gen(function*() {
      const key = "sk-ant-test-0123456789abcdef"
      process.env.FAKE_API_KEY = key
      try {
        const error = yield* failure(turn(claude(workspace(), { env: ["FAKE_API_KEY"] }), "scenario:exit"))
        assert.strictEqual(error.reason, "exit")
        assert.strictEqual(error.exitCode, 3)
        assert.include(error.message, "exited with code 3")
        assert.include(error.message, "Invalid API key: <redacted>")
        assert.notInclude(error.message, key)
      } finally {
        delete process.env.FAKE_API_KEY
      }
    }))

  it.live("a named key the CLI echoes in its reply is redacted from the reply's text", () =>
    Effect.gen(function*() {
      const key = "sk-ant-test-0123456789abcdef"
      process.env.FAKE_API_KEY = key
      try {
        const reply = yield* turn(claude(workspace(), { env: ["FAKE_API_KEY"] }), "scenario:echo-key")
        assert.strictEqual(reply.text, "The key is <redacted>.")
      } finally {
        delete process.env.FAKE_API_KEY
      }
    }))

  it.live("a result in error is an exit WorkerError", () =>
    Effect.gen(function*() {
      const error = yield* failure(turn(claude(workspace()), "scenario:error-result"))
      assert.strictEqual(error.reason, "exit")
      assert.include(error.message, "error_max_turns")
      assert.include(error.message, "Reached max turns")
    }))

  it.live("a line that is not JSON, or a known event without its documented shape, is a decode WorkerError", () =>
    Effect.gen(function*() {
      const notJson = yield* failure(turn(claude(workspace()), "scenario:not-json"))
      assert.strictEqual(notJson.reason, "decode")
      assert.include(notJson.message, "Welcome to Claude Code!")
      const badUsage = yield* failure(turn(claude(workspace()), "scenario:bad-usage"))
      assert.strictEqual(badUsage.reason, "decode")
      assert.include(badUsage.message, `"result" event`)
    }))

  it.live("the bytes of a line and of a turn are capped", () =>
    Effect.gen(function*() {
      const line = yield* failure(turn(claude(workspace(), { maxLineBytes: 4096 }), "scenario:long-line"))
      assert.strictEqual(line.reason, "decode")
      assert.include(line.message, "a line of the output passed 4096 bytes")
      const total = yield* failure(turn(claude(workspace(), { maxTurnBytes: 2048 }), "Fix it"))
      assert.strictEqual(total.reason, "decode")
      assert.include(total.message, "the output of one turn passed 2048 bytes")
    }))

  it.live("the CLI gets only the allowlisted environment: a secret of this process is absent", () =>
    Effect.gen(function*() {
      process.env.EFFECT_AGENT_TEST_SECRET = "do-not-pass"
      process.env.EFFECT_AGENT_TEST_NAMED = "passed"
      try {
        const cwd = workspace()
        yield* turn(claude(cwd, { env: ["EFFECT_AGENT_TEST_NAMED"] }), "Fix it")
        const env = calls(cwd)[0]?.env ?? {}
        assert.isUndefined(env.EFFECT_AGENT_TEST_SECRET)
        assert.strictEqual(env.EFFECT_AGENT_TEST_NAMED, "passed")
        assert.strictEqual(env.PATH, process.env.PATH)
        const allowed = new Set([...ExternalWorker.defaultEnv, "EFFECT_AGENT_TEST_NAMED"])
        assert.deepStrictEqual(Object.keys(env).filter((name) => !allowed.has(name)), [])
      } finally {
        delete process.env.EFFECT_AGENT_TEST_SECRET
        delete process.env.EFFECT_AGENT_TEST_NAMED
      }
    }))

  it.live("a resume token that is not a session id never reaches the command line", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const error = yield* failure(turn(claude(cwd), "Fix it", "--dangerously-skip-permissions"))
      assert.strictEqual(error.reason, "spawn")
      assert.include(error.message, "not a Claude Code session id")
      assert.deepStrictEqual(calls(cwd), [])
    }))

  it.live("a turn past its timeout is a timeout WorkerError and its process is killed", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const error = yield* failure(turn(claude(cwd, { timeout: "1 second" }), "scenario:hang"))
      assert.strictEqual(error.reason, "timeout")
      const pid = calls(cwd)[0]?.pid ?? 0
      assert.isAbove(pid, 0)
      // killed with its process group before the error returned
      assert.isFalse(isAlive(pid))
    }))

  it.live("a descendant holding the output open does not hold the turn; it is killed with the group", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const started = Date.now()
      const reply = yield* turn(claude(cwd, { timeout: "20 seconds" }), "scenario:background")
      assert.strictEqual(reply.text, "Listing. \n\nDone.")
      assert.isBelow(Date.now() - started, 10_000)
      const background = Number(Fs.readFileSync(Path.join(cwd, "background.pid"), "utf8"))
      assert.isAbove(background, 0)
      assert.isFalse(isAlive(background))
    }))

  it.live("a missing executable or workspace, or options that cannot be right, are spawn WorkerErrors", () =>
    Effect.gen(function*() {
      const missing = yield* failure(turn(claude(workspace(), { executable: "/nonexistent/claude" }), "Fix it"))
      assert.strictEqual(missing.reason, "spawn")
      assert.include(missing.message, "program not found: /nonexistent/claude")
      const cwd = yield* failure(turn(claude("/nonexistent/workspace"), "Fix it"))
      assert.strictEqual(cwd.reason, "spawn")
      assert.include(cwd.message, "the workspace cannot be entered: /nonexistent/workspace")
      const env = yield* failure(turn(claude(workspace(), { env: ["A=B"] }), "Fix it"))
      assert.strictEqual(env.reason, "spawn")
      assert.include(env.message, "env")
      const timeout = yield* failure(turn(claude(workspace(), { timeout: "0 millis" }), "Fix it"))
      assert.include(timeout.message, "timeout")
    }))
})

describe("ExternalWorker.codex", () => {
  const codex = (cwd: string, options?: Partial<ExternalWorker.Options>) =>
    ExternalWorker.codex({ executable: fakeCodex, cwd, model: "gpt-test", ...options })
  const thread = "0199a213-81c0-7800-8aa1-bbab2a035a53"

  it.live("captures the thread id from the stream and resumes it; text and usage from the events", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const worker = codex(cwd)
      assert.strictEqual(worker.name, "codex")
      const first = yield* turn(worker, "Fix the parser")
      assert.strictEqual(first.resumeToken, thread)
      assert.strictEqual(first.text, "I will fix the parser.\n\nDone: the parser is fixed.")
      assert.deepStrictEqual(first.usage, { inputTokens: 1000, outputTokens: 100 })
      const second = yield* turn(worker, "Two checks fail: fix them", first.resumeToken)
      assert.strictEqual(second.resumeToken, thread)
      // the thread's running totals grew from 1000 / 100 to 2000 / 200: this turn used the difference
      assert.deepStrictEqual(second.usage, { inputTokens: 1000, outputTokens: 100 })
      const [one, two] = calls(cwd)
      assert.deepStrictEqual(one?.argv, ["exec", "--json", "--model=gpt-test", "--sandbox=workspace-write", "-"])
      assert.deepStrictEqual(two?.argv, [
        "exec",
        "--json",
        "--model=gpt-test",
        "--sandbox=workspace-write",
        "resume",
        thread,
        "-"
      ])
      assert.deepStrictEqual([one?.message, two?.message], ["Fix the parser", "Two checks fail: fix them"])
    }))

  it.live("a thread resumed by a new worker is counted in full on its first turn, then by growth", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const first = yield* turn(codex(cwd), "Fix it")
      // a new worker (a resumed session) has not seen the thread's totals: 2000 / 200 counted in full
      const worker = codex(cwd)
      const resumed = yield* turn(worker, "Go on", first.resumeToken)
      assert.deepStrictEqual(resumed.usage, { inputTokens: 2000, outputTokens: 200 })
      const next = yield* turn(worker, "Go on", resumed.resumeToken)
      assert.deepStrictEqual(next.usage, { inputTokens: 1000, outputTokens: 100 })
    }))

  it.live("plan turns run read-only", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      yield* turn(codex(cwd), "Plan it", undefined, "plan")
      assert.deepStrictEqual(calls(cwd)[0]?.argv, ["exec", "--json", "--model=gpt-test", "--sandbox=read-only", "-"])
    }))

  it.live("output that ends before turn.completed is an eof WorkerError", () =>
    Effect.gen(function*() {
      const error = yield* failure(turn(codex(workspace()), "scenario:eof"))
      assert.strictEqual(error.worker, "codex")
      assert.strictEqual(error.reason, "eof")
    }))

  it.live("a non-zero exit is an exit WorkerError with the code, the last error event and stderr", () =>
    Effect.gen(function*() {
      const error = yield* failure(turn(codex(workspace()), "scenario:exit"))
      assert.strictEqual(error.reason, "exit")
      assert.strictEqual(error.exitCode, 1)
      assert.include(error.message, "Reconnecting... 1/5")
      assert.include(error.message, "stream disconnected before completion")
      const failed = yield* failure(turn(codex(workspace()), "scenario:failed"))
      assert.strictEqual(failed.reason, "exit")
      assert.include(failed.message, "401 Unauthorized")
    }))

  it.live("the CLI gets only the allowlisted environment", () =>
    Effect.gen(function*() {
      process.env.OPENAI_API_KEY_FOR_TEST = "sk-not-for-the-child"
      try {
        const cwd = workspace()
        yield* turn(codex(cwd), "Fix it")
        const env = calls(cwd)[0]?.env ?? {}
        assert.isUndefined(env.OPENAI_API_KEY_FOR_TEST)
        assert.deepStrictEqual(Object.keys(env).filter((name) => !ExternalWorker.defaultEnv.includes(name)), [])
      } finally {
        delete process.env.OPENAI_API_KEY_FOR_TEST
      }
    }))

  it.live("a resume token that could be an option never reaches the command line", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const error = yield* failure(turn(codex(cwd), "Fix it", "--dangerously-bypass-approvals-and-sandbox"))
      assert.strictEqual(error.reason, "spawn")
      assert.deepStrictEqual(calls(cwd), [])
    }))

  it.live("a turn past its timeout is a timeout WorkerError and its process is killed", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const error = yield* failure(turn(codex(cwd, { timeout: "5 seconds" }), "scenario:hang"))
      assert.strictEqual(error.reason, "timeout")
      const pid = calls(cwd)[0]?.pid ?? 0
      assert.isAbove(pid, 0)
      assert.isFalse(isAlive(pid))
    }))
})

describe("ExternalWorker.cursor", () => {
  const cursor = (cwd: string, options?: Partial<ExternalWorker.Options>) =>
    ExternalWorker.cursor({ executable: fakeCursor, cwd, model: "sonnet-4", ...options })
  const chat = "6164d06a-2b1f-4c8e-9d3a-5e7f80a1b2c3"

  it.live("the first turn omits --resume and keeps the chat id the stream reports; the next resumes it", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const worker = cursor(cwd)
      assert.strictEqual(worker.name, "cursor")
      const first = yield* turn(worker, "Fix the parser")
      assert.strictEqual(first.resumeToken, chat)
      // the result's whole reply: the deltas and their repeat are not summed into it
      assert.strictEqual(first.text, "Running the tests.Done: the tests pass.")
      // input includes the cache reads and writes: 1000 + 300 + 20; no cost is reported
      assert.deepStrictEqual(first.usage, { inputTokens: 1320, outputTokens: 50 })
      assert.isUndefined(first.costUsd)
      const second = yield* turn(worker, "Two checks fail: fix them", first.resumeToken)
      assert.strictEqual(second.resumeToken, chat)
      const [one, two] = calls(cwd)
      assert.deepStrictEqual(one?.argv, ["-p", "--output-format", "stream-json", "--model=sonnet-4", "--force"])
      assert.deepStrictEqual(two?.argv, [
        "-p",
        "--output-format",
        "stream-json",
        "--resume",
        chat,
        "--model=sonnet-4",
        "--force"
      ])
      // the message goes on stdin, never on the command line
      assert.deepStrictEqual([one?.message, two?.message], ["Fix the parser", "Two checks fail: fix them"])
    }))

  it.live("plan turns run in Cursor's read-only plan mode; extra args on every turn", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      yield* turn(cursor(cwd, { args: ["--trust"] }), "Plan it", undefined, "plan")
      assert.deepStrictEqual(calls(cwd)[0]?.argv, [
        "-p",
        "--output-format",
        "stream-json",
        "--model=sonnet-4",
        "--trust",
        "--mode=plan"
      ])
    }))

  it.live("a result without usage counts zero tokens rather than failing the turn", () =>
    Effect.gen(function*() {
      const reply = yield* turn(cursor(workspace()), "scenario:no-usage")
      assert.deepStrictEqual(reply.usage, { inputTokens: 0, outputTokens: 0 })
      assert.strictEqual(reply.resumeToken, chat)
    }))

  it.live("output that ends before the result event is an eof WorkerError", () =>
    Effect.gen(function*() {
      const error = yield* failure(turn(cursor(workspace()), "scenario:eof"))
      assert.strictEqual(error._tag, "WorkerError")
      assert.strictEqual(error.worker, "cursor")
      assert.strictEqual(error.reason, "eof")
      assert.strictEqual(error.exitCode, 0)
    }))

  it.live("a non-zero exit is an exit WorkerError with the code and stderr; a result in error is one too", () =>
    Effect.gen(function*() {
      const error = yield* failure(turn(cursor(workspace()), "scenario:exit"))
      assert.strictEqual(error.reason, "exit")
      assert.strictEqual(error.exitCode, 1)
      assert.include(error.message, "exited with code 1")
      assert.include(error.message, "Authentication required")
      const failed = yield* failure(turn(cursor(workspace()), "scenario:error-result"))
      assert.strictEqual(failed.reason, "exit")
      assert.include(failed.message, "The model refused the request.")
    }))

  it.live("a line that is not JSON, or a known event without its documented shape, is a decode WorkerError", () =>
    Effect.gen(function*() {
      const notJson = yield* failure(turn(cursor(workspace()), "scenario:not-json"))
      assert.strictEqual(notJson.reason, "decode")
      assert.include(notJson.message, "Cursor Agent is starting")
      const badUsage = yield* failure(turn(cursor(workspace()), "scenario:bad-usage"))
      assert.strictEqual(badUsage.reason, "decode")
      assert.include(badUsage.message, `"result" event`)
      // a chat id that would read as an option or a relative index (`--resume -1`) is refused as it arrives
      const badSession = yield* failure(turn(cursor(workspace()), "scenario:bad-session"))
      assert.strictEqual(badSession.reason, "decode")
      assert.include(badSession.message, `"system" event`)
    }))

  it.live("the CLI gets only the allowlisted environment; a named key reaches it", () =>
    Effect.gen(function*() {
      process.env.EFFECT_AGENT_TEST_SECRET = "do-not-pass"
      process.env.CURSOR_API_KEY = "key-for-cursor-0123456789"
      try {
        const cwd = workspace()
        yield* turn(cursor(cwd, { env: ["CURSOR_API_KEY"] }), "Fix it")
        const env = calls(cwd)[0]?.env ?? {}
        assert.isUndefined(env.EFFECT_AGENT_TEST_SECRET)
        assert.strictEqual(env.CURSOR_API_KEY, "key-for-cursor-0123456789")
        const allowed = new Set([...ExternalWorker.defaultEnv, "CURSOR_API_KEY"])
        assert.deepStrictEqual(Object.keys(env).filter((name) => !allowed.has(name)), [])
      } finally {
        delete process.env.EFFECT_AGENT_TEST_SECRET
        delete process.env.CURSOR_API_KEY
      }
    }))

  it.live("a resume token that could be an option or an index never reaches the command line", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      for (const token of ["--force", "-1"]) {
        const error = yield* failure(turn(cursor(cwd), "Fix it", token))
        assert.strictEqual(error.reason, "spawn")
        assert.include(error.message, "not a Cursor chat id")
      }
      assert.deepStrictEqual(calls(cwd), [])
    }))

  it.live("the default executable is cursor-agent; a turn past its timeout is killed with its group", () =>
    Effect.gen(function*() {
      const missing = yield* failure(turn(ExternalWorker.cursor({ cwd: workspace() }), "Fix it"))
      assert.strictEqual(missing.reason, "spawn")
      // the test process's PATH has no cursor-agent
      assert.include(missing.message, "program not found: cursor-agent")
      const cwd = workspace()
      const error = yield* failure(turn(cursor(cwd, { timeout: "1 second" }), "scenario:hang"))
      assert.strictEqual(error.reason, "timeout")
      const pid = calls(cwd)[0]?.pid ?? 0
      assert.isAbove(pid, 0)
      assert.isFalse(isAlive(pid))
    }))
})
