/**
 * Supervised runs: a worker (our own loop, or an external coding agent)
 * works on a task in turns, checks run after each turn, and their failures
 * go back to the worker until they pass.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as AgentWorker from "./AgentWorker.ts"
/** @since 0.1.0 */
export * as Check from "./Check.ts"
/** @since 0.1.0 */
export * as Supervisor from "./Supervisor.ts"
/** @since 0.1.0 */
export * as Worker from "./Worker.ts"
