/**
 * `effect-agent run --otlp URL`: the command's run, on OpenAI's provider
 * against a local model server, exports its spans as OTLP/HTTP JSON to a
 * receiver on 127.0.0.1; the key the command read from the environment is in
 * none of them.
 */
import { assert, describe } from "@effect/vitest"
import { Effect } from "effect"
import { receiver, spansOf } from "../otlpReceiver.ts"
import { runCommand } from "./inProcess.ts"
import { chatAnswer, chatToolCall, live, replaying, scripted } from "./support.ts"

const key = "sk-cli-9Hq4Ve2Lx7Nm"

describe("run --otlp", () => {
  live("exports the run's spans to the collector: invoke_agent, chat and execute_tool, without the key", () =>
    Effect.gen(function*() {
      const otlp = yield* receiver
      const server = yield* replaying(chatToolCall, chatAnswer)
      const dir = yield* scripted([])
      const noTools = ["--tools", "none", "--sandbox", "none"]
      const out = yield* runCommand(
        ["run", ...noTools, "--base-url", server.baseUrl, "--otlp", otlp.url, "--task", "hi"],
        { cwd: dir, env: { OPENAI_API_KEY: key } }
      )
      assert.strictEqual(server.requests[0]!.headers.authorization, `Bearer ${key}`)
      assert.strictEqual(out.code, 0, out.stderr)
      for (const body of otlp.bodies) assert.notInclude(body.text, key)
      const spans = spansOf(otlp.bodies)
      const names = spans.map((span) => span.name).sort()
      assert.deepStrictEqual(names, [
        "LanguageModel.streamText",
        "LanguageModel.streamText",
        "POST",
        "POST",
        "chat gpt-4o",
        "chat gpt-4o",
        "execute_tool unknown",
        "invoke_agent effect-agent"
      ])
      const root = spans.find((span) => span.name === "invoke_agent effect-agent")!
      assert.strictEqual(root.attributes["gen_ai.provider.name"], "openai")
      for (const span of spans) {
        assert.strictEqual(span.traceId, root.traceId)
        if (span.name.startsWith("chat") || span.name.startsWith("execute_tool")) {
          assert.strictEqual(span.parentSpanId, root.spanId)
        }
      }
      // The model asked for a tool the command does not have: the call's span says it failed, and is named
      // `unknown` (a name the model made up names no span), with the name it asked for as an attribute.
      const tool = spans.find((span) => span.name === "execute_tool unknown")!
      assert.strictEqual(tool.attributes["gen_ai.tool.name"], "get_weather")
      assert.strictEqual(tool.status.code, 2)
      assert.strictEqual(tool.attributes["error.type"], "error")
    }))
})
