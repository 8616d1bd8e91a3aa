/**
 * The `list_files` tool: the files under a directory whose path matches a
 * glob, up to the caps.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Glob from "effect/Glob"
import type { Operations } from "../model.ts"
import { limits } from "./limits.ts"
import { describeError } from "./text.ts"
import { walkFiles } from "./walk.ts"

/** The parameters of `BuiltinTools.ListFiles`. */
export interface Parameters {
  readonly pattern?: string
  readonly path?: string
}

export const listFiles = (sandbox: Operations) => (params: Parameters): Effect.Effect<string, string> =>
  Effect.gen(function*() {
    const pattern = params.pattern ?? "**"
    const dir = params.path ?? "."
    const glob = Glob.make(pattern, { dot: true })
    const matches: Array<string> = []
    let more = false
    const walk = yield* walkFiles(sandbox, dir, (found) => {
      if (!Glob.match(glob, found.relative)) return Effect.succeed(true)
      if (matches.length === limits.listEntries) {
        more = true
        return Effect.succeed(false)
      }
      matches.push(found.path)
      return Effect.succeed(true)
    })
    if (matches.length === 0) {
      return walk.complete
        ? `No files match ${pattern} in ${dir}`
        : `No files match ${pattern} in the first ${limits.walkEntries} entries of ${dir}; narrow the path`
    }
    matches.sort()
    if (more) matches.push(`[first ${limits.listEntries} files shown; narrow the pattern or the path]`)
    else if (!walk.complete) matches.push(`[stopped after ${limits.walkEntries} entries; narrow the path]`)
    return matches.join("\n")
  }).pipe(Effect.mapError(describeError))
