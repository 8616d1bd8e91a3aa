/**
 * The events of a durable session, published from inside activities only.
 *
 * The workflow body runs again on every replay, and so does the loop in it:
 * an event it emits is not yet news. Every event goes into the outbox; an
 * activity that executes publishes what is waiting (when it starts and when
 * it ends), and one that returns a memoized result instead marks what the
 * body emitted before it as published already (it was, when that activity
 * first ran). So a replay publishes nothing it had published, and the events
 * an activity emits (a model call's stream, a tool's updates) are published
 * by it.
 *
 * An event's id is the name of the activity that publishes it, whether it
 * was waiting before it (`<`) or emitted inside it (`>`), and its place
 * among those: stable across replays (a memoized activity emits nothing, so
 * a running count would not be). An activity may run more than once (at
 * least once, not exactly once): its events are published again with the
 * same ids, by which the store dedupes them.
 *
 * The model call's activity publishes live: its events (the streamed
 * deltas) are published while it runs, as they arrive, not when it ends. A
 * publisher fiber waits for events and publishes what has arrived, one batch
 * a round trip (deltas that arrive during a write go in the next), so the
 * stream never waits for the store.
 *
 * @internal
 */
import { Effect, Fiber, Latch } from "effect"
import type * as AgentEvent from "../../../AgentEvent.ts"

/**
 * An event as a durable session publishes it: `id` identifies it within the session.
 *
 * @internal
 */
export interface Entry {
  readonly id: string
  readonly event: AgentEvent.AgentEvent
}

/**
 * A session's outbox.
 *
 * @internal
 */
export interface Outbox {
  /** Every event the body emitted in this run of it, in order. */
  readonly emitted: Array<AgentEvent.AgentEvent>
  /** Events before this index are published (or were, before a replay). */
  published: number
  /** Opened by the sink on each event while an activity publishes live. */
  arrived: Latch.Latch | undefined
}

/**
 * An empty outbox.
 *
 * @internal
 */
export const make = (): Outbox => ({ emitted: [], published: 0, arrived: undefined })

/**
 * The synchronous sink the loop is given.
 *
 * @internal
 */
export const sink = (outbox: Outbox) => (event: AgentEvent.AgentEvent): void => {
  outbox.emitted.push(event)
  outbox.arrived?.openUnsafe()
}

/**
 * Takes what is waiting to be published, marking it published: an event's
 * id is `prefix` and its place after `base` (by default, the first waiting).
 *
 * @internal
 */
export const take = (outbox: Outbox, prefix: string, base?: number): ReadonlyArray<Entry> => {
  const from = outbox.published
  const to = outbox.emitted.length
  if (from >= to) return []
  outbox.published = to
  const first = base ?? from
  const entries: Array<Entry> = []
  for (let i = from; i < to; i++) entries.push({ id: `${prefix}${i - first}`, event: outbox.emitted[i]! })
  return entries
}

/**
 * Marks the events emitted before `mark` as published: the activity that
 * followed them returned a memoized result, so they were published when it
 * first ran.
 *
 * @internal
 */
export const skipTo = (outbox: Outbox, mark: number): void => {
  if (mark > outbox.published) outbox.published = mark
}

/**
 * Wraps an activity's body: it publishes what waits before it runs and what
 * it emits, when it ends (whatever its exit) or, `live`, as it arrives.
 *
 * @internal
 */
export const publishing = <A, E, R, R2>(
  outbox: Outbox,
  name: string,
  publish: (entries: ReadonlyArray<Entry>) => Effect.Effect<void, never, R2>,
  body: Effect.Effect<A, E, R>,
  options: { readonly live?: boolean | undefined } = {}
): Effect.Effect<A, E, R | R2> => {
  const flush = (prefix: string, base?: number) =>
    Effect.suspend(() => {
      const entries = take(outbox, prefix, base)
      return entries.length === 0 ? Effect.void : publish(entries)
    })
  if (options.live !== true) return Effect.andThen(flush(`${name}<`), Effect.ensuring(body, flush(`${name}>`)))
  return Effect.andThen(
    flush(`${name}<`),
    Effect.suspend(() => live(outbox, flush(`${name}>`, outbox.published), body))
  )
}

/**
 * Runs `body` with a publisher beside it: each time events arrive, `flush`
 * publishes all that arrived; once `body` ends, a last flush, then it returns.
 */
const live = <A, E, R, R2>(
  outbox: Outbox,
  flush: Effect.Effect<void, never, R2>,
  body: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R | R2> => {
  const arrived = Latch.makeUnsafe(false)
  let ended = false
  const follow: Effect.Effect<void, never, R2> = Effect.andThen(
    arrived.await,
    Effect.suspend(() => {
      arrived.closeUnsafe()
      const last = ended
      return Effect.andThen(flush, last ? Effect.void : follow)
    })
  )
  outbox.arrived = arrived
  return Effect.flatMap(Effect.forkChild(follow), (publisher) =>
    Effect.ensuring(
      body,
      Effect.suspend(() => {
        ended = true
        outbox.arrived = undefined
        arrived.openUnsafe()
        return Fiber.join(publisher)
      })
    ))
}
