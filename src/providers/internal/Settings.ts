/**
 * A provider layer's options, resolved once, when the layer is built: the API
 * key (given, or read through `Config` from the provider's environment
 * variable), the redactor that keeps that key out of every error, the retry
 * policy, the timeouts, the size limit and the price table.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Model from "effect/ai/Model"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import * as Pricing from "../Pricing.ts"
import * as Provider from "../Provider.ts"
import * as Redaction from "../Redaction.ts"
import * as RetrySchedule from "./RetrySchedule.ts"

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
  readonly retry: Provider.RetryOptions
  readonly idleTimeout: Duration.Duration
  readonly responseTimeout: Duration.Duration
  readonly maxResponseBytes: number
  readonly prices: Pricing.PriceTable
  readonly redact: (text: string) => string
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
 * `Provider.MissingApiKey`. A `Config` that is set but invalid fails with its
 * own `ConfigError`.
 *
 * @since 0.1.0
 */
export const resolve = Effect.fnUntraced(function*(options: Provider.Options, defaults: Defaults) {
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
    retry: options.retry ?? RetrySchedule.defaultOptions,
    idleTimeout: atLeastOneMilli(options.idleTimeout ?? Provider.defaultIdleTimeout),
    responseTimeout: atLeastOneMilli(options.responseTimeout ?? Provider.defaultResponseTimeout),
    maxResponseBytes: options.maxResponseBytes === undefined || Number.isNaN(options.maxResponseBytes)
      ? Provider.defaultMaxResponseBytes
      : Math.max(1, Math.floor(options.maxResponseBytes)),
    prices: options.prices ?? Pricing.defaultTable,
    redact: Redaction.redactor(apiKey === undefined ? undefined : Redacted.value(apiKey))
  }
  return settings
})

const resolveKey = Effect.fnUntraced(function*(
  apiKey: Provider.ApiKey | undefined,
  defaults: Defaults,
  baseUrl: string
): Effect.fn.Return<Redacted.Redacted<string> | undefined, Config.ConfigError | Provider.MissingApiKey> {
  if (apiKey !== undefined && Redacted.isRedacted(apiKey)) return apiKey
  const value = yield* Config.option(apiKey ?? Config.Redacted(defaults.envVar))
  if (Option.isSome(value)) return value.value
  if (apiKey === undefined && !defaults.keyRequired(baseUrl)) return undefined
  const variable = apiKey === undefined ? defaults.envVar : yield* absentName(apiKey)
  return yield* new Provider.MissingApiKey({ provider: defaults.provider, variable, baseUrl })
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

/**
 * `effect/ai`'s names of a provider layer's provider and model: the run's
 * spans report them (`gen_ai.provider.name`, `gen_ai.request.model`).
 *
 * @internal
 */
export const modelNames = (provider: string, model: string): Layer.Layer<Model.ProviderName | Model.ModelName> =>
  Layer.succeedContext(Context.make(Model.ProviderName, provider).pipe(Context.add(Model.ModelName, model)))
