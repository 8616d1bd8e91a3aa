/**
 * The README's sections on plugins, steering and approvals: each code block
 * is a file in `examples/` (which the typecheck compiles), and each file,
 * run as a user would run it, prints what the README says it prints.
 */
import { assert, describe, it } from "@effect/vitest"
import { checkExample, readme } from "./readmeExample.ts"

const cases = [
  ["Plugins: block, rewrite, observe", "plugins"],
  ["Steering and follow-ups", "steering"],
  ["Approvals", "approvals"],
  ["Typed final output", "typed-output"],
  ["Plugins' own outcomes and events", "plugin-outcomes"]
] as const

describe.concurrent("README: plugins, steering and approvals", () => {
  it("says how messages and events are told apart", () => {
    assert.match(readme, /Messages are told apart by their `role`[^.]*,\s+events\s+by\s+their\s+`_tag`/)
  })

  for (const [title, name] of cases) {
    it(`${title}: the block is examples/${name}.ts, and it prints what the README shows`, () => checkExample(title, name))
  }
})
