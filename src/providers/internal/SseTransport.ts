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
 *   `InvalidOutputError` (never a silently short answer); a complete last
 *   event counts without the blank line that should follow it, and without
 *   its last line break (a recording may end `data: {"type":"message_stop"}`),
 *   but a body cut inside the event (its JSON, or `[DONE]`) is cut short;
 * - after the terminal event the parts end at once; the rest of the body (the
 *   end of the chunked response, which a server sends with or right after the
 *   terminal event) is read to its end for at most {@link drainMillis}, so the
 *   connection goes back to the pool instead of being aborted, which would
 *   close it and build an abort error with its stack trace;
 * - trace headers (`b3`, `traceparent`) and the HTTP client span are only
 *   sent and made when a tracer is installed (the `Tracer` is not Effect's
 *   native default); with one, `effect/http`'s own references
 *   (`HttpClient.TracerPropagationEnabled`, `HttpClient.TracerDisabledWhen`)
 *   decide, as for any request.
 *
 * SSE framing is done by `SseFramer` (the rules of `effect/encoding`'s
 * `Sse.makeParser`, in a fifth of the time), fed each chunk of the body in a
 * plain loop (no Stream step per event). The `Sse.decode` channel is not used
 * because it ends the stream with a failure on a `retry:` field, which
 * providers may send and which must be ignored.
 *
 * {@link languageModel} gives the agent loop's calls (tool resolution off,
 * tool-call validation deferred) a path of their own: the provider's decoder
 * builds decoded parts directly, streamed a chunk per read of the body,
 * without `LanguageModel.make`'s second decode of every part. What that path
 * rebuilds of `LanguageModel.make` is in `compat.ts`, with why. Every other
 * call goes through `LanguageModel.make` as before.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Channel from "effect/Channel"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Pull from "effect/Pull"
import * as Result from "effect/Result"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Tracer from "effect/Tracer"
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as Sse from "effect/encoding/Sse"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientError from "effect/http/HttpClientError"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import type * as HttpClientResponse from "effect/http/HttpClientResponse"
import * as Compat from "./compat.ts"
import * as Output from "./Output.ts"
import * as PromptEncoding from "./PromptEncoding.ts"
import type * as Settings from "./Settings.ts"
import * as ProviderError from "./ProviderError.ts"
import * as Redaction from "../Redaction.ts"
import * as ResponseParts from "./ResponseParts.ts"
import * as RetrySchedule from "./RetrySchedule.ts"
import * as SseFramer from "./SseFramer.ts"
import * as Watchdog from "./Watchdog.ts"

/**
 * Turns one provider's SSE events into stream parts (`P`: encoded or decoded,
 * made by the `ResponseParts.Maker` the decoder was built with). `push`
 * appends the parts an event produces to `out` and returns a reason when the
 * event breaks the protocol; `finished` is true once the terminal event was
 * seen; `terminal` names that event for error messages.
 *
 * @since 0.1.0
 * @category models
 */
export interface EventDecoder<P> {
  readonly push: (event: Sse.Event, out: Array<P>) => AiError.AiErrorReason | undefined
  readonly finished: boolean
  readonly terminal: string
}

/**
 * How a body is decoded: the provider's decoder and the limits on its body.
 *
 * @since 0.1.0
 * @category models
 */
export interface Decoding<P> {
  /** The module name errors carry (`OpenAiChat`, `Anthropic`, …). */
  readonly provider: string
  /** The longest wait for the response to start, or for the next complete event. */
  readonly idleTimeout: Duration.Duration
  /** The longest a whole call may take, retries included, from the request to the terminal event. */
  readonly responseTimeout: Duration.Duration
  /** The most bytes a response body may have. */
  readonly maxResponseBytes: number
  /** Removes the key from the text of every failure (`Redaction.redactor`). */
  readonly redact: (text: string) => string
  /** Made once per attempt that reaches the body. */
  readonly decoder: () => EventDecoder<P>
}

/**
 * One streaming call.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<P> extends Decoding<P> {
  readonly client: HttpClient.HttpClient
  readonly request: HttpClientRequest.HttpClientRequest
  /** The retry schedule (`RetrySchedule.schedule`). */
  readonly retry: Schedule.Schedule<Duration.Duration, AiError.AiError>
}

// Every failure passes here: its texts are redacted once, after decoding.
const failure = (decoding: Pick<Decoding<unknown>, "provider" | "redact">) => (reason: AiError.AiErrorReason) =>
  AiError.make({
    module: decoding.provider,
    method: "streamText",
    reason: Redaction.redactReason(reason, decoding.redact)
  })

/**
 * Sends the request and streams the parts its decoder makes.
 *
 * @since 0.1.0
 * @category streaming
 */
export const stream = <P>(options: Options<P>): Stream.Stream<P, AiError.AiError> =>
  Stream.fromChannel(Channel.fromTransform((_, scope) =>
    Clock.clockWith((clock) => {
      const target: ProviderError.Target = { method: options.request.method, url: options.request.url }
      const fail = failure(options)
      // Failures are made when they happen: making one redacts it, which is not free.
      const overdue = Effect.failSync(() => fail(ProviderError.responseTimeout(target, options.responseTimeout)))
      const call: Call = {
        clock,
        deadline: clock.currentTimeMillisUnsafe() + Duration.toMillis(options.responseTimeout),
        target,
        fail,
        request: Scope.makeUnsafe()
      }
      // From the response to the reader's finalizer on the stream's scope nothing may interrupt: an
      // interruption there would leave the sent request open, with no watchdog and no one to abort it.
      // Sending stays interruptible, and the reader is forked interruptible.
      return Effect.uninterruptibleMask((restore) =>
        restore(send(options, call).pipe(
          Effect.timeoutOrElse({ duration: options.responseTimeout, orElse: () => overdue })
        )).pipe(
          Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Scope.close(call.request, exit)),
          Effect.flatMap((response) => readBody(response.stream, options, call, scope))
        )
      )
    })
  ))

/**
 * Streams the parts of a body already at hand, as {@link stream} does once
 * its request has succeeded (the benchmark runs the providers' decoding over
 * bytes in memory with it).
 *
 * @since 0.1.0
 * @category streaming
 */
export const decodeBody = <P>(
  body: Stream.Stream<Uint8Array, HttpClientError.HttpClientError>,
  decoding: Decoding<P>
): Stream.Stream<P, AiError.AiError> =>
  Stream.fromChannel(Channel.fromTransform((_, scope) =>
    Clock.clockWith((clock) =>
      readBody(body, decoding, {
        clock,
        deadline: clock.currentTimeMillisUnsafe() + Duration.toMillis(decoding.responseTimeout),
        target: { method: "POST", url: "memory" },
        fail: failure(decoding),
        request: Scope.makeUnsafe()
      }, scope)
    )
  ))

// The most of an unsuccessful response's body that is read: enough for any
// provider's error JSON, of which an error keeps 2,000 characters.
const maxErrorBodyBytes = 64 * 1024

// Without a tracer installed, the request makes no client span and carries no
// trace headers: nothing would receive the span, and the headers would only
// tell the server about it.
const noTracing = () => true

// Each request is tied to the call's request scope (`HttpClient.withScope`),
// which is closed, aborting the request, only when the call fails or is
// interrupted; a call that read its body to the end drops the scope instead.
// Without a scope, `effect/http` aborts every request when its body stream
// ends, complete or not, which builds an `AbortError` with a stack trace per
// call, and tracks each response for the garbage collector.
type ScopedClient = HttpClient.HttpClient.With<HttpClientError.HttpClientError, Scope.Scope>
const scopedClients = new WeakMap<HttpClient.HttpClient, ScopedClient>()

const scoped = (client: HttpClient.HttpClient) => {
  let scopedClient = scopedClients.get(client)
  if (scopedClient === undefined) {
    scopedClient = HttpClient.withScope(client)
    scopedClients.set(client, scopedClient)
  }
  return scopedClient
}

const execute = (client: HttpClient.HttpClient, request: HttpClientRequest.HttpClientRequest, scope: Scope.Scope) =>
  Effect.withFiber((fiber) => {
    const sent = Effect.provideService(scoped(client).execute(request), Scope.Scope, scope)
    return fiber.getRef(Tracer.Tracer) === Tracer.nativeTracer
      ? Effect.provideService(sent, HttpClient.TracerDisabledWhen, noTracing)
      : sent
  })

const send = <P>(
  options: Options<P>,
  call: Call
): Effect.Effect<HttpClientResponse.HttpClientResponse, AiError.AiError> => {
  const { target, fail } = call
  return execute(options.client, options.request, call.request).pipe(
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
}

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
  readonly fail: (reason: AiError.AiErrorReason) => AiError.AiError
  /** The scope of the call's requests: closing it aborts them. */
  readonly request: Scope.Closeable
}

type Chunk<P> = readonly [P, ...Array<P>]

/**
 * Hands the parts of each read from the reader fiber to the caller's pulls,
 * then the end of the call (`Cause.Done`, or its failure). A waiting pull is
 * resumed at once, in the reader's turn: `Queue` releases its takers through
 * the scheduler, a macrotask per read, which here would be one per event.
 */
class Mailbox<P> {
  private pending: Array<P> | undefined
  private exit: Exit.Exit<never, AiError.AiError | Cause.Done> | undefined
  private waiting: ((effect: Effect.Effect<Chunk<P>, AiError.AiError | Cause.Done>) => void) | undefined

  /** Takes the parts over: the caller must not change them after. */
  offer(parts: [P, ...Array<P>]): void {
    if (this.exit !== undefined) return
    const waiting = this.waiting
    if (waiting !== undefined) {
      this.waiting = undefined
      waiting(Effect.succeed(parts))
    } else if (this.pending === undefined) this.pending = parts
    else for (const part of parts) this.pending.push(part)
  }

  close(exit: Exit.Exit<never, AiError.AiError | Cause.Done>): void {
    if (this.exit !== undefined) return
    this.exit = exit
    const waiting = this.waiting
    if (waiting !== undefined && this.pending === undefined) {
      this.waiting = undefined
      waiting(exit)
    }
  }

  readonly take: Pull.Pull<Chunk<P>, AiError.AiError> = Effect.suspend(() => {
    const pending = this.pending
    if (pending !== undefined && isNonEmpty(pending)) {
      this.pending = undefined
      return Effect.succeed(pending)
    }
    if (this.exit !== undefined) return this.exit
    return Effect.callback<Chunk<P>, AiError.AiError | Cause.Done>((resume) => {
      this.waiting = resume
      return Effect.sync(() => {
        if (this.waiting === resume) this.waiting = undefined
      })
    })
  })
}

const done = Exit.fail(Cause.Done())

// Reads a response's body into parts, in a fiber of its own (the reader),
// while the caller takes the parts of each read from a queue. From the bytes
// to the parts in one plain loop per read: the size limit, UTF-8 decoding, SSE
// framing, the provider's decoder and the end-of-body check. The bytes are
// decoded here rather than by `Stream.decodeText`, so that the size limit
// counts bytes without another stage per chunk.
//
// The idle timeout counts the time without a complete event, not without a
// byte: a server that trickles bytes or comment lines must not keep a call
// alive. One `Watchdog` per call keeps both timeouts: it wakes at the
// idle deadline (the time of the last complete event plus the timeout) or the
// call's deadline, whichever is first; when it wakes and no event completed
// meanwhile, it fails the call and interrupts the reader. A timeout raced
// around each read would cost two fibers and a timer per read.
//
// A body may end without the blank line that dispatches its last event, or
// even without its last line break (some proxies and recordings strip them:
// the Anthropic SDK's own recording ends `data: {"type":"message_stop"}`).
// The end of the body is read as the end of its last line and that blank
// line, so a complete last event still counts. If the event dispatched this
// way is not the provider's terminal event, or does not parse (a body cut
// inside a line holds the head of a longer event: its JSON is not closed, a
// `[DONE]` not whole), the body ended too early; an error the provider
// reported in it is kept.
//
// After the terminal event the caller's stream ends at once; the reader reads
// the rest of the body for at most `drainMillis` (see there), outliving the
// stream. Ended before the terminal event (the caller stopped early, or was
// interrupted), the stream interrupts the reader, which aborts the request.
const readBody = <P>(
  bodyStream: Stream.Stream<Uint8Array, HttpClientError.HttpClientError>,
  options: Decoding<P>,
  call: Call,
  scope: Scope.Scope
): Effect.Effect<Pull.Pull<Chunk<P>, AiError.AiError>> =>
  Effect.gen(function*() {
    const { clock, fail } = call
    const mailbox = new Mailbox<P>()
    const decoder = options.decoder()
    const idleMillis = Duration.toMillis(options.idleTimeout)
    const text = new TextDecoder()
    let out: Array<P> = []
    let fault: AiError.AiErrorReason | undefined
    let bytes = 0
    // Whether the body has ended.
    let ending = false
    // When the last event completed (or the body started), in the clock's milliseconds.
    let lastEvent = clock.currentTimeMillisUnsafe()
    // Whether the caller has all it will get: every part, or the failure.
    let over = false
    // Whether the text fed since the last read of the clock completed an event: the clock is read once per feed.
    let completed = false
    const framer = new SseFramer.SseFramer((event) => {
      completed = true
      if (fault === undefined && !decoder.finished) fault = decoder.push(event, out)
    })
    // Set once the reader and the watchdog have started.
    let watchdog: Watchdog.Watch | undefined
    const failWith = (reason: AiError.AiErrorReason) => {
      if (over) return
      over = true
      watchdog?.stop()
      mailbox.close(Exit.fail(fail(reason)))
    }
    const truncated = () => failWith(ProviderError.truncated(decoder.terminal))
    // Feeds text to the parser; false when the call failed.
    const feed = (chunk: string): boolean => {
      if (chunk.length === 0) return true
      const tooLarge = framer.feed(chunk)
      if (completed) {
        completed = false
        lastEvent = clock.currentTimeMillisUnsafe()
      }
      if (tooLarge !== undefined) fault ??= ProviderError.invalidStream(tooLarge)
      if (fault !== undefined) {
        if (ending && fault._tag === "InvalidOutputError") truncated()
        else failWith(fault)
        return false
      }
      return true
    }
    const deliver = () => {
      const parts = out
      if (!isNonEmpty(parts)) return
      out = []
      mailbox.offer(parts)
    }
    const finish = () => {
      deliver()
      over = true
      watchdog?.stop()
      mailbox.close(done)
    }
    // The body ended: its last event may still be pending.
    const end = () => {
      if (!feed(text.decode())) return
      ending = true
      if (!feed(endOfBody)) return
      if (decoder.finished) finish()
      else truncated()
    }
    // One read of the body; whether to read on.
    const onRead = (chunks: ReadonlyArray<Uint8Array>): boolean => {
      for (const chunk of chunks) {
        bytes += chunk.length
        if (bytes > options.maxResponseBytes) {
          failWith(ProviderError.tooLarge(options.maxResponseBytes))
          return false
        }
        if (!feed(text.decode(chunk, streaming))) return false
        if (decoder.finished) {
          finish()
          return false
        }
      }
      deliver()
      return true
    }

    const body = Scope.makeUnsafe()
    const upstream = yield* Channel.toPullScoped(Stream.toChannel(bodyStream), body)
    // Whether the body was read to its end: then the request need not be aborted.
    let ended = false
    const read: Effect.Effect<void, HttpClientError.HttpClientError> = Effect.flatMap(
      Pull.catchDone(upstream, () => Effect.succeed(undefined)),
      (chunks) => {
        if (chunks !== undefined) return onRead(chunks) ? read : Effect.void
        ended = true
        return Effect.sync(end)
      }
    )
    // After the terminal event, the rest of the body, to its end or for at most `drainMillis`.
    const rest: Effect.Effect<void, HttpClientError.HttpClientError> = Effect.flatMap(
      Pull.catchDone(upstream, () => Effect.succeed(undefined)),
      (chunks) => {
        if (chunks === undefined) {
          ended = true
          return Effect.void
        }
        for (const chunk of chunks) bytes += chunk.length
        return bytes > options.maxResponseBytes ? Effect.void : rest
      }
    )
    const reader = read.pipe(
      Effect.andThen(Effect.suspend(() => decoder.finished ? drain(rest) : Effect.void)),
      Effect.catchCause((cause) =>
        Effect.sync(() => {
          if (over) return
          const error = Cause.findErrorOption(cause)
          if (Option.isSome(error)) return failWith(ProviderError.fromHttpClientError(error.value, call.target))
          if (Cause.hasInterruptsOnly(cause)) return
          // A defect (a bug in a decoder) reaches the caller as one.
          over = true
          watchdog?.stop()
          mailbox.close(Exit.die(Cause.squash(cause)))
        })
      ),
      Effect.ensuring(Effect.suspend(() =>
        ended
          ? Scope.close(body, Exit.void)
          : Effect.andThen(Scope.close(body, Exit.void), Scope.close(call.request, Exit.void))
      ))
    )
    // Not a child of the stream: it reads the rest of the body after the stream has ended. It starts at
    // once, so that a body already at hand is read without waiting for the scheduler.
    const fiber = yield* Effect.forkDetach(reader, { startImmediately: true })
    yield* Scope.addFinalizer(
      scope,
      Effect.suspend(() => {
        watchdog?.stop()
        return decoder.finished ? Effect.void : Fiber.interrupt(fiber)
      })
    )
    if (over) return mailbox.take

    // Wakes at the idle deadline or the call's, whichever is first; fails the call if no event completed meanwhile.
    const expire = (reason: AiError.AiErrorReason) => {
      failWith(reason)
      fiber.interruptUnsafe()
      return undefined
    }
    watchdog = Watchdog.startUnsafe(clock, Math.min(lastEvent + idleMillis, call.deadline), (now) => {
      if (over) return undefined
      if (now >= call.deadline) return expire(ProviderError.responseTimeout(call.target, options.responseTimeout))
      const idleAt = lastEvent + idleMillis
      if (now >= idleAt) return expire(ProviderError.idle(call.target, options.idleTimeout, "stream"))
      return Math.min(idleAt, call.deadline)
    })
    return mailbox.take
  })

const streaming = { stream: true }

/**
 * How long the rest of a body is read after its terminal event before the
 * response is closed: long enough for the end of the response, which servers
 * send with the terminal event or right after it, and short enough that a
 * server that keeps the body open costs a call little.
 *
 * @since 0.1.0
 * @category constants
 */
export const drainMillis = 100

// Reads the rest of a body for at most `drainMillis`, then interrupts the
// reader (which aborts the request). The timer is on the wall clock, not
// Effect's `Clock`: it bounds how long a finished call keeps reading to reuse
// its connection, which no caller configures and no test clock should hold
// up. A plain timer interrupting the reader, rather than a race with a sleep,
// which would fork two fibers per call.
const drain = (rest: Effect.Effect<void, HttpClientError.HttpClientError>) =>
  Effect.withFiber((fiber) => {
    const timer = setTimeout(() => fiber.interruptUnsafe(), drainMillis)
    return Effect.ensuring(rest, Effect.sync(() => clearTimeout(timer)))
  })

// Fed at the end of a body: it ends the body's last line when the body ended
// inside one, then dispatches the last event (after a line feed, or after the
// LF the parser skips following a CR, a blank line).
const endOfBody = "\n\n"

const isNonEmpty = <A>(array: Array<A>): array is [A, ...Array<A>] => array.length > 0

/**
 * Parses an event's `data:` as JSON, or says that it could not.
 *
 * @since 0.1.0
 * @category decoding
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
 * @category decoding
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
 * @category models
 */
export interface WireFormat {
  /** The module name errors carry. */
  readonly provider: string
  /** The request, without its body: URL and headers. */
  readonly request: HttpClientRequest.HttpClientRequest
  /** The JSON text of a call's body; may throw `PromptEncoding.UnsupportedContent`. */
  readonly body: (options: LanguageModel.ProviderOptions) => string
  /** A fresh decoder for one response, making its parts with `make`. */
  readonly decoder: <P>(make: ResponseParts.Maker<P>) => EventDecoder<P>
  readonly codecTransformer?: LanguageModel.CodecTransformer | undefined
  readonly supportsSystemMessagesInHistory: boolean
}

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

/**
 * The `LanguageModel` of a wire format: `streamText` sends the request and
 * decodes its stream; `generateText` collects that same stream. Made by
 * `LanguageModel.make`, with the loop's calls on the direct path of
 * `compat.withDirectLoopCalls`, which streams decoded parts straight from the
 * decoder.
 *
 * @since 0.1.0
 * @category constructors
 */
export const languageModel = Effect.fnUntraced(function*(settings: Settings.Settings, format: WireFormat) {
  const client = yield* HttpClient.HttpClient
  const retry = RetrySchedule.schedule(settings.retry)
  const call = <P>(providerOptions: LanguageModel.ProviderOptions, make: ResponseParts.Maker<P>) =>
    Stream.unwrap(Effect.map(
      Effect.flatMap(Output.NativeFormat, (native) =>
        PromptEncoding.encodeRequest(format.provider, () => format.body(withNativeFormat(providerOptions, native)))),
      (body) =>
        stream({
          provider: format.provider,
          client,
          request: HttpClientRequest.bodyText(format.request, body, "application/json"),
          retry,
          idleTimeout: settings.idleTimeout,
          responseTimeout: settings.responseTimeout,
          maxResponseBytes: settings.maxResponseBytes,
          redact: settings.redact,
          decoder: () => format.decoder(make)
        })
    ))
  const base = yield* LanguageModel.make({
    streamText: (providerOptions) => call(providerOptions, ResponseParts.encoded),
    generateText: (providerOptions) => ResponseParts.collect(call(providerOptions, ResponseParts.encoded)),
    codecTransformer: format.codecTransformer,
    supportsSystemMessagesInHistory: Effect.succeed(format.supportsSystemMessagesInHistory)
  })
  return yield* Compat.withDirectLoopCalls(base, (providerOptions) => call(providerOptions, Compat.decodedParts))
})
