import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { promisify } from "node:util"
import { Message } from "effect-agent"
import { ask, models } from "../../examples/models.ts"
import { blocks, root, section } from "../pages.ts"
import * as TestServer from "../providers/TestServer.ts"

/** A local OpenAI-compatible server that streams a recorded tool call, then a recorded answer. */
const localServer = TestServer.start((_, index) =>
  Effect.succeed(TestServer.sse(TestServer.fixture(
    index % 2 === 0
      ? "openai-chat/openai-python_single-tool-call_gpt-4o.sse"
      : "openai-chat/openai-python_text-with-usage_gpt-4o.sse"
  )))
)

it.effect("examples/models.ts: the agent runs on a local OpenAI-compatible server", () =>
  Effect.gen(function*() {
    const server = yield* localServer
    const result = yield* ask(models.local(server.baseUrl))
    assert.strictEqual(result.outcome._tag, "Completed")
    assert.isTrue(Message.textOf(result.messages.at(-1)!).startsWith("I'm unable to provide real-time weather"))
    assert.deepStrictEqual(server.requests.map((request) => [request.url, request.body.model]), [
      ["/chat/completions", "qwen3:8b"],
      ["/chat/completions", "qwen3:8b"]
    ])
    assert.strictEqual(server.requests[0]!.headers.authorization, undefined)
  }))

it.live("examples/models.ts runs from the command line", () =>
  Effect.gen(function*() {
    const server = yield* localServer
    const { stdout } = yield* Effect.promise(() =>
      promisify(execFile)(
        process.execPath,
        ["--conditions=effect-agent-source", "examples/models.ts", "local", server.baseUrl],
        { cwd: root, env: { ...process.env, OPENAI_API_KEY: "" } }
      )
    )
    assert.strictEqual(
      stdout,
      "Completed - I'm unable to provide real-time weather updates. To get the current weather in San Francisco, " +
        "I recommend checking a reliable weather website or a weather app.\n" +
        // priced as the gpt-4o the recorded server reports
        `${44 + 14} in, ${16 + 30} out, $${((44 * 2.5 + 16 * 10) / 1e6 + (14 * 2.5 + 30 * 10) / 1e6).toFixed(5)}\n`
    )
  }))

it("docs/providers.md's block is part of examples/models.ts", () => {
  const [block] = blocks(section("providers", "The layers"), "ts")
  assert.isDefined(block)
  assert.include(readFileSync(`${root}examples/models.ts`, "utf8"), block!)
})
