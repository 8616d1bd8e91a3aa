/**
 * The caps on what the built-in tools give the model. `BuiltinTools`
 * re-exports them; they are defined here so that the tools' implementations
 * use them without importing the module that builds the toolkit.
 *
 * @internal
 */

/**
 * The caps on what the tools give the model.
 *
 * @category constants
 * @since 0.1.0
 */
export const limits = {
  /** Bytes kept of each of a command's stdout and stderr (start and end). */
  commandOutputBytes: 16_000,
  /** Default and longest `bash` timeout, in seconds. */
  defaultTimeoutSeconds: 120,
  maxTimeoutSeconds: 600,
  /** Lines `read_file` returns when no `limit` is given. */
  readLines: 2000,
  /** Characters of one line shown by `read_file` and `grep`. */
  lineChars: 2000,
  grepLineChars: 300,
  /** Characters of one `read_file` result. */
  readChars: 60_000,
  /** Largest file `read_file`, `edit_file` and `grep` read, in bytes. */
  fileBytes: 10 * 1024 * 1024,
  /** Paths `list_files` returns, matches `grep` returns. */
  listEntries: 1000,
  grepMatches: 200,
  /** Directory entries a walk visits before it stops. */
  walkEntries: 50_000
} as const
