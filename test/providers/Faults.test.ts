import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Queue, Redacted, Scheduler, Stream } from "effect"
import { AiError, type LanguageModel } from "effect/ai"
import { HttpClient, HttpClientRequest, HttpClientResponse, HttpServerResponse } from "effect/http"
import { TestClock } from "effect/testing"
import { Anthropic, OpenAiChat, OpenAiResponses, Provider } from "effect-agent/providers"
import * as RetrySchedule from "../../src/providers/internal/RetrySchedule.ts"
import * as SseTransport from "../../src/providers/internal/SseTransport.ts"
import * as Watchdog from "../../src/providers/internal/Watchdog.ts"
import { patience } from "../patience.ts"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

interface Provider {
  readonly name: string
  readonly layer: (
    options: Omit<Provider.Options, "model">
  ) => Layer.Layer<LanguageModel.LanguageModel, unknown>
  readonly fixture: string
  /** An event that lacks a required field. */
  readonly incomplete: string
  /** A complete event that adds nothing to the response. */
  readonly keepAlive: string
}

const common = (options: Omit<Provider.Options, "model">) => ({ apiKey: Redacted.make(ProviderTest.apiKey), ...options })

const providers: ReadonlyArray<Provider> = [
  {
    name: "OpenAiChat",
    layer: (options) =>
      OpenAiChat.layer({ model: "gpt-4o", ...common(options) }).pipe(Layer.provide(ProviderTest.client)),
    fixture: "openai-chat/openai-python_text-with-usage_gpt-4o.sse",
    incomplete: "data: {\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\"}\n\n",
    keepAlive: "data: {\"id\":\"chatcmpl-1\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{}}]}\n\n"
  },
  {
    name: "OpenAiResponses",
    layer: (options) =>
      OpenAiResponses.layer({ model: "gpt-5", ...common(options) }).pipe(Layer.provide(ProviderTest.client)),
    fixture: "openai-responses/reasoning-summary-plus-tool_gpt-5.sse",
    incomplete:
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\"}\n\n",
    keepAlive: "event: response.in_progress\ndata: {\"type\":\"response.in_progress\"}\n\n"
  },
  {
    name: "Anthropic",
    layer: (options) =>
      Anthropic.layer({ model: "claude-sonnet-4", ...common(options) }).pipe(Layer.provide(ProviderTest.client)),
    fixture: "anthropic/thinking-plus-tool-use_claude-sonnet-4.sse",
    incomplete:
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
    keepAlive: "event: ping\ndata: {\"type\": \"ping\"}\n\n"
  }
]

const [chat] = providers

/** The provider's failure (an `AiError`), from a run that must fail. */
const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    assert(Exit.isFailure(exit), "expected a failure")
    const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
    assert(error?._tag === "Fail", `expected a typed failure, got ${String(exit.cause)}`)
    assert(AiError.isAiError(error.error), `expected an AiError, got ${String(error.error)}`)
    return error.error
  })

/** The first events of a recorded stream: everything before the event that holds `fraction` of its length. */
const prefix = (text: string, fraction: number) => {
  const cut = text.lastIndexOf("\n\n", Math.floor(text.length * fraction))
  return text.slice(0, cut + 2)
}

/** A point in the middle of an event (not at a line end). */
const midEvent = (text: string, fraction: number) => {
  let cut = Math.floor(text.length * fraction)
  while (text[cut] === "\n" || text[cut - 1] === "\n") cut++
  return text.slice(0, cut)
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  Effect.succeed(HttpServerResponse.jsonUnsafe(body, { status, headers }))

const retryRecorder = Effect.map(Queue.unbounded<Provider.RetryInfo>(), (queue) => ({
  queue,
  onRetry: (info: Provider.RetryInfo) => Effect.asVoid(Queue.offer(queue, info))
}))

/** The failure of one call to a provider whose server streams `body`. */
const failureOf = (provider: Provider, body: string) =>
  Effect.flatMap(TestServer.start(() => Effect.succeed(TestServer.sse(body))), (server) =>
    failure(ProviderTest.generate("hi").pipe(Effect.provide(provider.layer({ baseUrl: server.baseUrl })))))

/** A recorded stream with `event` inserted after its first event. */
const withEventAfterFirst = (text: string, event: string) => {
  const first = text.indexOf("\n\n") + 2
  return `${text.slice(0, first)}${event}${text.slice(first)}`
}

// Lets the client fiber reach its next sleep before the test clock moves.
const settle = TestClock.withLive(Effect.sleep("20 millis"))

/** Moves the test clock by `step` until the fiber is done (at most 20 steps). */
const advanceUntilDone = (fiber: Fiber.Fiber<unknown, unknown>, step: Duration.Input) =>
  Effect.gen(function*() {
    for (let steps = 0; steps < 20 && fiber.pollUnsafe() === undefined; steps++) {
      yield* settle
      yield* TestClock.adjust(step)
    }
  })

describe("provider faults", () => {
  it.effect("429 with retry-after: 1 is retried once, after waiting one second", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start((_, index) =>
        index === 0
          ? json(429, { error: { message: "Rate limit reached", type: "requests" } }, { "retry-after": "1" })
          : Effect.succeed(TestServer.sse(TestServer.fixture(chat!.fixture)))
      )
      const retries = yield* retryRecorder
      const fiber = yield* ProviderTest.generate("hi").pipe(
        Effect.provide(chat!.layer({ baseUrl: server.baseUrl, retry: { baseDelay: "10 millis", onRetry: retries.onRetry } })),
        Effect.forkChild
      )
      const retry = yield* Queue.take(retries.queue)
      assert.strictEqual(retry.attempt, 1)
      assert.strictEqual(Duration.toMillis(retry.delay), 1000)
      assert.strictEqual(retry.error.reason._tag, "RateLimitError")
      yield* settle
      yield* TestClock.adjust("999 millis")
      yield* settle
      assert.strictEqual(server.requests.length, 1)
      yield* TestClock.adjust("1 millis")
      const response = yield* Fiber.join(fiber)
      assert.strictEqual(server.requests.length, 2)
      assert.strictEqual(response.finishReason, "stop")
      assert.isTrue(response.text.startsWith("I'm unable to provide real-time weather updates."))
    }))

  it.effect("retry-after-ms is honoured too", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start((_, index) =>
        index === 0
          ? json(503, { error: { message: "busy" } }, { "retry-after-ms": "2500" })
          : Effect.succeed(TestServer.sse(TestServer.fixture(chat!.fixture)))
      )
      const retries = yield* retryRecorder
      const fiber = yield* ProviderTest.generate("hi").pipe(
        Effect.provide(chat!.layer({ baseUrl: server.baseUrl, retry: { baseDelay: "10 millis", onRetry: retries.onRetry } })),
        Effect.forkChild
      )
      const retry = yield* Queue.take(retries.queue)
      assert.strictEqual(Duration.toMillis(retry.delay), 2500)
      assert.strictEqual(retry.error.reason._tag, "InternalProviderError")
      assert.deepStrictEqual(retry.reason, { _tag: "HttpStatus", status: 503 })
      assert.strictEqual(retry.maxRetries, 4)
      assert.strictEqual(Provider.describeRetry(retry), "retrying in 2.5 s after 503 (1 of 4)")
      yield* settle
      yield* TestClock.adjust("2500 millis")
      yield* Fiber.join(fiber)
      assert.strictEqual(server.requests.length, 2)
    }))

  it.effect("five 503s fail with a typed error after the configured attempts, backing off exponentially", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() => json(503, { error: { message: "The server is overloaded" } }))
      const retries = yield* retryRecorder
      const fiber = yield* ProviderTest.generate("hi").pipe(
        Effect.provide(chat!.layer({
          baseUrl: server.baseUrl,
          retry: { maxRetries: 4, baseDelay: "100 millis", onRetry: retries.onRetry }
        })),
        Effect.forkChild
      )
      for (let attempt = 1; attempt <= 4; attempt++) {
        const retry = yield* Queue.take(retries.queue)
        const expected = 100 * 2 ** (attempt - 1)
        assert.strictEqual(retry.attempt, attempt)
        assert.strictEqual(retry.maxRetries, 4)
        assert.deepStrictEqual(retry.reason, { _tag: "HttpStatus", status: 503 })
        assert.isAtLeast(Duration.toMillis(retry.delay), expected * 0.8)
        assert.isAtMost(Duration.toMillis(retry.delay), expected * 1.2)
        yield* settle
        yield* TestClock.adjust(retry.delay)
      }
      const error = yield* failure(Fiber.join(fiber))
      assert.strictEqual(server.requests.length, 5)
      assert.strictEqual(error.module, "OpenAiChat")
      assert(error.reason._tag === "InternalProviderError")
      assert.strictEqual(error.reason.http?.response?.status, 503)
      assert.include(error.reason.description, "The server is overloaded")
    }))

  it.live("a refused connection is retried, each retry saying so, then fails naming its tag once", () =>
    Effect.gen(function*() {
      // A port that was just free: nothing listens there.
      const closed = yield* Effect.scoped(TestServer.start(() => json(200, {})))
      const retries: Array<Provider.RetryInfo> = []
      const error = yield* failure(ProviderTest.generate("hi").pipe(
        Effect.provide(chat!.layer({
          baseUrl: closed.baseUrl,
          retry: {
            maxRetries: 2,
            baseDelay: "1 millis",
            maxDelay: "5 millis",
            onRetry: (info) => Effect.sync(() => retries.push(info))
          }
        }))
      ))
      assert.deepStrictEqual(retries.map((info) => [info.attempt, info.maxRetries, info.reason]), [
        [1, 2, { _tag: "Network", description: "connection refused" }],
        [2, 2, { _tag: "Network", description: "connection refused" }]
      ])
      assert.match(Provider.describeRetry(retries[1]!), /^retrying in 0\.0 s after connection refused \(2 of 2\)$/)
      assert(error.reason._tag === "NetworkError")
      assert.strictEqual(error.reason.description, "connection refused")
      assert.strictEqual(error.message.split("TransportError").length, 2, error.message)
      const expected = `OpenAiChat.streamText: TransportError: connection refused (POST ${closed.baseUrl}`
      assert.isTrue(error.message.startsWith(expected), error.message)
    }))

  it.effect("a 400 is not retried and carries the status and the provider's message", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() =>
        json(400, {
          error: { message: "Invalid schema for function 'get_weather'", type: "invalid_request_error", code: null }
        }, { "x-request-id": "req_123" })
      )
      const error = yield* failure(ProviderTest.generate("hi").pipe(Effect.provide(chat!.layer({ baseUrl: server.baseUrl }))))
      assert.strictEqual(server.requests.length, 1)
      assert(error.reason._tag === "InvalidRequestError")
      assert.strictEqual(error.reason.http?.response?.status, 400)
      assert.include(error.reason.description, "Invalid schema for function 'get_weather'")
      assert.include(error.reason.description, "[requestId: req_123]")
      assert.isFalse(error.isRetryable)
    }))

  it.effect("a 429 for an exhausted quota is a QuotaExhaustedError and is not retried", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() =>
        json(429, { error: { message: "You exceeded your current quota", type: "insufficient_quota", code: "insufficient_quota" } })
      )
      const error = yield* failure(ProviderTest.generate("hi").pipe(Effect.provide(chat!.layer({ baseUrl: server.baseUrl }))))
      assert.strictEqual(server.requests.length, 1)
      assert.strictEqual(error.reason._tag, "QuotaExhaustedError")
    }))

  it.effect("the API key never appears in an error, even when the provider echoes it", () =>
    Effect.gen(function*() {
      for (const provider of providers) {
        const server = yield* TestServer.start(() =>
          json(401, { error: { message: `Incorrect API key provided: ${ProviderTest.apiKey}.`, type: "invalid_api_key" } })
        )
        const error = yield* failure(
          ProviderTest.generate("hi").pipe(Effect.provide(provider.layer({ baseUrl: server.baseUrl })))
        )
        assert.strictEqual(error.reason._tag, "AuthenticationError")
        const sentKey = server.requests[0]!.headers.authorization ?? server.requests[0]!.headers["x-api-key"]
        assert.include(sentKey, ProviderTest.apiKey)
        for (const rendering of [JSON.stringify(error), String(error), error.message, JSON.stringify(error.reason)]) {
          assert.notInclude(rendering, ProviderTest.apiKey)
        }
        assert.include(JSON.stringify(error.reason), "Incorrect API key provided: <redacted>")
      }
    }))

  for (const provider of providers) {
    describe(provider.name, () => {
      it.effect("a stream cut in the middle of an event fails, saying it ended before its terminal event", () =>
        Effect.gen(function*() {
          const error = yield* failureOf(provider, midEvent(TestServer.fixture(provider.fixture), 0.6))
          assert(error.reason._tag === "InvalidOutputError")
          assert.include(error.reason.description, "the stream ended before its terminal event")
        }))

      it.effect("a recorded stream whose last event lacks the final blank line is accepted, with LF or CRLF", () =>
        Effect.gen(function*() {
          const text = TestServer.fixture(provider.fixture)
          assert.isTrue(text.endsWith("\n\n"))
          const partsOf = (body: string) =>
            Effect.flatMap(TestServer.start(() => Effect.succeed(TestServer.sse(body))), (server) =>
              ProviderTest.streamParts("hi").pipe(
                Effect.provide(provider.layer({ baseUrl: server.baseUrl })),
                Effect.map(ProviderTest.plain)
              ))
          const whole = yield* partsOf(text)
          assert.strictEqual(whole.at(-1) && Reflect.get(Object(whole.at(-1)), "type"), "finish")
          assert.deepStrictEqual(yield* partsOf(text.slice(0, -1)), whole)
          const crlf = text.replaceAll("\n", "\r\n")
          assert.deepStrictEqual(yield* partsOf(crlf.slice(0, -2)), whole)
        }))

      it.effect("a recorded stream whose terminal event ends the body without its line break is accepted, with LF or CRLF", () =>
        Effect.gen(function*() {
          // as the Anthropic SDK's own recording ends: `data: {"type":"message_stop"}`, then nothing
          const text = TestServer.fixture(provider.fixture)
          const partsOf = (body: string) =>
            Effect.flatMap(TestServer.start(() => Effect.succeed(TestServer.sse(body))), (server) =>
              ProviderTest.streamParts("hi").pipe(
                Effect.provide(provider.layer({ baseUrl: server.baseUrl })),
                Effect.map(ProviderTest.plain)
              ))
          const whole = yield* partsOf(text)
          assert.strictEqual(whole.at(-1) && Reflect.get(Object(whole.at(-1)), "type"), "finish")
          assert.isTrue(text.trimEnd().endsWith(provider.name === "OpenAiChat" ? "data: [DONE]" : "}"))
          assert.deepStrictEqual(yield* partsOf(text.trimEnd()), whole)
          assert.deepStrictEqual(yield* partsOf(text.replaceAll("\n", "\r\n").trimEnd()), whole)
        }))

      it.effect("a body cut inside its terminal event's data (its JSON, or [DONE]) fails, saying it ended before it", () =>
        Effect.gen(function*() {
          const text = TestServer.fixture(provider.fixture).trimEnd()
          const value = text.lastIndexOf("data: ") + "data: ".length
          // one character short, in the middle of the value, and right after `data: `
          for (const cut of [text.length - 1, Math.floor((value + text.length) / 2), value]) {
            const error = yield* failureOf(provider, text.slice(0, cut))
            assert(error.reason._tag === "InvalidOutputError")
            assert.include(error.reason.description, "the stream ended before its terminal event")
          }
        }))

      it.effect("a body ending after a complete non-terminal event, without its blank line, is cut", () =>
        Effect.gen(function*() {
          const text = prefix(TestServer.fixture(provider.fixture), 0.5)
          for (const body of [text.slice(0, -1), text.slice(0, -2), text.slice(0, text.lastIndexOf("data:"))]) {
            const error = yield* failureOf(provider, body)
            assert(error.reason._tag === "InvalidOutputError")
            assert.include(error.reason.description, "the stream ended before its terminal event")
          }
        }))

      it.effect("a connection reset mid-stream fails with a NetworkError, after the parts already streamed", () =>
        Effect.gen(function*() {
          const text = prefix(TestServer.fixture(provider.fixture), 0.5)
          const server = yield* TestServer.start((request) => Effect.succeed(TestServer.sseThenReset(text, request)))
          const parts: Array<string> = []
          const error = yield* failure(
            ProviderTest.stream("hi").pipe(
              Stream.runForEach((part) => Effect.sync(() => parts.push(part.type))),
              Effect.provide(provider.layer({ baseUrl: server.baseUrl }))
            )
          )
          assert(error.reason._tag === "NetworkError")
          assert.strictEqual(error.reason.description, "connection closed by the server")
          assert.strictEqual(error.message.split("TransportError").length, 2, error.message)
          assert.strictEqual(server.requests.length, 1, "a started stream is not retried")
          assert.strictEqual(parts[0], "response-metadata")
          assert.notInclude(parts, "finish")
        }))

      it.effect("a data: line that is not JSON fails, quoting it", () =>
        Effect.gen(function*() {
          const error = yield* failureOf(
            provider,
            withEventAfterFirst(TestServer.fixture(provider.fixture), "data: {\"oops\n\n")
          )
          assert(error.reason._tag === "InvalidOutputError")
          assert.include(error.reason.description, "a data: line is not valid JSON: \"{\\\"oops\"")
        }))

      it.effect("an event missing a required field fails, naming the event", () =>
        Effect.gen(function*() {
          const error = yield* failureOf(
            provider,
            withEventAfterFirst(TestServer.fixture(provider.fixture), provider.incomplete)
          )
          assert(error.reason._tag === "InvalidOutputError")
          assert.include(error.reason.description, "is missing a required field")
        }))

      it.effect("a server that trickles bytes or comments, completing no event, fails after the idle timeout", () =>
        Effect.gen(function*() {
          const head = prefix(TestServer.fixture(provider.fixture), 0.3)
          const next = TestServer.fixture(provider.fixture).slice(head.length)
          const trickles: ReadonlyArray<ReadonlyArray<string | Uint8Array>> = [
            Array.from({ length: 40 }, () => ": keep-alive\n\n"),
            Array.from({ length: 40 }, () => "event: ping\n\n"),
            TestServer.chunks(next, 1).slice(0, 40)
          ]
          for (const pieces of trickles) {
            const server = yield* TestServer.start(() => Effect.succeed(TestServer.trickle(head, pieces, "500 millis")))
            const parts: Array<string> = []
            const fiber = yield* ProviderTest.stream("hi").pipe(
              Stream.runForEach((part) => Effect.sync(() => parts.push(part.type))),
              Effect.provide(provider.layer({ baseUrl: server.baseUrl, idleTimeout: "2 seconds" })),
              Effect.forkChild
            )
            for (let waits = 0; waits < 250 && parts.length === 0; waits++) yield* settle
            // 500 ms at a time: each step lets the server send one more piece.
            let steps = 0
            for (; steps < 20 && fiber.pollUnsafe() === undefined; steps++) {
              yield* settle
              yield* TestClock.adjust("500 millis")
            }
            yield* settle
            assert.isDefined(fiber.pollUnsafe(), "a trickle must not keep the call alive")
            assert.isAtMost(steps, 5)
            const error = yield* failure(Fiber.join(fiber))
            assert(error.reason._tag === "NetworkError")
            assert.strictEqual(
              error.reason.description,
              "the stream completed no event within the idle timeout (idleTimeout: 2s)"
            )
          }
        }))

      it.effect("complete events that add nothing keep the idle timeout at bay, but not the response timeout", () =>
        Effect.gen(function*() {
          const head = prefix(TestServer.fixture(provider.fixture), 0.3)
          const pieces = Array.from({ length: 40 }, () => provider.keepAlive)
          const server = yield* TestServer.start(() => Effect.succeed(TestServer.trickle(head, pieces, "500 millis")))
          const parts: Array<string> = []
          const fiber = yield* ProviderTest.stream("hi").pipe(
            Stream.runForEach((part) => Effect.sync(() => parts.push(part.type))),
            Effect.provide(
              provider.layer({ baseUrl: server.baseUrl, idleTimeout: "4 seconds", responseTimeout: "6 seconds" })
            ),
            Effect.forkChild
          )
          for (let waits = 0; waits < 250 && parts.length === 0; waits++) yield* settle
          let steps = 0
          for (; steps < 20 && fiber.pollUnsafe() === undefined; steps++) {
            yield* settle
            yield* TestClock.adjust("500 millis")
          }
          yield* settle
          assert.isDefined(fiber.pollUnsafe(), "the response timeout must end the call")
          assert.isAtLeast(steps, 11)
          assert.isAtMost(steps, 13)
          const error = yield* failure(Fiber.join(fiber))
          assert(error.reason._tag === "NetworkError")
          assert.strictEqual(
            error.reason.description,
            "the response did not end within the response timeout (responseTimeout: 6s)"
          )
          assert.notInclude(parts, "finish")
        }))

      it.effect("a response larger than maxResponseBytes fails with a typed error naming the limit", () =>
        Effect.gen(function*() {
          const text = TestServer.fixture(provider.fixture)
          const size = new TextEncoder().encode(text).length
          const run = (maxResponseBytes: number) =>
            Effect.flatMap(TestServer.start(() => Effect.succeed(TestServer.sse(text))), (server) =>
              Effect.exit(ProviderTest.generate("hi").pipe(
                Effect.provide(provider.layer({ baseUrl: server.baseUrl, maxResponseBytes }))
              )))
          assert.isTrue(Exit.isSuccess(yield* run(size)))
          const error = yield* failure(Effect.flatten(run(size - 1)))
          assert(error.reason._tag === "InvalidResponseError")
          assert.strictEqual(
            error.reason.description,
            `the response is larger than the size limit (maxResponseBytes: ${size - 1})`
          )
          assert.deepStrictEqual(error.reason.metadata, {
            "effect-agent": { limit: "maxResponseBytes", maxResponseBytes: size - 1 }
          })
          assert.isFalse(error.isRetryable)
        }))

      it.effect("a stream that goes quiet fails after the idle timeout", () =>
        Effect.gen(function*() {
          const text = prefix(TestServer.fixture(provider.fixture), 0.3)
          const server = yield* TestServer.start(() => Effect.succeed(TestServer.sseThenHang(text)))
          const parts: Array<string> = []
          const fiber = yield* ProviderTest.stream("hi").pipe(
            Stream.runForEach((part) => Effect.sync(() => parts.push(part.type))),
            Effect.provide(provider.layer({ baseUrl: server.baseUrl, idleTimeout: "30 seconds" })),
            Effect.forkChild
          )
          // Move the clock only once the body is streaming: earlier, the wait for
          // the response itself would time out instead.
          for (let waits = 0; waits < 250 && parts.length === 0; waits++) yield* settle
          yield* advanceUntilDone(fiber, "30 seconds")
          const error = yield* failure(Fiber.join(fiber))
          assert(error.reason._tag === "NetworkError")
          assert.strictEqual(
            error.reason.description,
            "the stream completed no event within the idle timeout (idleTimeout: 30s)"
          )
          assert.strictEqual(server.requests.length, 1)
          assert.strictEqual(parts[0], "response-metadata")
          assert.notInclude(parts, "finish")
        }))
    })
  }

  it.effect("an error response whose body never ends fails after the idle timeout, with the status", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() =>
        Effect.succeed(HttpServerResponse.stream(
          Stream.concat(Stream.fromIterable(TestServer.chunks("{\"error\":{\"message\":\"bu")), Stream.never),
          { status: 500, contentType: "application/json" }
        ))
      )
      const fiber = yield* ProviderTest.generate("hi").pipe(
        Effect.provide(chat!.layer({ baseUrl: server.baseUrl, idleTimeout: "2 seconds", retry: { maxRetries: 0 } })),
        Effect.forkChild
      )
      yield* advanceUntilDone(fiber, "1 second")
      assert.isDefined(fiber.pollUnsafe(), "the call must end")
      const error = yield* failure(Fiber.join(fiber))
      assert(error.reason._tag === "InternalProviderError")
      assert.strictEqual(error.reason.http?.response?.status, 500)
    }))

  it.effect("the response timeout bounds retries too", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() => json(503, { error: { message: "busy" } }, { "retry-after": "1" }))
      const fiber = yield* ProviderTest.generate("hi").pipe(
        Effect.provide(chat!.layer({
          baseUrl: server.baseUrl,
          responseTimeout: "2500 millis",
          retry: { maxRetries: 100, maxElapsed: "1 hour" }
        })),
        Effect.forkChild
      )
      yield* advanceUntilDone(fiber, "500 millis")
      assert.isDefined(fiber.pollUnsafe(), "the call must end")
      const error = yield* failure(Fiber.join(fiber))
      assert(error.reason._tag === "NetworkError")
      assert.strictEqual(
        error.reason.description,
        "the response did not end within the response timeout (responseTimeout: 2s 500ms)"
      )
      assert.isAtMost(server.requests.length, 3)
    }))

  it.effect("a response that never starts is retried, then fails after the idle timeout", () =>
    Effect.gen(function*() {
      // The server answers only once the client has failed: the client's idle timeout runs on the test clock.
      // (It answered after half a second of real time once, and at load 26 that answer came before the test
      // clock had reached the timeout. It answers at all so that closing it need not wait for its handlers.)
      const answer = yield* Deferred.make<void>()
      const server = yield* TestServer.start(() =>
        Effect.as(Deferred.await(answer), HttpServerResponse.text("too late", { status: 500 }))
      )
      const retries: Array<Provider.RetryInfo> = []
      const fiber = yield* ProviderTest.generate("hi").pipe(
        Effect.provide(chat!.layer({
          baseUrl: server.baseUrl,
          idleTimeout: "10 seconds",
          retry: { maxRetries: 1, baseDelay: "1 second", onRetry: (info) => Effect.sync(() => retries.push(info)) }
        })),
        Effect.forkChild
      )
      yield* advanceUntilDone(fiber, "10 seconds")
      const error = yield* failure(Fiber.join(fiber))
      yield* Deferred.succeed(answer, undefined)
      assert(error.reason._tag === "NetworkError")
      assert.strictEqual(error.reason.description, "no response within the idle timeout (idleTimeout: 10s)")
      assert.deepStrictEqual(retries.map((info) => info.reason), [
        { _tag: "Network", description: "no response within the idle timeout (idleTimeout: 10s)" }
      ])
      assert.strictEqual(server.requests.length, 2)
    }))

  it.effect("an Anthropic error event that ends the body without its blank line is reported as itself", () =>
    Effect.gen(function*() {
      const text = prefix(TestServer.fixture("anthropic/simple-text_claude-sonnet-4.sse"), 0.4)
      const error = yield* failureOf(
        providers[2]!,
        `${text}event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n`
      )
      assert(error.reason._tag === "InternalProviderError")
      assert.include(error.reason.description, "(overloaded_error): Overloaded")
    }))

  it.effect("an error event inside an Anthropic stream fails with the provider's error", () =>
    Effect.gen(function*() {
      const text = prefix(TestServer.fixture("anthropic/simple-text_claude-sonnet-4.sse"), 0.4)
      const error = yield* failureOf(
        providers[2]!,
        `${text}event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n`
      )
      assert(error.reason._tag === "InternalProviderError")
      assert.include(error.reason.description, "(overloaded_error): Overloaded")
    }))

  it.effect("a call that succeeds never runs the redactor (it costs a Schema round trip per failure)", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start((_, index) =>
        index === 0 ? Effect.succeed(TestServer.sse("data: {}\n\ndata: [DONE]\n\n")) : json(500, {})
      )
      const client = Context.get(yield* Layer.build(ProviderTest.client), HttpClient.HttpClient)
      let redactions = 0
      const call = SseTransport.stream({
        provider: "Test",
        client,
        request: HttpClientRequest.post(`${server.baseUrl}/`),
        retry: RetrySchedule.schedule({ maxRetries: 0 }),
        idleTimeout: Duration.seconds(30),
        responseTimeout: Duration.minutes(1),
        maxResponseBytes: 1024,
        redact: (text) => (redactions++, text),
        decoder: () => {
          const decoder = {
            terminal: "data: [DONE]",
            finished: false,
            push: (event: { readonly data: string }) => {
              decoder.finished = event.data === "[DONE]"
              return undefined
            }
          }
          return decoder
        }
      })
      yield* Stream.runDrain(call)
      assert.strictEqual(redactions, 0)
      yield* Effect.exit(Stream.runDrain(call))
      assert.isAbove(redactions, 0)
    }))
})

// On effect's own clock the transport's watchdog is a plain timer, not a fiber sleeping on the clock (the
// tests above run on the test clock, which takes the fiber's path): these run on the real clock.
describe("provider timeouts on the real clock", () => {
  const onRealClock = Effect.map(Effect.clockWith(Effect.succeed), Watchdog.isDefaultClock)

  it.live("a stream that goes quiet fails after the idle timeout", () =>
    Effect.gen(function*() {
      assert.isTrue(yield* onRealClock)
      const text = prefix(TestServer.fixture(chat!.fixture), 0.3)
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.sseThenHang(text)))
      const started = Date.now()
      const error = yield* failure(
        ProviderTest.generate("hi").pipe(
          Effect.provide(chat!.layer({ baseUrl: server.baseUrl, idleTimeout: "300 millis" }))
        )
      )
      const elapsed = Date.now() - started
      assert(error.reason._tag === "NetworkError")
      assert.strictEqual(
        error.reason.description,
        "the stream completed no event within the idle timeout (idleTimeout: 300ms)"
      )
      assert.isAtLeast(elapsed, 290)
      assert.isBelow(elapsed, 10_000)
    }))

  it.live("complete events keep the idle timeout at bay, but not the response timeout", () =>
    Effect.gen(function*() {
      const head = prefix(TestServer.fixture(chat!.fixture), 0.3)
      const pieces = Array.from({ length: 200 }, () => chat!.keepAlive)
      const server = yield* TestServer.start(() => Effect.succeed(TestServer.trickle(head, pieces, "50 millis")))
      const started = Date.now()
      const error = yield* failure(
        ProviderTest.generate("hi").pipe(
          // the idle timeout is 20 pieces apart: a loaded machine (CI) once stalled the trickle past 250 ms
          Effect.provide(chat!.layer({ baseUrl: server.baseUrl, idleTimeout: "1 second", responseTimeout: "3 seconds" }))
        )
      )
      const elapsed = Date.now() - started
      assert(error.reason._tag === "NetworkError")
      assert.strictEqual(
        error.reason.description,
        "the response did not end within the response timeout (responseTimeout: 3s)"
      )
      assert.isAtLeast(elapsed, 2990)
      assert.isBelow(elapsed, 10_000)
    }))

  it.live("calls that end leave no timer behind (a ref'd timer would hold the process open until it fires)", () =>
    Effect.gen(function*() {
      // The end of the answer comes in a later read, so that each call has its watchdog armed while it waits.
      const text = TestServer.fixture(chat!.fixture)
      const head = prefix(text, 0.5)
      const server = yield* TestServer.start(() =>
        Effect.succeed(TestServer.trickle(head, [text.slice(head.length)], "20 millis"))
      )
      const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length
      const layer = chat!.layer({ baseUrl: server.baseUrl, idleTimeout: "1 hour" })
      yield* ProviderTest.generate("hi").pipe(Effect.provide(layer))
      // The drain after the terminal event reads the body's end within its own short timer.
      yield* Effect.sleep("150 millis")
      const before = timers()
      for (let i = 0; i < 10; i++) yield* ProviderTest.generate("hi").pipe(Effect.provide(layer))
      yield* Effect.sleep("150 millis")
      assert.isBelow(timers() - before, 10)
    }))
})

// A consumer interrupted at any point of a call, once its request is sent, aborts the request: nothing else would
// (the reader has no watchdog yet, or no reader exists), and the connection would be held against a server that
// never ends its body.
describe("a call interrupted at every point", () => {
  const eventThenHang = () => {
    const seen = { sent: false, aborted: false, cancelled: false }
    const client = HttpClient.make((request, _url, signal) =>
      Effect.sync(() => {
        seen.sent = true
        signal.addEventListener("abort", () => {
          seen.aborted = true
        })
        const body = new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(new TextEncoder().encode("data: {}\n\n"))
          },
          cancel() {
            seen.cancelled = true
          }
        })
        return HttpClientResponse.fromWeb(request, new Response(body))
      })
    )
    return { seen, client }
  }

  const decoder = (): SseTransport.EventDecoder<string> => {
    const state = { terminal: "data: [DONE]", finished: false, push: (event: { readonly data: string }, out: Array<string>) => {
      state.finished = event.data === "[DONE]"
      out.push(event.data)
      return undefined
    } }
    return state
  }

  it.live("aborts the request it sent, at each of the first 150 yield points", () =>
    Effect.gen(function*() {
      const leaked: Array<number> = []
      let sent = 0
      for (let yields = 0; yields < 150; yields++) {
        const { client, seen } = eventThenHang()
        const call = SseTransport.stream({
          provider: "Test",
          client,
          request: HttpClientRequest.post("http://127.0.0.1:9/v1/chat/completions"),
          retry: RetrySchedule.schedule({ maxRetries: 0 }),
          idleTimeout: Duration.hours(1),
          responseTimeout: Duration.hours(2),
          maxResponseBytes: 1 << 20,
          redact: (text) => text,
          decoder
        })
        // Three operations between yields: the consumer pauses at nearly every step, where an interruption lands.
        const fiber = yield* Effect.forkDetach(
          Stream.runDrain(call).pipe(Effect.provideService(Scheduler.MaxOpsBeforeYield, 3))
        )
        for (let i = 0; i < yields; i++) yield* Effect.yieldNow
        // a bound, not a speed: an interruption that hangs fails here (1 s was not enough at load 30)
        yield* Fiber.interrupt(fiber).pipe(Effect.timeout(patience))
        yield* Effect.sleep("2 millis")
        if (seen.sent) sent++
        if (seen.sent && !seen.aborted && !seen.cancelled) leaked.push(yields)
      }
      // The sweep reached the points after the request was sent, not only the ones before.
      assert.isAbove(sent, 50)
      assert.deepStrictEqual(leaked, [])
    }))
})
