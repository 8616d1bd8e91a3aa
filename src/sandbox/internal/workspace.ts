/**
 * Paths inside a workspace, checked lexically: what every sandbox does
 * before it touches a path (host sandboxes then check the real path too).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Path from "effect/Path"
import { type FileSystemError, fsError, PathEscapeError } from "./errors.ts"

/** Whether `absolute` is `root` or lies under it. */
export const isWithin = (path: Path.Path, root: string, absolute: string): boolean => {
  const relative = path.relative(root, absolute)
  return !(relative === ".." || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative))
}

/** The absolute path of `input` under `root`, checked lexically (`..`, absolute paths). */
export const resolveLexically = (
  path: Path.Path,
  root: string,
  input: string
): Effect.Effect<string, PathEscapeError | FileSystemError> => {
  if (input.includes("\0")) return Effect.fail(fsError("resolve", input, "the path contains a NUL character"))
  const absolute = path.resolve(root, input)
  return isWithin(path, root, absolute)
    ? Effect.succeed(absolute)
    : Effect.fail(new PathEscapeError({ path: input, reason: "it resolves outside the workspace" }))
}
