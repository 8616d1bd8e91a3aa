/**
 * A session's event log: every event of its runs, one JSON line each (the
 * trajectory format, `AgentEvent.AgentEventJson`), numbered by line from 0.
 * The number is the event's SSE `id`: it is the line's index in the durable
 * file, so it stays the same across server restarts, and a client that
 * reconnects with `Last-Event-ID` gets exactly the lines after it.
 *
 * Each event is appended synchronously where it happens (`append` is called
 * from a plugin's `observe`) and only then handed to live subscribers, so a
 * subscriber never sees an event the log does not hold: after a crash, the
 * ids it saw are still the ids of the same events. Subscribing is
 * synchronous too (the count is read and the subscriber registered in one
 * step), so the replay of the stored lines and the live ones meet without a
 * gap or an overlap.
 *
 * Each live subscriber has a bounded buffer. A subscriber that falls that far
 * behind (a slow reader: the HTTP response is backpressured by its socket) is
 * dropped, never waited for: its stream ends after what it had buffered, and
 * it reconnects with `Last-Event-ID` to catch up from the stored lines.
 *
 * `Trajectory.ndjson` writes the same format, but it neither numbers lines
 * nor tells when a line has landed; the server needs both, hence this log.
 *
 * @internal
 */
import type * as Arr from "effect/Array"
import type * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import * as NodeFs from "node:fs"
import * as AgentEvent from "../../AgentEvent.ts"

/** One stored event: its id (line index) and its JSON text. */
export interface Line {
  readonly id: number
  readonly json: string
}

/** Where the lines are kept: a file, or memory. */
export interface Storage {
  /** Appends one line (without its newline); returns false when it could not be written. */
  readonly append: (json: string) => boolean
  /** The lines with ids in `[from, to)`, in order, as stored (a line that does not parse is skipped). */
  readonly read: (from: number, to: number) => Stream.Stream<Line>
  /** Lines stored. */
  readonly count: () => number
  readonly close: () => void
}

/** A subscriber's stream ends with this when it was dropped for falling behind. */
export interface Dropped {
  readonly _tag: "Dropped"
}

/** Nothing happened for a while (to keep a connection open). */
export interface Idle {
  readonly _tag: "Idle"
}

/** What a subscriber receives: lines, idle marks while it waits, then maybe a note that it was dropped. */
export type Item = Line | Dropped | Idle

export interface EventLog {
  /** The next event's id: how many lines the log holds. */
  readonly count: () => number
  /** Appends an event and hands it to live subscribers (called from `observe`). */
  readonly append: (event: AgentEvent.AgentEvent) => void
  /** Opens the log to live subscribers (a run starts). */
  readonly open: () => void
  /** Ends every live subscriber's stream after what it has (the run ended). */
  readonly close: () => void
  /** Whether a run is writing to it. */
  readonly isOpen: () => boolean
  /**
   * The lines after `after` (-1: all), then the live ones while the log is
   * open, with an idle mark after each `idleMs` without one. Fails with the
   * count when `after` is past the last line.
   */
  readonly subscribe: (after: number, idleMs: number) => Effect.Effect<Stream.Stream<Item>, number>
  /** Releases the storage. */
  readonly release: () => void
}

const dropped: Dropped = { _tag: "Dropped" }
const idle: Arr.NonEmptyReadonlyArray<Item> = [{ _tag: "Idle" }]

/**
 * A live subscriber's lines, as the HTTP response pulls them: everything
 * queued at each pull (so what waits unread is at most the queue's capacity
 * plus the batch being written), or an idle mark after `idleMs`. (Not
 * `Stream.merge` with a ticker: merging reads ahead into a buffer of its own,
 * past the bound.)
 */
const live = (subscriber: Subscriber, idleMs: number): Stream.Stream<Item> =>
  Stream.fromPull(Effect.succeed(
    Effect.map(
      Effect.timeoutOption(Queue.takeAll(subscriber.queue), idleMs),
      (lines): Arr.NonEmptyReadonlyArray<Item> => Option.isSome(lines) ? lines.value : idle
    )
  ))

interface Subscriber {
  readonly queue: Queue.Queue<Line, Cause.Done>
  dropped: boolean
}

/**
 * Makes a log over a storage. `buffer`: how many live lines a subscriber may
 * have unread before it is dropped.
 */
export const make = (storage: Storage, options: {
  readonly buffer: number
  readonly onWriteFailure: (event: AgentEvent.AgentEvent, reason: string) => void
}): EventLog => {
  const subscribers = new Set<Subscriber>()
  let writing = false

  const endAll = () => {
    for (const subscriber of subscribers) Queue.endUnsafe(subscriber.queue)
    subscribers.clear()
  }

  const publish = (line: Line) => {
    for (const subscriber of subscribers) {
      if (Queue.offerUnsafe(subscriber.queue, line)) continue
      // Full: the subscriber is too slow. It gets what it has, then a note, and its stream ends.
      subscribers.delete(subscriber)
      subscriber.dropped = true
      Queue.endUnsafe(subscriber.queue)
    }
  }

  return {
    count: storage.count,
    append: (event) => {
      let json: string
      try {
        json = JSON.stringify(AgentEvent.encodeJson(event))
      } catch (cause) {
        options.onWriteFailure(event, `it does not encode: ${cause instanceof Error ? cause.message : String(cause)}`)
        return
      }
      const id = storage.count()
      if (!storage.append(json)) {
        options.onWriteFailure(event, "the log could not be written")
        return
      }
      publish({ id, json })
    },
    open: () => {
      writing = true
    },
    close: () => {
      writing = false
      endAll()
    },
    isOpen: () => writing,
    subscribe: (after, idleMs) =>
      Effect.suspend(() => {
        const end = storage.count()
        // A client's last id is never past the log's end: the log hands out only what it holds.
        if (after > end - 1) return Effect.fail(end)
        const replay = storage.read(after + 1, end)
        if (!writing) return Effect.succeed(replay)
        const subscriber: Subscriber = {
          queue: Effect.runSync(Queue.make<Line, Cause.Done>({ capacity: options.buffer })),
          dropped: false
        }
        subscribers.add(subscriber)
        const note = Stream.suspend(() => subscriber.dropped ? Stream.make<Array<Item>>(dropped) : Stream.empty)
        const tail = Stream.concat(live(subscriber, idleMs), note).pipe(
          Stream.ensuring(Effect.sync(() => subscribers.delete(subscriber)))
        )
        return Effect.succeed(Stream.concat(replay, tail))
      }),
    release: () => {
      endAll()
      storage.close()
    }
  }
}

// -----------------------------------------------------------------------------
// Storage
// -----------------------------------------------------------------------------

/** Lines in memory (a server without a directory). */
export const memory = (): Storage => {
  const lines: Array<string> = []
  return {
    append: (json) => {
      lines.push(json)
      return true
    },
    read: (from, to) =>
      Stream.fromIterable(
        lines.slice(Math.max(0, from), to).map((json, i): Line => ({ id: Math.max(0, from) + i, json }))
      ),
    count: () => lines.length,
    close: () => {}
  }
}

const NEWLINE = 10
const chunkBytes = 256 * 1024
const encoder = new TextEncoder()

/** What is at a path that is not a regular file, in words. */
const notRegular = (path: string, stats: NodeFs.Stats): Error =>
  new Error(`${path} is ${stats.isDirectory() ? "a directory" : "not a regular file"}`)

/**
 * Lines in a file, appended to (created when missing; a line left cut by a
 * killed process is ended, and counts as a line that does not parse). The
 * file is opened without following a link, and must be a regular file. Each
 * line is written with one synchronous `write` (to the page cache: a killed
 * process loses nothing written; not fsynced), so that its id is taken and
 * its bytes are in place before anyone is told about it.
 */
export const file = (path: string): Storage => {
  const fd = NodeFs.openSync(
    path,
    NodeFs.constants.O_RDWR | NodeFs.constants.O_APPEND | NodeFs.constants.O_CREAT | NodeFs.constants.O_NOFOLLOW,
    0o600
  )
  let size: number
  const offsets: Array<number> = [0]
  try {
    const stats = NodeFs.fstatSync(fd)
    if (!stats.isFile()) throw notRegular(path, stats)
    size = stats.size
    const buffer = Buffer.alloc(chunkBytes)
    for (let position = 0; position < size;) {
      const read = NodeFs.readSync(fd, buffer, 0, Math.min(chunkBytes, size - position), position)
      if (read === 0) break
      for (let i = 0; i < read; i++) if (buffer[i] === NEWLINE) offsets.push(position + i + 1)
      position += read
    }
    if (offsets[offsets.length - 1] !== size) {
      writeAll(fd, encoder.encode("\n"))
      size += 1
      offsets.push(size)
    }
  } catch (error) {
    NodeFs.closeSync(fd)
    throw error
  }
  let closed = false
  return {
    append: (json) => {
      if (closed) return false
      const bytes = encoder.encode(json + "\n")
      try {
        writeAll(fd, bytes)
      } catch {
        return false
      }
      size += bytes.length
      offsets.push(size)
      return true
    },
    read: (from, to) => readLines(path, offsets, Math.max(0, from), to),
    count: () => offsets.length - 1,
    close: () => {
      if (closed) return
      closed = true
      NodeFs.closeSync(fd)
    }
  }
}

const writeAll = (fd: number, bytes: Uint8Array) => {
  for (let written = 0; written < bytes.length;) {
    written += NodeFs.writeSync(fd, bytes, written, bytes.length - written)
  }
}

const decoder = new TextDecoder()

const parses = (json: string): boolean => {
  try {
    JSON.parse(json)
    return true
  } catch {
    return false
  }
}

/**
 * Reads lines `[from, to)` of the file in chunks of about 256 KiB, each
 * checked to be JSON, through a descriptor of its own (opened without
 * following a link), so that a reader outlives the writer's descriptor.
 */
const readLines = (
  path: string,
  offsets: ReadonlyArray<number>,
  from: number,
  to: number
): Stream.Stream<Line> => {
  if (from >= to) return Stream.empty
  const open = Effect.callback<number>((resume) => {
    NodeFs.open(path, NodeFs.constants.O_RDONLY | NodeFs.constants.O_NOFOLLOW, (error, fd) => {
      // The file was there when its lines were counted: a reader that cannot open it gets nothing more.
      resume(error === null ? Effect.succeed(fd) : Effect.succeed(-1))
    })
  })
  const close = (fd: number) => Effect.sync(() => fd >= 0 && NodeFs.close(fd, () => {}))
  const chunk = (fd: number) => (next: number) =>
    Effect.callback<readonly [ReadonlyArray<Line>, Option.Option<number>]>((resume) => {
      if (fd < 0 || next >= to) return resume(Effect.succeed([[], Option.none()]))
      // As many whole lines as fit in a chunk (at least one).
      let last = next + 1
      while (last < to && offsets[last + 1]! - offsets[next]! <= chunkBytes) last++
      const start = offsets[next]!
      const length = offsets[last]! - start
      const buffer = Buffer.alloc(length)
      NodeFs.read(fd, buffer, 0, length, start, (error, read) => {
        if (error !== null || read < length) return resume(Effect.succeed([[], Option.none()]))
        const lines: Array<Line> = []
        for (let id = next; id < last; id++) {
          const json = decoder.decode(buffer.subarray(offsets[id]! - start, offsets[id + 1]! - start - 1))
          if (parses(json)) lines.push({ id, json })
        }
        resume(Effect.succeed([lines, last < to ? Option.some(last) : Option.none()]))
      })
    })
  return Stream.unwrap(Effect.map(Effect.acquireRelease(open, close), (fd) => Stream.paginate(from, chunk(fd))))
}
