/**
 * The built command, for the tests that run it as a real process: the
 * package as `npm pack` makes it (its `prepack` script builds `dist/`), in
 * `node_modules/.cache/effect-agent-cli/<hash of the sources>/`: the tarball,
 * and the tarball unpacked as `package/`, laid out as installed, whose `bin`
 * is run. The pack runs in a copy of the package's files (the working tree's
 * `dist/` is not touched). Test files share one build (`../buildCache.ts`).
 */
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { promisify } from "node:util"
import { buildOnce, filesUnder, once, root } from "../buildCache.ts"

export { root }

/** The files the pack needs besides `src/`: what the package ships, and the build's configuration. */
const packageFiles = [
  "package.json",
  "README.md",
  "LICENSE",
  "CHANGELOG.md",
  "tsconfig.json",
  "tsconfig.build.json",
  "scripts/bundle.js",
  "scripts/rolldown-commonjs.js"
]

/** Runs npm: the one running the tests when there is one, else npm on the PATH. */
export const npm = (args: ReadonlyArray<string>, cwd: string) => {
  const cli = process.env.npm_execpath
  return cli !== undefined && cli.endsWith("npm-cli.js")
    ? promisify(execFile)(process.execPath, [cli, ...args], { cwd })
    : promisify(execFile)("npm", args, { cwd })
}

/**
 * The build's inputs: the package's files, its sources, and the lock file (the bundle holds the dependencies
 * it names).
 */
const inputs = (): Array<string> => [...packageFiles, "package-lock.json", ...filesUnder(["src"])].sort()

/** Packs the staged package (`prepack` builds `dist/`) into `dir`: the tarball, and the package unpacked. */
const build = async (stage: string, dir: string) => {
  await npm(["pack", "--pack-destination", dir], stage)
  const tarball = Fs.readdirSync(dir).find((file) => file.endsWith(".tgz"))
  if (tarball === undefined) throw new Error(`npm pack left no tarball in ${dir}`)
  Fs.renameSync(Path.join(dir, tarball), Path.join(dir, "package.tgz"))
  await promisify(execFile)("tar", ["-xzf", "package.tgz"], { cwd: dir })
  // npm makes a package's bin executable when it installs it.
  const bin: Record<string, string> = JSON.parse(Fs.readFileSync(Path.join(dir, "package/package.json"), "utf8")).bin
  for (const file of Object.values(bin)) Fs.chmodSync(Path.join(dir, "package", file), 0o755)
}

/** The directory of the packed tarball and the package unpacked from it (building them if needed). */
const built = once(() => buildOnce("effect-agent-cli", inputs, build))

/** The tarball `npm pack` made. */
export const builtTarball = async (): Promise<string> => Path.join(await built(), "package.tgz")

/** The directory of the built package, unpacked from its tarball (building it if needed). */
export const builtPackage = async (): Promise<string> => Path.join(await built(), "package")

/** The built command: the package's `bin`, `dist/bin/effect-agent.js` (the bundle). */
export const builtCommand = async (): Promise<string> => Path.join(await builtPackage(), "dist/bin/effect-agent.js")
