/**
 * docs/supervised.md's example: its block is `examples/supervised.ts`, and
 * the file, run as a user runs it, prints what the page shows: red, feedback,
 * green.
 */
import { assert, it } from "@effect/vitest"
import { blocks, checkExample, section } from "../pages.ts"

it("docs/supervised.md's example is examples/supervised.ts, and it prints what the page shows", async () => {
  const title = "Example: fixing `add`"
  await checkExample("supervised", title, "examples/supervised.ts")
  const [printed] = blocks(section("supervised", title), "text")
  assert.match(printed!, /check add \(baseline\): fail[\s\S]*feedback:[\s\S]*check add: pass[\s\S]*Converged after 2 turns\n$/)
})
