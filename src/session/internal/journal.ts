/**
 * The store's algorithm over a {@link Disk}: a session is a head and an
 * append-only journal. Saving appends the messages a turn added and replaces
 * the head; a transcript that does not extend the saved one is written to a
 * new journal generation, which the head then points to. Loading reads no
 * more than the head records (a head at most 64 MiB, a journal at most
 * 1 GiB) and checks everything ({@link Codec}); saving never writes what
 * loading would refuse (`CheckpointTooLarge`, before any byte is written).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Semaphore from "effect/Semaphore"
import type * as Message from "../../Message.ts"
import type * as RunState from "../../RunState.ts"
import * as Codec from "./codec.ts"
import type { Disk } from "./disk.ts"
import {
  CheckpointExists,
  CheckpointMissing,
  CheckpointTooLarge,
  corrupt,
  type InvalidSessionId,
  type LoadError
} from "./errors.ts"
import type { Checkpoint, Service } from "./model.ts"
import * as SessionId from "./sessionId.ts"

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

/** The largest files a store reads, and so writes. */
export interface Limits {
  readonly headBytes: number
  readonly journalBytes: number
}

/**
 * A store over a `Disk`: the checkpoint format, its checks, and incremental saves. `limits`: the largest head and
 * journal it reads and writes (by default 64 MiB and 1 GiB; smaller ones are for tests).
 */
export const make = (disk: Disk, limits: Limits = defaultLimits): Service => {
  /** Fails, before anything is written, when a file would end past what the store reads back. */
  const fits = (sessionId: string, name: string, bytes: number, limit: number) =>
    bytes <= limit
      ? Effect.void
      : Effect.fail(new CheckpointTooLarge({ sessionId, file: disk.where(sessionId, name), bytes, limit }))
  const lock = Semaphore.makeUnsafe(1)
  // A write runs to its end once started (milliseconds): an interrupted save would leave
  // a stray write in flight that could land after the next save.
  const writing = <A, E>(effect: Effect.Effect<A, E>) => Effect.uninterruptible(lock.withPermit(effect))
  const sessions = new Map<string, Known>()

  /** Writes a whole transcript to a new journal generation, then the head pointing to it. */
  const writeFresh = (sessionId: string, generation: number, checkpoint: Checkpoint) =>
    Effect.gen(function*() {
      const name = Codec.journalName(generation)
      const file = disk.where(sessionId, name)
      const { data, lastLine } = yield* Codec.encodeLines(sessionId, file, checkpoint.state.messages)
      const entries = checkpoint.state.messages.length
      const journal = { generation, entries, bytes: data.length, checksum: Codec.checksum(data) }
      const head = yield* Codec.headBytes(sessionId, disk.where(sessionId, Codec.HEAD), journal, checkpoint)
      yield* fits(sessionId, name, data.length, limits.journalBytes)
      yield* fits(sessionId, Codec.HEAD, head.length, limits.headBytes)
      yield* disk.writeAt(sessionId, name, 0, data)
      yield* disk.replace(sessionId, Codec.HEAD, head)
      sessions.set(sessionId, { ...journal, last: checkpoint.state.messages.at(-1), lastLine })
      return { bytes: data.length + head.length }
    })

  const create: Service["create"] = (sessionId, checkpoint) =>
    writing(Effect.gen(function*() {
      yield* checkId(sessionId)
      if ((yield* disk.read(sessionId, Codec.HEAD, 0)) !== undefined) return yield* new CheckpointExists({ sessionId })
      yield* disk.prepare(sessionId)
      return yield* writeFresh(sessionId, 0, checkpoint)
    }))

  const save: Service["save"] = (sessionId, checkpoint) =>
    writing(Effect.gen(function*() {
      const known = sessions.get(sessionId) ??
        (yield* Effect.map(decode(disk, sessionId, limits), (decoded) => decoded.known))
      const messages = checkpoint.state.messages
      if (!extendsSaved(known, messages)) {
        const saved = yield* writeFresh(sessionId, known.generation + 1, checkpoint)
        // The old journal is garbage now; failing to delete it does not undo the save.
        yield* Effect.ignore(disk.removeFile(sessionId, Codec.journalName(known.generation)))
        return saved
      }
      const name = Codec.journalName(known.generation)
      const added = messages.length === known.entries
        ? { data: new Uint8Array(0), lastLine: known.lastLine }
        : yield* Codec.encodeLines(sessionId, disk.where(sessionId, name), messages.slice(known.entries))
      const journal = {
        generation: known.generation,
        entries: messages.length,
        bytes: known.bytes + added.data.length,
        checksum: Codec.checksum(added.data, known.checksum)
      }
      const head = yield* Codec.headBytes(sessionId, disk.where(sessionId, Codec.HEAD), journal, checkpoint)
      yield* fits(sessionId, name, journal.bytes, limits.journalBytes)
      yield* fits(sessionId, Codec.HEAD, head.length, limits.headBytes)
      if (added.data.length > 0) yield* disk.writeAt(sessionId, name, known.bytes, added.data)
      yield* disk.replace(sessionId, Codec.HEAD, head)
      sessions.set(sessionId, { ...journal, last: messages.at(-1), lastLine: added.lastLine })
      return { bytes: added.data.length + head.length }
    }))

  const load: Service["load"] = (sessionId) =>
    lock.withPermit(Effect.map(decode(disk, sessionId, limits), ({ checkpoint, known }) => {
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

  return { create, save, load, remove, headFile: (sessionId) => disk.where(sessionId, Codec.HEAD) }
}

const checkId = (sessionId: string): Effect.Effect<void, InvalidSessionId> =>
  Effect.asVoid(SessionId.validate(sessionId))

/**
 * The largest files a store reads: a head (it holds no transcript, only queues, counters and plugin state: a few
 * KB), and a journal (its valid part, as the head records it).
 */
const defaultLimits: Limits = { headBytes: 64 * 1024 * 1024, journalBytes: 1024 * 1024 * 1024 }

const mib = (bytes: number) => `${bytes / 1024 / 1024} MiB`

const decode = (disk: Disk, sessionId: string, limits: Limits): Effect.Effect<Decoded, LoadError> =>
  Effect.gen(function*() {
    yield* checkId(sessionId)
    const headFile = disk.where(sessionId, Codec.HEAD)
    const headBytes = yield* disk.read(sessionId, Codec.HEAD, limits.headBytes)
    if (headBytes === undefined) return yield* new CheckpointMissing({ sessionId })
    if (headBytes.size > limits.headBytes) {
      const problem = `the file has ${headBytes.size} bytes; a head has at most ${mib(limits.headBytes)}`
      return yield* corrupt(sessionId, headFile, problem)
    }
    const head = yield* Codec.readHead(sessionId, headFile, headBytes.bytes)
    const name = Codec.journalName(head.journal.generation)
    const journalFile = disk.where(sessionId, name)
    if (head.journal.bytes > limits.journalBytes) {
      return yield* corrupt(
        sessionId,
        headFile,
        `the head records a journal of ${head.journal.bytes} bytes; a store reads at most ${mib(limits.journalBytes)}`
      )
    }
    const journalBytes = yield* disk.read(sessionId, name, head.journal.bytes)
    const journal = yield* Codec.readJournal(sessionId, journalFile, journalBytes?.bytes, head.journal)
    const messages = journal.messages
    const state: RunState.RunState = { ...head.state, messages }
    const finished = "finished" in head ? head.finished : undefined
    yield* Codec.checkState(sessionId, { head: headFile, journal: journalFile }, journal, state, finished)
    const agent = "agent" in head ? head.agent : undefined
    const checkpoint: Checkpoint = {
      state,
      ...(head.config === undefined ? {} : { config: head.config }),
      ...(agent === undefined ? {} : { agent })
    }
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

/** Whether a transcript extends the one saved: as long, and the same message where the saved one ends. */
const extendsSaved = (known: Known, messages: ReadonlyArray<Message.Message>): boolean => {
  if (messages.length < known.entries) return false
  if (known.entries === 0) return true
  const boundary = messages[known.entries - 1]!
  if (boundary === known.last) return true
  const line = Codec.encodeMessage(boundary)
  return Exit.isSuccess(line) && line.value === known.lastLine
}
