/**
 * The `write_file` tool: a whole file written, and what was written said.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { Operations } from "../model.ts"
import { describeError, plural, splitLines } from "./text.ts"

/** The parameters of `BuiltinTools.WriteFile`. */
export interface Parameters {
  readonly path: string
  readonly content: string
}

export const writeFile = (sandbox: Operations) => (params: Parameters): Effect.Effect<string, string> =>
  Effect.gen(function*() {
    const existed = yield* Effect.match(sandbox.stat(params.path), { onFailure: () => false, onSuccess: () => true })
    yield* sandbox.writeFile(params.path, params.content)
    const bytes = new TextEncoder().encode(params.content).length
    const size = `${plural(splitLines(params.content).length, "line")}, ${plural(bytes, "byte")}`
    return `${existed ? "Overwrote" : "Created"} ${params.path} (${size})`
  }).pipe(Effect.mapError(describeError))
