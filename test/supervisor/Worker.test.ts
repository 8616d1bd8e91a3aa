/**
 * Worker: the contract external workers and our loop share: a turn in, a
 * reply out, typed failures.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { AgentError } from "effect-agent"
import { Worker } from "effect-agent/supervisor"

describe("Worker", () => {
  it.effect("make: a named turn", () =>
    Effect.gen(function*() {
      const worker = Worker.make("echo", (request) =>
        Effect.succeed({
          text: `${request.phase}: ${request.message}`,
          usage: { inputTokens: 1, outputTokens: 2 },
          resumeToken: request.resumeToken ?? "fresh"
        }))
      assert.strictEqual(worker.name, "echo")
      const reply = yield* worker.turn({ message: "hi", phase: "plan", resumeToken: undefined })
      assert.deepStrictEqual(reply, { text: "plan: hi", usage: { inputTokens: 1, outputTokens: 2 }, resumeToken: "fresh" })
    }))

  it.effect("WorkerError: tagged, with its reason and exit code; an AgentError, so runs can end with it", () =>
    Effect.gen(function*() {
      const error = new Worker.WorkerError({ worker: "claude", reason: "exit", message: "exited 2", exitCode: 2 })
      const failed = yield* Effect.flip(Worker.make("w", () => Effect.fail(error)).turn({
        message: "x",
        phase: "act",
        resumeToken: undefined
      }))
      assert.strictEqual(failed._tag, "WorkerError")
      assert.deepStrictEqual([failed.worker, failed.reason, failed.exitCode], ["claude", "exit", 2])
      assert.isTrue(Schema.is(AgentError.AgentError)(error))
      const json = Schema.encodeSync(Schema.toCodecJson(AgentError.AgentError))(error)
      assert.deepStrictEqual(json, { _tag: "WorkerError", worker: "claude", reason: "exit", message: "exited 2", exitCode: 2 })
    }))
})
