/**
 * Where durable sessions keep their checkpoints. A checkpoint is a run's
 * state (`RunState`) and the config it runs with, saved under a session id.
 *
 * `fileSystem(dir)` keeps each session in `dir/<id>/`:
 *
 * - `journal-<n>.ndjson`: the transcript, one message per line, only ever
 *   appended to. Saving a turn writes the messages the turn added, not the
 *   whole transcript.
 * - `head.json`: everything else in the state, how many journal lines and
 *   bytes are valid, and, once the session has finished, how it ended. It is
 *   small, and replaced atomically: written to a temp file, fsynced, renamed
 *   over the old head, and the directory fsynced.
 *
 * The head records the CRC-32 of the journal's valid bytes (extended with
 * each append), and its own CRC-32 as its last key. Journal bytes past the
 * length the head records (a line cut by a crash, or lines whose head never
 * landed) are ignored, and the next save writes over them. Loading checks
 * everything (both checksums, every key, and that a run can go on from the
 * transcript: `RunState.validate`) and fails with a typed error:
 * `CheckpointMissing`, `CheckpointCorrupt` (what is wrong, in which file,
 * at which line and byte), `CheckpointVersionMismatch`. The checksums catch
 * damage, not tampering: whoever can write the files can write matching
 * checksums. It reads only regular files, never through a link, and no
 * more than the head records (a head at most 64 MiB, a journal at most
 * 1 GiB): a FIFO, a device or a directory in their place is
 * `CheckpointCorrupt`, not a hang. It never writes what it would refuse to
 * read: a save whose head or journal would pass those sizes fails with
 * `CheckpointTooLarge` before it writes anything, and the last checkpoint
 * saved still loads. It writes through no link either: the
 * journal it appends to must be a regular file, files it writes anew (the
 * temp head, a new journal) are created exclusively after whatever had
 * their name is unlinked, and a session directory that is a link is
 * refused. (Node has no `openat`: a process that can write the store's
 * directory while the store runs could still swap a session directory for
 * a link between the check and an open. Keep the store out of reach of
 * what it must not trust, such as an agent's workspace.) The library never
 * overwrites or deletes a checkpoint it cannot read; only `remove`, called
 * by the application, deletes one. One process writes a session at a time.
 * What it creates is its owner's alone, whatever the umask: directories
 * (`dir` itself when it makes it, each session's) `0700`, files `0600`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CheckpointStore } from "effect-agent/session"
 *
 * const program = Effect.gen(function*() {
 *   const store = yield* CheckpointStore.fileSystem(".sessions")
 *   const { state } = yield* store.load("task-42")
 *   return state.turn
 * })
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as FileDisk from "./internal/fileDisk.ts"
import * as Journal from "./internal/journal.ts"
import * as MemoryDisk from "./internal/memoryDisk.ts"
import type { Service } from "./internal/model.ts"
import * as SessionIdRule from "./internal/sessionId.ts"

export { version } from "./internal/codec.ts"

// -----------------------------------------------------------------------------
// Errors
// -----------------------------------------------------------------------------

export {
  CheckpointAgentUnknown,
  CheckpointCorrupt,
  CheckpointError,
  CheckpointExists,
  CheckpointIoError,
  CheckpointMissing,
  CheckpointTooLarge,
  CheckpointVersionMismatch,
  InvalidSessionId,
  type LoadError
} from "./internal/errors.ts"

// -----------------------------------------------------------------------------
// The service
// -----------------------------------------------------------------------------

export { type Checkpoint, Finished, type Saved, type Service } from "./internal/model.ts"

/**
 * A session id: 1 to 128 letters, digits, `.`, `_` or `-`, not starting with
 * `.`. The one rule every surface checks: the stores (this one and
 * `DurableSession`'s), `Session`, `DurableSession`, the agent server's routes
 * (`AgentServer.SessionId` is this schema) and the command's `--session-id`.
 * An id that breaks it is refused with `InvalidSessionId` before anything is
 * stored.
 *
 * @example
 * ```ts
 * import { Schema } from "effect"
 * import { CheckpointStore } from "effect-agent/session"
 *
 * console.log(Schema.is(CheckpointStore.SessionId)("task-42")) // Output: true
 * console.log(Schema.is(CheckpointStore.SessionId)("task\u000042")) // Output: false
 * ```
 *
 * @category schemas
 * @since 0.1.0
 */
export const SessionId = SessionIdRule.SessionId

/**
 * The checkpoint store service.
 *
 * @category services
 * @since 0.1.0
 */
export class CheckpointStore extends Context.Service<CheckpointStore, Service>()("effect-agent/CheckpointStore") {}

// -----------------------------------------------------------------------------
// File system
// -----------------------------------------------------------------------------

/**
 * A store keeping each session in `dir/<session id>/` (see the module
 * documentation for the layout and its guarantees). It uses `node:fs`
 * itself, not effect's `FileSystem`, which cannot open a file without
 * blocking on a FIFO.
 *
 * @category constructors
 * @since 0.1.0
 */
export const fileSystem = (dir: string): Effect.Effect<Service> =>
  Effect.sync(() => Journal.make(FileDisk.make(dir)))

/**
 * A layer providing {@link fileSystem}.
 *
 * @category layers
 * @since 0.1.0
 */
export const layerFileSystem = (dir: string): Layer.Layer<CheckpointStore> =>
  Layer.effect(CheckpointStore, fileSystem(dir))

// -----------------------------------------------------------------------------
// Memory
// -----------------------------------------------------------------------------

/**
 * A store in memory, for tests: the same format and checks as the file
 * system store, without durability.
 *
 * @category constructors
 * @since 0.1.0
 */
export const memory = (): Service => Journal.make(MemoryDisk.make())

/**
 * A layer providing {@link memory}.
 *
 * @category layers
 * @since 0.1.0
 */
export const layerMemory: Layer.Layer<CheckpointStore> = Layer.sync(CheckpointStore, memory)
