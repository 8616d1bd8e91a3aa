/**
 * How a run ended, when the loop chose to end it. Outcomes are values: a run
 * that hits its turn cap or a budget succeeds with the outcome and a valid
 * transcript; only failures it cannot go on from are errors (`AgentError`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * The budgets a run can exhaust (the turn cap has its own outcome, `MaxTurns`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const Budget = Schema.Literals(["tokens", "inputTokens", "outputTokens", "costUsd", "wallClock"])
/**
 * @since 0.1.0
 * @category models
 */
export type Budget = typeof Budget.Type

/**
 * - `Completed`: the model stopped calling tools and nothing was queued.
 * - `Terminated`: every counted tool result of a batch voted to end the run.
 * - `WrappedUp`: the model was asked to wrap up (turn limit or budget) and
 *   finished before the hard limit.
 * - `MaxTurns`: the turn cap was reached.
 * - `BudgetExceeded`: a budget ran out before the next model call; the wall
 *   clock also in the middle of a model call, a tool batch or an approval wait.
 * - `LoopDetected`: the model kept repeating the same tool calls.
 * - `Stagnated`: the model kept giving the same reply.
 * - `Cancelled`: the application cancelled the run, or its fiber was interrupted.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Outcome = Schema.TaggedUnion({
  Completed: {},
  Terminated: {},
  WrappedUp: {},
  MaxTurns: { limit: Schema.Finite },
  BudgetExceeded: { budget: Budget, limit: Schema.Finite, used: Schema.Finite },
  LoopDetected: { repeats: Schema.Finite, signature: Schema.String },
  Stagnated: { repeats: Schema.Finite },
  Cancelled: { reason: Schema.String }
})
/**
 * @since 0.1.0
 * @category models
 */
export type Outcome = typeof Outcome.Type

/**
 * @since 0.1.0
 * @category constructors
 */
export const completed: Outcome = { _tag: "Completed" }
/**
 * @since 0.1.0
 * @category constructors
 */
export const terminated: Outcome = { _tag: "Terminated" }
/**
 * @since 0.1.0
 * @category constructors
 */
export const wrappedUp: Outcome = { _tag: "WrappedUp" }
/**
 * @since 0.1.0
 * @category constructors
 */
export const maxTurns = (limit: number): Outcome => ({ _tag: "MaxTurns", limit })
/**
 * @since 0.1.0
 * @category constructors
 */
export const cancelled = (reason: string): Outcome => ({ _tag: "Cancelled", reason })
/**
 * @since 0.1.0
 * @category constructors
 */
export const budgetExceeded = (budget: Budget, limit: number, used: number): Outcome => ({
  _tag: "BudgetExceeded",
  budget,
  limit,
  used
})
