/**
 * ScriptFile: the script file of `--provider scripted`, read, checked and
 * turned into a ScriptedModel script that answers by the replies a request
 * already holds.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, FileSystem, Layer } from "effect"
import { Agent, Message, ToolRegistry } from "effect-agent"
import * as ScriptFile from "../../../src/cli/internal/ScriptFile.ts"
import { ScriptedModel } from "effect-agent/testing"

/** Writes `text` to a script file in a temp directory and loads it. */
const loadText = (text: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = `${yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-script-" })}/script.json`
    yield* fs.writeFileString(path, text)
    return { path, script: yield* Effect.result(ScriptFile.load(path)) }
  }).pipe(Effect.scoped, Effect.provide(NodeServices.layer))

const request = (messages: ReadonlyArray<Message.Message>): ScriptedModel.Request => ({
  prompt: Message.toPrompt(messages),
  tools: [],
  toolChoice: "auto",
  toolCallValidation: undefined
})

const reply = (text: string): Message.AssistantMessage => ({
  role: "assistant",
  content: [Message.text(text)],
  stopReason: "stop",
  usage: Message.emptyUsage
})

describe("ScriptFile.toScript", () => {
  it("answers each request with the turn at its number of replies, so a resumed run carries on", () => {
    const script = ScriptFile.toScript({ turns: [{ text: "first" }, { text: "second", delay: 200, fail: "down" }] })
    assert(typeof script === "function")
    assert.deepStrictEqual(script(0, request([Message.user("go")])), { text: "first" })
    // a resumed run: its first call holds one reply already
    const second = script(0, request([Message.user("go"), reply("first"), Message.user("more")]))
    assert.strictEqual(second?.text, "second")
    // delay in milliseconds, fail as the provider failure it stands for
    const delay = second?.delay === undefined ? undefined : Duration.fromInputUnsafe(second.delay)
    assert.isTrue(delay !== undefined && Duration.equals(delay, Duration.millis(200)))
    assert.deepStrictEqual([second?.fail?._tag, second?.fail?.message], ["UnknownError", "down"])
    assert.isUndefined(script(5, request([Message.user("go"), reply("a"), reply("b")])))
  })
})

describe("ScriptFile.load", () => {
  it.effect("reads a file a run plays: a tool call, then the answer", () =>
    Effect.gen(function*() {
      const { script } = yield* loadText(JSON.stringify({
        turns: [
          { toolCalls: [{ name: "ghost", params: { x: 1 } }], usage: { input: 10, output: 2, cost: 0.001 } },
          { text: "done", reasoning: "easy" }
        ]
      }))
      assert(script._tag === "Success", String(script))
      const result = yield* Agent.run({ prompt: "go" }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer(script.success), ToolRegistry.layerEntries()))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Completed" })
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "done")
      const calls = result.messages.flatMap((m) => m.role === "assistant" ? Message.toolCalls(m) : [])
      assert.deepStrictEqual(calls.map((call) => [call.id, call.name, call.params]), [["call_1_1", "ghost", { x: 1 }]])
      assert.deepStrictEqual([result.usage.input, result.usage.output, result.usage.cost], [10, 2, 0.001])
    }))

  it.effect("a file that cannot be used fails with ScriptFileError: the path and what is wrong, on one line", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [string, RegExp]> = [
        ["{", /JSON/],
        [JSON.stringify({ turns: [{ text: 1 }] }), /^Expected string at \["turns"\]\[0\]\["text"\]/],
        [JSON.stringify({ turns: [{ txt: "typo" }] }), /"txt"/],
        [JSON.stringify({ turns: [{ usage: { input: -1 } }] }), /\["turns"\]\[0\]\["usage"\]\["input"\]/],
        [JSON.stringify({ turns: [{ delay: 700_000 }] }), /\["turns"\]\[0\]\["delay"\]/],
        [JSON.stringify({ steps: [] }), /\["steps"\]/],
        [JSON.stringify({}), /Missing key at \["turns"\]/]
      ]
      for (const [text, problem] of cases) {
        const { path, script } = yield* loadText(text)
        assert(script._tag === "Failure", text)
        const error = script.failure
        assert.strictEqual(error._tag, "ScriptFileError")
        assert.strictEqual(error.path, path)
        assert.match(error.problem, problem, text)
        assert.notInclude(error.problem, "\n")
        assert.strictEqual(error.message, `script file ${path}: ${error.problem}`)
      }
      const missing = yield* Effect.flip(ScriptFile.load("/nonexistent/script.json")).pipe(
        Effect.provide(NodeServices.layer)
      )
      assert.deepStrictEqual([missing.path, missing.problem], ["/nonexistent/script.json", "no such file"])
    }))
})
