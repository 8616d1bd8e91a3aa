/**
 * ExternalWorker.acp against a real ACP agent over real stdio: a small agent
 * written with the SDK's own agent side (test/fixtures/workers/
 * fake-acp-agent.mjs) that records every request and notification it gets.
 * The first turn opens a session in the workspace, a resumed one loads it (its
 * replayed history is not the reply), permission requests are answered by the
 * policy, the client offers no fs or terminal, a cancel sends session/cancel
 * and kills the agent, and a malformed message or an agent that exits mid-turn
 * is a typed WorkerError.
 */
import { NodeServices } from "@effect/platform-node"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import type { ChildProcessSpawner } from "effect/process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { ExternalWorker, type Worker } from "effect-agent/supervisor"
import { isAlive } from "../sandbox/fixtures.ts"

const agent = fileURLToPath(new URL("../fixtures/workers/fake-acp-agent.mjs", import.meta.url))

const workspaces: Array<string> = []
beforeAll(() => Fs.chmodSync(agent, 0o755))
afterAll(() => {
  for (const dir of workspaces) Fs.rmSync(dir, { recursive: true, force: true })
})

const workspace = (): string => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-acp-"))
  workspaces.push(dir)
  return dir
}

interface Call {
  readonly method: string
  readonly params: any
  readonly argv: ReadonlyArray<string>
  readonly pid: number
  readonly env: Record<string, string>
}

/** What the agent was sent, in order. */
const calls = (cwd: string): ReadonlyArray<Call> => {
  const file = Path.join(cwd, "fake-calls.jsonl")
  if (!Fs.existsSync(file)) return []
  return Fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))
}
const methods = (cwd: string) => calls(cwd).map((call) => call.method)

const worker = (cwd: string, options?: Partial<ExternalWorker.AcpOptions>) =>
  ExternalWorker.acp({ command: process.execPath, args: [agent], cwd, ...options })

const turn = (
  w: Worker.Worker<ChildProcessSpawner.ChildProcessSpawner>,
  message: string,
  resumeToken?: string,
  phase: "plan" | "act" = "act"
) => w.turn({ message, phase, resumeToken }).pipe(Effect.provide(NodeServices.layer))

describe("ExternalWorker.acp", () => {
  it.live("the first turn initializes and opens a session in the workspace; the prompt's chunks are the reply", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const w = worker(cwd)
      assert.strictEqual(w.name, "acp")
      const reply = yield* turn(w, "Fix the parser")
      assert.strictEqual(reply.text, "Done: Fix the parser")
      assert.strictEqual(reply.resumeToken, "sess-1")
      // input includes the cache reads and writes: 100 + 40 + 10
      assert.deepStrictEqual(reply.usage, { inputTokens: 150, outputTokens: 30 })
      assert.closeTo(reply.costUsd ?? 0, 0.02, 1e-9)
      assert.deepStrictEqual(methods(cwd), ["initialize", "session/new", "session/prompt"])
      const [initialize, opened, prompt] = calls(cwd)
      // no fs and no terminal for the agent: it works with its own tools
      assert.deepStrictEqual(initialize?.params.clientCapabilities.fs, { readTextFile: false, writeTextFile: false })
      assert.strictEqual(initialize?.params.clientCapabilities.terminal, false)
      assert.deepStrictEqual(opened?.params, { cwd, mcpServers: [] })
      assert.deepStrictEqual(prompt?.params, { sessionId: "sess-1", prompt: [{ type: "text", text: "Fix the parser" }] })
    }))

  it.live("a later turn (a new process, as after a resume) loads the session; its replay is not the reply", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const first = yield* turn(worker(cwd), "Fix the parser")
      // a new worker: the resumed run of a supervised session
      const second = yield* turn(worker(cwd), "Two checks fail: fix them", first.resumeToken)
      assert.strictEqual(second.text, "Done: Two checks fail: fix them")
      assert.strictEqual(second.resumeToken, "sess-1")
      // the session's cost grew by 0.02 over the turn (0.02 before, 0.04 after)
      assert.closeTo(second.costUsd ?? 0, 0.02, 1e-9)
      assert.deepStrictEqual(methods(cwd), [
        "initialize",
        "session/new",
        "session/prompt",
        "initialize",
        "session/load",
        "session/prompt"
      ])
      assert.deepStrictEqual(calls(cwd)[4]?.params, { sessionId: "sess-1", cwd, mcpServers: [] })
    }))

  it.live("an agent that cannot load sessions gets a new one", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const w = worker(cwd, { args: [agent, "--no-load"] })
      const first = yield* turn(w, "Fix it")
      const second = yield* turn(w, "Go on", first.resumeToken)
      assert.strictEqual(second.resumeToken, "sess-2")
      assert.notInclude(methods(cwd), "session/load")
    }))

  it.live("permission requests are rejected by default and in plan turns; allowed (once) only when act turns approve all", () =>
    Effect.gen(function*() {
      const denied = yield* turn(worker(workspace()), "scenario:permission")
      assert.strictEqual(denied.text, "permission: no")
      const plan = yield* turn(worker(workspace(), { approve: "all" }), "scenario:permission", undefined, "plan")
      assert.strictEqual(plan.text, "permission: no")
      const allowed = yield* turn(worker(workspace(), { approve: "all" }), "scenario:permission")
      assert.strictEqual(allowed.text, "permission: yes")
    }))

  it.live("allowing is once at most: with only allow_always offered, approve all still does not allow it", () =>
    Effect.gen(function*() {
      const reply = yield* turn(worker(workspace(), { approve: "all" }), "scenario:always-only")
      assert.strictEqual(reply.text, "permission: cancelled")
    }))

  it.live("a session the agent can no longer load is started anew, not failed on every resume", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const first = yield* turn(worker(cwd), "Fix it")
      assert.strictEqual(first.resumeToken, "sess-1")
      Fs.rmSync(Path.join(cwd, "fake-sessions.json"))
      const second = yield* turn(worker(cwd), "Go on", first.resumeToken)
      assert.strictEqual(second.text, "Done: Go on")
      assert.strictEqual(second.resumeToken, "sess-1")
      assert.deepStrictEqual(methods(cwd).slice(-4), ["initialize", "session/load", "session/new", "session/prompt"])
    }))

  it.live("attack: an answer to no request we sent, or a method that is not a name, is a decode WorkerError before the SDK prints it", () =>
    Effect.gen(function*() {
      const stray = yield* Effect.flip(turn(worker(workspace()), "scenario:stray-answer"))
      assert.strictEqual(stray.reason, "decode")
      assert.include(stray.message, "an answer to no request this worker sent")
      const odd = yield* Effect.flip(turn(worker(workspace()), "scenario:odd-method"))
      assert.strictEqual(odd.reason, "decode")
      assert.include(odd.message, "a message whose method is not a method name")
    }))

  it.live("the agent's fs requests are refused: the client offers no file system", () =>
    Effect.gen(function*() {
      const reply = yield* turn(worker(workspace()), "scenario:read-file")
      // JSON-RPC "method not found"
      assert.strictEqual(reply.text, "read refused: -32601")
    }))

  it.live("a cancel of the turn sends session/cancel, ends the turn and kills the agent", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const fiber = yield* Effect.forkChild(turn(worker(cwd), "scenario:hang"))
      // the prompt has reached the agent
      yield* Effect.try(() => {
        if (!methods(cwd).includes("session/prompt")) throw new Error("not yet")
      }).pipe(Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 1500 }))
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(methods(cwd).slice(-2), ["session/prompt", "session/cancel"])
      assert.deepStrictEqual(calls(cwd).at(-1)?.params, { sessionId: "sess-1" })
      const pid = calls(cwd)[0]?.pid ?? 0
      assert.isAbove(pid, 0)
      assert.isFalse(isAlive(pid))
    }))

  it.live("a line that is not a JSON-RPC message is a decode WorkerError", () =>
    Effect.gen(function*() {
      const cwd = workspace()
      const error = yield* Effect.flip(turn(worker(cwd), "scenario:malformed"))
      assert.strictEqual(error._tag, "WorkerError")
      assert.strictEqual(error.worker, "acp")
      assert.strictEqual(error.reason, "decode")
      assert.include(error.message, "a line that is not a JSON-RPC message: Loading model weights...")
      assert.isFalse(isAlive(calls(cwd)[0]?.pid ?? 0))
    }))

  it.live("an agent that exits in the middle of a turn is an exit WorkerError with its code", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(turn(worker(workspace()), "scenario:exit"))
      assert.strictEqual(error.reason, "exit")
      assert.strictEqual(error.exitCode, 3)
      assert.include(error.message, "exited with code 3 before the turn ended")
    }))

  it.live("the agent gets only the allowlisted environment; a missing program is a spawn WorkerError", () =>
    Effect.gen(function*() {
      process.env.EFFECT_AGENT_TEST_SECRET = "do-not-pass"
      try {
        const cwd = workspace()
        yield* turn(worker(cwd), "Fix it")
        const env = calls(cwd)[0]?.env ?? {}
        assert.isUndefined(env.EFFECT_AGENT_TEST_SECRET)
        assert.deepStrictEqual(Object.keys(env).filter((name) => !ExternalWorker.defaultEnv.includes(name)), [])
      } finally {
        delete process.env.EFFECT_AGENT_TEST_SECRET
      }
      const missing = yield* Effect.flip(turn(ExternalWorker.acp({ command: "/nonexistent/agent", cwd: workspace() }), "Hi"))
      assert.strictEqual(missing.reason, "spawn")
      assert.include(missing.message, "program not found: /nonexistent/agent")
    }))
})
