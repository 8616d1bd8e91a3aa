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
import { Effect, Glob, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import * as AgentTool from "../AgentTool.ts"
import * as LineMatcher from "./internal/lineMatcher.ts"
import { type CommandResult, Sandbox, type SandboxError } from "./Sandbox.ts"

// -----------------------------------------------------------------------------
// Limits
// -----------------------------------------------------------------------------

/**
 * The caps on what the tools give the model.
 *
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
 * @since 0.1.0
 */
export const toolkit = make()

// -----------------------------------------------------------------------------
// Handlers
// -----------------------------------------------------------------------------

const describeError = (error: SandboxError): string => error.message

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`

/** Splits text into lines, without the empty one after a final newline. */
const splitLines = (text: string): Array<string> => {
  const lines = text.split("\n")
  if (lines.at(-1) === "") lines.pop()
  return lines
}

const clip = (line: string, max: number): string =>
  line.length <= max ? line : `${line.slice(0, max)}… [${line.length - max} more characters]`

/** The 1-based line on which `index` of `text` falls. */
const lineAt = (text: string, index: number): number => {
  let line = 1
  for (let i = text.indexOf("\n"); i !== -1 && i < index; i = text.indexOf("\n", i + 1)) line++
  return line
}

const isBinary = (bytes: Uint8Array): boolean => bytes.subarray(0, 8000).includes(0)

/** The entries of a search: paths relative to the workspace root and to the searched directory. */
interface Found {
  readonly path: string
  readonly relative: string
}

const skippedDirectories = new Set([".git", "node_modules"])

const joinPath = (dir: string, name: string) => (dir === "" || dir === "." ? name : `${dir}/${name}`)

/**
 * Walks the files under `dir` depth first in name order, not following
 * symbolic links to directories and skipping {@link skippedDirectories},
 * until `visit` says stop or {@link limits.walkEntries} entries were seen.
 * The sandbox's own listing does the path checks. Written here rather than
 * with `FileSystem.glob` so it works on every sandbox, the in-memory one too.
 */
const walkFiles = <E>(
  sandbox: Sandbox["Service"],
  dir: string,
  visit: (found: Found) => Effect.Effect<boolean, E>
): Effect.Effect<{ readonly complete: boolean }, SandboxError | E> =>
  Effect.gen(function*() {
    const stack: Array<Found> = [{ path: dir.replace(/\/+$/, "").replace(/^(\.\/)+/, "") || ".", relative: "" }]
    let seen = 0
    while (stack.length > 0) {
      const current = stack.pop()!
      // The searched directory must be listable; an unreadable one below it is skipped.
      const entries = current.relative === ""
        ? yield* sandbox.list(current.path)
        : yield* Effect.orElseSucceed(sandbox.list(current.path), () => [])
      const subdirectories: Array<Found> = []
      for (const entry of entries) {
        if (++seen > limits.walkEntries) return { complete: false }
        const found = { path: joinPath(current.path, entry.name), relative: joinPath(current.relative, entry.name) }
        if (entry.type === "directory") {
          if (!skippedDirectories.has(entry.name)) subdirectories.push(found)
        } else if (!(yield* visit(found))) {
          return { complete: false }
        }
      }
      for (let i = subdirectories.length - 1; i >= 0; i--) stack.push(subdirectories[i]!)
    }
    return { complete: true }
  })

const formatCommand = (result: CommandResult, timeoutSeconds: number): string => {
  const parts: Array<string> = []
  if (result.stdout !== "") parts.push(result.stdout.replace(/\n$/, ""))
  if (result.stderr !== "") parts.push(`[stderr]\n${result.stderr.replace(/\n$/, "")}`)
  if (parts.length === 0) parts.push("(no output)")
  parts.push(
    result.timedOut
      ? `[timed out after ${timeoutSeconds}s; the command and its processes were killed]`
      : result.exitCode === null
      ? "[killed by a signal]"
      : `[exit code ${result.exitCode}]`
  )
  return parts.join("\n")
}

const bash = (sandbox: Sandbox["Service"]) => (params: typeof Bash.parametersSchema.Type) => {
  const timeout = Math.min(
    Math.max(params.timeout ?? limits.defaultTimeoutSeconds, 1),
    limits.maxTimeoutSeconds
  )
  return sandbox.exec({
    command: ["bash", "-c", params.command],
    timeout: `${timeout} seconds`,
    maxOutputBytes: limits.commandOutputBytes
  }).pipe(
    Effect.mapError(describeError),
    Effect.flatMap((result) => {
      const text = formatCommand(result, timeout)
      return result.exitCode === 0 ? Effect.succeed(text) : Effect.fail(text)
    })
  )
}

/** Reads a text file for a tool: refuses directories, huge files and binary files with a clear reason. */
const readText = (sandbox: Sandbox["Service"], path: string) =>
  Effect.gen(function*() {
    const info = yield* sandbox.stat(path)
    if (info.type === "directory") {
      return yield* Effect.fail(`${path} is a directory; use list_files to see its files`)
    }
    if (info.size > limits.fileBytes) {
      return yield* Effect.fail(
        `${path} is too large (${info.size} bytes; the limit is ${limits.fileBytes}); read a part of it with bash`
      )
    }
    const bytes = yield* sandbox.readFileBytes(path)
    if (isBinary(bytes)) return yield* Effect.fail(`${path} looks like a binary file (${bytes.length} bytes)`)
    return new TextDecoder().decode(bytes)
  }).pipe(Effect.mapError((error) => (typeof error === "string" ? error : describeError(error))))

const readFile = (sandbox: Sandbox["Service"]) => (params: typeof ReadFile.parametersSchema.Type) =>
  Effect.flatMap(readText(sandbox, params.path), (text) => {
    const lines = splitLines(text)
    if (lines.length === 0) return Effect.succeed(`(${params.path} is empty)`)
    const first = params.offset ?? 1
    if (first > lines.length) {
      return Effect.fail(`offset ${first} is past the end of ${params.path} (${plural(lines.length, "line")})`)
    }
    const wanted = Math.min(lines.length, first - 1 + (params.limit ?? limits.readLines))
    const width = String(wanted).length
    const out: Array<string> = []
    let chars = 0
    let last = first - 1
    while (last < wanted) {
      const line = `${String(last + 1).padStart(width)}\t${clip(lines[last]!.replace(/\r$/, ""), limits.lineChars)}`
      if (chars + line.length > limits.readChars && out.length > 0) break
      out.push(line)
      chars += line.length + 1
      last++
    }
    if (last < lines.length) {
      out.push(`[lines ${first}-${last} of ${lines.length}; continue with offset=${last + 1}]`)
    }
    return Effect.succeed(out.join("\n"))
  })

const writeFile = (sandbox: Sandbox["Service"]) => (params: typeof WriteFile.parametersSchema.Type) =>
  Effect.gen(function*() {
    const existed = yield* Effect.match(sandbox.stat(params.path), { onFailure: () => false, onSuccess: () => true })
    yield* sandbox.writeFile(params.path, params.content)
    const bytes = new TextEncoder().encode(params.content).length
    const size = `${plural(splitLines(params.content).length, "line")}, ${plural(bytes, "byte")}`
    return `${existed ? "Overwrote" : "Created"} ${params.path} (${size})`
  }).pipe(Effect.mapError(describeError))

/** Start indexes of the non-overlapping occurrences of `needle` in `text`. */
const occurrences = (text: string, needle: string): Array<number> => {
  const found: Array<number> = []
  for (let i = text.indexOf(needle); i !== -1; i = text.indexOf(needle, i + needle.length)) found.push(i)
  return found
}

const editFile = (sandbox: Sandbox["Service"]) => (params: typeof EditFile.parametersSchema.Type) =>
  Effect.gen(function*() {
    const { new_text: replacement, old_text: target, path } = params
    if (target === "") {
      return yield* Effect.fail("old_text is empty; to create or replace a whole file, use write_file")
    }
    if (target === replacement) return yield* Effect.fail("old_text and new_text are the same; nothing to change")
    const text = yield* readText(sandbox, path)
    const found = occurrences(text, target)
    if (found.length === 0) {
      return yield* Effect.fail(
        `old_text was not found in ${path}. It must match exactly, whitespace and indentation included; ` +
          "read the file again and copy the text."
      )
    }
    if (found.length > 1 && params.replace_all !== true) {
      const lines = found.map((index) => lineAt(text, index)).join(", ")
      return yield* Effect.fail(
        `old_text matches ${found.length} times in ${path} (lines ${lines}); include more surrounding text ` +
          "to make it unique, or set replace_all to replace every occurrence."
      )
    }
    // Rebuilt by slicing (String.replace would interpret `$` patterns in new_text).
    let edited = ""
    let from = 0
    const starts: Array<number> = []
    for (const index of found) {
      edited += text.slice(from, index)
      starts.push(edited.length)
      edited += replacement
      from = index + target.length
    }
    edited += text.slice(from)
    yield* Effect.mapError(sandbox.writeFile(path, edited), describeError)
    const lines = starts.map((index) => lineAt(edited, index))
    return `Edited ${path}: replaced ${plural(found.length, "occurrence")} (${
      lines.length === 1 ? "line" : "lines"
    } ${lines.join(", ")})`
  })

const listFiles = (sandbox: Sandbox["Service"]) => (params: typeof ListFiles.parametersSchema.Type) =>
  Effect.gen(function*() {
    const pattern = params.pattern ?? "**"
    const dir = params.path ?? "."
    const glob = Glob.make(pattern, { dot: true })
    const matches: Array<string> = []
    let more = false
    const walk = yield* walkFiles(sandbox, dir, (found) => {
      if (!Glob.match(glob, found.relative)) return Effect.succeed(true)
      if (matches.length === limits.listEntries) {
        more = true
        return Effect.succeed(false)
      }
      matches.push(found.path)
      return Effect.succeed(true)
    })
    if (matches.length === 0) {
      return walk.complete
        ? `No files match ${pattern} in ${dir}`
        : `No files match ${pattern} in the first ${limits.walkEntries} entries of ${dir}; narrow the path`
    }
    matches.sort()
    if (more) matches.push(`[first ${limits.listEntries} files shown; narrow the pattern or the path]`)
    else if (!walk.complete) matches.push(`[stopped after ${limits.walkEntries} entries; narrow the path]`)
    return matches.join("\n")
  }).pipe(Effect.mapError(describeError))

/**
 * A batch of files for the matcher is sent when it holds this many files or
 * characters. Batches start at one file and double: a search that reaches its
 * cap early reads few files past it.
 */
const batchFiles = 64
const batchChars = 1024 * 1024

/**
 * The regular expression runs off the event loop ({@link LineMatcher}): a
 * pattern that backtracks exponentially ends with the call's timeout and
 * stalls no other fiber. Files are read here, through the sandbox, and
 * matched in batches.
 */
const grep = (sandbox: Sandbox["Service"], matcher: LineMatcher.LineMatcher) =>
(params: typeof Grep.parametersSchema.Type) =>
  Effect.gen(function*() {
    const flags = params.ignore_case === true ? "i" : ""
    // Compiling checks the syntax here; only matching can take long.
    yield* Effect.try({
      try: () => new RegExp(params.pattern, flags),
      catch: (error) => (error instanceof Error ? error.message : `invalid regular expression: ${String(error)}`)
    })
    const dir = params.path ?? "."
    const glob = params.glob === undefined ? undefined : Glob.make(params.glob, { dot: true })
    const matches: Array<string> = []
    let more = false
    let batch: Array<{ readonly path: string; readonly text: string }> = []
    let chars = 0
    let batchSize = 1
    // Matches the batch, adding its matching lines; false once the cap is reached.
    const flush = Effect.suspend(() => {
      const files = batch
      batch = []
      chars = 0
      batchSize = Math.min(batchFiles, batchSize * 2)
      if (files.length === 0) return Effect.succeed(true)
      const request = {
        pattern: params.pattern,
        flags,
        texts: files.map((file) => file.text),
        wanted: limits.grepMatches - matches.length + 1
      }
      return matcher.match(request).pipe(
        Effect.mapError((error) => error.message),
        Effect.map((found) => {
          for (let i = 0; i < files.length; i++) {
            const { path, text } = files[i]!
            const lines = found[i] ?? []
            for (let j = 0; j + 2 < lines.length; j += 3) {
              if (matches.length === limits.grepMatches) {
                more = true
                return false
              }
              matches.push(`${path}:${lines[j]}:${clip(text.slice(lines[j + 1], lines[j + 2]), limits.grepLineChars)}`)
            }
          }
          return true
        })
      )
    })
    const add = (path: string, text: string) => {
      batch.push({ path, text })
      chars += text.length
      return batch.length >= batchSize || chars >= batchChars ? flush : Effect.succeed(true)
    }
    const info = yield* Effect.mapError(sandbox.stat(dir), describeError)
    const walk = info.type === "directory"
      ? yield* walkFiles(sandbox, dir, (found) =>
        glob === undefined || Glob.match(glob, found.relative)
          // Unreadable, binary and huge files are skipped in a directory search.
          ? Effect.flatMap(Effect.option(readText(sandbox, found.path)), (text) =>
            text._tag === "None" ? Effect.succeed(true) : add(found.path, text.value))
          : Effect.succeed(true)).pipe(
          Effect.mapError((error) => (typeof error === "string" ? error : describeError(error)))
        )
      : { complete: yield* add(dir, yield* readText(sandbox, dir)) }
    yield* flush
    if (matches.length === 0) return `No matches for /${params.pattern}/ in ${dir}`
    if (more) matches.push(`[first ${limits.grepMatches} matches shown; narrow the pattern or the path]`)
    else if (!walk.complete) matches.push(`[stopped after ${limits.walkEntries} entries; narrow the path]`)
    return matches.join("\n")
  })

/**
 * The handlers of the built-in tools, on the {@link Sandbox.Sandbox}. They
 * serve {@link toolkit} and every toolkit from {@link make}.
 *
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
