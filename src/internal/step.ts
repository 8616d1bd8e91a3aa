/**
 * A step of the loop: what its generators delegate to with `yield*`.
 *
 * The loop's steps (a turn, streaming a reply, a tool call, running control
 * hooks) are plain generators, delegated to with `yield*` from the Effect
 * generator of the turn: as Effects of their own, each would cost a suspend,
 * an iterator and a return step per turn or per call. A step may finish
 * without waiting for anything (an event nobody waits on, a guard that says
 * go on): then an `Effect.void` would still travel as a yielded value up
 * through every delegating generator to the fiber and back, and a generator
 * of its own is an allocation per call. So such a step answers with a
 * settled value instead: a shared iterable that returns its value at once,
 * which `yield*` reads at no cost.
 *
 * This module is the one place that knows this; the rest of the loop yields
 * `Step`s and never looks inside.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"

/**
 * An answer already known: an iterable that yields nothing and returns the value.
 *
 * @internal
 */
export interface Settled<A> extends Iterable<never, A, unknown> {}

/**
 * What a step of the loop returns for `yield*`: an Effect to run, a plain
 * generator of Effects (a step made of steps), or a settled answer.
 *
 * @internal
 */
export type Step<A, E = never, R = never> =
  | Effect.Effect<A, E, R>
  | Generator<Effect.Effect<unknown, E, R>, A, unknown>
  | Settled<A>

/**
 * A settled answer of `value`: make it once (at module level) and share it.
 *
 * @internal
 */
export const settled = <A>(value: A): Settled<A> => {
  const result: IteratorReturnResult<A> = Object.freeze({ done: true, value })
  const iterator: Iterator<never, A, unknown> = { next: () => result }
  return { [Symbol.iterator]: () => iterator }
}

/**
 * The settled `undefined`: a step with nothing to wait for.
 *
 * @internal
 */
export const done: Settled<undefined> = settled(undefined)

/**
 * Whether an effect has already succeeded (an `Exit`: `Effect.void`,
 * `Effect.succeed(...)`): such an answer is read without a fiber step.
 *
 * @internal
 */
export const isSucceeded = <A, E, R>(effect: Effect.Effect<A, E, R>): effect is Exit.Success<A, E> =>
  Exit.isExit(effect) && Exit.isSuccess(effect)

/**
 * A void effect as a step: `done` when it has already succeeded.
 *
 * @internal
 */
export const ofVoid = <E, R>(effect: Effect.Effect<void, E, R>): Step<void, E, R> =>
  isSucceeded(effect) ? done : effect
