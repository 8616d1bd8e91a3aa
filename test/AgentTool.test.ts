/**
 * AgentTool: the loop's annotations on an `effect/ai` tool, read back with
 * their defaults, and the failure that ends a run. How the loop acts on them
 * is in ToolExecution.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Duration, Schema } from "effect"
import { Tool } from "effect/ai"
import { AgentTool } from "effect-agent"

const Plain = Tool.make("plain", { parameters: Schema.Struct({ x: Schema.Finite }), success: Schema.String })

describe("AgentTool.settings", () => {
  it("a tool without annotations: parallel, counted, replay-safe, not terminating, not fatal, no limits", () => {
    assert.deepStrictEqual(AgentTool.settings(Plain), {
      timeout: undefined,
      execution: "parallel",
      terminating: false,
      countsTowardVote: true,
      countsTowardCallLimit: true,
      maxResultChars: undefined,
      replaySafe: true,
      quota: undefined,
      fatal: false,
      handsOff: false
    })
  })

  it("reads back every annotation annotate sets; the timeout as a Duration", () => {
    const tool = AgentTool.annotate(Plain, {
      timeout: "2 minutes",
      execution: "exclusive",
      terminating: true,
      countsTowardVote: false,
      countsTowardCallLimit: false,
      maxResultChars: 500,
      replaySafe: false,
      quota: { perRun: 3, perTurn: 1 },
      fatal: true
    })
    const settings = AgentTool.settings(tool)
    assert.isTrue(settings.timeout !== undefined && Duration.equals(settings.timeout, Duration.minutes(2)))
    assert.deepStrictEqual({ ...settings, timeout: undefined }, {
      timeout: undefined,
      execution: "exclusive",
      terminating: true,
      countsTowardVote: false,
      countsTowardCallLimit: false,
      maxResultChars: 500,
      replaySafe: false,
      quota: { perRun: 3, perTurn: 1 },
      fatal: true,
      handsOff: false
    })
    // the annotations are effect/ai's: the same values through Context
    assert.strictEqual(Context.get(tool.annotations, AgentTool.Execution), "exclusive")
    assert.strictEqual(Context.get(tool.annotations, AgentTool.ReplaySafe), false)
  })

  it("annotate returns a new tool (the original keeps its settings), also data-last; unset options change nothing", () => {
    const sequential = AgentTool.annotate({ execution: "sequential" })(Plain)
    assert.strictEqual(AgentTool.settings(sequential).execution, "sequential")
    assert.strictEqual(AgentTool.settings(Plain).execution, "parallel")
    assert.strictEqual(sequential.name, "plain")
    const again = AgentTool.annotate(sequential, { terminating: true })
    assert.deepStrictEqual(
      [AgentTool.settings(again).execution, AgentTool.settings(again).terminating],
      ["sequential", true]
    )
    assert.deepStrictEqual(AgentTool.settings(AgentTool.annotate(Plain, {})), AgentTool.settings(Plain))
  })

  it("effect/ai's own annotate sets the same settings", () => {
    const tool = Plain.annotate(AgentTool.Terminating, true).annotate(AgentTool.MaxResultChars, 10)
    const { maxResultChars, terminating } = AgentTool.settings(tool)
    assert.deepStrictEqual([terminating, maxResultChars], [true, 10])
  })
})

describe("AgentTool.FatalFailure", () => {
  it("is a tagged error whose message is its reason, and round-trips through its Schema", () => {
    const failure = new AgentTool.FatalFailure({ reason: "database is gone" })
    assert.strictEqual(failure._tag, "FatalFailure")
    assert.strictEqual(failure.message, "database is gone")
    assert.instanceOf(failure, Error)
    const json = Schema.encodeSync(AgentTool.FatalFailure)(failure)
    assert.deepStrictEqual(json, { _tag: "FatalFailure", reason: "database is gone" })
    const back = Schema.decodeUnknownSync(AgentTool.FatalFailure)(json)
    assert.instanceOf(back, AgentTool.FatalFailure)
    assert.strictEqual(back.reason, "database is gone")
  })
})
