/**
 * How a supervised run ends. Its own endings are not in the core's union:
 * the result (`Supervisor.Result.outcome`) holds them as they are, typed,
 * and the run's `AgentEnd` event (a core event) carries them as one
 * `Custom` outcome of kind {@link kind} (see `Outcome.custom`):
 *
 * - `Converged`: every blocking check passed (then the verifier), after `turns` act turns.
 * - `Tolerated`: the run tolerates known failures (`tolerateKnownFailures`)
 *   and the only checks still failing (`known`) fail as they did before the
 *   task started; the rest passed, after `turns` act turns.
 * - `Unverified`: a budget or the turn cap ended the run before the checks
 *   passed (`failing` names the checks still failing); never `Completed`.
 *   The supervised run's budgets (`maxTokens`, `maxCostUsd`, `maxWallClock`)
 *   and the budgets of its worker's own runs (`agent.config.budgets`) end it
 *   so alike.
 * - `Stuck`: the no-progress watchdog fired (`reason`, after `repeats` identical results).
 * - `Rejected`: the operator rejected the plan, with their notes.
 * - `PlanIterationCap`: the plan was refined `limit` times and still not approved.
 *
 * A supervised run also ends with a core outcome: `Cancelled`, and how its
 * worker's own run ended when that run did not end by itself (see
 * {@link fromInner}): a guardrail that tripped (`GuardrailTripped`), the
 * inner turn cap (`MaxTurns`), a loop (`LoopDetected`, `Stagnated`), no valid
 * typed output (`OutputInvalid`), a plugin's ending (`Custom`). A supervised
 * run never hides how its worker's run ended.
 *
 * @example
 * ```ts
 * import { SupervisorOutcome } from "effect-agent/supervisor"
 *
 * const converged: SupervisorOutcome.SupervisorOutcome = { _tag: "Converged", turns: 2 }
 * const event = SupervisorOutcome.toOutcome(converged)
 * console.log(event._tag, JSON.stringify(SupervisorOutcome.fromOutcome(event)))
 * // Output: Custom {"_tag":"Converged","turns":2}
 * ```
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Outcome from "../Outcome.ts"

/**
 * The budgets a supervised run can exhaust: its turn cap (`turns`) and the
 * core's budgets (`Outcome.Budget`).
 *
 * @since 0.1.0
 * @category schemas
 */
export const Budget = Schema.Literals(["turns", "tokens", "inputTokens", "outputTokens", "costUsd", "wallClock"])
/**
 * @since 0.1.0
 * @category models
 */
export type Budget = typeof Budget.Type

/**
 * The supervised run's own endings.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Own = Schema.TaggedUnion({
  Converged: { turns: Schema.Finite },
  Tolerated: { turns: Schema.Finite, known: Schema.Array(Schema.String) },
  Unverified: { budget: Budget, limit: Schema.Finite, used: Schema.Finite, failing: Schema.Array(Schema.String) },
  Stuck: { reason: Schema.Literals(["checks", "replies"]), repeats: Schema.Finite },
  Rejected: { notes: Schema.String },
  PlanIterationCap: { limit: Schema.Finite }
})
/**
 * @since 0.1.0
 * @category models
 */
export type Own = typeof Own.Type

/**
 * Every ending of a supervised run: its own, or a core outcome (see the
 * module's documentation). A saved outcome of a run of an earlier version
 * decodes with it unchanged.
 *
 * @since 0.1.0
 * @category schemas
 */
export const SupervisorOutcome = Schema.Union([Own, Outcome.Outcome])
/**
 * @since 0.1.0
 * @category models
 */
export type SupervisorOutcome = Own | Outcome.Outcome

/**
 * The kind of the `Custom` outcome that carries the run's own endings.
 *
 * @since 0.1.0
 * @category constants
 */
export const kind = "effect-agent/supervisor"

/**
 * The custom outcome definition (`Outcome.custom`) of the run's own endings.
 *
 * @since 0.1.0
 * @category constants
 */
export const Definition: Outcome.CustomOutcome<Own> = Outcome.custom(kind, Own)

const isOwn = Schema.is(Own)

/**
 * Whether an ending is one of the supervised run's own.
 *
 * @since 0.1.0
 * @category guards
 */
export const isOwnOutcome = (outcome: SupervisorOutcome): outcome is Own => isOwn(outcome)

/**
 * The ending as a core outcome (what the run's `AgentEnd` event and its
 * `RunResult` carry): the run's own as `Custom`, a core one as it is.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toOutcome = (outcome: SupervisorOutcome): Outcome.Outcome =>
  isOwnOutcome(outcome) ? Definition.make(outcome) : outcome

/**
 * The ending a core outcome carries: the run's own out of its `Custom`, any
 * other as it is.
 *
 * @since 0.1.0
 * @category conversions
 */
export const fromOutcome = (outcome: Outcome.Outcome): SupervisorOutcome =>
  Option.getOrElse(Definition.payload(outcome), (): SupervisorOutcome => outcome)

/**
 * How a worker's own run ended, as the supervised run sees it: `undefined`
 * when it ended by itself (`Completed`, `Terminated`, `WrappedUp`; a run
 * that hands off ends as the agent it handed off to ends), and the supervised
 * run goes on; otherwise the supervised run's ending: a budget as
 * `Unverified` by that budget (with the checks still failing), and anything
 * else as it is (a guardrail that tripped, the inner turn cap, a loop, no
 * valid typed output, a plugin's ending, handoffs past their cap, a cancel).
 *
 * @since 0.1.0
 * @category conversions
 */
export const fromInner = (
  outcome: Outcome.Outcome,
  failing: ReadonlyArray<string>
): SupervisorOutcome | undefined => {
  switch (outcome._tag) {
    case "Completed":
    case "Terminated":
    case "WrappedUp":
      return undefined
    case "BudgetExceeded":
      return { _tag: "Unverified", budget: outcome.budget, limit: outcome.limit, used: outcome.used, failing }
    default:
      return outcome
  }
}
