/**
 * The errors of a checkpoint store. `CheckpointStore` re-exports them; they
 * are defined here so that the store's implementation fails with them
 * without importing the module that builds it.
 *
 * @internal
 */
import * as Schema from "effect/Schema"

/**
 * No checkpoint is saved under this session id.
 *
 * @category errors
 * @since 0.1.0
 */
export class CheckpointMissing extends Schema.TaggedError<CheckpointMissing>()("CheckpointMissing", {
  sessionId: Schema.String
}) {
  override get message(): string {
    return `no checkpoint is saved for session ${this.sessionId}`
  }
}

/**
 * A checkpoint cannot be read: `problem` says what is wrong, `file` where,
 * and for the journal `line` (1-based) and `offset` (in bytes) which entry.
 *
 * @category errors
 * @since 0.1.0
 */
export class CheckpointCorrupt extends Schema.TaggedError<CheckpointCorrupt>()("CheckpointCorrupt", {
  sessionId: Schema.String,
  file: Schema.String,
  problem: Schema.String,
  line: Schema.optionalKey(Schema.Finite),
  offset: Schema.optionalKey(Schema.Finite)
}) {
  override get message(): string {
    const byte = this.offset === undefined ? "" : ` (byte ${this.offset})`
    const at = this.line === undefined ? "" : ` line ${this.line}${byte}`
    return `the checkpoint of session ${this.sessionId} is corrupt: ${this.file}${at}: ${this.problem}`
  }
}

/**
 * A checkpoint was written in another version of the format (`checkpoint`)
 * or of the run state it holds (`RunState`).
 *
 * @category errors
 * @since 0.1.0
 */
export class CheckpointVersionMismatch extends Schema.TaggedError<CheckpointVersionMismatch>()(
  "CheckpointVersionMismatch",
  {
    sessionId: Schema.String,
    file: Schema.String,
    format: Schema.Literals(["checkpoint", "RunState"]),
    found: Schema.Finite,
    expected: Schema.Finite
  }
) {
  override get message(): string {
    return `the checkpoint of session ${this.sessionId} has ${this.format} version ${this.found}; ` +
      `this library reads version ${this.expected}`
  }
}

/**
 * A new session was started under an id that already has a checkpoint.
 *
 * @category errors
 * @since 0.1.0
 */
export class CheckpointExists extends Schema.TaggedError<CheckpointExists>()("CheckpointExists", {
  sessionId: Schema.String
}) {
  override get message(): string {
    return `a checkpoint is already saved for session ${this.sessionId}: resume it, or remove it first`
  }
}

/**
 * A session id breaks the rule for ids: 1 to 128 characters among letters,
 * digits, `.`, `_` and `-`, not starting with `.` (ids name directories).
 *
 * @category errors
 * @since 0.1.0
 */
export class InvalidSessionId extends Schema.TaggedError<InvalidSessionId>()("InvalidSessionId", {
  sessionId: Schema.String,
  rule: Schema.String
}) {
  override get message(): string {
    return `invalid session id ${JSON.stringify(this.sessionId)}: ${this.rule}`
  }
}

/**
 * Reading or writing a checkpoint failed (a file system error, or a state
 * that cannot be encoded as JSON).
 *
 * @category errors
 * @since 0.1.0
 */
export class CheckpointIoError extends Schema.TaggedError<CheckpointIoError>()("CheckpointIoError", {
  sessionId: Schema.String,
  operation: Schema.String,
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `checkpoint ${this.operation} failed for session ${this.sessionId} at ${this.path}: ${this.reason}`
  }
}

/**
 * A checkpoint was not saved: one of its files would be larger than a store
 * reads back (`file`, `bytes`, and the store's `limit`: a head at most 64 MiB,
 * a journal at most 1 GiB). Nothing was written; the last checkpoint saved
 * is still the one that loads.
 *
 * @category errors
 * @since 0.1.0
 */
export class CheckpointTooLarge extends Schema.TaggedError<CheckpointTooLarge>()("CheckpointTooLarge", {
  sessionId: Schema.String,
  file: Schema.String,
  bytes: Schema.Finite,
  limit: Schema.Finite
}) {
  override get message(): string {
    return `the checkpoint of session ${this.sessionId} was not saved: ${this.file} would have ${this.bytes} bytes, ` +
      `and a store reads at most ${this.limit}`
  }
}

/**
 * A session was handed off (`Agent.handoff`) to an agent the resuming
 * application does not give in `agents`: it cannot go on in the agent its
 * checkpoint names.
 *
 * @category errors
 * @since 0.1.0
 */
export class CheckpointAgentUnknown extends Schema.TaggedError<CheckpointAgentUnknown>()("CheckpointAgentUnknown", {
  sessionId: Schema.String,
  agent: Schema.String,
  /** The agents the application gave. */
  known: Schema.Array(Schema.String)
}) {
  override get message(): string {
    const known = this.known.length === 0 ? "none" : this.known.join(", ")
    return `session ${this.sessionId} was handed off to the agent ${this.agent}, which the resuming application ` +
      `does not define (its agents: ${known})`
  }
}

/**
 * Why a checkpoint could not be loaded.
 *
 * @category errors
 * @since 0.1.0
 */
export type LoadError =
  | InvalidSessionId
  | CheckpointMissing
  | CheckpointCorrupt
  | CheckpointVersionMismatch
  | CheckpointIoError

/**
 * Every failure of a checkpoint store.
 *
 * @category errors
 * @since 0.1.0
 */
export const CheckpointError = Schema.Union([
  CheckpointMissing,
  CheckpointCorrupt,
  CheckpointVersionMismatch,
  CheckpointExists,
  InvalidSessionId,
  CheckpointIoError,
  CheckpointTooLarge,
  CheckpointAgentUnknown
])
/**
 * @category errors
 * @since 0.1.0
 */
export type CheckpointError = typeof CheckpointError.Type

/** A `CheckpointCorrupt` of a session's file, at a journal line when given. */
export const corrupt = (
  sessionId: string,
  file: string,
  problem: string,
  at?: { readonly line: number; readonly offset: number }
): CheckpointCorrupt =>
  new CheckpointCorrupt(at === undefined ? { sessionId, file, problem } : { sessionId, file, problem, ...at })
