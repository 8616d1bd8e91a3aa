/**
 * Durable runs: sessions that save a checkpoint as they go and resume after
 * a crash (`Session`), the stores that keep the checkpoints
 * (`CheckpointStore`), one session API whatever keeps the sessions
 * (`Sessions`: in this process or as durable workflows, `DurableSession`), and the trajectory of every event as JSON lines
 * (`Trajectory`).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as CheckpointStore from "./CheckpointStore.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as DurableSession from "./DurableSession.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Session from "./Session.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Sessions from "./Sessions.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Trajectory from "./Trajectory.ts"
