/**
 * What stops a run before its work is done: a cancel through its `Steering`
 * (with the reason), its wall-clock deadline, or a halt with an outcome (a
 * guardrail that tripped, a handoff). The model stream, tool calls
 * and approval waits race them; the loop checks them between steps.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as Backend from "../Backend.ts"
import type * as Outcome from "../Outcome.ts"
import * as Step from "./step.ts"

/**
 * Why a run stops.
 *
 * @internal
 */
export type Stop = Backend.Stop

/**
 * A run's stops.
 *
 * @internal
 */
export interface Stops {
  /** Completed with the reason when the run is cancelled through its `Steering`. */
  readonly cancelled: Deferred.Deferred<string> | undefined
  /**
   * Completed when the wall-clock budget runs out (by one timer per run, see
   * {@link withDeadline}). Absent without a wall-clock budget.
   */
  readonly deadline: Deferred.Deferred<void> | undefined
  /** The wall-clock budget in ms (the whole run's, across continuations). */
  readonly wallClock: number | null
  /**
   * Completed with a halt (see {@link halt}). Made by {@link arm}, when
   * something may halt the run while a step is in flight: until then nothing
   * races it, and a halt is seen between steps.
   */
  halted: Deferred.Deferred<Stop> | undefined
}

/**
 * The stops of a run: its steering's cancel, and a deadline when it has a wall-clock budget.
 *
 * @internal
 */
export const make = (cancelled: Deferred.Deferred<string> | undefined, wallClock: number | null): Stops => ({
  cancelled,
  deadline: wallClock === null ? undefined : Deferred.makeUnsafe<void>(),
  wallClock,
  halted: undefined
})

/**
 * From now on, the model stream, tool calls and approval waits also race a
 * halt (the ones already in flight do not).
 *
 * @internal
 */
export const arm = (stops: Stops): void => {
  if (stops.halted === undefined) stops.halted = Deferred.makeUnsafe<Stop>()
}

/**
 * Halts the run with an outcome: what is in flight and raced is stopped at
 * once (see {@link arm}), and the run ends with `outcome` at its next step.
 * The first halt wins.
 *
 * @internal
 */
export const halt = (stops: Stops, outcome: Outcome.Outcome, reason: string): void => {
  arm(stops)
  Deferred.doneUnsafe(stops.halted!, Exit.succeed({ _tag: "Halt", outcome, reason }))
}

const cancel = (reason: string): Stop => ({ _tag: "Cancel", reason })

const deadline: Stop = { _tag: "Deadline" }

const deadlineReached = Step.settled<Stop | undefined>(deadline)

/**
 * Why the run stops, if it does: settled at once unless it was cancelled.
 *
 * @internal
 */
export const reason = (stops: Stops): Step.Step<Stop | undefined> => {
  if (stops.halted !== undefined && Deferred.isDoneUnsafe(stops.halted)) return Deferred.await(stops.halted)
  if (stops.cancelled !== undefined && Deferred.isDoneUnsafe(stops.cancelled)) {
    return Effect.map(Deferred.await(stops.cancelled), cancel)
  }
  return stops.deadline !== undefined && Deferred.isDoneUnsafe(stops.deadline) ? deadlineReached : Step.done
}

/**
 * The reason of the run's cancel, if it was cancelled.
 *
 * @internal
 */
export const cancelled = (stops: Stops): Effect.Effect<string | undefined> =>
  stops.cancelled !== undefined && Deferred.isDoneUnsafe(stops.cancelled)
    ? Deferred.await(stops.cancelled)
    : Effect.undefined

/**
 * Races an effect with the run's cancel and its deadline: when either comes
 * first, the effect is interrupted (its finalizers run) and `onStop` gives the
 * value. Nothing is raced when the run can be neither cancelled nor run out
 * of time.
 *
 * @internal
 */
export const race = <A, E, R>(
  stops: Stops,
  effect: Effect.Effect<A, E, R>,
  onStop: (stop: Stop) => A
): Effect.Effect<A, E, R> => {
  let raced = effect
  if (stops.cancelled !== undefined) {
    raced = Effect.raceFirst(raced, Effect.map(Deferred.await(stops.cancelled), (why) => onStop(cancel(why))))
  }
  if (stops.deadline !== undefined) {
    raced = Effect.raceFirst(raced, Effect.map(Deferred.await(stops.deadline), () => onStop(deadline)))
  }
  if (stops.halted !== undefined) raced = Effect.raceFirst(raced, Effect.map(Deferred.await(stops.halted), onStop))
  return raced
}

/**
 * Runs `effect` with the deadline armed: one fiber sleeps until the
 * wall-clock budget runs out (`elapsedBefore`: the time a continued run had
 * used) and completes {@link Stops.deadline}; it is stopped when `effect`
 * ends. Nothing is started without a wall-clock budget.
 *
 * @internal
 */
export const withDeadline = <A, E, R>(
  stops: Stops,
  elapsedBefore: number,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const { deadline, wallClock } = stops
  if (deadline === undefined || wallClock === null) return effect
  const remaining = wallClock - elapsedBefore
  if (remaining <= 0) {
    Deferred.doneUnsafe(deadline, Exit.void)
    return effect
  }
  const timer = Effect.andThen(Effect.sleep(remaining), Deferred.succeed(deadline, undefined))
  return Effect.flatMap(Effect.forkChild(timer), (fiber) => Effect.ensuring(effect, Fiber.interrupt(fiber)))
}
