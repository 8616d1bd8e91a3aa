/**
 * The built-in tools of a coding agent, as an `effect/ai` toolkit on the
 * {@link Sandbox.Sandbox}: `bash`, `read_file`, `write_file`, `edit_file`,
 * `list_files` and `grep`. Their results are plain text a model reads well,
 * with sizes capped; their failures (a missing file, an edit that does not
 * match, a path outside the workspace) are results the model reads too
 * (`failureMode: "return"`).
 *
 * Reading tools run in parallel; `bash` and the writing tools run one at a
 * time ({@link AgentTool.annotate}). `grep` runs the model's regular
 * expression in a worker thread: a pattern that backtracks exponentially ends
 * with the call's timeout (the thread is terminated) and never stalls the
 * event loop. `make({ requireApproval: true })` makes
 * `bash`, `write_file` and `edit_file` need approval (`effect/ai`'s
 * `needsApproval`).
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { BuiltinTools, Sandbox } from "effect-agent/sandbox"
 *
 * const toolkit = BuiltinTools.make({ requireApproval: true })
 * const handlers = BuiltinTools.layer.pipe(Layer.provide(Sandbox.memory({ "a.txt": "hi\n" })))
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import * as AgentTool from "../AgentTool.ts"
import { bash } from "./internal/tools/bash.ts"
import { editFile } from "./internal/tools/editFile.ts"
import { grep } from "./internal/tools/grep.ts"
import { limits } from "./internal/tools/limits.ts"
import * as LineMatcher from "./internal/tools/lineMatcher.ts"
import { listFiles } from "./internal/tools/listFiles.ts"
import { readFile } from "./internal/tools/readFile.ts"
import { writeFile } from "./internal/tools/writeFile.ts"
import { Sandbox } from "./Sandbox.ts"

// -----------------------------------------------------------------------------
// Limits
// -----------------------------------------------------------------------------

export { limits } from "./internal/tools/limits.ts"

// -----------------------------------------------------------------------------
// Tools
// -----------------------------------------------------------------------------

const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

const WorkspacePath = Schema.String.annotate({ description: "Path relative to the workspace root" })

/** A tool whose result and failure are text the model reads (`failureMode: "return"`), with loop annotations. */
const textTool = <const Name extends string, Parameters extends Schema.Constraint>(
  name: Name,
  options: { readonly description: string; readonly parameters: Parameters },
  annotations: AgentTool.Options
) =>
  AgentTool.annotate(
    Tool.make(name, { ...options, success: Schema.String, failure: Schema.String, failureMode: "return" }),
    annotations
  )

/**
 * Runs a shell command.
 *
 * @category tools
 * @since 0.1.0
 */
export const Bash = textTool("bash", {
  description: "Run a bash command in the workspace (the working directory is the workspace root). " +
    "Returns stdout, stderr and the exit code; long output keeps its start and end. " +
    "The command and every process it starts are killed at the timeout.",
  parameters: Schema.Struct({
    command: Schema.String.annotate({ description: "The bash script to run" }),
    timeout: Schema.optionalKey(Schema.Finite.annotate({
      description: `Seconds before the command is killed (default ${limits.defaultTimeoutSeconds}, ` +
        `at most ${limits.maxTimeoutSeconds})`
    }))
  })
}, { execution: "sequential", replaySafe: false })

/**
 * Reads a text file, with line numbers.
 *
 * @category tools
 * @since 0.1.0
 */
export const ReadFile = textTool("read_file", {
  description: "Read a text file of the workspace. Lines are numbered (number, tab, text). " +
    `Reads ${limits.readLines} lines unless given a limit; use offset to continue.`,
  parameters: Schema.Struct({
    path: WorkspacePath,
    offset: Schema.optionalKey(PositiveInt.annotate({ description: "First line to read (1-based)" })),
    limit: Schema.optionalKey(PositiveInt.annotate({ description: "Number of lines to read" }))
  })
}, { execution: "parallel" })

/**
 * Writes a whole file.
 *
 * @category tools
 * @since 0.1.0
 */
export const WriteFile = textTool("write_file", {
  description: "Write a file of the workspace with the given content, replacing it if it exists " +
    "and creating missing directories. To change part of a file, use edit_file.",
  parameters: Schema.Struct({
    path: WorkspacePath,
    content: Schema.String.annotate({ description: "The whole new content of the file" })
  })
}, { execution: "sequential" })

/**
 * Replaces exact text in a file.
 *
 * @category tools
 * @since 0.1.0
 */
export const EditFile = textTool("edit_file", {
  description: "Replace exact text in a file of the workspace. old_text must match the file exactly, " +
    "whitespace and indentation included, and only once unless replace_all is set.",
  parameters: Schema.Struct({
    path: WorkspacePath,
    old_text: Schema.String.annotate({ description: "The exact text to replace" }),
    new_text: Schema.String.annotate({ description: "The text to put in its place" }),
    replace_all: Schema.optionalKey(Schema.Boolean.annotate({ description: "Replace every occurrence" }))
  })
}, { execution: "sequential", replaySafe: false })

/**
 * Lists files matching a glob.
 *
 * @category tools
 * @since 0.1.0
 */
export const ListFiles = textTool("list_files", {
  description: "List the files of the workspace whose path (relative to `path`) matches a glob " +
    "(`*` within a name, `**` across directories, `{a,b}` alternatives). Skips .git and node_modules.",
  parameters: Schema.Struct({
    pattern: Schema.optionalKey(Schema.String.annotate({ description: "Glob, default **" })),
    path: Schema.optionalKey(Schema.String.annotate({ description: "Directory to search, default the root" }))
  })
}, { execution: "parallel" })

/**
 * Searches files for a regular expression (matched in a worker thread, which
 * the call's timeout or interruption terminates).
 *
 * @category tools
 * @since 0.1.0
 */
export const Grep = textTool("grep", {
  description: "Search the text files of the workspace for a regular expression (JavaScript syntax). " +
    "Returns matching lines as path:line:text. Skips .git, node_modules and binary files.",
  parameters: Schema.Struct({
    pattern: Schema.String.annotate({ description: "Regular expression" }),
    path: Schema.optionalKey(
      Schema.String.annotate({ description: "File or directory to search, default the root" })
    ),
    glob: Schema.optionalKey(Schema.String.annotate({ description: "Only files whose path matches this glob" })),
    ignore_case: Schema.optionalKey(Schema.Boolean.annotate({ description: "Match case-insensitively" }))
  })
}, { execution: "parallel" })

/**
 * Options of {@link make}.
 *
 * @category models
 * @since 0.1.0
 */
export interface Options {
  /** `bash`, `write_file` and `edit_file` need approval before they run. */
  readonly requireApproval?: boolean | undefined
}

/**
 * The built-in toolkit; with `requireApproval`, the tools that change the
 * machine (`bash`, `write_file`, `edit_file`) need approval. Its handlers are
 * {@link layer}.
 *
 * @category constructors
 * @since 0.1.0
 */
export const make = (options?: Options) => {
  const approval = options?.requireApproval === true
  return Toolkit.make(
    approval ? Bash.setNeedsApproval(true) : Bash,
    ReadFile,
    approval ? WriteFile.setNeedsApproval(true) : WriteFile,
    approval ? EditFile.setNeedsApproval(true) : EditFile,
    ListFiles,
    Grep
  )
}

/**
 * The built-in toolkit, no approvals.
 *
 * @category tools
 * @since 0.1.0
 */
export const toolkit = make()

// -----------------------------------------------------------------------------
// Handlers
// -----------------------------------------------------------------------------

/**
 * The handlers of the built-in tools, on the {@link Sandbox.Sandbox}. They
 * serve {@link toolkit} and every toolkit from {@link make}.
 *
 * @category layers
 * @since 0.1.0
 */
export const layer = toolkit.toLayer(Effect.gen(function*() {
  const sandbox = yield* Sandbox
  const matcher = yield* LineMatcher.make
  return toolkit.of({
    bash: bash(sandbox),
    read_file: readFile(sandbox),
    write_file: writeFile(sandbox),
    edit_file: editFile(sandbox),
    list_files: listFiles(sandbox),
    grep: grep(sandbox, matcher)
  })
}))
