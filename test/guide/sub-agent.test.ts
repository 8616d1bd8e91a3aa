import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type AgentEvent, Hooks, Message } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { policy, resolve } from "./app.ts"
import { kettle, testLayer } from "./mocks.ts"

// One scripted model answers both agents: a script function tells them apart by their system prompt.
const script: ScriptedModel.Script = (_, request) => {
  const head = request.prompt.content[0]
  if (head?.role === "system" && head.content === policy.system) {
    return { text: "Refund: the kettle is under 100 EUR." }
  }
  const replies = request.prompt.content.filter((message) => message.role === "assistant").length
  return [
    { toolCalls: [{ name: "policy", params: kettle }] },
    { toolCalls: [{ name: "final_answer", params: { orderId: "A-1", action: "refunded", note: "policy" } }] }
  ][replies]
}

describe("the policy sub-agent", () => {
  it.effect("runs with its own transcript; its answer is the tool's result; its events come Nested", () =>
    Effect.gen(function*() {
      const events: Array<AgentEvent.AgentEvent> = []
      const record = Hooks.plugin({ name: "record", observe: (event) => void events.push(event) })
      const result = yield* resolve("Can order A-1 be refunded?", [record])
      const answer = result.messages.find((m) => m.role === "toolResult" && m.toolName === "policy")!
      assert.strictEqual(Message.textOf(answer), "Refund: the kettle is under 100 EUR.")
      const nested = events.flatMap((event) => event._tag === "Nested" ? [event] : [])
      assert.deepStrictEqual(nested.at(-1)?.path, ["policy"])
      assert.strictEqual(nested.at(-1)?.event._tag, "AgentEnd")
      // three model calls: the agent, the sub-agent (its own transcript: its system prompt and its input), the agent
      const requests = yield* (yield* ScriptedModel.ScriptedModel).requests
      assert.strictEqual(requests.length, 3)
      assert.deepStrictEqual(requests[1]!.prompt.content.map((message) => message.role), ["system", "user"])
    }).pipe(Effect.provide(testLayer(script))))
})
