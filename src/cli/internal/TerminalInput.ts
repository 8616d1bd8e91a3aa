/**
 * Control lines typed on a terminal while the live view runs. The terminal
 * is put in raw mode and the line being typed is drawn by the live view, in
 * its bottom lines: typed text echoed by the terminal itself would land in
 * the middle of what the view redraws.
 *
 * Keys: text, Backspace, Ctrl-U (clear), Enter (send the line), Ctrl-D on
 * an empty line (end of input), and Ctrl-C, which raw mode turns into a key:
 * it sends the process the SIGINT it would have received, so the run stops
 * the same way.
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Terminal from "effect/Terminal"
import * as Control from "../../protocol/Control.ts"

/**
 * What a key does to the line being typed.
 *
 * @since 0.1.0
 */
export type Edit =
  | { readonly _tag: "Line"; readonly line: string }
  | { readonly _tag: "Typing"; readonly text: string }
  | { readonly _tag: "End" }
  | { readonly _tag: "Interrupt" }

// Printable text only: a key's input may be an escape sequence (arrows, function keys).
// oxlint-disable-next-line no-control-regex
const control = /[\u0000-\u001f\u007f]/

/**
 * Applies a key to the line being typed.
 *
 * @since 0.1.0
 */
export const edit = (text: string, input: Terminal.UserInput): Edit => {
  const { ctrl, meta, name } = input.key
  if (ctrl && name === "c") return { _tag: "Interrupt" }
  if (ctrl && name === "d") return text === "" ? { _tag: "End" } : { _tag: "Typing", text }
  if (ctrl && name === "u") return { _tag: "Typing", text: "" }
  if (name === "return" || name === "enter") return { _tag: "Line", line: text }
  if (name === "backspace") return { _tag: "Typing", text: Array.from(text).slice(0, -1).join("") }
  const typed = Option.getOrUndefined(input.input)
  if (ctrl || meta || typed === undefined || control.test(typed)) return { _tag: "Typing", text }
  // Past the longest line there is (a paste that never ends), the line is held as long as that and one more
  // character: sent, it is reported as too long (`Control.parse`).
  if (text.length > Control.maxLineLength) return { _tag: "Typing", text }
  return { _tag: "Typing", text: (text + typed).slice(0, Control.maxLineLength + 1) }
}

/**
 * The lines typed on the terminal; `show` receives the line being typed
 * after each key. The stream ends with Ctrl-D on an empty line.
 *
 * @since 0.1.0
 */
export const lines = (
  show: (text: string) => void
): Effect.Effect<Stream.Stream<string>, never, Terminal.Terminal | Scope.Scope> =>
  Effect.gen(function*() {
    const terminal = yield* Terminal.Terminal
    const keys = yield* terminal.readInput
    const out = yield* Queue.unbounded<string, Cause.Done>()
    let text = ""
    const press = (input: Terminal.UserInput) =>
      Effect.sync(() => {
        const next = edit(text, input)
        switch (next._tag) {
          case "Interrupt":
            return void process.kill(process.pid, "SIGINT")
          case "End":
            return void Queue.endUnsafe(out)
          case "Line":
            text = ""
            Queue.offerUnsafe(out, next.line)
            return show(text)
          case "Typing":
            text = next.text
            return show(text)
        }
      })
    yield* Effect.forkScoped(Stream.runForEach(Stream.fromQueue(keys), press).pipe(Effect.ensuring(Queue.end(out))))
    return Stream.fromQueue(out)
  })
