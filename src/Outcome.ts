/**
 * How a run ended, when the loop chose to end it. Outcomes are values: a run
 * that hits its turn cap or a budget succeeds with the outcome and a valid
 * transcript; only failures it cannot go on from are errors (`AgentError`).
 *
 * @since 0.1.0
 */
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

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
 * - `BudgetExceeded`: a budget ran out, or the next model call would not fit
 *   it (a token or cost budget of the run or of a run above it; `used` is what
 *   was spent); the wall clock also in the middle of a model call, a tool
 *   batch or an approval wait.
 * - `LoopDetected`: the model kept repeating the same tool calls.
 * - `Stagnated`: the model kept giving the same reply.
 * - `Cancelled`: the application cancelled the run, or its fiber was interrupted.
 * - `OutputInvalid`: the run asked for a typed output (`Agent.run({ output })`)
 *   and the model did not give a valid one within its attempts: `lastAttempt`
 *   is what it last sent (the `final_answer` arguments, or its text when it
 *   answered without the tool), `issue` what was wrong with it.
 * - `Custom`: an ending a plugin defined (see {@link custom}): its `kind`, and
 *   its `payload` in its JSON form.
 * - `HandedOff`: a handoff tool passed the run on to the agent `to` (see
 *   `Agent.handoff`); the run that goes on in that agent returns its own result.
 * - `GuardrailTripped`: a guardrail's check tripped on the prompt (`phase:
 *   "input"`) or the final answer (`"output"`), with its reason (see `Guardrail`).
 *
 * A supervised run (`effect-agent/supervisor`) ends with its own endings
 * as `Custom` outcomes of kind `effect-agent/supervisor` (see its
 * `SupervisorOutcome`).
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
  Cancelled: { reason: Schema.String },
  OutputInvalid: { lastAttempt: Schema.Unknown, issue: Schema.String, attempts: Schema.Finite },
  Custom: { kind: Schema.String, payload: Schema.Unknown },
  HandedOff: { to: Schema.String },
  GuardrailTripped: { guardrail: Schema.String, reason: Schema.String, phase: Schema.Literals(["input", "output"]) }
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
/**
 * The ending of a run whose model gave no valid typed output (see `Output`).
 *
 * @since 0.1.0
 * @category constructors
 */
export const outputInvalid = (lastAttempt: unknown, issue: string, attempts: number): Outcome => ({
  _tag: "OutputInvalid",
  lastAttempt,
  issue,
  attempts
})

/**
 * An ending a plugin contributes, without a change to this union: made by
 * {@link custom}, carried as `Custom { kind, payload }` with the payload in
 * its JSON form (encoded with the plugin's Schema), so it round-trips through
 * JSON, checkpoints and trajectories, and a reader that does not know the
 * kind keeps it as it is.
 *
 * @since 0.1.0
 * @category models
 */
export interface CustomOutcome<A> {
  readonly kind: string
  /** The outcome, its payload encoded (a `Stop` decision of a hook, or `Hooks.stop`, ends a run with it). */
  readonly make: (payload: A) => Outcome
  /** The payload of an outcome of this kind, decoded; `None` for another outcome or a payload that does not decode. */
  readonly payload: (outcome: Outcome) => Option.Option<A>
  /** Whether an outcome is of this kind. */
  readonly is: (outcome: Outcome) => outcome is Extract<Outcome, { readonly _tag: "Custom" }>
}

/**
 * Defines an outcome of a plugin's own: its kind (name it after the plugin,
 * e.g. `"my-plugin/escalated"`) and its payload's Schema. The payload is
 * encoded with the Schema's JSON codec when the outcome is made, and decoded
 * by {@link CustomOutcome.payload}.
 *
 * @example
 * ```ts
 * import { Effect, Option, Schema } from "effect"
 * import { Hooks, Outcome } from "effect-agent"
 *
 * const Escalated = Outcome.custom("support/escalated", Schema.Struct({ ticket: Schema.String }))
 * // A hook ends the run with it
 * const escalate = Hooks.plugin({
 *   name: "support",
 *   afterTurn: () => Effect.succeed(Hooks.stop(Escalated.make({ ticket: "T-1" })))
 * })
 * // and the run's result says so
 * const outcome = Escalated.make({ ticket: "T-1" })
 * console.log(JSON.stringify(outcome))
 * // Output: {"_tag":"Custom","kind":"support/escalated","payload":{"ticket":"T-1"}}
 * console.log(Option.getOrUndefined(Escalated.payload(outcome))?.ticket)
 * // Output: T-1
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const custom = <A, E>(kind: string, payload: Schema.Codec<A, E>): CustomOutcome<A> => {
  const json = Schema.toCodecJson(payload)
  const encode = Schema.encodeSync(json)
  const decode = Schema.decodeUnknownExit(json)
  const is = (outcome: Outcome): outcome is Extract<Outcome, { readonly _tag: "Custom" }> =>
    outcome._tag === "Custom" && outcome.kind === kind
  return {
    kind,
    make: (value) => ({ _tag: "Custom", kind, payload: encode(value) }),
    payload: (outcome) => {
      if (!is(outcome)) return Option.none()
      const exit = decode(outcome.payload)
      return Exit.isSuccess(exit) ? Option.some(exit.value) : Option.none()
    },
    is
  }
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const handedOff = (to: string): Outcome => ({ _tag: "HandedOff", to })
/**
 * @since 0.1.0
 * @category constructors
 */
export const guardrailTripped = (guardrail: string, reason: string, phase: "input" | "output"): Outcome => ({
  _tag: "GuardrailTripped",
  guardrail,
  reason,
  phase
})
