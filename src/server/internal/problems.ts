/**
 * The server's errors, as RFC 9457 problems (`application/problem+json`):
 * each has its status, a `type` URI, a `title`, and a `detail` in words.
 * `AgentServer` exports them.
 *
 * @internal
 */
import * as Schema from "effect/Schema"
import { HttpApiError } from "effect/http-api"

/**
 * No session has this id (`404`).
 *
 * @category errors
 * @since 0.1.0
 */
export class SessionNotFound extends HttpApiError.Problem<SessionNotFound>()("SessionNotFound", {
  type: "urn:effect-agent:problem:session-not-found",
  status: 404,
  title: "No such session"
}, { sessionId: Schema.String }) {}

/**
 * A session with this id exists already (`409`).
 *
 * @category errors
 * @since 0.1.0
 */
export class SessionExists extends HttpApiError.Problem<SessionExists>()("SessionExists", {
  type: "urn:effect-agent:problem:session-exists",
  status: 409,
  title: "The session exists already"
}, { sessionId: Schema.String }) {}

/**
 * A control command that cannot apply now (`409`); `detail` says why: a
 * cancel for a session that is not running, an approval when no call waits,
 * a steer for a session that has finished.
 *
 * @category errors
 * @since 0.1.0
 */
export class ControlRejected extends HttpApiError.Problem<ControlRejected>()("ControlRejected", {
  type: "urn:effect-agent:problem:control-rejected",
  status: 409,
  title: "The command does not apply now"
}, { sessionId: Schema.String }) {}

/**
 * The session's queue of steering and follow-ups is full (`429`): what waits
 * for delivery is at its bound (`Steering.limits`). Nothing was queued; send
 * again once the run has taken what waits (at its next model call).
 *
 * @category errors
 * @since 0.1.0
 */
export class QueueFull extends HttpApiError.Problem<QueueFull>()("QueueFull", {
  type: "urn:effect-agent:problem:queue-full",
  status: 429,
  title: "The session's queue is full"
}, { sessionId: Schema.String, queued: Schema.Finite, bytes: Schema.Finite }) {}

/**
 * The server runs as many sessions at once as it takes (`429`, its
 * `maxRunning` option): no session was started, and no message started one.
 * Retry once a run has ended; a message for a session that is running is
 * queued as ever.
 *
 * @category errors
 * @since 0.1.0
 */
export class TooManyRuns extends HttpApiError.Problem<TooManyRuns>()("TooManyRuns", {
  type: "urn:effect-agent:problem:too-many-runs",
  status: 429,
  title: "The server runs as many sessions as it takes"
}, { limit: Schema.Finite }) {}

/**
 * The server streams as many events streams as it takes (`429`), to this
 * session (its `maxStreamsPerSession` option) or in all (`maxStreams`):
 * reconnect once another client has gone.
 *
 * @category errors
 * @since 0.1.0
 */
export class TooManyStreams extends HttpApiError.Problem<TooManyStreams>()("TooManyStreams", {
  type: "urn:effect-agent:problem:too-many-streams",
  status: 429,
  title: "Too many clients follow the server's events"
}, { sessionId: Schema.String, limit: Schema.Finite }) {}

/**
 * No valid token (`401`): the server has a token and the request did not
 * carry it (`Authorization: Bearer <token>`, or Basic with the token as the
 * password).
 *
 * @category errors
 * @since 0.1.0
 */
export class Unauthorized extends HttpApiError.Problem<Unauthorized>()("Unauthorized", {
  type: "urn:effect-agent:problem:unauthorized",
  status: 401,
  title: "A valid token is required"
}) {}

/**
 * The request comes from a web page of another origin (`403`): its `Origin`
 * is neither the server's own nor one the server lists (`allowedOrigins`),
 * so that a page the user happens to open cannot use the server.
 *
 * @category errors
 * @since 0.1.0
 */
export class ForbiddenOrigin extends HttpApiError.Problem<ForbiddenOrigin>()("ForbiddenOrigin", {
  type: "urn:effect-agent:problem:forbidden-origin",
  status: 403,
  title: "Requests from this origin are not accepted"
}, { origin: Schema.String }) {}

/**
 * A request that changes state without a JSON body (`415`): every `POST`
 * must say `Content-Type: application/json`, which a web page of another
 * origin cannot send without the server's consent (a CORS preflight).
 *
 * @category errors
 * @since 0.1.0
 */
export class UnsupportedMediaType extends HttpApiError.Problem<UnsupportedMediaType>()("UnsupportedMediaType", {
  type: "urn:effect-agent:problem:unsupported-media-type",
  status: 415,
  title: "The body must be JSON (Content-Type: application/json)"
}, { contentType: Schema.String }) {}

/**
 * The request body is larger than the server takes (`413`).
 *
 * @category errors
 * @since 0.1.0
 */
export class PayloadTooLarge extends HttpApiError.Problem<PayloadTooLarge>()("PayloadTooLarge", {
  type: "urn:effect-agent:problem:payload-too-large",
  status: 413,
  title: "The request body is too large"
}, { limit: Schema.Finite }) {}

/**
 * The request's `Host` is not one the server answers (`421`): a server
 * without a token answers only its loopback names, so that a web page cannot
 * reach it through DNS rebinding.
 *
 * @category errors
 * @since 0.1.0
 */
export class MisdirectedRequest extends HttpApiError.Problem<MisdirectedRequest>()("MisdirectedRequest", {
  type: "urn:effect-agent:problem:misdirected-request",
  status: 421,
  title: "This server does not answer for that host"
}, { host: Schema.String }) {}

/**
 * The server is stopping (`503`): its runs are saved, and the next server on
 * the same store resumes them; retry then.
 *
 * @category errors
 * @since 0.1.0
 */
export class ServerStopping extends HttpApiError.Problem<ServerStopping>()("ServerStopping", {
  type: "urn:effect-agent:problem:server-stopping",
  status: 503,
  title: "The server is stopping"
}) {}

/** A `400` naming the field that is wrong, as the schema errors name theirs. */
export const badRequest = (path: ReadonlyArray<string>, message: string, detail: string) =>
  new HttpApiError.BadRequestProblem({ detail, errors: [{ path, message }] })
