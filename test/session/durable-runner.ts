/**
 * A runner of durable sessions, as its own process (the cluster tests kill
 * it): `durable-runner.ts <postgres url> <port> <log dir> [cluster|sql]`.
 * Prints `ready` once it has joined the cluster, then (on the cluster)
 * `shards <n>` each time the number of shards it holds changes (the benchmark
 * waits for the cluster to settle); resumes suspended sessions. `sql`: on the
 * sessions' own SQL engine (the port is not used).
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Schedule } from "effect"
import { Sharding, ShardId } from "effect/cluster"
import { DurableSession } from "effect-agent/session"
import { node, sharding, sqlNode } from "./cluster-fixture.ts"

const [url, port, logDir, kind] = process.argv.slice(2)
const shardsPerGroup = sharding().shardsPerGroup ?? 300
if (url === undefined || port === undefined || logDir === undefined) {
  console.error("usage: durable-runner.ts <postgres url> <port> <log dir>")
  process.exit(2)
}

// A runner outlives its test when the test's worker is killed (a timeout, Ctrl-C): orphaned, it held on to its
// cluster and made later cluster tests on the machine hang. It exits once its parent is gone.
const parent = process.ppid
setInterval(() => {
  if (process.ppid !== parent) process.exit(3)
}, 1000).unref()

NodeRuntime.runMain(
  Effect.scoped(Effect.gen(function*() {
    if (kind === "sql") {
      const context = yield* Layer.build(sqlNode(url, true, logDir))
      console.log("ready")
      return yield* DurableSession.supervise({ every: "1 second" }).pipe(Effect.provideContext(context))
    }
    const context = yield* Layer.build(node(url, Number(port), logDir))
    console.log("ready")
    const held = Effect.map(Sharding.Sharding, (service) => {
      let n = 0
      for (let id = 1; id <= shardsPerGroup; id++) if (service.hasShardId(ShardId.make("default", id))) n++
      return n
    }).pipe(Effect.provideContext(context))
    let last = -1
    yield* held.pipe(
      Effect.tap((n) => Effect.sync(() => n === last ? undefined : console.log(`shards ${last = n}`))),
      Effect.repeat(Schedule.spaced("200 millis")),
      Effect.forkChild
    )
    // Sessions that suspended on a failure (the database went away) are resumed.
    return yield* DurableSession.supervise({ every: "1 second" }).pipe(Effect.provideContext(context))
  })),
  { disableErrorReporting: false }
)
