/**
 * Server-Sent Events framing for the providers' response bodies: text in,
 * events out, as `effect/encoding`'s `Sse.makeParser` frames them (the
 * tests check both agree on every way of cutting a body into chunks).
 *
 * Written here rather than taken from `Sse.makeParser` for speed: that
 * parser looks for each line's end one character at a time in JavaScript and
 * builds each event's data through string concatenation and a copy; a
 * provider's body is nearly all `data:` lines, so this framer finds line
 * ends with `indexOf` (native, vectorised), takes a data line's value as a
 * slice of the chunk, and joins lines only for an event of several data
 * lines. On a turn of recorded-shape Chat Completions events (about 6 KB in
 * 28 events) it frames in a fifth of the time.
 *
 * The rules are those of the SSE specification, as `Sse.makeParser` applies
 * them: lines end with LF, CR or CRLF (a CRLF may be split between two
 * chunks); a line starting with `:` is a comment; a field's value loses one
 * leading space; `data` lines join with LF; a blank line dispatches the event
 * when it had a `data` line; the `event` name (default `message`) applies to
 * one event, the `id` to every later one until changed (an `id` containing
 * NUL is ignored); `retry` and unknown fields are ignored (the providers have
 * no use for a reconnection delay); a byte order mark at the start of the
 * body is dropped. An event larger than {@link maxEventSize} is refused.
 *
 * @since 0.1.0
 */
import type * as Sse from "effect/encoding/Sse"

/**
 * The most characters an event's pending lines may hold (`Sse.makeParser`'s
 * default).
 *
 * @since 0.1.0
 * @category constants
 */
export const maxEventSize = 10 * 1024 * 1024

const LF = 10
const COLON = 58
const SPACE = 32
const BOM = 0xfeff

/**
 * The framing state of one body.
 *
 * @since 0.1.0
 * @category models
 */
export class SseFramer {
  private readonly onEvent: (event: Sse.Event) => void
  private first = true
  /** The previous chunk ended with a CR: an LF starting this one belongs to it. */
  private skipLF = false
  /** The start of a line the previous chunks left open. */
  private pending = ""
  private data: string | undefined = undefined
  private event: string | undefined = undefined
  private id: string | undefined = undefined

  constructor(onEvent: (event: Sse.Event) => void) {
    this.onEvent = onEvent
  }

  /** Frames a chunk of text; returns what is wrong when an event grew past {@link maxEventSize}. */
  feed(chunk: string): string | undefined {
    const length = chunk.length
    if (length === 0) return undefined
    let position = 0
    if (this.first) {
      this.first = false
      if (chunk.charCodeAt(0) === BOM) position = 1
    }
    if (this.skipLF) {
      this.skipLF = false
      if (position < length && chunk.charCodeAt(position) === LF) position++
    }
    // The next CR and the next LF, each looked for again only once passed: an LF-only body pays one scan for
    // CRs per chunk, and no line makes either search go over the rest of the chunk again (a body of many
    // short CR-ended lines would otherwise cost the square of its length).
    let cr = chunk.indexOf("\r", position)
    let lf = chunk.indexOf("\n", position)
    while (position < length) {
      if (cr !== -1 && cr < position) cr = chunk.indexOf("\r", position)
      if (lf !== -1 && lf < position) lf = chunk.indexOf("\n", position)
      let end: number
      let next: number
      if (cr !== -1 && (lf === -1 || cr < lf)) {
        end = cr
        next = cr + 1
        if (next === length) this.skipLF = true
        else if (chunk.charCodeAt(next) === LF) next++
      } else if (lf !== -1) {
        end = lf
        next = lf + 1
      } else {
        this.pending = this.pending === "" ? chunk.slice(position) : this.pending + chunk.slice(position)
        break
      }
      if (this.pending === "") this.line(chunk, position, end)
      else {
        const line = this.pending + chunk.slice(position, end)
        this.pending = ""
        this.line(line, 0, line.length)
      }
      position = next
    }
    if (this.pending.length + (this.data === undefined ? 0 : this.data.length) > maxEventSize) {
      this.pending = ""
      this.data = undefined
      this.event = undefined
      this.id = undefined
      return `Pending SSE event exceeded the maximum size of ${maxEventSize}`
    }
    return undefined
  }

  /** One line: `text` from `start` to `end`, its line break left out. */
  private line(text: string, start: number, end: number): void {
    if (start === end) return this.dispatch()
    const first = text.charCodeAt(start)
    if (first === COLON) return
    if (
      first === 100 /* d */ && end - start >= 5 && text.charCodeAt(start + 4) === COLON &&
      text.startsWith("data", start)
    ) {
      const from = text.charCodeAt(start + 5) === SPACE ? start + 6 : start + 5
      const value = text.slice(from, end)
      this.data = this.data === undefined ? value : `${this.data}\n${value}`
      return
    }
    // Looked for within the line only: `indexOf` could scan the rest of the chunk for every line without one.
    let colon = start
    while (colon < end && text.charCodeAt(colon) !== COLON) colon++
    const hasValue = colon < end
    const field = hasValue ? text.slice(start, colon) : text.slice(start, end)
    const value = hasValue ? text.slice(text.charCodeAt(colon + 1) === SPACE ? colon + 2 : colon + 1, end) : ""
    switch (field) {
      case "data":
        this.data = this.data === undefined ? value : `${this.data}\n${value}`
        return
      case "event":
        this.event = value
        return
      case "id":
        if (!value.includes("\u0000")) this.id = value
        return
    }
  }

  private dispatch(): void {
    const data = this.data
    const event = this.event
    this.data = undefined
    this.event = undefined
    if (data === undefined) return
    this.onEvent({ _tag: "Event", id: this.id, event: event === undefined || event === "" ? "message" : event, data })
  }
}
