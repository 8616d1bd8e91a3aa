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
 * `CheckpointCorrupt`, not a hang. It writes through no link either: the
 * journal it appends to must be a regular file, files it writes anew (the
 * temp head, a new journal) are created exclusively after whatever had
 * their name is unlinked, and a session directory that is a link is
 * refused. (Node has no `openat`: a process that can write the store's
 * directory while the store runs could still swap a session directory for
 * a link between the check and an open. Keep the store out of reach of
 * what it must not trust, such as an agent's workspace.) The library never
 * overwrites or deletes a checkpoint it cannot read; only `remove`, called
 * by the application, deletes one. One process writes a session at a time.
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
import { Context, Effect, Exit, Layer, Schema, Semaphore, Struct } from "effect"
import * as NodeFs from "node:fs"
import * as NodePath from "node:path"
import { crc32 } from "node:zlib"
import * as AgentConfig from "../AgentConfig.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as RunState from "../RunState.ts"

/**
 * The current version of the checkpoint format (the head file's layout).
 * Version 1 checkpoints (without `finished` and checksums) still load.
 *
 * @since 0.1.0
 */
export const version = 2 as const

// -----------------------------------------------------------------------------
// Errors
// -----------------------------------------------------------------------------

/**
 * No checkpoint is saved under this session id.
 *
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
    const at = this.line === undefined ? "" : ` line ${this.line}${this.offset === undefined ? "" : ` (byte ${this.offset})`}`
    return `the checkpoint of session ${this.sessionId} is corrupt: ${this.file}${at}: ${this.problem}`
  }
}

/**
 * A checkpoint was written in another version of the format (`checkpoint`)
 * or of the run state it holds (`RunState`).
 *
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
    return `the checkpoint of session ${this.sessionId} has ${this.format} version ${this.found}; this library reads version ${this.expected}`
  }
}

/**
 * A new session was started under an id that already has a checkpoint.
 *
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
 * Why a checkpoint could not be loaded.
 *
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
 * @since 0.1.0
 */
export const CheckpointError = Schema.Union([
  CheckpointMissing,
  CheckpointCorrupt,
  CheckpointVersionMismatch,
  CheckpointExists,
  InvalidSessionId,
  CheckpointIoError
])
/** @since 0.1.0 */
export type CheckpointError = typeof CheckpointError.Type

// -----------------------------------------------------------------------------
// The service
// -----------------------------------------------------------------------------

/**
 * How a session's last run ended, when the loop ended it (not an
 * interruption or a failure): the session is finished.
 *
 * @since 0.1.0
 */
export const Finished = Schema.Struct({
  outcome: Outcome.Outcome,
  /** Where that run's own messages start in the transcript (its `RunResult.messages`). */
  firstMessage: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
})
/** @since 0.1.0 */
export type Finished = typeof Finished.Type

/**
 * What a store saves: a run's state, optionally the config it runs with,
 * and, once the session has finished, how it ended.
 *
 * @since 0.1.0
 */
export interface Checkpoint {
  readonly state: RunState.RunState
  readonly config?: AgentConfig.AgentConfig | undefined
  readonly finished?: Finished | undefined
}

/**
 * What a save wrote.
 *
 * @since 0.1.0
 */
export interface Saved {
  /** Bytes written: the journal lines added and the head. */
  readonly bytes: number
}

/**
 * The checkpoint store service shape.
 *
 * @since 0.1.0
 */
export interface Service {
  /**
   * Saves the first checkpoint of a new session; fails with `CheckpointExists`
   * when the id is taken, and with `CheckpointCorrupt` when something that is
   * not the store's is where the session's files go.
   */
  readonly create: (
    sessionId: string,
    checkpoint: Checkpoint
  ) => Effect.Effect<Saved, InvalidSessionId | CheckpointExists | CheckpointCorrupt | CheckpointIoError>
  /**
   * Saves a later checkpoint of a session. Messages already saved are not
   * written again: when the transcript extends the saved one, only the new
   * messages are appended (otherwise the journal is rewritten).
   */
  readonly save: (sessionId: string, checkpoint: Checkpoint) => Effect.Effect<Saved, LoadError>
  /** Loads the last checkpoint of a session. */
  readonly load: (sessionId: string) => Effect.Effect<Checkpoint, LoadError>
  /** Deletes a session's checkpoint (whatever its state); the library itself never calls it. */
  readonly remove: (sessionId: string) => Effect.Effect<void, InvalidSessionId | CheckpointIoError>
  /** Where a session's head is, for errors about what it holds (such as a plugin's state). */
  readonly headFile: (sessionId: string) => string
}

/**
 * The checkpoint store service.
 *
 * @since 0.1.0
 */
export class CheckpointStore extends Context.Service<CheckpointStore, Service>()("effect-agent/CheckpointStore") {}

// -----------------------------------------------------------------------------
// Encoding
// -----------------------------------------------------------------------------

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

const HeadState = Schema.Struct(Struct.omit(RunState.RunState.fields, ["messages"]))

/** A CRC-32, as 8 lowercase hex digits. */
const Checksum = Schema.String.check(Schema.isPattern(/^[0-9a-f]{8}$/))

const Head = Schema.Struct({
  version: Schema.Literal(version),
  sessionId: Schema.String,
  /** The journal's valid part: its lines, its bytes and their CRC-32. */
  journal: Schema.Struct({ generation: Count, entries: Count, bytes: Count, checksum: Checksum }),
  state: HeadState,
  config: Schema.optionalKey(AgentConfig.AgentConfig),
  finished: Schema.optionalKey(Finished)
})
type Head = typeof Head.Type

/** The head of version 1: no `finished`, and no checksums. */
const HeadV1 = Schema.Struct({
  version: Schema.Literal(1),
  sessionId: Schema.String,
  journal: Schema.Struct({ generation: Count, entries: Count, bytes: Count }),
  state: HeadState,
  config: Schema.optionalKey(AgentConfig.AgentConfig)
})
type HeadV1 = typeof HeadV1.Type

// What the store wrote is read back exactly: an unknown key (a bit flip in a key name turns "config" into
// "konfig") is an error, not a key to ignore while the real one falls back to its default.
const strict = { onExcessProperty: "error" } as const
const HeadText = Schema.fromJsonString(Schema.toCodecJson(Head))
const MessageText = Schema.fromJsonString(Schema.toCodecJson(Message.Message))
const encodeHead = Schema.encodeExit(HeadText)
const decodeHead = Schema.decodeUnknownExit(HeadText, strict)
const decodeHeadV1 = Schema.decodeUnknownExit(Schema.fromJsonString(Schema.toCodecJson(HeadV1)), strict)
const encodeMessage = Schema.encodeExit(MessageText)
const decodeMessage = Schema.decodeUnknownExit(MessageText, strict)
const parseJson = Schema.decodeUnknownExit(Schema.fromJsonString(Schema.Unknown))

/** A CRC-32 as the head records it. */
const hex = (crc: number): string => crc.toString(16).padStart(8, "0")

/**
 * The head's own checksum is its last key: the file is the head's JSON with
 * `,"checksum":"<CRC-32 of that JSON>"` put before the closing brace, so it
 * stays one JSON object and the checksum covers every byte before it.
 */
const SEAL_START = ',"checksum":"'
const SEAL_LENGTH = SEAL_START.length + 8 + 2

const seal = (json: string): string => `${json.slice(0, -1)}${SEAL_START}${hex(crc32(json))}"}`

/** The JSON a sealed head was made from, and whether its checksum matches; `undefined` when it has no seal. */
const unseal = (text: string): { readonly json: string; readonly intact: boolean } | undefined => {
  if (text.length < SEAL_LENGTH + 2) return undefined
  const tail = text.slice(-SEAL_LENGTH)
  const digits = tail.slice(SEAL_START.length, -2)
  if (!tail.startsWith(SEAL_START) || !tail.endsWith("\"}") || !/^[0-9a-f]{8}$/.test(digits)) return undefined
  const json = `${text.slice(0, -SEAL_LENGTH)}}`
  return { json, intact: hex(crc32(json)) === digits }
}

const HEAD = "head.json"
const journalName = (generation: number) => `journal-${generation}.ndjson`

const textEncoder = new TextEncoder()
const textDecoder = new TextDecoder("utf-8", { fatal: true })

const ID = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/

const checkId = (sessionId: string): Effect.Effect<void, InvalidSessionId> =>
  ID.test(sessionId)
    ? Effect.void
    : Effect.fail(
      new InvalidSessionId({
        sessionId,
        rule: "1 to 128 characters among letters, digits, '.', '_' and '-', not starting with '.'"
      })
    )

/** Schema failures can be long (they quote the input): the first lines say what is wrong. */
const describe = (error: Schema.SchemaError): string => {
  const text = error.message
  return text.length <= 500 ? text : `${text.slice(0, 500)}…`
}

// -----------------------------------------------------------------------------
// Storage: the files of a session
// -----------------------------------------------------------------------------

/**
 * The few file operations a store needs, so that the file system and the
 * in-memory store share the format and its checks.
 */
interface Disk {
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
interface FileBytes {
  readonly bytes: Uint8Array
  /** The file's size when it was opened. */
  readonly size: number
}

/**
 * The largest head a store reads. A head holds no transcript, only queues,
 * counters and plugin state: a few KB.
 */
const MAX_HEAD_BYTES = 64 * 1024 * 1024

/** The largest journal a store reads (its valid part, as the head records it). */
const MAX_JOURNAL_BYTES = 1024 * 1024 * 1024

const mib = (bytes: number) => `${bytes / 1024 / 1024} MiB`

/** What a store knows of a session it has read or written: where its journal ends. */
interface Known {
  readonly generation: number
  readonly entries: number
  readonly bytes: number
  /** The CRC-32 of the journal's valid bytes, extended by each append. */
  readonly checksum: number
  /** The last journaled message, and its line, to tell whether a transcript extends the saved one. */
  readonly last: Message.Message | undefined
  readonly lastLine: string | undefined
}

interface Decoded {
  readonly checkpoint: Checkpoint
  readonly known: Known
}

const corrupt = (
  sessionId: string,
  file: string,
  problem: string,
  at?: { readonly line: number; readonly offset: number }
): CheckpointCorrupt =>
  new CheckpointCorrupt(at === undefined ? { sessionId, file, problem } : { sessionId, file, problem, ...at })

const utf8 = (bytes: Uint8Array): string | undefined => {
  try {
    return textDecoder.decode(bytes)
  } catch {
    return undefined
  }
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const failure = (exit: Exit.Failure<unknown, Schema.SchemaError>, otherwise: string): string => {
  const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
  return error === undefined ? otherwise : describe(error.error)
}

/** A head as it was read: the current layout, or version 1's (whose journal has no checksum). */
type ReadHead = Head | HeadV1

/**
 * Reads the head: its checksum first, then its version (so an old or a newer
 * format says so), then the whole Schema.
 */
const readHead = (
  sessionId: string,
  file: string,
  bytes: Uint8Array
): Effect.Effect<ReadHead, CheckpointCorrupt | CheckpointVersionMismatch> => {
  const fail = (problem: string) => Effect.fail(corrupt(sessionId, file, problem))
  if (bytes.length === 0) return fail("the file is empty")
  const text = utf8(bytes)
  if (text === undefined) return fail("the file is not UTF-8 text")
  const sealed = unseal(text)
  const damaged = sealed !== undefined && !sealed.intact
  const json = parseJson(sealed?.intact === true ? sealed.json : text)
  if (damaged) return fail("the file does not match its checksum")
  if (Exit.isFailure(json)) return fail("the file is not JSON")
  const value = json.value
  if (!isRecord(value) || typeof value.version !== "number") return fail("the file has no version number")
  if (value.version !== version && value.version !== 1) {
    return Effect.fail(
      new CheckpointVersionMismatch({ sessionId, file, format: "checkpoint", found: value.version, expected: version })
    )
  }
  // Version 1 had no checksums; from version 2 on, a head without one is damaged.
  if ((value.version === version) !== (sealed !== undefined)) {
    return fail(sealed === undefined ? "the file has no checksum" : "a version 1 head has a checksum")
  }
  const state = value.state
  if (isRecord(state) && typeof state.version === "number" && state.version !== RunState.version) {
    return Effect.fail(
      new CheckpointVersionMismatch({ sessionId, file, format: "RunState", found: state.version, expected: RunState.version })
    )
  }
  const head: Exit.Exit<ReadHead, Schema.SchemaError> = sealed === undefined
    ? decodeHeadV1(text)
    : decodeHead(sealed.json)
  if (Exit.isFailure(head)) return fail(failure(head, "the head does not decode"))
  if (head.value.sessionId !== sessionId) {
    return fail(`the head belongs to session ${JSON.stringify(head.value.sessionId)}`)
  }
  return Effect.succeed(head.value)
}

interface Journal {
  readonly messages: Array<Message.Message>
  /** Where each line starts, in bytes. */
  readonly offsets: Array<number>
  readonly lastLine: string | undefined
  readonly checksum: number
}

/**
 * Reads the journal's valid part, line by line: exactly the entries and bytes
 * the head records, and their checksum (a version 1 head records none).
 */
const readJournal = (
  sessionId: string,
  file: string,
  read: FileBytes | undefined,
  journal: ReadHead["journal"]
): Effect.Effect<Journal, CheckpointCorrupt> =>
  Effect.suspend(() => {
    const fail = (problem: string, at?: { readonly line: number; readonly offset: number }) =>
      Effect.fail(corrupt(sessionId, file, problem, at))
    const length = journal.bytes
    if (read === undefined) {
      return length === 0 && journal.entries === 0
        ? Effect.succeed({ messages: [], offsets: [], lastLine: undefined, checksum: crc32(new Uint8Array(0)) })
        : fail("the journal is missing")
    }
    const bytes = read.bytes
    if (bytes.length < length) return fail(`the journal has ${bytes.length} bytes; the head records ${length}`)
    const messages: Array<Message.Message> = []
    const offsets: Array<number> = []
    let lastLine: string | undefined
    let start = 0
    while (start < length) {
      const line = messages.length + 1
      const at = { line, offset: start }
      const end = bytes.indexOf(10, start)
      if (end === -1 || end >= length) return fail("the line does not end within the length the head records", at)
      if (line > journal.entries) {
        return fail(`the journal has more lines than the ${journal.entries} the head records`, at)
      }
      const text = utf8(bytes.subarray(start, end))
      if (text === undefined) return fail("the line is not UTF-8 text", at)
      const decoded = decodeMessage(text)
      if (Exit.isFailure(decoded)) return fail(failure(decoded, "the message does not decode"), at)
      messages.push(decoded.value)
      offsets.push(start)
      lastLine = text
      start = end + 1
    }
    if (messages.length !== journal.entries) {
      return fail(`the journal has ${messages.length} lines; the head records ${journal.entries}`)
    }
    const checksum = crc32(bytes.subarray(0, length))
    if ("checksum" in journal && hex(checksum) !== journal.checksum) {
      return fail(`the journal's first ${length} bytes do not match the checksum the head records`)
    }
    return Effect.succeed({ messages, offsets, lastLine, checksum })
  })

/**
 * Checks what the Schemas cannot: a transcript and batch a run can go on from
 * (`RunState.validate`), and where a finished run's messages start.
 */
const checkState = (
  sessionId: string,
  files: { readonly head: string; readonly journal: string },
  journal: Journal,
  state: RunState.RunState,
  finished: Finished | undefined
): Effect.Effect<void, CheckpointCorrupt> => {
  const invalid = RunState.validate(state)
  if (invalid !== undefined) {
    const index = invalid.message
    return Effect.fail(
      index === undefined
        ? corrupt(sessionId, files.head, invalid.problem)
        : corrupt(sessionId, files.journal, invalid.problem, { line: index + 1, offset: journal.offsets[index]! })
    )
  }
  if (finished !== undefined && finished.firstMessage > state.messages.length) {
    return Effect.fail(corrupt(
      sessionId,
      files.head,
      `finished.firstMessage is ${finished.firstMessage}; the transcript has ${state.messages.length} messages`
    ))
  }
  return Effect.void
}

const decode = (disk: Disk, sessionId: string): Effect.Effect<Decoded, LoadError> =>
  Effect.gen(function*() {
    yield* checkId(sessionId)
    const headFile = disk.where(sessionId, HEAD)
    const headBytes = yield* disk.read(sessionId, HEAD, MAX_HEAD_BYTES)
    if (headBytes === undefined) return yield* new CheckpointMissing({ sessionId })
    if (headBytes.size > MAX_HEAD_BYTES) {
      const problem = `the file has ${headBytes.size} bytes; a head has at most ${mib(MAX_HEAD_BYTES)}`
      return yield* corrupt(sessionId, headFile, problem)
    }
    const head = yield* readHead(sessionId, headFile, headBytes.bytes)
    const name = journalName(head.journal.generation)
    const journalFile = disk.where(sessionId, name)
    if (head.journal.bytes > MAX_JOURNAL_BYTES) {
      return yield* corrupt(
        sessionId,
        headFile,
        `the head records a journal of ${head.journal.bytes} bytes; a store reads at most ${mib(MAX_JOURNAL_BYTES)}`
      )
    }
    const journalBytes = yield* disk.read(sessionId, name, head.journal.bytes)
    const journal = yield* readJournal(sessionId, journalFile, journalBytes, head.journal)
    const messages = journal.messages
    const state: RunState.RunState = { ...head.state, messages }
    const finished = "finished" in head ? head.finished : undefined
    yield* checkState(sessionId, { head: headFile, journal: journalFile }, journal, state, finished)
    const checkpoint: Checkpoint = head.config === undefined ? { state } : { state, config: head.config }
    const { entries, bytes, generation } = head.journal
    return {
      checkpoint: finished === undefined ? checkpoint : { ...checkpoint, finished },
      known: {
        generation,
        entries,
        bytes,
        checksum: journal.checksum,
        last: messages.at(-1),
        lastLine: journal.lastLine
      }
    }
  })

const encodeFailure = (sessionId: string, path: string) => (error: Schema.SchemaError) =>
  new CheckpointIoError({ sessionId, operation: "encode", path, reason: describe(error) })

const encodeLines = (
  disk: Disk,
  sessionId: string,
  name: string,
  messages: ReadonlyArray<Message.Message>
): Effect.Effect<{ readonly data: Uint8Array; readonly lastLine: string | undefined }, CheckpointIoError> =>
  Effect.suspend(() => {
    let text = ""
    let lastLine: string | undefined
    for (const message of messages) {
      const line = encodeMessage(message)
      if (Exit.isFailure(line)) {
        const error = line.cause.reasons.find((reason) => reason._tag === "Fail")
        return Effect.fail(
          new CheckpointIoError({
            sessionId,
            operation: "encode",
            path: disk.where(sessionId, name),
            reason: error === undefined ? "a message does not encode as JSON" : describe(error.error)
          })
        )
      }
      text += line.value + "\n"
      lastLine = line.value
    }
    return Effect.succeed({ data: textEncoder.encode(text), lastLine })
  })

const headBytes = (disk: Disk, sessionId: string, head: Head): Effect.Effect<Uint8Array, CheckpointIoError> =>
  Effect.map(
    Effect.mapError(encodeHead(head), encodeFailure(sessionId, disk.where(sessionId, HEAD))),
    (json) => textEncoder.encode(seal(json))
  )

/** Where a journal ends: the lines and bytes to record, and their checksum. */
interface JournalEnd {
  readonly generation: number
  readonly entries: number
  readonly bytes: number
  readonly checksum: number
}

const makeHead = (sessionId: string, end: JournalEnd, checkpoint: Checkpoint): Head => {
  const journal = { generation: end.generation, entries: end.entries, bytes: end.bytes, checksum: hex(end.checksum) }
  let head: Head = { version, sessionId, journal, state: Struct.omit(checkpoint.state, ["messages"]) }
  if (checkpoint.config !== undefined) head = { ...head, config: checkpoint.config }
  return checkpoint.finished === undefined ? head : { ...head, finished: checkpoint.finished }
}

/** Whether a transcript extends the one saved: as long, and the same message where the saved one ends. */
const extendsSaved = (known: Known, messages: ReadonlyArray<Message.Message>): boolean => {
  if (messages.length < known.entries) return false
  if (known.entries === 0) return true
  const boundary = messages[known.entries - 1]!
  if (boundary === known.last) return true
  const line = encodeMessage(boundary)
  return Exit.isSuccess(line) && line.value === known.lastLine
}

/** A store over a `Disk`: the checkpoint format, its checks, and incremental saves. */
const make = (disk: Disk): Service => {
  const lock = Semaphore.makeUnsafe(1)
  // A write runs to its end once started (milliseconds): an interrupted save would leave
  // a stray write in flight that could land after the next save.
  const writing = <A, E>(effect: Effect.Effect<A, E>) => Effect.uninterruptible(lock.withPermit(effect))
  const sessions = new Map<string, Known>()

  /** Writes a whole transcript to a new journal generation, then the head pointing to it. */
  const writeFresh = (sessionId: string, generation: number, checkpoint: Checkpoint) =>
    Effect.gen(function*() {
      const name = journalName(generation)
      const { data, lastLine } = yield* encodeLines(disk, sessionId, name, checkpoint.state.messages)
      const entries = checkpoint.state.messages.length
      const journal = { generation, entries, bytes: data.length, checksum: crc32(data) }
      const head = yield* headBytes(disk, sessionId, makeHead(sessionId, journal, checkpoint))
      yield* disk.writeAt(sessionId, name, 0, data)
      yield* disk.replace(sessionId, HEAD, head)
      sessions.set(sessionId, { ...journal, last: checkpoint.state.messages.at(-1), lastLine })
      return { bytes: data.length + head.length }
    })

  const create: Service["create"] = (sessionId, checkpoint) =>
    writing(Effect.gen(function*() {
      yield* checkId(sessionId)
      if ((yield* disk.read(sessionId, HEAD, 0)) !== undefined) return yield* new CheckpointExists({ sessionId })
      yield* disk.prepare(sessionId)
      return yield* writeFresh(sessionId, 0, checkpoint)
    }))

  const save: Service["save"] = (sessionId, checkpoint) =>
    writing(Effect.gen(function*() {
      const known = sessions.get(sessionId) ?? (yield* Effect.map(decode(disk, sessionId), (decoded) => decoded.known))
      const messages = checkpoint.state.messages
      if (!extendsSaved(known, messages)) {
        const saved = yield* writeFresh(sessionId, known.generation + 1, checkpoint)
        // The old journal is garbage now; failing to delete it does not undo the save.
        yield* Effect.ignore(disk.removeFile(sessionId, journalName(known.generation)))
        return saved
      }
      const name = journalName(known.generation)
      const added = messages.length === known.entries
        ? { data: new Uint8Array(0), lastLine: known.lastLine }
        : yield* encodeLines(disk, sessionId, name, messages.slice(known.entries))
      const journal = {
        generation: known.generation,
        entries: messages.length,
        bytes: known.bytes + added.data.length,
        checksum: crc32(added.data, known.checksum)
      }
      const head = yield* headBytes(disk, sessionId, makeHead(sessionId, journal, checkpoint))
      if (added.data.length > 0) yield* disk.writeAt(sessionId, name, known.bytes, added.data)
      yield* disk.replace(sessionId, HEAD, head)
      sessions.set(sessionId, { ...journal, last: messages.at(-1), lastLine: added.lastLine })
      return { bytes: added.data.length + head.length }
    }))

  const load: Service["load"] = (sessionId) =>
    lock.withPermit(Effect.map(decode(disk, sessionId), ({ checkpoint, known }) => {
      sessions.set(sessionId, known)
      return checkpoint
    }))

  const remove: Service["remove"] = (sessionId) =>
    writing(Effect.andThen(
      checkId(sessionId),
      Effect.suspend(() => {
        sessions.delete(sessionId)
        return disk.removeSession(sessionId)
      })
    ))

  return CheckpointStore.of({ create, save, load, remove, headFile: (sessionId) => disk.where(sessionId, HEAD) })
}

// -----------------------------------------------------------------------------
// File system
// -----------------------------------------------------------------------------

// The store opens its files with node:fs directly. effect's FileSystem has `noFollow` and "wx"
// (O_EXCL), but not O_NONBLOCK (without it, opening a FIFO blocks a libuv thread until a writer
// comes) nor O_DIRECTORY. So: O_NOFOLLOW refuses a link at every file the store opens; O_NONBLOCK
// keeps a FIFO from hanging an open; fstat on the open file refuses anything but a regular file,
// and its size bounds a read (a device such as /dev/zero never ends); files written anew are
// created with O_CREAT | O_EXCL, after unlinking whatever had their name (unlink removes a link,
// not what it points to). Errors stay typed: CheckpointCorrupt for what is in the way, else
// CheckpointIoError.
const {
  O_CREAT,
  O_DIRECTORY = 0,
  O_EXCL,
  O_NOFOLLOW = 0,
  O_NONBLOCK = 0,
  O_RDONLY,
  O_WRONLY
} = NodeFs.constants

const kindOf = (stat: NodeFs.Stats): string =>
  stat.isDirectory()
    ? "a directory"
    : stat.isSymbolicLink()
    ? "a symbolic link"
    : stat.isFIFO()
    ? "a FIFO"
    : stat.isSocket()
    ? "a socket"
    : stat.isCharacterDevice() || stat.isBlockDevice()
    ? "a device"
    : "not a regular file"

const errnoCode = (error: unknown): string | undefined =>
  error instanceof Error && "code" in error && typeof error.code === "string" ? error.code : undefined

/** Something other than a regular file (or, for the session, a directory) where the store keeps one. */
class InTheWay {
  readonly at: string
  readonly problem: string
  constructor(at: string, problem: string) {
    this.at = at
    this.problem = problem
  }
}

const notRegular = (at: string, what: string) =>
  new InTheWay(at, `the file is ${what}, not a regular file: a store uses no other`)

/** Runs a node:fs operation: what is in the way is `CheckpointCorrupt`, any other error `CheckpointIoError`. */
const nodeFs = <A>(
  sessionId: string,
  operation: string,
  at: string,
  run: () => Promise<A>
): Effect.Effect<A, CheckpointCorrupt | CheckpointIoError> =>
  Effect.tryPromise({
    try: run,
    catch: (error) =>
      error instanceof InTheWay
        ? corrupt(sessionId, error.at, error.problem)
        : new CheckpointIoError({
          sessionId,
          operation,
          path: at,
          reason: error instanceof Error ? error.message : String(error)
        })
  })

interface Opened {
  readonly handle: NodeFs.promises.FileHandle
  /** The file's size when it was opened. */
  readonly size: number
}

/** Opens a file that must be a regular file, not following a link; `undefined` when it does not exist. */
const openRegular = async (at: string, flags: number): Promise<Opened | undefined> => {
  let handle: NodeFs.promises.FileHandle
  try {
    handle = await NodeFs.promises.open(at, flags | O_NOFOLLOW | O_NONBLOCK)
  } catch (error) {
    const code = errnoCode(error)
    if (code === "ENOENT") return undefined
    if (code === "ELOOP") throw notRegular(at, "a symbolic link")
    if (code === "EISDIR") throw notRegular(at, "a directory")
    throw error
  }
  const stat = await handle.stat().catch(async (error: unknown) => {
    await handle.close()
    throw error
  })
  if (!stat.isFile()) {
    await handle.close()
    throw notRegular(at, kindOf(stat))
  }
  return { handle, size: stat.size }
}

const using = async <A>(handle: NodeFs.promises.FileHandle, use: () => Promise<A>): Promise<A> => {
  try {
    return await use()
  } finally {
    await handle.close()
  }
}

/** The first `limit` bytes of a regular file, and its size; `undefined` when it is missing. */
const readRegular = async (at: string, limit: number): Promise<FileBytes | undefined> => {
  const opened = await openRegular(at, O_RDONLY)
  if (opened === undefined) return undefined
  const { handle, size } = opened
  return using(handle, async () => {
    const bytes = new Uint8Array(Math.min(size, limit))
    let read = 0
    while (read < bytes.length) {
      const { bytesRead } = await handle.read(bytes, read, bytes.length - read, read)
      if (bytesRead === 0) break
      read += bytesRead
    }
    return { bytes: bytes.subarray(0, read), size }
  })
}

const writeAll = async (handle: NodeFs.promises.FileHandle, data: Uint8Array, offset: number): Promise<void> => {
  let written = 0
  while (written < data.length) {
    const { bytesWritten } = await handle.write(data, written, data.length - written, offset + written)
    written += bytesWritten
  }
}

/** Unlinks whatever has this name (a link goes, not what it points to); a directory is in the way. */
const clear = async (at: string): Promise<void> => {
  try {
    await NodeFs.promises.unlink(at)
  } catch (error) {
    const code = errnoCode(error)
    if (code === "ENOENT") return
    // unlink of a directory is EISDIR on Linux, EPERM elsewhere (EPERM may also be a real permission error)
    if (code === "EISDIR" || (code === "EPERM" && (await NodeFs.promises.lstat(at)).isDirectory())) {
      throw notRegular(at, "a directory")
    }
    throw error
  }
}

/** Creates a file that did not exist (after clearing its name), writes it whole and makes it durable. */
const writeNew = async (at: string, data: Uint8Array): Promise<void> => {
  await clear(at)
  let handle: NodeFs.promises.FileHandle
  try {
    // O_EXCL with O_CREAT fails on any name that exists, a link (even dangling) included
    handle = await NodeFs.promises.open(at, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0o666)
  } catch (error) {
    if (errnoCode(error) === "EEXIST") throw new InTheWay(at, "something took the file's name while it was written")
    throw error
  }
  await using(handle, async () => {
    await writeAll(handle, data, 0)
    await handle.sync()
  })
}

/** Opens a directory to fsync it, so that a rename or a new file in it survives a power loss. */
const syncDirectory = async (at: string): Promise<void> => {
  const handle = await NodeFs.promises.open(at, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK)
  await using(handle, () => handle.sync())
}

/**
 * Checks that a session's directory is one (when it exists): a link there
 * could lead the store's reads and writes out of the store.
 */
const checkDirectory = async (at: string): Promise<boolean> => {
  let stat: NodeFs.Stats
  try {
    stat = await NodeFs.promises.lstat(at)
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return false
    throw error
  }
  if (stat.isDirectory()) return true
  throw new InTheWay(at, `the session directory is ${kindOf(stat)}, not a directory: a store never follows one`)
}

const fileSystemDisk = (dir: string): Disk => {
  const root = NodePath.resolve(dir)
  const sessionDir = (sessionId: string) => NodePath.join(root, sessionId)
  const where = (sessionId: string, name: string) => NodePath.join(root, sessionId, name)
  return {
    where,
    read: (sessionId, name, limit) => {
      const at = where(sessionId, name)
      return nodeFs(
        sessionId,
        "read",
        at,
        async () => (await checkDirectory(sessionDir(sessionId))) ? readRegular(at, limit) : undefined
      )
    },
    prepare: (sessionId) => {
      const at = sessionDir(sessionId)
      return nodeFs(sessionId, "create", at, async () => {
        await NodeFs.promises.mkdir(root, { recursive: true })
        await NodeFs.promises.mkdir(at).catch((error: unknown) => {
          if (errnoCode(error) !== "EEXIST") throw error
        })
        await checkDirectory(at)
        await syncDirectory(root)
      })
    },
    writeAt: (sessionId, name, offset, data) => {
      const at = where(sessionId, name)
      return nodeFs(sessionId, "write", at, async () => {
        await checkDirectory(sessionDir(sessionId))
        if (offset === 0) {
          await writeNew(at, data)
          return syncDirectory(sessionDir(sessionId))
        }
        const opened = await openRegular(at, O_WRONLY)
        if (opened === undefined) throw new InTheWay(at, "the journal is missing")
        const { handle, size } = opened
        await using(handle, async () => {
          if (size < offset) throw new InTheWay(at, `the journal has ${size} bytes; the head records ${offset}`)
          await writeAll(handle, data, offset)
          await handle.truncate(offset + data.length)
          await handle.sync()
        })
      })
    },
    replace: (sessionId, name, data) => {
      const at = where(sessionId, name)
      return nodeFs(sessionId, "write", at, async () => {
        await checkDirectory(sessionDir(sessionId))
        const temp = `${at}.tmp`
        await writeNew(temp, data)
        // rename replaces whatever has the name, a link included, and follows none
        await NodeFs.promises.rename(temp, at).catch((error: unknown) => {
          const code = errnoCode(error)
          if (code === "EISDIR" || code === "ENOTEMPTY" || code === "EEXIST") throw notRegular(at, "a directory")
          throw error
        })
        await syncDirectory(sessionDir(sessionId))
      })
    },
    removeFile: (sessionId, name) => {
      const at = where(sessionId, name)
      return nodeFs(sessionId, "remove", at, async () => {
        if (await checkDirectory(sessionDir(sessionId))) await clear(at)
      })
    },
    // `rm` removes a link in the session's place, not what it points to
    removeSession: (sessionId) => {
      const at = sessionDir(sessionId)
      return Effect.tryPromise({
        try: () => NodeFs.promises.rm(at, { recursive: true, force: true }),
        catch: (error) =>
          new CheckpointIoError({
            sessionId,
            operation: "remove",
            path: at,
            reason: error instanceof Error ? error.message : String(error)
          })
      })
    }
  }
}

/**
 * A store keeping each session in `dir/<session id>/` (see the module
 * documentation for the layout and its guarantees). It uses `node:fs`
 * itself (see the comment above `fileSystemDisk`), not effect's
 * `FileSystem`.
 *
 * @since 0.1.0
 */
export const fileSystem = (dir: string): Effect.Effect<Service> => Effect.sync(() => make(fileSystemDisk(dir)))

/**
 * A layer providing {@link fileSystem}.
 *
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
 * @since 0.1.0
 */
export const memory = (): Service => {
  const files = new Map<string, Map<string, Uint8Array>>()
  const session = (sessionId: string) => {
    let found = files.get(sessionId)
    if (found === undefined) files.set(sessionId, found = new Map())
    return found
  }
  return make({
    where: (sessionId, name) => `memory:${sessionId}/${name}`,
    read: (sessionId, name, limit) =>
      Effect.sync(() => {
        const bytes = files.get(sessionId)?.get(name)
        return bytes === undefined ? undefined : { bytes: bytes.subarray(0, limit), size: bytes.length }
      }),
    prepare: (sessionId) => Effect.sync(() => void session(sessionId)),
    writeAt: (sessionId, name, offset, data) =>
      Effect.sync(() => {
        const before = session(sessionId).get(name) ?? new Uint8Array(0)
        const after = new Uint8Array(offset + data.length)
        after.set(before.subarray(0, offset))
        after.set(data, offset)
        session(sessionId).set(name, after)
      }),
    replace: (sessionId, name, data) => Effect.sync(() => void session(sessionId).set(name, data)),
    removeFile: (sessionId, name) => Effect.sync(() => void files.get(sessionId)?.delete(name)),
    removeSession: (sessionId) => Effect.sync(() => void files.delete(sessionId))
  })
}

/**
 * A layer providing {@link memory}.
 *
 * @since 0.1.0
 */
export const layerMemory: Layer.Layer<CheckpointStore> = Layer.sync(CheckpointStore, memory)
