/**
 * The `edit_file` tool: exact text replaced in a file, once or everywhere,
 * with a reason the model can act on when it does not match.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { Operations } from "../model.ts"
import { describeError, lineAt, plural, readText } from "./text.ts"

/** The parameters of `BuiltinTools.EditFile`. */
export interface Parameters {
  readonly path: string
  readonly old_text: string
  readonly new_text: string
  readonly replace_all?: boolean
}

/** Start indexes of the non-overlapping occurrences of `needle` in `text`. */
const occurrences = (text: string, needle: string): Array<number> => {
  const found: Array<number> = []
  for (let i = text.indexOf(needle); i !== -1; i = text.indexOf(needle, i + needle.length)) found.push(i)
  return found
}

export const editFile = (sandbox: Operations) => (params: Parameters): Effect.Effect<string, string> =>
  Effect.gen(function*() {
    const { new_text: replacement, old_text: target, path } = params
    if (target === "") {
      return yield* Effect.fail("old_text is empty; to create or replace a whole file, use write_file")
    }
    if (target === replacement) return yield* Effect.fail("old_text and new_text are the same; nothing to change")
    const text = yield* readText(sandbox, path)
    const found = occurrences(text, target)
    if (found.length === 0) {
      return yield* Effect.fail(
        `old_text was not found in ${path}. It must match exactly, whitespace and indentation included; ` +
          "read the file again and copy the text."
      )
    }
    if (found.length > 1 && params.replace_all !== true) {
      const lines = found.map((index) => lineAt(text, index)).join(", ")
      return yield* Effect.fail(
        `old_text matches ${found.length} times in ${path} (lines ${lines}); include more surrounding text ` +
          "to make it unique, or set replace_all to replace every occurrence."
      )
    }
    // Rebuilt by slicing (String.replace would interpret `$` patterns in new_text).
    let edited = ""
    let from = 0
    const starts: Array<number> = []
    for (const index of found) {
      edited += text.slice(from, index)
      starts.push(edited.length)
      edited += replacement
      from = index + target.length
    }
    edited += text.slice(from)
    yield* Effect.mapError(sandbox.writeFile(path, edited), describeError)
    const lines = starts.map((index) => lineAt(edited, index))
    return `Edited ${path}: replaced ${plural(found.length, "occurrence")} (${
      lines.length === 1 ? "line" : "lines"
    } ${lines.join(", ")})`
  })
