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
 *       → MessageStart / MessageUpdate… / MessageEnd → release → tool batch
 *       → results appended in the calls' order
 *       → endTurn: TurnEnd → BudgetSnapshot → afterTurn hooks → a stop, the tools' vote or a hook ends the run
 *   natural stop → poll follow-ups; none → Completed (WrappedUp after a wrap-up request)
 * ```
 *
 * The steps are in `Control` (hooks, the request, steering), `Reply` (the
 * model call), `Batch` (the tools); the parts of the run they share are in
 * `LiveRun`.
 *
 * @internal
 */
import { Cause, Effect } from "effect"
import type { LanguageModel, Prompt } from "effect/ai"
import type * as AgentConfig from "../AgentConfig.ts"
import { type AgentError, InvalidContinuation, ModelError, ToolFatalError } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import type * as RunState from "../RunState.ts"
import type * as Steering from "../Steering.ts"
import type { ToolRegistry } from "../ToolRegistry.ts"
import * as Control from "./control.ts"
import * as Events from "./events.ts"
import * as Lineage from "./lineage.ts"
import * as LiveRun from "./liveRun.ts"
import * as OutputPart from "./output.ts"
import * as Progress from "./progress.ts"
import * as Reply from "./reply.ts"
import * as Reservations from "./reservations.ts"
import * as Stops from "./stops.ts"
import * as Telemetry from "./telemetry.ts"
import * as Batch from "./tools/batch.ts"
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
export type Requirements = LanguageModel.LanguageModel | ToolRegistry

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
  // A continued run that had ended with its final answer (saved after that turn) ends with it again.
  if (run.output !== undefined && OutputPart.endedWithAnswer(run.output, run.transcript.messages)) {
    return run.progress.wrapUpRequested ? Outcome.wrappedUp : Outcome.completed
  }
  let pending = yield* Control.poll(run, "steering")
  let pendingKind: "steering" | "followUp" = "steering"
  // A continued run that stopped naturally goes straight to its follow-ups.
  let hasToolCalls = !(pending.length === 0 && Transcript.endsWithReply(run.transcript.messages))
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
    // A natural stop: follow-ups restart the run; without any, it is done.
    pending = yield* Control.poll(run, "followUp")
    if (pending.length === 0) return run.progress.wrapUpRequested ? Outcome.wrappedUp : Outcome.completed
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
  const batch = calls.length === 0 ? Batch.empty : yield* Batch.callAll(run, calls)
  Transcript.appendAll(transcript, batch.results)
  return yield* endTurn(run, reply.message, batch, reply.stopped)
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
function* endTurn<R>(
  run: LiveRun.LiveRun<R>,
  message: Message.AssistantMessage,
  batch: Batch.Batch,
  stoppedReply: Stops.Stop | undefined
) {
  run.progress.turn++
  if (run.env.telemetry !== undefined) yield* Telemetry.turnEnded(run.env.telemetry)
  yield* Events.turnEnded(run.events, message, batch.results, run.progress)
  // The final answer is judged before the afterTurn hooks, so a checkpoint they save holds the verdict's reminder.
  // A reply a stop cut short (or an output guardrail withheld) is no attempt: the run ends with the stop.
  const output = run.output === undefined || stoppedReply !== undefined
    ? undefined
    : yield* OutputPart.afterTurn(run, run.output, message, batch.results)
  const after = yield* Control.consult(run, run.env.hooks.afterTurn, (plugin) =>
    plugin.afterTurn?.({ message, toolResults: batch.results, terminated: batch.terminate }, run.context))
  const stop = stoppedReply ?? (yield* Stops.reason(run.stops))
  // A stop comes first, then the final answer, the tools' vote, an afterTurn hook's stop.
  if (stop !== undefined) return end(yield* stopped(run, stop))
  if (output?._tag === "End") return end(output.outcome)
  if (batch.terminate) return end(Outcome.terminated)
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
  const batch = yield* Batch.callAll(run, calls)
  Transcript.appendAll(run.transcript, batch.results)
  return yield* endTurn(run, message, batch, undefined)
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
    const note = Feedback.leftOpen(interrupted, started)
    Transcript.append(
      run.transcript,
      Message.toolResult({ toolCallId: call.id, toolName: call.name, text: note.text, isError: true, details: note.details })
    )
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
