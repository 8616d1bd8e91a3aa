/**
 * A failure of the command that has not been reported yet: its exit code and
 * a message for the user. The run reports it on stderr (or in its `--json`
 * result) and ends with `ExitCode.ExitWith`.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import { codes, type ExitCode } from "../ExitCode.ts"

/**
 * A failure of the command with its exit code and a message for the user
 * (not yet reported).
 *
 * @since 0.1.0
 */
export class Failure extends Data.TaggedError("CliFailure")<{ readonly code: ExitCode; readonly message: string }> {}

/**
 * A config error (exit code 22): invalid flags, a missing key, a sandbox or
 * server that cannot start.
 *
 * @since 0.1.0
 */
export const configError = (message: string): Failure => new Failure({ code: codes.configError, message })

/**
 * A session that cannot be resumed (exit code 21).
 *
 * @since 0.1.0
 */
export const resumeFailure = (message: string): Failure => new Failure({ code: codes.resumeFailure, message })
