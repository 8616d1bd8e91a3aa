/**
 * The second stage of a tool batch: one planned call, from its approval to
 * its final result. A `Prepared` call waits for approval when it needs it
 * (racing the run's stops), then its handler runs through the registry under
 * the call's timeout, racing the run's stops too; what it gave is `Executed`.
 * Every call, also one answered at once, then goes through the
 * `afterToolCall` hooks and the truncation of its text, and is `Finalized`:
 * recorded in the journal and reported with `ToolExecutionEnd`.
 *
 * @internal
 */
import { Duration, Effect } from "effect"
import type { ToolFatalError } from "../../AgentError.ts"
import * as Approvals from "../../Approvals.ts"
import type * as Hooks from "../../Hooks.ts"
import * as Message from "../../Message.ts"
import * as Events from "../events.ts"
import * as Journal from "../journal.ts"
import * as Lineage from "../lineage.ts"
import type * as LiveRun from "../liveRun.ts"
import * as Stops from "../stops.ts"
import * as Telemetry from "../telemetry.ts"
import * as ToolRun from "../toolRun.ts"
import * as Feedback from "./feedback.ts"
import type * as Plan from "./plan.ts"

/**
 * A call's final result and its vote.
 *
 * @internal
 */
export interface Finalized {
  readonly result: Message.ToolResultMessage
  /** Whether the result votes to end the run. */
  readonly terminate: boolean
}

/**
 * What a call gave before the `afterToolCall` hooks: its result, and whether its handler ran.
 *
 * @internal
 */
export interface Executed {
  readonly result: Message.ToolResultMessage
  readonly executed: boolean
}

type CallRun<R> = LiveRun.Uses<R, "env" | "events" | "journal" | "stops" | "context">

/**
 * Runs one planned call to its final result; fails only with a fatal
 * failure of its tool. A plain generator: the batch delegates to it with
 * `yield*` (or runs it as an Effect of its own, on a fiber, see `Batch`).
 *
 * @internal
 */
export function* call<R>(run: CallRun<R>, planned: Plan.Planned) {
  if (planned._tag === "Restored") {
    Journal.record(run.journal, planned.result)
    const restored: Finalized = { result: planned.result, terminate: false }
    return restored
  }
  const { telemetry } = run.env
  if (telemetry === undefined) return yield* run_(run, planned)
  return yield* Telemetry.executeTool(telemetry, run.events.turn, planned.call, Effect.gen(() => run_(run, planned)))
}

/** A call that was not restored: approved and invoked, or answered at once; then finalized. */
function* run_<R>(run: CallRun<R>, planned: Plan.Prepared | Plan.Immediate) {
  const startedAt = Events.now(run.events)
  const executed = planned._tag === "Immediate"
    ? answered(planned.call, planned.note)
    : yield* approveAndInvoke(run, planned, startedAt)
  return yield* finalize(run, planned, executed, startedAt)
}

const answered = (call: Hooks.ToolCall, note: Feedback.Note): Executed => ({
  result: resultOf(call, [Message.text(note.text)], true, note.details),
  executed: false
})

/** Approval, then the handler: a call that never ran is answered why. */
function* approveAndInvoke<R>(run: CallRun<R>, planned: Plan.Prepared, startedAt: number) {
  const { call } = planned
  const before = yield* Stops.reason(run.stops)
  if (before !== undefined) return answered(call, Feedback.stopped(before, run.stops.wallClock, false))
  if (planned.approval !== undefined) {
    const decision = yield* approve(run, call, planned.approval.reason)
    if (isStop(decision)) return answered(call, Feedback.stopped(decision, run.stops.wallClock, false))
    if (!decision.approved) return answered(call, Feedback.denied(decision.reason))
  }
  Journal.start(run.journal, call.id)
  // after an approval, time has passed
  const at = planned.approval === undefined ? startedAt : Events.now(run.events)
  yield* Events.toolStarted(run.events, call.id, call.name, call.rawParams, at)
  const output: Output = yield* Stops.race(
    run.stops,
    invoke(run, planned),
    (stop) => noteOutput(Feedback.stopped(stop, run.stops.wallClock, true))
  )
  const executed: Executed = { result: resultOf(call, output.content, output.isError, output.details), executed: true }
  return executed
}

/**
 * A fatal failure: the call is answered with it in the journal (the state the
 * run fails with holds it, see the loop), and the batch fails.
 */
const fatal = <R>(
  run: CallRun<R>,
  call: Hooks.ToolCall,
  error: ToolFatalError
): Effect.Effect<never, ToolFatalError> => {
  const note = Feedback.failedFatally(call.name, error.description)
  Journal.record(run.journal, resultOf(call, [Message.text(note.text)], true, note.details))
  return Effect.fail(error)
}

/** Whether the approval wait was cut by a stop rather than answered. */
const isStop = (answer: Approvals.Decision | Stops.Stop): answer is Stops.Stop => "_tag" in answer

/**
 * Asks the run's `Approvals` service, announcing the request and its resolution; the run's stops cut the wait.
 * A service that takes answers from outside (`open`) has the call waiting before `ApprovalRequested` is out,
 * so an answer given on seeing the event finds it.
 */
const approve = Effect.fnUntraced(function*<R>(run: CallRun<R>, call: Hooks.ToolCall, reason: string | undefined) {
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
    ? Approvals.denied(Feedback.stopped(answer, run.stops.wallClock, false).text)
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
 * results are reported as `ToolExecutionUpdate`.
 */
const invoke = <R>(run: CallRun<R>, planned: Plan.Prepared): Effect.Effect<Output, ToolFatalError, R> => {
  const { call, tool } = planned
  const { events } = run
  const { services } = run.env
  // `guard`: a registry of the application's own may throw, or die, rather than answer.
  const invoked = Effect.catchCause(
    ToolRun.guard(() =>
      run.env.registry.invoke(tool.name, {
        toolCallId: call.id,
        params: call.params,
        onPreliminary: (partial) =>
          // preliminary results are reported through the run's hooks, which may need its services
          Effect.provideContext(
            Events.emit(events, { _tag: "ToolExecutionUpdate", toolCallId: call.id, toolName: tool.name, partial }),
            services
          )
      })
    ),
    (cause) =>
      Effect.catchTag(ToolRun.unexpected(tool.name, cause), "ToolFatalError", (error) => fatal(run, call, error))
  )
  const timeout = planned.settings.timeout !== undefined
    ? Duration.toMillis(planned.settings.timeout)
    : run.env.config.toolTimeout ?? undefined
  if (timeout === undefined) return invoked
  // The handler is interrupted (its finalizers run) when the timeout fires.
  return Effect.timeoutOrElse(invoked, {
    duration: Duration.millis(timeout),
    orElse: () =>
      Effect.succeed<Output>({
        ...errorOutput(Feedback.timedOut(tool.name, timeout)),
        details: { kind: "timedOut", timeoutMs: timeout }
      })
  })
}

/**
 * The `afterToolCall` hooks, in order, each seeing the result as the hooks
 * before it left it; then the cap on the text the model reads; then the
 * result is recorded and reported.
 */
function* finalize<R>(run: CallRun<R>, planned: Plan.Prepared | Plan.Immediate, executed: Executed, startedAt: number) {
  const settings = planned._tag === "Prepared" ? planned.settings : undefined
  const { call } = planned
  let current = executed.result
  let terminate = executed.executed && settings !== undefined && settings.terminating && !current.isError
  for (const plugin of run.env.hooks.afterToolCall) {
    if (plugin.afterToolCall === undefined) continue
    const seen = { result: current, terminate, executed: executed.executed }
    const change = yield* plugin.afterToolCall(call, seen, run.context)
    if (change === undefined) continue
    if (change.content !== undefined || change.isError !== undefined || change.details !== undefined) {
      current = resultOf(
        call,
        change.content ?? current.content,
        change.isError ?? current.isError,
        change.details !== undefined ? change.details : current.details
      )
    }
    if (change.terminate !== undefined) terminate = change.terminate
  }
  current = truncate(current, settings?.maxResultChars ?? run.env.config.maxResultChars)
  Journal.record(run.journal, current)
  yield* Events.toolEnded(run.events, current, startedAt, terminate)
  const finalized: Finalized = { result: current, terminate }
  return finalized
}

/** What a call's handler gave, and the `details` of a result the loop wrote (a stop, a timeout). */
interface Output extends ToolRun.Output {
  readonly details?: unknown
}

const errorOutput = (text: string): ToolRun.Output => ({ content: [Message.text(text)], isError: true })

const noteOutput = (note: Feedback.Note): Output => ({ ...errorOutput(note.text), details: note.details })

const resultOf = (
  call: Hooks.ToolCall,
  content: ReadonlyArray<Message.UserContent>,
  isError: boolean,
  details: unknown
): Message.ToolResultMessage => {
  const result: Message.ToolResultMessage = {
    role: "toolResult",
    toolCallId: call.id,
    toolName: call.name,
    content,
    isError
  }
  return details === undefined ? result : { ...result, details }
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
