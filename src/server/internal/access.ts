/**
 * Who may use the server: the token (a random one when none is given), the
 * `Origin` check and the JSON-only bodies that keep web pages of other
 * origins out, the `Host` check of a server without a token, and the limit
 * on request bodies.
 *
 * @internal
 */
import * as ByteSize from "effect/ByteSize"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as HttpIncomingMessage from "effect/http/HttpIncomingMessage"
import * as HttpMiddleware from "effect/http/HttpMiddleware"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerRespondable from "effect/http/HttpServerRespondable"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as NodeCrypto from "node:crypto"
import {
  ForbiddenOrigin,
  MisdirectedRequest,
  PayloadTooLarge,
  ServerStopping,
  Unauthorized,
  UnsupportedMediaType
} from "./problems.ts"

/** A new random token: 32 bytes from the system's CSPRNG, as base64url (safe in a URL's fragment). */
export const randomToken = (): Redacted.Redacted<string> =>
  Redacted.make(NodeCrypto.randomBytes(32).toString("base64url"))

/** The inspector's URL at `baseUrl` that gives the page the token (in the fragment, which is never sent). */
export const inspectorUrl = (baseUrl: string, token?: Redacted.Redacted<string> | undefined): string =>
  token === undefined ? `${baseUrl}/` : `${baseUrl}/#token=${encodeURIComponent(Redacted.value(token))}`

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

/**
 * An origin as browsers send it in `Origin` (`scheme://host[:port]`, lower
 * case, without a default port); what is not a URL is kept as it is, lower
 * case (and so matches nothing a browser sends but itself).
 */
export const normalizeOrigin = (origin: string): string => {
  const text = origin.trim().toLowerCase()
  try {
    const parsed = new URL(text)
    return parsed.origin === "null" ? text : parsed.origin
  } catch {
    return text
  }
}

/** The `host[:port]` of a `Host` header as a URL would have it (a default port dropped), or `undefined`. */
const hostOf = (host: string): string | undefined => {
  try {
    return new URL(`http://${host}`).host
  } catch {
    return undefined
  }
}

/**
 * Whether a request's `Origin` may use the server: the server's own (the
 * origin's host is the request's `Host`), or one of `listed`.
 */
const originAllowed = (origin: string, host: string | undefined, listed: ReadonlySet<string>): boolean => {
  const normalized = normalizeOrigin(origin)
  if (listed.has(normalized)) return true
  if (host === undefined) return false
  try {
    const parsed = new URL(normalized)
    return (parsed.protocol === "http:" || parsed.protocol === "https:") && parsed.host === hostOf(host)
  } catch {
    return false
  }
}

/** The methods that only read: every other method must carry a JSON body. */
const reading: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"])

/** Whether a `Content-Type` is `application/json` (parameters such as `charset` allowed). */
const isJson = (contentType: string | undefined): boolean =>
  contentType !== undefined && contentType.split(";", 1)[0]!.trim().toLowerCase() === "application/json"

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
 * The router middleware of every route, in this order: once the server is
 * stopping, a `503` that closes the connection (so that clients holding
 * connections open, such as browsers, do not hold up the server's stop); the
 * `Host` check when there is no token (`421`); the `Origin` check (`403`: a
 * request a browser sends from a page of another origin, unless listed;
 * requests without `Origin`, from programs, pass); a JSON body on every
 * request that is not a read (`415` otherwise: a page can send a body
 * without a type, or as `text/plain`, to any origin without asking, but not
 * as `application/json`); CORS headers and preflights for the listed
 * origins; the body limit (a larger body is a `413`); the Basic challenge on
 * a `401`.
 */
export const middleware = (options: {
  readonly maxBodyBytes: number
  readonly allowedHosts: ReadonlyArray<string> | undefined
  readonly allowedOrigins: ReadonlyArray<string>
  readonly stopping: () => boolean
}) => {
  const stopping = new ServerStopping({ detail: "the server is stopping; its runs are saved: retry soon" })
  const limit = ByteSize.bytes(options.maxBodyBytes)
  const tooLarge = new PayloadTooLarge({
    limit: options.maxBodyBytes,
    detail: `the body is larger than ${options.maxBodyBytes} bytes`
  })
  const hosts = options.allowedHosts === undefined ? undefined : new Set(options.allowedHosts.map(hostName))
  const listed: ReadonlySet<string> = new Set(options.allowedOrigins.map(normalizeOrigin))
  // Pages of the listed origins call with a token and a JSON body: their browsers ask first (a preflight).
  const cors = listed.size === 0 ? undefined : HttpMiddleware.cors({
    // Only given requests from a listed origin (below), so every origin it sees is allowed.
    allowedOrigins: () => true,
    allowedMethods: ["GET", "POST"],
    allowedHeaders: ["authorization", "content-type", "last-event-id"],
    maxAge: 600
  })
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
      const origin = request.headers.origin
      if (origin !== undefined && !originAllowed(origin, request.headers.host, listed)) {
        return yield* HttpServerRespondable.toResponse(
          new ForbiddenOrigin({
            origin,
            detail: `requests from ${origin} are not accepted: only this server's own origin` +
              (listed.size === 0 ? "" : ` and ${Array.from(listed).join(", ")}`)
          })
        )
      }
      if (!reading.has(request.method) && !isJson(request.headers["content-type"])) {
        const contentType = request.headers["content-type"] ?? ""
        return yield* HttpServerRespondable.toResponse(
          new UnsupportedMediaType({
            contentType,
            detail: `send the body as JSON, with Content-Type: application/json (not ${
              contentType === "" ? "no Content-Type" : contentType
            })`
          })
        )
      }
      const length = Number(request.headers["content-length"] ?? "0")
      if (length > options.maxBodyBytes) return yield* HttpServerRespondable.toResponse(tooLarge)
      const crossOrigin = cors !== undefined && origin !== undefined && listed.has(normalizeOrigin(origin))
      const response = yield* (crossOrigin ? cors(httpEffect) : httpEffect).pipe(
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
