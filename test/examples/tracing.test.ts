/**
 * The README's "Traces and metrics: an example": its code block is
 * `examples/tracing.ts`, and the file, run as a user would run it (it
 * starts a local OTLP receiver), prints what the README shows.
 */
import { describe, it } from "@effect/vitest"
import { checkExample } from "../readmeExample.ts"

describe("README: traces and metrics", () => {
  it("the example is examples/tracing.ts, and it prints the span tree the README shows", () =>
    checkExample("Traces and metrics: an example", "tracing"))
})
