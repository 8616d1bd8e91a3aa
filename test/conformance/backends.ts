/**
 * The ways to run a session, each as an adapter the conformance matrix
 * drives the same way: start a scenario, read its events, steer it, approve
 * a call, send a follow-up once it has ended. Adding a backend is adding one
 * adapter to {@link backends}.
 *
 * An adapter is made once for the whole matrix (`make`, in the matrix's
 * scope: a database, a server) and starts each scenario in the scenario's
 * own scope (`start`). It answers what its user sees: the events (as the
 * backend publishes them: a hook, the store, SSE) and, where the backend
 * returns one, the result ({@link Handle.final}); by default the result is
 * the one the last `AgentEnd` carries.
 */
import { NodeServices } from "@effect/platform-node"
import { Context, type Duration, Effect, Fiber, Layer, Schedule, Schema, type Scope } from "effect"
import { WorkflowEngine } from "effect/workflow"
import {
  Agent,
  AgentEvent,
  Approvals,
  Hooks,
  type Message,
  type Outcome,
  Steering
} from "effect-agent"
import { AgentServer } from "effect-agent/server"
import { CheckpointStore, DurableSession, Sessions } from "effect-agent/session"
import { SupervisedSession, SupervisorOutcome } from "effect-agent/supervisor"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { baseUrl, readSse, serverLayer } from "../server/support.ts"
import { database, engine, sqlEngine } from "../session/cluster-fixture.ts"
import * as Postgres from "../session/postgres.ts"
import { databaseOn } from "../session/sql-engine.ts"
import { agentLayer, billing, type Gate, guardrail, type Scenario, scenarios, systems } from "./scenarios.ts"
import { patience } from "../patience.ts"

/** How a run ended, as the backend tells it. */
export interface Final {
  readonly messages: ReadonlyArray<Message.Message>
  readonly outcome: Outcome.Outcome
  /** The typed output, as its JSON (what the run's state keeps). */
  readonly output: unknown
}

/** A scenario running on a backend. */
export interface Handle {
  /** Every event published so far, in order. */
  readonly events: Effect.Effect<ReadonlyArray<AgentEvent.AgentEvent>, unknown>
  readonly steer: (text: string) => Effect.Effect<void, unknown>
  /** Approves the call waiting under `approvalId`; whether one waited. */
  readonly approve: (approvalId: string) => Effect.Effect<boolean, unknown>
  /** Cancels the run in flight with `reason` (`Steering.cancel`, `Sessions.cancel`, a `cancel` control). */
  readonly cancel: (reason: string) => Effect.Effect<void, unknown>
  /** Sends a follow-up to the session whose run has ended. */
  readonly followUp: (text: string) => Effect.Effect<void, unknown>
  /** The result, once `runs` runs have ended (default: from the last `AgentEnd`). */
  readonly final?: ((runs: number) => Effect.Effect<Final, unknown>) | undefined
  /** A run's outcome as its `AgentEnd` carries it, read as `Agent.run`'s (default: as it is). */
  readonly outcome?: ((outcome: Outcome.Outcome) => Outcome.Outcome) | undefined
}

/** Types a handle. */
const handle = (handle: Handle): Handle => handle

/** Starts a scenario. */
export type Start = (scenario: Scenario, gate: Gate) => Effect.Effect<Handle, unknown, Scope.Scope>

/** A way to run a session. */
export interface Backend {
  readonly name: string
  /** Event tags the backend documents as its own: left out before comparing. */
  readonly own: ReadonlyArray<string>
  /** Set up once for the matrix; `{ skip }` says why the backend cannot run here. */
  readonly make: Effect.Effect<Start | { readonly skip: string }, unknown, Scope.Scope>
}

/** The ends of runs among events: `AgentEnd`s at the top (not a sub-agent's), except those of a handoff. */
export const endsOf = (events: ReadonlyArray<AgentEvent.AgentEvent>) =>
  events.filter((event): event is AgentEvent.Of<"AgentEnd"> =>
    event._tag === "AgentEnd" && event.outcome?._tag !== "HandedOff"
  )

/** The result the last end carries. */
export const finalOf = (end: AgentEvent.Of<"AgentEnd">): Final => {
  const result = end.result
  if (result === undefined) throw new Error(`the run ended without a result: ${end.error?._tag ?? end.defect}`)
  return { messages: result.state.messages, outcome: result.outcome, output: result.state.output?.value }
}

export { patience }

/** Polls (every 20 ms, for at most `within`) until `events` holds `runs` ends. */
export const waitForEnds = (events: Handle["events"], runs: number, within: Duration.Input = patience) =>
  events.pipe(
    Effect.repeat({ until: (all) => endsOf(all).length >= runs, schedule: Schedule.spaced("20 millis") }),
    Effect.timeoutOrElse({
      duration: within,
      orElse: () => Effect.fail(new Error(`${runs === 1 ? "the run" : `run ${runs}`} did not end in time`))
    }),
    Effect.map((all) => finalOf(endsOf(all).at(-1)!))
  )

const recording = () => {
  const events: Array<AgentEvent.AgentEvent> = []
  const plugin = Hooks.plugin({ name: "conformance", onEvent: (event) => Effect.sync(() => void events.push(event)) })
  return { events, plugin, read: Effect.sync(() => events.slice()) }
}

/** What every in-process run is given. */
const runOptions = (scenario: Scenario, plugin: Hooks.Plugin) => ({
  system: systems.main,
  output: scenario.output,
  config: scenario.config,
  plugins: [guardrail, plugin]
})

// -----------------------------------------------------------------------------
// Agent.run: the reference
// -----------------------------------------------------------------------------

/** `Agent.run`, and `Agent.runContinue` with the follow-up queued once it has ended. */
export const reference: Backend = {
  name: "Agent.run",
  own: [],
  make: Effect.succeed<Start>((scenario) =>
    Effect.gen(function*() {
      const { plugin, read } = recording()
      const scope = yield* Effect.scope
      const approvals = yield* Approvals.interactive()
      const provide = Effect.provide(Layer.merge(agentLayer, Approvals.layer(approvals)))
      const options = runOptions(scenario, plugin)
      let steering = yield* Steering.make()
      let last = yield* Effect.forkScoped(Agent.run({ prompt: scenario.prompt, ...options, steering }).pipe(provide))
      return handle({
        events: read,
        steer: (text) => steering.steer(text),
        approve: approvals.approve,
        cancel: (reason) => steering.cancel(reason),
        followUp: (text) =>
          Effect.gen(function*() {
            const ended = yield* Fiber.join(last)
            steering = yield* Steering.make()
            yield* steering.followUp(text)
            last = yield* Effect.forkIn(Agent.runContinue(ended.state, { ...options, steering }).pipe(provide), scope)
          })
      })
    })
  )
}

// -----------------------------------------------------------------------------
// The Sessions service, on each of its layers: one adapter
// -----------------------------------------------------------------------------

/** Each scenario's typed output, by its name: a session asks for its own (a layer's, a server's `outputs`). */
const outputs = Object.fromEntries(
  scenarios.flatMap((scenario) => scenario.output === undefined ? [] : [[scenario.name, scenario.output]])
)

/** What every layer of `Sessions` runs sessions with: the guardrail, the typed outputs, the agent handed off to. */
const sessionOptions = { plugins: [guardrail], outputs, agents: [billing] }

/**
 * A scenario through the `Sessions` service: started, steered, approved and
 * followed up by the session's id; its events and its result as the service
 * answers them. The layer is built once for the matrix.
 */
const sessionsStart = (context: Context.Context<Sessions.Sessions>, supervised = false): Start => (scenario) =>
  Effect.gen(function*() {
    const sessions = Context.get(context, Sessions.Sessions)
    const sessionId = `conformance-${globalThis.crypto.randomUUID()}`
    yield* sessions.start({
      sessionId,
      prompt: scenario.prompt,
      system: systems.main,
      config: scenario.config,
      output: scenario.output === undefined ? undefined : scenario.name,
      ...(supervised ? { supervisor: "matrix" } : {})
    })
    yield* Effect.addFinalizer(() => Effect.ignore(sessions.interrupt(sessionId)))
    // the number of the last event published before each follow-up: the next run's ending comes after it
    const marks = [0]
    const events = Effect.map(sessions.events(sessionId), (published) => published.map((entry) => entry.event))
    return handle({
      events,
      steer: (text) => sessions.steer(sessionId, text),
      approve: (approvalId) => sessions.approve(sessionId, approvalId, Approvals.approved),
      cancel: (reason) => sessions.cancel(sessionId, reason),
      followUp: (text) =>
        Effect.gen(function*() {
          marks.push((yield* sessions.events(sessionId)).at(-1)?.seq ?? 0)
          yield* sessions.followUp(sessionId, text)
        }),
      final: (runs) =>
        Effect.map(
          sessions.result(sessionId, marks[runs - 1] ?? 0).pipe(Effect.timeout(patience)),
          (result): Final => ({
            messages: result.state.messages,
            // a supervised session's ending, as a run's (see `innerOutcome`)
            outcome: supervised ? innerOutcome(SupervisorOutcome.fromOutcome(result.outcome)) : result.outcome,
            output: result.state.output?.value
          })
        ),
      outcome: supervised ? (outcome) => innerOutcome(SupervisorOutcome.fromOutcome(outcome)) : undefined
    })
  })

/** A temporary directory for the scope. */
const temporary = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), prefix))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/** A backend of the `Sessions` service on `layer` (built once, in the matrix's scope). */
const sessionsBackend = (
  name: string,
  own: ReadonlyArray<string>,
  layer: Layer.Layer<Sessions.Sessions, unknown, Scope.Scope>
): Backend => ({
  name,
  own,
  make: Effect.map(Layer.build(layer), sessionsStart)
})

/** In this process: each session a `Session`, its checkpoints on the `CheckpointStore` layer. */
const inProcess = (store: Layer.Layer<CheckpointStore.CheckpointStore, unknown, Scope.Scope>) =>
  Sessions.layer(sessionOptions).pipe(Layer.provide(Layer.merge(agentLayer, store)))

export const sessionMemory = sessionsBackend(
  "Session (memory)",
  ["CheckpointSaved", "SessionResumed"],
  inProcess(CheckpointStore.layerMemory)
)

export const sessionFile = sessionsBackend(
  "Session (files)",
  ["CheckpointSaved", "SessionResumed"],
  inProcess(Layer.unwrap(Effect.map(temporary("conformance-store-"), CheckpointStore.layerFileSystem)))
)

/** The supervisor a supervised session names: no checks, so a run that ends by itself converges. */
const supervisors = { matrix: SupervisedSession.supervisor({ checks: [], baseline: false }) }

/** As workflows: a runner on the engine and store given, its sessions kept idle for a follow-up. */
const durable = <E, R>(engineAndStore: Layer.Layer<WorkflowEngine.WorkflowEngine | DurableSession.Store, E, R>) =>
  DurableSession.layerSessions.pipe(
    Layer.provideMerge(
      // a session whose run ended waits for a follow-up (DurableSession's way to continue a session, as
      // Agent.runContinue and Session.resume do), on durable time
      DurableSession.layer({ ...sessionOptions, supervisors, idle: "1 minute" }).pipe(Layer.provideMerge(agentLayer))
    ),
    Layer.provideMerge(engineAndStore)
  )

const durableMemoryLayer = durable(Layer.merge(WorkflowEngine.layerMemory, DurableSession.layerMemoryStore))

export const durableMemory = sessionsBackend("DurableSession (memory)", [], durableMemoryLayer)

/** The supervisor's own events: its `Custom` ones, and the `SessionResumed` of a session it resumes. */
const supervisedOwn = ["CheckpointSaved", "SessionResumed", "Custom"]

export const durableMemorySupervised: Backend = {
  name: "DurableSession (memory, supervised)",
  own: supervisedOwn,
  make: Effect.map(Layer.build(durableMemoryLayer), (context) => sessionsStart(context, true))
}

/** The PostgreSQL server of the matrix's backends: one for all four, started by the first (in the matrix's scope). */
let sharedServer: Postgres.Postgres | undefined

/** A database of its own for a backend, made empty on the shared server: its URL. */
const databaseOnSharedServer: Effect.Effect<string, unknown, Scope.Scope> = Effect.gen(function*() {
  if (sharedServer === undefined) sharedServer = yield* Postgres.scoped
  return yield* databaseOn(sharedServer.url)
})

/**
 * One runner in this process on a real PostgreSQL, for every scenario (skipped when PostgreSQL cannot start): on
 * effect's cluster, or on the sessions' own SQL engine; each in a database of its own on one server.
 */
const durablePostgresBackend = (name: string, supervised: boolean, kind: "cluster" | "sql" = "cluster"): Backend => ({
  name,
  own: supervised ? supervisedOwn : [],
  make: Effect.gen(function*(): Effect.fn.Return<Start | { readonly skip: string }, unknown, Scope.Scope> {
    const available = Postgres.availability()
    if ("unavailable" in available) return { skip: available.unavailable }
    const url = yield* databaseOnSharedServer
    yield* DurableSession.migrateSql.pipe(Effect.provide(database(url)))
    const context = kind === "sql"
      ? yield* Layer.build(durable(DurableSession.layerSqlStore.pipe(Layer.provideMerge(sqlEngine(url, true)))))
      : yield* Layer.build(durable(DurableSession.layerSqlStore.pipe(
        Layer.provideMerge(engine(url, yield* Effect.promise(Postgres.freePort)))
      )))
    return sessionsStart(context, supervised)
  })
})

export const durablePostgres = durablePostgresBackend("DurableSession (PostgreSQL)", false)

export const durablePostgresSupervised = durablePostgresBackend("DurableSession (PostgreSQL, supervised)", true)

export const durableSqlEngine = durablePostgresBackend("DurableSession (PostgreSQL, own engine)", false, "sql")

export const durableSqlEngineSupervised = durablePostgresBackend(
  "DurableSession (PostgreSQL, own engine, supervised)",
  true,
  "sql"
)

// -----------------------------------------------------------------------------
// A supervised session, with no checks and our own worker
// -----------------------------------------------------------------------------

/**
 * The inner run's ending as a supervised run with no checks reports it:
 * `Converged` where it completed; `Unverified` by a budget where a budget
 * ended it (the supervisor's word for `BudgetExceeded`); any other as it is.
 */
const innerOutcome = (outcome: SupervisorOutcome.SupervisorOutcome): Outcome.Outcome => {
  if (outcome._tag === "Converged") return { _tag: "Completed" }
  if (outcome._tag === "Unverified" && outcome.budget !== "turns") {
    return { _tag: "BudgetExceeded", budget: outcome.budget, limit: outcome.limit, used: outcome.used }
  }
  return SupervisorOutcome.toOutcome(outcome)
}

let supervisedSessions = 0

/**
 * `SupervisedSession.run` with no checks, on `CheckpointStore.layerMemory`
 * (built in the scenario's scope), and `SupervisedSession.resume` with the
 * follow-up queued once it has ended, as the Session adapter does: the inner
 * runs' events (their plugin), the transcript, and the supervisor's outcome
 * (`Converged` read as `Completed`: no checks, so the first ended turn
 * converges).
 */
export const supervised: Backend = {
  name: "Supervisor",
  // the inner runs' events: the supervisor's own (SupervisorEvent, SessionResumed) never reach their plugins
  own: [],
  make: Effect.succeed<Start>((scenario) =>
    Effect.gen(function*() {
      const { plugin, read } = recording()
      const scope = yield* Effect.scope
      const approvals = yield* Approvals.interactive()
      const checkpoints = yield* Layer.build(CheckpointStore.layerMemory)
      const provide = Effect.provide(
        Layer.mergeAll(agentLayer, Approvals.layer(approvals), Layer.succeedContext(checkpoints))
      )
      const id = `supervised-${++supervisedSessions}`
      const options = {
        checks: [],
        baseline: false,
        output: scenario.output,
        // the agents its worker may hand off to: a follow-up goes on in the one that answered
        agent: { system: systems.main, config: scenario.config, plugins: [guardrail, plugin], agents: [billing] }
      }
      let steering = yield* Steering.make()
      let last = yield* Effect.forkScoped(
        SupervisedSession.run({ id, task: scenario.prompt, ...options, steering }).pipe(provide)
      )
      return handle({
        events: read,
        steer: (text) => steering.steer(text),
        approve: approvals.approve,
        cancel: (reason) => steering.cancel(reason),
        followUp: (text) =>
          Effect.gen(function*() {
            yield* Fiber.join(last)
            steering = yield* Steering.make()
            yield* steering.followUp(text)
            last = yield* Effect.forkIn(SupervisedSession.resume({ id, ...options, steering }).pipe(provide), scope)
          }),
        final: (runs) =>
          Effect.gen(function*() {
            yield* waitForEnds(read, runs)
            const result = yield* Fiber.join(last)
            return {
              messages: result.state.messages,
              outcome: innerOutcome(result.outcome),
              // the last act turn's answer, in its JSON form as a run's state keeps it
              output: result.output === undefined || scenario.output === undefined
                ? undefined
                : Schema.encodeUnknownSync(Schema.toCodecJson(scenario.output))(result.output)
            }
          })
      })
    })
  )
}

// -----------------------------------------------------------------------------
// The agent server, over HTTP on 127.0.0.1
// -----------------------------------------------------------------------------

const decodeEvent = Schema.decodeUnknownSync(Schema.fromJsonString(AgentEvent.AgentEventJson))
const decodeInfo = Schema.decodeUnknownSync(AgentServer.SessionInfo)

/**
 * One server for every scenario (in memory, without a token, on 127.0.0.1):
 * a session per scenario, started with `POST /sessions` (its config and the
 * name of its typed output in the body), followed over SSE (reconnecting
 * with `Last-Event-ID` when a run's stream ends, as a client does),
 * controlled with `POST .../control`. With `supervised`, each session names
 * the server's supervisor with no checks: its events are the supervised
 * run's (its own, `Custom`, left out), its outcome as the `Supervisor`
 * column reads it, and its typed output the session's description's.
 */
const agentServer = (name: string, supervised: boolean): Backend => ({
  name,
  own: supervised ? ["CheckpointSaved", "SessionResumed", "Custom"] : ["CheckpointSaved", "SessionResumed"],
  make: Effect.gen(function*() {
    const context = yield* Layer.build(
      serverLayer({
        system: systems.main,
        plugins: [guardrail],
        outputs,
        // the agents a session may have been handed off to: a follow-up goes on in the one that answered
        agents: [billing],
        supervisors: { matrix: { checks: [], baseline: false } }
      }, agentLayer).pipe(Layer.provide(NodeServices.layer))
    )
    const url = yield* baseUrl.pipe(Effect.provideContext(context))
    const post = (route: string, body: unknown) =>
      Effect.promise(async () => {
        const response = await fetch(`${url}${route}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body)
        })
        return { status: response.status, text: await response.text() }
      })
    const start: Start = (scenario) =>
      Effect.gen(function*() {
        const created = yield* post("/sessions", {
          task: scenario.prompt,
          ...(scenario.config === undefined ? {} : { config: scenario.config }),
          ...(scenario.output === undefined ? {} : { output: scenario.name }),
          ...(supervised ? { supervisor: "matrix" } : {})
        })
        if (created.status !== 201) return yield* Effect.fail(new Error(`POST /sessions: ${created.status} ${created.text}`))
        const id: string = JSON.parse(created.text).id
        const events: Array<AgentEvent.AgentEvent> = []
        let lastId: string | undefined
        // Follows the events: a stream ends with its run; the next run's events come on a new one.
        yield* Effect.forkScoped(
          Effect.promise((signal) =>
            fetch(`${url}/sessions/${id}/events`, {
              headers: lastId === undefined ? {} : { "last-event-id": lastId },
              signal
            }).then((response) =>
              readSse(response, (message) => {
                lastId = message.id
                events.push(decodeEvent(message.data))
                return false
              })
            )
          ).pipe(Effect.repeat(Schedule.spaced("50 millis")))
        )
        const read = Effect.sync(() => events.slice())
        const control = (command: unknown) =>
          Effect.map(post(`/sessions/${id}/control`, command), (response) => response.status === 202)
        // the supervisor's outcome (the AgentEnd of a supervised session carries it), as the Supervisor column reads it
        const outcome = (outcome: Outcome.Outcome) => innerOutcome(SupervisorOutcome.fromOutcome(outcome))
        const final = (runs: number) =>
          Effect.gen(function*() {
            const end = finalOf(endsOf(yield* waitForEnds(read, runs).pipe(Effect.andThen(read))).at(-1)!)
            const info = decodeInfo(
              yield* Effect.promise(() => fetch(`${url}/sessions/${id}`).then((response) => response.json()))
            )
            return {
              messages: end.messages,
              outcome: outcome(end.outcome),
              output: info.output?.value
            }
          })
        return handle({
          events: read,
          steer: (text) => Effect.asVoid(control({ type: "steer", text })),
          approve: (approvalId) => control({ type: "approve", id: approvalId }),
          cancel: (reason) =>
            Effect.flatMap(control({ type: "cancel", reason }), (applied) =>
              applied ? Effect.void : Effect.fail(new Error("the cancel was refused"))),
          followUp: (text) => Effect.asVoid(control({ type: "follow_up", text })),
          final: supervised ? final : undefined,
          outcome: supervised ? outcome : undefined
        })
      })
    return start
  })
})

export const server = agentServer("AgentServer", false)

export const serverSupervised = agentServer("AgentServer (supervised)", true)

/** Every backend the matrix runs, the reference first. */
export const backends: ReadonlyArray<Backend> = [
  reference,
  sessionMemory,
  sessionFile,
  durableMemory,
  durablePostgres,
  durableSqlEngine,
  durableMemorySupervised,
  durablePostgresSupervised,
  durableSqlEngineSupervised,
  supervised,
  server,
  serverSupervised
]

