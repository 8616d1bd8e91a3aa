/**
 * The events of a durable session, published from inside activities only.
 *
 * The workflow body runs again on every replay, and so does the loop in it:
 * an event it emits is not yet news. Every event goes into the outbox; an
 * activity that executes publishes what is waiting (when it starts and when
 * it ends), and one that returns a memoized result instead marks what the
 * body emitted before it, on its own path, as published already (it was,
 * when that activity first ran). So a replay publishes little it had
 * published, and the events an activity emits (a model call's stream, a
 * tool's updates) are published by it.
 *
 * An event's id is fixed when it is emitted, from where it comes, so that it
 * is the same in every run of the body, whatever the order in which
 * concurrent calls interleave and whichever activity happens to publish it:
 *
 * - emitted inside an activity: the activity's name and the event's place
 *   among the events of that execution of it (`tool/3/c1>0`, `model/3>12`);
 *   an activity's own events come in order;
 * - a sub-agent's event (`Nested`), emitted inside the activity of the
 *   session's call that runs it: what the event is, in the sub-agent's run:
 *   the call's first activity, the run's id, the event's turn, the call it
 *   is about (or `-`), its tag, and its place among the events alike in that
 *   execution (`tool/3/c1>run-id>2/d1/ApprovalRequested#0`; a run's
 *   `AgentStart` and `AgentEnd` are `tool/3/c1>run-id>AgentStart#0`). A call
 *   that stopped to wait for an approval its sub-agent asked is made again,
 *   continuing the sub-agent from where it was, in an activity of its own:
 *   what the continued run emits again on its way back (its `AgentStart`,
 *   the request) has the ids it had, and only what is new is news. A
 *   sub-agent run again from its start (its activity ran again) is a new run,
 *   with a new run id: its events are news;
 * - emitted by the body: its turn, the call it is about (`toolCallId`) or
 *   `-`, and its place among the body's events of that turn and call
 *   (`3/c1/0`, `3/-/2`); the body emits the same events on each path, in the
 *   same order, in every run.
 *
 * An activity may run more than once (at least once, not exactly once): its
 * events are published again with the same ids, by which the store dedupes
 * them; a replay that publishes an event again does the same.
 *
 * The model call's activity publishes live: its events (the streamed
 * deltas) are published while it runs, as they arrive, not when it ends. A
 * publisher fiber waits for events and publishes what has arrived, one batch
 * a round trip (deltas that arrive during a write go in the next), so the
 * stream never waits for the store. Each batch lingers a little (see
 * {@link linger}) for what comes next, so that a call that answers at once
 * publishes its events in one batch, not two.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Latch from "effect/Latch"
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

/** An event of this run of the body, with the path it came on and whether it is published. */
interface Emitted {
  readonly entry: Entry
  /** The activity that emitted it (`activity:<name>`), else the call it is about, else `-`. */
  readonly path: string
  published: boolean
}

/**
 * A session's outbox.
 *
 * @internal
 */
export interface Outbox {
  /** Every event this run of the body emitted, in order. */
  readonly emitted: Array<Emitted>
  /** Events before this index are all published. */
  settled: number
  /** How many events the body emitted outside activities, by turn and call, so far. */
  readonly counts: Map<string, number>
  /** Opened by the sink on each event while an activity publishes live. */
  arrived: Latch.Latch | undefined
}

/**
 * An empty outbox.
 *
 * @internal
 */
export const make = (): Outbox => ({ emitted: [], settled: 0, counts: new Map(), arrived: undefined })

/** The call an event emitted by the body is about, if any. */
const callOf = (event: AgentEvent.AgentEvent): string | undefined =>
  "toolCallId" in event && typeof event.toolCallId === "string" ? event.toolCallId : undefined

/** The sub-agent's own event inside a `Nested` one (a grandchild's, for a `Nested` of a `Nested`). */
const innermost = (event: AgentEvent.AgentEvent): AgentEvent.AgentEvent =>
  event._tag === "Nested" ? innermost(event.event) : event

/**
 * The execution of an activity that emits events: its name, the name of the
 * first activity of the call it makes (its sub-agents' events are named by
 * it, in every part of the call), and how many events of each kind it
 * emitted so far.
 *
 * @internal
 */
export interface Source {
  readonly name: string
  readonly call?: string | undefined
  readonly counts: Map<string, number>
}

/** What a sub-agent's event is in its run: its kind, where it happens (see the module's doc). */
const kindOf = (event: AgentEvent.AgentEvent): string =>
  event._tag === "AgentStart" || event._tag === "AgentEnd"
    ? event._tag
    : `${event.turn}/${callOf(event) ?? "-"}/${event._tag}`

/** The next number of `key` among `counts`. */
const next = (counts: Map<string, number>, key: string): number => {
  const n = counts.get(key) ?? 0
  counts.set(key, n + 1)
  return n
}

/**
 * Adds an event: `source` is the execution of the activity that emitted it, if any.
 *
 * @internal
 */
export const add = (outbox: Outbox, event: AgentEvent.AgentEvent, source: Source | undefined): void => {
  let id: string
  let path: string
  if (source === undefined) {
    path = callOf(event) ?? "-"
    const prefix = `${event.turn}/${path}/`
    id = `${prefix}${next(outbox.counts, prefix)}`
  } else if (event._tag === "Nested") {
    const inner = innermost(event)
    const key = `${source.call ?? source.name}>${inner.runId}>${kindOf(inner)}`
    id = `${key}#${next(source.counts, key)}`
    path = `activity:${source.name}`
  } else {
    id = `${source.name}>${next(source.counts, "")}`
    path = `activity:${source.name}`
  }
  outbox.emitted.push({ entry: { id, event }, path, published: false })
  outbox.arrived?.openUnsafe()
}

/** Whether events wait to be published. */
const waiting = (outbox: Outbox): boolean => {
  for (let i = outbox.settled; i < outbox.emitted.length; i++) if (!outbox.emitted[i]!.published) return true
  return false
}

/**
 * Takes what is waiting to be published, marking it published.
 *
 * @internal
 */
export const take = (outbox: Outbox): ReadonlyArray<Entry> => {
  const entries: Array<Entry> = []
  for (let i = outbox.settled; i < outbox.emitted.length; i++) {
    const emitted = outbox.emitted[i]!
    if (emitted.published) continue
    emitted.published = true
    entries.push(emitted.entry)
  }
  outbox.settled = outbox.emitted.length
  return entries
}

/**
 * Marks the events the body emitted before `mark` that came before an
 * activity that returned a memoized result as published: they were, when that
 * activity first ran (its first flush published all that waited). An
 * activity of the body's own (`path` `-`: a model call, an inbox poll) runs
 * when no call is in flight, so everything emitted before it came before it
 * in every run. A call's activity (`path`: its call id) runs beside the other
 * calls of its batch: what they emitted meanwhile may have come after it in
 * another run, so only the body's own events and the call's stay marked, and
 * a later flush publishes the rest (again, under the same ids, if it was).
 *
 * @internal
 */
export const skipTo = (outbox: Outbox, mark: number, path: string): void => {
  const end = Math.min(mark, outbox.emitted.length)
  let settled = true
  for (let i = outbox.settled; i < end; i++) {
    const emitted = outbox.emitted[i]!
    if (!emitted.published && (path === "-" || emitted.path === "-" || emitted.path === path)) {
      emitted.published = true
    }
    if (!emitted.published) settled = false
    if (settled) outbox.settled = i + 1
  }
}

/**
 * How long a live activity's batch waits for more: the events of a model call that answers at once (its
 * start, its deltas, its end) go in one statement and one transaction, not one for the deltas and one for the
 * end. A consumer sees a delta this much later at most: nothing waits on the publication of an event but its
 * consumers.
 *
 * @internal
 */
export const linger = Duration.millis(20)

/**
 * Wraps an activity's body: it publishes what waits before it runs and what
 * it emits, when it ends (whatever its exit) or, `live`, as it arrives, each
 * batch waiting {@link linger} for more when `linger` is set. What waits is
 * published before the body runs, always: a model call is made only once it
 * is (a store that fails then stops the session before it spends anything),
 * and an approval's wait reads the cancels only once its request is.
 *
 * @internal
 */
export const publishing = <A, E, R, R2>(
  outbox: Outbox,
  publish: (entries: ReadonlyArray<Entry>) => Effect.Effect<void, never, R2>,
  body: Effect.Effect<A, E, R>,
  options: {
    readonly live?: boolean | undefined
    readonly linger?: boolean | undefined
    /** `false`: what waits is not published before the body runs, but with what it emits. */
    readonly first?: boolean | undefined
    /** Takes what waits when the body ends, rather than publishing it (an engine writes it with the result). */
    readonly last?: ((entries: ReadonlyArray<Entry>) => void) | undefined
  } = {}
): Effect.Effect<A, E, R | R2> => {
  const flush = Effect.suspend(() => {
    const entries = take(outbox)
    return entries.length === 0 ? Effect.void : publish(entries)
  })
  const last = options.last
  const end = last === undefined ? flush : Effect.sync(() => {
    const entries = take(outbox)
    if (entries.length > 0) last(entries)
  })
  const first = options.first === false ? Effect.void : flush
  if (options.live !== true) return Effect.andThen(first, Effect.ensuring(body, end))
  const wait = options.linger === true ? linger : Duration.zero
  return Effect.andThen(first, Effect.suspend(() => live(outbox, flush, end, body, wait)))
}

/**
 * Runs `body` with a publisher beside it: each time events arrive, it lets
 * more come for `wait` (or until `body` ends), and `flush` publishes all that
 * came; once `body` ends, a last flush, then it returns.
 */
const live = <A, E, R, R2>(
  outbox: Outbox,
  flush: Effect.Effect<void, never, R2>,
  end: Effect.Effect<void, never, R2>,
  body: Effect.Effect<A, E, R>,
  wait: Duration.Duration
): Effect.Effect<A, E, R | R2> => {
  // open at once when events wait already (an activity that does not publish first: they go out as the body's do)
  const arrived = Latch.makeUnsafe(waiting(outbox))
  const ended = Latch.makeUnsafe(false)
  let done = false
  const follow: Effect.Effect<void, never, R2> = Effect.gen(function*() {
    while (true) {
      yield* arrived.await
      arrived.closeUnsafe()
      if (!done && Duration.isGreaterThan(wait, Duration.zero)) yield* Effect.raceFirst(Effect.sleep(wait), ended.await)
      const last = done
      yield* last ? end : flush
      if (last) return
    }
  })
  outbox.arrived = arrived
  return Effect.flatMap(Effect.forkChild(follow), (publisher) =>
    Effect.ensuring(
      body,
      Effect.suspend(() => {
        done = true
        outbox.arrived = undefined
        ended.openUnsafe()
        arrived.openUnsafe()
        return Fiber.join(publisher)
      })
    ))
}
