/**
 * Runs example files one after another in this one process, as `node` would
 * run each alone, and prints a JSON line per example on the IPC channel's
 * stand-in, stdout's last line: `{ file, stdout, error }`. What an example
 * writes is captured while it runs; it has finished when its import has
 * settled and nothing it started (a timer, a socket, a server) is left
 * pending, as a process exits then. An error is what would have made its
 * process fail: its import throwing, or a promise it left rejected.
 *
 * One process for every example, rather than one each: each process would
 * load Node, effect and the library again (most of the docs test's time).
 *
 *   node --conditions=effect-agent-source test/run-examples.ts <result file> <example>...
 */
import { writeFileSync } from "node:fs"
import { pathToFileURL } from "node:url"

const [resultFile, ...files] = process.argv.slice(2)
if (resultFile === undefined) {
  process.stderr.write("usage: run-examples.ts <result file> <example>...\n")
  process.exit(2)
}

interface Ran {
  readonly file: string
  readonly stdout: string
  readonly error: string
}

/** What an example has still running: every active resource but this process's own stdio. */
const pending = (): number =>
  process.getActiveResourcesInfo().filter((kind) => kind !== "PipeWrap" && kind !== "TTYWrap").length

const write = process.stdout.write.bind(process.stdout)
let captured = ""
let failed = ""
const capture = (chunk: string | Uint8Array): boolean => {
  captured += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8")
  return true
}
process.on("unhandledRejection", (reason) => {
  failed += `${reason instanceof Error ? reason.stack ?? reason.message : String(reason)}\n`
})
process.on("uncaughtException", (error) => {
  failed += `${error.stack ?? error.message}\n`
})

const tick = () => new Promise<void>((resolve) => setImmediate(resolve))

const results: Array<Ran> = []
for (const file of files) {
  captured = ""
  failed = ""
  process.stdout.write = capture as typeof process.stdout.write
  try {
    await import(pathToFileURL(file).href)
    // Settled: nothing pending for a few turns of the event loop in a row (bounded: 30 s).
    const deadline = Date.now() + 30_000
    let quiet = 0
    while (quiet < 3) {
      await tick()
      quiet = pending() === 0 ? quiet + 1 : 0
      if (Date.now() > deadline) {
        failed += `still running after 30 s: ${process.getActiveResourcesInfo().join(", ")}\n`
        break
      }
    }
  } catch (error) {
    failed += `${error instanceof Error ? error.stack ?? error.message : String(error)}\n`
  } finally {
    process.stdout.write = write
  }
  results.push({ file, stdout: captured, error: failed })
}
writeFileSync(resultFile, JSON.stringify(results))
