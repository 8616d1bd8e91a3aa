/**
 * A tool batch: the calls of one assistant message, planned in order (see
 * `Plan`), then run (see `Call`): parallel ones on child fibers, at most
 * `maxParallelTools` at once, sequential ones one at a time after them, and
 * all one at a time when any call is `exclusive`. A call waiting for approval
 * does not hold up the others. The results come back in the calls' order,
 * whatever order they finish in, with the termination vote.
 *
 * @internal
 */
import { Effect, Semaphore } from "effect"
import type { ToolFatalError } from "../../AgentError.ts"
import type * as Message from "../../Message.ts"
import * as Events from "../events.ts"
import * as Journal from "../journal.ts"
import type * as LiveRun from "../liveRun.ts"
import * as Call from "./call.ts"
import * as Plan from "./plan.ts"

/**
 * The outcome of a batch.
 *
 * @internal
 */
export interface Batch {
  /** One result per call, in the calls' order. */
  readonly results: ReadonlyArray<Message.ToolResultMessage>
  /** Whether every counted result voted to end the run (and no call was over the per-turn limit). */
  readonly terminate: boolean
}

/**
 * The batch of a message without tool calls.
 *
 * @internal
 */
export const empty: Batch = { results: [], terminate: false }

type BatchRun<R> = LiveRun.Uses<R, "env" | "events" | "journal" | "progress" | "stops" | "context" | "transcript">

/**
 * Runs the tool calls of one assistant message. A plain generator: the turn
 * delegates to it with `yield*`.
 *
 * @internal
 */
export function* callAll<R>(run: BatchRun<R>, calls: ReadonlyArray<Message.ToolCallPart>) {
  run.journal.results.clear()
  const plan = yield* Plan.plan(run, calls)
  if (plan.overLimit > 0) {
    const limit = run.env.config.maxToolCallsPerTurn
    yield* Events.emit(run.events, {
      _tag: "GuardTripped",
      guard: "maxToolCallsPerTurn",
      action: "warn",
      detail: `${plan.overLimit} of ${calls.length} calls were not executed: at most ${limit} per turn`,
      figures: { calls: calls.length, limit: limit ?? 0, notExecuted: plan.overLimit }
    })
  }
  const planned = plan.calls
  const finalized: Array<Call.Finalized | undefined> = new Array(planned.length)
  // One call (most turns): nothing to order or bound.
  if (planned.length === 1) finalized[0] = yield* Call.call(run, planned[0]!)
  else yield* schedule(run, planned, finalized)
  const results: Array<Message.ToolResultMessage> = []
  let counted = 0
  let votes = 0
  for (let i = 0; i < planned.length; i++) {
    const done = finalized[i]!
    results.push(done.result)
    if (planned[i]!.counted) {
      counted++
      if (done.terminate) votes++
    }
  }
  Journal.endBatch(run.journal)
  const batch: Batch = { results, terminate: plan.overLimit === 0 && counted > 0 && votes === counted }
  return batch
}

/** One call as an Effect of its own, for the calls that run on fibers. */
const callOne = Effect.fnUntraced(Call.call)

/** Whether a planned call may run beside others (calls answered at once always may). */
const isParallel = (planned: Plan.Planned): boolean =>
  planned._tag !== "Prepared" || planned.settings.execution === "parallel"

/**
 * Runs several calls: parallel ones on fibers (bounded), then sequential ones
 * in order; all in order when any is exclusive.
 */
const schedule = <R>(
  run: BatchRun<R>,
  planned: ReadonlyArray<Plan.Planned>,
  finalized: Array<Call.Finalized | undefined>
): Effect.Effect<void, ToolFatalError, R> => {
  const exclusive = planned.some((p) => p._tag === "Prepared" && p.settings.execution === "exclusive")
  const parallel = exclusive ? [] : planned.filter(isParallel)
  const sequential = exclusive ? planned : planned.filter((p) => !isParallel(p))
  const store = (p: Plan.Planned) => Effect.map(callOne(run, p), (done) => void (finalized[p.index] = done))
  const first = parallel.length === 0
    ? Effect.void
    : parallel.length === 1
    ? store(parallel[0]!)
    : forEachBounded(parallel, store, run.env.config.maxParallelTools)
  return sequential.length === 0 ? first : Effect.andThen(first, Effect.forEach(sequential, store, { discard: true }))
}

/**
 * Runs every item on a fiber of its own, at most `limit` at once, starting
 * them in order. Not `Effect.forEach` with a numeric `concurrency`: in effect
 * 4.1 it starts an item twice when an item it starts in a freed slot makes
 * another running item finish on the spot (a call that completes a Deferred
 * another call waits on, a hook that cancels the run as a call starts).
 * Unbounded `forEach` never pauses, so it is not affected; a fair
 * `Semaphore` (waiters wake in order) bounds it instead.
 */
const forEachBounded = <A, E, R>(
  items: ReadonlyArray<A>,
  f: (item: A) => Effect.Effect<void, E, R>,
  limit: number
): Effect.Effect<void, E, R> =>
  items.length <= limit
    ? Effect.forEach(items, f, { concurrency: "unbounded", discard: true })
    : Effect.flatMap(
      Semaphore.make(limit),
      (slots) => Effect.forEach(items, (item) => slots.withPermit(f(item)), { concurrency: "unbounded", discard: true })
    )
