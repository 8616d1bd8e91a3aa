/**
 * The options every provider layer takes, and how they are resolved once,
 * when the layer is built: the API key (given, or read through `Config` from
 * the provider's environment variable), the redactor that keeps that key out
 * of every error, the retry policy, the timeouts, the size limit and the price table.
 *
 * @since 0.1.0
 */
import { Config, Duration, Effect, Option, Redacted, Schema } from "effect"
import { HttpClientRequest } from "effect/http"
import * as Pricing from "../Pricing.ts"
import * as Redaction from "./Redaction.ts"
import type * as Retry from "./Retry.ts"

/**
 * An API key, or the `Config` to read it from.
 *
 * @since 0.1.0
 */
export type ApiKey = Redacted.Redacted<string> | Config.Config<Redacted.Redacted<string>>

/**
 * Options shared by every provider layer.
 *
 * @since 0.1.0
 */
export interface Options {
  /** The model id sent with each request (`gpt-4o`, `claude-sonnet-4-5`, `llama3.1`…). */
  readonly model: string
  /** The API key; by default read from the provider's environment variable. */
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
  readonly retry?: Retry.Options | undefined
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
 * How long a response may send no bytes when `idleTimeout` is not given.
 *
 * @since 0.1.0
 */
export const defaultIdleTimeout: Duration.Duration = Duration.minutes(5)

/**
 * How long a whole call may take when `responseTimeout` is not given.
 *
 * @since 0.1.0
 */
export const defaultResponseTimeout: Duration.Duration = Duration.minutes(10)

/**
 * The most bytes a response body may have when `maxResponseBytes` is not
 * given: room for the longest answers (a 128k-token output streams about
 * 50 MB of SSE, at 300 to 400 bytes of JSON per token) while bounding what
 * a misbehaving server can make the process hold.
 *
 * @since 0.1.0
 */
export const defaultMaxResponseBytes = 64 * 1024 * 1024

/**
 * Options resolved once, when a layer is built.
 *
 * @since 0.1.0
 */
export interface Settings {
  readonly model: string
  readonly apiKey: Redacted.Redacted<string> | undefined
  readonly baseUrl: string
  readonly headers: Readonly<Record<string, string>>
  readonly maxOutputTokens: number | undefined
  readonly temperature: number | undefined
  readonly retry: Retry.Options
  readonly idleTimeout: Duration.Duration
  readonly responseTimeout: Duration.Duration
  readonly maxResponseBytes: number
  readonly prices: Pricing.PriceTable
  readonly redact: (text: string) => string
}

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

/**
 * What a provider layer reads by default, and when it cannot do without a
 * key.
 *
 * @since 0.1.0
 */
export interface Defaults {
  /** The module name errors carry. */
  readonly provider: string
  readonly baseUrl: string
  /** The environment variable the key is read from when `apiKey` is not given. */
  readonly envVar: string
  /** Whether a server at this base URL needs a key. */
  readonly keyRequired: (baseUrl: string) => boolean
}

/**
 * Whether a base URL is OpenAI's own API (`api.openai.com`), which needs a
 * key, unlike the compatible servers other URLs point to.
 *
 * @since 0.1.0
 */
export const isOpenAi = (baseUrl: string): boolean => {
  try {
    return new URL(baseUrl).hostname === "api.openai.com"
  } catch {
    return false
  }
}

/**
 * Resolves the options. The key is `options.apiKey` when it is a `Redacted`;
 * read from it when it is a `Config`; else read from the environment variable
 * `envVar`. A `Config` given as `apiKey` must be set, and so must `envVar` when
 * the base URL needs a key: otherwise the layer fails with
 * {@link MissingApiKey}. A `Config` that is set but invalid fails with its own
 * `ConfigError`.
 *
 * @since 0.1.0
 */
export const resolve = Effect.fnUntraced(function*(options: Options, defaults: Defaults) {
  const baseUrl = (options.baseUrl ?? defaults.baseUrl).replace(/\/+$/, "")
  const apiKey = yield* resolveKey(options.apiKey, defaults, baseUrl)
  const settings: Settings = {
    model: options.model,
    apiKey,
    baseUrl,
    headers: options.headers ?? {},
    maxOutputTokens: options.maxOutputTokens === undefined
      ? undefined
      : Math.max(1, Math.floor(options.maxOutputTokens)),
    temperature: options.temperature,
    retry: options.retry ?? {},
    idleTimeout: atLeastOneMilli(options.idleTimeout ?? defaultIdleTimeout),
    responseTimeout: atLeastOneMilli(options.responseTimeout ?? defaultResponseTimeout),
    maxResponseBytes: options.maxResponseBytes === undefined || Number.isNaN(options.maxResponseBytes)
      ? defaultMaxResponseBytes
      : Math.max(1, Math.floor(options.maxResponseBytes)),
    prices: options.prices ?? Pricing.defaultTable,
    redact: Redaction.redactor(apiKey === undefined ? undefined : Redacted.value(apiKey))
  }
  return settings
})

const resolveKey = Effect.fnUntraced(function*(
  apiKey: ApiKey | undefined,
  defaults: Defaults,
  baseUrl: string
): Effect.fn.Return<Redacted.Redacted<string> | undefined, Config.ConfigError | MissingApiKey> {
  if (apiKey !== undefined && Redacted.isRedacted(apiKey)) return apiKey
  const value = yield* Config.option(apiKey ?? Config.Redacted(defaults.envVar))
  if (Option.isSome(value)) return value.value
  if (apiKey === undefined && !defaults.keyRequired(baseUrl)) return undefined
  const variable = apiKey === undefined ? defaults.envVar : yield* absentName(apiKey)
  return yield* new MissingApiKey({ provider: defaults.provider, variable, baseUrl })
})

// The name of what an absent `Config` read (its path, as the environment
// provider joins it), from the error it fails with; "apiKey" if it names none.
const absentName = (config: Config.Config<Redacted.Redacted<string>>): Effect.Effect<string> =>
  Effect.match(Effect.gen(function*() {
    return yield* config
  }), {
    onSuccess: () => "apiKey",
    onFailure: (error) => {
      const issue = Schema.isSchemaError(error.cause) ? error.cause.issue : undefined
      return issue?._tag === "Pointer" && issue.path.length > 0 ? issue.path.map(String).join("_") : "apiKey"
    }
  })

const atLeastOneMilli = (input: Duration.Input): Duration.Duration =>
  Duration.max(Duration.fromInputUnsafe(input), Duration.millis(1))

/**
 * A POST to `path` under the base URL with the configured headers and, when
 * there is a key, `Authorization: Bearer <key>` (OpenAI and compatible
 * servers).
 *
 * @since 0.1.0
 */
export const bearerRequest = (settings: Settings, path: string): HttpClientRequest.HttpClientRequest => {
  const request = HttpClientRequest.post(`${settings.baseUrl}${path}`).pipe(
    HttpClientRequest.setHeaders(settings.headers)
  )
  return settings.apiKey === undefined ? request : HttpClientRequest.bearerToken(request, settings.apiKey)
}
