/**
 * The durable session's own workflow engine on PostgreSQL, through
 * `effect/sql`'s `SqlClient`: an `effect/workflow` engine (built with
 * `WorkflowEngine.makeUnsafe`, on the model of `WorkflowEngine.layerMemory`)
 * whose executions, activity results, deferreds and clocks are rows, written
 * in as few statements as the promises allow.
 *
 * - **Ownership.** An execution runs on one runner, its `owner`. A runner
 *   keeps a lease (`effect_agent_wf_runners`), renewed every third of it; one
 *   whose lease ran out (it died, or lost the database) loses its executions
 *   to the first runner that polls. Every write of a run is fenced: it is made
 *   only while its runner owns the execution (a row lock on it, which a claim
 *   waits for), and a run that finds it does not any more is abandoned, so a
 *   runner that comes back after its executions moved writes nothing.
 * - **A turn in two writes.** An activity's result and the events it emitted
 *   (`Commit`) go in one statement (the fence, the result, the events): one
 *   writing transaction, one round trip. A result nothing outside the run sees
 *   before the next write (an inbox take) waits for it. A replay reads the
 *   execution's results once, in the statement that starts it.
 * - **Wakes.** A deferred completed (anywhere) sets its execution's `wake`; a
 *   resume, `resume`; an interrupt, `interrupted`. The owner's poll (every
 *   `poll`) finds its executions woken, and any runner claims the executions
 *   that need a run and have no live owner; the process that completes a
 *   deferred of an execution it owns wakes it at once.
 * - **Clocks** are rows with their time, fired by the runner that set them (a
 *   timer) or by any runner's poll once due.
 *
 * What it does not do: child workflows wake their parent but are not
 * interrupted with it, and an activity's or a deferred's encoded value is
 * kept as JSON (the session's values are).
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberMap from "effect/FiberMap"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import { SqlClient, type SqlError, type Statement } from "effect/sql"
import { Workflow, WorkflowEngine } from "effect/workflow"
import { Commit } from "./commit.ts"
import type { Entry } from "./outbox.ts"
import * as SqlStore from "./sqlStore.ts"

/**
 * @internal
 */
export interface Options {
  /** Whether this process runs executions (`false`: it only submits and follows them, a client). */
  readonly runner?: boolean | undefined
  /** How long a runner's lease lasts without renewal: its executions move this long after it died. */
  readonly lease?: Duration.Input | undefined
  /** How often a runner looks for executions to run (woken, or left by a runner that died), and for clocks. */
  readonly poll?: Duration.Input | undefined
}

/**
 * Creates the engine's tables when missing (safe to run again).
 *
 * @internal
 */
export const migrate: Effect.Effect<void, SqlError.SqlError, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_wf_runners (
    runner_id text PRIMARY KEY, lease_until timestamptz NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_wf_executions (
    execution_id text PRIMARY KEY, workflow text NOT NULL, key text NOT NULL, payload text NOT NULL, parent text,
    owner text, result text, suspended boolean NOT NULL DEFAULT false, failed boolean NOT NULL DEFAULT false,
    wake boolean NOT NULL DEFAULT false, resume boolean NOT NULL DEFAULT false,
    interrupted boolean NOT NULL DEFAULT false)`
  yield* sql`CREATE INDEX IF NOT EXISTS effect_agent_wf_executions_open
    ON effect_agent_wf_executions (owner) WHERE result IS NULL`
  // an execution by its workflow's idempotency key (a session's id): what forgetting a session deletes
  yield* sql`CREATE INDEX IF NOT EXISTS effect_agent_wf_executions_key ON effect_agent_wf_executions (workflow, key)`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_wf_activities (
    execution_id text NOT NULL, name text NOT NULL, attempt integer NOT NULL, exit text NOT NULL,
    PRIMARY KEY (execution_id, name, attempt))`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_wf_deferreds (
    execution_id text NOT NULL, name text NOT NULL, exit text NOT NULL, PRIMARY KEY (execution_id, name))`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_wf_clocks (
    execution_id text NOT NULL, name text NOT NULL, deferred text NOT NULL, wake_at timestamptz NOT NULL,
    PRIMARY KEY (execution_id, name))`
})

/** An activity's or a deferred's exit (its values encoded by their own JSON codecs) as JSON text. */
const ExitText = Schema.fromJsonString(Schema.toCodecJson(Schema.Exit(Schema.Any, Schema.Any, Schema.Defect())))
const encodeExitText = Schema.encodeEffect(ExitText)
const decodeExitText = Schema.decodeUnknownEffect(ExitText)

/**
 * An exit as JSON text. A success (what nearly every activity ends with: each model call, each tool call) is
 * written here in the form `ExitText` gives it, `{"_tag":"Success","value":…}` (its value is encoded already), at
 * a fraction of the codec's cost (a turn spent about 60 µs in it); a failure, whose cause holds defects, goes
 * through the codec. A void success is kept as `null`, as effect's engines read one back (JSON has no
 * `undefined`).
 */
const encodeExit = (exit: Exit.Exit<unknown, unknown>): Effect.Effect<string, Schema.SchemaError> =>
  exit._tag === "Success"
    ? Effect.succeed(JSON.stringify({ _tag: "Success", value: exit.value ?? null }))
    : encodeExitText(Exit.map(exit, (value) => value ?? null))

/** {@link encodeExit}'s text as an exit: a success read here, a failure through the codec. */
const decodeExit = (text: string): Effect.Effect<Exit.Exit<unknown, unknown>, Schema.SchemaError> => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return decodeExitText(text) // its SchemaError says what is wrong
  }
  return typeof parsed === "object" && parsed !== null && "_tag" in parsed && parsed._tag === "Success" &&
      "value" in parsed
    ? Effect.succeed(Exit.succeed(parsed.value))
    : decodeExitText(text)
}

/**
 * A codec of a workflow's as JSON text. `Workflow.Any` types its schemas as needing any services, as effect's
 * engines take them: the AST is read as a codec that needs none (the session's need none; one that did would
 * fail here, at run time, with a `SchemaError`).
 */
const jsonOf = (schema: Schema.Top): Schema.Codec<unknown, string> =>
  Schema.make<Schema.Codec<unknown, string>>(Schema.fromJsonString(Schema.toCodecJson(schema)).ast)

interface Codecs {
  readonly payload: Schema.Codec<unknown, string>
  readonly result: Schema.Codec<unknown, string>
}

/** The codecs of each workflow, made once (a codec made anew is compiled anew: a session's start paid ~10 ms). */
const codecs = new WeakMap<Workflow.Any, Codecs>()

/** The codecs of a workflow's payload and result, as JSON text. */
const codecsOf = (workflow: Workflow.Any): Codecs => {
  let made = codecs.get(workflow)
  if (made === undefined) {
    made = {
      payload: jsonOf(workflow.payloadSchema),
      result: jsonOf(Workflow.Result({ success: workflow.successSchema, error: workflow.errorSchema }))
    }
    codecs.set(workflow, made)
  }
  return made
}

type WakeMode = "explicit" | "automatic"

const isUnwakeable = (result: Workflow.Result<unknown, unknown>, mode: WakeMode) =>
  result._tag === "Complete" || (mode === "automatic" && result.failed === true)

/** An activity's result waiting for the execution's next write. */
interface Waiting {
  readonly name: string
  readonly attempt: number
  readonly exit: string
}

/** A session's events to write. */
interface Events {
  readonly sessionId: string
  readonly entries: ReadonlyArray<Entry>
}

/** An execution this runner owns. */
interface Local {
  readonly executionId: string
  readonly workflow: Workflow.Any
  readonly payload: object
  readonly parent: string | undefined
  readonly execute: Registered["execute"]
  instance: WorkflowEngine.WorkflowInstance["Service"]
  interrupted: boolean
  interruptedUnsafe: boolean
  resumeRequested: WakeMode | undefined
  fiber: Fiber.Fiber<Workflow.Result<unknown, unknown>> | undefined
  readonly done: Deferred.Deferred<void>
  readonly scope: Scope.Closeable
  /** The results of this run's activities (by `name/attempt`), read when it started. */
  activities: Map<string, Exit.Exit<unknown, unknown>>
  deferreds: Map<string, Exit.Exit<unknown, unknown>>
  waiting: Array<Waiting>
  /**
   * The session's events handed to the engine and not yet written, in the order they were handed over (the
   * order the body emitted them): each write takes them all.
   */
  events: Events | undefined
  /** One write of the execution at a time: they commit in the order they took what waited. */
  readonly writing: Semaphore.Semaphore
  /** Begun here, and not run yet: its first run has nothing to read (and its row was just written). */
  fresh: boolean
  /** Its last run died (the database went away): when, and how many times in a row; the poll runs it again. */
  died: { readonly at: number; readonly times: number } | undefined
  /**
   * The session its events are of (known once it hands some over), and the last place in the session's inbox
   * as the last write read it.
   */
  inbox: { readonly sessionId: string; head: number | undefined } | undefined
}

interface Registered {
  readonly workflow: Workflow.Any
  readonly execute: (
    payload: object,
    executionId: string
  ) => Effect.Effect<unknown, unknown, WorkflowEngine.WorkflowInstance | WorkflowEngine.WorkflowEngine>
  readonly scope: Scope.Scope
}

/** Two batches of one session's events as one, in order. */
const joined = (first: Events | undefined, second: Events | undefined): Events | undefined =>
  first === undefined
    ? second
    : second === undefined
    ? first
    : { sessionId: first.sessionId, entries: [...first.entries, ...second.entries] }

/** What `execute` is given. */
interface ExecuteOptions<Discard extends boolean> {
  readonly executionId: string
  readonly payload: object
  readonly discard: Discard
  readonly parent?: WorkflowEngine.WorkflowInstance["Service"] | undefined
  readonly detached?: boolean | undefined
}

/** The columns of {@link ExecutionRow}, of `effect_agent_wf_executions e`. */
const rowColumns = "e.execution_id, e.workflow, e.payload, e.parent, e.owner, e.result, e.suspended, e.failed, e.interrupted"

/** A row of `effect_agent_wf_executions`, as read. */
interface ExecutionRow {
  readonly execution_id: string
  readonly workflow: string
  readonly payload: string
  readonly parent: string | null
  readonly owner: string | null
  readonly result: string | null
  readonly suspended: boolean
  readonly failed: boolean
  readonly interrupted: boolean
}

/**
 * The engine: run it in a scope (its poll, its lease and its runs live there; closing it hands its executions
 * back).
 *
 * @internal
 */
export const make = (
  options: Options = {}
): Effect.Effect<WorkflowEngine.WorkflowEngine["Service"], never, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const engineScope = yield* Effect.scope
    const runnerId = crypto.randomUUID()
    const runs = options.runner !== false
    const leaseMs = Duration.toMillis(Duration.fromInputUnsafe(options.lease ?? "15 seconds"))
    const pollEvery = Duration.fromInputUnsafe(options.poll ?? "200 millis")

    const workflows = new Map<string, Registered>()
    const locals = new Map<string, Local>()
    const deferredState = WorkflowEngine.makeDeferredState()
    const timers = yield* FiberMap.make<string>()

    /** A failure of the database is a defect of the engine (as effect's engines make it: see `StorageFailure`). */
    const db = <A>(effect: Effect.Effect<A, SqlError.SqlError | Schema.SchemaError>): Effect.Effect<A> =>
      Effect.orDie(effect)

    const heartbeat = sql`INSERT INTO effect_agent_wf_runners (runner_id, lease_until)
      VALUES (${runnerId}, now() + ${leaseMs} * interval '1 millisecond')
      ON CONFLICT (runner_id) DO UPDATE SET lease_until = EXCLUDED.lease_until`

    /** Stops a run that lost its execution to another runner: nothing of it is written any more. */
    const abandon = (local: Local) =>
      Effect.suspend(() => {
        if (locals.get(local.executionId) === local) locals.delete(local.executionId)
        local.instance.abandoned = true
        const fiber = local.fiber
        return fiber === undefined ? Effect.void : Effect.asVoid(Effect.forkIn(Fiber.interrupt(fiber), engineScope))
      })

    /**
     * The one write of an activity: the fence (the execution is this runner's: a row lock a claim waits for),
     * the results given and those that waited, and the session's events, in one statement. Answers whether
     * the fence held.
     */
    const write = (
      local: Local,
      results: ReadonlyArray<Waiting>,
      options: { readonly then?: Statement.Fragment | undefined; readonly fence?: boolean | undefined } = {}
    ) =>
      local.writing.withPermits(1)(Effect.suspend(() => {
        const waited = local.waiting
        const entries = local.events
        local.waiting = []
        local.events = undefined
        // A statement that fails (the database went away) leaves what waited waiting, for the next write or the
        // activity made again: nothing handed over is lost, and nothing is written out of its order.
        return Effect.onError(writeTaken(local, [...waited, ...results], entries, options), () =>
          Effect.sync(() => {
            local.waiting = [...waited, ...local.waiting]
            local.events = joined(entries, local.events)
          }))
      }))

    const writeTaken = (
      local: Local,
      all: ReadonlyArray<Waiting>,
      entries: Events | undefined,
      { fence = false, then }: { readonly then?: Statement.Fragment | undefined; readonly fence?: boolean | undefined }
    ) =>
      Effect.gen(function*() {
        const batch = entries === undefined ? undefined : yield* SqlStore.encodeBatch(entries.entries)
        if (all.length === 0 && batch === undefined && then === undefined && !fence) return true
        const rows = JSON.stringify(all.map((result) => [result.name, result.attempt, result.exit]))
        const insertEvents = batch === undefined || entries === undefined
          ? sql``
          : sql`, events AS (${SqlStore.insertEvents(sql, entries.sessionId, batch, sql.literal("fence AS gate"))})`
        // (the session's inbox's last place, read with the write: a steering take right after need not read it)
        const inbox = local.inbox
        const inboxHead = inbox === undefined
          ? sql`NULL::integer`
          : sql`(SELECT COALESCE(MAX(seq), 0) FROM effect_agent_inbox_next WHERE session_id = ${inbox.sessionId})`
        const statement = sql<{ fenced: number; head: number | null }>`
          WITH fence AS (
            SELECT execution_id FROM effect_agent_wf_executions
            WHERE execution_id = ${local.executionId} AND owner = ${runnerId} FOR SHARE),
          results AS (
            INSERT INTO effect_agent_wf_activities (execution_id, name, attempt, exit)
            SELECT fence.execution_id, r->>0, (r->>1)::integer, r->>2
            FROM fence CROSS JOIN jsonb_array_elements(${rows}::jsonb) AS r
            ON CONFLICT DO NOTHING)
          ${insertEvents}
          ${then ?? sql``}
          SELECT count(*)::integer AS fenced, ${inboxHead} AS head FROM fence`
        // A publisher of the session's events outside this engine (none, on a runner whose store is the
        // engine's) could collide on (session_id, seq): the statement is made again (its results are kept once).
        const [row] = yield* statement.pipe(
          Effect.retry({ times: 50, while: (error) => error.reason._tag === "UniqueViolation" })
        )
        const held = (row?.fenced ?? 0) > 0
        if (held && inbox !== undefined && row !== undefined && row.head !== null) inbox.head = Number(row.head)
        return held
      })

    /** Hands events over to be written by the execution's next write, after those handed over before. */
    const handOver = (local: Local, events: Events) => {
      local.events = joined(local.events, events)
      if (local.inbox === undefined) local.inbox = { sessionId: events.sessionId, head: undefined }
    }

    /** A fenced write that finds the execution gone to another runner abandons this run. */
    const fenced = (local: Local, held: boolean): Effect.Effect<void> =>
      held ? Effect.void : Effect.andThen(abandon(local), Effect.interrupt)

    /**
     * Starts a run of an execution this runner owns: clears its wakes (this run answers them) and reads its
     * results and deferreds. `false` when it is not this runner's any more.
     */
    const startRun = (local: Local) =>
      Effect.gen(function*() {
        if (local.fresh) {
          local.fresh = false
          return true
        }
        // What a run preempted or dead left waiting is written before the replay reads (it would make it again)
        if (local.waiting.length > 0 || local.events !== undefined) {
          if (!(yield* write(local, []))) return false
        }
        // The wakes are cleared first, holding the row's lock; the results and deferreds are read after, in the
        // same transaction but a snapshot of their own: a deferred completed before the lock was taken is read,
        // one completed after sets its wake again once the lock is let go (its statement waits for it).
        const read = yield* sql.withTransaction(Effect.gen(function*() {
          const started = yield* sql<{ interrupted: boolean }>`
            UPDATE effect_agent_wf_executions SET wake = false, resume = false, suspended = false, failed = false
            WHERE execution_id = ${local.executionId} AND owner = ${runnerId} RETURNING interrupted`
          if (started.length === 0) return undefined
          const rows = yield* sql<{ kind: string; key: string; exit: string }>`
            SELECT 'a' AS kind, name || '/' || attempt AS key, exit FROM effect_agent_wf_activities
            WHERE execution_id = ${local.executionId}
            UNION ALL
            SELECT 'd', name, exit FROM effect_agent_wf_deferreds WHERE execution_id = ${local.executionId}`
          return { interrupted: started[0]?.interrupted === true, rows }
        }))
        if (read === undefined) return false
        if (read.interrupted) local.interrupted = true
        const activities = new Map<string, Exit.Exit<unknown, unknown>>()
        const deferreds = new Map<string, Exit.Exit<unknown, unknown>>()
        for (const row of read.rows) {
          const exit = yield* decodeExit(row.exit)
          ;(row.kind === "a" ? activities : deferreds).set(row.key, exit)
        }
        local.activities = activities
        local.deferreds = deferreds
        return true
      })

    /** Records a run's result: its ending (the execution's result), or its suspension. */
    const record = (local: Local, result: Workflow.Result<unknown, unknown>) =>
      Effect.gen(function*() {
        if (result._tag === "Suspended") {
          // with the results and events that waited: the replay that the wake makes reads them
          const held = yield* write(local, [], {
            then: sql`, suspended AS (UPDATE effect_agent_wf_executions SET suspended = true,
              failed = ${result.failed === true} WHERE execution_id IN (SELECT execution_id FROM fence))`
          })
          if (!held) yield* abandon(local)
          return
        }
        const text = yield* Schema.encodeUnknownEffect(codecsOf(local.workflow).result)(result)
        // with the events that waited (a last model call's): the results that waited matter no more, but are kept
        const held = yield* write(local, [], {
          then: sql`, ended AS (
            UPDATE effect_agent_wf_executions SET result = ${text}, owner = NULL, suspended = false, wake = false,
              resume = false
            WHERE execution_id IN (SELECT execution_id FROM fence)),
          clocks AS (DELETE FROM effect_agent_wf_clocks
            WHERE execution_id IN (SELECT execution_id FROM fence))`
        })
        if (!held) return yield* abandon(local)
        if (local.parent !== undefined) yield* wake(local.parent, "automatic")
      })

    /** Runs (again) an execution this runner owns, as `layerMemory`'s `resume` does. */
    const resume = (executionId: string, mode: WakeMode): Effect.Effect<void> =>
      Effect.gen(function*() {
        const state = locals.get(executionId)
        if (state === undefined) return
        const exit = state.fiber?.pollUnsafe()
        if (exit && exit._tag === "Success" && isUnwakeable(exit.value, mode)) return
        if (state.fiber && !exit) {
          // Queue wakes until the run finishes; explicit wakes take priority.
          const requested = state.resumeRequested
          state.resumeRequested = mode === "explicit" ? mode : requested ?? mode
          if (requested === undefined) {
            yield* Fiber.await(state.fiber).pipe(
              Effect.flatMap(() => {
                const queued = state.resumeRequested ?? mode
                state.resumeRequested = undefined
                return resume(executionId, queued)
              }),
              Effect.forkIn(engineScope)
            )
          }
          return
        }
        const entry = workflows.get(state.workflow._tag)
        if (entry === undefined) return
        const instance = WorkflowEngine.WorkflowInstance.initial(state.workflow, executionId, {
          scope: Scope.forkUnsafe(state.scope)
        })
        state.instance = instance
        const run = Effect.gen(function*() {
          if (!(yield* db(startRun(state)))) {
            instance.abandoned = true
            if (locals.get(executionId) === state) locals.delete(executionId)
            return yield* Effect.interrupt
          }
          return yield* state.execute(state.payload, executionId).pipe(
            Effect.onExit((exit) => {
              // Safe interrupts take effect only when the run would suspend; unsafe ones also when it completes.
              if (
                !state.interrupted ||
                (!state.interruptedUnsafe &&
                  !instance.suspended &&
                  !instance.abandoned &&
                  !(Context.get(instance.workflow.annotations, Workflow.SuspendOnFailure) && Exit.isFailure(exit)))
              ) {
                return Effect.void
              }
              instance.interrupted = true
              instance.suspended = false
              return Effect.withFiber((fiber) => Effect.interruptible(Fiber.interrupt(fiber)))
            }),
            Workflow.intoResult
          )
        })
        state.fiber = yield* run.pipe(
          Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
          (effect) => deferredState.trackRun(instance, effect),
          Effect.tap((result) => instance.abandoned ? Effect.void : db(record(state, result))),
          Effect.onExit((exit) => {
            if (Exit.isSuccess(exit) && exit.value._tag === "Suspended") {
              // a suspended run's results are read again by its next run
              state.activities = new Map()
              state.deferreds = new Map()
              return Effect.void
            }
            // A run that died (the database went away) stays, and the poll runs it again (with backoff); one that
            // a completion preempted is run again by the wake.
            if (Exit.isFailure(exit) && !instance.abandoned) {
              if (!(Cause.hasInterruptsOnly(exit.cause) && instance.suspended)) {
                state.died = { at: Date.now(), times: (state.died?.times ?? 0) + 1 }
              }
              return Effect.void
            }
            return Effect.andThen(
              Scope.close(state.scope, Exit.void),
              Effect.suspend(() => {
                if (locals.get(executionId) === state && !instance.abandoned) locals.delete(executionId)
                return Exit.isSuccess(exit) && exit.value._tag === "Complete"
                  ? Deferred.succeed(state.done, void 0)
                  : Effect.void
              })
            )
          }),
          Effect.forkIn(entry.scope)
        )
      })

    /** Takes up an execution this runner now owns (it claimed it, or began it). */
    const adopt = (row: ExecutionRow) =>
      Effect.gen(function*() {
        const entry = workflows.get(row.workflow)
        if (entry === undefined) return
        const stale = locals.get(row.execution_id)
        if (stale !== undefined) {
          // a run of it goes on here: it is that one's
          if (stale.fiber !== undefined && stale.fiber.pollUnsafe() === undefined) return
          // one left from before this runner lost it (and now took it back): its state is not the row's
          stale.instance.abandoned = true
        }
        const payload = yield* Schema.decodeUnknownEffect(codecsOf(entry.workflow).payload)(row.payload)
        if (typeof payload !== "object" || payload === null) return yield* Effect.die("a workflow's payload is no object")
        const local: Local = {
          executionId: row.execution_id,
          workflow: entry.workflow,
          payload,
          parent: row.parent ?? undefined,
          execute: entry.execute,
          instance: WorkflowEngine.WorkflowInstance.initial(entry.workflow, row.execution_id),
          interrupted: row.interrupted,
          interruptedUnsafe: false,
          resumeRequested: undefined,
          fiber: undefined,
          done: Deferred.makeUnsafe(),
          scope: Scope.makeUnsafe(),
          activities: new Map(),
          deferreds: new Map(),
          waiting: [],
          events: undefined,
          writing: Semaphore.makeUnsafe(1),
          fresh: false,
          died: undefined,
          inbox: undefined
        }
        locals.set(row.execution_id, local)
        return local
      })

    /**
     * Wakes an execution: marks it (so that its owner, or any runner if it has none, runs it), and runs it here
     * at once if this runner owns it, or can claim it.
     */
    const wake = (executionId: string, mode: WakeMode, completed: ReadonlyArray<string> = []) =>
      Effect.gen(function*() {
        const local = locals.get(executionId)
        if (local !== undefined) {
          // a run that waits (live) on a deferred completed elsewhere is preempted, as `layerMemory` does
          for (const name of completed) {
            if (!local.deferreds.has(name)) yield* deferredState.deferredDone(executionId, name)
          }
          return yield* resume(executionId, mode)
        }
        if (runs) yield* claimOne(executionId)
      })

    /** Claims one execution that needs a run and has no live owner, and runs it. */
    const claimOne = (executionId: string) =>
      Effect.gen(function*() {
        const names = [...workflows.keys()]
        if (names.length === 0) return
        const rows = yield* db(sql<ExecutionRow>`
          UPDATE effect_agent_wf_executions e SET owner = ${runnerId}
          WHERE e.execution_id = ${executionId} AND e.result IS NULL AND e.workflow IN ${sql.in(names)}
            AND ${claimable}
          RETURNING ${sql.literal(rowColumns)}`)
        for (const row of rows) yield* takeUp(row)
      })

    const takeUp = (row: ExecutionRow) =>
      Effect.gen(function*() {
        const local = yield* db(adopt(row))
        if (local !== undefined) yield* resume(row.execution_id, "explicit")
      })

    /**
     * An execution (`e`) that needs a run and whose owner, if any, is gone; claimed only while this runner's own
     * lease holds (one whose lease ran out would take what others take back).
     */
    const claimable = sql`(e.owner IS NULL OR NOT EXISTS (
        SELECT 1 FROM effect_agent_wf_runners r WHERE r.runner_id = e.owner AND r.lease_until > now()))
      AND (NOT e.suspended OR e.resume OR (e.wake AND NOT e.failed))
      AND EXISTS (SELECT 1 FROM effect_agent_wf_runners me WHERE me.runner_id = ${runnerId} AND me.lease_until > now())`

    /** One poll: claims what needs a run, and wakes this runner's executions that were woken elsewhere. */
    const poll = Effect.gen(function*() {
      const names = [...workflows.keys()]
      if (names.length === 0) return
      const rows = yield* db(sql<
        ExecutionRow & {
          readonly claimed: boolean
          readonly resume: boolean
          readonly wake: boolean
          readonly deferreds: ReadonlyArray<string> | null
        }
      >`
        WITH candidates AS (
          SELECT e.execution_id FROM effect_agent_wf_executions e
          WHERE e.result IS NULL AND e.workflow IN ${sql.in(names)} AND e.owner IS DISTINCT FROM ${runnerId}
            AND ${claimable}
          LIMIT 64 FOR UPDATE SKIP LOCKED),
        claimed AS (
          UPDATE effect_agent_wf_executions e SET owner = ${runnerId} FROM candidates c
          WHERE e.execution_id = c.execution_id
          RETURNING ${sql.literal(rowColumns)}, e.resume, e.wake, true AS claimed, NULL::text[] AS deferreds)
        SELECT * FROM claimed
        UNION ALL
        SELECT ${sql.literal(rowColumns)}, e.resume, e.wake, false AS claimed,
          ARRAY(SELECT d.name FROM effect_agent_wf_deferreds d WHERE d.execution_id = e.execution_id) AS deferreds
        FROM effect_agent_wf_executions e
        WHERE e.owner = ${runnerId} AND e.result IS NULL AND (e.wake OR e.resume OR e.interrupted)`)
      for (const row of rows) {
        if (row.claimed) {
          yield* takeUp(row)
          continue
        }
        const local = locals.get(row.execution_id)
        if (local === undefined) {
          yield* takeUp(row)
          continue
        }
        if (row.interrupted && !local.interrupted) {
          local.interrupted = true
          yield* wake(row.execution_id, "explicit")
          continue
        }
        // (a run going on that waits for nothing: it reads the wake when it next suspends; the flag stays till then)
        if (!row.resume && local.fiber !== undefined && local.fiber.pollUnsafe() === undefined &&
          local.instance.awaitedDeferreds.size === 0) continue
        if (row.resume || row.wake) {
          yield* wake(row.execution_id, row.resume ? "explicit" : "automatic", row.deferreds ?? [])
        }
      }
      // runs that died are run again, backing off from 200 ms to 30 s
      const now = Date.now()
      for (const local of [...locals.values()]) {
        const died = local.died
        if (died === undefined || now < died.at + Math.min(30_000, 200 * 2 ** (died.times - 1))) continue
        local.died = undefined
        yield* resume(local.executionId, "explicit")
      }
    })

    /** Fires the clocks that are due (any runner's). */
    const fireClocks = Effect.gen(function*() {
      // the clock, its deferred's completion and the wake in one statement: a clock is never gone unfired
      const voidExit = yield* db(encodeExit(Exit.void))
      const woken = yield* db(sql<{ execution_id: string; deferred: string }>`
        WITH due AS (
          DELETE FROM effect_agent_wf_clocks WHERE wake_at <= now() RETURNING execution_id, deferred),
        kept AS (
          INSERT INTO effect_agent_wf_deferreds (execution_id, name, exit)
          SELECT execution_id, deferred, ${voidExit} FROM due ON CONFLICT DO NOTHING RETURNING execution_id, name),
        woken AS (
          UPDATE effect_agent_wf_executions SET wake = true
          WHERE execution_id IN (SELECT execution_id FROM kept) AND result IS NULL)
        SELECT execution_id, name AS deferred FROM kept`)
      for (const clock of woken) {
        const local = locals.get(clock.execution_id)
        if (local !== undefined) local.deferreds.set(clock.deferred, Exit.void)
        yield* wake(clock.execution_id, "automatic", [clock.deferred])
      }
    })

    /** Keeps a deferred's first completion, and wakes its execution. */
    const complete = (executionId: string, name: string, exit: Exit.Exit<unknown, unknown>) =>
      Effect.gen(function*() {
        const text = yield* db(encodeExit(exit))
        const current = yield* Effect.serviceOption(WorkflowEngine.WorkflowInstance)
        // completed by the execution's own run (it raced waits): that run knows, and its row needs no wake
        const own = Option.isSome(current) && current.value.executionId === executionId
        const rows = own
          ? yield* db(sql`INSERT INTO effect_agent_wf_deferreds (execution_id, name, exit)
              VALUES (${executionId}, ${name}, ${text}) ON CONFLICT DO NOTHING RETURNING 1`)
          : yield* db(sql`
              WITH kept AS (
                INSERT INTO effect_agent_wf_deferreds (execution_id, name, exit)
                VALUES (${executionId}, ${name}, ${text}) ON CONFLICT DO NOTHING RETURNING execution_id)
              UPDATE effect_agent_wf_executions SET wake = true
              WHERE execution_id IN (SELECT execution_id FROM kept) AND result IS NULL RETURNING 1`)
        if (rows.length === 0) return
        const local = locals.get(executionId)
        if (local !== undefined) {
          local.deferreds.set(name, exit)
          yield* deferredState.deferredDone(executionId, name)
          // A run cannot wait for its own end: the engine's scope owns the wake.
          return yield* own
            ? Effect.asVoid(Effect.forkIn(resume(executionId, "automatic"), engineScope))
            : resume(executionId, "automatic")
        }
        if (runs) yield* claimOne(executionId)
      })

    const readRow = (executionId: string) =>
      Effect.map(
        db(sql<ExecutionRow>`SELECT ${sql.literal(rowColumns)} FROM effect_agent_wf_executions e
          WHERE e.execution_id = ${executionId}`),
        (rows) => rows[0]
      )

    /** The result of an execution as its row says: `None` while it runs. */
    const resultOf = (workflow: Workflow.Any, row: ExecutionRow | undefined) =>
      Effect.gen(function*() {
        if (row === undefined) return Option.none<Workflow.Result<unknown, unknown>>()
        if (row.result !== null) {
          const result = yield* db(Schema.decodeUnknownEffect(codecsOf(workflow).result)(row.result))
          if (!Workflow.isResult(result)) return yield* Effect.die("a workflow's stored result is no result")
          return Option.some(result)
        }
        if (row.suspended) {
          return Option.some<Workflow.Result<unknown, unknown>>(
            new Workflow.Suspended(row.failed ? { failed: true } : {})
          )
        }
        return Option.none<Workflow.Result<unknown, unknown>>()
      })

    /**
     * Interrupts an execution, from any process: its owner (this runner, or whichever polls next) runs it again
     * interrupted. `unsafe`: a run going on here is interrupted at once, and a completing replay ends interrupted
     * too (`layerMemory`'s `interruptUnsafe`).
     */
    const interrupt = (executionId: string, unsafe: boolean) =>
      Effect.gen(function*() {
        yield* db(sql`UPDATE effect_agent_wf_executions SET interrupted = true, resume = true
          WHERE execution_id = ${executionId} AND result IS NULL`)
        const local = locals.get(executionId)
        if (local === undefined) return yield* runs ? claimOne(executionId) : Effect.void
        local.interrupted = true
        if (unsafe) {
          local.interruptedUnsafe = true
          if (local.fiber !== undefined) yield* Fiber.interrupt(local.fiber)
        }
        yield* resume(executionId, "explicit")
      })

    /** `execute`, of the encoded engine: a result, unless `discard`. */
    function execute<const Discard extends boolean>(
      workflow: Workflow.Any,
      opts: ExecuteOptions<Discard>
    ): Effect.Effect<Discard extends true ? void : Workflow.Result<unknown, unknown>>
    function execute(
      workflow: Workflow.Any,
      opts: ExecuteOptions<boolean>
    ): Effect.Effect<void | Workflow.Result<unknown, unknown>> {
      return Effect.gen(function*() {
        const entry = workflows.get(workflow._tag)
        if (entry === undefined) {
          return yield* Effect.die(`Workflow ${workflow._tag} is not registered`)
        }
        let local = locals.get(opts.executionId)
        if (local === undefined) {
          const payload = yield* db(Schema.encodeUnknownEffect(codecsOf(workflow).payload)(opts.payload))
          const parent = opts.detached === true ? null : opts.parent?.executionId ?? null
          const inserted = yield* db(sql<ExecutionRow>`
            INSERT INTO effect_agent_wf_executions AS e (execution_id, workflow, key, payload, parent, owner)
            VALUES (${opts.executionId}, ${workflow._tag}, ${workflow.idempotencyKey(opts.payload)}, ${payload},
              ${parent}, ${runs ? runnerId : null})
            ON CONFLICT (execution_id) DO NOTHING
            RETURNING ${sql.literal(rowColumns)}`)
          if (inserted[0] !== undefined && runs) {
            local = yield* db(adopt(inserted[0]))
            if (local !== undefined) {
              local.fresh = true
              yield* resume(opts.executionId, "explicit")
            }
          } else if (runs) {
            // begun before: run it here if it needs a run and its owner is gone (a restart)
            yield* claimOne(opts.executionId)
            local = locals.get(opts.executionId)
          }
        }
        if (opts.discard) return
        if (local === undefined || local.fiber === undefined) {
          // Another runner's (or none yet): its row says where it is; the caller asks again while it runs.
          const found = yield* resultOf(workflow, yield* readRow(opts.executionId))
          return Option.getOrElse(found, () => new Workflow.Suspended({}))
        }
        const instance = local.instance
        const exit = yield* Fiber.await(local.fiber)
        if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) && (instance.suspended || instance.abandoned)) {
          // A completion preempted the run (or it moved to another runner): the caller asks again.
          return new Workflow.Suspended({})
        }
        return yield* exit
      })
    }

    const engine = WorkflowEngine.makeUnsafe({
      register: Effect.fnUntraced(function*(workflow, execute) {
        workflows.set(workflow._tag, { workflow, execute, scope: yield* Effect.scope })
      }),
      execute,
      awaitComplete: (workflow, executionId) =>
        Effect.suspend(() => {
          const local = locals.get(executionId)
          if (local !== undefined) return Deferred.await(local.done)
          // Another runner's: its row, read until it has a result.
          return readRow(executionId).pipe(
            Effect.repeat({ until: (row) => row === undefined || row.result !== null, schedule: Schedule.spaced(pollEvery) }),
            Effect.asVoid
          )
        }),
      interrupt: (_workflow, executionId) => interrupt(executionId, false),
      interruptUnsafe: (_workflow, executionId) => interrupt(executionId, true),
      resume: (_workflow, executionId) =>
        Effect.gen(function*() {
          yield* db(sql`UPDATE effect_agent_wf_executions SET resume = true
            WHERE execution_id = ${executionId} AND result IS NULL`)
          if (locals.has(executionId)) return yield* resume(executionId, "explicit")
          if (runs) yield* claimOne(executionId)
        }),
      activityExecute: Effect.fnUntraced(function*(activity, attempt) {
        const instance = yield* WorkflowEngine.WorkflowInstance
        const local = locals.get(instance.executionId)
        // (a run that lost its execution stops at its next step)
        if (local === undefined) return yield* Effect.interrupt
        const key = `${activity.name}/${attempt}`
        const stored = local.activities.get(key)
        if (stored !== undefined) return new Workflow.Complete({ exit: stored })
        // A pending interrupt replays only to rebuild compensations: it runs no new activity.
        if (local.interrupted && !instance.interrupted) return new Workflow.Suspended({})
        const activityInstance = WorkflowEngine.WorkflowInstance.initial(instance.workflow, instance.executionId)
        activityInstance.interrupted = instance.interrupted
        let mayWait = false
        // what published while it ran: a result whose events went out may not wait (a replay would make another)
        let publishedLive = false
        const commit = Commit.of({
          database: sql,
          publish: (sessionId, entries) => {
            if (entries.length > 0) {
              handOver(local, { sessionId, entries })
              publishedLive = true
            }
            // always fenced (with nothing to write, the fence alone): what follows acts as this runner's
            return Effect.flatMap(db(write(local, [], { fence: true })), (held) => fenced(local, held))
          },
          withResult: (sessionId, entries) => {
            if (entries.length > 0) handOver(local, { sessionId, entries })
          },
          mayWait: () => {
            mayWait = true
          },
          inboxHead: (sessionId) => local.inbox?.sessionId === sessionId ? local.inbox.head : undefined
        })
        const result = yield* activity.executeEncoded.pipe(
          Workflow.intoResult,
          Effect.provideService(WorkflowEngine.WorkflowInstance, activityInstance),
          Effect.provideService(Commit, commit)
        )
        if (result._tag === "Suspended") return result
        const exit = yield* db(encodeExit(result.exit))
        const done: Waiting = { name: activity.name, attempt, exit }
        if (mayWait && !publishedLive) local.waiting.push(done)
        else yield* fenced(local, yield* db(write(local, [done])))
        local.activities.set(key, result.exit)
        return result
      }),
      poll: (workflow, executionId) =>
        Effect.gen(function*() {
          const local = locals.get(executionId)
          const exit = local?.fiber?.pollUnsafe()
          // a run going on here (its row may say it is suspended a while yet), or ended: else the row says
          if (local !== undefined && local.fiber !== undefined && exit === undefined) return Option.none()
          if (exit !== undefined && exit._tag === "Success" && exit.value._tag === "Complete") {
            return Option.some(exit.value)
          }
          return yield* resultOf(workflow, yield* readRow(executionId))
        }),
      deferredResult: Effect.fnUntraced(function*(deferred) {
        const instance = yield* WorkflowEngine.WorkflowInstance
        const local = locals.get(instance.executionId)
        return Option.fromNullishOr(local?.deferreds.get(deferred.name))
      }),
      deferredDone: (opts) => complete(opts.executionId, opts.deferredName, opts.exit),
      scheduleClock: (_workflow, opts) =>
        Effect.gen(function*() {
          const ms = Duration.toMillis(opts.clock.duration)
          yield* db(sql`INSERT INTO effect_agent_wf_clocks (execution_id, name, deferred, wake_at)
            VALUES (${opts.executionId}, ${opts.clock.name}, ${opts.clock.deferred.name},
              now() + ${ms} * interval '1 millisecond')
            ON CONFLICT DO NOTHING`)
          // This runner fires it on time; any runner's poll does once it is due, if this one is gone.
          yield* Effect.sleep(opts.clock.duration).pipe(
            Effect.andThen(fireClocks),
            FiberMap.run(timers, `${opts.executionId}/${opts.clock.name}`, { onlyIfMissing: true })
          )
        })
    })

    // Closing: this runner's runs are given up (no finalizer runs), and its executions handed back for another
    // runner (or its next start) to take up. (Added first, it runs last: after the poll and the lease stop.)
    yield* Scope.addFinalizer(
      engineScope,
      Effect.gen(function*() {
        const owned = [...locals.values()]
        locals.clear()
        for (const local of owned) {
          local.instance.abandoned = true
          if (local.fiber !== undefined) yield* Fiber.interrupt(local.fiber)
        }
        yield* Effect.ignore(sql`UPDATE effect_agent_wf_executions SET owner = NULL
          WHERE owner = ${runnerId} AND result IS NULL`)
        yield* Effect.ignore(sql`DELETE FROM effect_agent_wf_runners WHERE runner_id = ${runnerId}`)
      })
    )
    /** A pass that fails (the database is away) is logged, and the next one is made on time. */
    const logged = (what: string) => <A>(effect: Effect.Effect<A>) =>
      effect.pipe(Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : Effect.logWarning(`effect-agent: the SQL workflow engine's ${what} failed`, cause)
      ))
    yield* db(heartbeat)
    yield* Effect.forkIn(
      Effect.repeat(logged("lease renewal")(db(heartbeat)), Schedule.spaced(Duration.millis(leaseMs / 3))),
      engineScope
    )
    if (runs) {
      let polls = 0
      const passes = Effect.gen(function*() {
        yield* poll
        // clocks due are looked for every fifth poll: the runner that set one fires it on time
        if (polls++ % 5 === 0) yield* fireClocks
      })
      yield* Effect.forkIn(Effect.repeat(logged("poll")(passes), Schedule.spaced(pollEvery)), engineScope)
    }
    return engine
  })
