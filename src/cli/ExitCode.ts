/**
 * The exit codes of the `effect-agent` command: stable, so that a script can
 * branch on how a run ended.
 *
 * | code | meaning |
 * |---|---|
 * | 0 | completed, terminated by its tools, wrapped up, or handed off; a supervised run converged |
 * | 1 | an unexpected failure (a tool failed fatally, a checkpoint could not be written, a bug); a runner whose stop was cut short |
 * | 10 | the turn cap was reached (a supervised run: `Unverified` by its turn cap) |
 * | 11 | a token budget ran out (a supervised run: `Unverified` by tokens) |
 * | 12 | the wall-clock budget ran out (a supervised run: `Unverified` by wall clock) |
 * | 13 | the cost budget ran out (a supervised run: `Unverified` by cost) |
 * | 14 | stuck: the loop or stagnation detector, or a supervised run's no-progress watchdog, stopped the run |
 * | 15 | a supervised run's plan was refined `--max-plan-iterations` times and still not approved |
 * | 16 | no valid typed output: the model never gave a final answer its Schema accepts |
 * | 17 | a plugin ended the run with an outcome of its own (`Outcome.custom`) |
 * | 18 | a guardrail tripped on the prompt or the final answer |
 * | 20 | the model or provider failed |
 * | 21 | the run could not be resumed (missing, corrupt or incompatible checkpoint) |
 * | 22 | config error, including invalid flags |
 * | 30 | cancelled by the user (a `cancel` line, or SIGINT/SIGTERM or a stdout closed by its reader when there is no session to resume), or the plan was rejected |
 * | 31 | interrupted by SIGINT/SIGTERM or a stdout closed by its reader, and resumable with `--resume` |
 *
 * @since 0.1.0
 */
import { Cause, Context, Data, Exit } from "effect"
import { CliError } from "effect/cli"
import type { Outcome } from "../Outcome.ts"
import * as SupervisorOutcome from "../supervisor/SupervisorOutcome.ts"

/**
 * Every exit code, by name.
 *
 * @since 0.1.0
 * @category codes
 */
export const codes = {
  ok: 0,
  unexpected: 1,
  maxTurns: 10,
  tokenBudget: 11,
  wallClockBudget: 12,
  costBudget: 13,
  stuck: 14,
  planIterationCap: 15,
  outputInvalid: 16,
  custom: 17,
  guardrail: 18,
  modelFailure: 20,
  resumeFailure: 21,
  configError: 22,
  cancelled: 30,
  interrupted: 31
} as const

/**
 * An exit code.
 *
 * @since 0.1.0
 * @category codes
 */
export type ExitCode = typeof codes[keyof typeof codes]

/**
 * The exit code of a run that ended with an outcome: a supervised run's own
 * ending (`SupervisorOutcome`) as it is, or as the `Custom` outcome its
 * `AgentEnd` event carries, has its own code.
 *
 * @since 0.1.0
 * @category conversions
 */
export const fromOutcome = (given: Outcome | SupervisorOutcome.SupervisorOutcome): ExitCode => {
  const outcome = SupervisorOutcome.isOwnOutcome(given) ? given : SupervisorOutcome.fromOutcome(given)
  switch (outcome._tag) {
    case "Completed":
    case "Terminated":
    case "WrappedUp":
    case "HandedOff":
      return codes.ok
    case "MaxTurns":
      return codes.maxTurns
    case "BudgetExceeded":
      return outcome.budget === "wallClock"
        ? codes.wallClockBudget
        : outcome.budget === "costUsd"
        ? codes.costBudget
        : codes.tokenBudget
    case "LoopDetected":
    case "Stagnated":
      return codes.stuck
    case "Cancelled":
    case "Rejected":
      return codes.cancelled
    case "OutputInvalid":
      return codes.outputInvalid
    case "Custom":
      return codes.custom
    case "GuardrailTripped":
      return codes.guardrail
    case "Converged":
      return codes.ok
    case "Unverified":
      return outcome.budget === "turns"
        ? codes.maxTurns
        : outcome.budget === "wallClock"
        ? codes.wallClockBudget
        : outcome.budget === "costUsd"
        ? codes.costBudget
        : codes.tokenBudget
    case "Stuck":
      return codes.stuck
    case "PlanIterationCap":
      return codes.planIterationCap
  }
}

/**
 * The command stops with this code; what went wrong has already been
 * reported to the user.
 *
 * @since 0.1.0
 * @category errors
 */
export class ExitWith extends Data.TaggedError("ExitWith")<{ readonly code: ExitCode }> {}

/**
 * What SIGINT and SIGTERM do to the command. `code` is the code the process
 * exits with once a signal has interrupted it (or the reader of its stdout
 * goes away, which stops a run the same way) and it has stopped: the run
 * command sets it to {@link codes.interrupted} once it has a session to
 * resume. A command whose stop may hang on what it waits for (`effect-agent
 * runner` hands its sessions back through the database) sets `forced`: a
 * second signal, or a stop that outlasts `within` milliseconds, then exits
 * the process at once with `forced.code`, saying so on stderr with `note`.
 *
 * @since 0.1.0
 * @category references
 */
export class OnInterrupt extends Context.Reference<{
  code: ExitCode
  forced?: { readonly within: number; readonly code: ExitCode; readonly note: string } | undefined
}>("effect-agent/cli/OnInterrupt", {
  defaultValue: () => ({ code: codes.cancelled })
}) {}

/**
 * The exit code of how the command ended: its `ExitWith` code, 0 when it
 * printed the help it was asked for, 22 for invalid flags (effect/cli has
 * printed the errors), the `onInterrupt` code
 * when it was interrupted, and 1 for anything else, which was not reported
 * yet and is written to `stderr`.
 *
 * @since 0.1.0
 * @category conversions
 */
export const fromExit = <E, A>(
  exit: Exit.Exit<A, E>,
  onInterrupt: { readonly code: ExitCode },
  stderr: (text: string) => void
): ExitCode => {
  if (Exit.isSuccess(exit)) return codes.ok
  if (Cause.hasInterruptsOnly(exit.cause)) return onInterrupt.code
  const error = Cause.findErrorOption(exit.cause)
  if (error._tag === "Some") {
    const value: unknown = error.value
    if (value instanceof ExitWith) return value.code
    // Help asked for (`effect-agent` alone prints it) is not an error; invalid flags are (effect/cli printed them).
    if (CliError.isCliError(value)) {
      return value._tag === "ShowHelp" && value.errors.length === 0 ? codes.ok : codes.configError
    }
  }
  stderr(`effect-agent: unexpected failure:\n${Cause.pretty(exit.cause)}\n`)
  return codes.unexpected
}
