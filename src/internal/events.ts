/**
 * The event sink of a run: every event goes through it to the synchronous
 * sinks (the stream of `runStream`, then the plugins' `observe` hooks) and
 * then to the `onEvent` hooks, in order. Nothing is built when nobody
 * listens.
 *
 * One `emit` takes an event body and stamps it with the run id, the turn and
 * the time. The events of every turn (turn, message and tool execution start
 * and end, the budget snapshot) have constructors of their own that write
 * them whole: a spread that sees every kind of event is megamorphic in V8,
 * about 130 ns an event more than a literal.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import { constVoid } from "effect/Function"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Message from "../Message.ts"
import * as Progress from "./progress.ts"
import * as Step from "./step.ts"

/**
 * Where a run's events go.
 *
 * @internal
 */
export interface EventSink<R> {
  readonly runId: string
  readonly clock: Clock.Clock
  /** The turn events are stamped with: the turn in progress (between turns, the last one). */
  turn: number
  /** Synchronous sinks: the stream of `runStream`, then the plugins' `observe` hooks. */
  readonly sinks: ReadonlyArray<(event: AgentEvent.AgentEvent) => void>
  /** The plugins' `onEvent` hooks. */
  readonly listeners: ReadonlyArray<(event: AgentEvent.AgentEvent) => Effect.Effect<void, never, R>>
  /** Whether anything receives the events. */
  readonly observed: boolean
}

/**
 * A sink over synchronous sinks and `onEvent` hooks.
 *
 * @internal
 */
export const make = <R>(
  runId: string,
  clock: Clock.Clock,
  turn: number,
  sinks: ReadonlyArray<(event: AgentEvent.AgentEvent) => void>,
  listeners: ReadonlyArray<(event: AgentEvent.AgentEvent) => Effect.Effect<void, never, R>>
): EventSink<R> => ({ runId, clock, turn, sinks, listeners, observed: sinks.length > 0 || listeners.length > 0 })

/**
 * The time by the run's clock.
 *
 * @internal
 */
export const now = <R>(sink: EventSink<R>): number => sink.clock.currentTimeMillisUnsafe()

/** Delivers an event: the synchronous sinks at once, then the `onEvent` hooks. Every event takes this path. */
const publish = <R>(sink: EventSink<R>, event: AgentEvent.AgentEvent): Effect.Effect<void, never, R> => {
  for (const receive of sink.sinks) receive(event)
  const listeners = sink.listeners
  if (listeners.length === 0) return Effect.void
  if (listeners.length === 1) return listeners[0]!(event)
  return Effect.forEach(listeners, (listener) => listener(event), { discard: true })
}

/**
 * Emits an event body, stamped with the run id, the turn and the time.
 *
 * @internal
 */
export const emit = <R>(sink: EventSink<R>, input: AgentEvent.Input): Effect.Effect<void, never, R> =>
  sink.observed
    ? publish(sink, { ...input, runId: sink.runId, turn: sink.turn, timestamp: now(sink) })
    : Effect.void

// -----------------------------------------------------------------------------
// The events of every turn, written whole
// -----------------------------------------------------------------------------

/** @internal */
export const turnStarted = <R>(sink: EventSink<R>): Step.Step<void, never, R> =>
  sink.observed
    ? Step.ofVoid(publish(sink, { _tag: "TurnStart", runId: sink.runId, turn: sink.turn, timestamp: now(sink) }))
    : Step.done

/** @internal */
export const messageStarted = <R>(sink: EventSink<R>): Step.Step<void, never, R> =>
  sink.observed
    ? Step.ofVoid(publish(sink, {
      _tag: "MessageStart",
      role: "assistant",
      runId: sink.runId,
      turn: sink.turn,
      timestamp: now(sink)
    }))
    : Step.done

/**
 * The `MessageUpdate`s of one chunk of a streamed reply: the parts of a chunk
 * arrived together, so their events share the time. `onEvent` hooks that
 * answer with a finished effect (most answer `Effect.void` to the events they
 * ignore) are passed over here; the fiber runs only the rest.
 *
 * @internal
 */
export const messageUpdates = <R>(
  sink: EventSink<R>,
  deltas: ReadonlyArray<AgentEvent.Delta>
): Effect.Effect<void, never, R> => {
  const timestamp = now(sink)
  let i = 0
  const next = (): Effect.Effect<void, never, R> => {
    while (i < deltas.length) {
      const event: AgentEvent.AgentEvent = {
        _tag: "MessageUpdate",
        runId: sink.runId,
        turn: sink.turn,
        timestamp,
        delta: deltas[i++]!
      }
      const effect = publish(sink, event)
      if (!Step.isSucceeded(effect)) return effect
    }
    return Effect.void
  }
  const first = next()
  if (i === deltas.length) return first
  return Effect.andThen(first, Effect.whileLoop({ while: () => i < deltas.length, body: next, step: constVoid }))
}

/** The end of an assistant message (other messages end through {@link emit}). @internal */
export const messageEnded = <R>(sink: EventSink<R>, message: Message.AssistantMessage): Step.Step<void, never, R> =>
  sink.observed
    ? Step.ofVoid(publish(sink, {
      _tag: "MessageEnd",
      message,
      runId: sink.runId,
      turn: sink.turn,
      timestamp: now(sink)
    }))
    : Step.done

/** @internal */
export const toolStarted = <R>(
  sink: EventSink<R>,
  toolCallId: string,
  toolName: string,
  params: unknown,
  timestamp: number
): Step.Step<void, never, R> =>
  sink.observed
    ? Step.ofVoid(publish(sink, {
      _tag: "ToolExecutionStart",
      toolCallId,
      toolName,
      params,
      runId: sink.runId,
      turn: sink.turn,
      timestamp
    }))
    : Step.done

/** @internal */
export const toolEnded = <R>(
  sink: EventSink<R>,
  result: Message.ToolResultMessage,
  startedAt: number,
  terminate: boolean,
  defect: string | undefined
): Step.Step<void, never, R> => {
  if (!sink.observed) return Step.done
  const endedAt = now(sink)
  const event: AgentEvent.Of<"ToolExecutionEnd"> = {
    _tag: "ToolExecutionEnd",
    toolCallId: result.toolCallId,
    toolName: result.toolName,
    result,
    durationMs: endedAt - startedAt,
    terminate,
    runId: sink.runId,
    turn: sink.turn,
    timestamp: endedAt
  }
  return Step.ofVoid(publish(sink, defect === undefined ? event : { ...event, defect }))
}

/**
 * `TurnEnd`, then `BudgetSnapshot` with the figures at the turn's end (one clock read for both).
 *
 * @internal
 */
export const turnEnded = <R>(
  sink: EventSink<R>,
  message: Message.AssistantMessage,
  toolResults: ReadonlyArray<Message.ToolResultMessage>,
  progress: Progress.Progress
): Step.Step<void, never, R> => {
  if (!sink.observed) return Step.done
  const at = now(sink)
  const { runId, turn } = sink
  const snapshot = () =>
    publish(sink, { _tag: "BudgetSnapshot", figures: Progress.figures(progress, at), runId, turn, timestamp: at })
  const ended = publish(sink, { _tag: "TurnEnd", message, toolResults, runId, turn, timestamp: at })
  return Step.isSucceeded(ended) ? Step.ofVoid(snapshot()) : Effect.andThen(ended, Effect.suspend(snapshot))
}
