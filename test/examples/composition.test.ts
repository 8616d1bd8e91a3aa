/**
 * The README's sections on sub-agents, handoffs and guardrails: each code
 * block is a file in `examples/` (which the typecheck compiles), and each
 * file, run as a user would run it, prints what the README says it prints.
 */
import { describe, it } from "@effect/vitest"
import { checkExample } from "../readmeExample.ts"

const cases = [
  ["Sub-agents", "sub-agents"],
  ["Handoffs", "handoff"],
  ["Guardrails", "guardrails"]
] as const

describe.concurrent("README: sub-agents, handoffs and guardrails", () => {
  for (const [title, name] of cases) {
    it(
      `${title}: the block is examples/${name}.ts, and it prints what the README shows`,
      () => checkExample(title, name),
      30_000
    )
  }
})
