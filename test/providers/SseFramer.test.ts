import { assert, describe, it } from "@effect/vitest"
import { Sse } from "effect/encoding"
import { readdirSync, readFileSync } from "node:fs"
import path from "node:path"
import * as SseFramer from "../../src/providers/internal/SseFramer.ts"

type Framed = { readonly id: string | undefined; readonly event: string; readonly data: string }
type Framing = { readonly events: Array<Framed>; readonly errors: Array<string> }

const frame = (chunks: ReadonlyArray<string>): Framing => {
  const events: Array<Framed> = []
  const errors: Array<string> = []
  const framer = new SseFramer.SseFramer((e) => events.push({ id: e.id, event: e.event, data: e.data }))
  for (const chunk of chunks) {
    const error = framer.feed(chunk)
    if (error !== undefined) errors.push(error)
  }
  return { events, errors }
}

// What effect's own parser makes of the same chunks: the reference the framer must agree with.
const reference = (chunks: ReadonlyArray<string>): Framing => {
  const events: Array<Framed> = []
  const errors: Array<string> = []
  const parser = Sse.makeParser((e) => {
    if (e._tag === "Event") events.push({ id: e.id, event: e.event, data: e.data })
  })
  for (const chunk of chunks) {
    const error = parser.feed(chunk)
    if (error !== undefined) errors.push(error.message)
  }
  return { events, errors }
}

/** A small deterministic generator (mulberry32), so a failure names a seed that reproduces it. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const pieces = [
  "data",
  "data:",
  "data: ",
  "data:  x",
  "event:",
  "event: delta",
  "id: 7",
  "id:\u0000",
  "retry: 100",
  "retry: x",
  ": comment",
  ":",
  "dat",
  "x",
  " ",
  "{\"a\":1}",
  "[DONE]",
  "\n",
  "\n",
  "\n\n",
  "\r",
  "\r\n",
  "\u00e9",
  "\uFEFF"
]

/** Cuts a text at random places into 1 to 6 chunks. */
const cut = (text: string, next: () => number): Array<string> => {
  const count = 1 + Math.floor(next() * 6)
  const at = Array.from({ length: count - 1 }, () => Math.floor(next() * (text.length + 1))).sort((a, b) => a - b)
  const chunks: Array<string> = []
  let from = 0
  for (const to of at) {
    chunks.push(text.slice(from, to))
    from = to
  }
  chunks.push(text.slice(from))
  return chunks
}

const fixtures = path.join(import.meta.dirname, "..", "fixtures", "providers")

describe("SseFramer", () => {
  it("frames data lines, event names, ids, comments and the ignored fields", () => {
    const body = [
      ": a comment",
      "event: first",
      "id: 1",
      "data: {\"a\":1}",
      "",
      "retry: 3000",
      "data:no space",
      "data:  two spaces",
      "",
      "id: bad\u0000",
      "unknown: field",
      "data",
      "",
      "event:",
      "",
      ""
    ].join("\n")
    assert.deepStrictEqual(frame([body]).events, [
      { id: "1", event: "first", data: "{\"a\":1}" },
      { id: "1", event: "message", data: "no space\n two spaces" },
      { id: "1", event: "message", data: "" }
    ])
  })

  it("ends lines at LF, CR and CRLF, a CRLF split between chunks included", () => {
    assert.deepStrictEqual(frame(["data: a\r", "\ndata: b\r", "\r\n", "data: c\r\r"]).events, [
      { id: undefined, event: "message", data: "a\nb" },
      { id: undefined, event: "message", data: "c" }
    ])
  })

  it("joins a line cut across chunks, and drops a byte order mark only at the start", () => {
    assert.deepStrictEqual(frame(["\uFEFFda", "ta: x", "y\n", "\n\uFEFFdata: z\n\n"]).events, [
      { id: undefined, event: "message", data: "xy" }
    ])
  })

  it("refuses an event larger than the limit, with effect's message", () => {
    const big = `data: ${"x".repeat(SseFramer.maxEventSize)}`
    const framed = frame([big.slice(0, 1000), big.slice(1000)])
    assert.deepStrictEqual(framed.errors, reference([big.slice(0, 1000), big.slice(1000)]).errors)
    assert.strictEqual(framed.errors.length, 1)
  })

  it("frames like effect's Sse.makeParser on random bodies cut at random places", () => {
    for (let seed = 1; seed <= 3000; seed++) {
      const next = random(seed)
      const length = 1 + Math.floor(next() * 40)
      let body = ""
      for (let i = 0; i < length; i++) body += pieces[Math.floor(next() * pieces.length)]
      const chunks = cut(body, next)
      assert.deepStrictEqual(frame(chunks), reference(chunks), `seed ${seed}: ${JSON.stringify(chunks)}`)
    }
  })

  it("frames every recorded provider stream like effect's parser, whole and cut into small reads", () => {
    let files = 0
    for (const dir of readdirSync(fixtures, { withFileTypes: true })) {
      if (!dir.isDirectory()) continue
      for (const file of readdirSync(path.join(fixtures, dir.name))) {
        if (!file.endsWith(".sse")) continue
        files++
        const text = readFileSync(path.join(fixtures, dir.name, file), "utf8")
        assert.deepStrictEqual(frame([text]), reference([text]), file)
        const crlf = text.replaceAll("\n", "\r\n")
        const small = Array.from({ length: Math.ceil(crlf.length / 7) }, (_, i) => crlf.slice(i * 7, i * 7 + 7))
        assert.deepStrictEqual(frame(small), reference(small), `${file}, CRLF in 7-character reads`)
      }
    }
    assert.isAtLeast(files, 6)
  })

  it("frames a body of many short lines without a line break it is looking for in linear time", () => {
    // 200,000 CR-ended lines in one chunk, then as many colon-less lines: a search over the rest of the
    // chunk per line would take minutes; the test's timeout bounds it.
    const crLines = "data: x\r\r".repeat(100_000)
    assert.strictEqual(frame([crLines]).events.length, 100_000)
    const bare = "x\n".repeat(200_000) + "data: y\n\n"
    assert.deepStrictEqual(frame([bare]).events, [{ id: undefined, event: "message", data: "y" }])
  })
})
