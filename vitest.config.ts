import { existsSync } from "node:fs"
import { availableParallelism } from "node:os"
import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"
import { BaseSequencer, type TestSpecification } from "vitest/node"

const src = (path: string) => fileURLToPath(new URL(`./src/${path}`, import.meta.url))

// Node's on-disk compile cache, for the processes the tests start (the CLI, the crash tests' children): they
// load the same modules again and again, most of them TypeScript that Node strips.
process.env.NODE_COMPILE_CACHE ??= fileURLToPath(new URL("./node_modules/.cache/node-compile-cache", import.meta.url))

/**
 * The files that run a cluster of processes on PostgreSQL for a minute or more, mostly waiting on its timers
 * (failover, lock refresh): started first, the others run beside them instead of after.
 */
const longest = [
  "test/cli/ClusterSignals.test.ts",
  "test/session/DurableSessionFailover.test.ts",
  "test/session/DurableSessionCluster.test.ts",
  "test/cli/Cluster.test.ts"
]
for (const file of longest) {
  if (!existsSync(fileURLToPath(new URL(file, import.meta.url)))) throw new Error(`vitest.config.ts: no ${file}`)
}
const isLongest = (spec: TestSpecification) => longest.some((file) => spec.moduleId.endsWith(`/${file}`))

/**
 * vitest's order (the longest files first, as measured by an earlier run; else the largest), with the cluster
 * files above first. (The files that run the built command wait for its build, which `npm test` starts beside
 * the tests: about ten seconds.)
 */
class Sequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const sorted = await super.sort(files)
    return [...sorted.filter(isLongest), ...sorted.filter((spec) => !isLongest(spec))]
  }
}

export default defineConfig({
  resolve: {
    // Tests, examples and the README import the package by its public name, as users do.
    alias: [
      { find: /^effect-agent\/testing$/, replacement: src("testing/index.ts") },
      { find: /^effect-agent\/cli$/, replacement: src("cli/index.ts") },
      { find: /^effect-agent\/protocol$/, replacement: src("protocol/index.ts") },
      { find: /^effect-agent\/providers$/, replacement: src("providers/index.ts") },
      { find: /^effect-agent\/sandbox$/, replacement: src("sandbox/index.ts") },
      { find: /^effect-agent\/server$/, replacement: src("server/index.ts") },
      { find: /^effect-agent\/session$/, replacement: src("session/index.ts") },
      { find: /^effect-agent\/supervisor$/, replacement: src("supervisor/index.ts") },
      { find: /^effect-agent$/, replacement: src("index.ts") }
    ]
  },
  test: {
    include: ["test/**/*.test.ts", "bench/**/*.test.ts"],
    // A bound, not a speed: a test that takes 3 s alone takes ten times that beside two other suites on two
    // cores (seen: the import graph, the seeded control lines).
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // vitest's default is one worker less than the cores: one worker on two cores. Many files wait on
    // processes, servers, a database, a browser, and timers of their own: on two cores, five workers keep both
    // busy (measured: the suite took 164 s with three, 138 s with five, for the same CPU time).
    maxWorkers: Math.max(5, availableParallelism() + 1),
    // Files run one after another in a worker, sharing its loaded modules: a test that changes global state
    // (process.env, a spied method) restores it.
    isolate: false,
    sequence: { sequencer: Sequencer }
  }
})
