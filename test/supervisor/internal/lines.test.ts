/**
 * The NDJSON framing of the external workers (src/supervisor/internal/lines.ts):
 * lines cut across chunks, CRLF, a last line without its newline, characters
 * split between chunks, and the caps on a line and on a turn.
 */
import { assert, describe, it } from "@effect/vitest"
import { LineSplitter } from "../../../src/supervisor/internal/lines.ts"

const bytes = (text: string) => new TextEncoder().encode(text)

describe("LineSplitter", () => {
  it("cuts lines across chunks, drops CR of CRLF, and keeps a last line without its newline", () => {
    const splitter = new LineSplitter(1024, 4096)
    assert.deepStrictEqual(splitter.push(bytes('{"a":1}\n{"b"')), ['{"a":1}'])
    assert.deepStrictEqual(splitter.push(bytes(':2}\r\n\n{"c":3}')), ['{"b":2}', ""])
    assert.strictEqual(splitter.end(), '{"c":3}')
    assert.isUndefined(splitter.end())
  })

  it("decodes a character split between chunks", () => {
    const splitter = new LineSplitter(1024, 4096)
    const text = bytes("ø€\n")
    assert.deepStrictEqual(splitter.push(text.subarray(0, 1)), [])
    assert.deepStrictEqual(splitter.push(text.subarray(1, 3)), [])
    assert.deepStrictEqual(splitter.push(text.subarray(3)), ["ø€"])
  })

  it("refuses a line past its cap before its newline arrives, and a turn past its cap", () => {
    const line = new LineSplitter(8, 4096)
    assert.deepStrictEqual(line.push(bytes("12345678\n")), ["12345678"])
    assert.deepStrictEqual(line.push(bytes("12345")), [])
    assert.deepStrictEqual(line.push(bytes("6789")), {
      _tag: "Exceeded",
      message: "a line of the output passed 8 bytes"
    })
    const turn = new LineSplitter(8, 10)
    assert.deepStrictEqual(turn.push(bytes("1234\n1234\n")), ["1234", "1234"])
    assert.deepStrictEqual(turn.push(bytes("1")), {
      _tag: "Exceeded",
      message: "the output of one turn passed 10 bytes"
    })
  })
})
