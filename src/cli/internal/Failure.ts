/**
 * A failure of the command that has not been reported yet: its exit code and
 * a message for the user. The run reports it on stderr (or in its `--json`
 * result) and ends with `ExitCode.ExitWith`.
 *
 * @since 0.1.0
 */
import { Data } from "effect"
import type { ExitCode } from "../ExitCode.ts"

/**
 * A failure of the command with its exit code and a message for the user
 * (not yet reported).
 *
 * @since 0.1.0
 */
export class Failure extends Data.TaggedError("CliFailure")<{ readonly code: ExitCode; readonly message: string }> {}
