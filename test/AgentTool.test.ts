/**
 * AgentTool: the loop's annotations on an `effect/ai` tool, read back with
 * their defaults, the failure that ends a run, and a fatal domain error read
 * back typed after the run (issue 31, item 3). How the loop acts on the
 * annotations is in ToolExecution.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Option, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, AgentError, AgentTool, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { roundTrip } from "./support.ts"

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

/** A domain error with a field JSON cannot hold as it is (a Date): it must come back as it was. */
class DatabaseDown extends Schema.TaggedError<DatabaseDown>()("DatabaseDown", { host: Schema.String, since: Schema.Date }) {}
class Timeout extends Schema.TaggedError<Timeout>()("Timeout", { ms: Schema.Finite }) {}

const Query = AgentTool.annotate(
  Tool.make("query", {
    parameters: Schema.Struct({ sql: Schema.String }),
    success: Schema.String,
    failure: Schema.Union([DatabaseDown, Timeout])
  }),
  { fatal: true }
)
const Other = AgentTool.annotate(
  Tool.make("other", { success: Schema.String, failure: DatabaseDown }),
  { fatal: true }
)
const since = new Date("2026-01-02T03:04:05.000Z")
const QueryKit = Toolkit.make(Query, Other)
const QueryTools = ToolRegistry.layer(QueryKit).pipe(Layer.provide(QueryKit.toLayer({
  query: ({ sql }) => sql === "slow" ? Effect.fail(new Timeout({ ms: 50 })) : Effect.fail(new DatabaseDown({ host: "db-1", since })),
  other: () => Effect.fail(new DatabaseDown({ host: "db-2", since }))
})))

/** A run whose model calls one tool once. */
const runCalling = (name: string, params: unknown) =>
  Agent.run({ prompt: "count the users" }).pipe(
    Effect.provide(Layer.merge(QueryTools, ScriptedModel.layer([{ toolCalls: [{ id: "q", name, params }] }, { text: "?" }])))
  )

describe("a fatal domain error, typed after the run", () => {
  it.effect("unwrapFatal puts the tool's typed failure in the error channel: Effect.catchTag finds it, fields and all", () =>
    Effect.gen(function*() {
      const caught = yield* runCalling("query", { sql: "select" }).pipe(
        AgentTool.unwrapFatal(Query),
        Effect.map(() => "completed"),
        Effect.catchTag("DatabaseDown", (down) =>
          Effect.succeed(`${down.host} down since ${down.since.toISOString()}: ${down instanceof DatabaseDown}`)),
        Effect.catchTag("Timeout", (timeout) => Effect.succeed(`timed out after ${timeout.ms} ms`)),
        Effect.catchTag("ToolFatalError", (error) => Effect.succeed(`untyped: ${error.message}`))
      )
      assert.strictEqual(caught, "db-1 down since 2026-01-02T03:04:05.000Z: true")
      const slow = yield* runCalling("query", { sql: "slow" }).pipe(
        AgentTool.unwrapFatal(Query),
        Effect.flip
      )
      assert.deepStrictEqual(slow, new Timeout({ ms: 50 }))
      // another tool's fatal failure goes on as the ToolFatalError it was
      const other = yield* runCalling("other", {}).pipe(AgentTool.unwrapFatal(Query), Effect.flip)
      assert.strictEqual(other._tag, "ToolFatalError")
    }))

  it.effect("fatalError reads it from the ToolFatalError, also once stored as JSON; None for another tool's or a defect", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(runCalling("query", { sql: "select" }))
      if (error._tag !== "ToolFatalError") return assert.fail(`expected ToolFatalError, got ${error._tag}`)
      // the error keeps the run's state (to continue it) and the failure as JSON
      assert.isDefined(error.state)
      assert.deepStrictEqual(error.error, { _tag: "DatabaseDown", host: "db-1", since: "2026-01-02T03:04:05.000Z" })
      const stored = roundTrip(AgentError.AgentError, error)
      for (const fatal of [error, stored]) {
        const down = yield* AgentTool.fatalError(Query, fatal)
        assert.deepStrictEqual(down, Option.some(new DatabaseDown({ host: "db-1", since })))
        assert.isTrue(Option.isSome(down) && down.value instanceof DatabaseDown)
        assert.deepStrictEqual(yield* AgentTool.fatalError(Other, fatal), Option.none())
      }
      const defect = new AgentError.ToolFatalError({
        toolName: "query",
        toolCallId: "q",
        description: "Error: boom",
        defect: "Error: boom"
      })
      assert.deepStrictEqual(yield* AgentTool.fatalError(Query, defect), Option.none())
      assert.deepStrictEqual(yield* AgentTool.fatalError(Query, new Error("not a tool's")), Option.none())
    }))
})
