/**
 * Every text the model reads about a tool call that neither the tool nor the
 * registry wrote: arguments that do not fit, a block, a quota, a denial, a
 * stop, a timeout, a fatal failure, a cut. Each is a `ToolRegistry.Output`
 * (the one shape of a call's result) with the `details` its result carries
 * (which never reach the model), so the wording of a call's fate is in one
 * place. What the registry answers (an unknown tool, a failed or crashed
 * handler) is in `ToolRegistry`.
 *
 * @internal
 */
import type * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import * as Tool from "effect/ai/Tool"
import * as ToolArguments from "../../ToolArguments.ts"
import { errorOutput as note, outcomeUnknown as outcomeUnknownOf, type Output } from "../../ToolRegistry.ts"
import type { Stop } from "../stops.ts"

// -----------------------------------------------------------------------------
// Before a call runs
// -----------------------------------------------------------------------------

const RAW_LIMIT = 1024

const capRaw = (raw: string): string =>
  raw.length <= RAW_LIMIT ? raw : `${raw.slice(0, RAW_LIMIT)}… (${raw.length - RAW_LIMIT} more characters)`

const jsonSchemaText = (tool: Tool.Any): string => {
  try {
    return JSON.stringify(Tool.getJsonSchema(tool))
  } catch {
    return "(schema unavailable)"
  }
}

const formatIssue = SchemaIssue.makeFormatterStandardSchemaV1()

/**
 * Every problem with the arguments, each with where it is: `a: Expected number; b: Missing key`.
 *
 * @internal
 */
export const describeIssue = (error: Schema.SchemaError): string =>
  formatIssue(error.issue).issues
    .map((issue) =>
      issue.path === undefined || issue.path.length === 0
        ? issue.message
        : `${issue.path.map((key) => String(typeof key === "object" ? key.key : key)).join(".")}: ${issue.message}`
    )
    .join("; ")

/**
 * Arguments that were not JSON (`rewrittenBy`: a `beforeToolCall` hook's
 * rewrite was the culprit).
 *
 * @internal
 */
export const malformedArguments = (tool: Tool.Any, params: ToolArguments.Malformed, rewrittenBy?: string): Output =>
  note(
    `The arguments for ${tool.name} were not valid JSON (${params.error}). You sent (raw): ${capRaw(params.raw)}\n` +
      `Resend the call with a JSON object matching this schema: ${jsonSchemaText(tool)}`,
    invalidDetails(rewrittenBy)
  )

/** @internal */
export const invalidArguments = (
  tool: Tool.Any,
  params: unknown,
  error: Schema.SchemaError,
  rewrittenBy?: string
): Output =>
  note(
    `Invalid arguments for ${tool.name}: ${describeIssue(error)}\n` +
      `Expected arguments matching this schema: ${jsonSchemaText(tool)}\n` +
      `You sent: ${capRaw(ToolArguments.toJsonText(params))}`,
    invalidDetails(rewrittenBy)
  )

const invalidDetails = (rewrittenBy: string | undefined) =>
  rewrittenBy === undefined ? { kind: "invalidArguments" } : { kind: "invalidArguments", rewrittenBy }

/** A call that had started before a crash, to a tool that is not safe to run again. @internal */
export const outcomeUnknown = (toolName: string): Output => outcomeUnknownOf(toolName)

/** @internal */
export const overCallLimit = (limit: number | null): Output =>
  note(
    `This tool call was not executed: at most ${limit} calls per turn. ` +
      "Reissue the calls that matter in the next turn, fewer at a time.",
    { kind: "notExecuted", reason: "maxToolCallsPerTurn" }
  )

/** @internal */
export const blocked = (plugin: string, reason: string, details: unknown): Output =>
  note(
    `Tool call blocked: ${reason}`,
    details === undefined ? { kind: "blocked", plugin } : { kind: "blocked", plugin, details }
  )

/** @internal */
export const quotaExceeded = (toolName: string, scope: "turn" | "run", limit: number): Output =>
  note(`Quota exceeded: ${toolName} may be called at most ${limit} times per ${scope}.`, {
    kind: "quota",
    scope,
    limit
  })

/** @internal */
export const durationQuotaExceeded = (toolName: string, limitMs: number, usedMs: number): Output =>
  note(`Quota exceeded: ${toolName} may take at most ${limitMs} ms in all, and has taken ${Math.round(usedMs)} ms.`, {
    kind: "quota",
    scope: "duration",
    limit: limitMs
  })

/** The reason a call that needs approval is denied when the run has no `Approvals` service. @internal */
export const noApprover = "this call needs approval and no approver is configured"

/** @internal */
export const denied = (reason: string): Output => note(`Tool call denied: ${reason}`, { kind: "denied" })

/** What the model and the host are told of a call's effects when it was cut short while its handler ran. */
const mayHaveRun =
  "It had started and was interrupted: its outcome is unknown, it may or may not have taken effect. " +
  "Check before calling it again."

/**
 * A call a stop never let start (`started: false`: nothing of it ran), or cut
 * short while its handler ran (`started: true`: its outcome is unknown, as
 * after a crash). `wallClock`: the budget, in ms.
 *
 * @internal
 */
export const stopped = (stop: Stop, wallClock: number | null, started: boolean): Output => {
  const why = stop._tag === "Cancel"
    ? { verb: "cancelled", reason: stop.reason, details: { kind: "cancelled" } }
    : stop._tag === "Halt"
    ? { verb: "stopped", reason: stop.reason, details: { kind: "halted", outcome: stop.outcome } }
    : {
      verb: "stopped",
      reason: `the run's wall-clock budget of ${wallClock} ms ran out`,
      details: { kind: "budgetExceeded", budget: "wallClock" }
    }
  return started
    ? note(`Tool call ${why.verb} while it ran: ${why.reason}. ${mayHaveRun}`, {
      ...why.details,
      started: true,
      outcome: "unknown"
    })
    : note(`Tool call ${why.verb} before it started: ${why.reason}. It did not run.`, {
      ...why.details,
      started: false
    })
}

/**
 * A call left open by a run that ended abnormally (`interrupted`: the run's
 * fiber was interrupted; else the run failed): whether its handler had
 * started says whether it may have taken effect.
 *
 * @internal
 */
export const leftOpen = (interrupted: boolean, started: boolean): Output => {
  const why = interrupted ? "the run was stopped" : "the run failed"
  return started
    ? note(`Tool call interrupted while it ran: ${why}. ${mayHaveRun}`, {
      kind: interrupted ? "interrupted" : "runFailed",
      started: true,
      outcome: "unknown"
    })
    : note(`Tool call not started: ${why}. It did not run.`, {
      kind: interrupted ? "interrupted" : "runFailed",
      started: false
    })
}

// -----------------------------------------------------------------------------
// While and after a call runs
// -----------------------------------------------------------------------------

/** @internal */
export const timedOut = (toolName: string, ms: number): Output =>
  note(`Tool ${toolName} timed out after ${ms} ms.`, { kind: "timedOut", timeoutMs: ms })

/** The result of a call whose fatal failure ends the run (in the state the run fails with). @internal */
export const failedFatally = (toolName: string, description: string): Output =>
  note(`Tool ${toolName} failed fatally: ${description}`, { kind: "fatal" })

/** What is said where a result's text was cut. @internal */
export const cutMarker = (cut: number, total: number): string => `\n[… ${cut} of ${total} characters cut]`

/** The text of one of these answers (a denial's reason). @internal */
export const textOf = (output: Output): string => {
  const first = output.content[0]
  return first !== undefined && first.type === "text" ? first.text : ""
}
