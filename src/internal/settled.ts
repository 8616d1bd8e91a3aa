/**
 * Answers the loop's generators can `yield*` when there is nothing to wait
 * for. The loop's steps are plain generators delegated to with `yield*`; an
 * `Effect.void` there would travel as a yielded value up through every
 * delegating generator to the fiber and back, and a generator of its own is
 * an allocation per call. A settled answer is a shared iterable that returns
 * its value at once: `yield*` on it costs neither.
 *
 * @internal
 */

/**
 * An iterable that yields nothing and returns `value`.
 *
 * @internal
 */
export interface Settled<A> extends Iterable<never, A, unknown> {}

/**
 * A settled answer of `value`: make it once (at module level) and share it.
 *
 * @internal
 */
export const make = <A>(value: A): Settled<A> => {
  const result: IteratorReturnResult<A> = Object.freeze({ done: true, value })
  const iterator: Iterator<never, A, unknown> = { next: () => result }
  return { [Symbol.iterator]: () => iterator }
}

/**
 * The settled `undefined`.
 *
 * @internal
 */
export const undefined_: Settled<undefined> = make(undefined)
