/**
 * The first stage of a tool batch: each call of the assistant message, in
 * order, is looked up, held to the per-turn call limit, validated against its
 * tool's parameter Schema (the arguments are decoded here, once), shown to
 * the `beforeToolCall` hooks, held to its tool's quotas, and asked whether it
 * needs approval. A call is then `Prepared` to run, or answered at once
 * (`Immediate`: unknown, invalid, blocked, over a limit), or `Restored` (a
 * batch saved mid-way had answered it). Nothing runs yet.
 *
 * @internal
 */
import { Effect } from "effect"
import type { Tool } from "effect/ai"
import * as AgentTool from "../../AgentTool.ts"
import type * as Hooks from "../../Hooks.ts"
import type * as Message from "../../Message.ts"
import * as ToolArguments from "../../ToolArguments.ts"
import type * as LiveRun from "../liveRun.ts"
import * as Step from "../step.ts"
import * as ToolRun from "../toolRun.ts"
import * as Feedback from "./feedback.ts"

/**
 * A call ready to run.
 *
 * @internal
 */
export interface Prepared {
  readonly _tag: "Prepared"
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

/**
 * A call answered without running it.
 *
 * @internal
 */
export interface Immediate {
  readonly _tag: "Immediate"
  readonly index: number
  readonly call: Hooks.ToolCall
  readonly counted: boolean
  readonly note: Feedback.Note
}

/**
 * A call a batch restored from a state saved mid-way had already answered:
 * its result is used as it is.
 *
 * @internal
 */
export interface Restored {
  readonly _tag: "Restored"
  readonly index: number
  readonly call: Hooks.ToolCall
  readonly counted: false
  readonly result: Message.ToolResultMessage
}

/**
 * A planned call.
 *
 * @internal
 */
export type Planned = Prepared | Immediate | Restored

/**
 * The plan of a batch: its calls in order, and how many were over the per-turn limit.
 *
 * @internal
 */
export interface Plan {
  readonly calls: ReadonlyArray<Planned>
  readonly overLimit: number
}

type PlanRun<R> = LiveRun.Uses<R, "env" | "journal" | "progress" | "context" | "transcript">

/**
 * Plans the calls of one assistant message. A plain generator, as are the
 * steps below: the batch delegates to it with `yield*`.
 *
 * @internal
 */
export function* plan<R>(run: PlanRun<R>, calls: ReadonlyArray<Message.ToolCallPart>) {
  const over = overLimit(run, calls)
  const perTurn = new Map<string, number>()
  const planned: Array<Planned> = []
  for (let index = 0; index < calls.length; index++) {
    planned.push(yield* planOne(run, calls[index]!, index, over.has(index), perTurn))
  }
  const result: Plan = { calls: planned, overLimit: over.size }
  return result
}

const noneOver: ReadonlySet<number> = new Set()

/** The calls over the per-turn limit, by index (only calls to tools that count toward it count). */
const overLimit = <R>(run: PlanRun<R>, calls: ReadonlyArray<Message.ToolCallPart>): ReadonlySet<number> => {
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

function* planOne<R>(
  run: PlanRun<R>,
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
    const planned: Restored = { _tag: "Restored", index, call: base, counted: false, result: restored }
    return planned
  }
  if (tool === undefined) return immediate(index, base, true, Feedback.unknownTool(part.name, run.env.registry.tools))
  const settings = AgentTool.settings(tool)
  const counted = settings.countsTowardVote
  if (run.journal.restoredStarted.has(part.id) && !settings.replaySafe) {
    return immediate(index, base, counted, Feedback.outcomeUnknown(tool.name))
  }
  if (over) return immediate(index, base, counted, Feedback.overCallLimit(run.env.config.maxToolCallsPerTurn))
  const first = yield* validate(tool, part.params)
  if (first._tag === "Invalid") return immediate(index, base, counted, first.note)
  let call: Hooks.ToolCall = { id: part.id, name: part.name, params: first.params, rawParams: part.params, tool }
  const verdict = run.env.hooks.beforeToolCall.length === 0 ? noVerdict : yield* beforeHooks(run, call)
  if (verdict.block !== undefined) {
    const { details, plugin, reason } = verdict.block
    return immediate(index, call, counted, Feedback.blocked(plugin, reason, details))
  }
  if (verdict.rewrite !== undefined) {
    const again = yield* validate(tool, verdict.rewrite.params, verdict.rewrite.plugin)
    if (again._tag === "Invalid") return immediate(index, call, counted, again.note)
    call = { ...call, params: again.params, rawParams: verdict.rewrite.params }
  }
  const quota = settings.quota
  if (quota !== undefined) {
    const inTurn = (perTurn.get(tool.name) ?? 0) + 1
    const inRun = (run.progress.callsPerTool.get(tool.name) ?? 0) + 1
    if (quota.perTurn !== undefined && inTurn > quota.perTurn) {
      return immediate(index, call, counted, Feedback.quotaExceeded(tool.name, "turn", quota.perTurn))
    }
    if (quota.perRun !== undefined && inRun > quota.perRun) {
      return immediate(index, call, counted, Feedback.quotaExceeded(tool.name, "run", quota.perRun))
    }
    perTurn.set(tool.name, inTurn)
  }
  run.progress.callsPerTool.set(tool.name, (run.progress.callsPerTool.get(tool.name) ?? 0) + 1)
  let approval = verdict.approval
  if (approval === undefined && (yield* needsApproval(run, tool, call.params, call.id))) {
    approval = { reason: undefined }
  }
  const prepared: Prepared = { _tag: "Prepared", index, call, counted, tool, settings, approval }
  return prepared
}

const immediate = (index: number, call: Hooks.ToolCall, counted: boolean, note: Feedback.Note): Planned => ({
  _tag: "Immediate",
  index,
  call,
  counted,
  note
})

type Validated =
  | { readonly _tag: "Valid"; readonly params: unknown }
  | { readonly _tag: "Invalid"; readonly note: Feedback.Note }

const valid = (params: unknown): Validated => ({ _tag: "Valid", params })

/**
 * Decodes a call's arguments with its tool's Schema (`rewrittenBy`: the
 * plugin whose rewrite they are). A Schema without effectful steps decodes to
 * an Exit, read here with no fiber step.
 */
function* validate(tool: Tool.Any, params: unknown, rewrittenBy?: string) {
  if (ToolArguments.isMalformed(params)) {
    const malformed: Validated = { _tag: "Invalid", note: Feedback.malformedArguments(tool, params, rewrittenBy) }
    return malformed
  }
  const decoded = ToolRun.decoderFor(tool)(params)
  if (Step.isSucceeded(decoded)) return valid(decoded.value)
  return yield* Effect.match(decoded, {
    onSuccess: valid,
    onFailure: (error): Validated => ({
      _tag: "Invalid",
      note: Feedback.invalidArguments(tool, params, error, rewrittenBy)
    })
  })
}

/**
 * What the `beforeToolCall` hooks decided together: the first block, the
 * first approval requirement, the last rewrite.
 */
interface Verdict {
  readonly block?: { readonly plugin: string; readonly reason: string; readonly details: unknown } | undefined
  readonly approval?: { readonly reason: string | undefined } | undefined
  readonly rewrite?: { readonly plugin: string; readonly params: unknown } | undefined
}

const noVerdict: Verdict = {}

/**
 * Runs the `beforeToolCall` hooks in order. The first `Block` wins (the hooks
 * after it do not run); a `Rewrite` is what the hooks after it see as the
 * call's raw arguments, and the last one is validated again.
 */
const beforeHooks = Effect.fnUntraced(function*<R>(run: PlanRun<R>, call: Hooks.ToolCall) {
  let approval: Verdict["approval"]
  let rewrite: Verdict["rewrite"]
  let current = call
  for (const plugin of run.env.hooks.beforeToolCall) {
    if (plugin.beforeToolCall === undefined) continue
    const decision = yield* plugin.beforeToolCall(current, run.context)
    switch (decision._tag) {
      case "Block":
        return { block: { plugin: plugin.name, reason: decision.reason, details: decision.details } } satisfies Verdict
      case "RequireApproval":
        approval ??= { reason: decision.reason }
        break
      case "Rewrite":
        rewrite = { plugin: plugin.name, params: decision.params }
        current = { ...current, rawParams: decision.params }
        break
    }
  }
  const verdict: Verdict = { approval, rewrite }
  return verdict
})

const noApproval = Step.settled(false)
const approvalNeeded = Step.settled(true)

/** Whether a call needs approval by its tool's `needsApproval`; a flag is settled at once. */
const needsApproval = <R>(
  run: PlanRun<R>,
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
