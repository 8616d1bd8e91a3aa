/**
 * The walk of a directory tree that `list_files` and `grep` search.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { SandboxError } from "../errors.ts"
import type { Operations } from "../model.ts"
import { limits } from "./limits.ts"

/** An entry of a search: its path relative to the workspace root and to the searched directory. */
export interface Found {
  readonly path: string
  readonly relative: string
}

const skippedDirectories = new Set([".git", "node_modules"])

const joinPath = (dir: string, name: string) => (dir === "" || dir === "." ? name : `${dir}/${name}`)

/**
 * Walks the files under `dir` depth first in name order, not following
 * symbolic links to directories and skipping {@link skippedDirectories},
 * until `visit` says stop or `limits.walkEntries` entries were seen.
 * The sandbox's own listing does the path checks. Written here rather than
 * with `FileSystem.glob` so it works on every sandbox, the in-memory one too.
 */
export const walkFiles = <E>(
  sandbox: Operations,
  dir: string,
  visit: (found: Found) => Effect.Effect<boolean, E>
): Effect.Effect<{ readonly complete: boolean }, SandboxError | E> =>
  Effect.gen(function*() {
    const stack: Array<Found> = [{ path: dir.replace(/\/+$/, "").replace(/^(\.\/)+/, "") || ".", relative: "" }]
    let seen = 0
    while (stack.length > 0) {
      const current = stack.pop()!
      // The searched directory must be listable; an unreadable one below it is skipped.
      const entries = current.relative === ""
        ? yield* sandbox.list(current.path)
        : yield* Effect.orElseSucceed(sandbox.list(current.path), () => [])
      const subdirectories: Array<Found> = []
      for (const entry of entries) {
        if (++seen > limits.walkEntries) return { complete: false }
        const found = { path: joinPath(current.path, entry.name), relative: joinPath(current.relative, entry.name) }
        if (entry.type === "directory") {
          if (!skippedDirectories.has(entry.name)) subdirectories.push(found)
        } else if (!(yield* visit(found))) {
          return { complete: false }
        }
      }
      for (let i = subdirectories.length - 1; i >= 0; i--) stack.push(subdirectories[i]!)
    }
    return { complete: true }
  })
