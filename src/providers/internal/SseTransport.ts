/**
 * The streaming transport every provider shares: send one JSON request with
 * retries (see `RetrySchedule`), then read its Server-Sent Events body into
 * `effect/ai` stream parts through the provider's {@link EventDecoder}. It
 * enforces the protocol rules the providers rely on:
 *
 * - a response that does not start, or a body that completes no event, for
 *   longer than the idle timeout fails with a `NetworkError` that says so (a
 *   byte, or a comment line, is not an event);
 * - a call that has not ended within the response timeout, retries included,
 *   fails with a `NetworkError`, and a body larger than the size limit with an
 *   `InvalidResponseError`, each naming its option;
 * - a body that ends before the provider's terminal event fails with an
 *   `InvalidOutputError` (never a silently short answer); a last event whose
 *   lines all ended with a line break counts even without the blank line
 *   that should follow it, but a body cut inside a line is cut short;
 * - after the terminal event the stream ends at once, without waiting for the
 *   server to close the connection.
 *
 * SSE framing is parsed with `effect/encoding`'s `Sse.makeParser`. The
 * `Sse.decode` channel is not used because it ends the stream with a failure
 * on a `retry:` field, which providers may send and which must be ignored.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Duration, Effect, Pull, Result, type Schedule, Schema, Stream } from "effect"
import { AiError, LanguageModel, type Response } from "effect/ai"
import { Sse } from "effect/encoding"
import { HttpClient, HttpClientError, HttpClientRequest, type HttpClientResponse } from "effect/http"
import * as Output from "../../Output.ts"
import * as PromptEncoding from "./PromptEncoding.ts"
import type * as Settings from "./Settings.ts"
import * as ProviderError from "./ProviderError.ts"
import * as Redaction from "./Redaction.ts"
import * as ResponseParts from "./ResponseParts.ts"
import * as RetrySchedule from "./RetrySchedule.ts"

/**
 * Turns one provider's SSE events into stream parts. `push` appends the parts
 * an event produces to `out` and returns a reason when the event breaks the
 * protocol; `finished` is true once the terminal event was seen; `terminal`
 * names that event for error messages.
 *
 * @since 0.1.0
 */
export interface EventDecoder {
  readonly push: (event: Sse.Event, out: Array<Response.StreamPartEncoded>) => AiError.AiErrorReason | undefined
  readonly finished: boolean
  readonly terminal: string
}

/**
 * One streaming call.
 *
 * @since 0.1.0
 */
export interface Options {
  /** The module name errors carry (`OpenAiChat`, `Anthropic`, …). */
  readonly provider: string
  readonly client: HttpClient.HttpClient
  readonly request: HttpClientRequest.HttpClientRequest
  /** The retry schedule (`RetrySchedule.schedule`). */
  readonly retry: Schedule.Schedule<Duration.Duration, AiError.AiError>
  /** The longest wait for the response to start, or for the next complete event. */
  readonly idleTimeout: Duration.Duration
  /** The longest a whole call may take, retries included, from the request to the terminal event. */
  readonly responseTimeout: Duration.Duration
  /** The most bytes a response body may have. */
  readonly maxResponseBytes: number
  /** Removes the key from the text of every failure (`Redaction.redactor`). */
  readonly redact: (text: string) => string
  /** Made once per attempt that reaches the body. */
  readonly decoder: () => EventDecoder
}

/**
 * Sends the request and streams the decoded parts.
 *
 * @since 0.1.0
 */
export const stream = (options: Options): Stream.Stream<Response.StreamPartEncoded, AiError.AiError> => {
  const target: ProviderError.Target = { method: options.request.method, url: options.request.url }
  // Every failure passes here: its texts are redacted once, after decoding.
  const fail = (reason: AiError.AiErrorReason) =>
    AiError.make({
      module: options.provider,
      method: "streamText",
      reason: Redaction.redactReason(reason, options.redact)
    })
  // Failures are made when they happen: making one redacts it, which is not free.
  const overdue = Effect.failSync(() => fail(ProviderError.responseTimeout(target, options.responseTimeout)))
  return Stream.unwrap(Clock.clockWith((clock) => {
    const deadline = clock.currentTimeMillisUnsafe() + Duration.toMillis(options.responseTimeout)
    return send(options, target, fail).pipe(
      Effect.timeoutOrElse({ duration: options.responseTimeout, orElse: () => overdue }),
      Effect.map((response) =>
        response.stream.pipe(
          (bytes) => decodeEvents(bytes, options, { clock, deadline, target, overdue, fail }),
          Stream.mapError((error) =>
            HttpClientError.isHttpClientError(error)
              ? fail(ProviderError.fromHttpClientError(error, target))
              : error
          )
        )
      )
    )
  }))
}

// The most of an unsuccessful response's body that is read: enough for any
// provider's error JSON, of which an error keeps 2,000 characters.
const maxErrorBodyBytes = 64 * 1024

const send = (
  options: Options,
  target: ProviderError.Target,
  fail: (reason: AiError.AiErrorReason) => AiError.AiError
): Effect.Effect<HttpClientResponse.HttpClientResponse, AiError.AiError> =>
  options.client.execute(options.request).pipe(
    Effect.timeoutOrElse({
      duration: options.idleTimeout,
      orElse: () => Effect.fail(fail(ProviderError.idle(target, options.idleTimeout, "response")))
    }),
    Effect.flatMap((response) =>
      response.status >= 200 && response.status < 300
        ? Effect.succeed(response)
        : Effect.flatMap(
          Effect.zip(errorBody(response, options.idleTimeout), Clock.currentTimeMillis),
          ([body, nowMillis]) =>
            Effect.fail(fail(ProviderError.fromResponse({
              status: response.status,
              headers: response.headers,
              body,
              target,
              nowMillis,
              redact: options.redact
            })))
        )
    ),
    Effect.catchIf(HttpClientError.isHttpClientError, (error) =>
      Effect.fail(fail(ProviderError.fromHttpClientError(error, target)))),
    Effect.retry(options.retry)
  )

// The start of an error response's body, or "" when it cannot be read within
// the idle timeout: a server that trickles an endless error body must not
// hold the call.
const errorBody = (response: HttpClientResponse.HttpClientResponse, idleTimeout: Duration.Duration) => {
  let bytes = 0
  return response.stream.pipe(
    Stream.takeUntil((chunk) => (bytes += chunk.length) >= maxErrorBodyBytes),
    Stream.decodeText(),
    Stream.mkString,
    Effect.timeoutOrElse({ duration: idleTimeout, orElse: () => Effect.succeed("") }),
    Effect.orElseSucceed(() => "")
  )
}

interface Call {
  readonly clock: Clock.Clock
  /** When the call must have ended, in the clock's milliseconds. */
  readonly deadline: number
  readonly target: ProviderError.Target
  readonly overdue: Effect.Effect<never, AiError.AiError>
  readonly fail: (reason: AiError.AiErrorReason) => AiError.AiError
}

// One stateful step from the body's bytes to parts: the size limit, UTF-8
// decoding, SSE framing, the provider's decoder, the end-of-body check, the
// stop after the terminal event, and the two timeouts. The bytes are decoded
// here rather than by `Stream.decodeText`, so that the size limit counts bytes
// without another stage per chunk.
//
// The idle timeout counts the time without a complete event, not without a
// byte: a server that trickles bytes or comment lines must not keep a call
// alive. It is one timeout around the reads that complete the next event(s),
// which costs no more per chunk than a timeout on each read. Near the
// deadline, that timeout is cut to the time left, and running out of it fails
// the call with the response timeout instead.
//
// A body may end without the blank line that dispatches its last event (some
// proxies and recordings strip it). When the body's last line was complete
// (it ended with a line break), the end of the body is read as that blank
// line, so a complete last event still counts; a body cut inside a line is
// cut short, whatever the partial line holds. If the event dispatched this way
// is not the provider's terminal event, or does not parse (it may be the head
// of a longer event), the body still ended too early; an error the provider
// reported in it is kept.
const decodeEvents = <E>(
  body: Stream.Stream<Uint8Array, E>,
  options: Options,
  call: Call
): Stream.Stream<Response.StreamPartEncoded, E | AiError.AiError> =>
  Stream.transformPull(body, (upstream) =>
    Effect.sync(() => {
      const { clock, deadline, fail } = call
      const decoder = options.decoder()
      const idleMillis = Duration.toMillis(options.idleTimeout)
      const idle = Effect.failSync(() => fail(ProviderError.idle(call.target, options.idleTimeout, "stream")))
      const text = new TextDecoder()
      let out: Array<Response.StreamPartEncoded> = []
      let fault: AiError.AiErrorReason | undefined
      let bytes = 0
      let events = 0
      // Whether the text so far ends inside a line, and whether the body has ended.
      let lineOpen = false
      let ending = false
      const parser = Sse.makeParser((event) => {
        if (event._tag !== "Event") return
        events++
        if (fault === undefined && !decoder.finished) fault = decoder.push(event, out)
      })
      const truncated = Effect.failSync(() => fail(ProviderError.truncated(decoder.terminal)))
      // Feeds text to the parser; a failure to return, or undefined.
      const feed = (chunk: string): Effect.Effect<never, AiError.AiError> | undefined => {
        if (chunk.length === 0) return undefined
        const tooLarge = parser.feed(chunk)
        if (tooLarge !== undefined) fault ??= ProviderError.invalidStream(tooLarge.message)
        if (fault !== undefined) {
          return ending && fault._tag === "InvalidOutputError" ? truncated : Effect.fail(fail(fault))
        }
        const last = chunk.charCodeAt(chunk.length - 1)
        lineOpen = last !== LF && last !== CR
        return undefined
      }
      const end = (): Effect.Effect<void, AiError.AiError> => {
        const failed = feed(text.decode())
        if (failed !== undefined) return failed
        if (lineOpen) return truncated
        ending = true
        return feed(endOfBody) ?? (decoder.finished ? Effect.void : truncated)
      }
      // Reads until an event completes (or the body ends, or the decoder is done).
      const read: Effect.Effect<void, E | AiError.AiError> = Effect.flatMap(
        Pull.catchDone(upstream, () => Effect.succeed(undefined)),
        (chunks) => {
          if (chunks === undefined) return end()
          for (const chunk of chunks) {
            bytes += chunk.length
            if (bytes > options.maxResponseBytes) {
              return Effect.fail(fail(ProviderError.tooLarge(options.maxResponseBytes)))
            }
            const failed = feed(text.decode(chunk, streaming))
            if (failed !== undefined) return failed
            if (decoder.finished) return Effect.void
          }
          return events === 0 ? read : Effect.void
        }
      )
      const next: Pull.Pull<NonEmptyParts, E | AiError.AiError> = Effect.suspend(() => {
        if (decoder.finished) return Cause.done()
        events = 0
        const left = deadline - clock.currentTimeMillisUnsafe()
        const timed = left > idleMillis
          ? Effect.timeoutOrElse(read, { duration: idleMillis, orElse: () => idle })
          : Effect.timeoutOrElse(read, { duration: Math.max(left, 0), orElse: () => call.overdue })
        return Effect.flatMap(timed, () => {
          if (!isNonEmpty(out)) return next
          const parts = out
          out = []
          return Effect.succeed(parts)
        })
      })
      return next
    }))

const streaming = { stream: true }

// Fed at the end of a body whose last line is complete: a blank line after a
// line feed, or after the LF the parser skips following a CR.
const endOfBody = "\n\n"
const LF = 10
const CR = 13

type NonEmptyParts = readonly [Response.StreamPartEncoded, ...Array<Response.StreamPartEncoded>]

const isNonEmpty = <A>(array: Array<A>): array is [A, ...Array<A>] => array.length > 0

/**
 * Parses an event's `data:` as JSON, or says that it could not.
 *
 * @since 0.1.0
 */
export const parseData = (event: Sse.Event): Result.Result<unknown, AiError.InvalidOutputError> => {
  try {
    return Result.succeed(JSON.parse(event.data))
  } catch {
    const data = event.data.length > 200 ? `${event.data.slice(0, 200)}...` : event.data
    return Result.fail(ProviderError.invalidStream(`a data: line is not valid JSON: ${JSON.stringify(data)}`))
  }
}

/**
 * A decoder for one wire event's Schema, whose failures say which event missed
 * which field. Unknown fields are ignored.
 *
 * @since 0.1.0
 */
export const decodeWith = <S extends Schema.Decoder<unknown>>(schema: S, name: string) => {
  const decode = Schema.decodeUnknownResult(schema)
  return (value: unknown): Result.Result<S["Type"], AiError.InvalidOutputError> =>
    Result.mapError(
      decode(value),
      (error) =>
        ProviderError.invalidStream(`event ${name} is missing a required field or has a wrong one: ${error.message}`)
    )
}

/**
 * A provider's wire format: how a request body is encoded and how its
 * stream is decoded.
 *
 * @since 0.1.0
 */
export interface WireFormat {
  /** The module name errors carry. */
  readonly provider: string
  /** The request, without its body: URL and headers. */
  readonly request: HttpClientRequest.HttpClientRequest
  /** The JSON body for a call; may throw `PromptEncoding.UnsupportedContent`. */
  readonly body: (options: LanguageModel.ProviderOptions) => unknown
  /** A fresh decoder for one response. */
  readonly decoder: () => EventDecoder
  readonly codecTransformer?: LanguageModel.CodecTransformer | undefined
  readonly supportsSystemMessagesInHistory: boolean
}

/**
 * The `LanguageModel` of a wire format: `streamText` sends the request and
 * decodes its stream; `generateText` collects that same stream.
 *
 * @since 0.1.0
 */
/**
 * The request's options with the structured output a run asks for natively
 * (`Output.NativeFormat`), as `generateObject` would ask for it; a request
 * that already asks for one keeps its own.
 */
const withNativeFormat = (
  providerOptions: LanguageModel.ProviderOptions,
  native: typeof Output.NativeFormat.Service
): LanguageModel.ProviderOptions =>
  native === undefined || providerOptions.responseFormat.type === "json"
    ? providerOptions
    : { ...providerOptions, responseFormat: { type: "json", objectName: native.objectName, schema: native.schema } }

export const languageModel = Effect.fnUntraced(function*(settings: Settings.Settings, format: WireFormat) {
  const client = yield* HttpClient.HttpClient
  const retry = RetrySchedule.schedule(settings.retry)
  const streamText = (providerOptions: LanguageModel.ProviderOptions) =>
    Stream.unwrap(Effect.map(
      Effect.flatMap(Output.NativeFormat, (native) =>
        PromptEncoding.encodeRequest(format.provider, () => format.body(withNativeFormat(providerOptions, native)))),
      (body) =>
        stream({
          provider: format.provider,
          client,
          request: HttpClientRequest.bodyJsonUnsafe(format.request, body),
          retry,
          idleTimeout: settings.idleTimeout,
          responseTimeout: settings.responseTimeout,
          maxResponseBytes: settings.maxResponseBytes,
          redact: settings.redact,
          decoder: format.decoder
        })
    ))
  return yield* LanguageModel.make({
    streamText,
    generateText: (providerOptions) => ResponseParts.collect(streamText(providerOptions)),
    codecTransformer: format.codecTransformer,
    supportsSystemMessagesInHistory: Effect.succeed(format.supportsSystemMessagesInHistory)
  })
})
