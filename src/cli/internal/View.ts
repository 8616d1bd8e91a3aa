/**
 * What the command shows while a run runs, built from the run's events.
 *
 * - {@link live}: for a terminal. Streamed text as it comes, each tool call
 *   with a spinner while it runs and then its duration and outcome, calls
 *   waiting for approval, and a status line (turn, tokens, cost, elapsed
 *   time) kept at the bottom. It redraws its bottom lines at most ten times a
 *   second, however fast the deltas come.
 * - {@link log}: for pipes, files and CI logs. One line per event (streamed
 *   text as it comes), each with the time since the start; colours only when
 *   asked, never cursor movement.
 * - {@link quiet}: nothing but notes.
 *
 * Every view also shows notes: warnings, and reports about the control
 * input.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { CliOutput } from "effect/cli"
import type * as AgentEvent from "../../AgentEvent.ts"
import type * as Hooks from "../../Hooks.ts"
import * as Message from "../../Message.ts"
import type { Outcome } from "../../Outcome.ts"
import * as SupervisorEvent from "../../supervisor/SupervisorEvent.ts"
import * as SupervisorOutcome from "../../supervisor/SupervisorOutcome.ts"

/**
 * A view of a run.
 *
 * @since 0.1.0
 */
export interface View {
  /** Observes the run's events. */
  readonly plugin: Hooks.Plugin
  /** Shows a line that is not an event: a warning, a report about the control input. */
  readonly note: (text: string) => void
  /** Shows that the provider is about to send a failed request again. */
  readonly retrying: (retry: Retry) => void
  /** Ends the view (a live view clears its bottom lines and shows the cursor again). */
  readonly close: () => void
}

/**
 * A provider's retry, as the view shows it: "retrying in 2.1 s after 503
 * (2 of 4)".
 *
 * @since 0.1.0
 */
export interface Retry {
  /** 1 for the first retry. */
  readonly attempt: number
  /** The most retries the provider makes. */
  readonly of: number
  readonly delayMs: number
  /** What failed: a status (`503`), or a transport failure in words. */
  readonly after: string
  /** When the failure was seen (the clock of the events). */
  readonly timestamp: number
}

// -----------------------------------------------------------------------------
// Text
// -----------------------------------------------------------------------------

/**
 * Text styles: ANSI colours, or nothing.
 *
 * @since 0.1.0
 */
export interface Style {
  readonly bold: (text: string) => string
  readonly dim: (text: string) => string
  readonly cyan: (text: string) => string
  readonly green: (text: string) => string
  readonly yellow: (text: string) => string
  readonly red: (text: string) => string
}

const ansi = (code: number) => (text: string) => `\x1b[${code}m${text}\x1b[0m`
const plain = (text: string) => text

/**
 * The styles, coloured or plain.
 *
 * @since 0.1.0
 */
export const style = (color: boolean): Style =>
  color
    ? { bold: ansi(1), dim: ansi(2), cyan: ansi(36), green: ansi(32), yellow: ansi(33), red: ansi(31) }
    : { bold: plain, dim: plain, cyan: plain, green: plain, yellow: plain, red: plain }

/**
 * What the terminal may get of a text the agent wrote (model text, tool names, arguments and results, plans,
 * notes): every escape sequence goes whole (colours too, so that no text can fake or hide another, and cursor
 * moves, screen clears, window titles, OSC 8 links), then every control character but a newline or a tab (a
 * carriage return could overwrite a line) and every bidirectional override or isolate (which can show text in
 * another order than it is). The views colour their own text around it.
 *
 * Node's `util.stripVTControlCharacters` would leave the text of an OSC string that has spaces (a window title),
 * hence the sequences of ECMA-48 here.
 *
 * @since 0.1.0
 */
export const printable = (text: string): string => text.replace(escapes, "").replace(controls, "")
const escapes = new RegExp(
  [
    // OSC, DCS, SOS, PM, APC: up to their terminator (BEL or ST); unterminated, only the introducer goes below.
    String.raw`(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x80-\x9f]*(?:\x07|\x1b\\|\x9c)`,
    // CSI: parameters, intermediates, final byte.
    String.raw`(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?`,
    // Any other escape: intermediates and a final byte.
    String.raw`\x1b[\x20-\x2f]*[\x30-\x7e]?`
  ].join("|"),
  "g"
)
const controls = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g

/**
 * The styled output of a view as the terminal gets it: our own colours (SGR) pass, any other escape or control
 * character that got into it does not (a second guard: the agent's text went through {@link printable} already).
 */
const safe = (text: string): string => text.replace(unsafe, "")
// ESC not followed by `[digits;…m`, and the other C0 and C1 controls (not \t, \n).
const unsafe = /\x1b(?!\[[0-9;]*m)|[\u0000-\u0008\u000b-\u001a\u001c-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g

/**
 * The final answer as `run` prints it on stdout: as it is for a pipe or a file (a script gets the model's bytes),
 * {@link printable} for a terminal.
 *
 * @since 0.1.0
 */
export const answer = (text: string, terminal: boolean): string => terminal ? printable(text) : text

/**
 * A value on one line, cut to `max` characters, without escapes (see {@link printable}).
 *
 * @since 0.1.0
 */
export const compact = (value: unknown, max = 70): string => {
  const text = printable(typeof value === "string" ? value : JSON.stringify(value) ?? "").replace(/\s+/g, " ")
  return text.length > max ? `${text.slice(0, max - 3)}...` : text
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)}s`

/**
 * A count and its noun: `1 turn`, `3 turns`.
 *
 * @since 0.1.0
 */
export const count = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? "" : "s"}`

/**
 * A retry in words: `retrying in 2.1 s after 503 (2 of 4)`.
 *
 * @since 0.1.0
 */
export const retryText = (retry: Retry): string =>
  `retrying in ${(retry.delayMs / 1000).toFixed(1)} s after ${retry.after} (${retry.attempt} of ${retry.of})`

/**
 * An error's message as the command shows it, on one line: a tag repeated
 * by the layers it went through (`TransportError: TransportError: …`) is said
 * once, and the lines of a message are joined.
 *
 * @since 0.1.0
 */
export const errorText = (message: string): string =>
  message.replace(/\b([A-Z][A-Za-z]*Error): (?:\1: )+/g, "$1: ").split(/\s*\n\s*/).filter((line) => line !== "").join(" ")

const dollars = (usd: number | undefined) => `$${(usd ?? 0).toFixed(4)}`

const budgetAmount = (budget: string, amount: number) =>
  budget === "costUsd" ? dollars(amount) : budget === "wallClock" ? seconds(amount) : `${amount}`

/**
 * How a run ended, in words.
 *
 * @since 0.1.0
 */
export const describe = (given: Outcome | SupervisorOutcome.SupervisorOutcome): string => {
  const outcome = shown(given)
  switch (outcome._tag) {
    case "Completed":
      return "the model finished"
    case "Terminated":
      return "the tools ended the run"
    case "WrappedUp":
      return "the model was asked to wrap up (turn limit or budget) and delivered its final answer"
    case "MaxTurns":
      return `the turn cap of ${count(outcome.limit, "turn")} was reached`
    case "BudgetExceeded":
      return `the ${outcome.budget} budget ran out (${budgetAmount(outcome.budget, outcome.used)} used of ${
        budgetAmount(outcome.budget, outcome.limit)
      })`
    case "LoopDetected":
      return `the model repeated the same tool calls ${outcome.repeats} times`
    case "Stagnated":
      return `the model gave the same reply ${outcome.repeats} times`
    case "Cancelled":
      return outcome.reason
    case "OutputInvalid":
      return `the model gave no valid final answer in ${count(outcome.attempts, "attempt")}: ${outcome.issue}`
    case "Custom":
      return `a plugin ended the run (${outcome.kind})`
    case "HandedOff":
      return `the run was handed off to ${outcome.to}`
    case "GuardrailTripped":
      return `the ${outcome.phase} guardrail ${outcome.guardrail} tripped: ${outcome.reason}`
    case "Converged":
      return `every check passed after ${count(outcome.turns, "turn")}`
    case "Tolerated":
      return `the checks passed after ${count(outcome.turns, "turn")} but for failures already there before the ` +
        `task, tolerated: ${outcome.known.join(", ")}`
    case "Unverified":
      return `the ${outcome.budget === "turns" ? "turn cap" : `${outcome.budget} budget`} ended the run before the ` +
        `checks passed (${budgetAmount(outcome.budget, outcome.used)} used of ${
          budgetAmount(outcome.budget, outcome.limit)
        }; still failing: ${outcome.failing.join(", ") || "none"})`
    case "Stuck":
      return outcome.reason === "checks"
        ? `no progress: the checks gave the same results ${outcome.repeats} more times`
        : `no progress: the worker gave the same reply ${outcome.repeats} times`
    case "Rejected":
      return `the plan was rejected: ${outcome.notes}`
    case "PlanIterationCap":
      return `the plan was refined ${count(outcome.limit, "time")} and still not approved`
  }
}

/** An ending as it is shown: a supervised run's own (carried as `Custom` by its `AgentEnd`) as itself. */
const shown = (outcome: Outcome | SupervisorOutcome.SupervisorOutcome): SupervisorOutcome.SupervisorOutcome =>
  SupervisorOutcome.isOwnOutcome(outcome) ? outcome : SupervisorOutcome.fromOutcome(outcome)

const isSuccess = (given: Outcome) => {
  const outcome = shown(given)
  return outcome._tag === "Completed" || outcome._tag === "Terminated" || outcome._tag === "WrappedUp" ||
    outcome._tag === "Converged" || outcome._tag === "Tolerated"
}

/** What the control lines answer a call with: its approval id (the call id in events recorded before there was one). */
const approvalIdOf = (event: AgentEvent.Of<"ApprovalRequested"> | AgentEvent.Of<"ApprovalResolved">) =>
  event.approvalId ?? event.toolCallId

/** A sub-agent's approval event (`Nested`): its agents' path, and the event; `undefined` for any other event. */
const nestedApproval = (event: AgentEvent.Nested) =>
  event.event._tag === "ApprovalRequested" || event.event._tag === "ApprovalResolved"
    ? { agents: printable(event.path.join("/")), event: event.event }
    : undefined

const approvalHint = (toolCallId: string) =>
  `send {"type":"approve","id":${JSON.stringify(printable(toolCallId))}} or {"type":"deny","id":${
    JSON.stringify(printable(toolCallId))
  }}`

const endLine = (event: AgentEvent.Of<"AgentEnd">, s: Style): string =>
  event.outcome !== undefined
    ? (isSuccess(event.outcome) ? s.green : s.red)(s.bold(`■ ${shown(event.outcome)._tag}`)) +
      (event.outcome._tag === "Completed" ? "" : `: ${printable(describe(event.outcome))}`)
    : s.bold(s.red(`■ failed: ${event.error === undefined ? "defect" : printable(errorText(event.error.message))}`))

/**
 * The calls of a run as the views follow them: when each started, and how
 * long it waited for approval first (the `durationMs` of its end counts from
 * before the wait), so a view can show the two apart.
 */
const calls = () => {
  const requested = new Map<string, number>()
  const waited = new Map<string, number>()
  const started = new Map<string, { readonly name: string; readonly params: unknown; readonly at: number }>()
  return {
    requested: (event: AgentEvent.Of<"ApprovalRequested">) => void requested.set(event.toolCallId, event.timestamp),
    resolved: (event: AgentEvent.Of<"ApprovalResolved">) => {
      const at = requested.get(event.toolCallId)
      requested.delete(event.toolCallId)
      if (at !== undefined) waited.set(event.toolCallId, event.timestamp - at)
    },
    started: (event: AgentEvent.Of<"ToolExecutionStart">) =>
      void started.set(event.toolCallId, { name: event.toolName, params: event.params, at: event.timestamp }),
    /** The call's own run time, and its wait for approval (if it waited). */
    ended: (event: AgentEvent.Of<"ToolExecutionEnd">) => {
      const start = started.get(event.toolCallId)
      const wait = waited.get(event.toolCallId)
      started.delete(event.toolCallId)
      waited.delete(event.toolCallId)
      const ranMs = start === undefined ? event.durationMs : event.timestamp - start.at
      return { ranMs, waitMs: wait }
    },
    /** The calls still running, and those still waiting for approval, when the run ends without their results. */
    unfinished: (at: number) => {
      const running = Array.from(started.values(), (call) => ({ ...call, forMs: at - call.at }))
      const waiting = Array.from(requested.keys())
      started.clear()
      requested.clear()
      waited.clear()
      return { running, waiting }
    }
  }
}

const waitedText = (waitMs: number | undefined) =>
  waitMs === undefined ? "" : ` (after ${(waitMs / 1000).toFixed(1)} s waiting for approval)`

/** Why calls still open at the end got no result. */
const cutShort = (event: AgentEvent.Of<"AgentEnd">) =>
  event.outcome?._tag === "Cancelled" ? `cancelled: ${printable(event.outcome.reason)}` : "cancelled: the run ended"

/** The text of messages (steering, follow-ups) on one line, without escapes. */
const said = (messages: ReadonlyArray<Message.Message>) => printable(messages.map(Message.textOf).join(" "))

/** Steering or follow-ups a plugin kept out of the run (their text is not echoed: it may be what was blocked). */
const blockedText = (event: AgentEvent.Of<"DeliveryBlocked">) =>
  `${event.kind === "steering" ? "steering" : "follow-up"} blocked by ${printable(event.plugin)}`

/** A denial and its reason. */
const deniedText = (event: AgentEvent.Of<"ApprovalResolved">, by = "") =>
  `✗ ${by}denied ${printable(event.toolName)}${event.reason === undefined ? "" : `: ${printable(event.reason)}`}`

const requestedText = (event: AgentEvent.Of<"ApprovalRequested">, by: string) =>
  `? ${by}approval requested for ${printable(event.toolName)} ${compact(event.params)} (id ${
    printable(approvalIdOf(event))
  })`

const resolvedText = (event: AgentEvent.Of<"ApprovalResolved">, by: string, s: Style) =>
  event.approved ? s.green(`✓ ${by}approved ${printable(event.toolName)}`) : s.red(deniedText(event, by))

const resumedText = (event: AgentEvent.Of<"SessionResumed">, session: string | undefined) =>
  `resumed ${session ?? `session ${event.sessionId}`} at turn ${event.resumedAtTurn} (${
    count(event.restored.messages, "message")
  } restored)`

/** A call that ended in a defect of its tool (a bug, not a typed failure): what it was, said apart from the result. */
const defectText = (event: AgentEvent.Of<"ToolExecutionEnd">, s: Style): string =>
  event.defect === undefined ? "" : s.red(` [defect: ${compact(event.defect, 200)}]`)

const defectLine = (event: AgentEvent.Of<"ToolExecutionEnd">, s: Style): string =>
  `    ${s.red(`defect: ${compact(event.defect ?? "", 400)}`)}`

const usageLine = (usage: Message.Usage, turns: number) =>
  `tokens ${usage.input} in / ${usage.output} out · ${dollars(usage.cost)} · ${count(turns, "turn")}`

// -----------------------------------------------------------------------------
// The log
// -----------------------------------------------------------------------------

/**
 * A supervised run's own events, as one line each (checks, plans, feedback);
 * `undefined` for the others.
 *
 * @since 0.1.0
 */
export const supervisedText = (given: AgentEvent.AgentEvent, s: Style): string | undefined => {
  const event = SupervisorEvent.of(given)
  switch (event?._tag) {
    case undefined:
    case "WorkerTurnEnd":
      return undefined
    case "WorkerTurnStart":
      return s.bold(
        s.cyan(`══ ${event.phase === "plan" ? "plan" : `act turn ${event.turn}`} (worker ${event.worker})`)
      )
    case "CheckStarted":
      return s.dim(`  … check ${event.check}${event.baseline ? " (baseline)" : ""}`)
    case "CheckResult": {
      const mark = event.status === "pass" ? s.green("✓") : event.status === "known" ? s.yellow("~") : s.red("✗")
      const role = event.role === "blocking" ? "" : ` [${event.role}]`
      const time = s.dim(`${(event.durationMs / 1000).toFixed(1)}s`)
      return `  ${mark} check ${event.check}${role}${event.baseline ? " (baseline)" : ""} ${event.status} ${time}: ${
        compact(event.summary, 160)
      }`
    }
    case "PlanProposed":
      return s.bold(`☐ plan ${event.iteration}:`) + `\n${printable(event.plan)}\n` +
        s.yellow(
          `  send {"type":"approve_plan"}, {"type":"refine_plan","notes":"…"} or {"type":"reject_plan","notes":"…"}`
        )
    case "PlanRevised":
      return s.yellow(`↺ plan ${event.iteration} asked for: ${compact(event.notes, 160)}`)
    case "PlanApproved":
      return s.green(`✓ plan ${event.iteration} approved`)
    case "PlanRejected":
      return s.red(`✗ plan ${event.iteration} rejected: ${compact(event.notes, 160)}`)
    case "TurnApprovalRequested":
      return s.yellow(
        `? feedback waits: send {"type":"approve_turn"} or {"type":"replace_feedback","text":"…"}\n` +
          compact(event.feedback, 400)
      )
    case "FeedbackSent":
      return s.yellow(`↪ feedback sent (failing: ${event.failing.join(", ") || "none"})`)
    case "WorkerFailed":
      return s.red(`✗ worker ${event.worker} failed (${event.reason}): ${compact(event.message, 400)}`)
    case "SupervisedBudget":
      return s.dim(
        `  supervised: ${count(event.turns, "act turn")} of ${event.limits.turns} · tokens ${event.usage.input} in / ` +
          `${event.usage.output} out · ${dollars(event.usage.cost)} · ${(event.elapsedMs / 1000).toFixed(1)}s`
      )
  }
}

/**
 * The event log: one line per event, streamed text as it comes, each line
 * with the time since the run started. `write` receives each piece of
 * output; there are escape codes only with `color`.
 *
 * @since 0.1.0
 */
export const log = (
  out: (text: string) => void,
  options: {
    readonly color?: boolean | undefined
    /** How to name the session a resumed run continues (e.g. its directory); else its id. */
    readonly session?: string | undefined
  } = {}
): View => {
  const s = style(options.color === true)
  const write = (text: string) => out(safe(text))
  const tracked = calls()
  let startedAt = 0
  let streaming: "text" | "reasoning" | undefined
  const clock = (event: AgentEvent.AgentEvent) => s.dim(`${((event.timestamp - startedAt) / 1000).toFixed(2).padStart(6)}s `)
  const endStream = () => {
    if (streaming !== undefined) write("\n")
    streaming = undefined
  }
  const line = (event: AgentEvent.AgentEvent, text: string) => {
    endStream()
    write(`${clock(event)}${text}\n`)
  }
  const render = (event: AgentEvent.AgentEvent): void => {
    switch (event._tag) {
      case "AgentStart": {
        startedAt = event.timestamp
        // A continued run starts with no new messages: `SessionResumed` (or its first follow-up) says what it does.
        const task = compact(event.messages.map(Message.textOf).join(" "), 200)
        return line(event, s.bold(`▶ run ${event.runId.slice(0, 8)}${task === "" ? "" : `: ${task}`}`))
      }
      case "SessionResumed":
        return line(event, s.bold(`↻ ${resumedText(event, options.session)}`))
      case "TurnStart":
        return line(event, s.bold(s.cyan(`── turn ${event.turn}`)))
      case "MessageUpdate": {
        const kind = event.delta.type
        if (kind === "toolCall") return
        if (streaming !== kind) {
          endStream()
          write(`${clock(event)}${kind === "reasoning" ? s.dim("thinking: ") : "model: "}`)
          streaming = kind
        }
        const text = printable(event.delta.delta)
        return write(kind === "reasoning" ? s.dim(text) : text)
      }
      case "ToolExecutionStart":
        tracked.started(event)
        return line(event, `${s.yellow("⚙")} ${printable(event.toolName)} ${s.dim(compact(event.params))}`)
      case "ToolExecutionEnd": {
        const { ranMs, waitMs } = tracked.ended(event)
        const mark = event.result.isError ? s.red("✗") : s.green("✓")
        const time = s.dim(`${ranMs} ms${waitedText(waitMs)}`)
        return line(event, `${mark} ${printable(event.toolName)} ${time} → ${compact(Message.textOf(event.result))}${defectText(event, s)}`)
      }
      case "SteeringDelivered":
        return line(event, s.yellow(`↪ steering delivered: ${said(event.messages)}`))
      case "FollowUpDelivered":
        return line(event, s.yellow(`↪ follow-up delivered: ${said(event.messages)}`))
      case "DeliveryBlocked":
        return line(event, s.red(`✗ ${blockedText(event)}`))
      case "ApprovalRequested":
        tracked.requested(event)
        return line(event, s.yellow(requestedText(event, "")))
      case "ApprovalResolved":
        tracked.resolved(event)
        return line(event, resolvedText(event, "", s))
      case "Nested": {
        // A sub-agent's call waiting for approval is answered from here too: it is shown with its id.
        const nested = nestedApproval(event)
        if (nested === undefined) return
        const by = `${nested.agents}: `
        return line(
          event,
          nested.event._tag === "ApprovalRequested"
            ? s.yellow(requestedText(nested.event, by))
            : resolvedText(nested.event, by, s)
        )
      }
      case "WrapUpRequested":
        return line(event, s.yellow(`! asked the model to wrap up (${event.source})`))
      case "GuardTripped":
        return line(event, s.red(`! ${event.guard}: ${printable(event.detail)}`))
      case "BudgetSnapshot":
        return line(event, s.dim(`  ${usageLine(event.figures.usage, event.figures.turns)}`))
      case "Custom": {
        const text = supervisedText(event, s)
        return text === undefined ? undefined : line(event, text)
      }
      case "AgentEnd": {
        const { running, waiting } = tracked.unfinished(event.timestamp)
        for (const call of running) {
          line(event, s.red(`✗ ${printable(call.name)} ${s.dim(`${call.forMs} ms`)} → ${cutShort(event)}`))
        }
        if (waiting.length > 0) line(event, s.red(`✗ ${count(waiting.length, "call")} waiting for approval → ${cutShort(event)}`))
        return line(event, endLine(event, s))
      }
      default:
        return
    }
  }
  return {
    plugin: { name: "view", observe: render },
    note: (text) => {
      endStream()
      write(`${s.yellow(`! ${text}`)}\n`)
    },
    retrying: (retry) => {
      endStream()
      write(`${s.dim(`${((retry.timestamp - startedAt) / 1000).toFixed(2).padStart(6)}s `)}${s.yellow(`↻ ${retryText(retry)}`)}\n`)
    },
    close: endStream
  }
}

/**
 * A view that shows notes only.
 *
 * @since 0.1.0
 */
export const quiet = (write: (text: string) => void): View => ({
  plugin: { name: "view" },
  note: (text) => write(`! ${text}\n`),
  retrying: () => {},
  close: () => {}
})

// -----------------------------------------------------------------------------
// The live view
// -----------------------------------------------------------------------------

/**
 * A terminal the live view draws on.
 *
 * @since 0.1.0
 */
export interface Terminal {
  readonly write: (text: string) => void
  /** Its width, in cells. */
  readonly columns: () => number
  readonly color: boolean
  /** Show an input line for control lines typed on the terminal (see `TerminalInput`). */
  readonly input?: boolean | undefined
  /** How to name the session a resumed run continues (e.g. its directory); else its id. */
  readonly session?: string | undefined
}

/**
 * The live view, and the line being typed in its input line.
 *
 * @since 0.1.0
 */
export interface LiveView extends View {
  readonly typing: (text: string) => void
}

const placeholder = (waiting: ReadonlyMap<string, string>) =>
  waiting.size > 0
    ? `{"type":"approve"} or {"type":"deny","reason":"…"} answers the oldest call waiting`
    : `{"type":"steer","text":"…"}, {"type":"follow_up","text":"…"} or {"type":"cancel"}`

const spinner = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]

const segmenter = new Intl.Segmenter(undefined, { granularity: "grapheme" })

/**
 * Splits `text` where it reaches `width` cells: at the last space before
 * that if there is one. Returns the head and the rest, or `undefined` when
 * the text fits.
 */
const wrapAt = (text: string, width: number): readonly [string, string] | undefined => {
  let cells = 0
  let index = 0
  let lastSpace = -1
  for (const { segment } of segmenter.segment(text)) {
    cells += CliOutput.displayWidth(segment)
    if (cells > width) {
      const cut = lastSpace > 0 ? lastSpace : index
      return [text.slice(0, cut), text.slice(lastSpace > 0 ? cut + 1 : cut)]
    }
    if (segment === " ") lastSpace = index
    index += segment.length
  }
  return undefined
}

/** `text` cut to `width` cells. */
const fit = (text: string, width: number): string => {
  const split = wrapAt(text, width)
  return split === undefined ? text : split[0]
}

/** The end of `text` that fits in `width` cells. */
const fitEnd = (text: string, width: number): string => {
  const graphemes = Array.from(segmenter.segment(text), ({ segment }) => segment)
  let cells = 0
  let start = graphemes.length
  while (start > 0 && cells + CliOutput.displayWidth(graphemes[start - 1]!) <= width) {
    start--
    cells += CliOutput.displayWidth(graphemes[start]!)
  }
  return graphemes.slice(start).join("")
}

interface Running {
  readonly name: string
  readonly params: unknown
  readonly startedAt: number
}

/**
 * The live view on a terminal (see the module documentation). Its spinner
 * and clock tick in a fiber of the given scope.
 *
 * @since 0.1.0
 */
export const live = (terminal: Terminal): Effect.Effect<LiveView, never, Scope.Scope> =>
  Effect.gen(function*() {
    const s = style(terminal.color)
    const clock = yield* Clock.Clock
    const now = () => clock.currentTimeMillisUnsafe()
    const running = new Map<string, Running>()
    const waiting = new Map<string, string>()
    const tracked = calls()
    let partial = ""
    let partialKind: "text" | "reasoning" = "text"
    let footerRows = 0
    let frame = 0
    let startedAt: number | undefined
    let turn = 0
    let typed = ""
    let usage = Message.emptyUsage
    /** The totals of the last snapshot (the usage shown adds the replies since). */
    let totals = Message.emptyUsage
    let closed = false

    const width = () => Math.max(20, terminal.columns() - 1)
    const styled = (text: string, kind: "text" | "reasoning") => kind === "reasoning" ? s.dim(text) : text

    const footer = (): Array<string> => {
      const lines: Array<string> = []
      const w = width()
      if (partial !== "") lines.push(styled(partial, partialKind))
      const time = now()
      for (const call of running.values()) {
        const head = fit(`${call.name} ${compact(call.params, w)}`, w - 10)
        lines.push(`${s.cyan(spinner[frame % spinner.length]!)} ${head} ${s.dim(seconds(time - call.startedAt))}`)
      }
      for (const [id, name] of waiting) lines.push(s.yellow(fit(`? ${name} waits for approval: ${approvalHint(id)}`, w)))
      if (startedAt !== undefined) {
        const status = `turn ${turn} · ${usage.input + usage.output} tokens · ${dollars(usage.cost)} · ${seconds(time - startedAt)}`
        lines.push(s.dim(fit(status, w)))
      }
      if (terminal.input === true) {
        lines.push(
          typed === ""
            ? s.dim(fit(`› type a control line: ${placeholder(waiting)}`, w))
            : `› ${fitEnd(typed, w - 3)}${s.dim("▏")}`
        )
      }
      return lines
    }
    const erase = (): string => {
      if (footerRows === 0) return ""
      const up = footerRows > 1 ? `\x1b[${footerRows - 1}A` : ""
      footerRows = 0
      return `\r${up}\x1b[J`
    }
    const draw = (): string => {
      const lines = closed ? [] : footer()
      footerRows = lines.length
      return safe(lines.join("\n"))
    }
    /** Prints lines above the bottom lines, which are then drawn again. */
    const print = (...lines: ReadonlyArray<string>) => {
      terminal.write(erase() + lines.map((line) => `${safe(line)}\n`).join("") + draw())
    }
    /** A finished call: its mark, name, arguments, time and result, the result cut to what is left of the line. */
    const printCall = (mark: string, name: string, params: string, time: string, text: string) => {
      const head = `  ✓ ${name} ${params} ${time} → `
      const result = compact(text, Math.max(20, width() - CliOutput.displayWidth(head)))
      print(`  ${mark} ${name}${params === "" ? "" : ` ${s.dim(params)}`} ${s.dim(time)} → ${result}`)
    }
    const redraw = () => {
      if (closed) return
      frame++
      terminal.write(erase() + draw())
    }
    const flushPartial = () => {
      if (partial === "") return
      const line = styled(partial, partialKind)
      partial = ""
      print(line)
    }
    const stream = (kind: "text" | "reasoning", delta: string) => {
      if (kind !== partialKind) {
        flushPartial()
        partialKind = kind
      }
      if (partial === "" && kind === "reasoning") partial = "thinking: "
      partial += printable(delta)
      const done: Array<string> = []
      let newline = partial.indexOf("\n")
      while (newline !== -1) {
        done.push(styled(partial.slice(0, newline), kind))
        partial = partial.slice(newline + 1)
        newline = partial.indexOf("\n")
      }
      for (let split = wrapAt(partial, width()); split !== undefined; split = wrapAt(partial, width())) {
        done.push(styled(split[0], kind))
        partial = split[1]
      }
      // The bottom lines (with the partial line) are redrawn by the next tick.
      if (done.length > 0) print(...done)
    }

    const requested = (event: AgentEvent.Of<"ApprovalRequested">, by: string) => {
      waiting.set(approvalIdOf(event), `${by}${printable(event.toolName)}`)
      print(
        s.yellow(
          `  ? ${by}${printable(event.toolName)} ${compact(event.params, 60)} needs approval (id ${
            printable(approvalIdOf(event))
          })`
        )
      )
    }
    const resolved = (event: AgentEvent.Of<"ApprovalResolved">, by: string) => {
      waiting.delete(approvalIdOf(event))
      print(`  ${resolvedText(event, by, s)}`)
    }

    /** A supervised run's own event (a `Custom` event): checks show in the bottom lines while they run. */
    const supervised = (event: AgentEvent.AgentEvent): void => {
      const own = SupervisorEvent.of(event)
      switch (own?._tag) {
        case undefined:
        case "WorkerTurnEnd":
          return
        case "CheckStarted":
          // A running check shows in the bottom lines, with a spinner, until its result.
          running.set(`check:${own.check}`, { name: `check ${own.check}`, params: undefined, startedAt: now() })
          return redraw()
        case "CheckResult":
          running.delete(`check:${own.check}`)
          return print(supervisedText(event, s) ?? "")
        case "WorkerTurnStart":
          flushPartial()
          return print(supervisedText(event, s) ?? "")
        default:
          return print(supervisedText(event, s) ?? "")
      }
    }

    const render = (event: AgentEvent.AgentEvent): void => {
      switch (event._tag) {
        case "AgentStart":
          startedAt = event.timestamp
          // A continued run starts with no new messages; `SessionResumed` says where it resumes.
          return event.messages.length === 0
            ? redraw()
            : print(s.bold(`▶ ${compact(event.messages.map(Message.textOf).join(" "), width() - 2)}`))
        case "SessionResumed":
          turn = event.restored.turns
          usage = totals = event.restored.usage
          startedAt = event.timestamp - event.restored.elapsedMs
          return print(s.bold(`↻ ${resumedText(event, terminal.session)}`))
        case "TurnStart":
          turn = event.turn
          flushPartial()
          return print(s.cyan(`── turn ${event.turn}`))
        case "MessageUpdate":
          if (event.delta.type !== "toolCall") stream(event.delta.type, event.delta.delta)
          return
        case "MessageEnd":
          if (event.message.role === "assistant") usage = Message.addUsage(totals, event.message.usage)
          return flushPartial()
        case "ToolExecutionStart":
          flushPartial()
          tracked.started(event)
          running.set(event.toolCallId, { name: printable(event.toolName), params: event.params, startedAt: now() })
          return redraw()
        case "ToolExecutionEnd": {
          const call = running.get(event.toolCallId)
          running.delete(event.toolCallId)
          const { ranMs, waitMs } = tracked.ended(event)
          printCall(
            event.result.isError ? s.red("✗") : s.green("✓"),
            printable(event.toolName),
            call === undefined ? "" : compact(call.params, 40),
            `${seconds(ranMs)}${waitedText(waitMs)}`,
            Message.textOf(event.result)
          )
          if (event.defect !== undefined) print(defectLine(event, s))
          return
        }
        case "ApprovalRequested":
          flushPartial()
          tracked.requested(event)
          return requested(event, "")
        case "ApprovalResolved":
          tracked.resolved(event)
          return resolved(event, "")
        case "Nested": {
          const nested = nestedApproval(event)
          if (nested === undefined) return
          flushPartial()
          const by = `${nested.agents}: `
          return nested.event._tag === "ApprovalRequested" ? requested(nested.event, by) : resolved(nested.event, by)
        }
        case "SteeringDelivered":
          return print(s.yellow(`  ↪ steering: ${compact(event.messages.map(Message.textOf).join(" "), width() - 14)}`))
        case "FollowUpDelivered":
          return print(s.yellow(`  ↪ follow-up: ${compact(event.messages.map(Message.textOf).join(" "), width() - 15)}`))
        case "DeliveryBlocked":
          return print(s.red(`  ✗ ${blockedText(event)}`))
        case "WrapUpRequested":
          return print(s.yellow(`  ! asked the model to wrap up (${event.source})`))
        case "GuardTripped":
          return print(s.red(`  ! ${event.guard}: ${printable(event.detail)}`))
        case "BudgetSnapshot":
          turn = event.figures.turns
          usage = totals = event.figures.usage
          return
        case "Custom":
          return supervised(event)
        case "AgentEnd": {
          flushPartial()
          // Calls the run ended without a result for (Ctrl-C) are shown as cancelled, not dropped.
          const unfinished = tracked.unfinished(event.timestamp)
          const names = new Map(waiting)
          running.clear()
          waiting.clear()
          for (const call of unfinished.running) {
            const params = compact(call.params, 40)
            printCall(s.red("✗"), printable(call.name), params, seconds(call.forMs), cutShort(event))
          }
          for (const name of names.values()) {
            printCall(s.red("✗"), name, "", "waiting for approval", cutShort(event))
          }
          const elapsed = startedAt === undefined ? 0 : event.timestamp - startedAt
          const figures = s.dim(
            ` · ${count(turn, "turn")} · ${usage.input + usage.output} tokens · ${dollars(usage.cost)} · ${seconds(elapsed)}`
          )
          startedAt = undefined
          return print(endLine(event, s) + figures)
        }
        default:
          return
      }
    }

    const close = () => {
      if (closed) return
      closed = true
      terminal.write(erase() + "\x1b[?25h")
    }
    terminal.write("\x1b[?25l")
    yield* Effect.addFinalizer(() => Effect.sync(close))
    yield* Effect.forkScoped(Effect.repeat(Effect.sync(redraw), Schedule.spaced("100 millis")))
    return {
      plugin: { name: "view", observe: render },
      note: (text) => print(s.yellow(`! ${text}`)),
      retrying: (retry) => {
        flushPartial()
        print(s.yellow(`  ↻ ${retryText(retry)}`))
      },
      close,
      typing: (text) => {
        typed = text
        redraw()
      }
    }
  })
