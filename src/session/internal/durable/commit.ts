/**
 * Where a durable session's activity and an engine that keeps the session's
 * events in the activity's own write meet (the SQL engine, `sqlEngine.ts`).
 *
 * An engine that offers it provides `Commit` to each activity it executes.
 * The body then hands the activity's events to it rather than publishing them
 * apart: those that wait when the activity ends are written in the statement
 * that records its result, and what the activity emits while it runs for
 * longer is published through `publish`, in a write fenced as the result's is.
 * An activity whose result nothing outside the run sees before the next
 * write (an inbox take; a model call, whose decision the next step acts on)
 * says so with `mayWait`: its result, and its events, go with the execution's
 * next write (a `publish`, the next activity's, the suspension's), or the
 * replay makes it again. A turn whose tool call is safe to run again is then
 * one write.
 * Without `Commit` (effect's engines), the body publishes through the store.
 *
 * @internal
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { Entry } from "./outbox.ts"

/**
 * The write of the activity being executed.
 *
 * @internal
 */
export interface Service {
  /** The client the engine writes through: the body hands it events only for a store on the same (`Store.database`). */
  readonly database: unknown
  /** Writes `entries` now, fenced, with the results of the execution that wait for its next write. */
  readonly publish: (sessionId: string, entries: ReadonlyArray<Entry>) => Effect.Effect<void>
  /** Writes `entries` with this activity's result, in its statement. */
  readonly withResult: (sessionId: string, entries: ReadonlyArray<Entry>) => void
  /** This activity's result (and the events it hands `withResult`) may wait for the execution's next write. */
  readonly mayWait: () => void
  /**
   * The last place in the session's inbox as the execution's last write read it, if it read one: a steering
   * take that read the inbox up to it before need not read again (nothing came since).
   */
  readonly inboxHead: (sessionId: string) => number | undefined
}

/**
 * @internal
 */
export class Commit extends Context.Service<Commit, Service>()("effect-agent/DurableSession/Commit") {}
