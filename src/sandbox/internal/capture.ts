/**
 * Output capture: a command's stdout or stderr kept up to a cap.
 *
 * @internal
 */

/**
 * Keeps the first and last halves of a byte stream up to a cap, counting what
 * falls between. A command's output is read to its end (a child blocked on a
 * full pipe would never exit) but memory stays bounded. `text()` is what was
 * kept, with `[... N bytes truncated ...]` between the halves when bytes were
 * dropped (`dropped`), cut at character boundaries.
 *
 * @since 0.1.0
 * @category capture
 */
export class CappedOutput {
  private readonly head: Array<Uint8Array> = []
  private readonly tail: Array<Uint8Array> = []
  private headLength = 0
  private tailLength = 0
  dropped = 0
  private readonly headCap: number
  private readonly tailCap: number
  constructor(cap: number) {
    this.headCap = Math.ceil(cap / 2)
    this.tailCap = Math.floor(cap / 2)
  }
  push(chunk: Uint8Array): void {
    const room = this.headCap - this.headLength
    if (room > 0) {
      const part = room >= chunk.length ? chunk : chunk.subarray(0, room)
      this.head.push(part)
      this.headLength += part.length
      if (part.length === chunk.length) return
      chunk = chunk.subarray(room)
    }
    this.tail.push(chunk)
    this.tailLength += chunk.length
    while (this.tailLength > this.tailCap) {
      const first = this.tail[0]!
      const excess = this.tailLength - this.tailCap
      if (first.length <= excess) {
        this.tail.shift()
        this.tailLength -= first.length
        this.dropped += first.length
      } else {
        this.tail[0] = first.subarray(excess)
        this.tailLength -= excess
        this.dropped += excess
      }
    }
  }
  text(): string {
    if (this.dropped === 0) return new TextDecoder().decode(Buffer.concat([...this.head, ...this.tail]))
    // Cut both halves at character boundaries: the head before a character
    // it splits, the tail after the continuation bytes it starts with.
    const head = Buffer.concat(this.head)
    const headEnd = completeLength(head)
    const tail = Buffer.concat(this.tail)
    let tailStart = 0
    while (tailStart < tail.length && tailStart < 3 && (tail[tailStart]! & 0xc0) === 0x80) tailStart++
    const dropped = this.dropped + head.length - headEnd + tailStart
    const decoder = new TextDecoder()
    return `${decoder.decode(head.subarray(0, headEnd))}\n[... ${dropped} bytes truncated ...]\n${
      decoder.decode(tail.subarray(tailStart))
    }`
  }
}

/** The length of the longest prefix of `bytes` that does not end inside a UTF-8 character. */
const completeLength = (bytes: Uint8Array): number => {
  let lead = bytes.length - 1
  while (lead >= 0 && bytes.length - lead <= 3 && (bytes[lead]! & 0xc0) === 0x80) lead--
  if (lead < 0) return bytes.length
  const byte = bytes[lead]!
  const size = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1
  return lead + size > bytes.length ? lead : bytes.length
}
