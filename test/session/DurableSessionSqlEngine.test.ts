/**
 * Durable sessions on the sessions' own SQL engine (`DurableSession.layerSqlEngine`) across real processes:
 * runner processes that share a local PostgreSQL and nothing else, this process a client. Runners are SIGKILLed
 * at random moments; a session waiting for approval outlives every runner. Skipped, saying why, where
 * PostgreSQL cannot be had.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Random } from "effect"
import { SqlClient } from "effect/sql"
import { DurableSession } from "effect-agent/session"
import * as fs from "node:fs"
import * as path from "node:path"
import { assertValidTranscript } from "../support.ts"
import { sqlNode, turnsOf } from "./cluster-fixture.ts"
import {
  allFinished,
  available,
  checkCharge,
  counts,
  finishedApprovedAndSteered,
  inProcess,
  kills,
  lines,
  scratch,
  startRunner,
  waitForEvent
} from "./cluster-harness.ts"

const runner = (url: string, logDir: string) => startRunner(url, 0, logDir, {}, "sql")

describe.skipIf("unavailable" in available)("DurableSession on the SQL engine, across processes", () => {
  it.live(
    `a runner SIGKILLed while every session is mid-turn, then ${kills} more kills at random moments: every ` +
      "session moves and completes with Agent.run's transcript, no charge twice, each event once and in order",
    () =>
      Effect.gen(function*() {
        const { logDir, pg } = yield* scratch
        const runners = [yield* runner(pg.url, logDir)]
        const ids = Array.from({ length: 6 }, (_, i) => `q${i}-t${4 + (i % 3) + (kills > 3 ? 8 : 0)}`)
        const { published, statuses } = yield* Effect.gen(function*() {
          // Every session held in its first step (its first model call made and kept) on the first runner.
          fs.writeFileSync(path.join(logDir, "hold"), "")
          for (const sessionId of ids) yield* DurableSession.start({ sessionId, prompt: sessionId })
          yield* Effect.forEach(ids, (sessionId) => waitForEvent(sessionId, "ToolExecutionStart"), { discard: true })
          runners.push(yield* runner(pg.url, logDir))
          yield* runners[0]!.kill({ killSignal: "SIGKILL" })
          fs.rmSync(path.join(logDir, "hold"))
          // The second runner takes them all up once the first's lease has run out. Then more kills, at random.
          runners[0] = yield* runner(pg.url, logDir)
          for (let k = 0; k < kills; k++) {
            yield* Effect.sleep(Duration.millis(300 + (yield* Random.nextIntBetween(0, 1500))))
            const which = (yield* Random.nextIntBetween(0, 1000)) % 2
            yield* runners[which]!.kill({ killSignal: "SIGKILL" })
            runners[which] = yield* runner(pg.url, logDir)
          }
          const statuses = yield* allFinished(ids, "180 seconds")
          const published = yield* Effect.forEach(ids, (sessionId) => DurableSession.events(sessionId))
          return { published, statuses }
        }).pipe(Effect.provide(sqlNode(pg.url, false, logDir)))
        for (const handle of runners) yield* Effect.ignore(handle.kill({ killSignal: "SIGKILL" }))
        const modelCalls = counts(lines(path.join(logDir, "model.log")).map((line) => line.split(" ").slice(0, 2).join(" ")))
        const tools = counts(lines(path.join(logDir, "tools.log")))
        let extraModelCalls = 0
        for (const [i, status] of statuses.entries()) {
          const sessionId = ids[i]!
          assert(status._tag === "Finished", `${sessionId}: ${status._tag}${status._tag === "Died" ? `: ${status.defect}` : ""}`)
          const { messages, outcome } = status.result
          assert.deepStrictEqual(outcome, { _tag: "Completed" })
          assertValidTranscript(messages)
          const turns = turnsOf(sessionId)
          assert.strictEqual(messages.filter((message) => message.role === "assistant").length, turns + 1)
          for (let turn = 0; turn < turns; turn++) {
            checkCharge(sessionId, turn, messages, tools)
            extraModelCalls += (modelCalls.get(`${sessionId} ${turn}`) ?? 0) - 1
          }
          const events = published[i]!
          assert.deepStrictEqual(events.map((entry) => entry.seq), events.map((_, j) => j + 1), sessionId)
          assert.strictEqual(new Set(events.map((entry) => entry.id)).size, events.length, sessionId)
          // a session no call of which was answered "outcome unknown" has exactly Agent.run's transcript and events
          if (!messages.some((message) => message.role === "toolResult" && message.isError)) {
            const expected = yield* inProcess(sessionId)
            assert.deepStrictEqual(messages, expected.messages, sessionId)
            assert.deepStrictEqual(events.map((entry) => entry.event._tag), expected.events, sessionId)
          }
        }
        // The sessions that moved: their model calls were made by more than one runner.
        const byRunner = new Map<string, Set<string>>()
        for (const line of lines(path.join(logDir, "model.log"))) {
          const [sessionId, , , pid] = line.split(" ")
          byRunner.set(sessionId!, (byRunner.get(sessionId!) ?? new Set()).add(pid!))
        }
        const moved = ids.filter((sessionId) => (byRunner.get(sessionId)?.size ?? 0) > 1).length
        console.log(`SQL engine, ${kills} kills: ${moved} of ${ids.length} sessions moved, ${extraModelCalls} model calls again`)
        assert.isAtMost(extraModelCalls, kills)
        assert.strictEqual(moved, ids.length, "each session held mid-turn when its runner died moved")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 240_000 + kills * 30_000 }
  )

  it.live(
    "a session waiting for approval outlives its runners: answered and steered while none runs, it finishes on " +
      "the next runner, the steering delivered once",
    () =>
      Effect.gen(function*() {
        const { logDir, pg } = yield* scratch
        let handle = yield* runner(pg.url, logDir)
        const sessionId = "sq-a-t2"
        yield* Effect.gen(function*() {
          yield* DurableSession.start({ sessionId, prompt: sessionId })
          yield* waitForEvent(sessionId, "ApprovalRequested")
          yield* handle.kill({ killSignal: "SIGKILL" })
          yield* DurableSession.steer(sessionId, "mind the gap")
          assert.isTrue(yield* DurableSession.approve(sessionId, "d0", { approved: true }))
          // the decision is kept while no runner runs: the dead runner still owns the session
          const sql = yield* SqlClient.SqlClient
          const [row] = yield* sql<{ wake: boolean }>`SELECT wake FROM effect_agent_wf_executions`
          assert.strictEqual(row?.wake, true)
          handle = yield* runner(pg.url, logDir)
          yield* finishedApprovedAndSteered(sessionId, "mind the gap")
        }).pipe(Effect.provide(sqlNode(pg.url, false, logDir)))
        yield* Effect.ignore(handle.kill({ killSignal: "SIGKILL" }))
        const tools = counts(lines(path.join(logDir, "tools.log")))
        assert.strictEqual(tools.get(`deploy ${sessionId}/0`), 1)
        assert.strictEqual(tools.get(`charge ${sessionId}/1`), 1)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 180_000 }
  )
})
