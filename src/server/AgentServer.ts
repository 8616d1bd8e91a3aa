/**
 * The agent server: durable sessions over HTTP, their events as Server-Sent
 * Events, and the inspector page, on `effect/http`.
 *
 * | route | does |
 * |---|---|
 * | `POST /sessions` | starts a durable session: `{ task, id?, config?, supervisor?, output? }` → its description (201) |
 * | `GET /sessions` | describes every session, newest first |
 * | `GET /sessions/:id` | describes one |
 * | `GET /sessions/:id/events` | its events as SSE, each with its `id:`; `Last-Event-ID` resumes after it |
 * | `POST /sessions/:id/control` | a control command, as on the command's stdin (see `effect-agent/protocol`'s `Control`) |
 * | `GET /` | the inspector (see `Inspector`): a page with no data in it, served without the token |
 *
 * Access: every route but the page needs the server's token (a random one
 * when none is given, logged once with the inspector's URL that carries it;
 * `token: "none"` serves without one, and says so loudly). A request from a
 * web page of another origin (its `Origin`) is refused (`403`) unless listed
 * in `allowedOrigins`, and every `POST` must be JSON (`Content-Type:
 * application/json`, a `415` otherwise), so that a page the user opens
 * cannot use the server. Without a token, only loopback `Host` names are
 * answered (`421`), against DNS rebinding.
 *
 * The API is declared with `effect/http-api` ({@link Api}), so
 * `HttpApiClient.make(AgentServer.Api)` (or {@link client}) is a typed
 * client. Bodies are Schemas: bad input is a `400` problem (RFC 9457) whose
 * `errors` name the field; an unknown session is a `404`; a body over
 * `maxBodyBytes` a `413`. A session's `config` goes through
 * `UntrustedConfig.decode` (`effect-agent/protocol`), over the server's own defaults, whose limits it
 * cannot raise.
 *
 * Events: each is one line of the session's trajectory (the format of
 * `Trajectory.ndjson`), and its SSE id is the line's index, the same across
 * restarts. A client that reconnects with `Last-Event-ID` gets the stored
 * events after it, then the live ones: nothing lost, nothing twice. The
 * stream ends once the session's run has ended and everything was sent. A
 * client that falls `sseBuffer` events behind is dropped (its stream ends,
 * with an SSE comment saying so) rather than slow the run: it reconnects and
 * catches up from the stored events.
 *
 * Bounds: at most `maxRunning` sessions run at once (a request that would
 * start one more is a `429`), at most `maxStreams` events streams are open
 * (and `maxStreamsPerSession` to one session; a `429` past either), each
 * with at most `sseBuffer` events unread; a session's queue of messages is
 * bounded (`Steering.limits`, a `429` past it), and so is a request body
 * (`maxBodyBytes`). Sessions that have ended are kept in the store (their
 * record and trajectory on disk, a small description in memory): what bounds
 * their number is the store's disk.
 *
 * Runs survive the server: a session is a `Session` with its checkpoint in
 * the store; when the server stops (or dies), the next server on the same
 * store resumes the sessions that were running.
 *
 * Supervised sessions: the server's owner lists supervisors by name
 * (`supervisors`: the checks, the worker, the limits, whether a plan comes
 * first or each feedback waits for the operator), and a client names one
 * (`POST /sessions { task, supervisor }`): the session is a
 * `SupervisedSession`, checkpointed and resumed as a plain one is. A client
 * never gives a check or a command, only a name. Its plan and its feedback
 * wait for `approve_plan`, `refine_plan`, `reject_plan`, `approve_turn` or
 * `replace_feedback` on the control route, which answer the question of their
 * kind waiting now (a `409` when none waits). Typed output the same way: the
 * owner lists Schemas by name (`outputs`), a client names one (`output`), and
 * the answer is in the session's description.
 *
 * @example
 * ```ts
 * import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
 * import { Config, Effect, Layer } from "effect"
 * import { ToolRegistry } from "effect-agent"
 * import { OpenAiChat } from "effect-agent/providers"
 * import { AgentServer } from "effect-agent/server"
 * import { createServer } from "node:http"
 *
 * // The token from the environment (without one, the server makes one and logs it with the inspector's URL).
 * const Server = Layer.unwrap(Effect.map(Config.Redacted("AGENT_TOKEN"), (token) =>
 *   AgentServer.layer({ directory: ".agent-server", token })
 * )).pipe(
 *   Layer.provide(OpenAiChat.layer({ model: "gpt-4o" })),
 *   Layer.provide(ToolRegistry.layer()),
 *   Layer.provide(NodeHttpServer.layer(createServer, { port: 8080, host: "127.0.0.1" }))
 * )
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import type * as Path from "effect/Path"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type * as Etag from "effect/http/Etag"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import type * as HttpPlatform from "effect/http/HttpPlatform"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiClient,
  HttpApiEndpoint,
  HttpApiError,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  HttpApiSecurity
} from "effect/http-api"
import type * as Agent from "../Agent.ts"
import type * as AgentConfig from "../AgentConfig.ts"
import * as AgentEvent from "../AgentEvent.ts"
import type * as Approvals from "../Approvals.ts"
import * as Control from "../protocol/Control.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import type * as Output from "../Output.ts"
import type * as SubAgent from "../SubAgent.ts"
import * as CheckpointStore from "../session/CheckpointStore.ts"
import type * as SupervisedSession from "../supervisor/SupervisedSession.ts"
import * as SupervisorOutcome from "../supervisor/SupervisorOutcome.ts"
import * as Access from "./internal/access.ts"
import type * as EventLog from "./internal/eventLog.ts"
import {
  ControlRejected,
  QueueFull,
  SessionExists,
  SessionNotFound,
  TooManyRuns,
  TooManyStreams,
  Unauthorized
} from "./internal/problems.ts"
import * as Sessions from "./internal/sessions.ts"
import * as Store from "./internal/store.ts"
import * as Inspector from "./Inspector.ts"

// -----------------------------------------------------------------------------
// Schemas
// -----------------------------------------------------------------------------

/**
 * A session id: 1 to 128 letters, digits, `.`, `_` or `-`, not starting
 * with `.`. It is `CheckpointStore.SessionId`, the one rule every surface
 * checks (the stores, `Session`, `DurableSession`, the command).
 *
 * @category schemas
 * @since 0.1.0
 */
export const SessionId = CheckpointStore.SessionId

/**
 * The longest task accepted, in characters.
 *
 * @category schemas
 * @since 0.1.0
 */
export const maxTaskLength = 1_000_000

/**
 * A name a client gives for one of the server's own (a supervisor, a typed
 * output): 1 to 128 characters.
 *
 * @category schemas
 * @since 0.1.0
 */
export const Name = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(128))

/**
 * The body of `POST /sessions`: the task, an id (else a random one),
 * settings (any `UntrustedConfig.decode` takes: unknown fields and internal
 * knobs are refused, extreme values clamped into safe ranges), the name of
 * one of the server's `supervisors` (the session is supervised) and the name
 * of one of its `outputs` (the session's typed output). A field it does not
 * list is refused (`400`): a client names what the server has, never gives a
 * check or a command of its own.
 *
 * @category schemas
 * @since 0.1.0
 */
export const CreateSession = Schema.Struct({
  task: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(maxTaskLength)),
  id: Schema.optionalKey(SessionId),
  config: Schema.optionalKey(Schema.Unknown),
  supervisor: Schema.optionalKey(Name),
  output: Schema.optionalKey(Name)
})
/**
 * @category schemas
 * @since 0.1.0
 */
export type CreateSession = typeof CreateSession.Type

/**
 * A call waiting for approval.
 *
 * @category schemas
 * @since 0.1.0
 */
export const PendingApproval = Schema.Struct({
  toolCallId: Schema.String,
  /** What `approve` and `deny` name the call by: unique across the run and its sub-agents (`c2/c1`). */
  approvalId: Schema.String,
  toolName: Schema.String,
  params: Schema.Unknown,
  reason: Schema.optionalKey(Schema.String)
})

/**
 * A supervised session's plan waiting for a decision (`approve_plan`,
 * `refine_plan`, `reject_plan`): its iteration (1, then one more per
 * refinement) and its text.
 *
 * @category schemas
 * @since 0.1.0
 */
export const PendingPlan = Schema.Struct({ iteration: Schema.Finite, plan: Schema.String })

/**
 * A supervised session's feedback waiting for the operator before it goes
 * to the worker (`approve_turn`, `replace_feedback`): the act turn it
 * follows, and its text.
 *
 * @category schemas
 * @since 0.1.0
 */
export const PendingTurn = Schema.Struct({ turn: Schema.Finite, feedback: Schema.String })

/**
 * The typed output a session asked for (`name`), and its answer once its run
 * gave one, in its JSON form (`value`); an answer larger than 256 KiB is not
 * kept in the description (`bytes` says its size): read it from the
 * session's `AgentEnd` event.
 *
 * @category schemas
 * @since 0.1.0
 */
export const SessionOutput = Schema.Struct({
  name: Schema.String,
  value: Schema.optionalKey(Schema.Unknown),
  bytes: Schema.optionalKey(Schema.Finite)
})

/**
 * What the server tells about a session. `status`: `running`, `waiting` (for
 * an approval, or a supervised session's plan or feedback), `finished` (its
 * run ended with `outcome`) or `failed` (`error`; a `follow_up` runs it again
 * from its last checkpoint). A supervised session names its `supervisor`, and
 * once it has ended, says how in the supervisor's words
 * (`supervisorOutcome`: `Converged`, `Unverified`, … ; `outcome` is the same
 * ending as the core's `Custom` outcome).
 *
 * @category schemas
 * @since 0.1.0
 */
export const SessionInfo = Schema.Struct({
  id: Schema.String,
  title: Schema.String,
  status: Schema.Literals(["running", "waiting", "finished", "failed"]),
  createdAt: Schema.Finite,
  updatedAt: Schema.Finite,
  turns: Schema.Finite,
  usage: Message.Usage,
  outcome: Schema.optionalKey(Outcome.Outcome),
  error: Schema.optionalKey(Schema.Struct({ _tag: Schema.String, message: Schema.String })),
  pendingApprovals: Schema.Array(PendingApproval),
  pendingPlan: Schema.optionalKey(PendingPlan),
  pendingTurn: Schema.optionalKey(PendingTurn),
  /** The server's supervisor the session runs under, when it is supervised. */
  supervisor: Schema.optionalKey(Schema.String),
  supervisorOutcome: Schema.optionalKey(SupervisorOutcome.SupervisorOutcome),
  output: Schema.optionalKey(SessionOutput),
  /** The agent's name, when the server has one (its `name` option). */
  agent: Schema.optionalKey(Schema.String)
})
/**
 * @category schemas
 * @since 0.1.0
 */
export type SessionInfo = typeof SessionInfo.Type

/**
 * What a control command did: `applied` now (a cancel, a decision for the
 * call waiting under its `approvalId`, for the plan or the feedback waiting),
 * `queued` until the run gets to it (a message), or `restarted` (the session
 * was not running: a new run started with the message). A decision names
 * what it answered: the call, the plan's `iteration`, the feedback's `turn`.
 *
 * @category schemas
 * @since 0.1.0
 */
export const ControlResult = Schema.Struct({
  sessionId: Schema.String,
  type: Schema.Literals(Control.types),
  status: Schema.Literals(["applied", "queued", "restarted"]),
  toolCallId: Schema.optionalKey(Schema.String),
  approvalId: Schema.optionalKey(Schema.String),
  iteration: Schema.optionalKey(Schema.Finite),
  turn: Schema.optionalKey(Schema.Finite)
})
/**
 * @category schemas
 * @since 0.1.0
 */
export type ControlResult = typeof ControlResult.Type

/**
 * One SSE message of the events stream: the event's id (its line in the
 * session's trajectory) and the event.
 *
 * @category schemas
 * @since 0.1.0
 */
export const EventMessage = Schema.Struct({
  id: Schema.String,
  event: Schema.String,
  data: Schema.fromJsonString(AgentEvent.AgentEventJson)
})
/**
 * @category schemas
 * @since 0.1.0
 */
export type EventMessage = typeof EventMessage.Type

const EventId = Schema.String.check(Schema.isPattern(/^(0|[1-9][0-9]{0,14})$/))

// -----------------------------------------------------------------------------
// Errors
// -----------------------------------------------------------------------------

export {
  /**
   * The server's store could not be read or written (its directory, a
   * session's record or trajectory): the layer fails with it when the
   * sessions it holds cannot be listed.
   *
   * @category errors
   * @since 0.1.0
   */
  StorageError
} from "./internal/store.ts"

export {
  /**
   * A control command that cannot apply now (`409`).
   *
   * @category errors
   * @since 0.1.0
   */
  ControlRejected,
  /**
   * The request comes from a web page of an origin the server does not accept (`403`).
   *
   * @category errors
   * @since 0.1.0
   */
  ForbiddenOrigin,
  /**
   * The request's `Host` is not one a server without a token answers (`421`).
   *
   * @category errors
   * @since 0.1.0
   */
  MisdirectedRequest,
  /**
   * The session's queue of steering and follow-ups is full (`429`): see `Steering.Limits`.
   *
   * @category errors
   * @since 0.1.0
   */
  QueueFull,
  /**
   * The request body is larger than `maxBodyBytes` (`413`).
   *
   * @category errors
   * @since 0.1.0
   */
  PayloadTooLarge,
  /**
   * A session with this id exists already (`409`).
   *
   * @category errors
   * @since 0.1.0
   */
  SessionExists,
  /**
   * No session has this id (`404`).
   *
   * @category errors
   * @since 0.1.0
   */
  SessionNotFound,
  /**
   * The server is stopping (`503`); retry with the next server.
   *
   * @category errors
   * @since 0.1.0
   */
  ServerStopping,
  /**
   * The server runs `maxRunning` sessions already (`429`): nothing was started.
   *
   * @category errors
   * @since 0.1.0
   */
  TooManyRuns,
  /**
   * The session (`maxStreamsPerSession`) or the server (`maxStreams`) has as many events streams as it takes (`429`).
   *
   * @category errors
   * @since 0.1.0
   */
  TooManyStreams,
  /**
   * No valid token (`401`).
   *
   * @category errors
   * @since 0.1.0
   */
  Unauthorized,
  /**
   * A `POST` whose body is not declared as JSON (`415`).
   *
   * @category errors
   * @since 0.1.0
   */
  UnsupportedMediaType
} from "./internal/problems.ts"

/**
 * The token check on every route of the sessions group (the inspector's page
 * holds no data, and is served without it): a middleware with the bearer and basic
 * security schemes (so the OpenAPI document says so). A Basic credential's
 * password is the token, so that a browser asked for it sends it.
 *
 * @category middleware
 * @since 0.1.0
 */
export class Authorization extends HttpApiMiddleware.Service<Authorization>()(
  "effect-agent/AgentServer/Authorization",
  { error: Unauthorized, security: { bearer: HttpApiSecurity.bearer, basic: HttpApiSecurity.basic } }
) {}

// -----------------------------------------------------------------------------
// The API
// -----------------------------------------------------------------------------

const params = { id: SessionId }

/**
 * The sessions group.
 *
 * @category api
 * @since 0.1.0
 */
export const SessionsGroup = HttpApiGroup.make("sessions")
  .add(
    HttpApiEndpoint.post("create", "/sessions", {
      payload: CreateSession,
      success: SessionInfo.pipe(HttpApiSchema.status(201)),
      error: [SessionExists, TooManyRuns, HttpApiError.InternalServerErrorProblem]
    }).annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error" }),
    HttpApiEndpoint.get("list", "/sessions", { success: Schema.Array(SessionInfo) }),
    HttpApiEndpoint.get("get", "/sessions/:id", { params, success: SessionInfo, error: SessionNotFound }),
    HttpApiEndpoint.get("events", "/sessions/:id/events", {
      params,
      headers: { "last-event-id": Schema.optionalKey(EventId) },
      success: HttpApiSchema.StreamSse({ events: EventMessage }),
      error: [SessionNotFound, TooManyStreams, HttpApiError.InternalServerErrorProblem]
    }),
    HttpApiEndpoint.post("control", "/sessions/:id/control", {
      params,
      payload: Control.Command,
      success: ControlResult.pipe(HttpApiSchema.status(202)),
      error: [SessionNotFound, ControlRejected, QueueFull, TooManyRuns, HttpApiError.InternalServerErrorProblem]
    })
  )
  .middleware(Authorization)

/**
 * The inspector group: the page at `/`, served without the token (it holds
 * no data; it reads the token from its URL's fragment, see `Inspector`).
 *
 * @category api
 * @since 0.1.0
 */
export const InspectorGroup = HttpApiGroup.make("inspector").add(
  HttpApiEndpoint.get("page", "/", {
    success: Schema.String.pipe(HttpApiSchema.asText({ contentType: "text/html; charset=utf-8" }))
  })
)

/**
 * The server's HTTP API, for typed clients (`HttpApiClient.make(Api)`) and
 * the OpenAPI document (`OpenApi.fromApi(Api)`).
 *
 * @category api
 * @since 0.1.0
 */
export const Api = HttpApi.make("AgentServer")
  .add(SessionsGroup)
  .add(InspectorGroup)
  .middleware(HttpApiMiddleware.ProblemDetails)

// -----------------------------------------------------------------------------
// Options
// -----------------------------------------------------------------------------

/**
 * A supervised run the server's owner sets up, for clients to name
 * (`Options.supervisors`): `Supervisor.Options` without what the server
 * gives each session. The worker (our own loop by default) runs with the
 * server's `system`, `plugins` and `name`, the session's config, and the
 * typed output the client names; the checks, the worker and the limits are
 * the owner's alone. A check needs the services its `R` names (a
 * `Check.command` the `Sandbox`): give them to the layer.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { AgentServer } from "effect-agent/server"
 * import { Check } from "effect-agent/supervisor"
 *
 * const tests: AgentServer.Supervision = {
 *   checks: [Check.make("tests", Effect.succeed({ status: "pass" as const, summary: "ok" }))],
 *   plan: true,
 *   maxTurns: 5
 * }
 * const Server = AgentServer.layer({ supervisors: { tests } })
 * ```
 *
 * @category options
 * @since 0.1.0
 */
export interface Supervision<R = never> extends SupervisedSession.Supervision<R> {}

/**
 * What the server runs sessions with. The model and the tools are the
 * `LanguageModel` and `ToolRegistry` of the layer's context (shared by every
 * session); these options add the rest.
 *
 * @category options
 * @since 0.1.0
 */
export interface Options<R = never> {
  /**
   * Where sessions are kept: `dir/checkpoints/<id>/` (the checkpoint store),
   * `dir/sessions/<id>/session.json` and `trajectory.ndjson`. Without one,
   * in memory: nothing survives the server.
   */
  readonly directory?: string | undefined
  /**
   * The token every route but the inspector's page requires: `Authorization: Bearer <token>` (or Basic, the
   * token as the password). Without one, the server makes a random one (see {@link randomToken}) and logs it
   * once, with the inspector's URL that carries it (`http://host:port/#token=…`): give your own to know it in
   * your program. `"none"` serves without a token, and logs a warning saying so: any program on this machine
   * may then start sessions and approve their calls; only loopback `Host` names are answered.
   */
  readonly token?: Redacted.Redacted<string> | "none" | undefined
  /**
   * The agent's name: its runs' spans are `invoke_agent {name}` (with `gen_ai.agent.name`), and the sessions'
   * descriptions (and the inspector) show it.
   */
  readonly name?: string | undefined
  /** The system prompt of every session. */
  readonly system?: string | undefined
  /**
   * Every session's config, under the settings a request gives (those go through `UntrustedConfig.decode`).
   * The limits it sets (turns, parallel tools, calls per turn, tool timeout, budgets) are ceilings: a request
   * can lower them, not raise them.
   */
  readonly config?: AgentConfig.Input | undefined
  /** Plugins of every run (after the server's own, which logs the events). */
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /**
   * Decides calls that need approval (and a supervised session's plans and feedback, when it has `decidePlan` /
   * `decideTurn`); by default they wait for the control route's decisions.
   */
  readonly approvals?: Approvals.Service | undefined
  /**
   * The supervised runs a client may ask for, by name (`POST /sessions { task, supervisor: "name" }`): the
   * checks, the worker and the limits are these, never a client's. An unknown name is a `400` naming these.
   */
  readonly supervisors?: Readonly<Record<string, Supervision<R>>> | undefined
  /**
   * The typed outputs a client may ask for, by name (`POST /sessions { task, output: "name" }`; see `Agent.run`'s
   * `output`): the model is offered `final_answer`, and the session's description holds the answer (its JSON
   * form). An unknown name is a `400` naming these.
   */
  readonly outputs?: Readonly<Record<string, Schema.Codec<unknown, unknown>>> | undefined
  /** How many invalid final answers the model may correct (default 2). */
  readonly outputRetries?: number | undefined
  /** How the final answer is asked for (see `Output.Mode`). */
  readonly outputMode?: Output.Mode | undefined
  /**
   * The agents a session may be handed off to (`Agent.handoff` tools among the server's): a session handed off
   * goes on in the agent that answered, after a follow-up or a restart of the server, as `Session.resume`'s
   * `agents` (one not listed fails the session's next run with `CheckpointAgentUnknown`).
   */
  readonly agents?: ReadonlyArray<SubAgent.Definition<string, SubAgent.InputSchema, unknown>> | undefined
  /** The largest request body, in bytes (default 1 MiB); larger is a `413`. */
  readonly maxBodyBytes?: number | undefined
  /** Events an SSE client may fall behind before it is dropped (default 1,024). */
  readonly sseBuffer?: number | undefined
  /** How often an idle SSE stream sends a comment to keep the connection open (default 15 seconds). */
  readonly keepAliveMs?: number | undefined
  /**
   * Without a token (`token: "none"`), the `Host` names accepted (default: `localhost`,
   * `127.0.0.1`, `[::1]`, with any port), so that a web page cannot reach a
   * server on the loopback through DNS rebinding. With a token, any.
   */
  readonly allowedHosts?: ReadonlyArray<string> | undefined
  /**
   * Origins (`https://app.example.com`, `http://localhost:3000`) whose web pages may call the server besides its
   * own: answered with CORS headers (and their preflights), they still need the token. A request whose
   * `Origin` is another is a `403`; one without `Origin` (a program, not a browser) is not checked.
   */
  readonly allowedOrigins?: ReadonlyArray<string> | undefined
  /** Resume the sessions that were running when the server last stopped (default true). */
  readonly resume?: boolean | undefined
  /**
   * Sessions running at once (default 32): a `POST /sessions`, or a `follow_up` that would start a run, past it is
   * a `429` (`TooManyRuns`); a message for a running session is queued as ever. The sessions a server resumes when
   * it starts are not refused.
   */
  readonly maxRunning?: number | undefined
  /** Events streams (`GET /sessions/:id/events`) open at once, in all (default 256); past it, a `429`. */
  readonly maxStreams?: number | undefined
  /** Events streams open at once to one session (default 16); past it, a `429`. */
  readonly maxStreamsPerSession?: number | undefined
}

/**
 * The defaults of {@link Options}.
 *
 * @category options
 * @since 0.1.0
 */
export const defaults = {
  maxBodyBytes: 1024 * 1024,
  sseBuffer: 1024,
  keepAliveMs: 15_000,
  maxRunning: 32,
  maxStreams: 256,
  maxStreamsPerSession: 16
} as const

// -----------------------------------------------------------------------------
// Serving
// -----------------------------------------------------------------------------

const encoder = new TextEncoder()

/** The SSE frame of each item: an event with its id; a comment while idle (keeping the connection open), or dropped. */
const frame = (item: EventLog.Item): Uint8Array =>
  encoder.encode(
    !("_tag" in item)
      ? `id: ${item.id}\ndata: ${item.json}\n\n`
      : item._tag === "Idle"
      ? ": keep-alive\n\n"
      : ": dropped: this client fell too far behind; reconnect with Last-Event-ID\n\n"
  )

/** The store failed: the server's log says how; the client is told no more (no paths of the server's). */
const storageFailure = (error: Store.StorageError) =>
  Effect.andThen(
    Effect.logError(`agent server: ${error.message}`),
    Effect.fail(new HttpApiError.InternalServerErrorProblem({ detail: "the server could not read or write its store" }))
  )

const sessionsGroup = (sessions: Sessions.Sessions, keepAliveMs: number) =>
  HttpApiBuilder.group(Api, "sessions", (handlers) =>
    handlers
      .handle("create", ({ payload }) =>
        Effect.catchIf(sessions.create(payload), Store.isStorageError, storageFailure))
      .handle("list", () => sessions.list)
      .handle("get", ({ params }) => sessions.get(params.id))
      .handle("events", ({ headers, params }) => {
        const lastId = headers["last-event-id"]
        return sessions.events(params.id, lastId === undefined ? -1 : Number(lastId), keepAliveMs).pipe(
          Effect.map((items) =>
            HttpServerResponse.stream(Stream.map(items, frame), {
              contentType: "text/event-stream",
              headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
            })
          ),
          Effect.catchIf(Store.isStorageError, storageFailure)
        )
      })
      .handle("control", ({ params, payload }) =>
        Effect.catchIf(sessions.control(params.id, payload), Store.isStorageError, storageFailure)))

const inspectorGroup = HttpApiBuilder.group(
  Api,
  "inspector",
  (handlers) =>
    handlers.handle("page", () =>
      Effect.succeed(
        HttpServerResponse.text(Inspector.html, {
          contentType: "text/html; charset=utf-8",
          headers: Inspector.headers
        })
      ))
)

const authorization = (token: Redacted.Redacted<string> | undefined) => {
  const check = Access.checker(token)
  return Layer.succeed(Authorization, {
    bearer: (effect, { credential }) => check(credential) ? effect : Effect.fail(Access.unauthorized),
    basic: (effect, { credential }) => check(credential.password) ? effect : Effect.fail(Access.unauthorized)
  })
}

/**
 * The token the server requires: the one given, none (`"none"`), or a random
 * one made now (`generated`: it is told to the operator once).
 */
const tokenOf = (options: Options<unknown>): {
  readonly token: Redacted.Redacted<string> | undefined
  readonly generated: boolean
} =>
  options.token === "none"
    ? { token: undefined, generated: false }
    : options.token === undefined
    ? { token: Access.randomToken(), generated: true }
    : { token: options.token, generated: false }

/** The loud warning of a server without a token. */
const tokenlessWarning = "agent server: serving WITHOUT A TOKEN (token: \"none\"): any program on this machine can " +
  "start sessions and approve their calls; web pages of other origins are refused, and only loopback Host names " +
  "are answered"

/** Tells the operator what a server's token is, once: the generated token and the inspector's URL that carries it. */
const announce = (token: ReturnType<typeof tokenOf>, baseUrl: string | undefined) =>
  token.token === undefined
    ? Effect.logWarning(tokenlessWarning)
    : token.generated
    ? Effect.logInfo(
      baseUrl === undefined
        ? "agent server: no token was given, so it made one; requests need Authorization: Bearer " +
          `${Redacted.value(token.token)} (the inspector: open its page at /#token=${
            encodeURIComponent(Redacted.value(token.token))
          })`
        : "agent server: no token was given, so it made one; the inspector, with it: " +
          Access.inspectorUrl(baseUrl, token.token)
    )
    : Effect.void

/**
 * The server's routes, to add to an `HttpRouter` (with `HttpRouter.serve`,
 * or beside an application's own routes): the API, the inspector, and the
 * sessions they serve, started with the layer (and the unfinished ones
 * resumed). Each session runs with the `LanguageModel` and `ToolRegistry`
 * of the layer's context. Without a `token`, it makes one and logs it once
 * (with the page's path, `/#token=…`: it does not know where it is served).
 * The access checks (`Origin`, JSON bodies, the `Host` of a tokenless
 * server, the body limit) are the router's: they apply to an application's
 * own routes beside these too.
 *
 * @category layers
 * @since 0.1.0
 */
export const routes = <R = never>(
  options: Options<R> = {}
): Layer.Layer<never, Store.StorageError, RoutesRequirements<R>> =>
  Layer.unwrap(Effect.sync(() => {
    const token = tokenOf(options)
    return Layer.merge(routesWith(options, token.token, () => {}), Layer.effectDiscard(announce(token, undefined)))
  }))

/**
 * What {@link routes} needs: a router, the model and tools, the services of
 * the plugins, and the platform's HTTP services.
 *
 * @category layers
 * @since 0.1.0
 */
export type RoutesRequirements<R> =
  | HttpRouter.HttpRouter
  | Agent.Requirements
  | R
  | Etag.Generator
  | FileSystem.FileSystem
  | HttpPlatform.HttpPlatform
  | Path.Path

const routesWith = <R>(
  options: Options<R>,
  token: Redacted.Redacted<string> | undefined,
  onStop: (stop: Effect.Effect<void>) => void
): Layer.Layer<
  never,
  Store.StorageError,
  | HttpRouter.HttpRouter
  | Agent.Requirements
  | R
  | Etag.Generator
  | FileSystem.FileSystem
  | HttpPlatform.HttpPlatform
  | Path.Path
> =>
  Layer.unwrap(Effect.gen(function*() {
    const store = options.directory === undefined ? Store.memory() : Store.directory(options.directory)
    const sessions = yield* Sessions.make<R>({
      store,
      name: options.name,
      system: options.system,
      config: options.config,
      plugins: options.plugins,
      approvals: options.approvals,
      supervisors: options.supervisors,
      outputs: options.outputs,
      outputRetries: options.outputRetries,
      outputMode: options.outputMode,
      agents: options.agents,
      buffer: options.sseBuffer ?? defaults.sseBuffer,
      resume: options.resume ?? true,
      maxRunning: options.maxRunning ?? defaults.maxRunning,
      maxStreams: options.maxStreams ?? defaults.maxStreams,
      maxStreamsPerSession: options.maxStreamsPerSession ?? defaults.maxStreamsPerSession
    })
    onStop(sessions.stop)
    const allowedHosts = token === undefined ? options.allowedHosts ?? Access.loopbackHosts : undefined
    return HttpApiBuilder.layer(Api).pipe(
      Layer.provide([sessionsGroup(sessions, options.keepAliveMs ?? defaults.keepAliveMs), inspectorGroup]),
      Layer.provide([authorization(token), HttpApiMiddleware.layerProblemDetails({ includeDetails: true })]),
      Layer.merge(Access.middleware({
        maxBodyBytes: options.maxBodyBytes ?? defaults.maxBodyBytes,
        allowedHosts,
        allowedOrigins: options.allowedOrigins ?? [],
        stopping: sessions.isStopping
      }))
    )
  }))

/**
 * The server: {@link routes} served by the `HttpServer` of the layer's
 * context (on Node, `NodeHttpServer.layer(createServer, { port, host })`).
 * Without a `token`, it makes one and logs it once, with the inspector's
 * URL that carries it (`http://127.0.0.1:8080/#token=…`).
 *
 * @category layers
 * @since 0.1.0
 */
export const layer = <R = never>(options: Options<R> = {}) =>
  Layer.suspend(() => {
    const token = tokenOf(options)
    // The runs stop before the HTTP server drains its connections (which SSE streams would hold open):
    // this finalizer is added after the server's, so it runs first.
    let stop: Effect.Effect<void> = Effect.void
    const served = HttpRouter.serve(routesWith<R>(options, token.token, (effect) => (stop = effect)), {
      disableListenLog: true,
      disableLogger: true
    })
    const told = Layer.effectDiscard(
      Effect.flatMap(HttpServer.addressFormattedWith(Effect.succeed), (url) => announce(token, url))
    )
    return Layer.provideMerge(
      Layer.effectDiscard(Effect.addFinalizer(() => Effect.suspend(() => stop))),
      Layer.merge(served, told)
    )
  })

/**
 * A new random token for a server (32 bytes from the system's CSPRNG, as
 * base64url): to give to {@link layer} (or {@link routes}) and to your
 * clients, when the program that starts the server talks to it too.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { AgentServer } from "effect-agent/server"
 *
 * const token = AgentServer.randomToken()
 * const Server = AgentServer.layer({ token })
 * const client = AgentServer.client("http://127.0.0.1:8080", { token })
 * ```
 *
 * @category access
 * @since 0.1.0
 */
export const randomToken: () => Redacted.Redacted<string> = Access.randomToken

/**
 * The inspector's URL on a server at `baseUrl` that gives the page the
 * token: in the URL's fragment (`http://127.0.0.1:8080/#token=…`), which a
 * browser never sends. The page keeps it for its tab (`sessionStorage`),
 * removes it from the address bar, and sends it as `Authorization: Bearer`.
 *
 * @example
 * ```ts
 * import { Redacted } from "effect"
 * import { AgentServer } from "effect-agent/server"
 *
 * const token = Redacted.make("s3cret")
 * console.log(AgentServer.inspectorUrl("http://127.0.0.1:8080", token)) // Output: http://127.0.0.1:8080/#token=s3cret
 * ```
 *
 * @category access
 * @since 0.1.0
 */
export const inspectorUrl: (baseUrl: string, token?: Redacted.Redacted<string> | undefined) => string =
  Access.inspectorUrl

/**
 * A typed client of a server at `baseUrl`, sending `token` when given.
 *
 * @example
 * ```ts
 * import { NodeHttpClient } from "@effect/platform-node"
 * import { Effect } from "effect"
 * import { AgentServer } from "effect-agent/server"
 *
 * const program = Effect.gen(function*() {
 *   const client = yield* AgentServer.client("http://127.0.0.1:8080")
 *   const session = yield* client.sessions.create({ payload: { task: "Plan a trip" } })
 *   return session.id
 * }).pipe(Effect.provide(NodeHttpClient.layerUndici))
 * ```
 *
 * @category client
 * @since 0.1.0
 */
export const client = (baseUrl: string, options: { readonly token?: Redacted.Redacted<string> | undefined } = {}) =>
  HttpApiClient.make(Api, {
    baseUrl,
    transformClient: (http) =>
      options.token === undefined ? http : HttpClient.mapRequest(http, HttpClientRequest.bearerToken(options.token))
  })
