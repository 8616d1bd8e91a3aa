/**
 * The live state of one run, shared by the loop and tool execution: the
 * transcript and its `Prompt` form (kept in step, each message converted
 * once when appended), counters, queues, plugins and the event fan-out.
 *
 * @internal
 */
import { type Clock, type Context, Deferred, Effect, Exit, Fiber } from "effect"
import { constVoid } from "effect/Function"
import { AiError, type LanguageModel, type Prompt, type Toolkit } from "effect/ai"
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
  /** The registry's definitions as the toolkit `LanguageModel` sends to the model. */
  readonly toolkit: Toolkit.WithHandler<{}>
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
  /**
   * Completed when the wall-clock budget runs out (by one timer per run, see
   * {@link withDeadline}); the model stream, tool calls and approval waits
   * race it. Absent without a wall-clock budget.
   */
  readonly deadline: Deferred.Deferred<void> | undefined
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
 * Why a run stops before its work is done: a cancel through its `Steering`
 * (with the reason), or its wall-clock deadline.
 *
 * @internal
 */
export type Stop =
  | { readonly _tag: "Cancel"; readonly reason: string }
  | { readonly _tag: "Deadline" }

const cancelStop = (reason: string): Stop => ({ _tag: "Cancel", reason })

const deadlineStop: Stop = { _tag: "Deadline" }

const deadlineReached = Settled.make(deadlineStop)

/**
 * Why the run stops, if it does: for `yield*` in the loop's generators,
 * settled at once unless it was cancelled.
 *
 * @internal
 */
export const stopReason = <R>(run: Run<R>): Effect.Effect<Stop> | Settled.Settled<Stop | undefined> => {
  if (run.steering !== undefined && Deferred.isDoneUnsafe(run.steering.cancelled)) {
    return Effect.map(Deferred.await(run.steering.cancelled), cancelStop)
  }
  return run.deadline !== undefined && Deferred.isDoneUnsafe(run.deadline) ? deadlineReached : Settled.undefined_
}

/**
 * Races an effect with the run's cancellation and its deadline: when either
 * comes first, the effect is interrupted (its finalizers run) and `onStop`
 * gives the value. Nothing is raced when the run can be neither cancelled
 * nor run out of time.
 *
 * @internal
 */
export const raceStop = <R, A, E, R2>(
  run: Run<R>,
  effect: Effect.Effect<A, E, R2>,
  onStop: (stop: Stop) => A
): Effect.Effect<A, E, R2> => {
  let raced = effect
  if (run.steering !== undefined) {
    const { cancelled } = run.steering
    raced = Effect.raceFirst(raced, Effect.map(Deferred.await(cancelled), (reason) => onStop(cancelStop(reason))))
  }
  if (run.deadline !== undefined) {
    raced = Effect.raceFirst(raced, Effect.map(Deferred.await(run.deadline), () => onStop(deadlineStop)))
  }
  return raced
}

/**
 * The text of a result for a call a stop cut short or never let start.
 *
 * @internal
 */
export const stopText = <R>(run: Run<R>, stop: Stop): string =>
  stop._tag === "Cancel"
    ? `Tool call cancelled: ${stop.reason}`
    : `Tool call stopped: the run's wall-clock budget of ${run.config.budgets.wallClock} ms ran out.`

/**
 * The `details` of such a result.
 *
 * @internal
 */
export const stopDetails = (stop: Stop): unknown =>
  stop._tag === "Cancel" ? { kind: "cancelled" } : { kind: "budgetExceeded", budget: "wallClock" }

/**
 * Runs `effect` with the run's deadline armed: one fiber sleeps until the
 * wall-clock budget runs out (counting the time a continued run had used
 * before) and completes {@link Run.deadline}; it is stopped when `effect`
 * ends. Nothing is started without a wall-clock budget.
 *
 * @internal
 */
export const withDeadline = <R, A, E, R2>(run: Run<R>, effect: Effect.Effect<A, E, R2>): Effect.Effect<A, E, R2> => {
  const { deadline } = run
  const limit = run.config.budgets.wallClock
  if (deadline === undefined || limit === null) return effect
  const remaining = limit - run.elapsedBefore
  if (remaining <= 0) {
    Deferred.doneUnsafe(deadline, Exit.void)
    return effect
  }
  const timer = Effect.andThen(Effect.sleep(remaining), Deferred.succeed(deadline, undefined))
  return Effect.flatMap(Effect.forkChild(timer), (fiber) => Effect.ensuring(effect, Fiber.interrupt(fiber)))
}

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

/**
 * The registry's tools as the toolkit `LanguageModel.streamText` takes: it
 * sends their definitions to the model. The loop runs calls itself
 * (`disableToolCallResolution`), so this toolkit's `handle` is never used.
 *
 * @internal
 */
export const toolkitOf = (registry: ToolRegistry.Service): Toolkit.WithHandler<{}> => ({
  tools: registry.definitions,
  handle: (name) =>
    Effect.fail(AiError.make({
      module: "effect-agent",
      method: "toolkit.handle",
      reason: new AiError.ToolConfigurationError({
        toolName: String(name),
        description: "effect-agent runs tool calls itself: call the tool through ToolRegistry.invoke"
      })
    }))
})
