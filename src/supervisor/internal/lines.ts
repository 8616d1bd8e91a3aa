/**
 * NDJSON framing under caps: a worker's stdout cut into lines, with a limit on
 * the bytes of one line and of the whole turn.
 *
 * Hand-written rather than `Stream.splitLines`: that buffers a line until its
 * newline arrives, without bound, and a hostile worker need never send one.
 * Here a line is refused as soon as it outgrows its cap.
 *
 * @internal
 */

/** Which cap the output broke. */
export interface Exceeded {
  readonly _tag: "Exceeded"
  readonly message: string
}

const newline = 0x0a

/** Cuts a byte stream into lines (without their `\n` or `\r\n`), refusing what breaks the caps. */
export class LineSplitter {
  private pending: Array<Uint8Array> = []
  private pendingLength = 0
  private total = 0
  private readonly decoder = new TextDecoder()
  private readonly maxLineBytes: number
  private readonly maxBytes: number
  constructor(maxLineBytes: number, maxBytes: number) {
    this.maxLineBytes = maxLineBytes
    this.maxBytes = maxBytes
  }

  /** The lines `chunk` completes, or the cap it broke. */
  push(chunk: Uint8Array): ReadonlyArray<string> | Exceeded {
    this.total += chunk.length
    if (this.total > this.maxBytes) {
      return { _tag: "Exceeded", message: `the output of one turn passed ${this.maxBytes} bytes` }
    }
    const lines: Array<string> = []
    let start = 0
    for (let end = chunk.indexOf(newline); end !== -1; end = chunk.indexOf(newline, start)) {
      const exceeded = this.append(chunk.subarray(start, end))
      if (exceeded !== undefined) return exceeded
      lines.push(this.take())
      start = end + 1
    }
    return this.append(chunk.subarray(start)) ?? lines
  }

  /** The last line, when the output did not end with a newline. */
  end(): string | undefined {
    return this.pendingLength === 0 ? undefined : this.take()
  }

  private append(part: Uint8Array): Exceeded | undefined {
    if (part.length === 0) return undefined
    this.pendingLength += part.length
    if (this.pendingLength > this.maxLineBytes) {
      return { _tag: "Exceeded", message: `a line of the output passed ${this.maxLineBytes} bytes` }
    }
    // A copy: the chunk's buffer may be reused by the stream that produced it.
    this.pending.push(part.slice())
    return undefined
  }

  private take(): string {
    const bytes = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending)
    this.pending = []
    this.pendingLength = 0
    const text = this.decoder.decode(bytes)
    return text.endsWith("\r") ? text.slice(0, -1) : text
  }
}
