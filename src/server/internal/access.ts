/**
 * Who may use the server: the token check, the `Host` check of a server
 * without a token, and the limit on request bodies.
 *
 * @internal
 */
import { ByteSize, Cause, Effect, Redacted } from "effect"
import {
  HttpIncomingMessage,
  HttpRouter,
  HttpServerRequest,
  HttpServerRespondable,
  HttpServerResponse
} from "effect/http"
import * as NodeCrypto from "node:crypto"
import { MisdirectedRequest, PayloadTooLarge, ServerStopping, Unauthorized } from "./problems.ts"

const digest = (text: string) => NodeCrypto.createHash("sha256").update(text).digest()

/**
 * Whether a credential is the token, compared in constant time (on digests,
 * so that the length of the token does not show either).
 */
export const checker = (token: Redacted.Redacted<string> | undefined) => {
  if (token === undefined) return (_credential: Redacted.Redacted<string>) => true
  const expected = digest(Redacted.value(token))
  return (credential: Redacted.Redacted<string>) =>
    NodeCrypto.timingSafeEqual(digest(Redacted.value(credential)), expected)
}

/** The failure of a request without the token. */
export const unauthorized = new Unauthorized({ detail: "give the server's token: Authorization: Bearer <token>" })

/** The loopback names a server without a token answers to. */
export const loopbackHosts: ReadonlyArray<string> = ["localhost", "127.0.0.1", "[::1]"]

/** The host name of a `Host` header, without its port. */
const hostName = (host: string): string => {
  const bracket = host.startsWith("[") ? host.indexOf("]") : -1
  if (bracket > 0) return host.slice(0, bracket + 1).toLowerCase()
  const colon = host.indexOf(":")
  return (colon === -1 ? host : host.slice(0, colon)).toLowerCase()
}

/** Adds a challenge to a `401`, so that a browser asks for the token (as a password) and sends it. */
const challenge = (response: HttpServerResponse.HttpServerResponse) =>
  response.status === 401
    ? HttpServerResponse.setHeader(response, "www-authenticate", "Basic realm=\"effect-agent\", charset=\"UTF-8\"")
    : response

const isBodyTooLarge = (defect: unknown): boolean => {
  if (typeof defect !== "object" || defect === null || !("reason" in defect)) return false
  const reason: unknown = defect.reason
  return typeof reason === "object" && reason !== null && "reason" in reason && reason.reason === "BodyTooLarge"
}

/**
 * The router middleware of every route: the body limit (a larger body is a
 * `413` problem), the `Host` check when there is no token, the Basic
 * challenge on a `401`, and, once the server is stopping, a `503` that
 * closes the connection (so that clients holding connections open, such as
 * browsers, do not hold up the server's stop).
 */
export const middleware = (options: {
  readonly maxBodyBytes: number
  readonly allowedHosts: ReadonlyArray<string> | undefined
  readonly stopping: () => boolean
}) => {
  const stopping = new ServerStopping({ detail: "the server is stopping; its runs are saved: retry soon" })
  const limit = ByteSize.bytes(options.maxBodyBytes)
  const tooLarge = new PayloadTooLarge({
    limit: options.maxBodyBytes,
    detail: `the body is larger than ${options.maxBodyBytes} bytes`
  })
  const hosts = options.allowedHosts === undefined ? undefined : new Set(options.allowedHosts.map(hostName))
  return HttpRouter.middleware((httpEffect) =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (options.stopping()) {
        const response = yield* HttpServerRespondable.toResponse(stopping)
        return HttpServerResponse.setHeader(response, "connection", "close")
      }
      if (hosts !== undefined) {
        const host = request.headers.host ?? ""
        if (!hosts.has(hostName(host))) {
          return yield* HttpServerRespondable.toResponse(
            new MisdirectedRequest({ host, detail: `this server answers only ${Array.from(hosts).join(", ")}` })
          )
        }
      }
      const length = Number(request.headers["content-length"] ?? "0")
      if (length > options.maxBodyBytes) return yield* HttpServerRespondable.toResponse(tooLarge)
      const response = yield* httpEffect.pipe(
        Effect.provideService(HttpIncomingMessage.MaxBodySize, limit),
        Effect.catchCause((cause) => {
          const defect = cause.reasons.find(Cause.isDieReason)
          return defect !== undefined && isBodyTooLarge(defect.defect)
            ? HttpServerRespondable.toResponse(tooLarge)
            : Effect.failCause(cause)
        })
      )
      return challenge(response)
    }), { global: true })
}
