/**
 * The offline demo: a trip-planning agent on ScriptedModel (no keys, no
 * network). It checks the weather in two cities and looks up flights in
 * parallel; while those tools run, the user steers it ("prefer trains"); the
 * steering reaches the model after the batch, and the model changes its plan.
 * Every event is printed as it happens.
 *
 * The demo's code is `src/cli/internal/Demo.ts`, since `effect-agent demo` runs it too.
 * Run it with `npm run demo` (this file, the event log) or `effect-agent demo`
 * (the live view on a terminal).
 */
import { Effect } from "effect"
import * as Demo from "../src/cli/internal/Demo.ts"
import * as View from "../src/cli/internal/View.ts"

/** The demo as an Effect; `write` receives the log. */
export const demo = (write: (text: string) => void) => {
  const color = process.stdout.isTTY === true
  return Demo.run({ view: View.log(write, { color }), write, color })
}

if (process.argv[1] !== undefined && import.meta.url === new URL(process.argv[1], "file://").href) {
  Effect.runPromise(demo((text) => process.stdout.write(text))).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
