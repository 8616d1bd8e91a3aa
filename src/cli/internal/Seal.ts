/**
 * The seal on a session's `run.json`: an HMAC-SHA256 of its content under a
 * key that lives outside every workspace and session directory, in the
 * user's state directory (`$XDG_STATE_HOME/effect-agent/secret`, else
 * `~/.local/state/effect-agent/secret`). `--resume` runs on a `run.json` only
 * when its seal matches, so a file rewritten by anyone without the key
 * (an agent that reached the session directory) is refused.
 *
 * The key is 32 random bytes, created once, readable by its owner only
 * (`0600`, in a `0700` directory): written to a temporary file opened
 * exclusively, then linked to its name, so two commands starting at once
 * agree on one key and neither reads a half-written one. An existing key that
 * is a link, not a regular file, readable by others or of the wrong size is
 * refused, not used.
 *
 * `node:crypto` computes the HMAC: effect has no keyed hash.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import type * as PlatformError from "effect/PlatformError"
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { stateDirectory } from "./stateDirectory.ts"

/**
 * The key could not be read or created, or is unsafe to use.
 *
 * @since 0.1.0
 */
export class SealError extends Data.TaggedError("SealError")<{ readonly message: string }> {}

/**
 * Where the key is kept, from the environment: `$XDG_STATE_HOME` when it is
 * an absolute path (as the XDG spec asks), else `$HOME/.local/state`.
 *
 * @since 0.1.0
 */
export const keyPath = (path: Path.Path, env: Readonly<Record<string, string | undefined>>): string | undefined => {
  const dir = stateDirectory(path, env)
  return dir === undefined ? undefined : path.join(dir, "secret")
}

const keyText = /^[0-9a-f]{64}\n?$/

/** Reads the key through one handle opened without following a link; refuses a file others can read. */
const readKey = (fs: FileSystem.FileSystem, file: string) =>
  Effect.scoped(Effect.gen(function*() {
    const handle = yield* fs.open(file, { flag: "r", noFollow: true })
    const info = yield* handle.stat
    if (info.type !== "File") return yield* new SealError({ message: `${file} is not a regular file` })
    if ((info.mode & 0o077) !== 0) {
      const mode = (info.mode & 0o777).toString(8)
      return yield* new SealError({ message: `${file} can be read or written by other users (mode ${mode})` })
    }
    const bytes = Option.getOrElse(yield* handle.readAlloc(128), () => new Uint8Array())
    const text = new TextDecoder().decode(bytes)
    if (!keyText.test(text)) return yield* new SealError({ message: `${file} does not hold a key` })
    return Buffer.from(text.trim(), "hex")
  }))

const loadOrCreate = (fs: FileSystem.FileSystem, path: Path.Path, file: string) =>
  Effect.gen(function*() {
    const existing = yield* Effect.result(readKey(fs, file))
    if (existing._tag === "Success") return existing.success
    const failure = existing.failure
    if (failure._tag === "SealError" || failure.reason._tag !== "NotFound") return yield* Effect.fail(failure)
    yield* fs.makeDirectory(path.dirname(file), { recursive: true, mode: 0o700 })
    const temp = `${file}.${randomBytes(8).toString("hex")}.tmp`
    const secret = randomBytes(32).toString("hex")
    yield* fs.writeFile(temp, new TextEncoder().encode(`${secret}\n`), { flag: "wx", mode: 0o600 })
    // link() fails when the name exists: whoever links first wins, and every command reads that key.
    yield* fs.link(temp, file).pipe(
      Effect.catchIf((error) => error.reason._tag === "AlreadyExists", () => Effect.void),
      Effect.ensuring(Effect.ignore(fs.remove(temp)))
    )
    return yield* readKey(fs, file)
  })

/**
 * The key: read from {@link keyPath}, created there first if missing.
 *
 * @since 0.1.0
 */
export const key = (env: Readonly<Record<string, string | undefined>>): Effect.Effect<
  Uint8Array,
  SealError,
  FileSystem.FileSystem | Path.Path
> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const file = keyPath(path, env)
    if (file === undefined) {
      return yield* new SealError({
        message: "neither XDG_STATE_HOME nor HOME is an absolute path: there is no place to keep the key"
      })
    }
    return yield* loadOrCreate(fs, path, file).pipe(
      Effect.mapError((error: PlatformError.PlatformError | SealError) =>
        error._tag === "SealError"
          ? error
          : new SealError({ message: `cannot use the key in ${file}: ${error.message}` })
      )
    )
  })

const mac = (secret: Uint8Array, text: string): string =>
  createHmac("sha256", secret).update("effect-agent run.json\n").update(text).digest("hex")

/**
 * The seal of `text` under `secret`.
 *
 * @since 0.1.0
 */
export const sign = (secret: Uint8Array, text: string): string => mac(secret, text)

/**
 * Whether `seal` is the seal of `text` under `secret` (compared in constant
 * time).
 *
 * @since 0.1.0
 */
export const verify = (secret: Uint8Array, text: string, seal: string): boolean => {
  const expected = Buffer.from(mac(secret, text), "hex")
  const given = /^[0-9a-f]{64}$/.test(seal) ? Buffer.from(seal, "hex") : Buffer.alloc(0)
  return given.length === expected.length && timingSafeEqual(given, expected)
}
