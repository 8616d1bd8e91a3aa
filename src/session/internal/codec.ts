/**
 * The checkpoint format: the head (a JSON object sealed with its own CRC-32
 * as its last key) and the journal (one message per line, its valid bytes
 * covered by a CRC-32 the head records), both decoded exactly (an unknown
 * key is an error), and the checks that a loaded checkpoint can be run on.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import * as Struct from "effect/Struct"
import { crc32 } from "node:zlib"
import * as AgentConfig from "../../AgentConfig.ts"
import * as Message from "../../Message.ts"
import * as RunState from "../../RunState.ts"
import { CheckpointCorrupt, CheckpointIoError, CheckpointVersionMismatch, corrupt } from "./errors.ts"
import { type Checkpoint, Finished } from "./model.ts"

/**
 * The current version of the checkpoint format (the head file's layout).
 * Version 1 checkpoints (without `finished` and checksums) still load.
 *
 * @category constants
 * @since 0.1.0
 */
export const version = 2 as const

/** The name of a session's head file. */
export const HEAD = "head.json"

/** The name of a journal generation's file. */
export const journalName = (generation: number) => `journal-${generation}.ndjson`

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
  finished: Schema.optionalKey(Finished),
  /** The agent a handoff passed the session on to. */
  agent: Schema.optionalKey(Schema.String)
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
/** A message as its journal line (without the newline). */
export const encodeMessage = Schema.encodeExit(MessageText)
const decodeMessage = Schema.decodeUnknownExit(MessageText, strict)
const parseJson = Schema.decodeUnknownExit(Schema.fromJsonString(Schema.Unknown))

/** The CRC-32 of `data`, extending `previous` (the CRC-32 of the bytes before `data`). */
export const checksum = (data: Uint8Array, previous?: number): number => crc32(data, previous)

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

const textEncoder = new TextEncoder()
const textDecoder = new TextDecoder("utf-8", { fatal: true })

/** Schema failures can be long (they quote the input): the first lines say what is wrong. */
const describe = (error: Schema.SchemaError): string => {
  const text = error.message
  return text.length <= 500 ? text : `${text.slice(0, 500)}…`
}

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
export type ReadHead = Head | HeadV1

/**
 * Reads the head: its checksum first, then its version (so an old or a newer
 * format says so), then the whole Schema.
 */
export const readHead = (
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
      new CheckpointVersionMismatch({
        sessionId,
        file,
        format: "RunState",
        found: state.version,
        expected: RunState.version
      })
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

export interface Journal {
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
export const readJournal = (
  sessionId: string,
  file: string,
  bytes: Uint8Array | undefined,
  journal: ReadHead["journal"]
): Effect.Effect<Journal, CheckpointCorrupt> =>
  Effect.suspend(() => {
    const fail = (problem: string, at?: { readonly line: number; readonly offset: number }) =>
      Effect.fail(corrupt(sessionId, file, problem, at))
    const length = journal.bytes
    if (bytes === undefined) {
      return length === 0 && journal.entries === 0
        ? Effect.succeed({ messages: [], offsets: [], lastLine: undefined, checksum: crc32(new Uint8Array(0)) })
        : fail("the journal is missing")
    }
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
    const crc = crc32(bytes.subarray(0, length))
    if ("checksum" in journal && hex(crc) !== journal.checksum) {
      return fail(`the journal's first ${length} bytes do not match the checksum the head records`)
    }
    return Effect.succeed({ messages, offsets, lastLine, checksum: crc })
  })

/**
 * Checks what the Schemas cannot: a transcript and batch a run can go on from
 * (`RunState.validate`), and where a finished run's messages start.
 */
export const checkState = (
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

const encodeFailure = (sessionId: string, path: string) => (error: Schema.SchemaError) =>
  new CheckpointIoError({ sessionId, operation: "encode", path, reason: describe(error) })

export const encodeLines = (
  sessionId: string,
  file: string,
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
            path: file,
            reason: error === undefined ? "a message does not encode as JSON" : describe(error.error)
          })
        )
      }
      text += line.value + "\n"
      lastLine = line.value
    }
    return Effect.succeed({ data: textEncoder.encode(text), lastLine })
  })

/** Where a journal ends: the lines and bytes to record, and their checksum. */
export interface JournalEnd {
  readonly generation: number
  readonly entries: number
  readonly bytes: number
  readonly checksum: number
}

const makeHead = (sessionId: string, end: JournalEnd, checkpoint: Checkpoint): Head => {
  const journal = { generation: end.generation, entries: end.entries, bytes: end.bytes, checksum: hex(end.checksum) }
  let head: Head = { version, sessionId, journal, state: Struct.omit(checkpoint.state, ["messages"]) }
  if (checkpoint.config !== undefined) head = { ...head, config: checkpoint.config }
  if (checkpoint.agent !== undefined) head = { ...head, agent: checkpoint.agent }
  return checkpoint.finished === undefined ? head : { ...head, finished: checkpoint.finished }
}

/** The head of a checkpoint whose journal ends at `end`, sealed, as the bytes of its file (`file`, for errors). */
export const headBytes = (
  sessionId: string,
  file: string,
  end: JournalEnd,
  checkpoint: Checkpoint
): Effect.Effect<Uint8Array, CheckpointIoError> =>
  Effect.map(
    Effect.mapError(encodeHead(makeHead(sessionId, end, checkpoint)), encodeFailure(sessionId, file)),
    (json) => textEncoder.encode(seal(json))
  )
