/**
 * Text as the built-in tools read it and show it: files refused when they
 * are directories, huge or binary, lines split, clipped and located.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { SandboxError } from "../errors.ts"
import type { Operations } from "../model.ts"
import { limits } from "./limits.ts"

/** A sandbox failure as the model reads it. */
export const describeError = (error: SandboxError): string => error.message

export const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`

/** Splits text into lines, without the empty one after a final newline. */
export const splitLines = (text: string): Array<string> => {
  const lines = text.split("\n")
  if (lines.at(-1) === "") lines.pop()
  return lines
}

export const clip = (line: string, max: number): string =>
  line.length <= max ? line : `${line.slice(0, max)}… [${line.length - max} more characters]`

/** The 1-based line on which `index` of `text` falls. */
export const lineAt = (text: string, index: number): number => {
  let line = 1
  for (let i = text.indexOf("\n"); i !== -1 && i < index; i = text.indexOf("\n", i + 1)) line++
  return line
}

const isBinary = (bytes: Uint8Array): boolean => bytes.subarray(0, 8000).includes(0)

/** Reads a text file for a tool: refuses directories, huge files and binary files with a clear reason. */
export const readText = (sandbox: Operations, path: string): Effect.Effect<string, string> =>
  Effect.gen(function*() {
    const info = yield* sandbox.stat(path)
    if (info.type === "directory") {
      return yield* Effect.fail(`${path} is a directory; use list_files to see its files`)
    }
    if (info.size > limits.fileBytes) {
      return yield* Effect.fail(
        `${path} is too large (${info.size} bytes; the limit is ${limits.fileBytes}); read a part of it with bash`
      )
    }
    const bytes = yield* sandbox.readFileBytes(path)
    if (isBinary(bytes)) return yield* Effect.fail(`${path} looks like a binary file (${bytes.length} bytes)`)
    return new TextDecoder().decode(bytes)
  }).pipe(Effect.mapError((error) => (typeof error === "string" ? error : describeError(error))))
