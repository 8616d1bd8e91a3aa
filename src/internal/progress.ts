/**
 * How far a run has come: completed turns, usage, wall time, whether the
 * model was asked to wrap up, and calls per tool (the per-run quotas); what
 * the guards and budgets read and `BudgetSnapshot` reports; and what model
 * calls in flight in the run and below it have reserved against its budgets
 * (see `Reservations`).
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import type { AgentConfig } from "../AgentConfig.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Message from "../Message.ts"
import type * as RunState from "../RunState.ts"

/**
 * An amount of each budget a model call counts against: total, input and
 * output tokens, and US dollars.
 *
 * @internal
 */
export interface Amounts {
  tokens: number
  inputTokens: number
  outputTokens: number
  costUsd: number
}

/**
 * A run's progress.
 *
 * @internal
 */
export interface Progress {
  /** Completed turns. */
  turn: number
  usage: Message.Usage
  /** Whether the model has been asked to wrap up (a one-shot request). */
  wrapUpRequested: boolean
  /** Calls per tool name so far (per-run quotas), across continuations. */
  readonly callsPerTool: Map<string, number>
  /** Time the calls of each tool took so far (`maxDurationMs` quotas), across continuations. */
  readonly durationPerTool: Map<string, number>
  readonly clock: Clock.Clock
  /** When this run (this continuation) started, by `clock`. */
  readonly startedAt: number
  /** Wall time used before this continuation. */
  readonly elapsedBefore: number
  /** The limits `BudgetSnapshot` reports (from the config, made once). */
  readonly limits: AgentEvent.BudgetFigures["limits"]
  /**
   * Turns and usage of the sub-agents that ran, by path (see `Lineage`); none until one ran. Replaced, never
   * changed in place: a `BudgetSnapshot` holds it as it was.
   */
  agents: Readonly<Record<string, { readonly turns: number; readonly usage: Message.Usage }>> | undefined
  /**
   * What the model calls in flight in this run and in the runs below it have reserved against this run's
   * budgets, and how many they are (at none, the amounts are set back to exactly 0). Never saved: a resumed
   * run has nothing reserved.
   */
  readonly reserved: Amounts
  inFlight: number
}

/**
 * No amount of anything.
 *
 * @internal
 */
export const noAmounts = (): Amounts => ({ tokens: 0, inputTokens: 0, outputTokens: 0, costUsd: 0 })

/**
 * The progress of a run continued from `state`.
 *
 * @internal
 */
export const make = (state: RunState.RunState, config: AgentConfig, clock: Clock.Clock): Progress => ({
  turn: state.turn,
  usage: state.usage,
  wrapUpRequested: state.wrapUpRequested,
  callsPerTool: new Map(Object.entries(state.toolUse ?? {}).map(([name, use]) => [name, use.calls])),
  durationPerTool: new Map(Object.entries(state.toolUse ?? {}).map(([name, use]) => [name, use.durationMs])),
  clock,
  startedAt: clock.currentTimeMillisUnsafe(),
  elapsedBefore: state.elapsedMs,
  limits: { turns: config.maxTurns, ...config.budgets },
  agents: undefined,
  reserved: noAmounts(),
  inFlight: 0
})

/**
 * Each tool's use so far, as `RunState.toolUse` keeps it (undefined when no tool was called).
 *
 * @internal
 */
export const toolUse = (progress: Progress): RunState.RunState["toolUse"] => {
  // a tool with a duration has calls: every name is in callsPerTool
  if (progress.callsPerTool.size === 0) return undefined
  const use: Record<string, { calls: number; durationMs: number }> = {}
  for (const [name, calls] of progress.callsPerTool) use[name] = { calls, durationMs: progress.durationPerTool.get(name) ?? 0 }
  return use
}

/**
 * Wall time used by the run so far (at `at`), across continuations.
 *
 * @internal
 */
export const elapsedMs = (progress: Progress, at: number = progress.clock.currentTimeMillisUnsafe()): number =>
  progress.elapsedBefore + (at - progress.startedAt)

/**
 * The totals and limits at `at`, as `BudgetSnapshot` reports them.
 *
 * @internal
 */
export const figures = (progress: Progress, at: number): AgentEvent.BudgetFigures => {
  const figures: AgentEvent.BudgetFigures = {
    turns: progress.turn,
    usage: progress.usage,
    elapsedMs: elapsedMs(progress, at),
    limits: progress.limits
  }
  return progress.agents === undefined ? figures : { ...figures, agents: progress.agents }
}
