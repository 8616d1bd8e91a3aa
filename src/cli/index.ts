/**
 * The `effect-agent` command, for programs that drive or embed it: the
 * command tree to mount in another `effect/cli` program and its `runMain`
 * (`Cli`) and its exit codes (`ExitCode`). The control protocol it reads on
 * stdin is `effect-agent/protocol`'s `Control`.
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
export * as ExitCode from "./ExitCode.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as YnhTrajectory from "./YnhTrajectory.ts"
