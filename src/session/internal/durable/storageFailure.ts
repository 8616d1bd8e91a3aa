/**
 * The workflow engine dies when its storage fails: effect 4.1's
 * `ClusterWorkflowEngine` runs `Effect.orDie` over the `PersistenceError` of
 * a query the database did not answer (it restarts, a connection drops), in
 * `poll`, `execute`, an activity's call and more. These tell such a defect
 * from any other.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { ClusterError } from "effect/cluster"
import { SqlError } from "effect/sql"

/**
 * Whether a defect is the engine's storage failing.
 *
 * @internal
 */
export const isStorageFailure = (defect: unknown): boolean =>
  defect instanceof ClusterError.PersistenceError || SqlError.isSqlError(defect)

/**
 * The storage failure among a cause's defects, if any.
 *
 * @internal
 */
export const storageFailureOf = (cause: Cause.Cause<unknown>): unknown => {
  for (const reason of cause.reasons) {
    if (Cause.isDieReason(reason) && isStorageFailure(reason.defect)) return reason.defect
  }
  return undefined
}

/**
 * The storage failure in a cause, as a defect or as a failure (a
 * `PersistenceError`, an `SqlError`, the durable store's `StoreError`), if
 * any: what a database that is away, or going away, ends an effect with.
 *
 * @internal
 */
export const unreachableOf = (cause: Cause.Cause<unknown>): unknown => {
  for (const reason of cause.reasons) {
    const failure = Cause.isDieReason(reason) ? reason.defect : Cause.isFailReason(reason) ? reason.error : undefined
    if (failure === undefined || isRefused(failure)) continue
    if (isStorageFailure(failure) || isStoreError(failure)) return failure
  }
  return undefined
}

/** A database that refuses the client (its credentials, its rights, a statement) refuses it again: no wait helps. */
const isRefused = (failure: unknown): boolean => {
  const sql = failure instanceof ClusterError.PersistenceError ? failure.cause : failure
  return SqlError.isSqlError(sql) &&
    (sql.reason._tag === "AuthenticationError" || sql.reason._tag === "AuthorizationError" ||
      sql.reason._tag === "SqlSyntaxError")
}

const isStoreError = (error: unknown): boolean =>
  typeof error === "object" && error !== null && "_tag" in error && error._tag === "DurableStoreError"

/**
 * What a storage failure says, in a line.
 *
 * @internal
 */
export const detailOf = (defect: unknown): string => {
  const cause = defect instanceof ClusterError.PersistenceError ? defect.cause : defect
  return cause instanceof Error ? cause.message : String(cause)
}

/**
 * How long, and how often, a command waits for a database that is away
 * (it restarts, a connection drops): tries again, backing off from 200 ms to
 * 5 s between tries, for up to 5 minutes.
 *
 * @internal
 */
export const reconnecting = Schedule.min([Schedule.exponential("200 millis"), Schedule.spaced("5 seconds")]).pipe(
  Schedule.upTo({ duration: "5 minutes" })
)

/**
 * Makes `effect` again while it ends because the database is away (see
 * {@link unreachableOf}), on the {@link reconnecting} schedule; then fails
 * with `onGiveUp` of the last storage failure. Any other exit is the effect's.
 *
 * @internal
 */
export const waitingForTheDatabase = <E2>(options: {
  readonly onGiveUp: (failure: unknown) => E2
  /** Told of the first failure, once (to say that the command waits). */
  readonly onWait?: ((failure: unknown) => void) | undefined
}) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | E2, R> => {
  let told = false
  return effect.pipe(
    Effect.sandbox,
    Effect.tapError((cause) =>
      Effect.sync(() => {
        const failure = unreachableOf(cause)
        if (told || failure === undefined || Cause.hasInterrupts(cause)) return
        told = true
        options.onWait?.(failure)
      })
    ),
    Effect.retry({
      while: (cause) => !Cause.hasInterrupts(cause) && unreachableOf(cause) !== undefined,
      schedule: reconnecting
    }),
    Effect.catch((cause): Effect.Effect<never, E | E2> => {
      const failure = Cause.hasInterrupts(cause) ? undefined : unreachableOf(cause)
      return failure === undefined ? Effect.failCause(cause) : Effect.fail(options.onGiveUp(failure))
    })
  )
}

/** (made once: every activity of a session rides out with it, and parsing its durations cost a turn ~50 µs) */
const ridingOutSchedule = Schedule.min([Schedule.exponential("200 millis"), Schedule.spaced("5 seconds")]).pipe(
  Schedule.upTo({ duration: "1 minute" })
)

/**
 * Makes again, with backoff (200 ms, up to 5 s between tries, for up to a
 * minute), a call to the engine that died because its storage failed; any
 * other exit is the call's.
 *
 * @internal
 */
export const ridingOut = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  effect.pipe(
    Effect.sandbox,
    Effect.retry({
      while: (cause) => storageFailureOf(cause) !== undefined && !Cause.hasInterrupts(cause),
      schedule: ridingOutSchedule
    }),
    Effect.catch((cause) => Effect.failCause(cause))
  )
