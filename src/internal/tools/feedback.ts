/**
 * Every text the model reads about a tool call that the tool did not write
 * itself: an unknown tool, arguments that do not fit, a block, a quota, a
 * denial, a stop, a timeout, a failure, a crash, a cut. Each comes with the
 * `details` its result carries (which never reach the model), so the wording
 * of a call's fate is in one place.
 *
 * @internal
 */
import { type Schema, SchemaIssue } from "effect"
import { Tool } from "effect/ai"
import * as ToolArguments from "../../ToolArguments.ts"
import type { Stop } from "../stops.ts"

/**
 * A result the loop writes for a call: the text the model reads, and the
 * `details` kept beside it.
 *
 * @internal
 */
export interface Note {
  readonly text: string
  readonly details?: unknown
}

const note = (text: string, details?: unknown): Note => details === undefined ? { text } : { text, details }

// -----------------------------------------------------------------------------
// Before a call runs
// -----------------------------------------------------------------------------

/** @internal */
export const unknownTool = (name: string, available: ReadonlyArray<Tool.Any>): Note =>
  note(`Unknown tool "${name}". Available tools: ${available.map((tool) => tool.name).join(", ") || "(none)"}.`)

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
export const malformedArguments = (tool: Tool.Any, params: ToolArguments.Malformed, rewrittenBy?: string): Note =>
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
): Note =>
  note(
    `Invalid arguments for ${tool.name}: ${describeIssue(error)}\n` +
      `Expected arguments matching this schema: ${jsonSchemaText(tool)}\n` +
      `You sent: ${capRaw(ToolArguments.toJsonText(params))}`,
    invalidDetails(rewrittenBy)
  )

const invalidDetails = (rewrittenBy: string | undefined) =>
  rewrittenBy === undefined ? { kind: "invalidArguments" } : { kind: "invalidArguments", rewrittenBy }

/** A call that had started before a crash, to a tool that is not safe to run again. @internal */
export const outcomeUnknown = (toolName: string): Note =>
  note(
    `This call to ${toolName} had started when the run was interrupted, and its outcome is unknown: ` +
      "it may or may not have taken effect. Check before calling it again.",
    { kind: "outcomeUnknown" }
  )

/** @internal */
export const overCallLimit = (limit: number | null): Note =>
  note(
    `This tool call was not executed: at most ${limit} calls per turn. ` +
      "Reissue the calls that matter in the next turn, fewer at a time.",
    { kind: "notExecuted", reason: "maxToolCallsPerTurn" }
  )

/** @internal */
export const blocked = (plugin: string, reason: string, details: unknown): Note =>
  note(
    `Tool call blocked: ${reason}`,
    details === undefined ? { kind: "blocked", plugin } : { kind: "blocked", plugin, details }
  )

/** @internal */
export const quotaExceeded = (toolName: string, scope: "turn" | "run", limit: number): Note =>
  note(`Quota exceeded: ${toolName} may be called at most ${limit} times per ${scope}.`, {
    kind: "quota",
    scope,
    limit
  })

/** The reason a call that needs approval is denied when the run has no `Approvals` service. @internal */
export const noApprover = "this call needs approval and no approver is configured"

/** @internal */
export const denied = (reason: string): Note => note(`Tool call denied: ${reason}`, { kind: "denied" })

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
export const stopped = (stop: Stop, wallClock: number | null, started: boolean): Note => {
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
export const leftOpen = (interrupted: boolean, started: boolean): Note => {
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

/** A value as text: strings as they are, anything else as JSON. @internal */
export const resultText = (encoded: unknown): string =>
  typeof encoded === "string" ? encoded : JSON.stringify(encoded) ?? ""

/** @internal */
export const describeError = (error: unknown): string => error instanceof Error ? error.message : resultText(error)

const describeDefect = (defect: unknown): string =>
  defect instanceof Error
    ? `${defect.name}: ${defect.message}`
    : typeof defect === "string"
    ? defect
    : resultText(defect)

/** @internal */
export const timedOut = (toolName: string, ms: number): string => `Tool ${toolName} timed out after ${ms} ms.`

/** A failure the tool's failure Schema could not encode, or one that did not come from its handler. @internal */
export const failed = (toolName: string, error: unknown): string => `Tool ${toolName} failed: ${describeError(error)}`

/** @internal */
export const crashed = (toolName: string, defect: unknown): string =>
  `Tool ${toolName} crashed: ${describeDefect(defect)}`

/** @internal */
export const interrupted = (toolName: string): string => `Tool ${toolName} was interrupted.`

/** The result of a call whose fatal failure ends the run (in the state the run fails with). @internal */
export const failedFatally = (toolName: string, description: string): Note =>
  note(`Tool ${toolName} failed fatally: ${description}`, { kind: "fatal" })

/** What is said where a result's text was cut. @internal */
export const cutMarker = (cut: number, total: number): string => `\n[… ${cut} of ${total} characters cut]`
