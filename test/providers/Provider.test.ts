/**
 * Provider: the options every provider layer resolves when it is
 * built. A missing API key is caught then, before any request, with a typed
 * `MissingApiKey` naming the variable: always for Anthropic, for the OpenAI
 * layers when they talk to api.openai.com (a compatible server elsewhere may
 * need no key), and whenever a `Config` given as `apiKey` is not set.
 */
import { assert, describe, it } from "@effect/vitest"
import { Config, ConfigProvider, Duration, Effect, Exit, Layer, Redacted } from "effect"
import { type LanguageModel } from "effect/ai"
import { HttpClient } from "effect/http"
import { Anthropic, OpenAiChat, OpenAiResponses, Provider } from "effect-agent/providers"
import * as Settings from "../../src/providers/internal/Settings.ts"
import * as ProviderTest from "./ProviderTest.ts"
import * as TestServer from "./TestServer.ts"

// A client that records every request and answers none: the layers under test
// must fail before they send one.
const sent: Array<string> = []
const recordingClient = Layer.succeed(
  HttpClient.HttpClient,
  HttpClient.make((request) => Effect.sync(() => sent.push(request.url)).pipe(Effect.andThen(Effect.never)))
)

const withEnv = (env: Record<string, string>) =>
  Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord(env))

/** The failure of building a layer under `env`, with no request sent. */
const buildFailure = (layer: Layer.Layer<LanguageModel.LanguageModel, unknown, HttpClient.HttpClient>, env = {}) =>
  Effect.gen(function*() {
    sent.length = 0
    const exit = yield* Effect.scoped(Layer.build(Layer.provide(layer, recordingClient))).pipe(withEnv(env), Effect.exit)
    assert.deepStrictEqual(sent, [], "no request is sent")
    assert(Exit.isFailure(exit), "the layer must not build")
    const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail")
    assert(failure?._tag === "Fail", String(exit.cause))
    return failure.error
  })

const builds = (layer: Layer.Layer<LanguageModel.LanguageModel, unknown, HttpClient.HttpClient>, env = {}) =>
  Effect.gen(function*() {
    const exit = yield* Effect.scoped(Layer.build(Layer.provide(layer, recordingClient))).pipe(withEnv(env), Effect.exit)
    assert.isTrue(Exit.isSuccess(exit), String(exit))
  })

describe("a missing API key", () => {
  const cases = [
    {
      provider: "OpenAiChat",
      variable: "OPENAI_API_KEY",
      baseUrl: "https://api.openai.com/v1",
      layer: OpenAiChat.layer({ model: "gpt-4o" })
    },
    {
      provider: "OpenAiResponses",
      variable: "OPENAI_API_KEY",
      baseUrl: "https://api.openai.com/v1",
      layer: OpenAiResponses.layer({ model: "gpt-5" })
    },
    {
      provider: "Anthropic",
      variable: "ANTHROPIC_API_KEY",
      baseUrl: "https://api.anthropic.com",
      layer: Anthropic.layer({ model: "claude-sonnet-4-5" })
    },
    {
      provider: "Anthropic",
      variable: "ANTHROPIC_API_KEY",
      baseUrl: "http://127.0.0.1:9",
      layer: Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl: "http://127.0.0.1:9/" })
    }
  ] as const

  for (const { baseUrl, layer, provider, variable } of cases) {
    it.effect(`${provider} at ${baseUrl}: fails the layer with MissingApiKey naming ${variable}`, () =>
      Effect.gen(function*() {
        for (const env of [{}, { [variable]: "" }]) {
          const error = yield* buildFailure(layer, env)
          assert(error instanceof Provider.MissingApiKey, `got ${String(error)}`)
          assert.deepStrictEqual({ ...error }, { _tag: "MissingApiKey", provider, variable, baseUrl })
          assert.strictEqual(error.message, `${variable} is not set: ${provider} needs an API key for ${baseUrl}`)
        }
        yield* builds(layer, { [variable]: "sk-set" })
      }))
  }

  it.effect("OpenAI's own API needs a key at any spelling of its URL; other servers may need none", () =>
    Effect.gen(function*() {
      for (const baseUrl of ["https://api.openai.com/v1/", "https://API.OPENAI.COM/v1", "https://api.openai.com"]) {
        const error = yield* buildFailure(OpenAiChat.layer({ model: "gpt-4o", baseUrl }))
        assert(error instanceof Provider.MissingApiKey)
      }
      yield* builds(OpenAiChat.layer({ model: "llama3.1", baseUrl: "http://localhost:11434/v1" }))
      yield* builds(OpenAiResponses.layer({ model: "gpt-oss", baseUrl: "http://localhost:8000/v1" }))
      yield* builds(OpenAiChat.layer({ model: "x", baseUrl: "https://openrouter.ai/api/v1" }))
    }))

  it.effect("a Config given as apiKey must be set, wherever the server is, and names its variable", () =>
    Effect.gen(function*() {
      const layer = OpenAiChat.layer({
        model: "llama3.1",
        baseUrl: "http://localhost:11434/v1",
        apiKey: Config.Redacted("MY_PROXY_KEY")
      })
      const error = yield* buildFailure(layer, { OPENAI_API_KEY: "sk-unrelated" })
      assert(error instanceof Provider.MissingApiKey)
      assert.deepStrictEqual({ ...error }, {
        _tag: "MissingApiKey",
        provider: "OpenAiChat",
        variable: "MY_PROXY_KEY",
        baseUrl: "http://localhost:11434/v1"
      })
      yield* builds(layer, { MY_PROXY_KEY: "sk-proxy" })
    }))

  it.effect("a key given, or read from a set Config, is sent", () =>
    Effect.gen(function*() {
      const server = yield* TestServer.start(() =>
        Effect.succeed(TestServer.sse(TestServer.fixture("anthropic/simple-text_claude-sonnet-4.sse")))
      )
      for (const apiKey of [Redacted.make("sk-ant-given"), Config.Redacted("MY_KEY")]) {
        yield* ProviderTest.generate("hi").pipe(
          Effect.provide(
            Anthropic.layer({ model: "claude-sonnet-4", baseUrl: server.baseUrl, apiKey }).pipe(
              Layer.provide(ProviderTest.client)
            )
          ),
          withEnv({ MY_KEY: "sk-ant-config" })
        )
      }
      assert.deepStrictEqual(server.requests.map((request) => request.headers["x-api-key"]), [
        "sk-ant-given",
        "sk-ant-config"
      ])
    }))
})

describe("provider settings: resolve", () => {
  const defaults: Settings.Defaults = {
    provider: "Test",
    baseUrl: "https://api.example.com/v1",
    envVar: "TEST_API_KEY",
    keyRequired: () => false
  }

  it.effect("fills in the defaults: the base URL, no headers, the timeouts, the size cap and the price table", () =>
    Effect.gen(function*() {
      const settings = yield* Settings.resolve({ model: "m" }, defaults).pipe(withEnv({}))
      assert.deepStrictEqual(
        [settings.model, settings.apiKey, settings.baseUrl, settings.headers, settings.retry],
        ["m", undefined, "https://api.example.com/v1", {}, {}]
      )
      assert.isTrue(Duration.equals(settings.idleTimeout, Provider.defaultIdleTimeout))
      assert.isTrue(Duration.equals(settings.responseTimeout, Provider.defaultResponseTimeout))
      assert.strictEqual(settings.maxResponseBytes, Provider.defaultMaxResponseBytes)
      assert.strictEqual(settings.redact("nothing to hide"), "nothing to hide")
    }))

  it.effect("trims the base URL's slashes and clamps numbers a caller got wrong", () =>
    Effect.gen(function*() {
      const settings = yield* Settings.resolve({
        model: "m",
        baseUrl: "http://127.0.0.1:8080/v1//",
        maxOutputTokens: 0.5,
        idleTimeout: 0,
        responseTimeout: "-5 seconds",
        maxResponseBytes: Number.NaN
      }, defaults).pipe(withEnv({}))
      assert.strictEqual(settings.baseUrl, "http://127.0.0.1:8080/v1")
      assert.strictEqual(settings.maxOutputTokens, 1)
      assert.strictEqual(Duration.toMillis(settings.idleTimeout), 1)
      assert.strictEqual(Duration.toMillis(settings.responseTimeout), 1)
      assert.strictEqual(settings.maxResponseBytes, Provider.defaultMaxResponseBytes)
      const floored = yield* Settings.resolve(
        { model: "m", maxOutputTokens: 99.9, maxResponseBytes: 0 },
        defaults
      )
      assert.deepStrictEqual([floored.maxOutputTokens, floored.maxResponseBytes], [99, 1])
    }))

  it.effect("reads the key from the environment variable, and its redactor hides it", () =>
    Effect.gen(function*() {
      const settings = yield* Settings.resolve({ model: "m" }, defaults).pipe(
        withEnv({ TEST_API_KEY: "sk-test-resolve-1234" })
      )
      const key = settings.apiKey === undefined ? undefined : Redacted.value(settings.apiKey)
      assert.strictEqual(key, "sk-test-resolve-1234")
      assert.notInclude(settings.redact("the key sk-test-resolve-1234 was refused"), "sk-test-resolve-1234")
    }))
})

describe("provider settings: bearerRequest", () => {
  it.effect("posts under the base URL with the headers, and the key as a bearer token only when there is one", () =>
    Effect.gen(function*() {
      const defaults = { provider: "Test", baseUrl: "http://127.0.0.1:9/v1", envVar: "K", keyRequired: () => false }
      const keyed = yield* Settings.resolve(
        { model: "m", apiKey: Redacted.make("sk-bearer"), headers: { "x-team": "a" } },
        defaults
      )
      const request = Settings.bearerRequest(keyed, "/chat/completions")
      assert.deepStrictEqual([request.method, request.url], ["POST", "http://127.0.0.1:9/v1/chat/completions"])
      assert.deepStrictEqual([request.headers["x-team"], request.headers.authorization], ["a", "Bearer sk-bearer"])
      const keyless = yield* Settings.resolve({ model: "m" }, defaults).pipe(withEnv({}))
      assert.isUndefined(Settings.bearerRequest(keyless, "/x").headers.authorization)
    }))
})

describe("provider settings: isOpenAi", () => {
  it("is OpenAI's host at any spelling, and nothing else, an invalid URL included", () => {
    assert.isTrue(Settings.isOpenAi("https://api.openai.com/v1"))
    assert.isTrue(Settings.isOpenAi("https://API.OpenAI.com"))
    assert.isFalse(Settings.isOpenAi("https://api.openai.com.evil.example/v1"))
    assert.isFalse(Settings.isOpenAi("http://localhost:11434/v1"))
    assert.isFalse(Settings.isOpenAi("not a url"))
  })
})
