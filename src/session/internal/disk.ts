/**
 * The few file operations a checkpoint store needs, so that the file system
 * and the in-memory store share the format and its checks.
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import type { CheckpointCorrupt, CheckpointIoError } from "./errors.ts"

/**
 * The few file operations a store needs, so that the file system and the
 * in-memory store share the format and its checks.
 */
export interface Disk {
  /** Where a file is, for errors. */
  readonly where: (sessionId: string, name: string) => string
  /**
   * The first `limit` bytes of a file and its size, or `undefined` when it
   * does not exist. Only a regular file is read (not a link, a device, a
   * FIFO or a directory: that is `CheckpointCorrupt`), and never past the
   * size it had when it was opened.
   */
  readonly read: (
    sessionId: string,
    name: string,
    limit: number
  ) => Effect.Effect<FileBytes | undefined, CheckpointCorrupt | CheckpointIoError>
  /** Makes the session's directory (durably). */
  readonly prepare: (sessionId: string) => Effect.Effect<void, CheckpointCorrupt | CheckpointIoError>
  /**
   * Writes `data` at `offset` (0 starts a new file), cuts the file there, and
   * makes it durable. A file that is not the store's is `CheckpointCorrupt`.
   */
  readonly writeAt: (
    sessionId: string,
    name: string,
    offset: number,
    data: Uint8Array
  ) => Effect.Effect<void, CheckpointCorrupt | CheckpointIoError>
  /** Replaces a file atomically and durably. */
  readonly replace: (
    sessionId: string,
    name: string,
    data: Uint8Array
  ) => Effect.Effect<void, CheckpointCorrupt | CheckpointIoError>
  /** Deletes a file, if it exists. */
  readonly removeFile: (sessionId: string, name: string) => Effect.Effect<void, CheckpointCorrupt | CheckpointIoError>
  /** Deletes a session's files. */
  readonly removeSession: (sessionId: string) => Effect.Effect<void, CheckpointIoError>
}

/** What {@link Disk.read} read. */
export interface FileBytes {
  readonly bytes: Uint8Array
  /** The file's size when it was opened. */
  readonly size: number
}

