import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import { AiError } from "effect/ai"
import { Provider } from "effect-agent/providers"
import * as RetrySchedule from "../../src/providers/internal/RetrySchedule.ts"

const failure = (reason: AiError.AiErrorReason) => AiError.make({ module: "Test", method: "streamText", reason })
const http = (status: number) => ({ response: { status, headers: {} } })

describe("Retry", () => {
  it("reads retry-after-ms, then retry-after in seconds or as an HTTP date", () => {
    const now = Date.parse("2025-01-01T00:00:00Z")
    assert.strictEqual(Duration.toMillis(RetrySchedule.retryAfter({ "retry-after-ms": "1500", "retry-after": "9" }, now)!), 1500)
    assert.strictEqual(Duration.toMillis(RetrySchedule.retryAfter({ "retry-after": "2" }, now)!), 2000)
    assert.strictEqual(
      Duration.toMillis(RetrySchedule.retryAfter({ "retry-after": "Wed, 01 Jan 2025 00:00:05 GMT" }, now)!),
      5000
    )
    assert.strictEqual(RetrySchedule.retryAfter({ "retry-after": "soon" }, now), undefined)
    assert.strictEqual(RetrySchedule.retryAfter({ "retry-after-ms": "-5" }, now), undefined)
    assert.strictEqual(RetrySchedule.retryAfter({}, now), undefined)
  })

  it("retries rate limits, server errors, timeouts and transport failures, nothing else", () => {
    assert.isTrue(RetrySchedule.isRetryable(failure(new AiError.RateLimitError({ http: http(429) }))))
    assert.isTrue(RetrySchedule.isRetryable(failure(new AiError.InternalProviderError({ description: "", http: http(529) }))))
    assert.isTrue(RetrySchedule.isRetryable(failure(new AiError.UnknownError({ http: http(408) }))))
    assert.isTrue(
      RetrySchedule.isRetryable(failure(new AiError.NetworkError({ reason: "TransportError", method: "POST", url: "u" })))
    )
    assert.isFalse(
      RetrySchedule.isRetryable(failure(new AiError.NetworkError({ reason: "InvalidUrlError", method: "POST", url: "u" })))
    )
    assert.isFalse(RetrySchedule.isRetryable(failure(new AiError.InvalidRequestError({ http: http(400) }))))
    assert.isFalse(RetrySchedule.isRetryable(failure(new AiError.QuotaExhaustedError({ http: http(429) }))))
    assert.isFalse(RetrySchedule.isRetryable(failure(new AiError.InvalidOutputError({ description: "cut" }))))
  })

  it("says why and when a retry happens, as a view shows it", () => {
    const overloaded = failure(new AiError.InternalProviderError({ description: "", http: http(529) }))
    assert.deepStrictEqual(RetrySchedule.reasonOf(overloaded), { _tag: "HttpStatus", status: 529 })
    const refused = failure(
      new AiError.NetworkError({ reason: "TransportError", method: "POST", url: "u", description: "connection refused" })
    )
    assert.deepStrictEqual(RetrySchedule.reasonOf(refused), { _tag: "Network", description: "connection refused" })
    const info = (error: AiError.AiError): Provider.RetryInfo => ({
      attempt: 2,
      maxRetries: 4,
      delay: Duration.millis(2100),
      reason: RetrySchedule.reasonOf(error),
      error
    })
    assert.strictEqual(
      Provider.describeRetry(info(failure(new AiError.InternalProviderError({ description: "", http: http(503) })))),
      "retrying in 2.1 s after 503 (2 of 4)"
    )
    assert.strictEqual(Provider.describeRetry(info(refused)), "retrying in 2.1 s after connection refused (2 of 4)")
  })
})
