import { availableParallelism } from "node:os"
import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const src = (path: string) => fileURLToPath(new URL(`./src/${path}`, import.meta.url))

// Node's on-disk compile cache, for the processes the tests start (the CLI, the crash tests' children): they
// load the same modules again and again, most of them TypeScript that Node strips.
process.env.NODE_COMPILE_CACHE ??= fileURLToPath(new URL("./node_modules/.cache/node-compile-cache", import.meta.url))

export default defineConfig({
  resolve: {
    // Tests, examples and the README import the package by its public name, as users do.
    alias: [
      { find: /^effect-agent\/testing$/, replacement: src("testing/index.ts") },
      { find: /^effect-agent\/cli$/, replacement: src("cli/index.ts") },
      { find: /^effect-agent$/, replacement: src("index.ts") }
    ]
  },
  test: {
    include: ["test/**/*.test.ts", "bench/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // vitest's default is one worker less than the cores: one worker on two cores. Many files wait on
    // processes and servers, so one more worker than cores keeps the cores busy.
    maxWorkers: availableParallelism() + 1,
    // Files run one after another in a worker, sharing its loaded modules: a test that changes global state
    // (process.env, a spied method) restores it.
    isolate: false
  }
})
