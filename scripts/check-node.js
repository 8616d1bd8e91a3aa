// The Node check of the package's scripts (`node --import ./scripts/check-node.js scripts/test.ts`): on a
// Node older than package.json's `engines.node`, it says which Node is needed and which one is running, and
// exits 22, before Node tries to load the script (older Nodes cannot load TypeScript, and would fail with
// ERR_UNKNOWN_FILE_EXTENSION ".ts"). Plain JavaScript, for that Node to run. The command checks the same
// at its start (src/cli/main.ts); npm checks it at `npm install` (engine-strict in .npmrc).
import * as Fs from "node:fs"

const { name, engines } = JSON.parse(Fs.readFileSync(new URL("../package.json", import.meta.url), "utf8"))
const minimum = /^>=\s*(\d+)\.(\d+)(?:\.(\d+))?\s*$/.exec(engines.node)
if (minimum === null) throw new Error(`package.json's engines.node is not ">=MAJOR.MINOR": ${engines.node}`)
const needed = [Number(minimum[1]), Number(minimum[2]), Number(minimum[3] ?? 0)]
const running = process.versions.node.split(".").map(Number)
const at = needed.findIndex((part, i) => part !== running[i])
if (at !== -1 && running[at] < needed[at]) {
  const version = needed.slice(0, minimum[3] === undefined ? 2 : 3).join(".")
  process.stderr.write(
    `${name}'s scripts need Node.js ${version} or newer, and this is Node.js ${process.versions.node} ` +
      `(${process.execPath}); with nvm: nvm install (it reads .nvmrc)\n`
  )
  process.exit(22)
}
