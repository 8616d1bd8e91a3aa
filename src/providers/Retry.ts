/**
 * When and how long a provider waits before sending a request again: on rate
 * limits (429), server errors (5xx, Anthropic's 529), request timeouts
 * (408), conflicts (409), connection failures and responses that did not
 * start in time. Delays grow exponentially with jitter, up to `maxDelay`, and
 * never undercut the server's `retry-after-ms` / `retry-after`; retrying stops
 * after `maxRetries` retries or when the next wait would pass `maxElapsed`.
 *
 * Only the request is retried, never a response that has started streaming:
 * parts already emitted cannot be taken back.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule } from "effect"
import { AiError } from "effect/ai"
import { Headers } from "effect/http"

/**
 * A retry policy.
 *
 * @since 0.1.0
 */
export interface Policy {
  /** Retries after the first attempt (so `maxRetries + 1` attempts in all). */
  readonly maxRetries: number
  /** No retry starts later than this after the first failure. */
  readonly maxElapsed: Duration.Input
  /** The first backoff delay; each retry doubles it, with ±20% jitter. */
  readonly baseDelay: Duration.Input
  /** The longest computed backoff (a server's `retry-after` may ask for more). */
  readonly maxDelay: Duration.Input
}

/**
 * Four retries, starting at half a second, at most 30 seconds apart, within
 * two minutes.
 *
 * @since 0.1.0
 */
export const defaultPolicy: Policy = {
  maxRetries: 4,
  maxElapsed: Duration.minutes(2),
  baseDelay: Duration.millis(500),
  maxDelay: Duration.seconds(30)
}

/**
 * Why a call is retried: the status of an unsuccessful response (429, 503,
 * Anthropic's 529, …), or a network failure in words ("connection refused",
 * "no response within the idle timeout (idleTimeout: 30s)").
 *
 * @since 0.1.0
 */
export type RetryReason =
  | { readonly _tag: "HttpStatus"; readonly status: number }
  | { readonly _tag: "Network"; readonly description: string }

/**
 * What a retry is about to do, for {@link Options.onRetry}: retry `attempt`
 * of at most `maxRetries` (retrying may stop sooner, at `maxElapsed`), after
 * waiting `delay`, because of `reason`.
 *
 * @since 0.1.0
 */
export interface RetryInfo {
  /** 1 for the first retry. */
  readonly attempt: number
  /** The policy's `maxRetries`. */
  readonly maxRetries: number
  /** How long the provider waits before it. */
  readonly delay: Duration.Duration
  /** Why, as a view shows it. */
  readonly reason: RetryReason
  /** The failure being retried (its texts redacted). */
  readonly error: AiError.AiError
}

/**
 * The reason of a retryable failure: its HTTP status, or its description as
 * a network failure.
 *
 * @since 0.1.0
 */
export const reasonOf = (error: AiError.AiError): RetryReason => {
  const reason = error.reason
  const status = "http" in reason ? reason.http?.response?.status : undefined
  if (status !== undefined) return { _tag: "HttpStatus", status }
  const description = reason._tag === "NetworkError" ? reason.description : undefined
  return { _tag: "Network", description: description ?? reason._tag }
}

/**
 * A retry in one line: `retrying in 2.1 s after 503 (2 of 4)`.
 *
 * @since 0.1.0
 */
export const describe = (info: RetryInfo): string => {
  const after = info.reason._tag === "HttpStatus" ? String(info.reason.status) : info.reason.description
  const seconds = (Duration.toMillis(info.delay) / 1000).toFixed(1)
  return `retrying in ${seconds} s after ${after} (${info.attempt} of ${info.maxRetries})`
}

/**
 * A policy, and an optional observer called before each retry's wait (to log
 * it or tell a user "rate limited, retrying in 2s").
 *
 * @since 0.1.0
 */
export interface Options extends Partial<Policy> {
  readonly onRetry?: ((info: RetryInfo) => Effect.Effect<void>) | undefined
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
 * or a response with one of the statuses listed in the module description.
 * A 429 that says the account's quota is used up is a `QuotaExhaustedError`,
 * and is not retried.
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

/**
 * The retry schedule of a policy, for `Effect.retry`. Its input is the
 * failure; it stops on a failure that is not {@link isRetryable}.
 *
 * @since 0.1.0
 */
export const schedule = (options: Options = {}): Schedule.Schedule<Duration.Duration, AiError.AiError> => {
  const policy = { ...defaultPolicy, ...definedOnly(options) }
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

const definedOnly = (options: Options): Partial<Policy> => {
  const out: { -readonly [K in keyof Policy]?: Policy[K] } = {}
  if (options.maxRetries !== undefined) out.maxRetries = Math.max(0, Math.floor(options.maxRetries))
  if (options.maxElapsed !== undefined) out.maxElapsed = options.maxElapsed
  if (options.baseDelay !== undefined) out.baseDelay = options.baseDelay
  if (options.maxDelay !== undefined) out.maxDelay = options.maxDelay
  return out
}
