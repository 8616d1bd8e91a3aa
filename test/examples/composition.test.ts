/**
 * docs/sub-agents-and-guardrails.md: each code block is a file in
 * `examples/` (which the typecheck compiles), and each file, run as a user
 * would run it, prints what the page says it prints.
 */
import { describe, it } from "@effect/vitest"
import { checkExample } from "../pages.ts"

const cases = [
  ["Sub-agents", "examples/sub-agents.ts"],
  ["Handoffs", "examples/handoff.ts"],
  ["Guardrails", "examples/guardrails.ts"]
] as const

describe.concurrent("docs: sub-agents, handoffs and guardrails", () => {
  for (const [title, example] of cases) {
    it(
      `${title}: the block is ${example}, and it prints what the page shows`,
      () => checkExample("sub-agents-and-guardrails", title, example),
      30_000
    )
  }
})
