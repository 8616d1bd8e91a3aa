/**
 * TerminalInput: control lines typed on a terminal in raw mode, each key
 * applied to the line being typed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Queue, Result, Stream, Terminal } from "effect"
import { Control } from "effect-agent/protocol"
import * as TerminalInput from "../../../src/cli/internal/TerminalInput.ts"

const key = (name: string, input?: string, ctrl = false): Terminal.UserInput => ({
  input: input === undefined ? Option.none() : Option.some(input),
  key: { name, ctrl, meta: false, shift: false }
})

describe("TerminalInput.edit", () => {
  it("types, erases, clears, sends the line; Ctrl-D ends an empty line; Ctrl-C interrupts", () => {
    assert.deepStrictEqual(TerminalInput.edit("ab", key("c", "c")), { _tag: "Typing", text: "abc" })
    assert.deepStrictEqual(TerminalInput.edit("abé", key("backspace")), { _tag: "Typing", text: "ab" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("u", undefined, true)), { _tag: "Typing", text: "" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("return", "\r")), { _tag: "Line", line: "ab" })
    assert.deepStrictEqual(TerminalInput.edit("", key("d", undefined, true)), { _tag: "End" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("d", undefined, true)), { _tag: "Typing", text: "ab" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("c", undefined, true)), { _tag: "Interrupt" })
    // escape sequences (arrows) are not text
    assert.deepStrictEqual(TerminalInput.edit("ab", key("up", "\x1b[A")), { _tag: "Typing", text: "ab" })
  })

  it("L4: a paste that never ends holds the line at Control.maxLineLength + 1 characters, which is reported when sent", () => {
    const full = "x".repeat(Control.maxLineLength)
    assert.deepStrictEqual(TerminalInput.edit(full, key("y", "yz")), { _tag: "Typing", text: `${full}y` })
    assert.deepStrictEqual(TerminalInput.edit(`${full}y`, key("z", "z")), { _tag: "Typing", text: `${full}y` })
    const sent = TerminalInput.edit(`${full}y`, key("return", "\r"))
    assert.deepStrictEqual(sent, { _tag: "Line", line: `${full}y` })
    assert.deepStrictEqual(
      Control.parse(`${full}y`),
      Result.fail(`the line is longer than ${Control.maxLineLength} characters`)
    )
  })
})

describe("TerminalInput.lines", () => {
  /** A terminal whose keyboard types `keys`. */
  const typing = (keys: ReadonlyArray<Terminal.UserInput>) =>
    Effect.gen(function*() {
      const queue = yield* Queue.unbounded<Terminal.UserInput, never>()
      for (const input of keys) yield* Queue.offer(queue, input)
      return Terminal.make({
        columns: Effect.succeed(80),
        rows: Effect.succeed(24),
        size: Effect.flatMap(Queue.unbounded<Terminal.Size, never>(), (size) => Effect.succeed(size)),
        readInput: Effect.succeed(queue),
        readLine: Effect.never,
        display: () => Effect.void
      })
    })

  const text = (value: string) => Array.from(value, (char) => key(char, char))

  it.effect("sends each line on Enter, shows the line being typed after each key, and ends on Ctrl-D", () =>
    Effect.gen(function*() {
      const terminal = yield* typing([
        ...text("{\"type\":\"ok\"}"),
        key("return", "\r"),
        ...text("stex"),
        key("backspace"),
        key("backspace"),
        ...text("eer"),
        key("d", undefined, true),
        key("return", "\r"),
        key("x", "x"),
        key("u", undefined, true),
        key("d", undefined, true)
      ])
      const shown: Array<string> = []
      const lines = yield* TerminalInput.lines((line) => void shown.push(line)).pipe(
        Effect.provideService(Terminal.Terminal, terminal)
      )
      const sent = yield* Stream.runCollect(lines)
      assert.deepStrictEqual(sent, ["{\"type\":\"ok\"}", "steer"])
      // after Enter the line is empty again; Ctrl-D on a typed line keeps it; Ctrl-U clears it
      assert.strictEqual(shown[13], "")
      assert.deepStrictEqual(shown.slice(-6), ["stee", "steer", "steer", "", "x", ""])
    }).pipe(Effect.scoped))
})
