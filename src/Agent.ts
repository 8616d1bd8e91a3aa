/**
 * The agent loop: call the model with the transcript and the tools, run the
 * tool calls it asks for, append their results, and repeat until the model
 * stops, a tool ends the run, or a guard does.
 *
 * ```
 * AgentStart
 * loop (outer: follow-ups)
 *   loop (inner: while the model asks for tools, or steering is pending)
 *     deliver steering → guards (beforeModelCall) → TurnStart
 *     transformContext (request only) → model stream → MessageStart / MessageUpdate… / MessageEnd
 *     tool batch → ToolExecutionStart / Update / End → results appended in the calls' order
 *     TurnEnd → BudgetSnapshot → afterTurn hooks → stop if the batch voted terminate
 *   natural stop → poll follow-ups; none → done
 * AgentEnd
 * ```
 *
 * Outcomes are values (`RunResult.outcome`); a run fails only when it cannot
 * go on (`AgentError`). Interrupting the run's fiber interrupts its tools and
 * still delivers `AgentEnd` to observers.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { Agent, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const Add = Tool.make("add", {
 *   parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
 *   success: Schema.Finite
 * })
 * const Tools = Toolkit.make(Add)
 *
 * const program = Agent.run({ prompt: "What is 1 + 2?" }).pipe(
 *   Effect.provide(ToolRegistry.layer(Tools).pipe(
 *     Layer.provide(Tools.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) }))
 *   )),
 *   Effect.provide(ScriptedModel.layer([
 *     { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
 *     { text: "1 + 2 = 3" }
 *   ]))
 * )
 * ```
 *
 * @since 0.1.0
 */
import { Cause, Clock, type Context, Deferred, Effect, Exit, Option, Predicate, Queue, Stream } from "effect"
import { type AiError, LanguageModel, Prompt } from "effect/ai"
import * as AgentConfig from "./AgentConfig.ts"
import { type AgentError, InvalidContinuation, ModelError, ToolFatalError } from "./AgentError.ts"
import type * as AgentEvent from "./AgentEvent.ts"
import * as Approvals from "./Approvals.ts"
import * as Guards from "./Guards.ts"
import type * as Hooks from "./Hooks.ts"
import * as Message from "./Message.ts"
import * as Outcome from "./Outcome.ts"
import * as RunState from "./RunState.ts"
import * as Steering from "./Steering.ts"
import * as ToolExecution from "./ToolExecution.ts"
import { ToolRegistry } from "./ToolRegistry.ts"
import { AssistantBuilder } from "./internal/assistant.ts"
import * as Run from "./internal/run.ts"
import * as Settled from "./internal/settled.ts"

/**
 * What starts a run.
 *
 * @since 0.1.0
 */
export interface RunOptions<R = never> extends ContinueOptions<R> {
  /** The task: text, a message, or messages. */
  readonly prompt: string | Message.Message | ReadonlyArray<Message.Message>
  /** The system prompt. */
  readonly system?: string | undefined
  /** The run id (a random UUID by default). */
  readonly runId?: string | undefined
}

/**
 * What a continued run can change.
 *
 * @since 0.1.0
 */
export interface ContinueOptions<R = never> {
  /** Settings; defaults for anything left out. Validated by the run. */
  readonly config?: AgentConfig.Input | undefined
  /** Plugins, after the guards the config installs. */
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /** The steering handle (else the `Steering` service, if provided). */
  readonly steering?: Steering.Service | undefined
  /** Events delivered right after `AgentStart` (a resumed session announces itself with them). */
  readonly announce?: ReadonlyArray<AgentEvent.Input> | undefined
}

/**
 * What every run needs: a `LanguageModel` and a `ToolRegistry`.
 *
 * @since 0.1.0
 */
export type Requirements = LanguageModel.LanguageModel | ToolRegistry

type Sink = (event: AgentEvent.AgentEvent) => void

// -----------------------------------------------------------------------------
// Setting up a run
// -----------------------------------------------------------------------------

const promptMessages = (prompt: RunOptions["prompt"]): ReadonlyArray<Message.Message> =>
  typeof prompt === "string" ? [Message.user(prompt)] : "role" in prompt ? [prompt] : prompt

const resolvePlugins = <R>(
  inputs: ReadonlyArray<Hooks.PluginInput<R>>
): Effect.Effect<ReadonlyArray<Hooks.Plugin<R>>, never, R> =>
  Effect.forEach(inputs, (input) => Effect.isEffect(input) ? input : Effect.succeed(input))

interface Setup<R> {
  readonly state: RunState.RunState
  /** Index of the first message the run reports as its own. */
  readonly firstNew: number
  readonly options: ContinueOptions<R>
  readonly sinks: ReadonlyArray<Sink>
}

const makeRun = Effect.fnUntraced(function*<R>(setup: Setup<R>) {
  const { options, state } = setup
  const config = yield* AgentConfig.make(options.config)
  const registry = yield* ToolRegistry
  const approvals = Option.getOrUndefined(yield* Effect.serviceOption(Approvals.Approvals))
  const steering = options.steering ?? Option.getOrUndefined(yield* Effect.serviceOption(Steering.Steering))
  const guards = yield* resolvePlugins(Guards.fromConfig(config))
  const userPlugins = yield* resolvePlugins(options.plugins ?? [])
  const plugins: ReadonlyArray<Hooks.Plugin<R>> = [...guards, ...userPlugins]
  const clock = yield* Clock.Clock
  const services = yield* Effect.context<R>()
  const listeners: Array<(event: AgentEvent.AgentEvent) => Effect.Effect<void, never, R>> = []
  const sinks = setup.sinks.slice()
  for (const plugin of plugins) {
    const { observe, onEvent } = plugin
    // `run.context` is set below, before the first event.
    if (observe !== undefined) sinks.push((event) => observe(event, run.context))
    if (onEvent !== undefined) listeners.push((event) => onEvent(event, run.context))
  }
  const run: Run.Run<R> = {
    runId: state.runId,
    config,
    budgetLimits: { turns: config.maxTurns, ...config.budgets },
    system: state.system,
    messages: [],
    prompt: state.system === undefined ? [] : [Prompt.makeMessage("system", { content: state.system })],
    converted: undefined,
    firstNew: setup.firstNew,
    turn: state.turn,
    eventTurn: state.turn,
    usage: state.usage,
    elapsedBefore: state.elapsedMs,
    startedAt: clock.currentTimeMillisUnsafe(),
    clock,
    steeringQueue: state.steering.slice(),
    followUpQueue: state.followUps.slice(),
    pendingApprovals: new Map(),
    wrapUpRequested: state.wrapUpRequested,
    plugins,
    hooks: Run.hookLists(plugins),
    model: yield* LanguageModel.LanguageModel,
    listeners,
    sinks,
    registry,
    toolkit: Run.toolkitOf(registry),
    approvals,
    steering,
    callsPerTool: new Map(),
    batchResults: new Map(),
    startedCalls: new Set(),
    restored: {
      results: new Map(state.partialResults.map((result) => [result.toolCallId, result])),
      started: new Set(state.startedCalls)
    },
    deadline: config.budgets.wallClock === null ? undefined : Deferred.makeUnsafe<void>(),
    context: undefined!,
    services
  }
  for (const message of state.messages) Run.append(run, message)
  run.context = new HookContext(run, services)
  for (const plugin of plugins) {
    const saved = state.pluginState[plugin.name]
    if (plugin.state !== undefined && saved !== undefined) yield* plugin.state.restore(saved, run.context)
  }
  return run
})

/**
 * The hook context: a live view of the run. A class, not a literal with getters: a literal's
 * accessors are set up anew for every run, and cost more than the rest of the view.
 */
class HookContext<R> implements Hooks.Context {
  readonly emit: Hooks.Context["emit"]
  private readonly run: Run.Run<R>
  private readonly services: Context.Context<R>
  constructor(run: Run.Run<R>, services: Context.Context<R>) {
    this.run = run
    this.services = services
    this.emit = (input) => Effect.provideContext(Run.emitInput(run, input), services)
  }
  get runId() {
    return this.run.runId
  }
  get turn() {
    return this.run.turn
  }
  get messages() {
    return this.run.messages
  }
  get usage() {
    return this.run.usage
  }
  get elapsedMs() {
    return Run.elapsedMs(this.run)
  }
  get config() {
    return this.run.config
  }
  get system() {
    return this.run.system
  }
  get wrapUpRequested() {
    return this.run.wrapUpRequested
  }
  get snapshot() {
    return Effect.provideContext(Run.snapshot(this.run), this.services)
  }
}

// -----------------------------------------------------------------------------
// One turn
// -----------------------------------------------------------------------------

// The request holds the transcript's Prompt messages as they are, not a copy: the loop appends
// to them only between model calls, never while one runs (copying them would cost every turn
// the length of the history).
const transcriptPrompt = <R>(run: Run.Run<R>): Prompt.Prompt => Prompt.fromMessages(run.prompt)

const transformedPrompt = Effect.fnUntraced(function*<R>(run: Run.Run<R>) {
  let messages: ReadonlyArray<Message.Message> = run.messages
  for (const plugin of run.hooks.transformContext) {
    if (plugin.transformContext === undefined) continue
    const out = yield* plugin.transformContext(messages, run.context)
    const next = "messages" in out ? out.messages : out
    if (next === messages) continue
    yield* Run.emitInput(
      run,
      "messages" in out
        ? {
          _tag: "ContextTransformed",
          plugin: plugin.name,
          messagesBefore: messages.length,
          messagesAfter: next.length,
          tokensBefore: out.tokensBefore,
          tokensAfter: out.tokensAfter
        }
        : { _tag: "ContextTransformed", plugin: plugin.name, messagesBefore: messages.length, messagesAfter: next.length }
    )
    messages = next
  }
  if (messages === run.messages) return transcriptPrompt(run)
  const request: Array<Prompt.Message> = run.system === undefined ? [] : [run.prompt[0]!]
  for (const message of messages) {
    const converted = Run.promptMessage(run, message)
    if (converted !== undefined) request.push(converted)
  }
  return Prompt.fromMessages(request)
})

const modelError = (turn: number) => (error: AiError.AiError) => ModelError.fromAiError(error, turn)

// The steps of a turn below are plain generators, delegated to with `yield*` from `turn`'s: each
// would otherwise cost its own Effect (a suspend, an iterator and a return step) every turn.

/** Streams one model reply, emitting its events; `stopped` when a cancel or the deadline cut it. */
function* streamReply<R>(run: Run.Run<R>, prompt: Prompt.Prompt) {
  const builder = new AssistantBuilder()
  const listened = Run.observed(run)
  if (listened) {
    yield* Run.deliver(run, {
      _tag: "MessageStart",
      role: "assistant",
      runId: run.runId,
      turn: run.eventTurn,
      timestamp: Run.now(run)
    })
  }
  const stream = run.model.streamText({
    prompt,
    toolkit: run.toolkit,
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  })
  const consume = Stream.runForEachArray(stream, (parts) => {
    let events: Array<AgentEvent.AgentEvent> | undefined
    // The parts of one chunk arrived together: their events share the time.
    const timestamp = listened ? Run.now(run) : 0
    for (const part of parts) {
      const delta = builder.push(part)
      if (delta === undefined || !listened) continue
      const event: AgentEvent.AgentEvent = {
        _tag: "MessageUpdate",
        runId: run.runId,
        turn: run.eventTurn,
        timestamp,
        delta
      }
      if (run.listeners.length === 0) Run.emit(run, event)
      else (events ??= []).push(event)
    }
    return events === undefined ? Effect.void : Run.emitAll(run, events)
  })
  // The stream ends with `void`, a stop with its reason: no step to map the one to `undefined`.
  const ended: void | Run.Stop = yield* Run.raceStop(
    run,
    Effect.mapError(consume, modelError(run.eventTurn)),
    (stop): void | Run.Stop => stop
  )
  const stop = ended === undefined ? undefined : ended
  // What streamed before a stop is kept; its complete tool calls are answered by the batch.
  const message = builder.build(stop !== undefined)
  if (listened) {
    const { runId, eventTurn } = run
    yield* Run.deliver(run, { _tag: "MessageEnd", message, runId, turn: eventTurn, timestamp: Run.now(run) })
  }
  return { message, stopped: stop }
}

type Step =
  | { readonly _tag: "Continue"; readonly hasToolCalls: boolean }
  | { readonly _tag: "End"; readonly outcome: Outcome.Outcome }

const end = (outcome: Outcome.Outcome): Step => ({ _tag: "End", outcome })
const proceed = (hasToolCalls: boolean): Step => ({ _tag: "Continue", hasToolCalls })

/** Whether a hook answered with a finished `Proceed`. */
const isProceeding = (effect: Effect.Effect<Hooks.Control, never, unknown>): boolean =>
  Exit.isExit(effect) && Exit.isSuccess(effect) && Predicate.isTagged(effect.value, "Proceed")

type ControlHook<R> = (plugin: Hooks.Plugin<R>) => Effect.Effect<Hooks.Control, never, R> | undefined

/**
 * Runs a control hook of each plugin in order: the first `Stop` ends the run,
 * an `Inject` appends its messages. Hooks that answer with a finished
 * `Proceed` (an Exit, as the built-in guards do on most turns) are read here,
 * without a fiber step; when all do, the answer is settled at once.
 */
const runControl = <R>(
  run: Run.Run<R>,
  plugins: ReadonlyArray<Hooks.Plugin<R>>,
  control: ControlHook<R>
) => {
  for (let i = 0; i < plugins.length; i++) {
    const effect = control(plugins[i]!)
    if (effect === undefined || isProceeding(effect)) continue
    return controlFrom(run, plugins, control, i, effect)
  }
  return Settled.undefined_
}

function* controlFrom<R>(
  run: Run.Run<R>,
  plugins: ReadonlyArray<Hooks.Plugin<R>>,
  control: ControlHook<R>,
  start: number,
  first: Effect.Effect<Hooks.Control, never, R>
) {
  for (let i = start; i < plugins.length; i++) {
    const effect = i === start ? first : control(plugins[i]!)
    if (effect === undefined || isProceeding(effect)) continue
    const decision = yield* effect
    if (decision._tag === "Stop") return decision.outcome
    if (decision._tag === "Inject") yield* appendInjected(run, decision.messages)
  }
  return undefined
}

const appendInjected = <R>(run: Run.Run<R>, messages: ReadonlyArray<Message.Message>): Effect.Effect<void, never, R> =>
  Effect.forEach(messages, (message) => {
    Run.append(run, message)
    return Run.emitInput(run, { _tag: "MessageEnd", message })
  }, { discard: true })

const budgetFigures = <R>(run: Run.Run<R>, at: number): AgentEvent.BudgetFigures => ({
  turns: run.turn,
  usage: run.usage,
  elapsedMs: Run.elapsedMs(run, at),
  limits: run.budgetLimits
})

const appendResults = <R>(run: Run.Run<R>, results: ReadonlyArray<Message.ToolResultMessage>): void => {
  for (const result of results) Run.append(run, result)
}

/**
 * How a stop ends the run: a cancel with `Cancelled`; the deadline with
 * `BudgetExceeded`, announced as the budget guard announces it.
 */
function* stopped<R>(run: Run.Run<R>, stop: Run.Stop) {
  if (stop._tag === "Cancel") return Outcome.cancelled(stop.reason)
  const limit = run.config.budgets.wallClock ?? 0
  const used = Run.elapsedMs(run)
  yield* Run.emitInput(run, {
    _tag: "GuardTripped",
    guard: "budget",
    action: "stop",
    detail: `the wallClock budget is exhausted: ${used} of ${limit}`,
    figures: { limit, used }
  })
  return Outcome.budgetExceeded("wallClock", limit, used)
}

/**
 * Ends a turn whose reply and results are in the transcript: counts it, emits
 * its events, runs the `afterTurn` hooks and decides whether the run goes on.
 */
function* endTurn<R>(
  run: Run.Run<R>,
  message: Message.AssistantMessage,
  batch: ToolExecution.BatchResult,
  stoppedReply: Run.Stop | undefined
) {
  run.turn++
  if (Run.observed(run)) {
    // the snapshot is of the turn's end: one clock read for both
    const at = Run.now(run)
    const { runId, eventTurn } = run
    const { results } = batch
    yield* Run.deliver(run, { _tag: "TurnEnd", message, toolResults: results, runId, turn: eventTurn, timestamp: at })
    const figures = budgetFigures(run, at)
    yield* Run.deliver(run, { _tag: "BudgetSnapshot", figures, runId, turn: eventTurn, timestamp: at })
  }
  const after = yield* runControl(run, run.hooks.afterTurn, (plugin) =>
    plugin.afterTurn?.({ message, toolResults: batch.results, terminated: batch.terminate }, run.context))
  const stop = stoppedReply ?? (yield* Run.stopReason(run))
  if (stop !== undefined) return end(yield* stopped(run, stop))
  if (batch.terminate) return end(Outcome.terminated)
  if (after !== undefined) return end(after)
  return proceed(Message.hasToolCalls(message))
}

const noBatch: ToolExecution.BatchResult = { results: [], terminate: false }

/**
 * Finishes the turn a continued state stopped in: runs the calls of its last
 * assistant message that have no result yet, then ends that turn (it counts:
 * its model call was made).
 */
const finishOpenTurn = Effect.fnUntraced(function*<R>(run: Run.Run<R>) {
  const { calls: open, message } = openCalls(run.messages)
  if (message === undefined || open.length === 0) return proceed(false)
  run.eventTurn = run.turn + 1
  const batch = yield* ToolExecution.executeBatch(run, open)
  appendResults(run, batch.results)
  return yield* endTurn(run, message, batch, undefined)
})

/** One turn: guards, the model call, the tool batch, the turn's events and hooks. */
const turn = Effect.fnUntraced(function*<R>(run: Run.Run<R>) {
  const guarded = yield* runControl(run, run.hooks.beforeModelCall, (plugin) => plugin.beforeModelCall?.(run.context))
  if (guarded !== undefined) return end(guarded)
  const stoppedBefore = yield* Run.stopReason(run)
  if (stoppedBefore !== undefined) return end(yield* stopped(run, stoppedBefore))
  run.eventTurn = run.turn + 1
  if (Run.observed(run)) {
    yield* Run.deliver(run, { _tag: "TurnStart", runId: run.runId, turn: run.eventTurn, timestamp: Run.now(run) })
  }
  const prompt = run.hooks.transformContext.length === 0 ? transcriptPrompt(run) : yield* transformedPrompt(run)
  const reply = yield* streamReply(run, prompt)
  Run.append(run, reply.message)
  run.usage = Message.addUsage(run.usage, reply.message.usage)
  const calls = Message.toolCalls(reply.message)
  const batch = calls.length === 0 ? noBatch : yield* ToolExecution.executeBatch(run, calls)
  appendResults(run, batch.results)
  return yield* endTurn(run, reply.message, batch, reply.stopped)
})

// -----------------------------------------------------------------------------
// Steering and follow-ups
// -----------------------------------------------------------------------------

const take = (queue: Array<Message.Message>, mode: Steering.DeliveryMode): ReadonlyArray<Message.Message> =>
  mode === "all" ? queue.splice(0) : queue.splice(0, 1)

const nothing: Effect.Effect<ReadonlyArray<Message.Message>> = Effect.succeed([])

const poll = <R>(
  run: Run.Run<R>,
  kind: "steering" | "followUp"
): Effect.Effect<ReadonlyArray<Message.Message>, never, R> => {
  const queue = kind === "steering" ? run.steeringQueue : run.followUpQueue
  const hooks = run.hooks[kind]
  if (run.steering === undefined && hooks.length === 0 && queue.length === 0) return nothing
  return pollNow(run, kind, queue, hooks)
}

const pollNow = Effect.fnUntraced(function*<R>(
  run: Run.Run<R>,
  kind: "steering" | "followUp",
  queue: Array<Message.Message>,
  hooks: ReadonlyArray<Hooks.Plugin<R>>
) {
  if (run.steering !== undefined) {
    queue.push(...yield* (kind === "steering" ? run.steering.takeSteering : run.steering.takeFollowUps))
  }
  for (const plugin of hooks) {
    const hook = kind === "steering" ? plugin.steering : plugin.followUp
    if (hook !== undefined) queue.push(...yield* hook(run.context))
  }
  if (queue.length === 0) return []
  const mode = run.steering === undefined
    ? "all"
    : kind === "steering"
    ? run.steering.steeringMode
    : run.steering.followUpMode
  return take(queue, mode)
})

const deliver = <R>(
  run: Run.Run<R>,
  tag: "SteeringDelivered" | "FollowUpDelivered",
  messages: ReadonlyArray<Message.Message>
): Effect.Effect<void, never, R> => {
  if (messages.length === 0) return Effect.void
  for (const message of messages) Run.append(run, message)
  return Run.emitInput(run, { _tag: tag, messages })
}

// -----------------------------------------------------------------------------
// The loop
// -----------------------------------------------------------------------------

const naturalEnd = <R>(run: Run.Run<R>): Outcome.Outcome => run.wrapUpRequested ? Outcome.wrappedUp : Outcome.completed

const loop = Effect.fnUntraced(function*<R>(run: Run.Run<R>) {
  const finished = yield* finishOpenTurn(run)
  if (finished._tag === "End") return finished.outcome
  let pending = yield* poll(run, "steering")
  let pendingTag: "SteeringDelivered" | "FollowUpDelivered" = "SteeringDelivered"
  // A continued run that stopped naturally goes straight to its follow-ups.
  let hasToolCalls = !(pending.length === 0 && endsWithReply(run.messages))
  while (true) {
    while (hasToolCalls || pending.length > 0) {
      yield* deliver(run, pendingTag, pending)
      pendingTag = "SteeringDelivered"
      const step = yield* turn(run)
      if (step._tag === "End") return step.outcome
      hasToolCalls = step.hasToolCalls
      pending = yield* poll(run, "steering")
    }
    pending = yield* poll(run, "followUp")
    if (pending.length === 0) return naturalEnd(run)
    pendingTag = "FollowUpDelivered"
    hasToolCalls = true
  }
})

const endsWithReply = (messages: ReadonlyArray<Message.Message>): boolean => {
  const last = messages.at(-1)
  return last !== undefined && last.role === "assistant" && !Message.hasToolCalls(last)
}

/** The last assistant message and its calls that have no result after it. */
const openCalls = (messages: ReadonlyArray<Message.Message>): {
  readonly message: Message.AssistantMessage | undefined
  readonly calls: ReadonlyArray<Message.ToolCallPart>
} => {
  let index = messages.length - 1
  while (index >= 0 && messages[index]!.role !== "assistant") index--
  const last = messages[index]
  if (last === undefined || last.role !== "assistant") return { message: undefined, calls: [] }
  const answered = new Set<string>()
  for (let i = index + 1; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role === "toolResult") answered.add(message.toolCallId)
  }
  return { message: last, calls: Message.toolCalls(last).filter((call) => !answered.has(call.id)) }
}

/** Answers the calls left open by a run that ended abnormally, so the transcript stays valid. */
const closeOpenCalls = <R>(run: Run.Run<R>, text: string): void => {
  for (const call of openCalls(run.messages).calls) {
    Run.append(
      run,
      run.batchResults.get(call.id) ??
        Message.toolResult({ toolCallId: call.id, toolName: call.name, text, isError: true })
    )
  }
}

/** Moves what is still queued in the steering handle into the run's state, so nothing is dropped. */
const drainQueues = <R>(run: Run.Run<R>): Effect.Effect<void> => {
  const steering = run.steering
  return steering === undefined ? Effect.void : Effect.flatMap(
    Effect.all([steering.takeSteering, steering.takeFollowUps]),
    ([steeringMessages, followUps]) =>
      Effect.sync(() => {
        run.steeringQueue.push(...steeringMessages)
        run.followUpQueue.push(...followUps)
      })
  )
}

const result = <R>(run: Run.Run<R>, outcome: Outcome.Outcome): Effect.Effect<RunState.RunResult, never, R> =>
  Effect.andThen(drainQueues(run), Effect.map(Run.snapshot(run), (state) => ({
    messages: run.messages.slice(run.firstNew),
    state,
    outcome,
    usage: run.usage
  })))

/** What a defect was, in a line: the `AgentEnd` of a run that died says it. */
const describeDefect = (cause: Cause.Cause<unknown>): string => {
  const defect = Cause.squash(cause)
  return defect instanceof Error ? `${defect.name}: ${defect.message}` : String(defect)
}

/** The error a failed run fails with: the loop's, with the run's state (open calls answered, queues drained). */
const withState = (error: AgentError, state: RunState.RunState): AgentError => {
  switch (error._tag) {
    case "ModelError":
      return new ModelError({ reason: error.reason, turn: error.turn, state })
    case "ToolFatalError": {
      const { description, toolCallId, toolName } = error
      return new ToolFatalError(
        error.error === undefined
          ? { toolName, toolCallId, description, state }
          : { toolName, toolCallId, description, error: error.error, state }
      )
    }
    default:
      return error
  }
}

/**
 * Ends a run that did not end with an outcome: answers its open calls and
 * delivers `AgentEnd`. An interrupted run ends `Cancelled` with its result;
 * a failed one with its error, to which the run's state is added (and the
 * error is returned, for the run to fail with); a run that died with its
 * defect.
 */
const endAbnormally = <R>(
  run: Run.Run<R>,
  cause: Cause.Cause<AgentError>
): Effect.Effect<AgentError | undefined, never, R> => {
  if (Cause.hasInterruptsOnly(cause)) {
    closeOpenCalls(run, "Tool call interrupted: the run was stopped.")
    return Effect.flatMap(result(run, Outcome.cancelled("interrupted")), (final) =>
      Effect.as(Run.emitInput(run, { _tag: "AgentEnd", outcome: final.outcome, result: final }), undefined))
  }
  closeOpenCalls(run, "Tool call not completed: the run failed.")
  const error = Cause.findErrorOption(cause)
  if (error._tag === "None") {
    return Effect.as(Run.emitInput(run, { _tag: "AgentEnd", defect: describeDefect(cause) }), undefined)
  }
  return Effect.flatMap(Effect.andThen(drainQueues(run), Run.snapshot(run)), (state) => {
    const failed = withState(error.value, state)
    return Effect.as(Run.emitInput(run, { _tag: "AgentEnd", error: failed }), failed)
  })
}

const execute = Effect.fnUntraced(function*<R>(setup: Setup<R>) {
  const run = yield* makeRun(setup)
  yield* Run.emitInput(run, { _tag: "AgentStart", messages: run.messages.slice(run.firstNew) })
  for (const event of setup.options.announce ?? []) yield* Run.emitInput(run, event)
  // Set when the run fails: the loop's error with the run's state on it.
  let failed: AgentError | undefined
  const outcome = yield* Run.withDeadline(run, loop(run)).pipe(
    Effect.onExit((exit) =>
      exit._tag === "Success"
        ? Effect.void
        : Effect.map(endAbnormally(run, exit.cause), (error) => void (failed = error))
    ),
    Effect.mapError((error) => failed ?? error)
  )
  const final = yield* result(run, outcome)
  yield* Run.emitInput(run, { _tag: "AgentEnd", outcome, result: final })
  return final
})

const freshState = (options: RunOptions<unknown>): RunState.RunState =>
  RunState.make({
    runId: options.runId ?? globalThis.crypto.randomUUID(),
    system: options.system,
    messages: promptMessages(options.prompt)
  })

/**
 * Runs an agent on a task until the model stops, a tool ends the run, or a
 * guard does.
 *
 * @since 0.1.0
 */
export const run = <R = never>(options: RunOptions<R>): Effect.Effect<RunState.RunResult, AgentError, Requirements | R> =>
  Effect.suspend(() => execute({ state: freshState(options), firstNew: 0, options, sinks: [] }))

const checkContinuation = (
  state: RunState.RunState,
  steering: Steering.Service | undefined
): Effect.Effect<void, InvalidContinuation> => {
  const last = state.messages.at(-1)
  if (last === undefined) return Effect.fail(new InvalidContinuation({ reason: "the transcript is empty" }))
  if (last.role !== "assistant" || Message.hasToolCalls(last)) return Effect.void
  if (state.steering.length > 0 || state.followUps.length > 0 || steering !== undefined) return Effect.void
  return Effect.fail(
    new InvalidContinuation({
      reason: "the last message is an assistant reply without tool calls and no steering or follow-up is queued"
    })
  )
}

/**
 * Continues a run from its state: answers tool calls left open, delivers
 * queued steering and follow-ups, and goes on. Fails with
 * `InvalidContinuation` when there is nothing to continue (an empty
 * transcript, or a final assistant reply with nothing queued).
 *
 * @since 0.1.0
 */
export const runContinue = <R = never>(
  state: RunState.RunState,
  options: ContinueOptions<R> = {}
): Effect.Effect<RunState.RunResult, AgentError, Requirements | R> =>
  Effect.andThen(
    checkContinuation(state, options.steering),
    Effect.suspend(() => execute({ state, firstNew: state.messages.length, options, sinks: [] }))
  )

/**
 * Runs an agent and returns its events as a stream; the last element is
 * `AgentEnd`, which carries the result. Stopping the stream early interrupts
 * the run.
 *
 * @since 0.1.0
 */
export const runStream = <R = never>(
  options: RunOptions<R>
): Stream.Stream<AgentEvent.AgentEvent, AgentError, Requirements | R> =>
  Stream.callback<AgentEvent.AgentEvent, AgentError, Requirements | R>((queue) =>
    execute({
      state: freshState(options),
      firstNew: 0,
      options,
      sinks: [(event) => void Queue.offerUnsafe(queue, event)]
    }).pipe(
      Effect.matchCauseEffect({
        onSuccess: () => Queue.end(queue),
        onFailure: (cause) => Queue.failCause(queue, cause)
      })
    )
  )
