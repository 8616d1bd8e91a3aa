/**
 * The agent loop's calls (tool resolution off, tool-call validation deferred)
 * take a path of their own in our providers: the decoder builds decoded parts
 * directly, without `LanguageModel.make`'s second decode. These tests pin that
 * it yields exactly what `LanguageModel.make` decodes from the encoded parts,
 * for every recorded stream; that a malformed event still fails typed on it;
 * that every other call, and a user's own `LanguageModel`, still goes through
 * `LanguageModel.make`; and what the transport does around it: connections
 * reused after the terminal event, no trace headers without a tracer.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Redacted, Schema, Stream, Tracer } from "effect"
import { AiError, LanguageModel, type Response, Tool, Toolkit } from "effect/ai"
import { TestClock } from "effect/testing"
import { Agent, AgentError, Message, ToolRegistry } from "effect-agent"
import { Anthropic, OpenAiChat, OpenAiResponses } from "effect-agent/providers"
import * as Fs from "node:fs"
import * as OpenAiChatStream from "../../src/providers/internal/OpenAiChatStream.ts"
import * as Compat from "../../src/providers/internal/compat.ts"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const key = Redacted.make(ProviderTest.apiKey)

interface Provider {
  readonly name: string
  readonly directory: string
  readonly layer: (baseUrl: string) => Layer.Layer<LanguageModel.LanguageModel, unknown>
  /** An event with a required field missing. */
  readonly incomplete: string
  /** An event whose token counts are not integers. */
  readonly fractionalUsage: string
}

const providers: ReadonlyArray<Provider> = [
  {
    name: "OpenAiChat",
    directory: "openai-chat",
    layer: (baseUrl) =>
      OpenAiChat.layer({ model: "gpt-4o", apiKey: key, baseUrl }).pipe(Layer.provide(ProviderTest.client)),
    incomplete: "data: {\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\"}\n\n",
    fractionalUsage:
      "data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":1.5,\"completion_tokens\":2}}\n\n"
  },
  {
    name: "OpenAiResponses",
    directory: "openai-responses",
    layer: (baseUrl) =>
      OpenAiResponses.layer({ model: "gpt-5", apiKey: key, baseUrl }).pipe(Layer.provide(ProviderTest.client)),
    incomplete:
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\"}\n\n",
    fractionalUsage: "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":" +
      "{\"usage\":{\"input_tokens\":1.5,\"output_tokens\":2}}}\n\n"
  },
  {
    name: "Anthropic",
    directory: "anthropic",
    layer: (baseUrl) =>
      Anthropic.layer({ model: "claude-sonnet-4", apiKey: key, baseUrl }).pipe(Layer.provide(ProviderTest.client)),
    incomplete:
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\"," +
      "\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
    fractionalUsage:
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":2.5}}\n\n"
  }
]

const Add = Tool.make("add", {
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite
})
const Kit = Toolkit.make(Add)
const Tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) })))

const fixtures = (directory: string): ReadonlyArray<string> =>
  Fs.readdirSync(new URL(`../fixtures/providers/${directory}`, import.meta.url)).filter((file) => file.endsWith(".sse"))

/** Runs an effect with every call of our providers routed through `LanguageModel.make`. */
const throughMake = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.provideService(effect, Compat.StandardPath, true)

const serving = (body: string) => TestServer.start(() => Effect.succeed(TestServer.sse(body)))

/** The direct path's parts without metadata share one frozen object; `LanguageModel.make` decodes a fresh one each. */
const direct = (parts: ReadonlyArray<Response.AnyPart>) => parts.filter((part) => Object.isFrozen(part.metadata)).length

/** The typed failure of a call that must fail (a defect fails the assertion). */
const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    assert(Exit.isFailure(exit), "expected a failure")
    const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
    assert(error?._tag === "Fail", `expected a typed failure, got ${String(exit.cause)}`)
    assert(AiError.isAiError(error.error), `expected an AiError, got ${String(error.error)}`)
    return error.error
  })

/** A recorded stream with `event` inserted after its first event. */
const withEventAfterFirst = (text: string, event: string) => {
  const first = text.indexOf("\n\n") + 2
  return `${text.slice(0, first)}${event}${text.slice(first)}`
}

describe("the loop's calls", () => {
  for (const provider of providers) {
    describe(provider.name, () => {
      for (const file of fixtures(provider.directory)) {
        it.effect(`${file}: the parts decoded directly are those LanguageModel.make decodes`, () =>
          Effect.gen(function*() {
            const server = yield* serving(TestServer.fixture(`${provider.directory}/${file}`))
            const layer = provider.layer(server.baseUrl)
            const fast = yield* ProviderTest.streamParts("hi").pipe(Effect.provide(layer))
            const decoded = yield* ProviderTest.streamParts("hi").pipe(throughMake, Effect.provide(layer))
            assert.deepStrictEqual(fast, decoded)
            assert.strictEqual(fast.at(-1)?.type, "finish")
            assert.isAbove(direct(fast), 0, "the loop's call took the direct path")
            assert.strictEqual(direct(decoded), 0, "StandardPath routed the call through LanguageModel.make")
          }))
      }

      const malformed: ReadonlyArray<readonly [string, string, string]> = [
        ["a data: line that is not JSON", "data: {\"oops\n\n", "a data: line is not valid JSON"],
        ["an event missing a required field", provider.incomplete, "is missing a required field"],
        ["token counts that are not integers", provider.fractionalUsage, "has a wrong one"]
      ]
      for (const [what, event, says] of malformed) {
        it.effect(`${what} fails typed on both paths`, () =>
          Effect.gen(function*() {
            const file = `${provider.directory}/${fixtures(provider.directory)[0]}`
            const server = yield* serving(withEventAfterFirst(TestServer.fixture(file), event))
            const layer = provider.layer(server.baseUrl)
            const call = ProviderTest.streamParts("hi")
            for (const run of [call, throughMake(call)]) {
              const error = yield* failure(run.pipe(Effect.provide(layer)))
              assert(error.reason._tag === "InvalidOutputError")
              assert.include(error.reason.description, says)
            }
          }))
      }

      it.effect("Agent.run: a malformed event ends the run with a ModelError that says what was wrong", () =>
        Effect.gen(function*() {
          const file = `${provider.directory}/${fixtures(provider.directory)[0]}`
          const server = yield* serving(withEventAfterFirst(TestServer.fixture(file), provider.incomplete))
          const exit = yield* Agent.run({ prompt: "hi" }).pipe(
            Effect.provide(Layer.merge(provider.layer(server.baseUrl), Tools)),
            Effect.exit
          )
          assert(Exit.isFailure(exit))
          const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
          assert(error?._tag === "Fail" && error.error instanceof AgentError.ModelError, String(exit.cause))
          assert(error.error.reason._tag === "InvalidOutputError")
          assert.include(error.error.reason.description, "is missing a required field")
          assert.strictEqual(server.requests.length, 1)
        }))
    })
  }

  it.effect("an effect/ai user's calls go through LanguageModel.make, as before", () =>
    Effect.gen(function*() {
      const server = yield* serving(TestServer.fixture("openai-chat/openai-python_text-with-usage_gpt-4o.sse"))
      const layer = providers[0]!.layer(server.baseUrl)
      const parts = yield* Stream.runCollect(LanguageModel.streamText({ prompt: "hi" })).pipe(Effect.provide(layer))
      assert.strictEqual(direct(parts), 0)
      const loop = yield* ProviderTest.streamParts("hi").pipe(Effect.provide(layer))
      assert.deepStrictEqual(parts, loop)
      const response = yield* LanguageModel.generateText({ prompt: "hi" }).pipe(Effect.provide(layer))
      assert.strictEqual(response.finishReason, "stop")
      assert.strictEqual(response.text, loop.flatMap((part) => part.type === "text-delta" ? [part.delta] : []).join(""))
    }))
})

describe("the hand-written check of a Chat Completions chunk", () => {
  const replacements: ReadonlyArray<unknown> = [undefined, null, 0, 1.5, -1, "x", true, [], {}, [1], [{}]]

  /** Every value made from `value` by changing one of its fields (at any depth) to each replacement, or dropping it. */
  const mutations = function*(value: unknown): Generator<unknown> {
    if (typeof value !== "object" || value === null) return
    for (const key of Object.keys(value)) {
      const field: unknown = Reflect.get(value, key)
      const withField = (next: unknown) => {
        if (Array.isArray(value)) return value.map((item, index) => String(index) === key ? next : item)
        const copy: Record<string, unknown> = { ...value }
        if (next === undefined) delete copy[key]
        else copy[key] = next
        return copy
      }
      for (const next of replacements) yield withField(next)
      for (const inner of mutations(field)) yield withField(inner)
    }
  }

  it("accepts every recorded chunk, and only what the chunk's Schema accepts", () => {
    const chunks = fixtures("openai-chat").flatMap((file) =>
      TestServer.fixture(`openai-chat/${file}`).split("\n").filter((line) =>
        line.startsWith("data: {")
      ).map((line) => JSON.parse(line.slice(6)))
    )
    assert.isAbove(chunks.length, 40)
    let checked = 0
    let rejected = 0
    for (const chunk of chunks) {
      assert.isTrue(OpenAiChatStream.checkAccepts(chunk), JSON.stringify(chunk))
      for (const mutated of mutations(chunk)) {
        checked++
        if (!OpenAiChatStream.checkAccepts(mutated)) {
          rejected++
          continue
        }
        assert.isTrue(
          OpenAiChatStream.schemaAccepts(mutated),
          `accepted, but not by the Schema: ${JSON.stringify(mutated)}`
        )
      }
    }
    // The mutations did reach the check's rejections (each field made wrong), not only harmless changes.
    assert.isAbove(rejected, checked / 4)
  })
})

describe("a user's own LanguageModel", () => {
  it.effect("runs the loop through LanguageModel.make", () =>
    Effect.gen(function*() {
      const requests: Array<LanguageModel.ProviderOptions> = []
      const finish = (reason: Response.FinishReason): Response.StreamPartEncoded => ({
        type: "finish",
        reason,
        usage: { inputTokens: { total: 3 }, outputTokens: { total: 2 } }
      })
      const model = Layer.effect(
        LanguageModel.LanguageModel,
        LanguageModel.make({
          generateText: () => Effect.die("not used"),
          streamText: (options) => {
            requests.push(options)
            return requests.length === 1
              ? Stream.make(
                { type: "tool-params-start", id: "c1", name: "add" },
                { type: "tool-params-delta", id: "c1", delta: "{\"a\":1,\"b\":2}" },
                { type: "tool-params-end", id: "c1" },
                { type: "tool-call", id: "c1", name: "add", params: { a: 1, b: 2 } },
                finish("tool-calls")
              )
              : Stream.make(
                { type: "text-start", id: "t" },
                { type: "text-delta", id: "t", delta: "3" },
                { type: "text-end", id: "t" },
                finish("stop")
              )
          }
        })
      )
      const result = yield* Agent.run({ prompt: "1 + 2?" }).pipe(Effect.provide(Layer.merge(model, Tools)))
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.strictEqual(Message.textOf(result.messages.at(-1)!), "3")
      const toolResult = result.messages[2]
      assert(toolResult?.role === "toolResult")
      assert.strictEqual(Message.textOf(toolResult), "3")
      assert.deepStrictEqual(requests.map((request) => request.toolCallValidation), ["deferred", "deferred"])
      assert.deepStrictEqual(requests[0]!.tools.map((tool) => tool.name), ["add"])
      assert.strictEqual(result.usage.input, 6)
    }))
})

describe("the transport", () => {
  const text = TestServer.fixture("openai-chat/openai-python_text-with-usage_gpt-4o.sse")
  // Two calls, the second once the first's body had time to end (as tools run between a loop's calls).
  const twice = (layer: Layer.Layer<LanguageModel.LanguageModel, unknown>) =>
    Effect.gen(function*() {
      yield* ProviderTest.streamParts("one")
      yield* TestClock.withLive(Effect.sleep("60 millis"))
      yield* ProviderTest.streamParts("two")
    }).pipe(Effect.provide(layer))

  it.effect("sends no trace headers without a tracer, and effect/http's with one", () =>
    Effect.gen(function*() {
      const server = yield* serving(text)
      const layer = providers[0]!.layer(server.baseUrl)
      yield* ProviderTest.streamParts("hi").pipe(Effect.provide(layer))
      const tracer = Tracer.make({ span: (options) => new Tracer.NativeSpan(options) })
      yield* ProviderTest.streamParts("hi").pipe(Effect.withTracer(tracer), Effect.provide(layer))
      const [plain, traced] = server.requests
      assert.notProperty(plain!.headers, "traceparent")
      assert.notProperty(plain!.headers, "b3")
      assert.match(traced!.headers.traceparent ?? "", /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
      assert.property(traced!.headers, "b3")
    }))

  it.effect("reuses the connection once the body has ended after the terminal event", () =>
    Effect.gen(function*() {
      // The end of the body comes a little after `data: [DONE]` (1 ms), in a read of its own, which the client
      // waits for up to its drain window (100 ms) before it gives the connection up. A process stalled past
      // that window between the two reads (seen beside two other suites) takes a new connection for the next
      // request, as it should: of five pairs of requests, one reuses its connection.
      const ports: Array<readonly [number | undefined, number | undefined]> = []
      for (let attempt = 0; attempt < 5 && !ports.some(([a, b]) => a !== undefined && a === b); attempt++) {
        const server = yield* TestServer.start(() =>
          Effect.succeed(TestServer.sseThenEnd(text, TestClock.withLive(Effect.sleep("1 millis"))))
        )
        yield* twice(providers[0]!.layer(server.baseUrl))
        const [first, second] = server.requests
        ports.push([first!.remotePort, second!.remotePort])
      }
      assert.isTrue(ports.some(([a, b]) => a !== undefined && a === b), `the client ports of each pair: ${JSON.stringify(ports)}`)
    }))

  it.effect("ends the stream at the terminal event, even when the server keeps the body open", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sseThenHang(text)))
      yield* twice(providers[0]!.layer(server.baseUrl))
      assert.strictEqual(server.requests.length, 2)
    }))
})
