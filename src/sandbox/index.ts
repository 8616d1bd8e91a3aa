/**
 * Where an agent touches the machine: the `Sandbox` service and its layers
 * (local processes, bubblewrap, memory), and the built-in tools that run on
 * it (`bash`, `read_file`, `write_file`, `edit_file`, `list_files`, `grep`),
 * and `HostProcess`, the same hygiene for a program that runs beside the
 * sandbox (an allowlisted environment, no inherited descriptor, capped
 * output).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as BuiltinTools from "./BuiltinTools.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as HostProcess from "./HostProcess.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Sandbox from "./Sandbox.ts"
