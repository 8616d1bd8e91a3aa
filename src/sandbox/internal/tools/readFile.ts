/**
 * The `read_file` tool: a text file's lines, numbered, from an offset, up to
 * the caps.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { Operations } from "../model.ts"
import { limits } from "./limits.ts"
import { clip, plural, readText, splitLines } from "./text.ts"

/** The parameters of `BuiltinTools.ReadFile`. */
export interface Parameters {
  readonly path: string
  readonly offset?: number
  readonly limit?: number
}

export const readFile = (sandbox: Operations) => (params: Parameters): Effect.Effect<string, string> =>
  Effect.flatMap(readText(sandbox, params.path), (text) => {
    const lines = splitLines(text)
    if (lines.length === 0) return Effect.succeed(`(${params.path} is empty)`)
    const first = params.offset ?? 1
    if (first > lines.length) {
      return Effect.fail(`offset ${first} is past the end of ${params.path} (${plural(lines.length, "line")})`)
    }
    const wanted = Math.min(lines.length, first - 1 + (params.limit ?? limits.readLines))
    const width = String(wanted).length
    const out: Array<string> = []
    let chars = 0
    let last = first - 1
    while (last < wanted) {
      const line = `${String(last + 1).padStart(width)}\t${clip(lines[last]!.replace(/\r$/, ""), limits.lineChars)}`
      if (chars + line.length > limits.readChars && out.length > 0) break
      out.push(line)
      chars += line.length + 1
      last++
    }
    if (last < lines.length) {
      out.push(`[lines ${first}-${last} of ${lines.length}; continue with offset=${last + 1}]`)
    }
    return Effect.succeed(out.join("\n"))
  })
