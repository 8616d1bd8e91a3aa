/**
 * The agent loop, top-down, in the order it runs:
 *
 * ```
 * execute: set up → AgentStart → loop → AgentEnd (also when the loop fails, dies or is interrupted)
 * loop (outer: follow-ups)
 *   finishOpenTurn: a continued run first answers the calls its last turn left open
 *   loop (inner: while the model asks for tools, or steering is pending)
 *     deliver steering → turn:
 *       beforeModelCall hooks → stops → reservation (budgets) → TurnStart → transformContext → model stream
 *       → MessageStart / MessageUpdate… / MessageEnd → release
 *       → tools (runTools, below): each call planned → run → finalized (ToolExecutionStart / End)
 *       → results appended in the calls' order
 *       → endTurn: TurnEnd → BudgetSnapshot → afterTurn hooks → a stop, the tools' vote or a hook ends the run
 *   natural stop → poll follow-ups; none → Completed (WrappedUp after a wrap-up request)
 * ```
 *
 * The steps are in `Control` (hooks, the request, steering), `Reply` (the
 * model call) and, for a turn's tool calls, here (a call crosses this file
 * and `ToolRegistry`, which runs its handler); the parts of the run they
 * share are in `LiveRun`.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Tool from "effect/ai/Tool"
import type * as AgentConfig from "../AgentConfig.ts"
import { type AgentError, InvalidContinuation, ModelError, ToolFatalError } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as AgentTool from "../AgentTool.ts"
import * as Approvals from "../Approvals.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import type * as RunState from "../RunState.ts"
import type * as Steering from "../Steering.ts"
import * as ToolArguments from "../ToolArguments.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import * as Control from "./control.ts"
import * as Events from "./events.ts"
import * as Lineage from "./lineage.ts"
import * as LiveRun from "./liveRun.ts"
import * as OutputPart from "./output.ts"
import * as Progress from "./progress.ts"
import * as Reply from "./reply.ts"
import * as Reservations from "./reservations.ts"
import * as Step from "./step.ts"
import * as Stops from "./stops.ts"
import * as Telemetry from "./telemetry.ts"
import * as Feedback from "./tools/feedback.ts"
import * as Transcript from "./transcript.ts"

/**
 * How a run starts: `Agent`'s options, and what only the library passes.
 *
 * @internal
 */
export interface Options<R> {
  readonly config?: AgentConfig.Input | undefined
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  readonly steering?: Steering.Service | undefined
  /** Synchronous event sinks before the plugins' (the stream of `runStream`). */
  readonly sinks?: ReadonlyArray<(event: AgentEvent.AgentEvent) => void> | undefined
  /** Events delivered right after `AgentStart` (a resumed session announces itself with them). */
  readonly announce?: ReadonlyArray<AgentEvent.Input> | undefined
  /** How the model is called, when not directly (a durable session's activity). */
  readonly modelCall?: LiveRun.ModelCall | undefined
  /** The agent's name, in its spans (`invoke_agent {name}`). */
  readonly name?: string | undefined
  /** The typed output asked for (`Agent.run({ output })`). */
  readonly output?: OutputPart.Request | undefined
  /** For a sub-agent's run: its parent and name. */
  readonly link?: Lineage.Link | undefined
  /** Where a handoff tool leaves its target (a run that can hand off). */
  readonly handoffs?: Lineage.Handoffs | undefined
}

/**
 * What every run needs.
 *
 * @internal
 */
export type Requirements = LanguageModel.LanguageModel | ToolRegistry.ToolRegistry

/**
 * Runs from `state`, whose messages are the run's own (a new run).
 *
 * @internal
 */
export const start = <R>(
  state: RunState.RunState,
  options: Options<R>
): Effect.Effect<RunState.RunResult, AgentError, Requirements | R> => execute(state, 0, options)

/**
 * Continues from `state`: fails with `InvalidContinuation` when there is
 * nothing to continue (an empty transcript, or a final assistant reply with
 * nothing queued).
 *
 * @internal
 */
export const resume = <R>(
  state: RunState.RunState,
  options: Options<R>
): Effect.Effect<RunState.RunResult, AgentError, Requirements | R> =>
  Effect.andThen(checkContinuation(state, options.steering), execute(state, state.messages.length, options))

/** The run, in its `invoke_agent` span when telemetry is on. */
const execute = <R>(
  state: RunState.RunState,
  firstNew: number,
  options: Options<R>
): Effect.Effect<RunState.RunResult, AgentError, Requirements | R> =>
  Effect.flatMap(Telemetry.settings(options.name), (settings) =>
    settings === undefined
      ? executeWith(state, firstNew, options, undefined)
      : Telemetry.invokeAgent(settings, state, (telemetry) => executeWith(state, firstNew, options, telemetry)))

const executeWith = Effect.fnUntraced(function*<R>(
  state: RunState.RunState,
  firstNew: number,
  options: Options<R>,
  telemetry: Telemetry.RunTelemetry | undefined
) {
  const lineage = Lineage.make(state.runId, options.link, options.handoffs)
  const run = yield* LiveRun.make<R>({
    state,
    firstNew,
    config: options.config,
    plugins: [...options.plugins ?? [], Lineage.plugin(lineage)],
    steering: options.steering,
    sinks: options.sinks ?? [],
    modelCall: options.modelCall,
    telemetry,
    output: options.output
  })
  const { context, env, events, progress, stops } = run
  Lineage.attach(lineage, {
    progress,
    config: env.config,
    stops,
    observed: events.observed,
    emit: context.emit,
    snapshot: context.snapshot
  })
  // What its model calls count against: its budgets and those of the runs above it, if any.
  const meter = Lineage.meter(lineage, state.messages)
  yield* Events.emit(run.events, { _tag: "AgentStart", messages: Transcript.added(run.transcript) })
  for (const event of options.announce ?? []) yield* Events.emit(run.events, event)
  // Set when the run fails: the loop's error with the run's state on it.
  let failed: AgentError | undefined
  const outcome = yield* Stops.withDeadline(run.stops, run.progress.elapsedBefore, loop(run, meter, lineage)).pipe(
    Effect.provideService(Lineage.Current, lineage),
    Effect.onExit((exit) =>
      exit._tag === "Success"
        ? Effect.void
        : Effect.map(endAbnormally(run, exit.cause), (error) => void (failed = error))
    ),
    Effect.mapError((error) => failed ?? error)
  )
  const final = yield* result(run, outcome)
  yield* Events.emit(run.events, { _tag: "AgentEnd", outcome, result: final })
  return final
})

const loop = Effect.fnUntraced(function*<R>(
  run: LiveRun.LiveRun<R>,
  meter: Reservations.Meter | undefined,
  lineage: Lineage.Lineage
) {
  // A continued run first finishes the turn it stopped in.
  const finished = yield* finishOpenTurn(run)
  // The sub-agents saved in flight were that turn's: one whose call did not run again (a hook blocked it) is
  // dropped, never resumed by a later call that reuses its id (a provider that numbers calls per response).
  lineage.restored.clear()
  if (finished._tag === "End") return finished.outcome
  let pending = yield* Control.poll(run, "steering")
  let pendingKind: "steering" | "followUp" = "steering"
  // A continued run that stopped naturally (a reply, or its accepted final answer) goes straight to its follow-ups.
  const stopped = Transcript.endsWithReply(run.transcript.messages) ||
    (run.output !== undefined && OutputPart.endedWithAnswer(run.output, run.transcript.messages))
  let hasToolCalls = !(pending.length === 0 && stopped)
  while (true) {
    while (hasToolCalls || pending.length > 0) {
      // What is pending enters the run before the turn, unless a `beforeDelivery` hook keeps it out.
      const blocked = yield* Control.deliver(run, pendingKind, pending)
      if (blocked !== undefined) return blocked
      pendingKind = "steering"
      const step = yield* turn(run, meter)
      // A guard, a stop, the tools' vote or an afterTurn hook ended the run.
      if (step._tag === "End") return step.outcome
      hasToolCalls = step.hasToolCalls
      pending = yield* Control.poll(run, "steering")
    }
    // A natural stop: follow-ups restart the run; without any, it is done, unless a cancel came meanwhile (a
    // durable session's is read by the take after the last reply: it ends the run, as it would cut the reply).
    pending = yield* Control.poll(run, "followUp")
    if (pending.length === 0) {
      const cancel = yield* Stops.cancelled(run.stops)
      if (cancel !== undefined) return Outcome.cancelled(cancel)
      return run.progress.wrapUpRequested ? Outcome.wrappedUp : Outcome.completed
    }
    pendingKind = "followUp"
    hasToolCalls = true
  }
})

/** What a turn decided: the next turn (and whether the model asked for tools), or the run's end. */
type Next =
  | { readonly _tag: "Next"; readonly hasToolCalls: boolean }
  | { readonly _tag: "End"; readonly outcome: Outcome.Outcome }

const next = (hasToolCalls: boolean): Next => ({ _tag: "Next", hasToolCalls })
const end = (outcome: Outcome.Outcome): Next => ({ _tag: "End", outcome })

/** A turn whose reply called no tool, as the `afterTurn` hooks see it. */
const withoutTools = (message: Message.AssistantMessage): Hooks.Turn => ({ message, toolResults: [], terminated: false })

/** One turn: guards, the model call, the tool batch, the turn's end. */
const turn = Effect.fnUntraced(function*<R>(run: LiveRun.LiveRun<R>, meter: Reservations.Meter | undefined) {
  const { env, progress, transcript } = run
  // A guard may end the run before the model is called: the turn cap, a budget.
  const guarded = yield* Control.consult(run, env.hooks.beforeModelCall, (plugin) =>
    plugin.beforeModelCall?.(run.context))
  if (guarded !== undefined) return end(guarded)
  // So may a cancel or the deadline.
  const stoppedBefore = yield* Stops.reason(run.stops)
  if (stoppedBefore !== undefined) return end(yield* stopped(run, stoppedBefore))
  let reply: LiveRun.ModelReply
  if (meter === undefined) {
    reply = yield* callModel(run)
  } else {
    // Under budgets, the turn starts once its call's estimate is reserved (it may wait for room), or not at all.
    const spent = yield* Reservations.spend(meter, run.stops, Effect.gen(() => callModel(run)))
    if (spent._tag === "Stopped") return end(yield* stopped(run, spent.stop))
    if (spent._tag === "Refused") {
      yield* Events.emit(run.events, spent.event)
      return end(spent.outcome)
    }
    reply = spent.reply
  }
  Transcript.append(transcript, reply.message)
  progress.usage = Message.addUsage(progress.usage, reply.message.usage)
  const calls = Message.toolCalls(reply.message)
  const done = calls.length === 0 ? withoutTools(reply.message) : yield* runTools(run, reply.message, calls)
  Transcript.appendAll(transcript, done.toolResults)
  return yield* endTurn(run, done, reply.stopped)
})

/** A turn's start and its model call: `TurnStart`, the request (transformed by the hooks), the reply. */
function* callModel<R>(run: LiveRun.LiveRun<R>) {
  const { env, transcript } = run
  run.events.turn = run.progress.turn + 1
  yield* Events.turnStarted(run.events)
  const prompt = env.hooks.transformContext.length === 0
    ? Transcript.request(transcript)
    : yield* Control.transformedRequest(run)
  const reply: LiveRun.ModelReply = env.telemetry === undefined && env.modelCall === undefined
    ? yield* Reply.streamReply(run, prompt)
    : yield* modelCall(run, prompt)
  return reply
}

/** The model call of a turn that is traced, or made through a durable session's activity, or both. */
const modelCall = <R>(run: LiveRun.LiveRun<R>, prompt: Prompt.Prompt) => {
  const { modelCall: durable, telemetry } = run.env
  const streamed = Effect.gen(() => Reply.streamReply(run, prompt))
  const traced = telemetry === undefined ? streamed : Telemetry.chat(telemetry, run.events.turn, prompt, streamed)
  return durable === undefined ? traced : durable(run.events.turn, traced)
}

/**
 * Ends a turn whose reply and results are in the transcript: counts it,
 * emits its events, runs the `afterTurn` hooks and decides whether the run
 * goes on. A plain generator: `turn` delegates to it with `yield*`.
 */
function* endTurn<R>(run: LiveRun.LiveRun<R>, done: Hooks.Turn, stoppedReply: Stops.Stop | undefined) {
  const { message } = done
  run.progress.turn++
  if (run.env.telemetry !== undefined) yield* Telemetry.turnEnded(run.env.telemetry)
  yield* Events.turnEnded(run.events, message, done.toolResults, run.progress)
  // The final answer is judged before the afterTurn hooks, so a checkpoint they save holds the verdict's reminder.
  // A reply a stop cut short (or an output guardrail withheld) is no attempt: the run ends with the stop.
  const output = run.output === undefined || stoppedReply !== undefined
    ? undefined
    : yield* OutputPart.afterTurn(run, run.output, message, done.toolResults)
  const after = yield* Control.consult(run, run.env.hooks.afterTurn, (plugin) => plugin.afterTurn?.(done, run.context))
  const stop = stoppedReply ?? (yield* Stops.reason(run.stops))
  // A stop comes first, then the final answer, the tools' vote, an afterTurn hook's stop.
  if (stop !== undefined) return end(yield* stopped(run, stop))
  // An accepted final answer is the run's natural stop (follow-ups go on from it); past the retries it ends.
  if (output?._tag === "End") return output.outcome._tag === "OutputInvalid" ? end(output.outcome) : next(false)
  if (done.terminated) return end(Outcome.terminated)
  if (after !== undefined) return end(after)
  return next(output !== undefined || Message.hasToolCalls(message))
}

/**
 * Finishes the turn a continued state stopped in: runs the calls of its last
 * assistant message that have no result yet, then ends that turn (it counts:
 * its model call was made).
 */
const finishOpenTurn = Effect.fnUntraced(function*<R>(run: LiveRun.LiveRun<R>) {
  const { calls, message } = Transcript.openCalls(run.transcript.messages)
  if (message === undefined || calls.length === 0) return next(false)
  run.events.turn = run.progress.turn + 1
  const done = yield* runTools(run, message, calls)
  Transcript.appendAll(run.transcript, done.toolResults)
  return yield* endTurn(run, done, undefined)
})

// -----------------------------------------------------------------------------
// How a run ends
// -----------------------------------------------------------------------------

/**
 * How a stop ends the run: a cancel with `Cancelled`; a halt with its
 * outcome; the deadline with `BudgetExceeded`, announced as the budget guard
 * announces it.
 */
function* stopped<R>(run: LiveRun.Uses<R, "events" | "progress" | "stops">, stop: Stops.Stop) {
  if (stop._tag === "Cancel") return Outcome.cancelled(stop.reason)
  if (stop._tag === "Halt") return stop.outcome
  const limit = run.stops.wallClock ?? 0
  const used = Progress.elapsedMs(run.progress)
  yield* Events.emit(run.events, {
    _tag: "GuardTripped",
    guard: "budget",
    action: "stop",
    detail: `the wallClock budget is exhausted: ${used} of ${limit}`,
    figures: { limit, used }
  })
  return Outcome.budgetExceeded("wallClock", limit, used)
}

const result = <R>(run: LiveRun.LiveRun<R>, outcome: Outcome.Outcome): Effect.Effect<RunState.RunResult, never, R> =>
  Effect.andThen(
    Control.drain(run),
    Effect.map(LiveRun.snapshot(run), (state): RunState.RunResult => {
      const final = { messages: Transcript.added(run.transcript), state, outcome, usage: run.progress.usage }
      const accepted = run.output?.accepted
      // An accepted answer is the output of a run that ended with it (not one a guardrail then stopped).
      const answered = outcome._tag === "Completed" || outcome._tag === "WrappedUp"
      return accepted === undefined || !answered ? final : { ...final, output: accepted.value }
    })
  )

/**
 * Ends a run that did not end with an outcome: answers its open calls and
 * delivers `AgentEnd`. An interrupted run ends `Cancelled` with its result;
 * a failed one with its error, to which the run's state is added (and the
 * error is returned, for the run to fail with); a run that died with its
 * defect.
 */
const endAbnormally = <R>(
  run: LiveRun.LiveRun<R>,
  cause: Cause.Cause<AgentError>
): Effect.Effect<AgentError | undefined, never, R> => {
  if (Cause.hasInterruptsOnly(cause)) {
    closeOpenCalls(run, true)
    return Effect.flatMap(result(run, Outcome.cancelled("interrupted")), (final) =>
      Effect.as(Events.emit(run.events, { _tag: "AgentEnd", outcome: final.outcome, result: final }), undefined))
  }
  closeOpenCalls(run, false)
  const error = Cause.findErrorOption(cause)
  if (error._tag === "None") {
    return Effect.as(Events.emit(run.events, { _tag: "AgentEnd", defect: describeDefect(cause) }), undefined)
  }
  return Effect.flatMap(Effect.andThen(Control.drain(run), LiveRun.snapshot(run)), (state) => {
    const failed = withState(error.value, state)
    return Effect.as(Events.emit(run.events, { _tag: "AgentEnd", error: failed }), failed)
  })
}

/**
 * Answers the calls left open by a run that ended abnormally (with what the
 * batch had for them, if anything), so the transcript stays valid; each says
 * whether its handler had started (and so may have taken effect).
 */
const closeOpenCalls = <R>(run: LiveRun.Uses<R, "transcript" | "journal">, interrupted: boolean): void => {
  for (const call of Transcript.openCalls(run.transcript.messages).calls) {
    const recorded = run.journal.results.get(call.id)
    if (recorded !== undefined) {
      Transcript.append(run.transcript, recorded)
      continue
    }
    const started = run.journal.started.has(call.id) || run.journal.restoredStarted.has(call.id)
    Transcript.append(run.transcript, resultOf(call, Feedback.leftOpen(interrupted, started)))
  }
}

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
      return new ToolFatalError({
        toolName,
        toolCallId,
        description,
        ...(error.error === undefined ? {} : { error: error.error }),
        ...(error.defect === undefined ? {} : { defect: error.defect }),
        state
      })
    }
    default:
      return error
  }
}

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

// =============================================================================
// The tools of a turn: each call planned, run, finalized; then the batch's vote
// =============================================================================
//
// The calls of one assistant message, in order: each is looked up, held to
// the per-turn call limit, validated against its tool's parameter Schema (the
// arguments are decoded here, once), shown to the `beforeToolCall` hooks,
// held to its tool's quotas, and asked whether it needs approval (`plan`).
// Then they run (`schedule`): parallel ones on child fibers, at most
// `maxParallelTools` at once, sequential ones one at a time after them, all
// one at a time when any call is `exclusive`; a call waiting for approval
// does not hold up the others. A call waits for approval when it needs it,
// then its handler runs through the registry under its timeout, racing the
// run's stops (`runCall`). Every call, also one answered at once, then goes
// through the `afterToolCall` hooks and the cut of its text, and is recorded
// in the journal and reported with `ToolExecutionEnd` (`finalize`). A call's
// result is a `ToolRegistry.Output` from the handler (or the loop's answer)
// until it becomes the result message.

type ToolsRun<R> = LiveRun.Uses<R, "env" | "events" | "journal" | "progress" | "stops" | "context" | "transcript">

/**
 * A planned call: to `Run`, `Answered` at once (unknown, invalid, blocked,
 * over a limit or a quota, its outcome unknown after a crash), or `Restored`
 * (a batch saved mid-way had answered it: its result is used as it is).
 */
type Planned =
  | {
    readonly _tag: "Run"
    /** Its place in the batch. */
    readonly index: number
    /** The call as the hooks see it, with its decoded arguments. */
    readonly call: Hooks.ToolCall
    /** Whether it takes part in the termination vote. */
    readonly counted: boolean
    readonly tool: Tool.Any
    readonly settings: AgentTool.Settings
    /** Set when it waits for approval first: the reason a hook gave, if one did. */
    readonly approval: { readonly reason: string | undefined } | undefined
  }
  | {
    readonly _tag: "Answered"
    readonly index: number
    readonly call: Hooks.ToolCall
    readonly counted: boolean
    readonly answer: ToolRegistry.Output
  }
  | {
    readonly _tag: "Restored"
    readonly index: number
    readonly call: Hooks.ToolCall
    readonly counted: false
    readonly result: Message.ToolResultMessage
  }

/**
 * Runs the tool calls of one assistant message: the finished turn as the
 * `afterTurn` hooks see it (the results in the calls' order, and whether
 * every counted result voted to end the run, no call being over the per-turn
 * limit).
 */
function* runTools<R>(run: ToolsRun<R>, message: Message.AssistantMessage, calls: ReadonlyArray<Message.ToolCallPart>) {
  run.journal.results.clear()
  const over = overLimit(run, calls)
  if (over.size > 0) {
    const limit = run.env.config.maxToolCallsPerTurn
    yield* Events.emit(run.events, {
      _tag: "GuardTripped",
      guard: "maxToolCallsPerTurn",
      action: "warn",
      detail: `${over.size} of ${calls.length} calls were not executed: at most ${limit} per turn`,
      figures: { calls: calls.length, limit: limit ?? 0, notExecuted: over.size }
    })
  }
  const perTurn = new Map<string, number>()
  const planned: Array<Planned> = []
  for (let index = 0; index < calls.length; index++) {
    planned.push(yield* plan(run, calls[index]!, index, over.has(index), perTurn))
  }
  const finished: Array<Hooks.ToolCallResult | undefined> = new Array(planned.length)
  // One call (most turns): nothing to order or bound.
  if (planned.length === 1) finished[0] = yield* callTool(run, planned[0]!)
  else yield* schedule(run, planned, finished)
  const toolResults: Array<Message.ToolResultMessage> = []
  let counted = 0
  let votes = 0
  for (let i = 0; i < planned.length; i++) {
    const done = finished[i]!
    toolResults.push(done.result)
    if (planned[i]!.counted) {
      counted++
      if (done.terminate) votes++
    }
  }
  Transcript.endBatch(run.journal)
  const turn: Hooks.Turn = { message, toolResults, terminated: over.size === 0 && counted > 0 && votes === counted }
  return turn
}

const noneOver: ReadonlySet<number> = new Set()

/** The calls over the per-turn limit, by index (only calls to tools that count toward it count). */
const overLimit = <R>(run: ToolsRun<R>, calls: ReadonlyArray<Message.ToolCallPart>): ReadonlySet<number> => {
  const limit = run.env.config.maxToolCallsPerTurn
  if (limit === null || calls.length <= limit) return noneOver
  const over = new Set<number>()
  let counted = 0
  calls.forEach((call, index) => {
    const tool = run.env.registry.get(call.name)
    if (tool === undefined || !AgentTool.settings(tool).countsTowardCallLimit) return
    counted++
    if (counted > limit) over.add(index)
  })
  return over
}

// -----------------------------------------------------------------------------
// Plan
// -----------------------------------------------------------------------------

/** Plans one call: nothing runs yet. */
function* plan<R>(
  run: ToolsRun<R>,
  part: Message.ToolCallPart,
  index: number,
  over: boolean,
  perTurn: Map<string, number>
) {
  const tool = run.env.registry.get(part.name)
  const base: Hooks.ToolCall = { id: part.id, name: part.name, params: part.params, rawParams: part.params, tool }
  // What was restored stays in the journal until the batch ends, so a snapshot taken while the
  // batch runs still has it (a call that started before the crash must never look unstarted).
  const restored = run.journal.restoredResults.get(part.id)
  if (restored !== undefined) {
    const planned: Planned = { _tag: "Restored", index, call: base, counted: false, result: restored }
    return planned
  }
  if (tool === undefined) return answered(index, base, true, ToolRegistry.unknownTool(part.name, run.env.registry.tools))
  const settings = AgentTool.settings(tool)
  const counted = settings.countsTowardVote
  if (run.journal.restoredStarted.has(part.id) && !settings.replaySafe) {
    return answered(index, base, counted, Feedback.outcomeUnknown(tool.name))
  }
  if (over) return answered(index, base, counted, Feedback.overCallLimit(run.env.config.maxToolCallsPerTurn))
  let call = yield* validate(tool, base, part.params)
  if (isOutput(call)) return answered(index, base, counted, call)
  // The `beforeToolCall` hooks, in order: the first `Block` wins (the hooks after it do not run); a
  // `Rewrite` is what the hooks after it see as the raw arguments, and the last one is validated again.
  let approval: { readonly reason: string | undefined } | undefined
  let rewrite: { readonly plugin: string; readonly params: unknown } | undefined
  for (const plugin of run.env.hooks.beforeToolCall) {
    if (plugin.beforeToolCall === undefined) continue
    const current: Hooks.ToolCall = rewrite === undefined ? call : { ...call, rawParams: rewrite.params }
    const decision = yield* plugin.beforeToolCall(current, run.context)
    if (decision._tag === "Block") {
      return answered(index, call, counted, Feedback.blocked(plugin.name, decision.reason, decision.details))
    }
    if (decision._tag === "RequireApproval") approval ??= { reason: decision.reason }
    else if (decision._tag === "Rewrite") rewrite = { plugin: plugin.name, params: decision.params }
  }
  if (rewrite !== undefined) {
    const again = yield* validate(tool, call, rewrite.params, rewrite.plugin)
    if (isOutput(again)) return answered(index, call, counted, again)
    call = again
  }
  const quota = settings.quota
  if (quota !== undefined) {
    const inTurn = (perTurn.get(tool.name) ?? 0) + 1
    const inRun = (run.progress.callsPerTool.get(tool.name) ?? 0) + 1
    if (quota.perTurn !== undefined && inTurn > quota.perTurn) {
      return answered(index, call, counted, Feedback.quotaExceeded(tool.name, "turn", quota.perTurn))
    }
    if (quota.perRun !== undefined && inRun > quota.perRun) {
      return answered(index, call, counted, Feedback.quotaExceeded(tool.name, "run", quota.perRun))
    }
    if (quota.maxDurationMs !== undefined) {
      const took = run.progress.durationPerTool.get(tool.name) ?? 0
      if (took >= quota.maxDurationMs) {
        return answered(index, call, counted, Feedback.durationQuotaExceeded(tool.name, quota.maxDurationMs, took))
      }
    }
    perTurn.set(tool.name, inTurn)
  }
  run.progress.callsPerTool.set(tool.name, (run.progress.callsPerTool.get(tool.name) ?? 0) + 1)
  if (approval === undefined && (yield* needsApproval(run, tool, call.params, call.id))) {
    approval = { reason: undefined }
  }
  const planned: Planned = { _tag: "Run", index, call, counted, tool, settings, approval }
  return planned
}

const answered = (index: number, call: Hooks.ToolCall, counted: boolean, answer: ToolRegistry.Output): Planned => ({
  _tag: "Answered",
  index,
  call,
  counted,
  answer
})

type Decode = (input: unknown) => Effect.Effect<unknown, Schema.SchemaError>

const decoders = new WeakMap<Tool.Any, Decode>()

/**
 * The decoder of a tool's parameters (cached per tool). Tool parameter
 * Schemas decode without services (`Toolkit.handle` decodes them the same
 * way); `Tool.Any` erases that, so it is restored here. Dynamic tools (MCP)
 * may carry a JSON Schema instead: their server validates.
 */
const decoderFor = (tool: Tool.Any): Decode => {
  const cached = decoders.get(tool)
  if (cached !== undefined) return cached
  const schema: unknown = tool.parametersSchema
  const decode: Decode = Schema.isSchema(schema)
    ? Schema.decodeUnknownEffect(tool.parametersSchema, { errors: "all" }) as Decode
    : Effect.succeed
  decoders.set(tool, decode)
  return decode
}

const isOutput = (validated: Hooks.ToolCall | ToolRegistry.Output): validated is ToolRegistry.Output =>
  "isError" in validated

/**
 * Decodes a call's arguments (`params`: as sent, or as a `beforeToolCall`
 * rewrite set them; `rewrittenBy`: the plugin whose rewrite they are) with
 * its tool's Schema: the call with them decoded, or the answer saying what
 * is wrong with them. A Schema without effectful steps decodes to an Exit,
 * read here with no fiber step.
 */
function* validate(tool: Tool.Any, call: Hooks.ToolCall, params: unknown, rewrittenBy?: string) {
  const decodedCall = (decoded: unknown): Hooks.ToolCall | ToolRegistry.Output => ({
    ...call,
    params: decoded,
    rawParams: params
  })
  if (ToolArguments.isMalformed(params)) {
    const malformed: Hooks.ToolCall | ToolRegistry.Output = Feedback.malformedArguments(tool, params, rewrittenBy)
    return malformed
  }
  const decoded = decoderFor(tool)(params)
  if (Step.isSucceeded(decoded)) return decodedCall(decoded.value)
  return yield* Effect.match(decoded, {
    onSuccess: decodedCall,
    onFailure: (error): Hooks.ToolCall | ToolRegistry.Output =>
      Feedback.invalidArguments(tool, params, error, rewrittenBy)
  })
}

const noApproval = Step.settled(false)
const approvalNeeded = Step.settled(true)

/** Whether a call needs approval by its tool's `needsApproval`; a flag is settled at once. */
const needsApproval = <R>(
  run: ToolsRun<R>,
  tool: Tool.Any,
  params: unknown,
  toolCallId: string
): Step.Step<boolean> => {
  const flag = tool.needsApproval
  if (flag === undefined || flag === false) return noApproval
  if (flag === true) return approvalNeeded
  const answer = flag(params, { toolCallId, messages: run.transcript.prompt })
  return Effect.isEffect(answer) ? answer : answer ? approvalNeeded : noApproval
}

// -----------------------------------------------------------------------------
// Schedule
// -----------------------------------------------------------------------------

/** One call as an Effect of its own, for the calls that run on fibers. */
const callOne = Effect.fnUntraced(callTool)

/** Whether a planned call may run beside others (calls answered at once always may). */
const isParallel = (planned: Planned): boolean => planned._tag !== "Run" || planned.settings.execution === "parallel"

/**
 * Runs several calls: parallel ones on fibers (bounded), then sequential ones
 * in order; all in order when any is exclusive.
 */
const schedule = <R>(
  run: ToolsRun<R>,
  planned: ReadonlyArray<Planned>,
  finished: Array<Hooks.ToolCallResult | undefined>
): Effect.Effect<void, ToolFatalError, R> => {
  const exclusive = planned.some((p) => p._tag === "Run" && p.settings.execution === "exclusive")
  const parallel = exclusive ? [] : planned.filter(isParallel)
  const sequential = exclusive ? planned : planned.filter((p) => !isParallel(p))
  const store = (p: Planned) => Effect.map(callOne(run, p), (done) => void (finished[p.index] = done))
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

// -----------------------------------------------------------------------------
// Execute
// -----------------------------------------------------------------------------

/**
 * Runs one planned call to its final result; fails only with a fatal
 * failure of its tool.
 */
function* callTool<R>(run: ToolsRun<R>, planned: Planned) {
  if (planned._tag === "Restored") {
    Transcript.recordResult(run.journal, planned.result)
    const restored: Hooks.ToolCallResult = { result: planned.result, terminate: false, executed: false }
    return restored
  }
  const { telemetry } = run.env
  if (telemetry === undefined) return yield* runCall(run, planned)
  return yield* Telemetry.executeTool(telemetry, run.events.turn, planned.call, Effect.gen(() => runCall(run, planned)))
}

/** A call that was not restored: approved and invoked, or answered at once; then finalized. */
function* runCall<R>(run: ToolsRun<R>, planned: Exclude<Planned, { readonly _tag: "Restored" }>) {
  const startedAt = Events.now(run.events)
  if (planned._tag === "Answered") return yield* finalize(run, planned, planned.answer, false, startedAt)
  const { call } = planned
  const before = yield* Stops.reason(run.stops)
  if (before !== undefined) {
    return yield* finalize(run, planned, Feedback.stopped(before, run.stops.wallClock, false), false, startedAt)
  }
  if (planned.approval !== undefined) {
    const decision = yield* approve(run, call, planned.approval.reason)
    if (isStop(decision)) {
      return yield* finalize(run, planned, Feedback.stopped(decision, run.stops.wallClock, false), false, startedAt)
    }
    if (!decision.approved) return yield* finalize(run, planned, Feedback.denied(decision.reason), false, startedAt)
  }
  Transcript.startCall(run.journal, call.id)
  // after an approval, time has passed
  const at = planned.approval === undefined ? startedAt : Events.now(run.events)
  yield* Events.toolStarted(run.events, call.id, call.name, call.rawParams, at)
  const output = yield* Stops.race(
    run.stops,
    invoke(run, planned),
    (stop) => Feedback.stopped(stop, run.stops.wallClock, true)
  )
  // a duration quota counts the call's own time, from its start after any approval
  if (planned.settings.quota?.maxDurationMs !== undefined) {
    const took = Events.now(run.events) - at
    run.progress.durationPerTool.set(call.name, (run.progress.durationPerTool.get(call.name) ?? 0) + took)
  }
  return yield* finalize(run, planned, output, true, startedAt)
}

/** Whether the approval wait was cut by a stop rather than answered. */
const isStop = (answer: Approvals.Decision | Stops.Stop): answer is Stops.Stop => "_tag" in answer

/**
 * Asks the run's `Approvals` service, announcing the request and its resolution; the run's stops cut the wait.
 * A service that takes answers from outside (`open`) has the call waiting before `ApprovalRequested` is out,
 * so an answer given on seeing the event finds it.
 */
const approve = Effect.fnUntraced(function*<R>(run: ToolsRun<R>, call: Hooks.ToolCall, reason: string | undefined) {
  const approvalId = Lineage.approvalId(yield* Lineage.Current, call.id)
  const pending = reason === undefined
    ? { toolCallId: call.id, approvalId, toolName: call.name, params: call.rawParams }
    : { toolCallId: call.id, approvalId, toolName: call.name, params: call.rawParams, reason }
  run.journal.pendingApprovals.set(call.id, pending)
  const { approvals } = run.env
  const request = { runId: run.env.runId, turn: run.events.turn, ...pending }
  const answer = yield* Effect.scoped(Effect.gen(function*() {
    const opened = approvals?.open === undefined ? undefined : yield* approvals.open(request)
    yield* Events.emit(run.events, { _tag: "ApprovalRequested", ...pending })
    if (run.env.telemetry !== undefined) yield* Telemetry.event("effect_agent.approval.requested", {})
    return approvals === undefined
      ? Approvals.denied(Feedback.noApprover)
      : yield* Stops.race(
        run.stops,
        opened ?? approvals.decide(request),
        (stop): Approvals.Decision | Stops.Stop => stop
      )
  }))
  run.journal.pendingApprovals.delete(call.id)
  const resolved = isStop(answer)
    ? Approvals.denied(Feedback.textOf(Feedback.stopped(answer, run.stops.wallClock, false)))
    : answer
  if (run.env.telemetry !== undefined) {
    yield* Telemetry.event("effect_agent.approval.resolved", { "effect_agent.approval.approved": resolved.approved })
  }
  yield* Events.emit(
    run.events,
    resolved.approved
      ? { _tag: "ApprovalResolved", toolCallId: call.id, approvalId, toolName: call.name, approved: true }
      : {
        _tag: "ApprovalResolved",
        toolCallId: call.id,
        approvalId,
        toolName: call.name,
        approved: false,
        reason: resolved.reason
      }
  )
  return answer
})

/**
 * The handler, through the registry, under the call's timeout (the tool's
 * `AgentTool.Timeout`, else the config's `toolTimeout`). Its preliminary
 * results are reported as `ToolExecutionUpdate`. A fatal failure: the call is
 * answered with it in the journal (the state the run fails with holds it, see
 * `runCall` above), and the batch fails.
 */
const invoke = <R>(
  run: ToolsRun<R>,
  planned: Extract<Planned, { readonly _tag: "Run" }>
): Effect.Effect<ToolRegistry.Output, ToolFatalError, R> => {
  const { call, tool } = planned
  const { events } = run
  const { services } = run.env
  const invoked = Effect.catchTag(
    ToolRegistry.invoke(run.env.registry, tool.name, {
      toolCallId: call.id,
      params: call.params,
      onPreliminary: (partial) =>
        // preliminary results are reported through the run's hooks, which may need its services
        Effect.provideContext(
          Events.emit(events, { _tag: "ToolExecutionUpdate", toolCallId: call.id, toolName: tool.name, partial }),
          services
        )
    }),
    "ToolFatalError",
    (error) => {
      Transcript.recordResult(run.journal, resultOf(call, Feedback.failedFatally(call.name, error.description)))
      return Effect.fail(error)
    }
  )
  const timeout = planned.settings.timeout !== undefined
    ? Duration.toMillis(planned.settings.timeout)
    : run.env.config.toolTimeout ?? undefined
  if (timeout === undefined) return invoked
  // The handler is interrupted (its finalizers run) when the timeout fires.
  return Effect.timeoutOrElse(invoked, {
    duration: Duration.millis(timeout),
    orElse: () => Effect.succeed(Feedback.timedOut(tool.name, timeout))
  })
}

// -----------------------------------------------------------------------------
// Finalize
// -----------------------------------------------------------------------------

/**
 * A call's output as its result message; then the `afterToolCall` hooks, in
 * order, each seeing the result as the hooks before it left it; then the cap
 * on the text the model reads; then the result is recorded and reported. A
 * defect of the tool with `ToolRegistry.FailOnDefect` on ends the run
 * instead, as a fatal failure does (the call answered with it in the journal).
 */
function* finalize<R>(
  run: ToolsRun<R>,
  planned: Exclude<Planned, { readonly _tag: "Restored" }>,
  output: ToolRegistry.Output,
  executed: boolean,
  startedAt: number
) {
  const settings = planned._tag === "Run" ? planned.settings : undefined
  const { call } = planned
  const { defect } = output
  if (defect !== undefined && Context.get(run.env.services, ToolRegistry.FailOnDefect)) {
    Transcript.recordResult(run.journal, resultOf(call, { ...output, details: { kind: "fatal" } }))
    return yield* new ToolFatalError({ toolName: call.name, toolCallId: call.id, description: defect, defect })
  }
  let current: Hooks.ToolCallResult = {
    result: resultOf(call, output),
    terminate: executed && settings !== undefined && settings.terminating && !output.isError,
    executed
  }
  for (const plugin of run.env.hooks.afterToolCall) {
    if (plugin.afterToolCall === undefined) continue
    const change = yield* plugin.afterToolCall(call, current, run.context)
    if (change === undefined) continue
    const { result } = current
    if (change.content !== undefined || change.isError !== undefined || change.details !== undefined) {
      current = {
        ...current,
        result: resultOf(call, {
          content: change.content ?? result.content,
          isError: change.isError ?? result.isError,
          details: change.details !== undefined ? change.details : result.details
        })
      }
    }
    if (change.terminate !== undefined) current = { ...current, terminate: change.terminate }
  }
  const result = truncate(current.result, settings?.maxResultChars ?? run.env.config.maxResultChars)
  if (result !== current.result) current = { ...current, result }
  Transcript.recordResult(run.journal, result)
  yield* Events.toolEnded(run.events, result, startedAt, current.terminate, defect)
  return current
}

/** The result message of a call's output: the one place a result message is made. */
const resultOf = (call: { readonly id: string; readonly name: string }, output: ToolRegistry.Output): Message.ToolResultMessage => {
  const result: Message.ToolResultMessage = {
    role: "toolResult",
    toolCallId: call.id,
    toolName: call.name,
    content: output.content,
    isError: output.isError
  }
  return output.details === undefined ? result : { ...result, details: output.details }
}

const cutAt = (text: string, limit: number): string => {
  // Never cut a surrogate pair in half.
  const code = text.charCodeAt(limit - 1)
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? limit - 1 : limit)
}

/** Caps the text the model reads; the full text stays in `details`. */
const truncate = (result: Message.ToolResultMessage, limit: number | null | undefined): Message.ToolResultMessage => {
  if (limit === null || limit === undefined) return result
  const text = Message.textOf(result)
  if (text.length <= limit) return result
  const kept = cutAt(text, limit)
  const images = result.content.filter((part) => part.type === "image")
  return {
    ...result,
    content: [Message.text(kept + Feedback.cutMarker(text.length - kept.length, text.length)), ...images],
    details: result.details === undefined
      ? { truncated: true, fullText: text }
      : { truncated: true, fullText: text, original: result.details }
  }
}
