/**
 * The `effect-agent` command's parts, for programs that drive or embed it:
 * the command tree, the run, the settings from its flags, the exit codes,
 * the control protocol, the script file of the scripted provider, the views
 * and the demo.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as Cli from "./Cli.ts"
/** @since 0.1.0 */
export * as Commands from "./Commands.ts"
/** @since 0.1.0 */
export * as Control from "./Control.ts"
/** @since 0.1.0 */
export * as Demo from "./Demo.ts"
/** @since 0.1.0 */
export * as ExitCode from "./ExitCode.ts"
/** @since 0.1.0 */
export * as Io from "./Io.ts"
/** @since 0.1.0 */
export * as Runner from "./Runner.ts"
/** @since 0.1.0 */
export * as ScriptFile from "./ScriptFile.ts"
/** @since 0.1.0 */
export * as Seal from "./Seal.ts"
/** @since 0.1.0 */
export * as Settings from "./Settings.ts"
/** @since 0.1.0 */
export * as TerminalInput from "./TerminalInput.ts"
/** @since 0.1.0 */
export * as View from "./View.ts"
