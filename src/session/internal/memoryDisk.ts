/**
 * The in-memory disk of a checkpoint store: the same files, in maps,
 * without durability.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { Disk } from "./disk.ts"

/** A new, empty disk in memory. */
export const make = (): Disk => {
  const files = new Map<string, Map<string, Uint8Array>>()
  const session = (sessionId: string) => {
    let found = files.get(sessionId)
    if (found === undefined) files.set(sessionId, found = new Map())
    return found
  }
  return {
    where: (sessionId, name) => `memory:${sessionId}/${name}`,
    read: (sessionId, name, limit) =>
      Effect.sync(() => {
        const bytes = files.get(sessionId)?.get(name)
        return bytes === undefined ? undefined : { bytes: bytes.subarray(0, limit), size: bytes.length }
      }),
    prepare: (sessionId) => Effect.sync(() => void session(sessionId)),
    writeAt: (sessionId, name, offset, data) =>
      Effect.sync(() => {
        const before = session(sessionId).get(name) ?? new Uint8Array(0)
        const after = new Uint8Array(offset + data.length)
        after.set(before.subarray(0, offset))
        after.set(data, offset)
        session(sessionId).set(name, after)
      }),
    replace: (sessionId, name, data) => Effect.sync(() => void session(sessionId).set(name, data)),
    removeFile: (sessionId, name) => Effect.sync(() => void files.get(sessionId)?.delete(name)),
    removeSession: (sessionId) => Effect.sync(() => void files.delete(sessionId))
   }
}
