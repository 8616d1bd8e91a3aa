/**
 * Link-safe file operations on `node:fs`: regular files opened without
 * following a link and without blocking on a FIFO, read no further than
 * their size, and files written anew created exclusively.
 *
 * effect's `FileSystem` has `noFollow` and "wx" (O_EXCL), but not O_NONBLOCK
 * (without it, opening a FIFO blocks a libuv thread until a writer comes)
 * nor O_DIRECTORY. So: O_NOFOLLOW refuses a link at every file opened here;
 * O_NONBLOCK keeps a FIFO from hanging an open; fstat on the open file
 * refuses anything but a regular file, and its size bounds a read (a device
 * such as /dev/zero never ends); files written anew are created with
 * O_CREAT | O_EXCL, after unlinking whatever had their name (unlink removes
 * a link, not what it points to), readable and writable by their owner
 * alone ({@link fileMode}). What is in the way is thrown as an
 * {@link InTheWay}; any other failure as `node:fs` throws it.
 *
 * @internal
 */
import * as NodeFs from "node:fs"
import type { FileBytes } from "./disk.ts"

const {
  O_CREAT,
  O_DIRECTORY = 0,
  O_EXCL,
  O_NOFOLLOW = 0,
  O_NONBLOCK = 0,
  O_RDONLY,
  O_WRONLY
} = NodeFs.constants

const kindOf = (stat: NodeFs.Stats): string =>
  stat.isDirectory()
    ? "a directory"
    : stat.isSymbolicLink()
    ? "a symbolic link"
    : stat.isFIFO()
    ? "a FIFO"
    : stat.isSocket()
    ? "a socket"
    : stat.isCharacterDevice() || stat.isBlockDevice()
    ? "a device"
    : "not a regular file"

/** The mode of every directory a store creates: its owner's alone. */
export const directoryMode = 0o700

/** The mode of every file a store creates: its owner's alone (a checkpoint holds the whole transcript). */
export const fileMode = 0o600

export const errnoCode = (error: unknown): string | undefined =>
  error instanceof Error && "code" in error && typeof error.code === "string" ? error.code : undefined

/** Something other than a regular file (or, for the session, a directory) where the store keeps one. */
export class InTheWay {
  readonly at: string
  readonly problem: string
  constructor(at: string, problem: string) {
    this.at = at
    this.problem = problem
  }
}

export const notRegular = (at: string, what: string) =>
  new InTheWay(at, `the file is ${what}, not a regular file: a store uses no other`)


interface Opened {
  readonly handle: NodeFs.promises.FileHandle
  /** The file's size when it was opened. */
  readonly size: number
}

/** Opens a file that must be a regular file, not following a link; `undefined` when it does not exist. */
export const openRegular = async (at: string, flags: number): Promise<Opened | undefined> => {
  let handle: NodeFs.promises.FileHandle
  try {
    handle = await NodeFs.promises.open(at, flags | O_NOFOLLOW | O_NONBLOCK)
  } catch (error) {
    const code = errnoCode(error)
    if (code === "ENOENT") return undefined
    if (code === "ELOOP") throw notRegular(at, "a symbolic link")
    if (code === "EISDIR") throw notRegular(at, "a directory")
    throw error
  }
  const stat = await handle.stat().catch(async (error: unknown) => {
    await handle.close()
    throw error
  })
  if (!stat.isFile()) {
    await handle.close()
    throw notRegular(at, kindOf(stat))
  }
  return { handle, size: stat.size }
}

export const using = async <A>(handle: NodeFs.promises.FileHandle, use: () => Promise<A>): Promise<A> => {
  try {
    return await use()
  } finally {
    await handle.close()
  }
}

/** The first `limit` bytes of a regular file, and its size; `undefined` when it is missing. */
export const readRegular = async (at: string, limit: number): Promise<FileBytes | undefined> => {
  const opened = await openRegular(at, O_RDONLY)
  if (opened === undefined) return undefined
  const { handle, size } = opened
  return using(handle, async () => {
    const bytes = new Uint8Array(Math.min(size, limit))
    let read = 0
    while (read < bytes.length) {
      const { bytesRead } = await handle.read(bytes, read, bytes.length - read, read)
      if (bytesRead === 0) break
      read += bytesRead
    }
    return { bytes: bytes.subarray(0, read), size }
  })
}

export const writeAll = async (handle: NodeFs.promises.FileHandle, data: Uint8Array, offset: number): Promise<void> => {
  let written = 0
  while (written < data.length) {
    const { bytesWritten } = await handle.write(data, written, data.length - written, offset + written)
    written += bytesWritten
  }
}

/** Unlinks whatever has this name (a link goes, not what it points to); a directory is in the way. */
export const clear = async (at: string): Promise<void> => {
  try {
    await NodeFs.promises.unlink(at)
  } catch (error) {
    const code = errnoCode(error)
    if (code === "ENOENT") return
    // unlink of a directory is EISDIR on Linux, EPERM elsewhere (EPERM may also be a real permission error)
    if (code === "EISDIR" || (code === "EPERM" && (await NodeFs.promises.lstat(at)).isDirectory())) {
      throw notRegular(at, "a directory")
    }
    throw error
  }
}

/** Creates a file that did not exist (after clearing its name), writes it whole and makes it durable. */
export const writeNew = async (at: string, data: Uint8Array): Promise<void> => {
  await clear(at)
  let handle: NodeFs.promises.FileHandle
  try {
    // O_EXCL with O_CREAT fails on any name that exists, a link (even dangling) included
    handle = await NodeFs.promises.open(at, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, fileMode)
  } catch (error) {
    if (errnoCode(error) === "EEXIST") throw new InTheWay(at, "something took the file's name while it was written")
    throw error
  }
  await using(handle, async () => {
    await writeAll(handle, data, 0)
    await handle.sync()
  })
}

/** Opens a directory to fsync it, so that a rename or a new file in it survives a power loss. */
export const syncDirectory = async (at: string): Promise<void> => {
  const handle = await NodeFs.promises.open(at, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK)
  await using(handle, () => handle.sync())
}

/**
 * Checks that a session's directory is one (when it exists): a link there
 * could lead the store's reads and writes out of the store.
 */
export const checkDirectory = async (at: string): Promise<boolean> => {
  let stat: NodeFs.Stats
  try {
    stat = await NodeFs.promises.lstat(at)
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return false
    throw error
  }
  if (stat.isDirectory()) return true
  throw new InTheWay(at, `the session directory is ${kindOf(stat)}, not a directory: a store never follows one`)
}
