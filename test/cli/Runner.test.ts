/**
 * Runner: `effect-agent run` as a real process, built as the package is
 * built: against a local server replaying recorded provider streams, stopped
 * by a cancel line, SIGTERM or the end of stdin, with garbage on stdin. The
 * exit code of every other ending and the errors for invalid flags and
 * script files come from runs of the same command in the test process (see
 * inProcess.ts), a process each costing half a second of CPU to start; the
 * process's own exit code is the one these report (ExitCode.fromExit).
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem, Schedule } from "effect"
import { type AgentEvent, Message } from "effect-agent"
import { HttpServerResponse } from "effect/http"
import * as TestServer from "../providers/TestServer.ts"
import { builtCommand } from "./build.ts"
import { runCommand, startCommand } from "./inProcess.ts"
import {
  chatAnswer,
  chatToolCall,
  events,
  live,
  noEscapes,
  readEvents,
  replaying,
  scripted,
  scriptedArgs,
  spawn,
  tempDir
} from "./support.ts"

let cli = ""
beforeAll(async () => {
  cli = await builtCommand()
}, 240_000)

const lastAssistant = (trajectory: ReadonlyArray<AgentEvent.AgentEvent>) => {
  const end = trajectory.at(-1)
  const messages = end?._tag === "AgentEnd" ? end.result?.state.messages ?? [] : []
  return messages.filter((message) => message.role === "assistant").at(-1)
}

describe.concurrent("against a local server replaying recorded provider streams", () => {
  live("OpenAI Chat: a tool call, then an answer; stdout is the answer, the session's trajectory has the run, exit 0", () =>
    Effect.gen(function*() {
      const server = yield* replaying(chatToolCall, chatAnswer)
      const dir = yield* tempDir
      const key = "sk-test-cli-4f9c2a7e"
      const out = yield* runCommand([
        "run",
        "--provider",
        "openai",
        "--base-url",
        server.baseUrl,
        "--model",
        "gpt-4o",
        "--api-key-env",
        "MY_KEY",
        "--sandbox",
        "none",
        "--tools",
        "none",
        "--session-dir",
        `${dir}/session`,
        "--system",
        "Be brief.",
        "--task",
        "What's the weather in New York City?"
      ], { cwd: dir, env: { MY_KEY: key, FORCE_COLOR: "1" } })
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(
        out.stdout,
        "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend checking a reliable weather website or a weather app.\n"
      )
      // the two requests: the second answers the call (an unknown tool: an error result the model reads)
      assert.strictEqual(server.requests.length, 2)
      assert.strictEqual(server.requests[0]!.headers.authorization, `Bearer ${key}`)
      assert.strictEqual(server.requests[0]!.body.model, "gpt-4o")
      assert.deepStrictEqual(server.requests[0]!.body.messages.slice(0, 2), [
        { role: "system", content: "Be brief." },
        { role: "user", content: "What's the weather in New York City?" }
      ])
      const tool = server.requests[1]!.body.messages.find((m: { role: string }) => m.role === "tool")
      assert.strictEqual(tool.tool_call_id, "call_4XzlGBLtUe9dy3GVNV4jhq7h")
      assert.include(tool.content, "Unknown tool \"get_weather\"")
      // the trajectory
      const trajectory = yield* readEvents(`${dir}/session/trajectory.ndjson`)
      const tags = trajectory.map((event) => event._tag)
      assert.strictEqual(tags[0], "AgentStart")
      assert.strictEqual(tags.filter((tag) => tag === "TurnStart").length, 2)
      const ended = trajectory.find((event) => event._tag === "ToolExecutionEnd")
      assert.deepStrictEqual(
        ended?._tag === "ToolExecutionEnd" && [ended.toolName, ended.toolCallId, ended.result.isError],
        ["get_weather", "call_4XzlGBLtUe9dy3GVNV4jhq7h", true]
      )
      const end = trajectory.at(-1)
      assert.deepStrictEqual(end?._tag === "AgentEnd" && end.outcome, { _tag: "Completed" })
      assert.isTrue(tags.includes("CheckpointSaved"))
      // the log on stderr: not a terminal, so no escape codes (FORCE_COLOR aside)
      noEscapes(out.stdout)
      noEscapes(out.stderr)
      assert.match(out.stderr, /── turn 1\n/)
      assert.match(out.stderr, /✗ get_weather \d+ ms → Unknown tool "get_weather"/)
      assert.match(out.stderr, /■ Completed\n/)
      assert.notInclude(out.stderr, key)
    }))

  for (
    const [provider, first, second, env] of [
      [
        "anthropic",
        "anthropic/thinking-plus-tool-use_claude-sonnet-4.sse",
        "anthropic/simple-text_claude-sonnet-4.sse",
        "ANTHROPIC_API_KEY"
      ],
      [
        "openai-responses",
        "openai-responses/reasoning-summary-plus-tool_gpt-5.sse",
        "openai-responses/simple-text_gpt-4o.sse",
        "OPENAI_API_KEY"
      ]
    ] as const
  ) {
    live(`${provider}: reasoning and a tool call, then an answer; --json gives the result, --emit-jsonl the events`, () =>
      Effect.gen(function*() {
        const server = yield* replaying(first, second)
        const dir = yield* tempDir
        const out = yield* runCommand([
          "run",
          "--provider",
          provider,
          "--base-url",
          server.baseUrl,
          "--sandbox",
          "none",
          "--tools",
          "none",
          "--json",
          "--quiet",
          "--emit-jsonl",
          "events.jsonl",
          "--task",
          "Weather in Paris?"
        ], { cwd: dir, env: { [env]: "sk-test-cli-key" } })
        assert.strictEqual(out.code, 0, out.stderr)
        assert.strictEqual(out.stderr, "")
        const result = JSON.parse(out.stdout)
        const trajectory = yield* readEvents(`${dir}/events.jsonl`)
        assert.strictEqual(server.requests.length, 2)
        assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
        assert.strictEqual(result.exitCode, 0)
        assert.strictEqual(result.turns, 2)
        assert.include(result.answer, "Olá")
        assert.strictEqual(result.answer, Message.textOf(lastAssistant(trajectory)!))
        const reasoning = trajectory.filter((e) => e._tag === "MessageUpdate" && e.delta.type === "reasoning")
        assert.isAbove(reasoning.length, 0)
        assert.isTrue(trajectory.some((e) => e._tag === "ToolExecutionEnd" && e.toolName === "weather" && e.result.isError))
        assert.deepStrictEqual(result.usage, (trajectory.at(-1) as AgentEvent.Of<"AgentEnd">).result?.usage)
      }))
  }

  live("a provider failure (401) exits 20 and says what failed, without the key", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() =>
        Effect.orDie(HttpServerResponse.json({ error: { message: "Incorrect API key provided: sk-test-****", type: "invalid_request_error" } }, {
          status: 401
        }))
      )
      const dir = yield* tempDir
      const out = yield* runCommand([
        "run",
        "--base-url",
        server.baseUrl,
        "--sandbox",
        "none",
        "--tools",
        "none",
        "--json",
        "--task",
        "hi"
      ], { cwd: dir, env: { OPENAI_API_KEY: "sk-test-secret-key-123" } })
      assert.strictEqual(out.code, 20, out.stderr)
      const result = JSON.parse(out.stdout)
      assert.strictEqual(result.exitCode, 20)
      assert.strictEqual(result.error._tag, "ModelError")
      assert.match(result.error.message, /^model call failed at turn 1: /)
      assert.include(out.stderr, "■ failed: model call failed at turn 1")
      assert.notInclude(out.stdout + out.stderr, "sk-test-secret-key-123")
    }))
})

describe.concurrent("exit codes, each from a real run (in the test process, but for the signals and stdin)", () => {
  const toolTurn = (usage: object = {}, delay?: number) => ({
    toolCalls: [{ name: "read_file", params: { path: "a.txt" } }],
    usage,
    ...(delay === undefined ? {} : { delay })
  })

  const cases: ReadonlyArray<
    readonly [name: string, turns: ReadonlyArray<unknown>, flags: ReadonlyArray<string>, code: number, outcome: string]
  > = [
    ["0: completed", [toolTurn(), { text: "It says hello world." }], [], 0, "Completed"],
    [
      "0: wrapped up (asked to finish before the cap, and did)",
      // a cap of 5 asks for the wrap-up after turn 4 (its grace window is a quarter of it)
      [toolTurn(), toolTurn(), { toolCalls: [{ name: "list_files", params: {} }] }, toolTurn(), { text: "Done early." }],
      ["--max-turns", "5"],
      0,
      "WrappedUp"
    ],
    ["10: the turn cap", [toolTurn(), toolTurn()], ["--max-turns", "1"], 10, "MaxTurns"],
    ["11: the token budget", [toolTurn({ input: 900, output: 200 }), toolTurn()], ["--max-tokens", "1000"], 11, "BudgetExceeded"],
    ["12: the wall-clock budget", [toolTurn({}, 1200), toolTurn()], ["--max-wall", "1s"], 12, "BudgetExceeded"],
    ["19: the cost budget", [toolTurn({ cost: 0.02 }), toolTurn()], ["--max-cost", "0.01"], 19, "BudgetExceeded"],
    ["13: stuck in a loop", [toolTurn(), toolTurn(), toolTurn(), toolTurn(), toolTurn()], [], 13, "LoopDetected"],
    ["20: the model fails", [toolTurn({ input: 40, output: 5 }), { fail: "the model is down" }], [], 20, "failed"]
  ]
  for (const [name, turns, flags, code, outcome] of cases) {
    live(name, () =>
      Effect.gen(function*() {
        const dir = yield* scripted(turns)
        const out = yield* runCommand(scriptedArgs(dir, "--json", ...flags), { cwd: dir })
        assert.strictEqual(out.code, code, out.stderr)
        const result = JSON.parse(out.stdout)
        assert.strictEqual(result.exitCode, code)
        assert.strictEqual(result.outcome?._tag ?? "failed", outcome)
        if (outcome === "WrappedUp") {
          assert.strictEqual(result.answer, "Done early.")
          assert.match(out.stderr, /■ WrappedUp: the model was asked to wrap up \(turn limit or budget\) and delivered its final answer/)
        }
        if (code === 20) {
          assert.strictEqual(result.error.message, "model call failed at turn 2: the model is down")
          // the figures of the turns before the failure
          assert.deepStrictEqual([result.turns, result.usage.input, result.usage.output], [1, 40, 5])
          assert.match(result.runId, /^[0-9a-f-]{36}$/)
        }
      }))
  }

  live("30: a cancel line on stdin ends the run at once", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "Thinking very hard...", hang: true }])
      const proc = yield* startCommand(scriptedArgs(dir, "--emit-jsonl", "-"), { cwd: dir })
      yield* proc.waitFor((line) => line.includes(`"delta":"hard..."`))
      yield* proc.send(`{"type":"cancel","reason":"taking too long"}`)
      const out = yield* proc.exit
      assert.strictEqual(out.code, 30, out.stderr)
      const end = (yield* events(out.stdout)).at(-1)
      assert.deepStrictEqual(end?._tag === "AgentEnd" && end.outcome, { _tag: "Cancelled", reason: "taking too long" })
      assert.include(out.stderr, "■ Cancelled: taking too long")
    }))

  live("30: SIGTERM without a session: nothing to resume; --json still reports", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* scripted([{ text: "Thinking...", hang: true }])
      // the events outside the workspace, where the agent cannot replace them
      const events = `${yield* tempDir}/events.jsonl`
      const proc = yield* spawn(cli, scriptedArgs(dir, "--json", "--emit-jsonl", events), { cwd: dir })
      // the reply has started streaming
      yield* fs.readFileString(events).pipe(
        Effect.orElseSucceed(() => ""),
        Effect.repeat({ until: (text) => text.includes(`"_tag":"MessageUpdate"`), schedule: Schedule.spaced("20 millis") }),
        Effect.timeout("30 seconds")
      )
      yield* proc.signal("SIGTERM")
      const out = yield* proc.exit
      assert.strictEqual(out.code, 30, out.stderr)
      assert.include(out.stderr, "effect-agent: interrupted\n")
      const result = JSON.parse(out.stdout)
      assert.deepStrictEqual(
        [result.exitCode, result.outcome, result.summary, result.session],
        [30, { _tag: "Cancelled", reason: "interrupted" }, "interrupted", null]
      )
    }))

  live("--stdin-eof cancel: closing stdin cancels the run (30)", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "Thinking...", hang: true }])
      const proc = yield* startCommand(scriptedArgs(dir, "--stdin-eof", "cancel", "--emit-jsonl", "-"), { cwd: dir })
      yield* proc.waitFor((line) => line.includes(`"_tag":"MessageUpdate"`))
      yield* proc.closeStdin
      const out = yield* proc.exit
      assert.strictEqual(out.code, 30, out.stderr)
      assert.include(out.stderr, "■ Cancelled: stdin was closed")
    }))
})

describe.concurrent("bad input (flags and script files in the test process, stdin in a real one)", () => {
  const invalid: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
    [["run", "--bogus"], "Unrecognized flag: --bogus in command effect-agent run\n\nSee: effect-agent run --help\n"],
    [["run", "--task", "x", "--max-turns", "many"], "Invalid value for flag --max-turns: \"many\""],
    [
      ["run", "--task", "x", "--provider", "anthropic", "--tools", "none"],
      "effect-agent: ANTHROPIC_API_KEY is not set; pass --api-key-env NAME to read the key from another variable\n"
    ]
  ]
  for (const [args, message] of invalid) {
    live(`22: ${args.slice(1).join(" ")}`, () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const out = yield* runCommand(args, { cwd: dir })
        assert.strictEqual(out.code, 22, `${out.stdout}\n${out.stderr}`)
        assert.include(out.stderr, message)
        assert.strictEqual(out.stdout, "")
      }))
  }

  live("22 with --json: the error is the JSON result", () =>
    Effect.gen(function*() {
      const out = yield* runCommand(["run", "--task", "x", "--json", "--emit-jsonl", "-"], { cwd: yield* tempDir })
      assert.strictEqual(out.code, 22, out.stderr)
      const result = JSON.parse(out.stdout)
      assert.deepStrictEqual([result.exitCode, result.outcome, result.error], [22, null, {
        _tag: "CliFailure",
        message: "--emit-jsonl - and --json both want stdout: give --emit-jsonl a file"
      }])
    }))

  live("the answer on stdout: the model's bytes for a pipe, without escapes or controls for a terminal", () =>
    Effect.gen(function*() {
      const answer = "ok \x1b[8mhidden\x1b[0m \x1b]8;;https://evil.example\x07link\x1b]8;;\x07 \x1b[2Aup bad\rgood \u202eevil"
      const dir = yield* scripted([{ text: answer }])
      const piped = yield* runCommand(scriptedArgs(dir), { cwd: dir })
      assert.strictEqual(piped.code, 0, piped.stderr)
      assert.strictEqual(piped.stdout, `${answer}\n`)
      const shown = yield* runCommand(scriptedArgs(dir), { cwd: dir, stdoutIsTerminal: true })
      assert.strictEqual(shown.code, 0, shown.stderr)
      assert.strictEqual(shown.stdout, "ok hidden link up badgood evil\n")
      noEscapes(shown.stderr)
      assert.notMatch(shown.stderr, /[\r\u202e]/)
    }))

  live("22: a script file that is not a script says where", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: 1 }])
      const out = yield* runCommand(scriptedArgs(dir), { cwd: dir })
      assert.strictEqual(out.code, 22, out.stderr)
      assert.include(out.stderr, `effect-agent: script file ${dir}/script.json: Expected string at ["turns"][0]["text"]\n`)
    }))

  live("garbage on stdin is reported line by line and ignored; the end of stdin is not a cancel; the run goes on", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "Fine.", delay: 300 }])
      // and a limit out of range is clamped, with a warning
      const out = yield* runCommand(scriptedArgs(dir, "--max-cost", "5000", "--max-turns", "500"), {
        cwd: dir,
        stdin: `not json\n{"type":"pause"}\n\n[1,2]\n{"type":"steer"}\n${"\u0000\u0001binary"}\n`
      })
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(out.stdout, "Fine.\n")
      assert.include(out.stderr, "! stdin line 1: not a JSON object; ignored\n")
      assert.include(
        out.stderr,
        "! stdin line 2: unknown type \"pause\" (expected approve, deny, steer, follow_up, cancel, interrupt, approve_plan, refine_plan, reject_plan, approve_turn or replace_feedback); ignored\n"
      )
      assert.include(out.stderr, "! stdin line 4: not a JSON object; ignored\n")
      assert.include(out.stderr, "! stdin line 5: steer: Missing key at [\"text\"]; ignored\n")
      assert.include(out.stderr, "! stdin line 6: not a JSON object; ignored\n")
      assert.include(out.stderr, "! --max-turns 500 is outside its safe range; using 200\n")
      assert.include(out.stderr, "! --max-cost 5000 is outside its safe range; using 1000\n")
    }))

  live("without --task, the task is read from stdin", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "Read it." }])
      const args = scriptedArgs(dir).filter((arg) => arg !== "--task" && arg !== "What is in a.txt?")
      const out = yield* runCommand([...args, "--emit-jsonl", "-"], { cwd: dir, stdin: "Summarise a.txt\n" })
      assert.strictEqual(out.code, 0, out.stderr)
      const start = (yield* events(out.stdout))[0]
      assert.deepStrictEqual(start?._tag === "AgentStart" && start.messages, [Message.user("Summarise a.txt")])
      const empty = yield* runCommand(args, { cwd: dir, stdin: "  \n" })
      assert.strictEqual(empty.code, 22)
      assert.include(empty.stderr, "the task on stdin is empty")
    }))
})
