/**
 * The in-memory sandbox: a workspace held in a map, with the path checks of
 * the host sandboxes, that cannot run commands.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Path from "effect/Path"
import {
  errnoReasons,
  FileNotFoundError,
  type FileSystemError,
  fsError,
  NotSupportedError,
  rootRemoval
} from "./errors.ts"
import { type DirectoryEntry, type FileInfo, type FileType, fromOperations, type Operations } from "./model.ts"
import { resolveLexically } from "./workspace.ts"

/** Where the in-memory workspace is rooted. */
export const root = "/workspace"

/** An in-memory sandbox holding `files` (paths relative to the root, text or bytes). */
export const make = (
  files: Readonly<Record<string, string | Uint8Array>>
): Effect.Effect<Operations, never, Path.Path> =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const encoder = new TextEncoder()
    // Keyed by the path relative to the root ("" is the root).
    const store = new Map<string, { readonly bytes: Uint8Array; readonly modified: Date }>()
    const directories = new Set<string>([""])

    const relative = (input: string) =>
      Effect.map(resolveLexically(path, root, input), (absolute) => path.relative(root, absolute))
    const parentsOf = (rel: string): Array<string> => {
      const parents: Array<string> = []
      for (let dir = path.dirname(rel); dir !== "." && dir !== ""; dir = path.dirname(dir)) parents.push(dir)
      return parents
    }
    const put = (rel: string, bytes: Uint8Array, modified: Date) => {
      store.set(rel, { bytes, modified })
      for (const dir of parentsOf(rel)) directories.add(dir)
    }
    const now = yield* Clock.currentTimeMillis
    for (const [name, content] of Object.entries(files)) {
      const rel = yield* Effect.orDie(relative(name))
      put(rel, typeof content === "string" ? encoder.encode(content) : content, new Date(now))
    }

    const readFileBytes = (input: string) =>
      Effect.flatMap(relative(input), (rel) => {
        const file = store.get(rel)
        if (file !== undefined) return Effect.succeed(file.bytes)
        return Effect.fail(
          directories.has(rel)
            ? fsError("read", input, errnoReasons.EISDIR!)
            : new FileNotFoundError({ path: input })
        )
      })

    const writeFile = (input: string, content: string | Uint8Array) =>
      Effect.flatMap(relative(input), (rel) =>
        Effect.flatMap(Clock.currentTimeMillis, (millis) => {
          if (directories.has(rel)) {
            return Effect.fail(fsError("write", input, errnoReasons.EISDIR!))
          }
          if (parentsOf(rel).some((dir) => store.has(dir))) {
            return Effect.fail(fsError("write", input, errnoReasons.ENOTDIR!))
          }
          put(rel, typeof content === "string" ? encoder.encode(content) : content, new Date(millis))
          return Effect.void
        }))

    const children = (rel: string): Array<DirectoryEntry> => {
      const prefix = rel === "" ? "" : `${rel}/`
      const found = new Map<string, FileType>()
      for (const dir of directories) {
        if (dir !== rel && dir.startsWith(prefix) && !dir.slice(prefix.length).includes("/")) {
          found.set(dir.slice(prefix.length), "directory")
        }
      }
      for (const name of store.keys()) {
        if (name.startsWith(prefix) && !name.slice(prefix.length).includes("/")) {
          found.set(name.slice(prefix.length), "file")
        }
      }
      return [...found].map(([name, type]) => ({ name, type })).sort((a, b) => (a.name < b.name ? -1 : 1))
    }

    const list = (input: string) =>
      Effect.flatMap(relative(input), (rel) =>
        directories.has(rel)
          ? Effect.succeed(children(rel))
          : Effect.fail(
            store.has(rel)
              ? fsError("list", input, errnoReasons.ENOTDIR!)
              : new FileNotFoundError({ path: input })
          ))

    const stat = (input: string) =>
      Effect.flatMap(relative(input), (rel): Effect.Effect<FileInfo, FileNotFoundError> => {
        const file = store.get(rel)
        if (file !== undefined) {
          return Effect.succeed({ type: "file", size: file.bytes.length, modified: file.modified })
        }
        if (directories.has(rel)) return Effect.succeed({ type: "directory", size: 0, modified: undefined })
        return Effect.fail(new FileNotFoundError({ path: input }))
      })

    const remove = (input: string, options?: { readonly recursive?: boolean | undefined }) =>
      Effect.flatMap(relative(input), (rel): Effect.Effect<void, FileNotFoundError | FileSystemError> => {
        if (store.delete(rel)) return Effect.void
        if (rel === "") {
          return Effect.fail(rootRemoval(input))
        }
        if (!directories.has(rel)) return Effect.fail(new FileNotFoundError({ path: input }))
        if (options?.recursive !== true && children(rel).length > 0) {
          return Effect.fail(fsError("remove", input, errnoReasons.ENOTEMPTY!))
        }
        const prefix = `${rel}/`
        for (const name of [...store.keys()]) if (name.startsWith(prefix)) store.delete(name)
        for (const dir of [...directories]) if (dir === rel || dir.startsWith(prefix)) directories.delete(dir)
        return Effect.void
      })

    return fromOperations({
      kind: "memory",
      root,
      exec: () =>
        Effect.fail(
          new NotSupportedError({ operation: "exec", reason: "the in-memory sandbox cannot run commands" })
        ),
      readFileBytes,
      writeFile,
      list,
      stat,
      remove
    })
  })
