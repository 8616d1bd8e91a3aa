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
 * License comments are kept, and `dist/bin/THIRD-PARTY-LICENSES.md` holds the license of each package the bundle
 * took code from.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { build } from "rolldown"
import { optionalNative, reexportsOfCommonJs } from "./rolldown-commonjs.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const input = Path.join(root, "dist/cli/main.js")
const out = Path.join(root, "dist/bin")

if (!Fs.existsSync(input)) {
  process.stderr.write(`scripts/bundle.js: no ${Path.relative(root, input)}: run tsc -p tsconfig.build.json first\n`)
  process.exit(1)
}
Fs.rmSync(out, { recursive: true, force: true })

const output = await build({
  input,
  platform: "node",
  plugins: [reexportsOfCommonJs],
  external: optionalNative,
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

/**
 * The packages the bundle took code from, by their directory under node_modules (a scoped package's too), with
 * their license texts: MIT and Apache-2.0 ask that the notice travels with the code.
 */
const packages = new Map()
for (const chunk of output.output) {
  for (const id of chunk.type === "chunk" ? chunk.moduleIds : []) {
    // not node_modules/.cache/…, where the tests build the package
    const match = /^(.*\/node_modules\/(?:@[^/]+\/)?[^/.][^/]*)\//.exec(id.replaceAll("\\", "/"))
    if (match !== null) packages.set(match[1], undefined)
  }
}
const sections = [...packages.keys()].map((dir) => {
  const manifest = JSON.parse(Fs.readFileSync(Path.join(dir, "package.json"), "utf8"))
  const file = Fs.readdirSync(dir).find((name) => /^(licen[cs]e|copying)(\.(md|txt))?$/i.test(name))
  const text = file === undefined ? `(no license file; package.json says ${manifest.license ?? "nothing"})` : Fs.readFileSync(Path.join(dir, file), "utf8").trim()
  return { name: manifest.name, heading: `## ${manifest.name} ${manifest.version} (${manifest.license ?? "no license field"})`, text }
}).sort((a, b) => a.name.localeCompare(b.name))
Fs.writeFileSync(
  Path.join(out, "THIRD-PARTY-LICENSES.md"),
  `# Third-party licenses\n\nThe command's bundle (\`dist/bin/\`) holds code of these packages, under these licenses.\n\n${
    sections.map(({ heading, text }) => `${heading}\n\n\`\`\`\n${text}\n\`\`\`\n`).join("\n")
  }`
)
