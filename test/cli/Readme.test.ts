/**
 * docs/command.md's examples of the command, each run as written by bash,
 * with `effect-agent` on the PATH (the built package's bin) and the
 * providers' base URLs pointing at a local server that answers with recorded
 * or scripted streams.
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as TestServer from "../providers/TestServer.ts"
import { bubblewrap } from "../bubblewrap.ts"
import { blocks, section } from "../pages.ts"
import { builtCommand, root } from "./build.ts"
import { chatAnswer, chatToolCall, live, replaying, runProgram, tempDir } from "./support.ts"

/** The bash block of a section of docs/command.md. */
const example = (title: string): string => {
  const found = blocks(section("command", title), "bash")
  if (found.length !== 1) throw new Error(`docs/command.md's "${title}" has ${found.length} bash blocks`)
  return found[0]!
}

/** `bin/effect-agent`: the built package's bin, as npm links it. */
let bin = ""
beforeAll(async () => {
  const main = await builtCommand()
  bin = Fs.mkdtempSync(Path.join(root, "node_modules/.cache/effect-agent-bin-"))
  Fs.symlinkSync(main, Path.join(bin, "effect-agent"))
  return () => Fs.rmSync(bin, { recursive: true, force: true })
}, 240_000)

/** Runs a block of the page with bash in `cwd`. */
const bash = (script: string, cwd: string, env: Record<string, string> = {}) =>
  runProgram("bash", ["-c", script], { cwd, env: { ...env, PATH: `${bin}:${process.env.PATH}` } })

const chunk = (delta: unknown, finish: string | null = null) => ({
  id: "chatcmpl-readme",
  model: "gpt-4o",
  choices: [{ index: 0, delta, finish_reason: finish }]
})

/** A Chat Completions stream: text, or tool calls. */
const chat = (reply: { readonly text?: string; readonly calls?: ReadonlyArray<readonly [string, string, unknown]> }) =>
  TestServer.sse(TestServer.events(
    chunk({ role: "assistant", content: reply.text ?? "" }),
    ...(reply.calls ?? []).map(([id, name, params], index) =>
      chunk({ tool_calls: [{ index, id, type: "function", function: { name, arguments: JSON.stringify(params) } }] })
    ),
    chunk({}, reply.calls === undefined ? "stop" : "tool_calls"),
    { id: "chatcmpl-readme", model: "gpt-4o", choices: [], usage: { prompt_tokens: 50, completion_tokens: 10 } },
    "[DONE]"
  ))

/**
 * Where bubblewrap does not work, `--sandbox auto` refuses to run commands without isolation beside a key:
 * the examples that have one exit 22 with what to do, before any request (a script ends with the exit code
 * of its last command: `code`).
 */
const refusedWithoutBubblewrap = (
  out: { readonly code: number; readonly stdout: string; readonly stderr: string },
  server: { readonly requests: ReadonlyArray<unknown> },
  variable: string,
  code = 22
) => {
  console.log(`without bubblewrap (${bubblewrap.reason}): the example is refused, as it must be`)
  assert.strictEqual(out.code, code, out.stderr)
  assert.include(
    out.stderr,
    `and ${variable} is in the environment: install bubblewrap, ` +
      "or pass --sandbox local to accept that commands can read it"
  )
  assert.strictEqual(server.requests.length, 0)
}

const toolMessages = (body: { readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string }> }) =>
  body.messages.filter((message) => message.role === "tool").map((message) => message.content)

describe.concurrent("docs: the effect-agent command", () => {
  live("Run with OpenAI", () =>
    Effect.gen(function*() {
      const server = yield* replaying(chatToolCall, chatAnswer)
      const dir = yield* tempDir
      const out = yield* bash(example("Run with OpenAI"), dir, { OPENAI_BASE_URL: server.baseUrl })
      if (!bubblewrap.works) return refusedWithoutBubblewrap(out, server, "OPENAI_API_KEY")
      assert.strictEqual(out.code, 0, out.stderr)
      assert.include(out.stdout, "I'm unable to provide real-time weather updates.")
      assert.strictEqual(server.requests[0]!.headers.authorization, "Bearer sk-your-key")
      assert.strictEqual(server.requests[0]!.body.model, "gpt-4o")
      assert.strictEqual(server.requests.length, 2)
    }))

  live("With a local model server", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* tempDir
      yield* fs.makeDirectory(`${dir}/src`)
      yield* fs.writeFileString(`${dir}/src/a.ts`, "// TODO: remove this hack\nexport const a = 1\n")
      const server = yield* TestServer.start((_request, index) =>
        Effect.succeed(chat(
          index === 0
            ? { calls: [["call_1", "grep", { pattern: "TODO", path: "src" }]] }
            : { text: "One TODO, in src/a.ts." }
        ))
      )
      const script = example("With a local model server").replace("http://localhost:11434/v1", `${server.baseUrl}/v1`)
      const out = yield* bash(script, dir)
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(out.stdout, "One TODO, in src/a.ts.\n")
      assert.strictEqual(server.requests[0]!.url, "/v1/chat/completions")
      assert.strictEqual(server.requests[0]!.body.model, "qwen3:8b")
      assert.strictEqual(server.requests[0]!.headers.authorization, undefined)
      assert.deepStrictEqual(
        server.requests[0]!.body.tools.map((tool: { function: { name: string } }) => tool.function.name),
        ["read_file", "list_files", "grep"]
      )
      assert.deepStrictEqual(toolMessages(server.requests[1]!.body), ["src/a.ts:1:// TODO: remove this hack"])
    }))

  live("With approvals", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* tempDir
      const server = yield* TestServer.start((_request, index) =>
        Effect.succeed(chat(
          index === 0
            ? {
              text: "Adding the entry, then pushing.",
              calls: [
                ["call_w", "write_file", { path: "CHANGELOG.md", content: "## 1.2.0\n- Faster.\n" }],
                ["call_p", "bash", { command: "git push" }]
              ]
            }
            : { text: "Added the entry; pushing was not allowed." }
        ))
      )
      const out = yield* bash(example("With approvals"), dir, { OPENAI_BASE_URL: server.baseUrl, OPENAI_API_KEY: "sk-x" })
      if (!bubblewrap.works) return refusedWithoutBubblewrap(out, server, "OPENAI_API_KEY")
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(yield* fs.readFileString(`${dir}/CHANGELOG.md`), "## 1.2.0\n- Faster.\n")
      assert.deepStrictEqual(toolMessages(server.requests[1]!.body), [
        "Created CHANGELOG.md (2 lines, 19 bytes)",
        "Tool call denied: only CHANGELOG.md may change"
      ])
    }))

  live("Resume", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* tempDir
      // the project (the workspace) and the home that holds the sessions, apart
      yield* fs.makeDirectory(`${dir}/project`)
      yield* fs.makeDirectory(`${dir}/home`)
      const server = yield* TestServer.start((_request, index) =>
        Effect.succeed(chat({ text: index === 0 ? "Release notes: faster, smaller." : "- Faster\n- Smaller" }))
      )
      const out = yield* bash(example("Resume"), `${dir}/project`, {
        HOME: `${dir}/home`,
        OPENAI_BASE_URL: server.baseUrl,
        OPENAI_API_KEY: "sk-x"
      })
      // refused, the first command saves no session: the others have none to resume (21)
      if (!bubblewrap.works) return refusedWithoutBubblewrap(out, server, "OPENAI_API_KEY", 21)
      assert.strictEqual(out.code, 0, out.stderr)
      // the second command resumes a finished session: its answer again, no model call
      assert.strictEqual(
        out.stdout,
        "Release notes: faster, smaller.\nRelease notes: faster, smaller.\n- Faster\n- Smaller\n"
      )
      assert.strictEqual(server.requests.length, 2)
      assert.strictEqual(
        server.requests[1]!.body.messages.at(-1).content,
        "Now shorten them to five bullet points"
      )
      assert.isTrue(yield* fs.exists(`${dir}/home/.agent-sessions/release/run.json`))
      assert.deepStrictEqual(yield* fs.readDirectory(`${dir}/project`), [])
    }))

  live("Use from CI", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* tempDir
      // the runner's temporary directory, outside the checkout (the workspace)
      const runnerTemp = yield* tempDir
      yield* fs.writeFileString(`${dir}/task.md`, "Say hello in Portuguese.\n")
      const server = yield* replaying("anthropic/thinking-plus-tool-use_claude-sonnet-4.sse", "anthropic/simple-text_claude-sonnet-4.sse")
      const out = yield* bash(example("Use from CI"), dir, {
        ANTHROPIC_BASE_URL: server.baseUrl,
        ANTHROPIC_API_KEY: "sk-ant-x",
        RUNNER_TEMP: runnerTemp
      })
      if (!bubblewrap.works) {
        refusedWithoutBubblewrap(out, server, "ANTHROPIC_API_KEY")
        return assert.match(out.stdout, /^exit 22: /)
      }
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(out.stdout, "exit 0: Completed: the model finished\n")
      // --quiet leaves only warnings: none
      assert.strictEqual(out.stderr, "")
      assert.strictEqual(server.requests[0]!.body.messages[0].content[0].text, "Say hello in Portuguese.")
      const result = JSON.parse(yield* fs.readFileString(`${runnerTemp}/result.json`))
      assert.include(result.answer, "Olá")
      const trajectory = (yield* fs.readFileString(`${runnerTemp}/trajectory.jsonl`)).trim().split("\n")
      assert.strictEqual(JSON.parse(trajectory.at(-1)!)._tag, "AgentEnd")
      // nothing in the workspace but the task
      assert.deepStrictEqual(yield* fs.readDirectory(dir), ["task.md"])
    }))
})
