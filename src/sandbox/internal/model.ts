/**
 * What a sandbox is made of: the commands it runs and what they did, the
 * entries of its file system, and the operations every implementation
 * provides. `Sandbox` re-exports these and names the operations its
 * service; they are defined here so that the implementations under
 * `internal/` can use them without importing the module that builds them.
 *
 * @internal
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { CommandError, FileNotFoundError, FileSystemError, NotSupportedError, PathEscapeError } from "./errors.ts"

/**
 * Which implementation a sandbox is.
 *
 * @category models
 * @since 0.1.0
 */
export type Kind = "local" | "bubblewrap" | "memory"

/**
 * A command to run: a shell script (run by `/bin/sh -c`) or an argument vector
 * (run directly, no shell). `cwd` is relative to the workspace root; `env`
 * adds variables to the sandbox's allowlisted environment; `stdin` is written
 * to the command and then closed (without it, stdin is empty).
 *
 * @category models
 * @since 0.1.0
 */
export interface ExecOptions {
  readonly command: string | readonly [string, ...Array<string>]
  readonly cwd?: string | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly stdin?: string | undefined
  /** Unset: the sandbox's timeout. */
  readonly timeout?: Duration.Input | undefined
  /** Bytes kept of each of stdout and stderr. Unset: the sandbox's cap. */
  readonly maxOutputBytes?: number | undefined
}

/**
 * What a command did. `exitCode` is `null` when the command did not exit by
 * itself (it timed out or was killed by a signal). Output over the cap keeps
 * its beginning and its end around a `[... N bytes truncated ...]` marker,
 * and `truncated` is set.
 *
 * @category models
 * @since 0.1.0
 */
export const CommandResult = Schema.Struct({
  exitCode: Schema.NullOr(Schema.Finite),
  stdout: Schema.String,
  stderr: Schema.String,
  durationMs: Schema.Finite,
  timedOut: Schema.Boolean,
  truncated: Schema.Boolean
})

/**
 * @category models
 * @since 0.1.0
 */
export type CommandResult = typeof CommandResult.Type

/**
 * The type of a file system entry. A symbolic link is reported as a link,
 * never followed, in a directory listing.
 *
 * @category models
 * @since 0.1.0
 */
export type FileType = "file" | "directory" | "symlink" | "other"

/**
 * One entry of a directory listing.
 *
 * @category models
 * @since 0.1.0
 */
export interface DirectoryEntry {
  readonly name: string
  readonly type: FileType
}

/**
 * What a sandbox's `stat` reports.
 *
 * @category models
 * @since 0.1.0
 */
export interface FileInfo {
  readonly type: FileType
  readonly size: number
  readonly modified: Date | undefined
}

/** The operations of a sandbox (the `Sandbox` service). Paths are relative to `root`. */
export interface Operations {
  readonly kind: Kind
  /** The workspace root (its real path, for host sandboxes). */
  readonly root: string
  readonly exec: (
    options: ExecOptions
  ) => Effect.Effect<
    CommandResult,
    CommandError | NotSupportedError | PathEscapeError | FileNotFoundError | FileSystemError
  >
  readonly readFile: (path: string) => Effect.Effect<string, PathEscapeError | FileNotFoundError | FileSystemError>
  readonly readFileBytes: (
    path: string
  ) => Effect.Effect<Uint8Array, PathEscapeError | FileNotFoundError | FileSystemError>
  /** Writes a file, creating its parent directories. */
  readonly writeFile: (
    path: string,
    content: string | Uint8Array
  ) => Effect.Effect<void, PathEscapeError | FileNotFoundError | FileSystemError>
  readonly list: (
    path: string
  ) => Effect.Effect<ReadonlyArray<DirectoryEntry>, PathEscapeError | FileNotFoundError | FileSystemError>
  readonly stat: (path: string) => Effect.Effect<FileInfo, PathEscapeError | FileNotFoundError | FileSystemError>
  /** Removes a file, or a directory (`recursive` to remove one that is not empty). */
  readonly remove: (
    path: string,
    options?: { readonly recursive?: boolean | undefined }
  ) => Effect.Effect<void, PathEscapeError | FileNotFoundError | FileSystemError>
}

/** A sandbox from its operations; `readFile` decodes `readFileBytes` as UTF-8. */
export const fromOperations = (operations: Omit<Operations, "readFile">): Operations => ({
  ...operations,
  readFile: (path) => Effect.map(operations.readFileBytes(path), (bytes) => new TextDecoder().decode(bytes))
})
