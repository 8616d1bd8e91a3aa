/**
 * A runner of durable sessions, as its own process (the cluster tests kill
 * it): `durable-runner.ts <postgres url> <port> <log dir>`. Prints `ready`
 * once it has joined the cluster.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { node } from "./cluster-fixture.ts"

const [url, port, logDir] = process.argv.slice(2)
if (url === undefined || port === undefined || logDir === undefined) {
  console.error("usage: durable-runner.ts <postgres url> <port> <log dir>")
  process.exit(2)
}

NodeRuntime.runMain(
  Effect.scoped(Effect.gen(function*() {
    yield* Layer.build(node(url, Number(port), logDir))
    console.log("ready")
    return yield* Effect.never
  })),
  { disableErrorReporting: false }
)
