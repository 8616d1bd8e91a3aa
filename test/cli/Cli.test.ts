/**
 * Cli: the `effect-agent` command run inside the test process (`Cli.command`,
 * see `inProcess.ts`): the
 * checks made before a run starts, what the command shows of retries and
 * failures, and what it draws on a terminal.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, type Scope } from "effect"
import { AiError } from "effect/ai"
import { HttpServerResponse } from "effect/http"
import { AgentError } from "effect-agent"
import * as View from "../../src/cli/internal/View.ts"
import * as TestServer from "../providers/TestServer.ts"
import { runCommand } from "./inProcess.ts"
import { Screen } from "./screen.ts"

const live = (name: string, test: () => Effect.Effect<void, unknown, FileSystem.FileSystem | Scope.Scope>) =>
  it.live(name, () => test().pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 30_000)

const tempDir = Effect.flatMap(
  Effect.service(FileSystem.FileSystem),
  (fs) => fs.makeTempDirectoryScoped({ prefix: "effect-agent-cmd-" })
)

const noTools = ["--sandbox", "none", "--tools", "none"]

describe.concurrent("before the run", () => {
  live("effect-agent alone prints its help and exits 0; an unknown subcommand exits 22", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const help = yield* runCommand([], { cwd: dir })
      assert.strictEqual(help.code, 0, help.stderr)
      assert.include(help.stdout, "SUBCOMMANDS")
      assert.strictEqual(help.stderr, "")
      const unknown = yield* runCommand(["bogus"], { cwd: dir })
      assert.strictEqual(unknown.code, 22)
      assert.include(unknown.stderr, "Unknown subcommand \"bogus\"")
    }))

  live("a missing key: exit 22 and a sentence, for every provider, and no request goes out", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const server = yield* TestServer.start(() => Effect.die("no request was expected"))
      for (
        const [args, message] of [
          [[], "OPENAI_API_KEY is not set; pass --api-key-env NAME, or --base-url for a server that needs no key"],
          [
            ["--provider", "openai-responses"],
            "OPENAI_API_KEY is not set; pass --api-key-env NAME, or --base-url for a server that needs no key"
          ],
          [
            ["--provider", "anthropic", "--base-url", server.baseUrl],
            "ANTHROPIC_API_KEY is not set; pass --api-key-env NAME to read the key from another variable"
          ],
          [
            ["--api-key-env", "MY_KEY", "--base-url", server.baseUrl],
            "MY_KEY is not set; set it, or pass --api-key-env NAME to read the key from another variable"
          ]
        ] as const
      ) {
        const out = yield* runCommand(["run", ...noTools, ...args, "--json", "--task", "hi"], { cwd: dir })
        assert.strictEqual(out.code, 22, out.stderr)
        assert.strictEqual(out.stderr, `effect-agent: ${message}\n`)
        assert.deepStrictEqual(JSON.parse(out.stdout).error, { _tag: "CliFailure", message })
      }
      assert.strictEqual(server.requests.length, 0)
    }))
})

/** A Chat Completions stream answering `text`. */
const answer = (text: string) =>
  TestServer.sse(TestServer.events(
    { id: "c", model: "gpt-4o", choices: [{ index: 0, delta: { role: "assistant", content: text }, finish_reason: null }] },
    { id: "c", model: "gpt-4o", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
    "[DONE]"
  ))

/** A temp directory with a script for `--provider scripted`. */
const scripted = (turns: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const dir = yield* tempDir
    yield* fs.writeFileString(`${dir}/script.json`, JSON.stringify({ turns }))
    return dir
  })

describe.concurrent("retries and failures", () => {
  live("each retry is shown as it starts: the wait, what failed (a status, a dropped connection), which of how many", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const server = yield* TestServer.start((request, index) =>
        index === 0
          ? Effect.orDie(HttpServerResponse.json({ error: { message: "overloaded" } }, { status: 503 }))
          : index === 1
          ? Effect.as(request.reset, HttpServerResponse.empty())
          : Effect.succeed(answer("Back."))
      )
      const out = yield* runCommand(
        ["run", ...noTools, "--base-url", server.baseUrl, "--task", "hi"],
        { cwd: dir, env: { OPENAI_API_KEY: "sk-test" } }
      )
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(out.stdout, "Back.\n")
      const retries = out.stderr.split("\n").filter((line) => line.includes("↻"))
      assert.strictEqual(retries.length, 2, out.stderr)
      assert.match(retries[0]!, /^ +\d+\.\d\ds ↻ retrying in \d\.\d s after 503 \(1 of 4\)$/)
      assert.match(retries[1]!, /^ +\d+\.\d\ds ↻ retrying in \d\.\d s after a network failure \(.+\) \(2 of 4\)$/)
      assert.isBelow(out.stderr.indexOf("↻"), out.stderr.indexOf("■ Completed"))
    }))

  it("an error's tag is said once, on one line", () => {
    const error = AgentError.ModelError.fromAiError(
      AiError.make({
        module: "OpenAiChat",
        method: "streamText",
        reason: new AiError.NetworkError({
          reason: "TransportError",
          method: "POST",
          url: "http://127.0.0.1:1/v1/chat/completions",
          description: "TransportError: connect ECONNREFUSED 127.0.0.1:1"
        })
      }),
      1
    )
    assert.include(error.message, "TransportError: TransportError: ")
    const text = View.errorText(error.message)
    assert.match(text, /^model call failed at turn 1: TransportError: connect ECONNREFUSED 127\.0\.0\.1:1 \(POST [^)]+\)/)
    assert.strictEqual(text.split("TransportError").length, 2)
    assert.notInclude(text, "\n")
  })

  live("--json on a failure reports the time the run really took", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ delay: 600, fail: "the model is down" }])
      const out = yield* runCommand(
        ["run", ...noTools, "--provider", "scripted", "--script", `${dir}/script.json`, "--json", "--task", "hi"],
        { cwd: dir }
      )
      assert.strictEqual(out.code, 20, out.stderr)
      const result = JSON.parse(out.stdout)
      assert.strictEqual(result.error._tag, "ModelError")
      assert.isAtLeast(result.elapsedMs, 550)
      assert.isBelow(result.elapsedMs, 10_000)
    }))

  live("--mcp: a server that does not start says why: the missing program, its exit code and the end of its stderr", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "unused" }])
      const base = ["run", ...noTools, "--provider", "scripted", "--script", `${dir}/script.json`, "--task", "hi"]
      const missing = yield* runCommand([...base, "--mcp", "no-such-mcp-server-here --stdio"], { cwd: dir })
      assert.strictEqual(missing.code, 22, missing.stderr)
      assert.match(
        missing.stderr,
        /^effect-agent: --mcp "no-such-mcp-server-here --stdio": the server did not start: .*no-such-mcp-server-here.*ENOENT/
      )
      const dies = yield* runCommand(
        [...base, "--mcp", `sh -c 'echo starting >&2; echo "config file not found: ~/.mcp.json" >&2; exit 3'`],
        { cwd: dir }
      )
      assert.strictEqual(dies.code, 22, dies.stderr)
      assert.include(dies.stderr, "the server did not start: ")
      assert.include(dies.stderr, "it exited with code 3; its stderr ends: \"starting\\nconfig file not found: ~/.mcp.json\"\n")
    }))
})

describe.concurrent("on a terminal", () => {
  live("a setup error starts on a clean line, not after the control prompt", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "unused" }])
      const out = yield* runCommand([
        "run",
        ...noTools,
        "--provider",
        "scripted",
        "--script",
        `${dir}/script.json`,
        "--task",
        "hi",
        "--mcp",
        "sh -c 'sleep 0.4; exit 3'"
      ], { cwd: dir, stderrIsTerminal: true, stdinIsTerminal: true })
      assert.strictEqual(out.code, 22)
      // the prompt was drawn while the server started
      assert.include(out.stderr, "› type a control line")
      const screen = new Screen()
      screen.write(out.stderr)
      assert.strictEqual(screen.text, `effect-agent: --mcp "sh -c 'sleep 0.4; exit 3'": the server did not start: ${
        screen.text.split("the server did not start: ")[1]
      }`)
      assert.match(screen.text, /it exited with code 3$/)
      assert.isTrue(screen.cursorVisible)
    }))
})
