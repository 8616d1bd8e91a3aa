/**
 * The built command, for the tests that run it as a real process: the
 * package as `npm pack` makes it (its `prepack` script builds `dist/`), in
 * `node_modules/.cache/effect-agent-cli/<hash of the sources>/`: the tarball,
 * and the tarball unpacked as `package/`, laid out as installed, whose `bin`
 * is run. The pack runs in a copy of the package's files (the working tree's
 * `dist/` is not touched). Test files share one build (a lock directory
 * makes the others wait for the first), and a later run with the same
 * sources reuses it.
 */
import { execFile } from "node:child_process"
import { createHash } from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

export const root = fileURLToPath(new URL("../..", import.meta.url))

/** The files the pack needs besides `src/`: what the package ships, and the build's configuration. */
const packageFiles = [
  "package.json",
  "README.md",
  "LICENSE",
  "CHANGELOG.md",
  "tsconfig.json",
  "tsconfig.build.json",
  "scripts/bundle.js"
]

/** Runs npm: the one running the tests when there is one, else npm on the PATH. */
export const npm = (args: ReadonlyArray<string>, cwd: string) => {
  const cli = process.env.npm_execpath
  return cli !== undefined && cli.endsWith("npm-cli.js")
    ? promisify(execFile)(process.execPath, [cli, ...args], { cwd })
    : promisify(execFile)("npm", args, { cwd })
}

const inputs = (): Array<string> => {
  const files = [...packageFiles]
  const walk = (dir: string) => {
    for (const entry of Fs.readdirSync(Path.join(root, dir), { withFileTypes: true })) {
      const rel = Path.join(dir, entry.name)
      if (entry.isDirectory()) walk(rel)
      else files.push(rel)
    }
  }
  walk("src")
  return files.sort()
}

const hashOfSources = (): string => {
  const hash = createHash("sha256")
  for (const file of inputs()) hash.update(file).update("\0").update(Fs.readFileSync(Path.join(root, file))).update("\0")
  return hash.digest("hex").slice(0, 16)
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const build = async (dir: string) => {
  // Builds of older sources are not needed any more, once nobody can be using them: another suite on other
  // sources (a worktree sharing node_modules, sources changed mid-run) builds and reads its own within minutes.
  const cache = Path.dirname(dir)
  const hourAgo = Date.now() - 3_600_000
  for (const old of Fs.readdirSync(cache)) {
    if (old === Path.basename(dir) || old.endsWith(".lock") || Fs.existsSync(Path.join(cache, `${old}.lock`))) continue
    const used = Fs.statSync(Path.join(cache, old), { throwIfNoEntry: false })?.mtimeMs ?? 0
    if (used < hourAgo) Fs.rmSync(Path.join(cache, old), { recursive: true, force: true })
  }
  Fs.rmSync(dir, { recursive: true, force: true })
  const stage = Path.join(dir, "stage")
  Fs.mkdirSync(stage, { recursive: true })
  for (const file of packageFiles) {
    Fs.mkdirSync(Path.dirname(Path.join(stage, file)), { recursive: true })
    Fs.copyFileSync(Path.join(root, file), Path.join(stage, file))
  }
  Fs.cpSync(Path.join(root, "src"), Path.join(stage, "src"), { recursive: true })
  Fs.symlinkSync(Path.join(root, "node_modules"), Path.join(stage, "node_modules"))
  await npm(["pack", "--pack-destination", dir], stage)
  const tarball = Fs.readdirSync(dir).find((file) => file.endsWith(".tgz"))
  if (tarball === undefined) throw new Error(`npm pack left no tarball in ${dir}`)
  Fs.renameSync(Path.join(dir, tarball), Path.join(dir, "package.tgz"))
  await promisify(execFile)("tar", ["-xzf", "package.tgz"], { cwd: dir })
  Fs.rmSync(stage, { recursive: true, force: true })
  // npm makes a package's bin executable when it installs it.
  const bin: Record<string, string> = JSON.parse(Fs.readFileSync(Path.join(dir, "package/package.json"), "utf8")).bin
  for (const file of Object.values(bin)) Fs.chmodSync(Path.join(dir, "package", file), 0o755)
  Fs.writeFileSync(Path.join(dir, "ready"), "")
}

/** Whether the process holding the build's lock is gone (a lock without its pid: after five minutes). */
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

const buildDir = () => Path.join(root, "node_modules/.cache/effect-agent-cli", hashOfSources())

/**
 * The build this process found or made, once it is ready: a test that starts the command many times (the
 * runners) hashes the sources once. A failed build is not kept: the next caller tries again.
 */
let found: Promise<string> | undefined

/** The directory of the packed tarball and the package unpacked from it (building them if needed). */
const built = (): Promise<string> => {
  found ??= building().catch((error: unknown) => {
    found = undefined
    throw error
  })
  return found
}

const building = async (): Promise<string> => {
  const dir = buildDir()
  const lock = `${dir}.lock`
  const ready = Path.join(dir, "ready")
  const deadline = Date.now() + 240_000
  Fs.mkdirSync(Path.dirname(dir), { recursive: true })
  while (!Fs.existsSync(ready)) {
    if (Date.now() > deadline) throw new Error(`the build in ${dir} did not finish`)
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
    try {
      await build(dir)
    } finally {
      Fs.rmSync(lock, { recursive: true, force: true })
    }
  }
  return dir
}

/** The tarball `npm pack` made. */
export const builtTarball = async (): Promise<string> => Path.join(await built(), "package.tgz")

/** The directory of the built package, unpacked from its tarball (building it if needed). */
export const builtPackage = async (): Promise<string> => Path.join(await built(), "package")

/** The built command: the package's `bin`, `dist/bin/effect-agent.js` (the bundle). */
export const builtCommand = async (): Promise<string> => Path.join(await builtPackage(), "dist/bin/effect-agent.js")
