/**
 * `effect-agent run --worker cursor`: the command drives Cursor's CLI (a fake
 * `cursor-agent` on PATH, test/fixtures/workers/fake-cursor.mjs, that records
 * its argv, environment and message), keeps the chat id it reports as the
 * checkpoint's resume token, and a resumed session continues that chat with
 * `--resume <chat id>` (in the test process: each a run of the same command,
 * see inProcess.ts).
 */
import { assert, describe } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { runCommand } from "./inProcess.ts"
import { live, scripted, scriptedArgs, scriptedTask, tempDir } from "./support.ts"

const fakeCursor = fileURLToPath(new URL("../fixtures/workers/fake-cursor.mjs", import.meta.url))
const chat = "6164d06a-2b1f-4c8e-9d3a-5e7f80a1b2c3"

/** The calls the fake recorded in the workspace. */
const calls = (
  cwd: string
): ReadonlyArray<{ argv: Array<string>; env: Record<string, string>; message: string; method?: string; params?: any }> => {
  const file = Path.join(cwd, "fake-calls.jsonl")
  if (!Fs.existsSync(file)) return []
  return Fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))
}

/**
 * A `cursor-agent` on this process's PATH while `effect` runs (the worker's environment is this process's,
 * allowlisted): a shell script that runs the fake with this node.
 */
const withCursorOnPath = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const bin = yield* tempDir
    yield* fs.writeFileString(`${bin}/cursor-agent`, `#!/bin/sh\nexec "${process.execPath}" "${fakeCursor}" "$@"\n`)
    yield* fs.chmod(`${bin}/cursor-agent`, 0o755)
    const path = process.env.PATH
    return yield* Effect.acquireUseRelease(
      Effect.sync(() => void (process.env.PATH = `${bin}:${path}`)),
      () => effect,
      () => Effect.sync(() => void (process.env.PATH = path))
    )
  })

describe("effect-agent run --worker cursor", () => {
  live("the first turn starts a chat, the checkpoint keeps its id, and --resume continues it with --resume <id>", () =>
    withCursorOnPath(Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* scripted([])
      const session = `${yield* tempDir}/session`
      // passes once the worker has had two turns
      const check = `test "$(wc -l < fake-calls.jsonl)" -ge 2`
      process.env.CURSOR_API_KEY = "cursor-key-0123456789"
      try {
        const first = yield* runCommand(
          scriptedArgs(dir, "--json", "--check", check, "--worker", "cursor", "--max-turns", "1", "--session-dir", session),
          { cwd: dir }
        )
        assert.strictEqual(first.code, 10, first.stderr)
        assert.strictEqual(JSON.parse(first.stdout).outcome._tag, "Unverified")
        const [one] = calls(dir)
        assert.deepStrictEqual(one?.argv, ["-p", "--output-format", "stream-json", "--force"])
        assert.strictEqual(one?.message, "What is in a.txt?")
        // the default key's variable reaches the CLI, nothing else of this process's secrets does
        assert.strictEqual(one?.env.CURSOR_API_KEY, "cursor-key-0123456789")
        // the chat id is in the session's checkpoint (its head or journal)
        const saved = yield* fs.readDirectory(`${session}/checkpoint`)
        const texts = yield* Effect.forEach(saved, (name) => fs.readFileString(`${session}/checkpoint/${name}`))
        assert.isTrue(texts.some((text) => text.includes(`"resumeToken":"${chat}"`)), texts.join("\n"))

        const resumed = yield* runCommand(
          ["run", "--resume", session, "--sandbox", "local", "--worker", "cursor", "--max-turns", "2", "--json"],
          { cwd: dir }
        )
        assert.strictEqual(resumed.code, 0, resumed.stderr)
        assert.deepStrictEqual(JSON.parse(resumed.stdout).outcome, { _tag: "Converged", turns: 2 })
        const [, two] = calls(dir)
        assert.deepStrictEqual(two?.argv, ["-p", "--output-format", "stream-json", "--resume", chat, "--force"])
        // the checks' feedback went to the chat, not the task again
        assert.notStrictEqual(two?.message, "What is in a.txt?")
        assert.strictEqual(calls(dir).length, 2)
      } finally {
        delete process.env.CURSOR_API_KEY
      }
    })))

  live("a cursor turn that breaks the protocol is a WorkerError (decode), exit 20", () =>
    withCursorOnPath(Effect.gen(function*() {
      const dir = yield* scripted([])
      const out = yield* runCommand(
        scriptedTask(dir, "scenario:not-json", "--json", "--check", "true", "--worker", "cursor"),
        { cwd: dir }
      )
      assert.strictEqual(out.code, 20, out.stderr)
      const error = JSON.parse(out.stdout).error
      assert.strictEqual(error._tag, "WorkerError")
      assert.include(error.message, "a line that is not a JSON event")
    })))
})

describe("effect-agent run --worker acp", () => {
  const fakeAgent = fileURLToPath(new URL("../fixtures/workers/fake-acp-agent.mjs", import.meta.url))
  const agentCommand = `"${process.execPath}" '${fakeAgent}'`
  /** What the agent was sent, by method. */
  const methods = (cwd: string) => calls(cwd).map((call) => call.method)

  live("the agent of --worker-command opens a session; a resumed session loads it, named again on --resume", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([])
      const session = `${yield* tempDir}/session`
      // passes once the agent has had two prompts
      const check = `test "$(grep -c session/prompt fake-calls.jsonl)" -ge 2`
      const first = yield* runCommand(
        scriptedArgs(
          dir,
          "--json",
          "--check",
          check,
          "--worker",
          "acp",
          "--worker-command",
          agentCommand,
          "--max-turns",
          "1",
          "--session-dir",
          session
        ),
        { cwd: dir }
      )
      assert.strictEqual(first.code, 10, first.stderr)
      assert.deepStrictEqual(methods(dir), ["initialize", "session/new", "session/prompt"])

      // the agent is not kept in the session: a resume without it is refused, with the hint
      const bare = yield* runCommand(["run", "--resume", session, "--sandbox", "local", "--worker", "acp"], { cwd: dir })
      assert.strictEqual(bare.code, 22, bare.stderr)
      assert.include(bare.stderr, "--worker acp needs --worker-command")

      const resumed = yield* runCommand(
        [
          "run",
          "--resume",
          session,
          "--sandbox",
          "local",
          "--worker",
          "acp",
          "--worker-command",
          agentCommand,
          "--max-turns",
          "2",
          "--json"
        ],
        { cwd: dir }
      )
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      assert.deepStrictEqual(JSON.parse(resumed.stdout).outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(methods(dir).slice(3), ["initialize", "session/load", "session/prompt"])
      assert.strictEqual(calls(dir)[4]?.params.sessionId, "sess-1")
    }))

  live("--jsonl-format ynh: session_start names the worker as backend, and no model of ours (the agent runs its own)", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([])
      const out = yield* runCommand(
        scriptedArgs(dir, "--check", "true", "--worker", "acp", "--worker-command", agentCommand, "--jsonl-format", "ynh", "--emit-jsonl", "-"),
        { cwd: dir }
      )
      assert.strictEqual(out.code, 0, out.stderr)
      const lines = out.stdout.trim().split("\n").map((line) => JSON.parse(line))
      const start = lines[0]
      assert.strictEqual(start.type, "session_start")
      assert.strictEqual(start.data.backend, "acp")
      assert.notProperty(start.data, "model")
      assert.notProperty(start.data, "provider")
      assert.strictEqual(lines.at(-1).type, "session_end")
    }))

  live("--worker acp without --worker-command, or --worker-command without --worker acp, is refused (22)", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([])
      const missing = yield* runCommand(scriptedArgs(dir, "--check", "true", "--worker", "acp"), { cwd: dir })
      assert.strictEqual(missing.code, 22, missing.stderr)
      assert.include(missing.stderr, "--worker acp needs --worker-command")
      const stray = yield* runCommand(
        scriptedArgs(dir, "--check", "true", "--worker", "claude", "--worker-command", "gemini --experimental-acp"),
        { cwd: dir }
      )
      assert.strictEqual(stray.code, 22, stray.stderr)
      assert.include(stray.stderr, "--worker-command: only --worker acp runs an agent command")
      const open = yield* runCommand(
        scriptedArgs(dir, "--check", "true", "--worker", "acp", "--worker-command", `"gemini --acp`),
        { cwd: dir }
      )
      assert.strictEqual(open.code, 22, open.stderr)
      assert.include(open.stderr, "a quote is not closed")
    }))

  live("permission requests follow --approve: rejected unless all; an agent exit mid-turn is a WorkerError, exit 20", () =>
    Effect.gen(function*() {
      for (const [approve, answer] of [["none", "permission: no"], ["all", "permission: yes"]] as const) {
        const dir = yield* scripted([])
        const out = yield* runCommand(
          scriptedTask(
            dir,
            "scenario:permission",
            "--approve",
            approve,
            "--json",
            "--check",
            "true",
            "--worker",
            "acp",
            "--worker-command",
            agentCommand
          ),
          { cwd: dir }
        )
        assert.strictEqual(out.code, 0, out.stderr)
        assert.strictEqual(JSON.parse(out.stdout).answer, answer)
      }
      const dir = yield* scripted([])
      const exited = yield* runCommand(
        scriptedTask(dir, "scenario:exit", "--json", "--check", "true", "--worker", "acp", "--worker-command", agentCommand),
        { cwd: dir }
      )
      assert.strictEqual(exited.code, 20, exited.stderr)
      const error = JSON.parse(exited.stdout).error
      assert.strictEqual(error._tag, "WorkerError")
      assert.include(error.message, "exited with code 3")
    }))
})
