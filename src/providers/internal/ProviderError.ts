/**
 * How provider faults become `effect/ai` `AiError` reasons: unsuccessful HTTP
 * responses (by status, with the provider's own message), transport failures,
 * error events inside a stream, and streams that break their protocol (cut
 * short, unparsable, missing a field, idle too long). Every description says
 * which fault it was; none carries request headers. Their text is not
 * redacted here: the transport redacts every reason it fails with
 * (`Redaction.redactReason`), except that an error body is redacted before
 * it is cut to its first 2,000 characters, where a cut key would no longer
 * match.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as AiError from "effect/ai/AiError"
import * as Headers from "effect/http/Headers"
import type * as HttpClientError from "effect/http/HttpClientError"
import * as RetrySchedule from "./RetrySchedule.ts"

const maxBodyChars = 2000

/**
 * Where a request went, for error descriptions.
 *
 * @since 0.1.0
 */
export interface Target {
  readonly method: string
  readonly url: string
}

interface ProviderMessage {
  readonly message?: string | undefined
  readonly type?: string | undefined
  readonly code?: string | undefined
}

const stringField = (value: unknown, key: string): string | undefined => {
  if (typeof value !== "object" || value === null) return undefined
  const field: unknown = Reflect.get(value, key)
  return typeof field === "string" ? field : typeof field === "number" ? String(field) : undefined
}

// OpenAI and compatible servers: { error: { message, type, code } }; Anthropic:
// { type: "error", error: { type, message } }; Ollama: { error: "text" };
// vLLM and others: { message, type, code } or { detail }.
const providerMessage = (body: string): ProviderMessage => {
  let json: unknown
  try {
    json = JSON.parse(body)
  } catch {
    return {}
  }
  if (typeof json !== "object" || json === null) return {}
  const error: unknown = Reflect.get(json, "error")
  if (typeof error === "string") return { message: error }
  const source = typeof error === "object" && error !== null ? error : json
  return {
    message: stringField(source, "message") ?? stringField(json, "detail"),
    type: stringField(source, "type"),
    code: stringField(source, "code")
  }
}

const safeHeaders = (headers: Headers.Headers) =>
  Headers.redact(headers, ["authorization", "cookie", "set-cookie", "x-api-key", "api-key"])

/**
 * The reason for an unsuccessful response. 429 is a `RateLimitError` (with
 * the delay the server asked for) unless the provider says the quota is used
 * up; 400/404/413/422 are `InvalidRequestError`s; 401/403 are
 * `AuthenticationError`s; 402 is `QuotaExhaustedError`; 5xx are
 * `InternalProviderError`s; anything else is an `UnknownError`. Each carries
 * the status, the response headers and (redacted, truncated) body, and a
 * description with the provider's own message.
 *
 * @since 0.1.0
 */
export const fromResponse = (params: {
  readonly status: number
  readonly headers: Headers.Headers
  readonly body: string
  readonly target: Target
  readonly nowMillis: number
  readonly redact: (text: string) => string
}): AiError.AiErrorReason => {
  const { status, target } = params
  const body = params.redact(params.body)
  const parsed = providerMessage(body)
  const requestId = params.headers["x-request-id"] ?? params.headers["request-id"]
  const description = AiError.buildErrorDescription({
    status,
    message: parsed.message,
    method: target.method,
    url: target.url,
    errorCode: parsed.code,
    errorType: parsed.type,
    requestId,
    body
  })
  const http = {
    response: { status, headers: safeHeaders(params.headers) },
    body: body.length > maxBodyChars ? `${body.slice(0, maxBodyChars)}...` : body
  }
  const metadata = parsed.message === undefined ? {} : { providerMessage: parsed.message }
  if (status === 429) {
    if (parsed.code === "insufficient_quota" || parsed.type === "insufficient_quota") {
      return new AiError.QuotaExhaustedError({ http, metadata })
    }
    const retryAfter = RetrySchedule.retryAfter(params.headers, params.nowMillis)
    return new AiError.RateLimitError(retryAfter === undefined ? { http, metadata } : { http, metadata, retryAfter })
  }
  switch (status) {
    case 400:
    case 404:
    case 413:
    case 422:
      return new AiError.InvalidRequestError({ description, http, metadata })
    case 401:
      return new AiError.AuthenticationError({ kind: "InvalidKey", description, http, metadata })
    case 403:
      return new AiError.AuthenticationError({ kind: "InsufficientPermissions", description, http, metadata })
    case 402:
      return new AiError.QuotaExhaustedError({ http, metadata })
  }
  return status >= 500
    ? new AiError.InternalProviderError({ description, http, metadata })
    : new AiError.UnknownError({ description, http, metadata })
}

// Node's and undici's error codes, as a person would say them.
const connectionProblems: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  EPIPE: "connection closed",
  UND_ERR_SOCKET: "connection closed by the server",
  ETIMEDOUT: "connection timed out",
  UND_ERR_CONNECT_TIMEOUT: "connection timed out",
  ENOTFOUND: "host not found",
  EAI_AGAIN: "host name lookup failed",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  CERT_HAS_EXPIRED: "TLS certificate rejected",
  DEPTH_ZERO_SELF_SIGNED_CERT: "TLS certificate rejected",
  SELF_SIGNED_CERT_IN_CHAIN: "TLS certificate rejected",
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: "TLS certificate rejected",
  ERR_TLS_CERT_ALTNAME_INVALID: "TLS certificate rejected"
}

// The first error code along a cause chain that names a known problem.
const knownProblem = (cause: unknown): string | undefined => {
  for (let depth = 0; depth < 4 && typeof cause === "object" && cause !== null; depth++) {
    const code: unknown = Reflect.get(cause, "code")
    if (typeof code === "string" && code in connectionProblems) return connectionProblems[code]
    cause = Reflect.get(cause, "cause")
  }
  return undefined
}

/**
 * The reason for a transport failure: the connection could not be made, was
 * reset, or the body could not be read. Only the request line is kept. The
 * description says what happened in words ("connection refused"), without
 * the reason's tag, which the error's message already starts with.
 *
 * @since 0.1.0
 */
export const fromHttpClientError = (
  error: HttpClientError.HttpClientError,
  target: Target
): AiError.NetworkError => {
  const reason = error.reason
  const cause: unknown = "cause" in reason ? reason.cause : undefined
  const detail = reason.description ?? (cause instanceof Error ? cause.message : undefined)
  const network = (kind: "TransportError" | "EncodeError" | "InvalidUrlError", description: string) =>
    new AiError.NetworkError({ reason: kind, method: target.method, url: target.url, description })
  switch (reason._tag) {
    case "EncodeError":
      return network(reason._tag, detail ?? "the request could not be encoded")
    case "InvalidUrlError":
      return network(reason._tag, detail ?? "the URL is not valid")
  }
  const known = knownProblem(cause)
  if (known !== undefined) return network("TransportError", known)
  const what = reason._tag === "TransportError" ? "the connection failed" : "the response could not be read"
  return network("TransportError", detail === undefined ? what : `${what}: ${detail}`)
}

/**
 * No response, or no complete event of a streaming response, for longer than
 * the idle timeout.
 *
 * @since 0.1.0
 */
export const idle = (target: Target, timeout: Duration.Duration, phase: "response" | "stream"): AiError.NetworkError =>
  new AiError.NetworkError({
    reason: "TransportError",
    method: target.method,
    url: target.url,
    description: phase === "response"
      ? `no response within the idle timeout (idleTimeout: ${Duration.format(timeout)})`
      : `the stream completed no event within the idle timeout (idleTimeout: ${Duration.format(timeout)})`
  })

/**
 * The call did not end within the response timeout, retries included.
 *
 * @since 0.1.0
 */
export const responseTimeout = (target: Target, timeout: Duration.Duration): AiError.NetworkError =>
  new AiError.NetworkError({
    reason: "TransportError",
    method: target.method,
    url: target.url,
    description: `the response did not end within the response timeout (responseTimeout: ${Duration.format(timeout)})`
  })

/**
 * The response body grew past the size limit. The limit is also on the
 * metadata, as `{ "effect-agent": { limit: "maxResponseBytes", maxResponseBytes } }`.
 *
 * @since 0.1.0
 */
export const tooLarge = (maxResponseBytes: number): AiError.InvalidResponseError =>
  new AiError.InvalidResponseError({
    description: `the response is larger than the size limit (maxResponseBytes: ${maxResponseBytes})`,
    metadata: { "effect-agent": { limit: "maxResponseBytes", maxResponseBytes } }
  })

/**
 * An error the provider reported inside a stream, by its error type or code
 * (`overloaded_error`, `rate_limit_error`, `invalid_request_error`, …).
 *
 * @since 0.1.0
 */
export const fromStreamError = (
  type: string | undefined,
  message: string | undefined
): AiError.AiErrorReason => {
  const kind = type ? ` (${type})` : ""
  const description = `the provider reported an error in the stream${kind}: ${message ?? "no message"}`
  const metadata = type === undefined ? {} : { errorType: type }
  switch (type) {
    case "rate_limit_error":
    case "rate_limit_exceeded":
      return new AiError.RateLimitError({ metadata: { ...metadata, providerMessage: description } })
    case "insufficient_quota":
      return new AiError.QuotaExhaustedError({ metadata: { ...metadata, providerMessage: description } })
    case "invalid_request_error":
    case "invalid_prompt":
    case "context_length_exceeded":
      return new AiError.InvalidRequestError({ description, metadata })
    case "authentication_error":
      return new AiError.AuthenticationError({ kind: "InvalidKey", description, metadata })
    case "permission_error":
      return new AiError.AuthenticationError({ kind: "InsufficientPermissions", description, metadata })
    default:
      return new AiError.InternalProviderError({ description, metadata })
  }
}

/**
 * A stream that broke its protocol. `what` says how: it ended before its
 * terminal event, a `data:` line was not JSON, an event missed a required
 * field.
 *
 * @since 0.1.0
 */
export const invalidStream = (what: string): AiError.InvalidOutputError =>
  new AiError.InvalidOutputError({ description: `invalid provider stream: ${what}` })

/**
 * The stream ended (the connection closed cleanly) before the event that
 * completes a response.
 *
 * @since 0.1.0
 */
export const truncated = (terminal: string): AiError.InvalidOutputError =>
  invalidStream(`the stream ended before its terminal event (${terminal}); the response is incomplete`)
