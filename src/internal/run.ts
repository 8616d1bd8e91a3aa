/**
 * The live state of one run, shared by the loop and tool execution: the
 * transcript and its `Prompt` form (kept in step, each message converted
 * once when appended), counters, queues, plugins and the event fan-out.
 *
 * @internal
 */
import { type Clock, type Context, Deferred, Effect, Exit } from "effect"
import { constVoid } from "effect/Function"
import type { LanguageModel, Prompt } from "effect/ai"
import type { AgentConfig } from "../AgentConfig.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Approvals from "../Approvals.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as RunState from "../RunState.ts"
import type * as Steering from "../Steering.ts"
import type * as ToolRegistry from "../ToolRegistry.ts"
import * as Settled from "./settled.ts"

/**
 * The hooks a plugin may have that the loop calls in order.
 *
 * @internal
 */
export type HookName =
  | "beforeModelCall"
  | "afterTurn"
  | "beforeToolCall"
  | "afterToolCall"
  | "transformContext"
  | "steering"
  | "followUp"

/**
 * The plugins with each hook.
 *
 * @internal
 */
export const hookLists = <R>(plugins: ReadonlyArray<Hooks.Plugin<R>>): Run<R>["hooks"] => {
  const having = (name: HookName) => plugins.filter((plugin) => plugin[name] !== undefined)
  return {
    beforeModelCall: having("beforeModelCall"),
    afterTurn: having("afterTurn"),
    beforeToolCall: having("beforeToolCall"),
    afterToolCall: having("afterToolCall"),
    transformContext: having("transformContext"),
    steering: having("steering"),
    followUp: having("followUp")
  }
}

/**
 * A run in progress.
 *
 * @internal
 */
export interface Run<R> {
  readonly runId: string
  readonly config: AgentConfig
  /** The limits `BudgetSnapshot` reports (from the config, made once). */
  readonly budgetLimits: AgentEvent.BudgetFigures["limits"]
  readonly system: string | undefined
  /** The transcript; append with {@link append}. */
  readonly messages: Array<Message.Message>
  /** The transcript's `Prompt` messages, system prompt first; custom messages have none. */
  readonly prompt: Array<Prompt.Message>
  /** `Prompt` forms of messages in requests a transform rebuilt (made on first use). */
  converted: Map<Message.Message, Prompt.Message> | undefined
  /** Index of the first message this run added. */
  readonly firstNew: number
  /** Completed turns. */
  turn: number
  /** The turn events are stamped with. */
  eventTurn: number
  usage: Message.Usage
  readonly elapsedBefore: number
  readonly startedAt: number
  readonly clock: Clock.Clock
  readonly steeringQueue: Array<Message.Message>
  readonly followUpQueue: Array<Message.Message>
  readonly pendingApprovals: Map<string, RunState.PendingApproval>
  wrapUpRequested: boolean
  readonly plugins: ReadonlyArray<Hooks.Plugin<R>>
  /** The plugins that have each hook, in order (looked up once per run, not per call). */
  readonly hooks: { readonly [K in HookName]: ReadonlyArray<Hooks.Plugin<R>> }
  /** The model, looked up once per run. */
  readonly model: LanguageModel.LanguageModel
  /** The `onEvent` hooks. */
  readonly listeners: ReadonlyArray<(event: AgentEvent.AgentEvent) => Effect.Effect<void, never, R>>
  /** Synchronous event sinks: the stream of `runStream`, then the plugins' `observe` hooks. */
  readonly sinks: ReadonlyArray<(event: AgentEvent.AgentEvent) => void>
  readonly registry: ToolRegistry.Service
  readonly approvals: Approvals.Service | undefined
  readonly steering: Steering.Service | undefined
  /** Calls per tool name so far (per-run quotas). */
  readonly callsPerTool: Map<string, number>
  /** Results of the batch in progress, by call id (saved in a mid-batch snapshot, kept if the run is interrupted). */
  readonly batchResults: Map<string, Message.ToolResultMessage>
  /** Calls of the batch in progress whose handler has started and not finished. */
  readonly startedCalls: Set<string>
  /** From a state saved mid-batch: results the batch had produced, and calls that had started. */
  readonly restored: {
    readonly results: Map<string, Message.ToolResultMessage>
    readonly started: Set<string>
  }
  /** The hook context, bound to the run's services. */
  context: Hooks.Context
  /** The run's services (those its hooks need). */
  readonly services: Context.Context<R>
}

/**
 * Appends a message to the transcript and its `Prompt` form.
 *
 * @internal
 */
export const append = <R>(run: Run<R>, message: Message.Message): void => {
  run.messages.push(message)
  const converted = Message.toPromptMessage(message)
  if (converted !== undefined) run.prompt.push(converted)
}

/**
 * The `Prompt` form of a message (converted once, then cached).
 *
 * @internal
 */
export const promptMessage = <R>(run: Run<R>, message: Message.Message): Prompt.Message | undefined => {
  const cache = run.converted ??= new Map()
  let converted = cache.get(message)
  if (converted === undefined) {
    converted = Message.toPromptMessage(message)
    if (converted !== undefined) cache.set(message, converted)
  }
  return converted
}

/**
 * Wall time used by the run so far, across continuations.
 *
 * @internal
 */
export const elapsedMs = <R>(run: Run<R>, at: number = now(run)): number => run.elapsedBefore + (at - run.startedAt)

/**
 * Delivers an event to the sinks and the `onEvent` hooks.
 *
 * @internal
 */
export const emit = <R>(run: Run<R>, event: AgentEvent.AgentEvent): Effect.Effect<void, never, R> => {
  if (event._tag === "WrapUpRequested") run.wrapUpRequested = true
  for (const sink of run.sinks) sink(event)
  const listeners = run.listeners
  if (listeners.length === 0) return Effect.void
  if (listeners.length === 1) return listeners[0]!(event)
  return Effect.forEach(listeners, (listener) => listener(event), { discard: true })
}

/**
 * Delivers an event from one of the loop's generators (`yield* Run.deliver(run, event)`):
 * an event no `onEvent` hook waits on (the sinks are synchronous, and most
 * hooks answer `Effect.void`) is settled at once.
 *
 * @internal
 */
export const deliver = <R>(
  run: Run<R>,
  event: AgentEvent.AgentEvent
): Effect.Effect<void, never, R> | Settled.Settled<undefined> => {
  const effect = emit(run, event)
  return isFinished(effect) ? Settled.undefined_ : effect
}

/**
 * Delivers events in order. Hooks that answer with a finished effect (most
 * answer `Effect.void` to the events they ignore) are passed over here; the
 * fiber runs only the rest. It runs for every chunk of a streamed reply.
 *
 * @internal
 */
export const emitAll = <R>(run: Run<R>, events: ReadonlyArray<AgentEvent.AgentEvent>): Effect.Effect<void, never, R> => {
  let i = 0
  const next = (): Effect.Effect<void, never, R> => {
    while (i < events.length) {
      const effect = emit(run, events[i++]!)
      if (!isFinished(effect)) return effect
    }
    return Effect.void
  }
  const first = next()
  if (i === events.length) return first
  return Effect.andThen(first, Effect.whileLoop({ while: () => i < events.length, body: next, step: constVoid }))
}

const isFinished = (effect: Effect.Effect<void, never, unknown>): boolean => Exit.isExit(effect) && Exit.isSuccess(effect)

/**
 * Whether anything receives the run's events (else the loop builds none).
 *
 * @internal
 */
export const observed = <R>(run: Run<R>): boolean => run.listeners.length > 0 || run.sinks.length > 0

/**
 * Stamps an event body with the run id, turn and time, and delivers it.
 *
 * @internal
 */
export const emitInput = <R>(run: Run<R>, input: AgentEvent.Input): Effect.Effect<void, never, R> => {
  if (!observed(run)) {
    // nobody listens: build nothing
    if (input._tag === "WrapUpRequested") run.wrapUpRequested = true
    return Effect.void
  }
  return emit(run, stamp(run, input))
}

/**
 * Stamps an event body with the run id, turn and time. The events of every
 * turn (turn, message and tool execution start and end, the budget snapshot)
 * are written whole where they happen instead: a spread that sees every
 * kind of event is megamorphic in V8, about 130 ns an event more than a
 * literal.
 *
 * @internal
 */
export const stamp = <R>(run: Run<R>, input: AgentEvent.Input): AgentEvent.AgentEvent => ({
  ...input,
  runId: run.runId,
  turn: run.eventTurn,
  timestamp: now(run)
})

/**
 * The reason the run was cancelled through its `Steering`, if it was; for
 * `yield*` in the loop's generators, settled at once unless it was.
 *
 * @internal
 */
export const cancelReason = <R>(run: Run<R>): Effect.Effect<string> | Settled.Settled<undefined> =>
  run.steering !== undefined && Deferred.isDoneUnsafe(run.steering.cancelled)
    ? Deferred.await(run.steering.cancelled)
    : Settled.undefined_

/**
 * Races an effect with the run's cancellation: when the run is cancelled
 * first, the effect is interrupted and `onCancel` gives the value.
 *
 * @internal
 */
export const raceCancel = <R, A, E, R2>(
  run: Run<R>,
  effect: Effect.Effect<A, E, R2>,
  onCancel: (reason: string) => A
): Effect.Effect<A, E, R2> =>
  run.steering === undefined
    ? effect
    : Effect.raceFirst(effect, Effect.map(Deferred.await(run.steering.cancelled), onCancel))

/**
 * The run's state as a checkpoint saves it.
 *
 * @internal
 */
export const snapshot = <R>(run: Run<R>): Effect.Effect<RunState.RunState, never, R> =>
  Effect.map(
    Effect.forEach(run.plugins, (plugin) =>
      plugin.state === undefined
        ? Effect.succeed(undefined)
        : Effect.map(plugin.state.save, (saved) => [plugin.name, saved] as const)),
    (saved): RunState.RunState => {
      const state: RunState.RunState = {
        version: RunState.version,
        runId: run.runId,
        messages: run.messages.slice(),
        turn: run.turn,
        usage: run.usage,
        elapsedMs: elapsedMs(run),
        steering: run.steeringQueue.slice(),
        followUps: run.followUpQueue.slice(),
        pendingApprovals: Array.from(run.pendingApprovals.values()),
        partialResults: [
          ...Array.from(run.restored.results.values()).filter((result) => !run.batchResults.has(result.toolCallId)),
          ...run.batchResults.values()
        ],
        startedCalls: [
          ...Array.from(run.restored.started).filter((id) => !run.batchResults.has(id) && !run.startedCalls.has(id)),
          ...run.startedCalls
        ],
        wrapUpRequested: run.wrapUpRequested,
        pluginState: Object.fromEntries(saved.filter((entry) => entry !== undefined))
      }
      return run.system === undefined ? state : { ...state, system: run.system }
    }
  )

/**
 * Current time from the run's clock.
 *
 * @internal
 */
export const now = <R>(run: Run<R>): number => run.clock.currentTimeMillisUnsafe()
