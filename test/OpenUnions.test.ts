/**
 * Open unions: a plugin contributes an event and an outcome of its own, with
 * no change to the core; both reach observers and the result typed, and
 * round-trip through a trajectory file.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Layer, Option, Path, Schema } from "effect"
import { Agent, AgentEvent, Hooks, Outcome } from "effect-agent"
import { Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { toolsLayer } from "./support.ts"

// The plugin's own kinds: an event after each turn, and an ending when the model mentions a refund.
const Spent = AgentEvent.custom("support/spent", Schema.Struct({ tokens: Schema.Finite }))
const Escalated = Outcome.custom("support/escalated", Schema.Struct({ ticket: Schema.String, turn: Schema.Int }))

const support = Hooks.plugin({
  name: "support",
  afterTurn: (turn, context) =>
    Effect.as(
      context.emit(Spent.make({ tokens: turn.message.usage.input + turn.message.usage.output })),
      turn.message.content.some((part) => part.type === "text" && part.text.includes("refund"))
        ? Hooks.stop(Escalated.make({ ticket: `T-${context.turn}`, turn: context.turn }))
        : Hooks.proceed
    )
})

describe("plugins' own events and outcomes", () => {
  it.live("reach observers, end the run typed, and round-trip through the trajectory", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = (yield* Path.Path).join(yield* fs.makeTempDirectoryScoped(), "trajectory.ndjson")
      const seen: Array<number> = []
      const observer = Hooks.plugin({
        name: "observer",
        observe: (event) => Option.map(Spent.payload(event), ({ tokens }) => void seen.push(tokens))
      })
      const result = yield* Agent.run({ prompt: "help", plugins: [support, observer, Trajectory.ndjson(path)] }).pipe(
        Effect.provide(Layer.merge(
          ScriptedModel.layer([
            { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }], usage: { input: 10, output: 2 } },
            { text: "You need a refund.", usage: { input: 20, output: 5 } }
          ]),
          toolsLayer()
        ))
      )
      assert.deepStrictEqual(seen, [12, 25])
      assert.deepStrictEqual(result.outcome, {
        _tag: "Custom",
        kind: "support/escalated",
        payload: { ticket: "T-2", turn: 2 }
      })
      assert.deepStrictEqual(Option.getOrUndefined(Escalated.payload(result.outcome)), { ticket: "T-2", turn: 2 })
      // read back from the file by a reader that knows nothing of the plugin
      const lines = (yield* fs.readFileString(path)).split("\n").filter((line) => line !== "")
      const events = yield* Effect.forEach(lines, (line) => AgentEvent.decodeJson(JSON.parse(line)))
      const custom = events.filter((event) => event._tag === "Custom")
      assert.deepStrictEqual(custom.map((event) => Option.getOrUndefined(Spent.payload(event))), [
        { tokens: 12 },
        { tokens: 25 }
      ])
      const end = events.at(-1)!
      assert.strictEqual(end._tag, "AgentEnd")
      if (end._tag === "AgentEnd" && end.outcome !== undefined) {
        assert.deepStrictEqual(Option.getOrUndefined(Escalated.payload(end.outcome)), { ticket: "T-2", turn: 2 })
      }
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
