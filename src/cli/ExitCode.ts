/**
 * The exit codes of the `effect-agent` command: stable, so that a script can
 * branch on how a run ended.
 *
 * | code | meaning |
 * |---|---|
 * | 0 | completed, terminated by its tools, wrapped up, or handed off; a supervised run converged (or `Tolerated`: only failures already there before the task remain, with `--tolerate-known-failures`) |
 * | 1 | an unexpected failure (a tool failed fatally, a checkpoint could not be written, a bug); a runner whose stop was cut short |
 * | 10 | the turn cap was reached (a supervised run: `Unverified` by its turn cap) |
 * | 11 | a token budget ran out (a supervised run: `Unverified` by tokens) |
 * | 12 | the wall-clock budget ran out (a supervised run: `Unverified` by wall clock) |
 * | 13 | stuck: the loop or stagnation detector, or a supervised run's no-progress watchdog, stopped the run (as ynh's 13) |
 * | 15 | a supervised run's plan was refined `--max-plan-iterations` times and still not approved |
 * | 16 | no valid typed output: the model never gave a final answer its Schema accepts |
 * | 17 | a plugin ended the run with an outcome of its own (`Outcome.custom`) |
 * | 18 | a guardrail tripped on the prompt or the final answer |
 * | 19 | the cost budget ran out (a supervised run: `Unverified` by cost) |
 * | 20 | the model or provider failed |
 * | 21 | the run could not be resumed (missing, corrupt or incompatible checkpoint) |
 * | 22 | config error, including invalid flags |
 * | 30 | cancelled by the user (a `cancel` line, or SIGINT/SIGTERM or a stdout closed by its reader when there is no session to resume), or the plan was rejected |
 * | 31 | interrupted by SIGINT/SIGTERM or a stdout closed by its reader, and resumable with `--resume` |
 *
 * @since 0.1.0
 */
import type { Outcome } from "../Outcome.ts"
import type * as Sessions from "../session/Sessions.ts"
import type * as Supervisor from "../supervisor/Supervisor.ts"
import * as SupervisorOutcome from "../supervisor/SupervisorOutcome.ts"
import { codes, type ExitCode } from "./internal/exitCodes.ts"

// Declared in internal/exitCodes.ts, which the command's start loads without this module's outcomes.
export { codes, type ExitCode, ExitWith, fromExit, OnInterrupt } from "./internal/exitCodes.ts"

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
    case "Tolerated":
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
 * The exit code of a run that failed, by its error's tag (a run's, a
 * supervised run's, or its session's): a provider's or a worker's failure is
 * 20, a session that cannot be resumed 21, a config error 22, anything else
 * (a tool's fatal failure, a checkpoint that cannot be written) 1.
 *
 * @since 0.1.0
 * @category conversions
 */
export const fromError = (tag: Supervisor.RunError["_tag"] | Sessions.SessionsError["_tag"]): ExitCode => {
  switch (tag) {
    case "SteeringFull":
      return codes.configError
    case "SessionEnded":
    case "DurableStoreError":
      return codes.unexpected
    case "ModelError":
    case "WorkerError":
      return codes.modelFailure
    case "ConfigError":
      return codes.configError
    case "InvalidContinuation":
    case "InvalidPluginState":
    case "OutputSchemaMismatch":
    case "CheckpointMissing":
    case "CheckpointCorrupt":
    case "CheckpointVersionMismatch":
    case "CheckpointAgentUnknown":
    case "InvalidSessionId":
      return codes.resumeFailure
    case "CheckpointExists":
      return codes.configError
    case "ToolFatalError":
    case "CheckpointIoError":
    case "CheckpointTooLarge":
      return codes.unexpected
  }
}
