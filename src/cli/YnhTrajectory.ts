/**
 * The trajectory in ynh's format (`ynh agent run --emit-jsonl`): one JSON
 * object a line, `{"timestamp", "type", "turn"?, "data"?}`, with snake_case
 * kinds, so that a tool written against ynh (TermQ, a CI job) reads
 * `effect-agent run --emit-jsonl FILE --jsonl-format ynh` unchanged. The lines
 * are mapped from the run's own events (the core's `AgentEvent`, and the
 * supervised run's `SupervisorEvent` they carry as `Custom`): {@link step} is
 * a pure fold, event by event, that the command's writer and
 * {@link ndjson}'s both use.
 *
 * | ynh kind | from | data |
 * |---|---|---|
 * | `session_start` | `AgentStart` (not of a resumed run) | `session_id`, `harness`, `backend`, `task`, `model`, `budgets`, `budget_sources` |
 * | `session_resumed` | `SessionResumed` | `session_id`, `backend`, `resumed_at_turn`, `restored_turns`, `restored_tokens` |
 * | `plan` | the first plan turn (`WorkerTurnStart`, phase plan) | none |
 * | `plan_revised` | `PlanRevised` | `iteration`, `notes` |
 * | `plan_approval_required` | `PlanProposed`, when the plan is decided by an operator | `plan`, `iteration` |
 * | `turn_start` | `TurnStart` (a plain run), `WorkerTurnStart` phase act (a supervised one) | none |
 * | `assistant_message` | `TurnEnd`'s text (a plain run), `WorkerTurnEnd` (a supervised one; turn 0 in the plan phase) | the text |
 * | `sensor_run` | `CheckStarted` after a turn | the check's name |
 * | `sensor_result` | `CheckResult` after a turn | `name`, `kind`, `role`, `exit_code`, `duration_ms`, `tolerance`, `status` (pass, fail, known), `passed`, `summary` |
 * | `feedback_sent` | `FeedbackSent` | the feedback |
 * | `turn_approval_required` | `TurnApprovalRequested` | `synthesized_feedback` |
 * | `budget_snapshot` | `SupervisedBudget` (a supervised run: after each worker turn, plan or act), `BudgetSnapshot` (a plain run) | `turns`, `tokens` |
 * | `stuck_detected` | an `AgentEnd` that is `Stuck`, `LoopDetected` or `Stagnated` | `reason`, `turn_count` |
 * | `budget_exceeded` | an `AgentEnd` that is `Unverified`, `BudgetExceeded` or `MaxTurns` | `budget`, `reason` |
 * | `converged` | an `AgentEnd` whose exit code is 0 | none (`known`: the failures a `Tolerated` run tolerated) |
 * | `session_end` | `AgentEnd` (see {@link end}) | `exit_code`, `reason`, `total_turns`, `total_tokens` |
 *
 * Every run that wrote `session_start` (or `session_resumed`) ends with
 * `session_end`, however it ends: its `exit_code` is the command's (see
 * `ExitCode`). The command writes it when it exits, with the code it exits
 * with (an interrupted session's 31 too); {@link ndjson} writes it on the
 * run's `AgentEnd`, with the code the command would have exited with.
 *
 * Differences, each allowed by ynh's rule that consumers tolerate fields and
 * enum members they do not know:
 * - ynh's `tamper_detected` (and its exit 14) has no counterpart: nothing here
 *   fingerprints a baseline; `worker_env` neither (the worker's environment
 *   is allowlisted, not reported).
 * - A check of the baseline (before the first turn) writes no line: what it
 *   found shows as `status: "known"` in the results after a turn.
 * - A supervised run's first `assistant_message` of the plan phase is the plan.
 *   Its `budget_snapshot` is the supervised run's own (`SupervisedBudget`,
 *   with its caps as `budgets`, `phase` and `plan_iterations`); its worker's
 *   runs' own snapshots write no line.
 * - Added: `budget_snapshot` also has `input_tokens`, `output_tokens`,
 *   `cost_usd` and `elapsed_ms`; `budget_exceeded`'s `budget` may also be
 *   `input_tokens`, `output_tokens` or `cost_usd` (exit 19 for cost);
 *   `session_start` has `provider`, and its `budgets` `max_cost_usd` when one
 *   is set (0 is no cap, as in ynh); `session_end` has `outcome`, the run's
 *   ending's tag (`Converged`, `Unverified`…); `budget_sources` may be
 *   `session` (a resumed session's own).
 *
 * @example
 * ```ts
 * import { AgentEvent } from "effect-agent"
 * import { YnhTrajectory } from "effect-agent/cli"
 *
 * const events: ReadonlyArray<AgentEvent.AgentEvent> = [
 *   { _tag: "AgentStart", runId: "r1", turn: 0, timestamp: 0, messages: [{ role: "user", content: [{ type: "text", text: "Say hi" }] }] },
 *   { _tag: "TurnStart", runId: "r1", turn: 1, timestamp: 1 }
 * ]
 * let state = YnhTrajectory.initial({ backend: "agent", model: "gpt-4o" })
 * for (const event of events) {
 *   const [next, lines] = YnhTrajectory.step(state, event)
 *   state = next
 *   for (const line of lines) console.log(line.type, line.turn ?? 0)
 * }
 * // Output: session_start 0
 * // Output: turn_start 1
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as Trajectory from "../session/Trajectory.ts"
import * as SupervisorEvent from "../supervisor/SupervisorEvent.ts"
import * as SupervisorOutcome from "../supervisor/SupervisorOutcome.ts"
import { codes, fromError, fromOutcome } from "./ExitCode.ts"
import { describe, errorText } from "./internal/View.ts"

/**
 * The kinds of lines.
 *
 * @since 0.1.0
 * @category models
 */
export type Kind =
  | "session_start"
  | "session_resumed"
  | "plan"
  | "plan_revised"
  | "plan_approval_required"
  | "turn_start"
  | "assistant_message"
  | "sensor_run"
  | "sensor_result"
  | "feedback_sent"
  | "turn_approval_required"
  | "stuck_detected"
  | "budget_snapshot"
  | "budget_exceeded"
  | "converged"
  | "session_end"

/**
 * One line: its time (RFC 3339, UTC), its kind, the turn (an act turn; left
 * out when 0, as ynh does) and its data (left out when none).
 *
 * @since 0.1.0
 * @category models
 */
export interface Line {
  readonly timestamp: string
  readonly type: Kind
  readonly turn?: number
  readonly data?: unknown
}

/**
 * Where a cap came from: a flag, a resumed session's own, or the default.
 *
 * @since 0.1.0
 * @category models
 */
export type Source = "flag" | "config" | "session" | "default"

/**
 * What `session_start` says that the events do not: the worker (`backend`:
 * `agent` for our own loop, `claude`, `codex`), the provider and model, the
 * caps in force (`null`: none) and where each came from; whether an operator
 * decides the plan (then `PlanProposed` is `plan_approval_required`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Session {
  readonly backend?: string | undefined
  readonly provider?: string | undefined
  readonly model?: string | undefined
  readonly harness?: string | undefined
  readonly budgets?: {
    readonly maxTurns: number | null
    readonly maxTokens: number | null
    readonly maxWallMs: number | null
    readonly maxCostUsd?: number | null | undefined
  } | undefined
  readonly budgetSources?: { readonly turns: Source; readonly tokens: Source; readonly wall: Source } | undefined
  readonly planApproval?: boolean | undefined
}

/**
 * Where the fold is: the run's start held back until the next event says
 * whether it is a resumed run's, the current act turn, whether the run is
 * supervised (then the worker's own turns are not the run's), whether the
 * plan has begun, the last figures, a worker that failed, and the ending
 * the `AgentEnd` gave.
 *
 * @since 0.1.0
 * @category models
 */
export interface State {
  readonly session: Session
  readonly phase: "idle" | "starting" | "started" | "ended"
  readonly start?: AgentEvent.Of<"AgentStart"> | undefined
  readonly supervised: boolean
  readonly turn: number
  readonly planned: boolean
  readonly turns: number
  readonly tokens: number
  readonly workerFailed: boolean
  readonly ending?: Ending | undefined
}

/**
 * How a run ended, as `session_end` says it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Ending {
  readonly exitCode: number
  readonly reason: string
  readonly outcome?: string | undefined
}

/**
 * The fold's start.
 *
 * @since 0.1.0
 * @category constructors
 */
export const initial = (session: Session = {}): State => ({
  session,
  phase: "idle",
  supervised: false,
  turn: 0,
  planned: false,
  turns: 0,
  tokens: 0,
  workerFailed: false
})

const at = (timestamp: number): string => new Date(timestamp).toISOString()

const line = (timestamp: number, type: Kind, turn: number, data?: unknown): Line => ({
  timestamp: at(timestamp),
  type,
  ...(turn > 0 ? { turn } : {}),
  ...(data === undefined ? {} : { data })
})

const orZero = (cap: number | null | undefined): number => cap ?? 0

const sessionStart = (state: State, event: AgentEvent.Of<"AgentStart">): Line => {
  const { session } = state
  const task = event.messages.flatMap((message) => message.role === "user" ? [Message.textOf(message)] : []).join("\n")
  const budgets = session.budgets
  return line(event.timestamp, "session_start", 0, {
    session_id: event.runId,
    harness: session.harness ?? "",
    backend: session.backend ?? "agent",
    task,
    ...(session.provider === undefined ? {} : { provider: session.provider }),
    ...(session.model === undefined ? {} : { model: session.model }),
    ...(budgets === undefined ? {} : {
      budgets: {
        max_turns: orZero(budgets.maxTurns),
        max_tokens: orZero(budgets.maxTokens),
        max_wall_ms: orZero(budgets.maxWallMs),
        ...(typeof budgets.maxCostUsd === "number" ? { max_cost_usd: budgets.maxCostUsd } : {})
      }
    }),
    ...(session.budgetSources === undefined ? {} : { budget_sources: session.budgetSources })
  })
}

/** ynh's names of the budgets (`wall_clock`), and ours it has none for, in its case. */
const budgetNames: Record<SupervisorOutcome.Budget, string> = {
  turns: "turns",
  tokens: "tokens",
  inputTokens: "input_tokens",
  outputTokens: "output_tokens",
  costUsd: "cost_usd",
  wallClock: "wall_clock"
}

type Rows = readonly [State, ReadonlyArray<Line>]

const none = (state: State): Rows => [state, []]

/** The lines of the supervised run's own events. */
const own = (state: State, event: SupervisorEvent.Stamped): Rows => {
  const supervised: State = state.supervised ? state : { ...state, supervised: true }
  const { timestamp } = event
  switch (event._tag) {
    case "WorkerTurnStart": {
      if (event.phase === "act") {
        return [{ ...supervised, turn: event.turn }, [line(timestamp, "turn_start", event.turn)]]
      }
      return supervised.planned
        ? none({ ...supervised, turn: 0 })
        : [{ ...supervised, turn: 0, planned: true }, [line(timestamp, "plan", 0)]]
    }
    case "WorkerTurnEnd":
      return [{ ...supervised, tokens: supervised.tokens + Message.totalTokens(event.usage) }, [line(timestamp, "assistant_message", event.phase === "act" ? event.turn : 0, event.text)]]
    case "WorkerFailed":
      return none({ ...supervised, workerFailed: true })
    case "CheckStarted":
      return event.baseline ? none(supervised) : [supervised, [line(timestamp, "sensor_run", event.turn, event.check)]]
    case "CheckResult": {
      if (event.baseline) return none(supervised)
      return [supervised, [line(timestamp, "sensor_result", event.turn, {
        name: event.check,
        kind: event.exitCode === undefined ? "check" : "command",
        ...(event.role === "verifier" ? { role: "convergence-verifier" } : {}),
        ...(event.exitCode === undefined || event.exitCode === 0 ? {} : { exit_code: event.exitCode }),
        duration_ms: Math.round(event.durationMs),
        tolerance: event.role === "advisory" ? "advisory" : "blocking",
        status: event.status,
        passed: event.status === "pass",
        ...(event.summary === "" ? {} : { summary: event.summary })
      })]]
    }
    case "PlanProposed":
      return supervised.session.planApproval === false
        ? none(supervised)
        : [supervised, [line(timestamp, "plan_approval_required", 0, { plan: event.plan, iteration: event.iteration })]]
    case "PlanRevised":
      return [supervised, [line(timestamp, "plan_revised", 0, { iteration: event.iteration, notes: event.notes })]]
    case "PlanApproved":
    case "PlanRejected":
      return none(supervised)
    case "TurnApprovalRequested":
      return [supervised, [
        line(timestamp, "turn_approval_required", supervised.turn, { synthesized_feedback: event.feedback })
      ]]
    case "FeedbackSent":
      return [supervised, [line(timestamp, "feedback_sent", event.turn, event.feedback)]]
    case "SupervisedBudget": {
      const tokens = Message.totalTokens(event.usage)
      return [{ ...supervised, turns: event.turns, tokens }, [
        line(timestamp, "budget_snapshot", event.phase === "act" ? event.turns : 0, {
          phase: event.phase,
          turns: event.turns,
          tokens,
          input_tokens: event.usage.input,
          output_tokens: event.usage.output,
          ...(event.usage.cost === undefined ? {} : { cost_usd: event.usage.cost }),
          elapsed_ms: Math.round(event.elapsedMs),
          plan_iterations: event.planIterations,
          budgets: {
            max_turns: event.limits.turns,
            max_tokens: orZero(event.limits.tokens),
            max_wall_ms: orZero(event.limits.wallClock),
            ...(event.limits.costUsd === null ? {} : { max_cost_usd: event.limits.costUsd })
          }
        })
      ]]
    }
  }
}

/**
 * The exit code and words of a run's ending: the command's (`ExitCode`), and
 * its summary (`Converged: every check passed after 1 turn`).
 *
 * @since 0.1.0
 * @category conversions
 */
export const endingOf = (event: AgentEvent.Of<"AgentEnd">, workerFailed = false): Ending => {
  if (event.outcome !== undefined) {
    const outcome = SupervisorOutcome.fromOutcome(event.outcome)
    return { exitCode: fromOutcome(outcome), reason: `${outcome._tag}: ${describe(outcome)}`, outcome: outcome._tag }
  }
  if (event.error !== undefined) return { exitCode: fromError(event.error._tag), reason: errorText(event.error.message) }
  return { exitCode: workerFailed ? codes.modelFailure : codes.unexpected, reason: errorText(event.defect ?? "") }
}

/** What an ending writes before `session_end`: `converged`, `stuck_detected` or `budget_exceeded`. */
const before = (state: State, event: AgentEvent.Of<"AgentEnd">, ending: Ending): ReadonlyArray<Line> => {
  const { timestamp } = event
  const turn = state.turn
  const outcome = event.outcome === undefined ? undefined : SupervisorOutcome.fromOutcome(event.outcome)
  if (ending.exitCode === codes.ok) {
    // tolerated known failures (`--tolerate-known-failures`) converge as ynh's verdict does, naming them
    return [line(timestamp, "converged", turn, outcome?._tag === "Tolerated" ? { known: outcome.known } : undefined)]
  }
  if (outcome === undefined) return []
  switch (outcome._tag) {
    case "Stuck":
    case "LoopDetected":
    case "Stagnated":
      return [line(timestamp, "stuck_detected", turn, { reason: describe(outcome), turn_count: state.turns })]
    case "Unverified":
    case "BudgetExceeded":
      return [line(timestamp, "budget_exceeded", turn, { budget: budgetNames[outcome.budget], reason: describe(outcome) })]
    case "MaxTurns":
      return [line(timestamp, "budget_exceeded", turn, { budget: "turns", reason: describe(outcome) })]
    default:
      return []
  }
}

/** The lines of a core event. */
const core = (state: State, event: AgentEvent.AgentEvent): Rows => {
  switch (event._tag) {
    case "TurnStart":
      return state.supervised
        ? none(state)
        : [{ ...state, turn: event.turn }, [line(event.timestamp, "turn_start", event.turn)]]
    case "TurnEnd": {
      if (state.supervised) return none(state)
      return [state, [line(event.timestamp, "assistant_message", event.turn, Message.textOf(event.message))]]
    }
    case "BudgetSnapshot": {
      // a supervised run's snapshot is its own (`SupervisedBudget`), not its worker's runs'
      if (state.supervised) return none(state)
      const { figures } = event
      const tokens = Message.totalTokens(figures.usage)
      return [{ ...state, turns: figures.turns, tokens }, [
        line(event.timestamp, "budget_snapshot", event.turn, {
          turns: figures.turns,
          tokens,
          input_tokens: figures.usage.input,
          output_tokens: figures.usage.output,
          ...(figures.usage.cost === undefined ? {} : { cost_usd: figures.usage.cost }),
          elapsed_ms: Math.round(figures.elapsedMs)
        })
      ]]
    }
    case "SessionResumed": {
      const turns = event.restored.turns
      const tokens = Message.totalTokens(event.restored.usage)
      return [{ ...state, turns, tokens }, [line(event.timestamp, "session_resumed", event.resumedAtTurn, {
        session_id: event.runId,
        backend: state.session.backend ?? "agent",
        resumed_at_turn: event.resumedAtTurn,
        restored_turns: turns,
        restored_tokens: tokens
      })]]
    }
    case "AgentEnd": {
      const result = event.result?.state
      const counted: State = result === undefined ? state : {
        ...state,
        turns: state.supervised ? state.turn : result.turn,
        tokens: Message.totalTokens(result.usage)
      }
      const ending = endingOf(event, state.workerFailed)
      return [{ ...counted, ending }, before(counted, event, ending)]
    }
    case "Custom": {
      const stamped = SupervisorEvent.of(event)
      return stamped === undefined ? none(state) : own(state, stamped)
    }
    default:
      return none(state)
  }
}

/**
 * The lines an event is written as, and where the fold is after it. A run's
 * `AgentStart` is held back until the next event: a resumed run's is
 * followed by `SessionResumed` (then `session_resumed` is written instead of
 * `session_start`). The `AgentEnd` writes what comes before `session_end`;
 * {@link end} writes that.
 *
 * @since 0.1.0
 * @category folding
 */
export const step = (state: State, event: AgentEvent.AgentEvent): Rows => {
  if (state.phase === "ended") return none(state)
  if (event._tag === "AgentStart") {
    return state.phase === "idle" ? none({ ...state, phase: "starting", start: event }) : none(state)
  }
  let written: Array<Line> = []
  let current = state
  if (state.phase === "starting") {
    current = { ...state, phase: "started", start: undefined, turn: state.start?.turn ?? 0 }
    if (event._tag !== "SessionResumed" && state.start !== undefined) written = [sessionStart(state, state.start)]
  }
  if (current.phase !== "started") return none(current)
  const [next, lines] = core(current, event)
  return [next, [...written, ...lines]]
}

/**
 * The `session_end` line that ends the run's lines, once (after it, the fold
 * writes nothing): with the exit code and reason given (the command's), else
 * those of the run's `AgentEnd`; none when the run has not started or has
 * already ended. A start still held back is written first.
 *
 * @since 0.1.0
 * @category folding
 */
export const end = (
  state: State,
  timestamp: number,
  given?: { readonly exitCode: number; readonly reason?: string | undefined } | undefined
): Rows => {
  if (state.phase === "idle" || state.phase === "ended") return none(state)
  const started = state.phase === "starting" && state.start !== undefined ? [sessionStart(state, state.start)] : []
  const ending = state.ending
  const exitCode = given?.exitCode ?? ending?.exitCode ?? codes.unexpected
  const reason = given?.reason ?? ending?.reason
  return [{ ...state, phase: "ended", start: undefined }, [...started, line(timestamp, "session_end", state.turn, {
    exit_code: exitCode,
    ...(reason === undefined || reason === "" ? {} : { reason }),
    ...(state.turns > 0 ? { total_turns: state.turns } : {}),
    ...(state.tokens > 0 ? { total_tokens: state.tokens } : {}),
    ...(ending?.outcome === undefined ? {} : { outcome: ending.outcome })
  })]]
}

/**
 * A line as written: its JSON and a newline.
 *
 * @since 0.1.0
 * @category encoding
 */
export const encode = (line: Line): string => JSON.stringify(line) + "\n"

/**
 * The fold over one run's events, kept: `lines` answers each event's lines
 * (in the order the events come); with `endOnAgentEnd` the `AgentEnd`'s
 * lines end with `session_end`, else {@link Encoder.end} writes it (the
 * command, with the code it exits with).
 *
 * @since 0.1.0
 * @category models
 */
export interface Encoder {
  readonly lines: (event: AgentEvent.AgentEvent) => ReadonlyArray<Line>
  readonly end: (
    timestamp: number,
    given?: { readonly exitCode: number; readonly reason?: string | undefined }
  ) => ReadonlyArray<Line>
}

/**
 * An encoder (see {@link Encoder}).
 *
 * @since 0.1.0
 * @category constructors
 */
export const encoder = (session?: Session, options?: { readonly endOnAgentEnd?: boolean | undefined }): Encoder => {
  let state = initial(session)
  const close: Encoder["end"] = (timestamp, given) => {
    const [next, lines] = end(state, timestamp, given)
    state = next
    return lines
  }
  return {
    lines: (event) => {
      const [next, lines] = step(state, event)
      state = next
      return options?.endOnAgentEnd === true && event._tag === "AgentEnd" ? [...lines, ...close(event.timestamp)] : lines
    },
    end: close
  }
}

/**
 * The trajectory format of `Trajectory.ndjson` that writes ynh's lines: each
 * run's from its `AgentStart` to its `session_end` (on its `AgentEnd`).
 *
 * @since 0.1.0
 * @category codecs
 */
export const format = (session?: Session): Trajectory.Format => ({
  make: () => {
    const encoding = encoder(session, { endOnAgentEnd: true })
    return (event) => encoding.lines(event).map(encode)
  }
})

/**
 * A plugin writing the run's trajectory in ynh's format to `path`: the file
 * handling of `Trajectory.ndjson` (a regular file only, never through a
 * link; a fresh run truncates it, a continued one appends).
 *
 * @since 0.1.0
 * @category codecs
 */
export const ndjson = (
  path: string,
  session?: Session
): Effect.Effect<Hooks.Plugin, never, FileSystem.FileSystem> =>
  Effect.suspend(() => Trajectory.ndjson(path, { format: format(session) }))
