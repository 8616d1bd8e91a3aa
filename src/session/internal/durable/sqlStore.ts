/**
 * The durable session store on PostgreSQL (through `effect/sql`'s
 * `SqlClient`, e.g. `@effect/sql-pg`): the same database as the cluster's
 * message storage. Appends of one session are serialized by a transaction
 * lock on the session (so `seq` grows in commit order: a reader past a
 * watermark never misses a row committed late); so are a cancel's append and
 * the record of an idle wait (a cancel never lands after a session recorded
 * its wait, where its idle take would not drop it).
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql"
import type { Statement } from "effect/sql"
import * as AgentEvent from "../../../AgentEvent.ts"
import * as Message from "../../../Message.ts"
import * as Steering from "../../../Steering.ts"
import {
  Answer,
  cancelMessage,
  type Claimed,
  Decision,
  inboxFull,
  type InboxKind,
  type Published,
  Question,
  type Service,
  type SessionRecord,
  StoreError,
  workflowName
} from "./store.ts"
import type { Entry } from "./outbox.ts"

const MessageText = Schema.fromJsonString(Schema.toCodecJson(Message.Message))
const EventText = Schema.fromJsonString(AgentEvent.AgentEventJson)
const encodeMessage = Schema.encodeEffect(MessageText)
const decodeMessage = Schema.decodeUnknownEffect(MessageText)
const encodeEvent = Schema.encodeEffect(EventText)
const decodeEvent = Schema.decodeUnknownEffect(EventText)
const DecisionText = Schema.fromJsonString(Decision)
const encodeDecision = Schema.encodeEffect(DecisionText)
const decodeDecision = Schema.decodeUnknownEffect(DecisionText)

const QuestionText = Schema.fromJsonString(Question)
const encodeQuestion = Schema.encodeEffect(QuestionText)
const decodeQuestion = Schema.decodeUnknownEffect(QuestionText)
const AnswerText = Schema.fromJsonString(Answer)
const encodeAnswer = Schema.encodeEffect(AnswerText)
const decodeAnswer = Schema.decodeUnknownEffect(AnswerText)

const failed = (operation: string) => (error: { readonly message: string }) =>
  new StoreError({ operation, detail: error.message })

/**
 * How long an operation may take. A query on a connection the server dropped
 * (a restart) can wait for an answer that never comes: the activity waiting
 * on it fails instead, and the session suspends until it is resumed.
 */
const operationTimeout = Duration.seconds(10)

const bounded = (operation: string) => <A, R>(effect: Effect.Effect<A, StoreError, R>) =>
  Effect.timeoutOrElse(effect, {
    duration: operationTimeout,
    orElse: () => Effect.fail(new StoreError({ operation, detail: "timed out after 10 seconds" }))
  })

/**
 * Creates the store's tables when they are missing: a deploy step (run it
 * once, before the runners start), also safe to run again.
 *
 * @internal
 */
export const migrate: Effect.Effect<void, StoreError, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_sessions (
    session_id text PRIMARY KEY, status text NOT NULL, updated_at bigint NOT NULL)`
  // (added later: a store made by an older version gains it)
  yield* sql`ALTER TABLE effect_agent_sessions ADD COLUMN IF NOT EXISTS payload text`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_inbox (
    session_id text NOT NULL, seq integer NOT NULL, kind text NOT NULL, message text NOT NULL,
    PRIMARY KEY (session_id, seq))`
  yield* sql`ALTER TABLE effect_agent_inbox ADD COLUMN IF NOT EXISTS size integer NOT NULL DEFAULT 0`
  // The next place in each session's inbox (its read messages are dropped, so MAX(seq) no longer says it). A
  // store made by an older version starts it after what its inbox holds.
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_inbox_next (session_id text PRIMARY KEY, seq integer NOT NULL)`
  yield* sql`ALTER TABLE effect_agent_inbox_next ADD COLUMN IF NOT EXISTS read_steering integer NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE effect_agent_inbox_next ADD COLUMN IF NOT EXISTS read_followup integer NOT NULL DEFAULT 0`
  yield* sql`INSERT INTO effect_agent_inbox_next (session_id, seq)
    SELECT session_id, MAX(seq) FROM effect_agent_inbox GROUP BY session_id
    ON CONFLICT (session_id) DO NOTHING`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_waits (session_id text PRIMARY KEY, wait integer NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_intents (
    session_id text NOT NULL, key text NOT NULL, PRIMARY KEY (session_id, key))`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_decisions (
    session_id text NOT NULL, key text NOT NULL, decision text NOT NULL, PRIMARY KEY (session_id, key))`
  // A supervised run's questions: `answer` is null while one waits, `closed` once its run ended unanswered.
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_questions (
    session_id text NOT NULL, key text NOT NULL, n bigserial, question text NOT NULL, answer text,
    closed boolean NOT NULL DEFAULT false, PRIMARY KEY (session_id, key))`
  yield* sql`CREATE TABLE IF NOT EXISTS effect_agent_events (
    session_id text NOT NULL, seq integer NOT NULL, id text NOT NULL, event text NOT NULL,
    PRIMARY KEY (session_id, seq), UNIQUE (session_id, id))`
}).pipe(Effect.mapError(failed("migrate")))

/**
 * A batch of events as one JSON value, `[[id, event], …]` (one parameter whatever its length), or `undefined`
 * when there is none.
 *
 * @internal
 */
export const encodeBatch = (
  entries: ReadonlyArray<Entry>
): Effect.Effect<string | undefined, Schema.SchemaError> =>
  Effect.map(
    Effect.forEach(entries, (entry) => Effect.map(encodeEvent(entry.event), (event) => [entry.id, event] as const)),
    (encoded) => encoded.length === 0 ? undefined : JSON.stringify(encoded)
  )

/**
 * The insert of a batch (`encodeBatch`): the events not kept yet, by id, numbered after the session's last in the
 * batch's order. It writes once for each row of `gate` (a relation, e.g. `(SELECT 1) AS gate`, or a fence that
 * holds one row when the write may go ahead, none when not), so that it can be a part of a larger statement.
 *
 * @internal
 */
export const insertEvents = (sql: SqlClient.SqlClient, sessionId: string, batch: string, gate: Statement.Fragment) =>
  sql`INSERT INTO effect_agent_events (session_id, seq, id, event)
    SELECT ${sessionId}, last.seq + row_number() OVER (ORDER BY batch.n), batch.entry->>0, batch.entry->>1
    FROM ${gate}
    CROSS JOIN jsonb_array_elements(${batch}::jsonb) WITH ORDINALITY AS batch(entry, n)
    CROSS JOIN (SELECT COALESCE(MAX(seq), 0) AS seq FROM effect_agent_events WHERE session_id = ${sessionId}) last
    WHERE NOT EXISTS (
      SELECT 1 FROM effect_agent_events kept WHERE kept.session_id = ${sessionId} AND kept.id = batch.entry->>0)
    ON CONFLICT (session_id, id) DO NOTHING`

/** A row of `effect_agent_sessions` as the store's record. */
const recordOf = (
  row: { readonly session_id: string; readonly status: string; readonly updated_at: string | number; readonly payload: string | null }
): SessionRecord => ({
  sessionId: row.session_id,
  status: row.status === "finished" ? "finished" : row.status === "submitted" ? "submitted" : "running",
  updatedAt: Number(row.updated_at),
  ...(row.status === "submitted" && row.payload !== null ? { payload: row.payload } : {})
})

/**
 * The store on a `SqlClient` (PostgreSQL).
 *
 * @internal
 */
export const make: Effect.Effect<Service, never, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  /** Serializes the appends of one session until the transaction ends. */
  const lockSession = (sessionId: string) => sql`SELECT pg_advisory_xact_lock(hashtext(${sessionId}))`
  /** Inserts a message at the session's next place in the inbox (under its lock): answers the place. */
  const insertInbox = (sessionId: string, kind: InboxKind, text: string, size: number) =>
    Effect.gen(function*() {
      const [next] = yield* sql<{ seq: string | number }>`
        INSERT INTO effect_agent_inbox_next (session_id, seq) VALUES (${sessionId}, 1)
        ON CONFLICT (session_id) DO UPDATE SET seq = effect_agent_inbox_next.seq + 1
        RETURNING seq`
      const seq = Number(next!.seq)
      yield* sql`INSERT INTO effect_agent_inbox (session_id, seq, kind, message, size)
        VALUES (${sessionId}, ${seq}, ${kind}, ${text}, ${size})`
      return seq
    })
  const service: Service = {
    submit: (sessionId, at, payload) =>
      sql`INSERT INTO effect_agent_sessions (session_id, status, updated_at, payload)
          VALUES (${sessionId}, 'submitted', ${at}, ${payload})
          ON CONFLICT (session_id) DO NOTHING`.pipe(
        Effect.asVoid,
        Effect.mapError(failed("submit")),
        bounded("submit")
      ),
    register: (sessionId, at) =>
      sql`INSERT INTO effect_agent_sessions (session_id, status, updated_at) VALUES (${sessionId}, 'running', ${at})
          ON CONFLICT (session_id) DO UPDATE SET status = 'running', updated_at = ${at}, payload = NULL
          WHERE effect_agent_sessions.status = 'submitted'`.pipe(
        Effect.asVoid,
        Effect.mapError(failed("register")),
        bounded("register")
      ),
    finish: (sessionId, at) =>
      sql`INSERT INTO effect_agent_sessions (session_id, status, updated_at) VALUES (${sessionId}, 'finished', ${at})
          ON CONFLICT (session_id) DO UPDATE SET status = 'finished', updated_at = ${at}, payload = NULL`.pipe(
        Effect.asVoid,
        Effect.mapError(failed("finish")), bounded("finish")
      ),
    sessions: sql<{ session_id: string; status: string; updated_at: string | number; payload: string | null }>`
      SELECT session_id, status, updated_at, payload FROM effect_agent_sessions ORDER BY session_id`.pipe(
      Effect.map((rows) => rows.map(recordOf)),
      Effect.mapError(failed("sessions")), bounded("sessions")
    ),
    session: (sessionId) =>
      sql<{ session_id: string; status: string; updated_at: string | number; payload: string | null }>`
        SELECT session_id, status, updated_at, payload FROM effect_agent_sessions WHERE session_id = ${sessionId}`.pipe(
        Effect.map((rows) => rows.length === 0 ? undefined : recordOf(rows[0]!)),
        Effect.mapError(failed("session")),
        bounded("session")
      ),
    appendInbox: (sessionId, kind, message) =>
      Effect.gen(function*() {
        const text = yield* encodeMessage(message)
        const size = Steering.sizeOf(message)
        return yield* sql.withTransaction(Effect.gen(function*() {
          yield* lockSession(sessionId)
          // What waits unread (after the last place read of its kind), and the next place (kept in
          // `effect_agent_inbox_next`: read messages are dropped at the next read of their kind). A cancel is
          // bounded apart (one at most).
          const [waiting] = yield* sql<{ queued: string | number; bytes: string | number | null }>`
            SELECT count(*) AS queued, sum(i.size) AS bytes FROM effect_agent_inbox i
            LEFT JOIN effect_agent_inbox_next n ON n.session_id = i.session_id
            WHERE i.session_id = ${sessionId} AND i.kind <> 'cancel'
              AND i.seq > COALESCE(CASE WHEN i.kind = 'steering' THEN n.read_steering ELSE n.read_followup END, 0)`
          const full = inboxFull(kind, Number(waiting?.queued ?? 0), Number(waiting?.bytes ?? 0), size)
          if (full !== undefined) return full
          return yield* insertInbox(sessionId, kind, text, size)
        }))
      }).pipe(
        Effect.mapError(failed("appendInbox")),
        bounded("appendInbox"),
        // refused: nothing was kept (the transaction wrote nothing)
        Effect.flatMap((seq) => typeof seq === "number" ? Effect.succeed(seq) : Effect.fail(seq))
      ),
    appendCancel: (sessionId, reason) =>
      Effect.gen(function*() {
        const message = cancelMessage(reason)
        const text = yield* encodeMessage(message)
        return yield* sql.withTransaction(Effect.gen(function*() {
          // Under the session's lock, which `setWaiting` takes too: read after it, the wait and the status are
          // those committed before this append, and no wait is recorded until it commits.
          yield* lockSession(sessionId)
          const [session] = yield* sql<{ status: string }>`
            SELECT status FROM effect_agent_sessions WHERE session_id = ${sessionId}`
          if (session === undefined || session.status === "finished") return false
          const waits = yield* sql`SELECT 1 FROM effect_agent_waits WHERE session_id = ${sessionId}`
          if (waits.length > 0) return false
          const held = yield* sql`SELECT 1 FROM effect_agent_inbox WHERE session_id = ${sessionId} AND kind = 'cancel'`
          if (held.length > 0) return true
          yield* insertInbox(sessionId, "cancel", text, Steering.sizeOf(message))
          return true
        }))
      }).pipe(Effect.mapError(failed("appendCancel")), bounded("appendCancel")),
    readInbox: (sessionId, kind: InboxKind, after) =>
      Effect.gen(function*() {
        // What the session has read of this kind (recorded by the activities that read it) leaves the inbox, in
        // the statement that reads the rest: one round trip for a read, which each turn makes (the statement's
        // two parts see the same rows, and take apart ones).
        const rows = yield* sql<{ seq: number; message: string }>`
          WITH dropped AS (
            DELETE FROM effect_agent_inbox WHERE session_id = ${sessionId} AND kind = ${kind} AND seq <= ${after}
          )
          SELECT seq, message FROM effect_agent_inbox
          WHERE session_id = ${sessionId} AND kind = ${kind} AND seq > ${after} ORDER BY seq`
        // What was read no longer waits (for the bound), though it stays until the next read. Apart from the read
        // (no transaction around the two): a read is kept by the activity that made it, and the mark only grows.
        const last = rows.length === 0 ? undefined : Number(rows[rows.length - 1]!.seq)
        if (last !== undefined && kind !== "cancel") {
          yield* kind === "steering"
            ? sql`UPDATE effect_agent_inbox_next SET read_steering = GREATEST(read_steering, ${last})
                WHERE session_id = ${sessionId}`
            : sql`UPDATE effect_agent_inbox_next SET read_followup = GREATEST(read_followup, ${last})
                WHERE session_id = ${sessionId}`
        }
        return rows
      }).pipe(
        Effect.flatMap((rows) =>
          Effect.forEach(rows, (row) =>
            Effect.map(decodeMessage(row.message), (message) => ({ seq: Number(row.seq), message })))
        ),
        Effect.mapError(failed("readInbox")), bounded("readInbox")
      ),
    readSteering: (sessionId, after) =>
      Effect.gen(function*() {
        // `readInbox` of the cancels and of the steering, in one statement (one round trip), with the inbox's head
        const rows = yield* sql<{ seq: number; kind: string; message: string }>`
          WITH dropped AS (
            DELETE FROM effect_agent_inbox WHERE session_id = ${sessionId}
              AND ((kind = 'cancel' AND seq <= ${after.cancel}) OR (kind = 'steering' AND seq <= ${after.steering}))
          )
          SELECT seq, kind, message FROM (
            SELECT seq, kind, message FROM effect_agent_inbox
            WHERE session_id = ${sessionId}
              AND ((kind = 'cancel' AND seq > ${after.cancel}) OR (kind = 'steering' AND seq > ${after.steering}))
            UNION ALL
            SELECT COALESCE((SELECT seq FROM effect_agent_inbox_next WHERE session_id = ${sessionId}), 0), 'head', ''
          ) read ORDER BY seq`
        const head = Number(rows.find((row) => row.kind === "head")?.seq ?? 0)
        const decode = (kind: string) =>
          Effect.forEach(rows.filter((row) => row.kind === kind), (row) =>
            Effect.map(decodeMessage(row.message), (message) => ({ seq: Number(row.seq), message })))
        const cancels = yield* decode("cancel")
        if (cancels.length > 0) return { cancels, steering: [], head }
        const steering = yield* decode("steering")
        const last = steering.at(-1)?.seq
        if (last !== undefined) {
          yield* sql`UPDATE effect_agent_inbox_next SET read_steering = GREATEST(read_steering, ${last})
            WHERE session_id = ${sessionId}`
        }
        return { cancels, steering, head }
      }).pipe(Effect.mapError(failed("readSteering")), bounded("readSteering")),
    setWaiting: (sessionId, wait) =>
      (wait === undefined
        ? sql`DELETE FROM effect_agent_waits WHERE session_id = ${sessionId}`
        // under the session's lock: a cancel being appended commits first (the idle take then reads it)
        : sql.withTransaction(Effect.andThen(
          lockSession(sessionId),
          sql`INSERT INTO effect_agent_waits (session_id, wait) VALUES (${sessionId}, ${wait})
              ON CONFLICT (session_id) DO UPDATE SET wait = ${wait}`
        ))).pipe(
          Effect.asVoid,
          Effect.mapError(failed("setWaiting")), bounded("setWaiting")
        ),
    waiting: (sessionId) =>
      sql<{ wait: number }>`SELECT wait FROM effect_agent_waits WHERE session_id = ${sessionId}`.pipe(
        Effect.map((rows) => rows.length === 0 ? undefined : Number(rows[0]!.wait)),
        Effect.mapError(failed("waiting")), bounded("waiting")
      ),
    claimIntent: (sessionId, key) =>
      sql<{ key: string }>`INSERT INTO effect_agent_intents (session_id, key) VALUES (${sessionId}, ${key})
          ON CONFLICT DO NOTHING RETURNING key`.pipe(
        Effect.map((rows) => rows.length === 1),
        Effect.mapError(failed("claimIntent")), bounded("claimIntent")
      ),
    claimDecision: (sessionId, key, decision) =>
      Effect.gen(function*() {
        const text = yield* encodeDecision(decision)
        // The primary key makes the first insert of a key the one kept; a later claim reads what it kept. (A
        // row is never deleted but with its session, so the select finds the row the insert met.)
        const inserted = yield* sql<{ key: string }>`
          INSERT INTO effect_agent_decisions (session_id, key, decision) VALUES (${sessionId}, ${key}, ${text})
          ON CONFLICT DO NOTHING RETURNING key`
        if (inserted.length === 1) return { claimed: true, decision } satisfies Claimed
        const rows = yield* sql<{ decision: string }>`
          SELECT decision FROM effect_agent_decisions WHERE session_id = ${sessionId} AND key = ${key}`
        if (rows.length === 0) return yield* Effect.fail({ message: "the session was forgotten meanwhile" })
        return { claimed: false, decision: yield* decodeDecision(rows[0]!.decision) } satisfies Claimed
      }).pipe(Effect.mapError(failed("claimDecision")), bounded("claimDecision")),
    ask: (sessionId, key, question) =>
      Effect.flatMap(encodeQuestion(question), (text) =>
        sql`INSERT INTO effect_agent_questions (session_id, key, question) VALUES (${sessionId}, ${key}, ${text})
          ON CONFLICT DO NOTHING`).pipe(Effect.asVoid, Effect.mapError(failed("ask")), bounded("ask")),
    questions: (sessionId) =>
      sql<{ key: string; question: string }>`SELECT key, question FROM effect_agent_questions
          WHERE session_id = ${sessionId} AND answer IS NULL AND NOT closed ORDER BY n`.pipe(
        Effect.flatMap((rows) =>
          Effect.forEach(rows, (row) => Effect.map(decodeQuestion(row.question), (question) => ({ key: row.key, question })))
        ),
        Effect.mapError(failed("questions")), bounded("questions")
      ),
    answer: (sessionId, key, answer) =>
      Effect.gen(function*() {
        const text = yield* encodeAnswer(answer)
        // One statement: of two answers at once, the row lock lets one set it and the other find it set.
        const updated = yield* sql<{ key: string }>`UPDATE effect_agent_questions SET answer = ${text}
          WHERE session_id = ${sessionId} AND key = ${key} AND answer IS NULL AND NOT closed RETURNING key`
        if (updated.length === 1) return { claimed: true, answer }
        const rows = yield* sql<{ answer: string | null }>`SELECT answer FROM effect_agent_questions
          WHERE session_id = ${sessionId} AND key = ${key}`
        const kept = rows[0]?.answer
        if (kept === undefined || kept === null) return undefined
        return { claimed: false, answer: yield* decodeAnswer(kept) }
      }).pipe(Effect.mapError(failed("answer")), bounded("answer")),
    closeQuestions: (sessionId) =>
      sql`UPDATE effect_agent_questions SET closed = true WHERE session_id = ${sessionId} AND answer IS NULL
          AND NOT closed`.pipe(Effect.asVoid, Effect.mapError(failed("closeQuestions")), bounded("closeQuestions")),
    publish: (sessionId, entries) =>
      Effect.gen(function*() {
        const batch = yield* encodeBatch(entries)
        if (batch === undefined) return
        // One statement for the batch, committed alone (one round trip, no lock). Two publishers of one session
        // that read the same last place collide on (session_id, seq): the later one tries again, reading the
        // other's.
        yield* sql`${insertEvents(sql, sessionId, batch, sql.literal("(SELECT 1) AS gate"))}`.pipe(
          Effect.retry({ times: 50, while: (error) => error.reason._tag === "UniqueViolation" })
        )
      }).pipe(Effect.mapError(failed("publish")), bounded("publish")),
    events: (sessionId, after) =>
      sql<{ seq: number; id: string; event: string }>`
        SELECT seq, id, event FROM effect_agent_events
        WHERE session_id = ${sessionId} AND seq > ${after} ORDER BY seq`.pipe(
        Effect.flatMap((rows) =>
          Effect.forEach(rows, (row) =>
            Effect.map(decodeEvent(row.event), (event): Published => ({ seq: Number(row.seq), id: row.id, event })))
        ),
        Effect.mapError(failed("events")), bounded("events")
      ),
    forget: (sessionId) =>
      sql.withTransaction(Effect.gen(function*() {
        yield* sql`DELETE FROM effect_agent_inbox WHERE session_id = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_inbox_next WHERE session_id = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_waits WHERE session_id = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_intents WHERE session_id = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_decisions WHERE session_id = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_questions WHERE session_id = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_events WHERE session_id = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_sessions WHERE session_id = ${sessionId}`
        // the rows of the session's workflow on the SQL engine (`DurableSession.layerSqlEngine`), if it ran there
        const executions = sql`SELECT execution_id FROM effect_agent_wf_executions
          WHERE workflow = ${workflowName} AND key = ${sessionId}`
        yield* sql`DELETE FROM effect_agent_wf_activities WHERE execution_id IN (${executions})`
        yield* sql`DELETE FROM effect_agent_wf_deferreds WHERE execution_id IN (${executions})`
        yield* sql`DELETE FROM effect_agent_wf_clocks WHERE execution_id IN (${executions})`
        yield* sql`DELETE FROM effect_agent_wf_executions WHERE workflow = ${workflowName} AND key = ${sessionId}`
      })).pipe(Effect.mapError(failed("forget")), bounded("forget")),
    database: sql
  }
  return service
})
