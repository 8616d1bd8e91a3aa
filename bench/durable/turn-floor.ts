/**
 * The floor of a durable turn on PostgreSQL through `@effect/sql-pg` (issue 33): what a turn costs when an
 * engine of our own keeps each activity's result and the events it published in one fenced transaction, with
 * no workflow machinery around it. It measures the writes such an engine would make, and nothing else, so that
 * the goal (at most 0.5× LangGraph + PostgresSaver per turn, at most two writing transactions) can be checked
 * against a floor before the engine is built.
 *
 * A turn here is the bench's workload turn (`workload.ts`: one model call, one tool call): two transactions,
 * one when the model call ends and one when the tool call ends. Each is
 *
 *   BEGIN
 *   UPDATE session SET seq = seq + n … WHERE owner = me AND lease_until > now() RETURNING seq   -- the fence
 *   INSERT the activity's result (the model's reply, or the tool's result)
 *   INSERT the events it published, one multi-row statement
 *   COMMIT
 *
 * With `--one`, a turn is one transaction (both results and all its events: only an engine that may run the
 * tool again after a crash could do that). With `--pg`, the same statements go through `pg` itself (the
 * driver `@effect/sql-pg` is built on), to see what the Effect client adds per statement. It prints per turn:
 * the client's CPU, PostgreSQL's CPU, the wall time, the writing transactions and the statements.
 *
 *   node --conditions=effect-agent-source bench/durable/turn-floor.ts [TURNS] [--one] [--pg]
 */
import { PgClient } from "@effect/sql-pg"
import { Array as Arr, Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import pg from "pg"
import * as Postgres from "./postgres.ts"

const turns = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? "200")
const one = process.argv.includes("--one")
const raw = process.argv.includes("--pg")

/** An event as the outbox keeps it: about the size of the workload's (a delta, a tool call, a turn's end). */
const event = (turn: number, i: number) =>
  JSON.stringify({ _tag: i === 0 ? "TurnStart" : "TextDelta", turn, index: i, text: "x".repeat(120), at: Date.now() })
/** A model reply as an activity keeps it: text, one tool call, usage. */
const reply = (turn: number) =>
  JSON.stringify({
    text: "Let me look that up.".repeat(4),
    toolCalls: [{ id: `call-${turn}`, name: "lookup", params: { query: `q${turn}` } }],
    usage: { input: 1200 + turn * 40, output: 40 }
  })
const toolResult = (turn: number) => JSON.stringify({ _tag: "Success", value: { answer: `result ${turn}`.repeat(8) } })

const database = "turn_floor"
await Postgres.withDatabase(database, async ({ counters, server, url }) => {
  const program = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE session (id text PRIMARY KEY, owner text NOT NULL, lease_until timestamptz NOT NULL,
      seq bigint NOT NULL DEFAULT 0)`
    yield* sql`CREATE TABLE activity (session_id text NOT NULL, name text NOT NULL, result jsonb NOT NULL,
      PRIMARY KEY (session_id, name))`
    yield* sql`CREATE TABLE event (session_id text NOT NULL, seq bigint NOT NULL, body jsonb NOT NULL,
      PRIMARY KEY (session_id, seq))`
    const id = "s1"
    const me = "runner-1"
    yield* sql`INSERT INTO session (id, owner, lease_until) VALUES (${id}, ${me}, now() + interval '30 seconds')`

    /** One fenced write: the activity's result and its events, or a failure when the lease is not ours. */
    const write = (results: Arr.NonEmptyReadonlyArray<readonly [string, string]>, events: Arr.NonEmptyReadonlyArray<string>) =>
      raw ? Effect.promise(() => writeRaw(results, events)) : sql.withTransaction(Effect.gen(function*() {
        const rows = yield* sql<{ seq: string }>`UPDATE session SET seq = seq + ${events.length}
          WHERE id = ${id} AND owner = ${me} AND lease_until > now() RETURNING seq::text AS seq`
        if (rows.length === 0) return yield* Effect.die(new Error("the lease is not ours"))
        const first = Number(rows[0]!.seq) - events.length + 1
        yield* sql`INSERT INTO activity ${sql.insert(Arr.map(results, ([name, result]) => ({ session_id: id, name, result })))}`
        yield* sql`INSERT INTO event ${sql.insert(Arr.map(events, (body, i) => ({ session_id: id, seq: first + i, body })))}`
      }))

    /** The same statements through `pg` (a client of its own, connected before the measure). */
    const client = new pg.Client({ connectionString: url })
    yield* Effect.promise(() => client.connect())
    yield* Effect.addFinalizer(() => Effect.promise(() => client.end()))
    const placeholders = (rows: number, columns: number) =>
      Array.from({ length: rows }, (_, r) => `(${Array.from({ length: columns }, (_, c) => `$${r * columns + c + 1}`).join(", ")})`)
        .join(", ")
    const writeRaw = async (results: ReadonlyArray<readonly [string, string]>, events: ReadonlyArray<string>) => {
      await client.query("BEGIN")
      try {
        const { rows } = await client.query<{ seq: string }>(
          "UPDATE session SET seq = seq + $1 WHERE id = $2 AND owner = $3 AND lease_until > now() RETURNING seq::text AS seq",
          [events.length, id, me]
        )
        if (rows.length === 0) throw new Error("the lease is not ours")
        const first = Number(rows[0]!.seq) - events.length + 1
        await client.query(
          `INSERT INTO activity (session_id, name, result) VALUES ${placeholders(results.length, 3)}`,
          results.flatMap(([name, result]) => [id, name, result])
        )
        await client.query(
          `INSERT INTO event (session_id, seq, body) VALUES ${placeholders(events.length, 3)}`,
          events.flatMap((body, i) => [id, first + i, body])
        )
        await client.query("COMMIT")
      } catch (error) {
        await client.query("ROLLBACK")
        throw error
      }
    }

    const turn = (t: number) => {
      const modelEvents = Arr.makeBy(8, (i) => event(t, i))
      const toolEvents = Arr.make(event(t, 8), event(t, 9), event(t, 10))
      return one
        ? write([[`model/${t}`, reply(t)], [`tool/${t}`, toolResult(t)]], Arr.appendAll(modelEvents, toolEvents))
        : Effect.andThen(write([[`model/${t}`, reply(t)]], modelEvents), write([[`tool/${t}`, toolResult(t)]], toolEvents))
    }

    // warm-up: the statements prepared, the connection open
    for (let t = 0; t < 20; t++) yield* turn(-1 - t)
    yield* Effect.promise(() => counters.resetStatements())
    const xid = yield* Effect.promise(() => counters.nextXid())
    const serverBefore = Postgres.serverCpuUs(server.postmasterPid)
    const cpuBefore = process.cpuUsage()
    const wallBefore = performance.now()
    for (let t = 0; t < turns; t++) yield* turn(t)
    const wall = performance.now() - wallBefore
    const cpu = process.cpuUsage(cpuBefore)
    const serverCpu = Postgres.serverCpuUs(server.postmasterPid) - serverBefore
    const writes = (yield* Effect.promise(() => counters.nextXid())) - xid
    const statements = yield* Effect.promise(() => counters.statements(database))
    const stored = yield* sql<{ n: string }>`SELECT count(*)::text AS n FROM event
      WHERE session_id = ${id} AND (body->>'turn')::int >= 0`
    const per = (n: number) => (n / turns).toFixed(1)
    console.log(`${turns} turns, ${one ? "one transaction" : "two transactions"} a turn, through ${raw ? "pg" : "@effect/sql-pg"} ` +
      `(${stored[0]!.n} events kept):`)
    console.log(`  client CPU ${per(cpu.user + cpu.system)} µs, PostgreSQL CPU ${per(serverCpu)} µs, ` +
      `wall ${(wall / turns).toFixed(2)} ms, ${per(writes)} writing transactions, ${per(statements)} statements a turn`)
  })
  await Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) }))))
})
