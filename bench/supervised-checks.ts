/**
 * Checks run in parallel: 4 command checks that each sleep 200 ms, run by
 * a supervised run's first round (the baseline off, a worker that answers at
 * once), take about 200 ms, not 800. Also one check alone, for the fixed
 * cost of a check (spawning the shell). Real processes, real time: a script,
 * not a timed test.
 *
 *   node bench/supervised-checks.ts [runs]
 */
import { NodeServices } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Sandbox } from "../src/sandbox/index.ts"
import { Check, Supervisor, SupervisorEvent, Worker } from "../src/supervisor/index.ts"

const runs = Math.min(20, Math.max(1, Number(process.argv[2] ?? 5)))
const worker = Worker.make("instant", () =>
  Effect.succeed({ text: "done", usage: { inputTokens: 0, outputTokens: 0 }, resumeToken: undefined }))
const sandbox = Sandbox.local(mkdtempSync(join(tmpdir(), "bench-checks-"))).pipe(Layer.provide(NodeServices.layer))

/** Milliseconds from the first CheckStarted to the last CheckResult of a round of `n` checks. */
const round = (n: number, concurrency: number) =>
  Effect.gen(function*() {
    let first = 0
    let last = 0
    const checks = Array.from({ length: n }, (_, i) => Check.command(`sleep ${i}`, "sleep 0.2"))
    const result = yield* Supervisor.run({
      task: "t",
      worker,
      checks,
      baseline: false,
      checkConcurrency: concurrency,
      onEvent: (event) =>
        Effect.sync(() => {
          const tag = SupervisorEvent.tagOf(event)
          if (tag === "CheckStarted" && first === 0) first = performance.now()
          if (tag === "CheckResult") last = performance.now()
        })
    })
    if (result.outcome._tag !== "Converged") throw new Error(`expected Converged, got ${result.outcome._tag}`)
    return last - first
  })

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const program = Effect.gen(function*() {
  const measure = (n: number, concurrency: number) =>
    Effect.map(Effect.forEach(Array.from({ length: runs }), () => round(n, concurrency)), median)
  yield* round(1, 1) // warm-up
  const one = yield* measure(1, 1)
  const parallel = yield* measure(4, 4)
  const serial = yield* measure(4, 1)
  console.log(`runs: ${runs} (median)`)
  console.log(`1 check of 200 ms:                      ${one.toFixed(0)} ms`)
  console.log(`4 checks of 200 ms, checkConcurrency 4: ${parallel.toFixed(0)} ms`)
  console.log(`4 checks of 200 ms, checkConcurrency 1: ${serial.toFixed(0)} ms`)
})

Effect.runPromise(program.pipe(Effect.provide(sandbox)))
