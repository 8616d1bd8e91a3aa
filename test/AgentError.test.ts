/**
 * AgentError: the typed failures of a run, and their JSON form.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import { AiError } from "effect/ai"
import { AgentError } from "effect-agent"
import { roundTrip } from "./support.ts"

describe("AgentError.AgentError", () => {
  it("every error round-trips through JSON, with the wrapped AiError reason", () => {
    const errors: ReadonlyArray<AgentError.AgentError> = [
      new AgentError.ModelError({ reason: new AiError.RateLimitError({ retryAfter: Duration.seconds(3) }), turn: 2 }),
      new AgentError.ToolFatalError({ toolName: "t", toolCallId: "c", description: "boom", error: { code: 1 } }),
      new AgentError.ConfigError({ field: "maxTurns", rule: "must be at least 1" }),
      new AgentError.InvalidContinuation({ reason: "empty" }),
      new AgentError.InvalidPluginState({ plugin: "loopDetector", reason: "seen is -1" })
    ]
    const backs = errors.map((error) => roundTrip(AgentError.AgentError, error))
    backs.forEach((back, i) => {
      assert.strictEqual(back._tag, errors[i]!._tag)
      assert.strictEqual(back.message, errors[i]!.message)
    })
    // the wrapped reason keeps its tag and its fields: a reason decoded as another tag fails here, not skips
    const [model] = backs
    const reason = model?._tag === "ModelError" ? model.reason : undefined
    assert.strictEqual(reason?._tag, "RateLimitError")
    const retryAfter = reason?._tag === "RateLimitError" ? reason.retryAfter : undefined
    assert.strictEqual(retryAfter === undefined ? undefined : Duration.toMillis(retryAfter), 3000)
  })
})
