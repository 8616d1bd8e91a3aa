/**
 * What every provider layer (`OpenAiChat`, `OpenAiResponses`, `Anthropic`)
 * takes and tells back: the common {@link Options}, the API key and the
 * {@link MissingApiKey} error a layer fails with when it has none, and the
 * retry policy with what {@link RetryOptions.onRetry} sees of each retry.
 *
 * @example
 * ```ts
 * import { Console, Redacted } from "effect"
 * import { OpenAiChat, Provider } from "effect-agent/providers"
 *
 * const options: Provider.Options = {
 *   model: "gpt-4o",
 *   apiKey: Redacted.make("sk-…"),
 *   retry: { maxRetries: 2, onRetry: (info) => Console.log(Provider.describeRetry(info)) },
 *   idleTimeout: "30 seconds"
 * }
 * const Model = OpenAiChat.layer(options)
 * ```
 *
 * @since 0.1.0
 */
import type * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as AiError from "effect/ai/AiError"
import type * as Pricing from "./Pricing.ts"

// -----------------------------------------------------------------------------
// Options
// -----------------------------------------------------------------------------

/**
 * An API key, or the `Config` to read it from.
 *
 * @since 0.1.0
 * @category options
 */
export type ApiKey = Redacted.Redacted<string> | Config.Config<Redacted.Redacted<string>>

/**
 * Options shared by every provider layer.
 *
 * @since 0.1.0
 * @category options
 */
export interface Options {
  /** The model id sent with each request (`gpt-4o`, `claude-sonnet-4-5`, `llama3.1`…). */
  readonly model: string
  /**
   * The API key; by default read from the provider's environment variable
   * (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`). A `Config` given here must be
   * set. Without a key, a layer whose server needs one fails when it is built
   * with {@link MissingApiKey}.
   */
  readonly apiKey?: ApiKey | undefined
  /** The API root, to reach a proxy or another compatible server. */
  readonly baseUrl?: string | undefined
  /** Extra headers sent with each request. */
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** The most tokens the model may generate per call. */
  readonly maxOutputTokens?: number | undefined
  /** Sampling temperature. */
  readonly temperature?: number | undefined
  /** Retry policy for rate limits, server errors and failed connections. */
  readonly retry?: RetryOptions | undefined
  /**
   * How long the response may take to start, and then how long it may go
   * without a complete event, before the call fails (default five minutes).
   * Bytes and SSE comments that complete no event do not count.
   */
  readonly idleTimeout?: Duration.Input | undefined
  /**
   * The longest a whole call may take, from the first request to the end of
   * the response, retries included (default ten minutes).
   */
  readonly responseTimeout?: Duration.Input | undefined
  /** The most bytes a response body may have (default 64 MiB). */
  readonly maxResponseBytes?: number | undefined
  /** Prices used to put each call's cost on its finish part (default `Pricing.defaultTable`). */
  readonly prices?: Pricing.PriceTable | undefined
}

/**
 * How long a response may send no complete event when `idleTimeout` is not
 * given.
 *
 * @since 0.1.0
 * @category defaults
 */
export const defaultIdleTimeout: Duration.Duration = Duration.minutes(5)

/**
 * How long a whole call may take when `responseTimeout` is not given.
 *
 * @since 0.1.0
 * @category defaults
 */
export const defaultResponseTimeout: Duration.Duration = Duration.minutes(10)

/**
 * The most bytes a response body may have when `maxResponseBytes` is not
 * given: room for the longest answers (a 128k-token output streams about
 * 50 MB of SSE, at 300 to 400 bytes of JSON per token) while bounding what
 * a misbehaving server can make the process hold.
 *
 * @since 0.1.0
 * @category defaults
 */
export const defaultMaxResponseBytes = 64 * 1024 * 1024

// -----------------------------------------------------------------------------
// API key
// -----------------------------------------------------------------------------

/**
 * A provider that needs an API key has none: its environment variable (or
 * the `Config` given as `apiKey`) is not set or empty. Raised when the layer
 * is built, before any request. `variable` names what was read, `provider`
 * the layer (`OpenAiChat`, `OpenAiResponses`, `Anthropic`), `baseUrl` the
 * server the key was for.
 *
 * @since 0.1.0
 * @category errors
 */
export class MissingApiKey extends Schema.TaggedError<MissingApiKey>()("MissingApiKey", {
  provider: Schema.String,
  variable: Schema.String,
  baseUrl: Schema.String
}) {
  override get message(): string {
    return `${this.variable} is not set: ${this.provider} needs an API key for ${this.baseUrl}`
  }
}

// -----------------------------------------------------------------------------
// Retries
// -----------------------------------------------------------------------------

/**
 * When and how long a provider waits before sending a request again: on rate
 * limits (429), server errors (5xx, Anthropic's 529), request timeouts
 * (408), conflicts (409), connection failures and responses that did not
 * start in time. Delays grow exponentially with jitter, up to `maxDelay`, and
 * never undercut the server's `retry-after-ms` / `retry-after`; retrying stops
 * after `maxRetries` retries or when the next wait would pass `maxElapsed`.
 * Only the request is retried, never a response that has started streaming:
 * parts already emitted cannot be taken back.
 *
 * @since 0.1.0
 * @category retries
 */
export interface RetryPolicy {
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
 * @category retries
 */
export const defaultRetryPolicy: RetryPolicy = {
  maxRetries: 4,
  maxElapsed: Duration.minutes(2),
  baseDelay: Duration.millis(500),
  maxDelay: Duration.seconds(30)
}

/**
 * A retry policy (what is not given is {@link defaultRetryPolicy}'s), and an
 * optional observer called before each retry's wait (to log it or tell a user
 * "rate limited, retrying in 2s").
 *
 * @since 0.1.0
 * @category retries
 */
export interface RetryOptions extends Partial<RetryPolicy> {
  readonly onRetry?: ((info: RetryInfo) => Effect.Effect<void>) | undefined
}

/**
 * Why a call is retried: the status of an unsuccessful response (429, 503,
 * Anthropic's 529, …), or a network failure in words ("connection refused",
 * "no response within the idle timeout (idleTimeout: 30s)").
 *
 * @since 0.1.0
 * @category retries
 */
export type RetryReason =
  | { readonly _tag: "HttpStatus"; readonly status: number }
  | { readonly _tag: "Network"; readonly description: string }

/**
 * What a retry is about to do, for {@link RetryOptions.onRetry}: retry
 * `attempt` of at most `maxRetries` (retrying may stop sooner, at
 * `maxElapsed`), after waiting `delay`, because of `reason`.
 *
 * @since 0.1.0
 * @category retries
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
 * A retry in one line: `retrying in 2.1 s after 503 (2 of 4)`.
 *
 * @since 0.1.0
 * @category retries
 */
export const describeRetry = (info: RetryInfo): string => {
  const after = info.reason._tag === "HttpStatus" ? String(info.reason.status) : info.reason.description
  const seconds = (Duration.toMillis(info.delay) / 1000).toFixed(1)
  return `retrying in ${seconds} s after ${after} (${info.attempt} of ${info.maxRetries})`
}
