/**
 * A runner of durable sessions, as its own process (the cluster tests kill
 * it): `durable-runner.ts <postgres url> <port> <log dir>`. Prints `ready`
 * once it has joined the cluster; resumes suspended sessions.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { DurableSession } from "effect-agent/session"
import { node } from "./cluster-fixture.ts"

const [url, port, logDir] = process.argv.slice(2)
if (url === undefined || port === undefined || logDir === undefined) {
  console.error("usage: durable-runner.ts <postgres url> <port> <log dir>")
  process.exit(2)
}

NodeRuntime.runMain(
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(node(url, Number(port), logDir))
    console.log("ready")
    // Sessions that suspended on a failure (the database went away) are resumed.
    return yield* DurableSession.supervise({ every: "1 second" }).pipe(Effect.provideContext(context))
  })),
  { disableErrorReporting: false }
)
