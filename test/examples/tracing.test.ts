/**
 * docs/telemetry.md's example: its code block is `examples/tracing.ts`, and
 * the file, run as a user would run it (it starts a local OTLP receiver),
 * prints what the page shows.
 */
import { describe, it } from "@effect/vitest"
import { checkExample } from "../pages.ts"

describe("docs: traces and metrics", () => {
  it("the example is examples/tracing.ts, and it prints the span tree the page shows", () =>
    checkExample("telemetry", "Example: a run's spans over OTLP", "examples/tracing.ts"))
})
