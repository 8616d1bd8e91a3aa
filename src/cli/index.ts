/**
 * The `effect-agent` command, for programs that drive or embed it: the
 * command tree to mount in another `effect/cli` program and its `runMain`
 * (`Cli`), the control protocol it reads on stdin (`Control`), and its exit
 * codes (`ExitCode`).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as Cli from "./Cli.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Control from "../protocol/Control.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as ExitCode from "./ExitCode.ts"
