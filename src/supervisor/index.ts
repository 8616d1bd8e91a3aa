/**
 * Supervised runs: a worker (our own loop, or an external coding-agent CLI)
 * works on a task in turns, checks run after each turn, and their failures go
 * back to the worker until they pass. The worker contract (`Worker`), our loop
 * as a worker (`AgentWorker`), the workers that drive an external CLI
 * (`ExternalWorker`: Claude Code, Codex), checks (`Check`), the run
 * (`Supervisor`), and its own events and endings (`SupervisorEvent`,
 * `SupervisorOutcome`: carried by the core's open unions as `Custom`).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as AgentWorker from "./AgentWorker.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Check from "./Check.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as ExternalWorker from "./ExternalWorker.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Supervisor from "./Supervisor.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as SupervisorEvent from "./SupervisorEvent.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as SupervisorOutcome from "./SupervisorOutcome.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Worker from "./Worker.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as SupervisedSession from "./SupervisedSession.ts"
