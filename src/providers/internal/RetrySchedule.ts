/**
 * The retry schedule of a provider call, for `Effect.retry`: which failures
 * are retried (the statuses and failures `Provider.RetryPolicy` lists), how
 * long each wait is (exponential with jitter, capped, never sooner than the
 * server's `retry-after-ms` / `retry-after`), when retrying stops, and the
 * {@link Provider.RetryInfo} its observer sees.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as AiError from "effect/ai/AiError"
import * as Headers from "effect/http/Headers"
import * as Provider from "../Provider.ts"

/**
 * The reason of a retryable failure: its HTTP status, or its description as
 * a network failure.
 *
 * @since 0.1.0
 */
export const reasonOf = (error: AiError.AiError): Provider.RetryReason => {
  const reason = error.reason
  const status = "http" in reason ? reason.http?.response?.status : undefined
  if (status !== undefined) return { _tag: "HttpStatus", status }
  const description = reason._tag === "NetworkError" ? reason.description : undefined
  return { _tag: "Network", description: description ?? reason._tag }
}

/**
 * The delay a response asks for: `retry-after-ms` (milliseconds, as OpenAI
 * sends), else `retry-after` (seconds or an HTTP date, relative to `nowMillis`).
 * Unparsable or negative values are ignored.
 *
 * @since 0.1.0
 */
export const retryAfter = (
  headers: Readonly<Record<string, unknown>>,
  nowMillis: number
): Duration.Duration | undefined => {
  const ms = headers["retry-after-ms"]
  if (typeof ms === "string") {
    const value = Number(ms)
    if (ms.trim() !== "" && Number.isFinite(value) && value >= 0) return Duration.millis(value)
  }
  const after = headers["retry-after"]
  if (typeof after !== "string") return undefined
  const parsed = Headers.parseRetryAfter(after)
  return parsed._tag === "Success" ? Headers.retryAfterDelay(parsed.success, nowMillis) : undefined
}

const retryableStatus = (status: number): boolean =>
  status === 408 || status === 409 || status === 429 || status >= 500

/**
 * Whether a provider failure is worth another attempt: a transport failure,
 * or a response with one of the statuses `Provider.RetryPolicy` lists. A 429
 * that says the account's quota is used up is a `QuotaExhaustedError`, and is
 * not retried.
 *
 * @since 0.1.0
 */
export const isRetryable = (error: AiError.AiError): boolean => {
  const reason = error.reason
  if (reason._tag === "NetworkError") return reason.reason === "TransportError"
  if (reason._tag === "QuotaExhaustedError") return false
  const status = "http" in reason ? reason.http?.response?.status : undefined
  return status !== undefined && retryableStatus(status)
}

const headersOf = (error: AiError.AiError): Readonly<Record<string, unknown>> | undefined =>
  "http" in error.reason ? error.reason.http?.response?.headers : undefined

const schedules = new WeakMap<Provider.RetryOptions, Schedule.Schedule<Duration.Duration, AiError.AiError>>()

/**
 * The options of the default policy: one object, so that every layer built
 * without `retry` shares one schedule.
 *
 * @since 0.1.0
 */
export const defaultOptions: Provider.RetryOptions = {}

/**
 * The retry schedule of a policy, for `Effect.retry`. Its input is the
 * failure; it stops on a failure that is not {@link isRetryable}. Made once
 * per options object (a schedule is an immutable value): a server that builds
 * a provider layer per session with the same options builds it once.
 *
 * @since 0.1.0
 */
export const schedule = (
  options: Provider.RetryOptions = defaultOptions
): Schedule.Schedule<Duration.Duration, AiError.AiError> => {
  let made = schedules.get(options)
  if (made === undefined) {
    made = makeSchedule(options)
    schedules.set(options, made)
  }
  return made
}

const makeSchedule = (options: Provider.RetryOptions): Schedule.Schedule<Duration.Duration, AiError.AiError> => {
  const policy = { ...Provider.defaultRetryPolicy, ...definedOnly(options) }
  const maxDelay = Duration.fromInputUnsafe(policy.maxDelay)
  const maxElapsed = Duration.toMillis(Duration.fromInputUnsafe(policy.maxElapsed))
  const base = Schedule.exponential(policy.baseDelay).pipe(
    Schedule.jittered,
    Schedule.setInputType<AiError.AiError>(),
    Schedule.modifyDelay(({ duration, input, now }) => {
      const capped = Duration.min(duration, maxDelay)
      const headers = headersOf(input)
      const asked = headers === undefined ? undefined : retryAfter(headers, now)
      return Effect.succeed(asked === undefined ? capped : Duration.max(capped, asked))
    }),
    Schedule.while(({ attempt, duration, elapsed, input }) =>
      isRetryable(input) && attempt <= policy.maxRetries && elapsed + Duration.toMillis(duration) <= maxElapsed
    )
  )
  const onRetry = options.onRetry
  return onRetry === undefined
    ? base
    : Schedule.tap(base, ({ attempt, duration, input }) =>
      onRetry({
        attempt,
        maxRetries: policy.maxRetries,
        delay: duration,
        reason: reasonOf(input),
        error: input
      })
    )
}

const definedOnly = (options: Provider.RetryOptions): Partial<Provider.RetryPolicy> => {
  const out: { -readonly [K in keyof Provider.RetryPolicy]?: Provider.RetryPolicy[K] } = {}
  if (options.maxRetries !== undefined) out.maxRetries = Math.max(0, Math.floor(options.maxRetries))
  if (options.maxElapsed !== undefined) out.maxElapsed = options.maxElapsed
  if (options.baseDelay !== undefined) out.baseDelay = options.baseDelay
  if (options.maxDelay !== undefined) out.maxDelay = options.maxDelay
  return out
}
