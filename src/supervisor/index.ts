/**
 * Supervised runs: the worker contract (`Worker`) and the workers that drive
 * an external coding-agent CLI (`ExternalWorker`: Claude Code, Codex).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as ExternalWorker from "./ExternalWorker.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Worker from "./Worker.ts"
