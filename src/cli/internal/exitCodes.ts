/**
 * The exit codes and how the command ends with one, without what reads a
 * run's outcome (`ExitCode.fromOutcome`): the command's start loads this,
 * not the outcomes' schemas, nor the whole of `effect` (it imports the
 * modules it uses). `ExitCode` re-exports it.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import { CliError } from "effect/cli"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Exit from "effect/Exit"

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
  // stuck is 13, as ynh's (whose 14 is a tampered baseline, which has no counterpart here): the cost budget,
  // which ynh has not, is 19
  stuck: 13,
  planIterationCap: 15,
  outputInvalid: 16,
  custom: 17,
  guardrail: 18,
  costBudget: 19,
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
