/**
 * The command's bundle: `dist/bin/effect-agent.js` (the package's `bin`), built from `dist/cli/main.js` after
 * `tsc` by rolldown, with what it imports (effect, `@effect/platform-node`, the PostgreSQL client) inside.
 *
 *   node scripts/bundle.js
 *
 * (JavaScript, not TypeScript: the tests build the package under node_modules/.cache, where Node strips no
 * types.)
 *
 * Why a bundle: unbundled, each start of the command loads about a thousand modules, one file each, and that
 * is most of its start-up time (measured with `bench/cli-start.ts`: `--version` 0.40 s against 0.13 s
 * bundled, on two cores). The library's entry points (`effect-agent`, `effect-agent/cli`, …) stay
 * unbundled `dist/`, sharing the app's own copy of effect; only the command is an app of its own.
 *
 * Subcommands stay lazy: each one's modules are a chunk of their own, loaded when it runs. The chunks sit
 * beside the entry, two levels below the package's root as `dist/cli/` is, so `../../package.json` holds.
 * The bundle is not minified, so a stack trace names the functions and the code reads as written; it has no
 * source maps (Node reads them only under `--enable-source-maps`, and they would triple the package's size).
 * License comments are kept.
 */
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { build } from "rolldown"

const root = fileURLToPath(new URL("..", import.meta.url))
const input = Path.join(root, "dist/cli/main.js")
const out = Path.join(root, "dist/bin")

if (!Fs.existsSync(input)) {
  process.stderr.write(`scripts/bundle.js: no ${Path.relative(root, input)}: run tsc -p tsconfig.build.json first\n`)
  process.exit(1)
}
Fs.rmSync(out, { recursive: true, force: true })

/**
 * `export * from "x"` where `x` is CommonJS: Node finds the names `x` exports by reading its source, a bundler
 * cannot, and the bundle would export none of them (seen: `@effect/platform-node/Undici` re-exports undici, and
 * `new Undici.Agent` failed in every model request). Such a module is rewritten to name each export, as found
 * by loading `x` here.
 */
const reexportsOfCommonJs = {
  name: "effect-agent:reexports-of-commonjs",
  async transform(code, id) {
    if (!id.includes("/node_modules/")) return null
    let out = code
    for (const [line, specifier] of code.matchAll(/^export \* from "([^".][^"]*)";?$/gm)) {
      // resolved as an import, as the bundle resolves it (a package may give import its own ESM entry)
      const resolved = (await this.resolve(specifier, id))?.id
      if (resolved === undefined) throw new Error(`scripts/bundle.js: ${id} re-exports ${specifier}, which is not found`)
      if (isEsm(resolved)) continue
      const names = Object.keys(createRequire(id)(resolved)).filter((name) => /^[A-Za-z_$][\w$]*$/.test(name) && name !== "default")
      if (names.length === 0) throw new Error(`scripts/bundle.js: ${id} re-exports ${specifier}, which exports no names`)
      const local = `__reexported_${names.length}`
      out = out.replace(line, `import ${local} from "${specifier}";\nexport const { ${names.join(", ")} } = ${local};`)
    }
    return out === code ? null : { code: out }
  }
}

/** Whether Node loads `file` as an ES module: by its extension, else by its nearest package.json's `type`. */
const isEsm = (file) => {
  if (file.endsWith(".mjs")) return true
  if (file.endsWith(".cjs") || file.startsWith("node:") || !Path.isAbsolute(file)) return false
  for (let dir = Path.dirname(file); dir !== Path.dirname(dir); dir = Path.dirname(dir)) {
    const manifest = Path.join(dir, "package.json")
    if (Fs.existsSync(manifest)) return JSON.parse(Fs.readFileSync(manifest, "utf8")).type === "module"
  }
  return false
}

await build({
  input,
  platform: "node",
  plugins: [reexportsOfCommonJs],
  // The optional native bindings some dependencies try, and fall back from when they are missing (pg's
  // `pg-native`, ws's `bufferutil` and `utf-8-validate`): left as imports, as in node_modules.
  external: ["pg-native", "bufferutil", "utf-8-validate"],
  logLevel: "warn",
  output: {
    dir: out,
    format: "esm",
    entryFileNames: "effect-agent.js",
    chunkFileNames: "[name]-[hash].js",
    comments: { legal: true, annotation: false, jsdoc: false }
  }
})

// npm makes a bin executable when it installs the package; a local build is run as ./dist/bin/effect-agent.js too.
Fs.chmodSync(Path.join(out, "effect-agent.js"), 0o755)
