/**
 * The `grep` tool: the lines of the workspace's text files that match the
 * model's regular expression, matched off the event loop ({@link LineMatcher})
 * in batches of files read through the sandbox.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Glob from "effect/Glob"
import type { Operations } from "../model.ts"
import { limits } from "./limits.ts"
import type * as LineMatcher from "./lineMatcher.ts"
import { clip, describeError, readText } from "./text.ts"
import { walkFiles } from "./walk.ts"

/** The parameters of `BuiltinTools.Grep`. */
export interface Parameters {
  readonly pattern: string
  readonly path?: string
  readonly glob?: string
  readonly ignore_case?: boolean
}

/**
 * A batch of files for the matcher is sent when it holds this many files or
 * characters. Batches start at one file and double: a search that reaches its
 * cap early reads few files past it.
 */
const batchFiles = 64
const batchChars = 1024 * 1024

/**
 * The regular expression runs off the event loop: a pattern that backtracks
 * exponentially ends with the call's timeout and stalls no other fiber.
 */
export const grep =
  (sandbox: Operations, matcher: LineMatcher.LineMatcher) => (params: Parameters): Effect.Effect<string, string> =>
    Effect.gen(function*() {
      const flags = params.ignore_case === true ? "i" : ""
      // Compiling checks the syntax here; only matching can take long.
      yield* Effect.try({
        try: () => new RegExp(params.pattern, flags),
        catch: (error) => (error instanceof Error ? error.message : `invalid regular expression: ${String(error)}`)
      })
      const dir = params.path ?? "."
      const glob = params.glob === undefined ? undefined : Glob.make(params.glob, { dot: true })
      const matches: Array<string> = []
      let more = false
      let batch: Array<{ readonly path: string; readonly text: string }> = []
      let chars = 0
      let batchSize = 1
      // Matches the batch, adding its matching lines; false once the cap is reached.
      const flush = Effect.suspend(() => {
        const files = batch
        batch = []
        chars = 0
        batchSize = Math.min(batchFiles, batchSize * 2)
        if (files.length === 0) return Effect.succeed(true)
        const request = {
          pattern: params.pattern,
          flags,
          texts: files.map((file) => file.text),
          wanted: limits.grepMatches - matches.length + 1
        }
        return matcher.match(request).pipe(
          Effect.mapError((error) => error.message),
          Effect.map((found) => {
            for (let i = 0; i < files.length; i++) {
              const { path, text } = files[i]!
              const lines = found[i] ?? []
              for (let j = 0; j + 2 < lines.length; j += 3) {
                if (matches.length === limits.grepMatches) {
                  more = true
                  return false
                }
                const line = clip(text.slice(lines[j + 1], lines[j + 2]), limits.grepLineChars)
                matches.push(`${path}:${lines[j]}:${line}`)
              }
            }
            return true
          })
        )
      })
      const add = (path: string, text: string) => {
        batch.push({ path, text })
        chars += text.length
        return batch.length >= batchSize || chars >= batchChars ? flush : Effect.succeed(true)
      }
      const info = yield* Effect.mapError(sandbox.stat(dir), describeError)
      const walk = info.type === "directory"
        ? yield* walkFiles(sandbox, dir, (found) =>
          glob === undefined || Glob.match(glob, found.relative)
            // Unreadable, binary and huge files are skipped in a directory search.
            ? Effect.flatMap(Effect.option(readText(sandbox, found.path)), (text) =>
              text._tag === "None" ? Effect.succeed(true) : add(found.path, text.value))
            : Effect.succeed(true)).pipe(
            Effect.mapError((error) => (typeof error === "string" ? error : describeError(error)))
          )
        : { complete: yield* add(dir, yield* readText(sandbox, dir)) }
      yield* flush
      if (matches.length === 0) return `No matches for /${params.pattern}/ in ${dir}`
      if (more) matches.push(`[first ${limits.grepMatches} matches shown; narrow the pattern or the path]`)
      else if (!walk.complete) matches.push(`[stopped after ${limits.walkEntries} entries; narrow the path]`)
      return matches.join("\n")
    })
