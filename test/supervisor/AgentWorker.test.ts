/**
 * AgentWorker: our own loop as the supervised worker. One supervised turn is
 * one inner run until the model stops; the next turn continues the same
 * transcript with the supervisor's message; the plan phase sees only the
 * read-only tools; the inner runs' events reach the supervised run's
 * observers (one AgentStart, one AgentEnd in all).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { type AgentEvent, Message, ToolRegistry } from "effect-agent"
import { AgentWorker, Check, Supervisor } from "effect-agent/supervisor"
import { ScriptedModel } from "effect-agent/testing"

const ReadFile = Tool.make("read_file", { parameters: Schema.Struct({ path: Schema.String }), success: Schema.String })
const WriteFile = Tool.make("write_file", {
  parameters: Schema.Struct({ path: Schema.String, content: Schema.String }),
  success: Schema.String
})
const Lookup = Tool.make("lookup", { parameters: Schema.Struct({ q: Schema.String }), success: Schema.String })
const Tools = Toolkit.make(ReadFile, WriteFile, Lookup)

const files = new Map<string, string>()
const tools = ToolRegistry.layer(Tools).pipe(Layer.provide(Tools.toLayer({
  read_file: ({ path }) => Effect.succeed(files.get(path) ?? "(missing)"),
  write_file: ({ path, content }) => Effect.sync(() => (files.set(path, content), "written")),
  lookup: ({ q }) => Effect.succeed(`found ${q}`)
})))

const planThenAct = ScriptedModel.layer([
  { text: "Plan: write ok.txt" }, // plan turn
  { toolCalls: [{ name: "write_file", params: { path: "ok.txt", content: "no" } }], usage: { input: 5 } },
  { text: "written", usage: { input: 7, output: 3 } }, // act turn 1 ends
  { toolCalls: [{ name: "write_file", params: { path: "ok.txt", content: "yes" } }] },
  { text: "fixed" } // act turn 2 ends
])

describe("AgentWorker", () => {
  it.effect("plan with the readers only, then act with every tool; the check's feedback continues the transcript", () =>
    Effect.gen(function*() {
      files.clear()
      const events: Array<AgentEvent.AgentEvent> = []
      const check = Check.make(
        "ok.txt says yes",
        Effect.sync(() =>
          files.get("ok.txt") === "yes"
            ? { status: "pass", summary: "yes" }
            : { status: "fail", summary: `got ${files.get("ok.txt")}` }
        )
      )
      const result = yield* Supervisor.run({
        task: "make ok.txt say yes",
        checks: [check],
        plan: true,
        agent: { readOnlyTools: ["lookup"] },
        onEvent: (event) => Effect.sync(() => void events.push(event))
      }).pipe(Effect.provide(tools))
      const requests = yield* ScriptedModel.ScriptedModel.use((recorder) => recorder.requests)
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual([...requests[0]!.tools].sort(), ["lookup", "read_file"])
      assert.deepStrictEqual([...requests[1]!.tools].sort(), ["lookup", "read_file", "write_file"])
      // one transcript: task (plan request), plan, act message, …, feedback, …, "fixed"
      const users = result.state.messages.filter((m) => m.role === "user").map(Message.textOf)
      assert.deepStrictEqual(users.length, 3)
      assert.strictEqual(users[0], Supervisor.planRequest("make ok.txt say yes"))
      assert.strictEqual(users[1], Supervisor.actRequest("Plan: write ok.txt", "make ok.txt say yes"))
      assert.include(users[2], "- ok.txt says yes [new, 0.0s]: got no")
      assert.strictEqual(Message.textOf(result.state.messages.at(-1)!), "fixed")
      assert.strictEqual(result.reply, "fixed")
      // the inner runs' events, framed by the supervised run's one AgentStart and one AgentEnd
      const tags = events.map((e) => e._tag)
      assert.strictEqual(tags.filter((t) => t === "AgentStart").length, 1)
      assert.strictEqual(tags.filter((t) => t === "AgentEnd").length, 1)
      assert.strictEqual(tags[0], "AgentStart")
      assert.strictEqual(tags.at(-1), "AgentEnd")
      assert.strictEqual(tags.filter((t) => t === "ToolExecutionEnd").length, 2)
      assert.isBelow(tags.indexOf("PlanApproved"), tags.indexOf("ToolExecutionStart"))
      const ends = events.filter((e): e is AgentEvent.Of<"WorkerTurnEnd"> => e._tag === "WorkerTurnEnd")
      assert.deepStrictEqual(ends.map((e) => [e.phase, e.text]), [["plan", "Plan: write ok.txt"], ["act", "written"], [
        "act",
        "fixed"
      ]])
      assert.deepStrictEqual(ends[1]!.usage, { inputTokens: 12, outputTokens: 3 })
    }).pipe(Effect.provide(planThenAct)))

  it.effect("a worker made alone keeps its transcript across turns", () =>
    Effect.gen(function*() {
      const worker = AgentWorker.make({ system: "be brief" })
      assert.isUndefined(yield* worker.state)
      const model = ScriptedModel.layer([{ text: "one" }, { text: "two" }])
      const first = yield* worker.turn({ message: "a", phase: "act", resumeToken: undefined }).pipe(
        Effect.provide(Layer.merge(model, tools))
      )
      assert.strictEqual(first.text, "one")
      const second = yield* worker.turn({ message: "b", phase: "act", resumeToken: undefined }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "two" }]), tools))
      )
      assert.strictEqual(second.text, "two")
      const state = yield* worker.state
      assert.deepStrictEqual(state!.messages.map((m) => [m.role, Message.textOf(m)]), [
        ["user", "a"],
        ["assistant", "one"],
        ["user", "b"],
        ["assistant", "two"]
      ])
      assert.strictEqual(state!.system, "be brief")
    }))
})
