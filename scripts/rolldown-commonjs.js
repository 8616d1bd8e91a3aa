/**
 * What rolldown needs told about CommonJS packages, for the command's bundle (`scripts/bundle.js`) and the
 * tests' bundled child scripts (`test/children.ts`).
 */
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"

/**
 * `export * from "x"` where `x` is CommonJS: Node finds the names `x` exports by reading its source, a bundler
 * cannot, and the bundle would export none of them (seen: `@effect/platform-node/Undici` re-exports undici, and
 * `new Undici.Agent` failed in every model request). Such a module is rewritten to name each export, as found
 * by loading `x` here.
 */
export const reexportsOfCommonJs = {
  name: "effect-agent:reexports-of-commonjs",
  async transform(code, id) {
    if (!id.includes("/node_modules/")) return null
    let out = code
    for (const [line, specifier] of code.matchAll(/^export \* from ["']([^"'.][^"']*)["'];?$/gm)) {
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

/**
 * The optional native bindings some dependencies try, and fall back from when they are missing (pg's
 * `pg-native`, ws's `bufferutil` and `utf-8-validate`): left as imports, as in node_modules.
 */
export const optionalNative = ["pg-native", "bufferutil", "utf-8-validate"]
