/**
 * docs/plugins-and-steering.md and docs/typed-output.md: each example's code
 * block is a file in `examples/` (which the typecheck compiles), and each
 * file, run as a user would run it, prints what the page says it prints.
 */
import { assert, describe, it } from "@effect/vitest"
import { checkExample, read } from "./pages.ts"

const cases = [
  ["plugins-and-steering", "Plugins: block, rewrite, observe", "examples/plugins.ts"],
  ["plugins-and-steering", "Steering and follow-ups", "examples/steering.ts"],
  ["plugins-and-steering", "Approvals", "examples/approvals.ts"],
  ["plugins-and-steering", "Plugins' own outcomes and events", "examples/plugin-outcomes.ts"],
  ["typed-output", "Example: choosing a flight", "examples/typed-output.ts"]
] as const

describe.concurrent("docs: plugins, steering, approvals and typed output", () => {
  it("says how messages and events are told apart", () => {
    assert.match(read("plugins-and-steering"), /Messages are told apart by their `role`[^.]*,\s+events\s+by\s+their\s+`_tag`/)
  })

  for (const [page, title, example] of cases) {
    it(`${page}, ${title}: the block is ${example}, and it prints what the page shows`, () =>
      checkExample(page, title, example))
  }
})
