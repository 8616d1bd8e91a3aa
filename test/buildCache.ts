/**
 * A build the tests share, kept in `node_modules/.cache/<name>/<hash of its
 * inputs>/`: the first process that needs it builds it under a lock
 * directory, the others wait for it, and a later run on the same inputs
 * reuses it. Builds of other inputs are removed an hour after their last use.
 * The built command (`test/cli/build.ts`) and the bundled child scripts
 * (`test/children.ts`) are two.
 */
import { createHash } from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

export const root = fileURLToPath(new URL("..", import.meta.url))

/** The files under `dirs` (relative to the root) that `keep` keeps, sorted. */
export const filesUnder = (dirs: ReadonlyArray<string>, keep: (file: string) => boolean = () => true): Array<string> => {
  const files: Array<string> = []
  const walk = (dir: string) => {
    for (const entry of Fs.readdirSync(Path.join(root, dir), { withFileTypes: true })) {
      const rel = Path.join(dir, entry.name)
      if (entry.isDirectory()) walk(rel)
      else if (keep(rel)) files.push(rel)
    }
  }
  for (const dir of dirs) walk(dir)
  return files.sort()
}

/** A hash of the files' names and contents (relative to `from`, the root by default). */
export const hashOf = (files: ReadonlyArray<string>, from: string = root): string => {
  const hash = createHash("sha256")
  for (const file of files) hash.update(file).update("\0").update(Fs.readFileSync(Path.join(from, file))).update("\0")
  return hash.digest("hex").slice(0, 16)
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Whether the process holding a lock is gone (a lock without its pid: after five minutes). */
const lockAbandoned = (lock: string): boolean => {
  let pid = Number.NaN
  try {
    pid = Number.parseInt(Fs.readFileSync(Path.join(lock, "pid"), "utf8"), 10)
  } catch {
    // not written yet, or the lock is gone
  }
  if (Number.isNaN(pid)) {
    const since = Fs.statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()
    return Date.now() - since > 300_000
  }
  try {
    process.kill(pid, 0)
    return false
  } catch (error) {
    // ESRCH: no such process (EPERM: it is there, another user's)
    return error instanceof Error && "code" in error && error.code === "ESRCH"
  }
}

/** Marks a build used now: the cleanup below removes only builds nobody has used for an hour. */
const used = (dir: string): string => {
  const now = new Date()
  Fs.utimesSync(dir, now, now)
  return dir
}

/**
 * The directory of the build `name` of `files` (paths from the root), once `make` has filled it (in this
 * process or another): made here when no other process is making it.
 *
 * `make` builds from a copy of the files (`stage`, with `node_modules` linked), hashed as copied: the build in
 * `<hash>/` holds exactly the files of that hash, though they change in the working tree while it runs (an
 * editor's save, a `git checkout`). A build is first looked up by the working tree's hash.
 */
export const buildOnce = async (
  name: string,
  files: () => ReadonlyArray<string>,
  make: (stage: string, dir: string) => Promise<void>
): Promise<string> => {
  const cache = Path.join(root, "node_modules/.cache", name)
  const deadline = Date.now() + 240_000
  Fs.mkdirSync(cache, { recursive: true })
  // Hashed once: a process waiting for another's build reads the files again only when it builds them itself.
  const hash = hashOf(files())
  const dir = Path.join(cache, hash)
  while (true) {
    if (Fs.existsSync(Path.join(dir, "ready"))) return used(dir)
    if (Date.now() > deadline) throw new Error(`the build in ${dir} did not finish`)
    const lock = `${dir}.lock`
    try {
      Fs.mkdirSync(lock, { recursive: false })
      Fs.writeFileSync(Path.join(lock, "pid"), String(process.pid))
    } catch {
      // Another process is building (npm test's runner, or another test file). A lock whose process is
      // gone (a run stopped with Ctrl-C) is taken over at once, one without a pid after five minutes.
      if (lockAbandoned(lock)) Fs.rmSync(lock, { recursive: true, force: true })
      await sleep(250)
      continue
    }
    const stage = Fs.mkdtempSync(Path.join(cache, "stage-"))
    try {
      // Builds of other inputs are not needed any more, once nobody can be using them: another suite on other
      // sources (a worktree sharing node_modules, sources changed mid-run) builds and reads its own within
      // minutes, and marks it used each time it finds it.
      const hourAgo = Date.now() - 3_600_000
      for (const old of Fs.readdirSync(cache)) {
        if (old === hash || old.endsWith(".lock") || Fs.existsSync(Path.join(cache, `${old}.lock`))) continue
        const at = Fs.statSync(Path.join(cache, old), { throwIfNoEntry: false })?.mtimeMs ?? 0
        if (at < hourAgo) Fs.rmSync(Path.join(cache, old), { recursive: true, force: true })
      }
      const copied = files()
      for (const file of copied) {
        Fs.mkdirSync(Path.dirname(Path.join(stage, file)), { recursive: true })
        Fs.copyFileSync(Path.join(root, file), Path.join(stage, file))
      }
      Fs.symlinkSync(Path.join(root, "node_modules"), Path.join(stage, "node_modules"))
      const built = Path.join(cache, hashOf(copied, stage))
      if (Fs.existsSync(Path.join(built, "ready"))) return used(built)
      Fs.rmSync(built, { recursive: true, force: true })
      Fs.mkdirSync(built, { recursive: true })
      await make(stage, built)
      Fs.writeFileSync(Path.join(built, "ready"), "")
      return built
    } finally {
      Fs.rmSync(stage, { recursive: true, force: true })
      Fs.rmSync(lock, { recursive: true, force: true })
    }
  }
}

/**
 * `build`, run once per process while it succeeds: a test that needs the build many times (each runner it
 * starts) hashes the inputs once. A failed build is not kept: the next caller tries again.
 */
export const once = (build: () => Promise<string>): () => Promise<string> => {
  let found: Promise<string> | undefined
  return () => {
    found ??= build().catch((error: unknown) => {
      found = undefined
      throw error
    })
    return found
  }
}
