/**
 * A server that echoes the API key, in every form seen in the wild and a few
 * more, must not get it into a failure: not its message, its fields, its
 * cause as `Cause.pretty` prints it, the error a retry observer sees, nor the
 * run's `AgentEnd`. Each echo goes through a real local server, for all
 * three providers. A leak is any run of 6 or more of the key's characters,
 * after undoing JSON escapes and percent-encoding, or in any base64 run.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Redacted, Schema, Stream } from "effect"
import { AiError, type LanguageModel } from "effect/ai"
import { HttpServerResponse } from "effect/http"
import { Agent, AgentEvent, ToolRegistry } from "effect-agent"
import { Anthropic, OpenAiChat, OpenAiResponses, Provider, Redaction } from "effect-agent/providers"
import { assertNoKey, jsonEscaped, percentEncoded } from "./keyLeaks.ts"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

const key = ProviderTest.apiKey

/** Every rendering of a failure a user or a log could see. */
const renderings = (error: AiError.AiError, cause: Cause.Cause<unknown>) => ({
  message: error.message,
  string: String(error),
  json: JSON.stringify(error),
  reason: JSON.stringify(error.reason),
  encoded: JSON.stringify(Schema.encodeSync(Schema.toCodecJson(AiError.AiErrorReason))(error.reason)),
  pretty: Cause.pretty(cause)
})

// -----------------------------------------------------------------------------
// The providers, and how each one's stream carries an error
// -----------------------------------------------------------------------------

interface Provider {
  readonly name: string
  readonly layer: (options: Omit<Provider.Options, "model">) => Layer.Layer<LanguageModel.LanguageModel, unknown>
  readonly fixture: string
  /** An error event whose message is `message`, as raw JSON text (so it can hold escapes). */
  readonly errorEvent: (message: string) => string
  /** An event with a field of the wrong type whose value is `value`. */
  readonly wrongType: (value: string) => string
}

const options = (extra: Omit<Provider.Options, "model">) => ({
  apiKey: Redacted.make(key),
  retry: { maxRetries: 0 },
  ...extra
})

const providers: ReadonlyArray<Provider> = [
  {
    name: "OpenAiChat",
    layer: (extra) =>
      OpenAiChat.layer({ model: "gpt-4o", ...options(extra) }).pipe(Layer.provide(ProviderTest.client)),
    fixture: "openai-chat/openai-python_text-with-usage_gpt-4o.sse",
    errorEvent: (message) => `data: {"error":{"message":"${message}","type":"server_error"}}\n\n`,
    wrongType: (value) =>
      `data: {"id":"c","model":"gpt-4o","choices":[{"index":${JSON.stringify(value)},"delta":{}}]}\n\n`
  },
  {
    name: "OpenAiResponses",
    layer: (extra) =>
      OpenAiResponses.layer({ model: "gpt-5", ...options(extra) }).pipe(Layer.provide(ProviderTest.client)),
    fixture: "openai-responses/simple-text_gpt-4o.sse",
    errorEvent: (message) =>
      `event: error\ndata: {"type":"error","code":"server_error","message":"${message}"}\n\n`,
    wrongType: (value) =>
      `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"m",` +
      `"content_index":${JSON.stringify(value)},"delta":"x"}\n\n`
  },
  {
    name: "Anthropic",
    layer: (extra) =>
      Anthropic.layer({ model: "claude-sonnet-4", ...options(extra) }).pipe(Layer.provide(ProviderTest.client)),
    fixture: "anthropic/simple-text_claude-sonnet-4.sse",
    errorEvent: (message) =>
      `event: error\ndata: {"type":"error","error":{"type":"api_error","message":"${message}"}}\n\n`,
    wrongType: (value) =>
      `event: content_block_delta\ndata: {"type":"content_block_delta","index":${JSON.stringify(value)},` +
      `"delta":{"type":"text_delta","text":"x"}}\n\n`
  }
]

/** The first event of a provider's recorded stream, then `event`. */
const afterFirst = (provider: Provider, event: string) => {
  const text = TestServer.fixture(provider.fixture)
  return `${text.slice(0, text.indexOf("\n\n") + 2)}${event}`
}

// -----------------------------------------------------------------------------
// The echoes
// -----------------------------------------------------------------------------

const json = (status: number, body: string, headers: Record<string, string> = {}) =>
  HttpServerResponse.text(body, { status, contentType: "application/json", headers })

interface Echo {
  readonly name: string
  readonly reply: (provider: Provider) => HttpServerResponse.HttpServerResponse
  /** Whether the failure quotes the text around the key (schema messages do not quote values). */
  readonly quoted?: false
}

const elided = [
  `${key.slice(0, 7)}…${key.slice(-4)}`,
  `${key.slice(0, 8)}${"*".repeat(40)}${key.slice(-4)}`,
  `${key.slice(0, 10)}...`,
  `...${key.slice(-6)}`
].join(", ")

const echoes: ReadonlyArray<Echo> = [
  { name: "a plain-text body", reply: () => HttpServerResponse.text(`bad key ${key}`, { status: 500 }) },
  {
    name: "the message of a JSON body",
    reply: () => json(401, JSON.stringify({ error: { message: `Incorrect API key provided: ${key}.` } }))
  },
  {
    name: "the type and code fields of a JSON body",
    reply: () => json(400, JSON.stringify({ error: { message: "bad", type: key, code: key } }))
  },
  {
    name: "a JSON body with the key escaped",
    reply: () => json(401, `{"error":{"message":"Incorrect API key provided: ${jsonEscaped(key)}"}}`)
  },
  {
    name: "a JSON body with part of the key escaped",
    reply: () => json(401, `{"error":{"message":"key ${key.slice(0, 6)}${jsonEscaped(key.slice(6))}"}}`)
  },
  {
    name: "a URL-encoded body",
    reply: () => HttpServerResponse.text(`request=/v1?api_key=${percentEncoded(key)}`, { status: 500 })
  },
  {
    name: "base64 credentials in the body",
    reply: () =>
      json(403, JSON.stringify({ error: { message: `sent: Basic ${btoa(`user:${key}`)}; ${btoa(key)}` } }))
  },
  {
    name: "elided forms of the key",
    reply: () => json(401, JSON.stringify({ error: { message: `Incorrect API key provided: ${elided}` } }))
  },
  {
    name: "the x-request-id header",
    reply: () => json(500, JSON.stringify({ error: { message: "oops" } }), { "x-request-id": key })
  },
  {
    name: "other response headers",
    reply: () =>
      json(401, JSON.stringify({ error: { message: "no" } }), {
        "www-authenticate": `Bearer realm="api", key="${key}"`,
        [`x-echo-${key}`]: `Bearer ${key}`
      })
  },
  {
    name: "an error event of the stream",
    reply: (provider) => TestServer.sse(afterFirst(provider, provider.errorEvent(`invalid key ${key}`)))
  },
  {
    name: "an error event of the stream, with the key escaped",
    reply: (provider) => TestServer.sse(afterFirst(provider, provider.errorEvent(`invalid key ${jsonEscaped(key)}`)))
  },
  {
    name: "a data: line that is not JSON",
    reply: (provider) => TestServer.sse(afterFirst(provider, `data: upstream auth failed for ${key}\n\n`))
  },
  {
    name: "an event field of the wrong type",
    reply: (provider) => TestServer.sse(afterFirst(provider, provider.wrongType(key))),
    quoted: false
  },
  {
    name: "a data: line cut after the key, past the quoted length",
    reply: (provider) => TestServer.sse(afterFirst(provider, `data: ${"x".repeat(190)}${key}\n\n`))
  }
]

describe("an API key a server echoes never reaches a failure", () => {
  for (const provider of providers) {
    describe(provider.name, () => {
      for (const echo of echoes) {
        it.effect(`in ${echo.name}`, () =>
          Effect.gen(function*() {
            const server = yield* TestServer.start(() => Effect.succeed(echo.reply(provider)))
            const exit = yield* ProviderTest.generate("hi").pipe(
              Effect.provide(provider.layer({ baseUrl: server.baseUrl })),
              Effect.exit
            )
            assert(Exit.isFailure(exit), "the call must fail")
            const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail")
            assert(failure?._tag === "Fail" && AiError.isAiError(failure.error), String(exit.cause))
            const sent = server.requests[0]!.headers
            assert.include(sent.authorization ?? sent["x-api-key"], key, "the key was sent")
            for (const [label, text] of Object.entries(renderings(failure.error, exit.cause))) {
              assertNoKey(label, text)
            }
            if (echo.quoted !== false) assert.include(JSON.stringify(failure.error.reason), Redaction.placeholder)
          }))
      }

      it.live("a retry observer sees the redacted error", () =>
        Effect.gen(function*() {
          const server = yield* TestServer.start((_, index) =>
            Effect.succeed(
              index === 0
                ? json(503, `{"error":{"message":"busy, ${jsonEscaped(key)}"}}`, { "x-request-id": key })
                : TestServer.sse(TestServer.fixture(provider.fixture))
            )
          )
          const seen: Array<Provider.RetryInfo> = []
          yield* ProviderTest.generate("hi").pipe(
            Effect.provide(provider.layer({
              baseUrl: server.baseUrl,
              retry: { maxRetries: 1, baseDelay: "1 millis", onRetry: (info) => Effect.sync(() => seen.push(info)) }
            }))
          )
          assert.strictEqual(seen.length, 1)
          assertNoKey("the retried error", JSON.stringify(seen[0]!.error))
          assertNoKey("the retried error's message", seen[0]!.error.message)
        }))

      it.effect("the run's AgentEnd and ModelError", () =>
        Effect.gen(function*() {
          const server = yield* TestServer.start(() =>
            Effect.succeed(TestServer.sse(afterFirst(provider, `data: auth failed for ${jsonEscaped(key)} ${key}\n\n`)))
          )
          const events: Array<AgentEvent.AgentEvent> = []
          const exit = yield* Agent.runStream({ prompt: "hi" }).pipe(
            Stream.runForEach((event) => Effect.sync(() => events.push(event))),
            Effect.provide(Layer.merge(provider.layer({ baseUrl: server.baseUrl }), ToolRegistry.layerEntries())),
            Effect.exit
          )
          assert(Exit.isFailure(exit))
          assert.strictEqual(events.at(-1)?._tag, "AgentEnd")
          const persisted = events.map((event) => Schema.encodeSync(AgentEvent.AgentEventJson)(event))
          assertNoKey("the events", JSON.stringify(persisted))
          assertNoKey("the failure", Cause.pretty(exit.cause))
        }))
    })
  }
})
