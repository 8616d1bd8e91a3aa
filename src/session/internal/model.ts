/**
 * What a checkpoint store saves and loads, and the operations of a store.
 * `CheckpointStore` re-exports these; they are defined here so that the
 * store's implementation uses them without importing the module that builds
 * it.
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as AgentConfig from "../../AgentConfig.ts"
import * as Outcome from "../../Outcome.ts"
import type * as RunState from "../../RunState.ts"
import type {
  CheckpointCorrupt,
  CheckpointExists,
  CheckpointIoError,
  CheckpointTooLarge,
  InvalidSessionId,
  LoadError
} from "./errors.ts"

/**
 * How a session's last run ended, when the loop ended it (not an
 * interruption or a failure): the session is finished.
 *
 * @category models
 * @since 0.1.0
 */
export const Finished = Schema.Struct({
  outcome: Outcome.Outcome,
  /** Where that run's own messages start in the transcript (its `RunResult.messages`). */
  firstMessage: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
})
/**
 * @category models
 * @since 0.1.0
 */
export type Finished = typeof Finished.Type

/**
 * What a store saves: a run's state, optionally the config it runs with,
 * and, once the session has finished, how it ended.
 *
 * @category models
 * @since 0.1.0
 */
export interface Checkpoint {
  readonly state: RunState.RunState
  readonly config?: AgentConfig.AgentConfig | undefined
  readonly finished?: Finished | undefined
  /**
   * The agent the session runs in, once a handoff passed it on (`Agent.handoff`): a resumed session goes on in
   * it. Absent for the agent the session started with.
   */
  readonly agent?: string | undefined
}

/**
 * What a save wrote.
 *
 * @category models
 * @since 0.1.0
 */
export interface Saved {
  /** Bytes written: the journal lines added and the head. */
  readonly bytes: number
}

/**
 * The checkpoint store service shape.
 *
 * @category models
 * @since 0.1.0
 */
export interface Service {
  /**
   * Saves the first checkpoint of a new session; fails with `CheckpointExists`
   * when the id is taken, with `CheckpointCorrupt` when something that is
   * not the store's is where the session's files go, and with
   * `CheckpointTooLarge` (writing nothing) when it would not load back.
   */
  readonly create: (
    sessionId: string,
    checkpoint: Checkpoint
  ) => Effect.Effect<
    Saved,
    InvalidSessionId | CheckpointExists | CheckpointCorrupt | CheckpointIoError | CheckpointTooLarge
  >
  /**
   * Saves a later checkpoint of a session. Messages already saved are not
   * written again: when the transcript extends the saved one, only the new
   * messages are appended (otherwise the journal is rewritten). A checkpoint
   * that would not load back (too large) is not written: `CheckpointTooLarge`,
   * and the last one saved still loads.
   */
  readonly save: (sessionId: string, checkpoint: Checkpoint) => Effect.Effect<Saved, LoadError | CheckpointTooLarge>
  /** Loads the last checkpoint of a session. */
  readonly load: (sessionId: string) => Effect.Effect<Checkpoint, LoadError>
  /** Deletes a session's checkpoint (whatever its state); the library itself never calls it. */
  readonly remove: (sessionId: string) => Effect.Effect<void, InvalidSessionId | CheckpointIoError>
  /** Where a session's head is, for errors about what it holds (such as a plugin's state). */
  readonly headFile: (sessionId: string) => string
}
