/**
 * The SQL engine's backend for the durable session tests: one PostgreSQL
 * server for a test file (started on first use, stopped after the file), and
 * for each runner layer a database of its own, made empty and migrated, with
 * the engine and the store on it.
 */
import { afterAll } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql"
import type { WorkflowEngine } from "effect/workflow"
import { DurableSession } from "effect-agent/session"
import { database } from "./cluster-fixture.ts"
import * as Postgres from "./postgres.ts"

export const available = Postgres.availability()

let server: Promise<Postgres.Postgres> | undefined
const scope = Effect.runSync(Scope.make())
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

/** The file's server, started on first use. */
export const serverUrl: Effect.Effect<string> = Effect.promise(() => {
  server ??= Effect.runPromise(Scope.provide(scope)(Postgres.scoped))
  return server
}).pipe(Effect.map((pg) => pg.url))

let made = 0

/** A database of its own on the server at `url` (its `postgres` database's URL), made empty: its URL. */
export const databaseOn = (url: string): Effect.Effect<string> => Effect.gen(function*() {
  const name = `t${process.pid}_${++made}`
  yield* Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(`CREATE DATABASE ${name}`)
  }).pipe(Effect.provide(database(url)), Effect.orDie)
  return url.replace(/\/postgres$/, `/${name}`)
})

/** A database of its own on the file's server, made empty: its URL. */
export const freshDatabase: Effect.Effect<string> = Effect.flatMap(serverUrl, databaseOn)

/**
 * The engine and the store of a runner on the database `url` (the store's tables made), with the database
 * itself. A short poll keeps the tests that wait on another process's wake quick.
 */
export const backendOn = (
  url: string,
  options: DurableSession.SqlEngineOptions = {}
): Layer.Layer<WorkflowEngine.WorkflowEngine | DurableSession.Store | SqlClient.SqlClient> =>
  Layer.mergeAll(DurableSession.layerSqlEngine({ poll: "50 millis", ...options }), DurableSession.layerSqlStore).pipe(
    Layer.provideMerge(Layer.effectDiscard(Effect.orDie(DurableSession.migrateSql))),
    Layer.provideMerge(Layer.orDie(database(url)))
  )

/** {@link backendOn} a fresh database. */
export const backend = (
  options: DurableSession.SqlEngineOptions = {}
): Layer.Layer<WorkflowEngine.WorkflowEngine | DurableSession.Store | SqlClient.SqlClient> =>
  Layer.unwrap(Effect.map(freshDatabase, (url) => backendOn(url, options)))
