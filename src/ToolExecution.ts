/**
 * One batch of tool calls: the calls of one assistant message, from lookup
 * to results.
 *
 * For each call, in the calls' order: the per-turn call limit, lookup,
 * argument validation against the tool's Schema (malformed JSON, unknown
 * tools and invalid arguments become error results the model can read),
 * `beforeToolCall` hooks in order (the first block wins), per-tool quotas and
 * the approval requirement. Then the calls run: parallel ones on child fibers
 * (at most `maxParallelTools` at once), sequential ones one at a time after
 * them, and everything one at a time when any call is `exclusive`. A call
 * waiting for approval does not hold up the others. Each handler runs with
 * its timeout; a failure, a defect or a timeout is an error result (a
 * failure ends the run only when declared fatal, see `AgentTool.Fatal`);
 * preliminary results stream as `ToolExecutionUpdate` events;
 * `afterToolCall` hooks see every result, also of calls that never ran.
 * Results come back in the calls' order whatever order they finish in.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Exit, Fiber, Schema, SchemaIssue, Semaphore } from "effect"
import { Tool } from "effect/ai"
import { ToolFatalError } from "./AgentError.ts"
import * as AgentTool from "./AgentTool.ts"
import type * as Hooks from "./Hooks.ts"
import * as Approvals from "./Approvals.ts"
import * as Message from "./Message.ts"
import * as ToolArguments from "./ToolArguments.ts"
import * as Run from "./internal/run.ts"
import * as Settled from "./internal/settled.ts"
import * as ToolRun from "./internal/toolRun.ts"
import * as Feedback from "./internal/tools/feedback.ts"

/**
 * The outcome of a batch.
 *
 * @since 0.1.0
 */
export interface BatchResult {
  /** One result per call, in the calls' order. */
  readonly results: ReadonlyArray<Message.ToolResultMessage>
  /** Whether every counted result voted to end the run. */
  readonly terminate: boolean
}

type Immediate = { readonly _tag: "Immediate"; readonly text: string; readonly details?: unknown }
/** A result the batch had produced before its state was saved: used as it is. */
type Restored = { readonly _tag: "Restored"; readonly result: Message.ToolResultMessage }
type Execute = {
  readonly _tag: "Execute"
  readonly tool: Tool.Any
  readonly settings: AgentTool.Settings
  readonly params: unknown
  readonly approval: { readonly reason: string | undefined } | undefined
}

interface Planned {
  readonly index: number
  readonly call: Hooks.ToolCall
  /** Whether the call takes part in the termination vote. */
  readonly counted: boolean
  readonly action: Immediate | Execute | Restored
}

interface Finished {
  readonly result: Message.ToolResultMessage
  readonly terminate: boolean
}

const RAW_LIMIT = 1024

const immediate = (text: string, details?: unknown): Immediate =>
  details === undefined ? { _tag: "Immediate", text } : { _tag: "Immediate", text, details }

const jsonSchemaText = (tool: Tool.Any): string => {
  try {
    return JSON.stringify(Tool.getJsonSchema(tool))
  } catch {
    return "(schema unavailable)"
  }
}

const capRaw = (raw: string): string =>
  raw.length <= RAW_LIMIT ? raw : `${raw.slice(0, RAW_LIMIT)}… (${raw.length - RAW_LIMIT} more characters)`

const formatIssue = SchemaIssue.makeFormatterStandardSchemaV1()

/** Every problem with the arguments, each with where it is: `a: Expected number; b: Missing key`. */
const describeIssue = (error: Schema.SchemaError): string =>
  formatIssue(error.issue).issues
    .map((issue) => issue.path === undefined || issue.path.length === 0
      ? issue.message
      : `${issue.path.map((key) => typeof key === "object" ? String(key.key) : String(key)).join(".")}: ${issue.message}`)
    .join("; ")

type Validated =
  | { readonly _tag: "Valid"; readonly params: unknown }
  | { readonly _tag: "Invalid"; readonly text: string }

const valid = (params: unknown): Validated => ({ _tag: "Valid", params })

const invalidArguments = (tool: Tool.Any, params: unknown, error: Schema.SchemaError): Validated => ({
  _tag: "Invalid",
  text: `Invalid arguments for ${tool.name}: ${describeIssue(error)}\nExpected arguments matching this schema: ${
    jsonSchemaText(tool)
  }\nYou sent: ${capRaw(ToolArguments.toJsonText(params))}`
})

/**
 * Decodes a call's arguments with its tool's Schema. A plain generator: a
 * Schema without effectful steps decodes to an Exit, read here with no fiber step.
 */
function* validate(tool: Tool.Any, params: unknown) {
  if (ToolArguments.isMalformed(params)) {
    const malformed: Validated = {
      _tag: "Invalid",
      text: `The arguments for ${tool.name} were not valid JSON (${params.error}). You sent (raw): ${
        capRaw(params.raw)
      }\nResend the call with a JSON object matching this schema: ${jsonSchemaText(tool)}`
    }
    return malformed
  }
  const decoded = ToolRun.decoderFor(tool)(params)
  if (Exit.isExit(decoded) && Exit.isSuccess(decoded)) return valid(decoded.value)
  return yield* Effect.match(decoded, { onSuccess: valid, onFailure: (error) => invalidArguments(tool, params, error) })
}

const unknownToolText = (name: string, available: ReadonlyArray<Tool.Any>): string =>
  `Unknown tool "${name}". Available tools: ${available.map((tool) => tool.name).join(", ") || "(none)"}.`

const noneOver: ReadonlySet<number> = new Set()

/** The calls over the per-turn limit, by index. */
const overLimit = <R>(run: Run.Run<R>, calls: ReadonlyArray<Message.ToolCallPart>): ReadonlySet<number> => {
  const limit = run.config.maxToolCallsPerTurn
  if (limit === null || calls.length <= limit) return noneOver
  const over = new Set<number>()
  let counted = 0
  calls.forEach((call, index) => {
    const tool = run.registry.get(call.name)
    if (tool === undefined || !AgentTool.settings(tool).countsTowardCallLimit) return
    counted++
    if (counted > limit) over.add(index)
  })
  return over
}

/** What the `beforeToolCall` hooks decided together: the first block, the first approval requirement, the last rewrite. */
interface HookVerdict {
  readonly block?: { readonly plugin: string; readonly reason: string; readonly details: unknown } | undefined
  readonly approval?: { readonly reason: string | undefined } | undefined
  readonly rewrite?: { readonly plugin: string; readonly params: unknown } | undefined
}

const runBeforeHooks = Effect.fnUntraced(function*<R>(run: Run.Run<R>, call: Hooks.ToolCall) {
  let approval: HookVerdict["approval"]
  let rewrite: HookVerdict["rewrite"]
  let current = call
  for (const plugin of run.hooks.beforeToolCall) {
    if (plugin.beforeToolCall === undefined) continue
    const decision = yield* plugin.beforeToolCall(current, run.context)
    switch (decision._tag) {
      case "Block":
        return { block: { plugin: plugin.name, reason: decision.reason, details: decision.details } } satisfies HookVerdict
      case "RequireApproval":
        approval ??= { reason: decision.reason }
        break
      case "Rewrite":
        rewrite = { plugin: plugin.name, params: decision.params }
        current = { ...current, rawParams: decision.params }
        break
    }
  }
  const verdict: HookVerdict = { approval, rewrite }
  return verdict
})

const noApproval = Settled.make(false)
const approvalNeeded = Settled.make(true)

/** Whether a call needs approval by its tool's `needsApproval`; a flag is settled at once. */
const needsApproval = <R>(
  run: Run.Run<R>,
  tool: Tool.Any,
  params: unknown,
  toolCallId: string
): Effect.Effect<boolean> | Settled.Settled<boolean> => {
  const flag = tool.needsApproval
  if (flag === undefined || flag === false) return noApproval
  if (flag === true) return approvalNeeded
  const answer = flag(params, { toolCallId, messages: run.prompt })
  return Effect.isEffect(answer) ? answer : answer ? approvalNeeded : noApproval
}

// `validate`, `plan`, `runCall` and `finish` are plain generators, delegated to with `yield*` from the batch's:
// as Effects of their own they would cost a suspend, an iterator and a return step per call.

function* plan<R>(
  run: Run.Run<R>,
  part: Message.ToolCallPart,
  index: number,
  over: ReadonlySet<number>,
  perTurn: Map<string, number>
) {
  const tool = run.registry.get(part.name)
  const base: Hooks.ToolCall = { id: part.id, name: part.name, params: part.params, rawParams: part.params, tool }
  // What was restored stays in `run.restored` until the batch ends, so a snapshot taken while the
  // batch runs still has it (a call that started before the crash must never look unstarted).
  const restored = run.restored.results.get(part.id)
  if (restored !== undefined) {
    return { index, call: base, counted: false, action: { _tag: "Restored", result: restored } } satisfies Planned
  }
  const startedBefore = run.restored.started.has(part.id)
  if (tool === undefined) {
    return {
      index,
      call: base,
      counted: true,
      action: immediate(unknownToolText(part.name, run.registry.tools))
    } satisfies Planned
  }
  const settings = AgentTool.settings(tool)
  const planned = (call: Hooks.ToolCall, action: Immediate | Execute | Restored): Planned => ({
    index,
    call,
    counted: settings.countsTowardVote,
    action
  })
  if (startedBefore && !settings.replaySafe) {
    return planned(
      base,
      immediate(
        `This call to ${tool.name} had started when the run was interrupted, and its outcome is unknown: ` +
          "it may or may not have taken effect. Check before calling it again.",
        { kind: "outcomeUnknown" }
      )
    )
  }
  if (over.has(index)) {
    return planned(
      base,
      immediate(
        `This tool call was not executed: at most ${run.config.maxToolCallsPerTurn} calls per turn. ` +
          "Reissue the calls that matter in the next turn, fewer at a time.",
        { kind: "notExecuted", reason: "maxToolCallsPerTurn" }
      )
    )
  }
  const first = yield* validate(tool, part.params)
  if (first._tag === "Invalid") return planned(base, immediate(first.text, { kind: "invalidArguments" }))
  let call: Hooks.ToolCall = { id: part.id, name: part.name, params: first.params, rawParams: part.params, tool }
  const verdict = run.hooks.beforeToolCall.length === 0 ? {} : yield* runBeforeHooks(run, call)
  if (verdict.block !== undefined) {
    const { details, plugin, reason } = verdict.block
    const kept = details === undefined ? { kind: "blocked", plugin } : { kind: "blocked", plugin, details }
    return planned(call, immediate(`Tool call blocked: ${reason}`, kept))
  }
  if (verdict.rewrite !== undefined) {
    const again = yield* validate(tool, verdict.rewrite.params)
    if (again._tag === "Invalid") {
      return planned(call, immediate(again.text, { kind: "invalidArguments", rewrittenBy: verdict.rewrite.plugin }))
    }
    call = { ...call, params: again.params, rawParams: verdict.rewrite.params }
  }
  let approval = verdict.approval
  const quota = settings.quota
  if (quota !== undefined) {
    const inTurn = (perTurn.get(tool.name) ?? 0) + 1
    const inRun = (run.callsPerTool.get(tool.name) ?? 0) + 1
    const exceeded = quota.perTurn !== undefined && inTurn > quota.perTurn
      ? { scope: "turn", limit: quota.perTurn }
      : quota.perRun !== undefined && inRun > quota.perRun
      ? { scope: "run", limit: quota.perRun }
      : undefined
    if (exceeded !== undefined) {
      return planned(
        call,
        immediate(
          `Quota exceeded: ${tool.name} may be called at most ${exceeded.limit} times per ${exceeded.scope}.`,
          { kind: "quota", ...exceeded }
        )
      )
    }
    perTurn.set(tool.name, inTurn)
  }
  run.callsPerTool.set(tool.name, (run.callsPerTool.get(tool.name) ?? 0) + 1)
  if (approval === undefined && (yield* needsApproval(run, tool, call.params, call.id))) {
    approval = { reason: undefined }
  }
  return planned(call, { _tag: "Execute", tool, settings, params: call.rawParams, approval })
}

// -----------------------------------------------------------------------------
// Running a call
// -----------------------------------------------------------------------------

type Handled =
  | { readonly _tag: "Result"; readonly content: ReadonlyArray<Message.UserContent>; readonly isError: boolean }
  | { readonly _tag: "Fatal"; readonly error: ToolFatalError }

const errorResult = (text: string): Handled => ({ _tag: "Result", content: [Message.text(text)], isError: true })

const timeoutOf = <R>(run: Run.Run<R>, settings: AgentTool.Settings): number | undefined => {
  if (settings.timeout !== undefined) return Duration.toMillis(settings.timeout)
  return run.config.toolTimeout ?? undefined
}

const resultOf = (output: ToolRun.Output): Handled => ({ _tag: "Result", content: output.content, isError: output.isError })
const fatalOf = (error: ToolFatalError): Handled => ({ _tag: "Fatal", error })

const runHandler = <R>(
  run: Run.Run<R>,
  planned: Planned,
  action: Execute
): Effect.Effect<Handled, never, R> => {
  const { tool } = action
  const { call } = planned
  // `guard`: a registry of the application's own may throw rather than fail.
  const invoked = ToolRun.guard(() =>
    run.registry.invoke(tool.name, {
      toolCallId: call.id,
      params: call.params,
      onPreliminary: (partial) =>
        // preliminary results are reported through the run's hooks, which may need its services
        Effect.provideContext(
          Run.emitInput(run, { _tag: "ToolExecutionUpdate", toolCallId: call.id, toolName: tool.name, partial }),
          run.services
        )
    })
  )
  const handled = Effect.matchCauseEffect(invoked, {
    onSuccess: (output) => Effect.succeed(resultOf(output)),
    onFailure: (cause) => Effect.match(ToolRun.unexpected(tool.name, cause), { onSuccess: resultOf, onFailure: fatalOf })
  })
  const timeout = timeoutOf(run, action.settings)
  if (timeout === undefined) return handled
  return withTimeout(handled, timeout, () => errorResult(Feedback.timedOut(tool.name, timeout)))
}

/**
 * Runs a handler under its timeout. `Effect.timeoutOrElse` races the handler
 * with a sleeping fiber: two fibers, and a timer set and cleared, for every
 * call, though most handlers finish without waiting. Here the handler starts
 * at once on a fiber of its own: one that has already finished is read as it
 * is, and only one still running is awaited under the timeout. It is
 * interrupted, its finalizers run, when the timeout fires or the run is
 * interrupted while it waits.
 */
const withTimeout = <R>(
  handled: Effect.Effect<Handled, never, R>,
  timeout: number,
  timedOut: () => Handled
): Effect.Effect<Handled, never, R> =>
  Effect.uninterruptibleMask((restore) =>
    // A forked fiber is interruptible whatever its parent's mask: the handler needs no `restore`.
    Effect.flatMap(Effect.forkChild(handled, { startImmediately: true }), (fiber) => {
      const exit = fiber.pollUnsafe()
      if (exit !== undefined) return exit
      return restore(Effect.timeoutOrElse(Fiber.join(fiber), {
        duration: Duration.millis(timeout),
        orElse: () => Effect.as(Fiber.interrupt(fiber), timedOut())
      })).pipe(Effect.onInterrupt(() => Fiber.interrupt(fiber)))
    })
  )

const cutAt = (text: string, limit: number): string => {
  // Never cut a surrogate pair in half.
  const code = text.charCodeAt(limit - 1)
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? limit - 1 : limit)
}

/** Caps the text the model reads; the full text stays in `details`. */
const truncate = (
  result: Message.ToolResultMessage,
  limit: number | null | undefined
): Message.ToolResultMessage => {
  if (limit === null || limit === undefined) return result
  const text = Message.textOf(result)
  if (text.length <= limit) return result
  const kept = cutAt(text, limit)
  const marker = `\n[… ${text.length - kept.length} of ${text.length} characters cut]`
  const images = result.content.filter((part) => part.type === "image")
  return {
    ...result,
    content: [Message.text(kept + marker), ...images],
    details: result.details === undefined
      ? { truncated: true, fullText: text }
      : { truncated: true, fullText: text, original: result.details }
  }
}

const makeResult = (
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

function* finish<R>(
  run: Run.Run<R>,
  planned: Planned,
  result: Message.ToolResultMessage,
  executed: boolean,
  startedAt: number
) {
  const settings = planned.action._tag === "Execute" ? planned.action.settings : undefined
  let current = result
  let terminate = executed && settings !== undefined && settings.terminating && !result.isError
  for (const plugin of run.hooks.afterToolCall) {
    if (plugin.afterToolCall === undefined) continue
    const change = yield* plugin.afterToolCall(planned.call, { result: current, terminate, executed }, run.context)
    if (change === undefined) continue
    if (change.content !== undefined || change.isError !== undefined || change.details !== undefined) {
      current = makeResult(
        planned.call,
        change.content ?? current.content,
        change.isError ?? current.isError,
        change.details !== undefined ? change.details : current.details
      )
    }
    if (change.terminate !== undefined) terminate = change.terminate
  }
  current = truncate(current, settings?.maxResultChars ?? run.config.maxResultChars)
  // From "started" to "has a result" in one step: a snapshot taken in between (while an afterToolCall hook
  // waits) must not see a call that ran as never started, or a resume would run it again.
  run.batchResults.set(planned.call.id, current)
  run.startedCalls.delete(planned.call.id)
  if (Run.observed(run)) {
    const endedAt = Run.now(run)
    yield* Run.deliver(run, {
      _tag: "ToolExecutionEnd",
      toolCallId: planned.call.id,
      toolName: planned.call.name,
      result: current,
      durationMs: endedAt - startedAt,
      terminate,
      runId: run.runId,
      turn: run.eventTurn,
      timestamp: endedAt
    })
  }
  const finished: Finished = { result: current, terminate }
  return finished
}

/** Whether the approval wait was cut by a stop rather than answered. */
const isStop = (answer: Approvals.Decision | Run.Stop): answer is Run.Stop => "_tag" in answer

const decide = Effect.fnUntraced(function*<R>(
  run: Run.Run<R>,
  planned: Planned,
  approval: { readonly reason: string | undefined }
) {
  const { call } = planned
  const pending = approval.reason === undefined
    ? { toolCallId: call.id, toolName: call.name, params: call.rawParams }
    : { toolCallId: call.id, toolName: call.name, params: call.rawParams, reason: approval.reason }
  run.pendingApprovals.set(call.id, pending)
  yield* Run.emitInput(run, { _tag: "ApprovalRequested", ...pending })
  const answer = run.approvals === undefined
    ? Approvals.denied("this call needs approval and no approver is configured")
    : yield* Run.raceStop(
      run,
      run.approvals.decide({ runId: run.runId, ...pending }),
      (stop): Approvals.Decision | Run.Stop => stop
    )
  run.pendingApprovals.delete(call.id)
  const resolved = isStop(answer) ? { approved: false, reason: Run.stopText(run, answer) } as const : answer
  yield* Run.emitInput(
    run,
    resolved.approved
      ? { _tag: "ApprovalResolved", toolCallId: call.id, toolName: call.name, approved: true }
      : {
        _tag: "ApprovalResolved",
        toolCallId: call.id,
        toolName: call.name,
        approved: false,
        reason: resolved.reason
      }
  )
  return answer
})

function* runCall<R>(run: Run.Run<R>, planned: Planned) {
  const startedAt = Run.now(run)
  const { action, call } = planned
  if (action._tag === "Restored") {
    run.batchResults.set(call.id, action.result)
    return { result: action.result, terminate: false }
  }
  if (action._tag === "Immediate") {
    return yield* finish(run, planned, makeResult(call, [Message.text(action.text)], true, action.details), false, startedAt)
  }
  const before = yield* Run.stopReason(run)
  if (before !== undefined) {
    return yield* finish(
      run,
      planned,
      makeResult(call, [Message.text(Run.stopText(run, before))], true, Run.stopDetails(before)),
      false,
      startedAt
    )
  }
  if (action.approval !== undefined) {
    const decision = yield* decide(run, planned, action.approval)
    if (isStop(decision)) {
      return yield* finish(
        run,
        planned,
        makeResult(call, [Message.text(Run.stopText(run, decision))], true, Run.stopDetails(decision)),
        false,
        startedAt
      )
    }
    if (!decision.approved) {
      return yield* finish(
        run,
        planned,
        makeResult(call, [Message.text(`Tool call denied: ${decision.reason}`)], true, { kind: "denied" }),
        false,
        startedAt
      )
    }
  }
  run.startedCalls.add(call.id)
  if (Run.observed(run)) {
    yield* Run.deliver(run, {
      _tag: "ToolExecutionStart",
      toolCallId: call.id,
      toolName: call.name,
      params: call.rawParams,
      runId: run.runId,
      turn: run.eventTurn,
      timestamp: action.approval === undefined ? startedAt : Run.now(run) // after an approval, time has passed
    })
  }
  const handled = yield* Run.raceStop(
    run,
    runHandler(run, planned, action),
    (stop) => errorResult(Run.stopText(run, stop))
  )
  if (handled._tag === "Fatal") {
    // the call is answered with its failure in the state the run fails with (see `Agent`)
    const { error } = handled
    run.batchResults.set(
      call.id,
      makeResult(call, [Message.text(`Tool ${call.name} failed fatally: ${error.description}`)], true, {
        kind: "fatal"
      })
    )
    run.startedCalls.delete(call.id)
    return yield* error
  }
  return yield* finish(run, planned, makeResult(call, handled.content, handled.isError, undefined), true, startedAt)
}

/** One call as an Effect of its own, for the calls that run on fibers. */
const runOne = Effect.fnUntraced(runCall)

/** Runs several calls: parallel ones on fibers (bounded), then sequential ones in order; all in order when any is exclusive. */
const runAll = <R>(
  run: Run.Run<R>,
  planned: ReadonlyArray<Planned>,
  finished: Array<Finished | undefined>
): Effect.Effect<void, ToolFatalError, R> => {
  const exclusive = planned.some((p) => p.action._tag === "Execute" && p.action.settings.execution === "exclusive")
  const isParallel = (p: Planned) =>
    !exclusive && (p.action._tag !== "Execute" || p.action.settings.execution === "parallel")
  const parallel = planned.filter(isParallel)
  const sequential = planned.filter((p) => !isParallel(p))
  const store = (p: Planned) => Effect.map(runOne(run, p), (done) => void (finished[p.index] = done))
  const first = parallel.length === 0
    ? Effect.void
    : parallel.length === 1
    ? store(parallel[0]!)
    : runBounded(parallel, store, run.config.maxParallelTools)
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
const runBounded = <A, E, R>(
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

/**
 * Runs the tool calls of one assistant message. A plain generator: the
 * loop's turn delegates to it with `yield*`.
 *
 * @since 0.1.0
 */
export function* executeBatch<R>(
  run: Run.Run<R>,
  calls: ReadonlyArray<Message.ToolCallPart>
) {
  run.batchResults.clear()
  const over = overLimit(run, calls)
  if (over.size > 0) {
    yield* Run.emitInput(run, {
      _tag: "GuardTripped",
      guard: "maxToolCallsPerTurn",
      action: "warn",
      detail: `${over.size} of ${calls.length} calls were not executed: at most ${run.config.maxToolCallsPerTurn} per turn`,
      figures: { calls: calls.length, limit: run.config.maxToolCallsPerTurn ?? 0, notExecuted: over.size }
    })
  }
  const perTurn = new Map<string, number>()
  const planned: Array<Planned> = []
  for (let index = 0; index < calls.length; index++) {
    planned.push(yield* plan(run, calls[index]!, index, over, perTurn))
  }
  const finished: Array<Finished | undefined> = new Array(planned.length)
  // One call (most turns): nothing to order or bound.
  if (planned.length === 1) finished[0] = yield* runCall(run, planned[0]!)
  else yield* runAll(run, planned, finished)
  const results: Array<Message.ToolResultMessage> = []
  let counted = 0
  let votes = 0
  for (let i = 0; i < planned.length; i++) {
    const done = finished[i]!
    results.push(done.result)
    if (planned[i]!.counted) {
      counted++
      if (done.terminate) votes++
    }
  }
  run.batchResults.clear()
  run.restored.results.clear()
  run.restored.started.clear()
  const batch: BatchResult = { results, terminate: over.size === 0 && counted > 0 && votes === counted }
  return batch
}
