/**
 * Signals to `effect-agent runner --pg` while its sessions run: SIGTERM and
 * SIGINT stop it cleanly and hand its sessions over, a second signal exits at
 * once. Apart from Cluster.test.ts so that the two run beside each other: both
 * mostly wait on the cluster's timers. Skipped, saying why, where PostgreSQL
 * cannot be had.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, FileSystem, Layer, Schedule } from "effect"
import { Message } from "effect-agent"
import { DurableSession } from "effect-agent/session"
import * as Postgres from "../session/postgres.ts"
import { scripted } from "./support.ts"
import { available, clientOf, marking, runner, settled, submit, until } from "./cluster-support.ts"

describe.skipIf("unavailable" in available)("effect-agent runner --pg, signalled", () => {
  // Before, a runner given SIGTERM or SIGINT never exited: its database pool was closed before its sharding (the
  // database was provided around the runner's body, inside the scope of the layers that use it), so the sharding's
  // stop retried for ever; it kept its runner row and its shard locks, and the sessions on its shards stalled.
  it.live(
    "attack: SIGTERM, SIGINT, and SIGTERM after a pg_ctl restart, to a runner while sessions run: it exits 0 in bounded time, its shard locks and runner row released, and every session finishes on the other runner",
    () =>
      Effect.gen(function*() {
        const pg = yield* Postgres.scoped
        const fs = yield* FileSystem.FileSystem
        const client = yield* Layer.build(clientOf(pg))
        yield* runner(pg, yield* scripted(marking(3)), "bash", ["--approve", "all"])
        const cases = [
          { signal: "SIGTERM", restart: false },
          { signal: "SIGINT", restart: false },
          { signal: "SIGTERM", restart: true }
        ] as const
        for (const [round, { restart, signal }] of cases.entries()) {
          const dir = yield* scripted(marking(3))
          const stopping = yield* runner(pg, dir, "bash", ["--approve", "all"])
          yield* until(pg, "settled on two runners", settled(2), "90 seconds")
          if (restart) {
            pg.restart()
            // each runner finds its locks gone at its next refresh, and takes its shards again
            yield* until(pg, "settled again after the restart", settled(2), "90 seconds")
          }
          // Sessions, until one runs on the runner to stop: its call is in flight when the signal comes. (Submitted
          // from this process: run --pg as their client is the other tests'.)
          const ids: Array<string> = []
          for (let batch = 0; batch < 5 && !(yield* fs.exists(`${dir}/ran.txt`)); batch++) {
            for (let i = 0; i < 4; i++) {
              const sessionId = `sig-${round}-${batch}-${i}`
              yield* DurableSession.start({ sessionId, prompt: "go" }).pipe(Effect.provide(client))
              ids.push(sessionId)
            }
            yield* fs.exists(`${dir}/ran.txt`).pipe(
              Effect.repeat({ until: (ran) => ran, schedule: Schedule.spaced("100 millis") }),
              Effect.timeoutOption("20 seconds")
            )
          }
          assert.isTrue(yield* fs.exists(`${dir}/ran.txt`), "no session ran on the runner to stop")
          const signalled = yield* Clock.currentTimeMillis
          yield* stopping.process.signal(signal)
          const stopped = yield* stopping.process.exit
          const took = (yield* Clock.currentTimeMillis) - signalled
          assert.strictEqual(stopped.code, 0, stopped.stderr)
          assert.include(stopped.stderr, "effect-agent runner: stopping: handing its sessions to the other runners")
          assert.include(stopped.stderr, "effect-agent runner: stopped\n")
          // it waits for its calls in flight (3 s); its bound is 140 s (the entity termination timeout, a lock
          // refresh interval, 10 s)
          assert.isBelow(took, 60_000)
          // its runner row is gone, and the other runner holds every shard
          yield* until(
            pg,
            "handed over",
            (state) => !state.runners.includes(`127.0.0.1:${stopping.port}`) && state.locks.length === 1 && state.locks[0] === 300,
            "60 seconds"
          )
          // every session finished, on the runner left
          const statuses = yield* Effect.forEach(ids, (sessionId) => DurableSession.poll(sessionId)).pipe(
            Effect.repeat({
              until: (statuses) => statuses.every((status) => status._tag !== "Unknown" && status._tag !== "Suspended"),
              schedule: Schedule.spaced("250 millis")
            }),
            Effect.timeout("60 seconds"),
            Effect.provide(client)
          )
          for (const [i, status] of statuses.entries()) {
            assert(status._tag === "Finished", `${ids[i]}: ${status._tag}`)
            assert.deepStrictEqual(status.result.outcome, { _tag: "Completed" })
            assert.strictEqual(Message.textOf(status.result.messages.at(-1)!), "done.", ids[i])
          }
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    600_000
  )

  // Before, a second signal did nothing: the runner went on waiting for its calls in flight (up to 2 minutes). The
  // first stops it cleanly, waiting for its call in flight (30 s); the second cuts that short.
  it.live(
    "attack: a second SIGTERM exits a stopping runner at once (exit 1, saying so), and its session finishes on a runner started after",
    () =>
      Effect.gen(function*() {
        const pg = yield* Postgres.scoped
        const fs = yield* FileSystem.FileSystem
        const dir = yield* scripted(marking(30))
        const stopping = yield* runner(pg, dir, "bash", ["--approve", "all"])
        const client = yield* submit(pg, "second-signal", "go")
        // its 30 s call is in flight
        yield* fs.exists(`${dir}/ran.txt`).pipe(
          Effect.repeat({ until: (ran) => ran, schedule: Schedule.spaced("100 millis") }),
          Effect.timeout("30 seconds")
        )
        yield* stopping.process.signal("SIGTERM")
        // the stop has begun (its runner row is gone), and waits for the call in flight
        yield* until(pg, "unregistered", (state) => !state.runners.includes(`127.0.0.1:${stopping.port}`), "30 seconds")
        const signalled = yield* Clock.currentTimeMillis
        yield* stopping.process.signal("SIGTERM")
        const stopped = yield* stopping.process.exit
        assert.isBelow((yield* Clock.currentTimeMillis) - signalled, 10_000)
        assert.strictEqual(stopped.code, 1, stopped.stderr)
        assert.include(stopped.stderr, "effect-agent: a second signal: exiting at once")
        // (the call cut short is not made again: a bash call answers "outcome unknown" when replayed)
        yield* runner(pg, yield* scripted(marking(30)), "bash", ["--approve", "all"])
        const done = yield* client.exit
        assert.strictEqual(done.code, 0, done.stderr)
        assert.strictEqual(done.stdout, "done.\n")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    180_000
  )

})
