/**
 * The file system disk of a checkpoint store: each session in
 * `dir/<session id>/`, through the link-safe operations of {@link Files}.
 * What it creates is its owner's alone: directories 0700, files 0600.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as NodeFs from "node:fs"
import * as NodePath from "node:path"
import type { Disk } from "./disk.ts"
import { type CheckpointCorrupt, CheckpointIoError, corrupt } from "./errors.ts"
import * as Files from "./files.ts"

/** Runs a node:fs operation: what is in the way is `CheckpointCorrupt`, any other error `CheckpointIoError`. */
const nodeFs = <A>(
  sessionId: string,
  operation: string,
  at: string,
  run: () => Promise<A>
): Effect.Effect<A, CheckpointCorrupt | CheckpointIoError> =>
  Effect.tryPromise({
    try: run,
    catch: (error) =>
      error instanceof Files.InTheWay
        ? corrupt(sessionId, error.at, error.problem)
        : new CheckpointIoError({
          sessionId,
          operation,
          path: at,
          reason: error instanceof Error ? error.message : String(error)
        })
  })

/** The disk of a store in `dir`. */
export const make = (dir: string): Disk => {
  const root = NodePath.resolve(dir)
  const sessionDir = (sessionId: string) => NodePath.join(root, sessionId)
  const where = (sessionId: string, name: string) => NodePath.join(root, sessionId, name)
  return {
    where,
    read: (sessionId, name, limit) => {
      const at = where(sessionId, name)
      return nodeFs(
        sessionId,
        "read",
        at,
        async () => (await Files.checkDirectory(sessionDir(sessionId))) ? Files.readRegular(at, limit) : undefined
      )
    },
    prepare: (sessionId) => {
      const at = sessionDir(sessionId)
      return nodeFs(sessionId, "create", at, async () => {
        // The store's own directories are its owner's alone (a transcript holds every prompt); the umask only
        // takes bits away.
        await NodeFs.promises.mkdir(root, { recursive: true, mode: Files.directoryMode })
        await NodeFs.promises.mkdir(at, { mode: Files.directoryMode }).catch((error: unknown) => {
          if (Files.errnoCode(error) !== "EEXIST") throw error
        })
        await Files.checkDirectory(at)
        await Files.syncDirectory(root)
      })
    },
    writeAt: (sessionId, name, offset, data) => {
      const at = where(sessionId, name)
      return nodeFs(sessionId, "write", at, async () => {
        await Files.checkDirectory(sessionDir(sessionId))
        if (offset === 0) {
          await Files.writeNew(at, data)
          return Files.syncDirectory(sessionDir(sessionId))
        }
        const opened = await Files.openRegular(at, NodeFs.constants.O_WRONLY)
        if (opened === undefined) throw new Files.InTheWay(at, "the journal is missing")
        const { handle, size } = opened
        await Files.using(handle, async () => {
          if (size < offset) throw new Files.InTheWay(at, `the journal has ${size} bytes; the head records ${offset}`)
          await Files.writeAll(handle, data, offset)
          await handle.truncate(offset + data.length)
          await handle.sync()
        })
      })
    },
    replace: (sessionId, name, data) => {
      const at = where(sessionId, name)
      return nodeFs(sessionId, "write", at, async () => {
        await Files.checkDirectory(sessionDir(sessionId))
        const temp = `${at}.tmp`
        await Files.writeNew(temp, data)
        // rename replaces whatever has the name, a link included, and follows none
        await NodeFs.promises.rename(temp, at).catch((error: unknown) => {
          const code = Files.errnoCode(error)
          if (code === "EISDIR" || code === "ENOTEMPTY" || code === "EEXIST") throw Files.notRegular(at, "a directory")
          throw error
        })
        await Files.syncDirectory(sessionDir(sessionId))
      })
    },
    removeFile: (sessionId, name) => {
      const at = where(sessionId, name)
      return nodeFs(sessionId, "remove", at, async () => {
        if (await Files.checkDirectory(sessionDir(sessionId))) await Files.clear(at)
      })
    },
    // `rm` removes a link in the session's place, not what it points to
    removeSession: (sessionId) => {
      const at = sessionDir(sessionId)
      return Effect.tryPromise({
        try: () => NodeFs.promises.rm(at, { recursive: true, force: true }),
        catch: (error) =>
          new CheckpointIoError({
            sessionId,
            operation: "remove",
            path: at,
            reason: error instanceof Error ? error.message : String(error)
          })
      })
    }
  }
}
