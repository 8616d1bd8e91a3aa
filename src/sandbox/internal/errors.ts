/**
 * The errors of a sandbox, and how a platform failure becomes one. `Sandbox`
 * re-exports the errors: they are defined here so that the implementations
 * under `internal/` can fail with them without importing the module that
 * builds them.
 *
 * @internal
 */
import type * as PlatformError from "effect/PlatformError"
import * as Schema from "effect/Schema"

/**
 * A path leads outside the workspace: through `..`, as an absolute path, or
 * through a symbolic link (checked on the real path). `path` is the path as
 * it was given.
 *
 * @category errors
 * @since 0.1.0
 */
export class PathEscapeError extends Schema.TaggedError<PathEscapeError>()("PathEscapeError", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `path escapes the workspace: ${this.path} (${this.reason})`
  }
}

/**
 * No file or directory at `path` (as it was given).
 *
 * @category errors
 * @since 0.1.0
 */
export class FileNotFoundError extends Schema.TaggedError<FileNotFoundError>()("FileNotFoundError", {
  path: Schema.String
}) {
  override get message(): string {
    return `no such file or directory: ${this.path}`
  }
}

/**
 * Any other failure of a file operation: a directory where a file was
 * expected, permission denied, a directory that is not empty…
 *
 * @category errors
 * @since 0.1.0
 */
export class FileSystemError extends Schema.TaggedError<FileSystemError>()("FileSystemError", {
  operation: Schema.String,
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `${this.operation} ${this.path}: ${this.reason}`
  }
}

/**
 * The sandbox cannot do this at all (the in-memory sandbox running a
 * command, bubblewrap on a machine where `bwrap` does not work).
 *
 * @category errors
 * @since 0.1.0
 */
export class NotSupportedError extends Schema.TaggedError<NotSupportedError>()("NotSupportedError", {
  operation: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `${this.operation} is not supported: ${this.reason}`
  }
}

/**
 * A command could not be started (no such program, bad arguments). A command
 * that starts and fails is not an error: its exit code is in the
 * `CommandResult`.
 *
 * @category errors
 * @since 0.1.0
 */
export class CommandError extends Schema.TaggedError<CommandError>()("CommandError", {
  command: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `cannot run ${this.command}: ${this.reason}`
  }
}

/**
 * `Sandbox.auto` would fall back to `Sandbox.local`, where commands could
 * read the host process's environment, while variables holding secrets are
 * set there (`variables`, by name). `reason` says why bubblewrap does not
 * work.
 *
 * @category errors
 * @since 0.1.0
 */
export class IsolationUnavailableError extends Schema.TaggedError<IsolationUnavailableError>()(
  "IsolationUnavailableError",
  { reason: Schema.String, variables: Schema.Array(Schema.String) }
) {
  override get message(): string {
    const names = this.variables.join(", ")
    return `bubblewrap is not usable here (${this.reason}) and ${names} ${
      this.variables.length === 1 ? "is" : "are"
    } in the environment, which commands without isolation could read`
  }
}

/**
 * Any failure of a sandbox operation.
 *
 * @category errors
 * @since 0.1.0
 */
export type SandboxError = PathEscapeError | FileNotFoundError | FileSystemError | NotSupportedError | CommandError

/** What an `errno` code means, in the words of a `FileSystemError`'s reason. */
export const errnoReasons: Readonly<Record<string, string>> = {
  EISDIR: "is a directory",
  ENOTDIR: "not a directory",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOTEMPTY: "directory not empty",
  EEXIST: "already exists",
  ELOOP: "too many levels of symbolic links",
  ENAMETOOLONG: "name too long",
  ENOSPC: "no space left on device",
  EROFS: "read-only file system"
}

/** A platform failure in a few words: its `errno` code's meaning, else its reason's tag. */
export const describe = (error: PlatformError.PlatformError): string => {
  const cause: unknown = error.reason.cause
  const code = typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined
  return (code !== undefined ? errnoReasons[code] : undefined) ?? error.reason._tag
}

export const fsError = (operation: string, path: string, reason: string) =>
  new FileSystemError({ operation, path, reason })

/** A platform failure of `operation` on `path` (as it was given): not found, or a `FileSystemError`. */
export const fromPlatformError = (operation: string, path: string) => (error: PlatformError.PlatformError) =>
  error.reason._tag === "NotFound"
    ? new FileNotFoundError({ path })
    : fsError(operation, path, describe(error))

export const rootRemoval = (path: string) => fsError("remove", path, "the workspace root cannot be removed")
