/**
 * The scripts the tests start as processes of their own (to kill, restart or
 * signal them), bundled: each start then loads a few files instead of about a
 * thousand modules, which was most of a start's second of CPU, and the suite
 * starts a hundred of them. The bundle is of the same sources (the package's
 * through its `effect-agent-source` condition, as `--conditions` gave them),
 * built by rolldown as the command is (`scripts/bundle.js`), once per change
 * of `src/` or `test/` (`buildCache.ts`).
 *
 * A bundled script cannot find files by its own `import.meta.url` (it is not
 * where its source is): it is told their paths.
 */
import * as Path from "node:path"
import { build } from "rolldown"
import { optionalNative, reexportsOfCommonJs } from "../scripts/rolldown-commonjs.js"
import { buildOnce, filesUnder, once } from "./buildCache.ts"

/** The scripts, by the name of their bundle's entry. */
const scripts = {
  "crash-child": "test/session/crash-child.ts",
  "subagent-child": "test/session/subagent-child.ts",
  "durable-runner": "test/session/durable-runner.ts",
  "replay-safety-child": "test/replay-safety-child.ts",
  "server-child": "test/server/server-child.ts",
  "descriptors-child": "test/sandbox/descriptors-child.ts"
} as const

/** A script of {@link scripts}. */
export type Script = (typeof scripts)[keyof typeof scripts]

const inputs = () =>
  [
    ...filesUnder(["src", "test"], (file) => file.endsWith(".ts") && !file.includes("/fixtures/")),
    "package.json",
    "package-lock.json",
    "scripts/rolldown-commonjs.js"
  ].sort()

const bundled = once(() =>
  buildOnce("effect-agent-children", inputs, async (stage, dir) => {
    await build({
      input: Object.fromEntries(Object.entries(scripts).map(([name, file]) => [name, Path.join(stage, file)])),
      platform: "node",
      cwd: stage,
      resolve: { conditionNames: ["effect-agent-source", "import", "node", "default"] },
      plugins: [reexportsOfCommonJs],
      external: optionalNative,
      logLevel: "warn",
      output: { dir, format: "esm", entryFileNames: "[name].js", chunkFileNames: "[name]-[hash].js" }
    })
  })
)

/** The bundle of `script`, to run as `node <it> ARGS…` (bundling the scripts first, or waiting for them). */
export const childScript = async (script: Script): Promise<string> => {
  const name = Object.entries(scripts).find(([, file]) => file === script)![0]
  return Path.join(await bundled(), `${name}.js`)
}
