/**
 * Sessions with a typed output: the checkpoint saves the output and the
 * Schema's identity; a finished session opens with its typed output; a
 * session resumed with another Schema fails with a typed error; a crash after
 * the final answer's turn was saved ends, on resume, with that answer and no
 * further model call.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Latch, Layer, Schema } from "effect"
import { Hooks, Output } from "effect-agent"
import { CheckpointStore, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { followTranscript, toolsLayer } from "./fixture.ts"

const Report = Schema.Struct({ steps: Schema.Int, summary: Schema.String })
const Other = Schema.Struct({ steps: Schema.String })

const script: ReadonlyArray<ScriptedModel.Turn> = [
  { toolCalls: [{ id: "c1", name: "step", params: { n: 1 } }] },
  { toolCalls: [{ id: "f1", name: "final_answer", params: { steps: 1, summary: "one step" } }] }
]

const layers = (turns: ReadonlyArray<ScriptedModel.Turn>) =>
  Layer.merge(ScriptedModel.layer(followTranscript(turns)), toolsLayer([]))

/** A model that must not be called. */
const noModel = Layer.merge(ScriptedModel.layer([]), toolsLayer([]))

describe("Session with a typed output", () => {
  it.effect("saves the output with the Schema's identity; a finished session opens with its typed output", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const result = yield* Session.run({ id: "s1", prompt: "go", output: Report }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(layers(script))
      )
      assert.deepStrictEqual(result.output, { steps: 1, summary: "one step" })
      const saved = yield* store.load("s1")
      assert.deepStrictEqual(saved.state.output, {
        schema: Output.finalAnswer(Report).identity,
        invalidAttempts: 0,
        value: { steps: 1, summary: "one step" }
      })
      const opened = yield* Session.open("s1", { prompt: "go", output: Report }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(noModel))
      const steps: number | undefined = opened.output?.steps
      assert.strictEqual(steps, 1)
      assert.strictEqual(opened.outcome._tag, "Completed")
      // opened with another Schema, or none: a typed error naming both
      const other = yield* Effect.flip(
        Session.open("s1", { prompt: "go", output: Other }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(noModel))
      )
      assert.strictEqual(other._tag, "OutputSchemaMismatch")
      if (other._tag === "OutputSchemaMismatch") {
        assert.strictEqual(other.saved, Output.finalAnswer(Report).identity)
        assert.strictEqual(other.given, Output.finalAnswer(Other).identity)
      }
      const none = yield* Effect.flip(Session.open("s1", { prompt: "go" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(noModel)))
      assert.strictEqual(none._tag, "OutputSchemaMismatch")
    }))

  it.effect("resuming with another Schema fails with OutputSchemaMismatch before any model call", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const first = yield* Session.run({ id: "s2", prompt: "go", output: Report, config: { maxTurns: 1 } })
        .pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(layers(script)))
      assert.strictEqual(first.outcome._tag, "MaxTurns")
      const error = yield* Effect.flip(
        Session.resume("s2", { output: Other, config: { maxTurns: 5 } }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(noModel))
      )
      assert.strictEqual(error._tag, "OutputSchemaMismatch")
      const resumed = yield* Session.resume("s2", { output: Report, config: { maxTurns: 5 } }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(layers(script))
      )
      assert.deepStrictEqual(resumed.output, { steps: 1, summary: "one step" })
    }))

  it.effect("a crash after the final answer's turn was saved: the resumed session ends with it, calling no model", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      // Stops the run for good right after the checkpoint of the answer's turn, as a crash would.
      const saved = Latch.makeUnsafe()
      let answered = false
      const crash = Hooks.plugin({
        name: "crash",
        onEvent: (event) => {
          if (event._tag === "TurnEnd" && event.toolResults.some((r) => r.toolName === "final_answer")) answered = true
          if (answered && event._tag === "CheckpointSaved") return Effect.andThen(saved.open, Effect.never)
          return Effect.void
        }
      })
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s3", prompt: "go", output: Report, plugins: [crash] }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(layers(script))
        )
      )
      yield* saved.await
      yield* Fiber.interrupt(fiber)
      const checkpoint = yield* store.load("s3")
      assert.deepStrictEqual(checkpoint.state.output?.value, { steps: 1, summary: "one step" })
      const resumed = yield* Session.open("s3", { prompt: "go", output: Report }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(noModel))
      assert.strictEqual(resumed.outcome._tag, "Completed")
      assert.deepStrictEqual(resumed.output, { steps: 1, summary: "one step" })
    }))

  it.effect("a checkpoint saved without output (an older one) loads and continues, and may start asking for one", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const first = yield* Session.run({ id: "s4", prompt: "go", config: { maxTurns: 1 } }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(layers(script))
      )
      assert.strictEqual(first.outcome._tag, "MaxTurns")
      const saved = yield* store.load("s4")
      assert.isFalse("output" in saved.state)
      const resumed = yield* Session.resume("s4", { output: Report, config: { maxTurns: 5 } }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, store),
        Effect.provide(layers(script))
      )
      assert.deepStrictEqual(resumed.output, { steps: 1, summary: "one step" })
    }))
})
