/**
 * Worker: the contract between the supervisor and what does the work. A
 * worker written by hand satisfies it, its errors are typed and caught by
 * tag, and a WorkerError refuses a reason the contract does not name.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Ref, Schema } from "effect"
import { AgentError } from "effect-agent"
import { Supervisor, Worker } from "effect-agent/supervisor"

/** A worker that echoes its messages and counts its turns in the resume token. */
const echo = (turns: Ref.Ref<number>): Worker.Worker => ({
  name: "echo",
  turn: (request) =>
    request.message === "fail"
      ? Effect.fail(new Worker.WorkerError({ worker: "echo", reason: "exit", message: "asked to fail", exitCode: 2 }))
      : Effect.map(Ref.updateAndGet(turns, (n) => n + 1), (n): Worker.TurnReply => ({
        text: `${request.phase}: ${request.message}`,
        usage: { inputTokens: request.message.length, outputTokens: n },
        resumeToken: `${request.resumeToken ?? "new"}/${n}`
      }))
})

describe("Worker", () => {
  it.effect("a worker takes a turn at a time, its resume token handed back on the next", () =>
    Effect.gen(function*() {
      const worker = echo(yield* Ref.make(0))
      const first = yield* worker.turn({ message: "Plan it", phase: "plan", resumeToken: undefined })
      const second = yield* worker.turn({ message: "Do it", phase: "act", resumeToken: first.resumeToken })
      assert.deepStrictEqual([first, second], [
        { text: "plan: Plan it", usage: { inputTokens: 7, outputTokens: 1 }, resumeToken: "new/1" },
        { text: "act: Do it", usage: { inputTokens: 5, outputTokens: 2 }, resumeToken: "new/1/2" }
      ])
    }))

  it.effect("a WorkerError is typed: caught by its tag, with its worker, reason and exit code", () =>
    Effect.gen(function*() {
      const worker = echo(yield* Ref.make(0))
      const caught = yield* worker.turn({ message: "fail", phase: "act", resumeToken: undefined }).pipe(
        Effect.catchTag("WorkerError", (error) => Effect.succeed([error.worker, error.reason, error.exitCode] as const))
      )
      assert.deepStrictEqual(caught, ["echo", "exit", 2])
      const error = new Worker.WorkerError({ worker: "claude", reason: "eof", message: "output ended" })
      assert.strictEqual(error._tag, "WorkerError")
      assert.isUndefined(error.exitCode)
      assert.strictEqual(error.message, "output ended")
    }))

  it("a WorkerError refuses a reason the contract does not name", () => {
    const make = (reason: string) =>
      Exit.isSuccess(Effect.runSyncExit(Effect.sync(() =>
        // @ts-expect-error: a reason outside the contract, as untyped code could pass one
        new Worker.WorkerError({ worker: "w", reason, message: "m" })
      )))
    assert.isTrue(make("timeout"))
    assert.isFalse(make("crashed"))
  })
})

describe("Worker.make", () => {
  it.effect("a named turn; its WorkerError is the supervisor's own (not the core's AgentError), with its JSON form", () =>
    Effect.gen(function*() {
      const worker = Worker.make("w", (request) =>
        request.message === "fail"
          ? Effect.fail(new Worker.WorkerError({ worker: "w", reason: "exit", message: "exited 2", exitCode: 2 }))
          : Effect.succeed({
            text: request.message,
            usage: { inputTokens: 1, outputTokens: 2 },
            resumeToken: undefined
          }))
      assert.strictEqual(worker.name, "w")
      assert.strictEqual((yield* worker.turn({ message: "hi", phase: "act", resumeToken: undefined })).text, "hi")
      const error = yield* Effect.flip(worker.turn({ message: "fail", phase: "act", resumeToken: undefined }))
      // issue 30: the core does not name a wing's error; a supervised run fails with it (typed) all the same
      assert.isFalse(Schema.is(AgentError.AgentError)(error))
      const supervised = yield* Effect.flip(Supervisor.run({ task: "fail", worker }))
      assert.strictEqual(supervised._tag, "WorkerError")
      assert.deepStrictEqual(Schema.encodeSync(Schema.toCodecJson(Worker.WorkerError))(error), {
        _tag: "WorkerError",
        worker: "w",
        reason: "exit",
        message: "exited 2",
        exitCode: 2
      })
    }))
})
