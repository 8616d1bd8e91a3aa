import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const src = (path: string) => fileURLToPath(new URL(`./src/${path}`, import.meta.url))

export default defineConfig({
  resolve: {
    // Tests, examples and the README import the package by its public name, as users do.
    alias: [
      { find: /^effect-agent\/testing$/, replacement: src("testing/index.ts") },
      { find: /^effect-agent\/cli$/, replacement: src("cli/index.ts") },
      { find: /^effect-agent\/providers$/, replacement: src("providers/index.ts") },
      { find: /^effect-agent\/sandbox$/, replacement: src("sandbox/index.ts") },
      { find: /^effect-agent\/server$/, replacement: src("server/index.ts") },
      { find: /^effect-agent\/session$/, replacement: src("session/index.ts") },
      { find: /^effect-agent$/, replacement: src("index.ts") }
    ]
  },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000
  }
})
