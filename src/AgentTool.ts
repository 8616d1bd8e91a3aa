/**
 * What the loop needs to know about a tool beyond what `effect/ai` records:
 * annotations on an `effect/ai` `Tool` for its timeout, how it may run beside
 * other calls, whether its result ends the run, whether it counts toward the
 * termination vote and the per-turn call limit, how long its results may be,
 * per-run and per-turn quotas, whether a call may be run again after a
 * crash, and whether its failures end the run.
 *
 * How a call's failure reaches the model: whatever the tool's `failureMode`,
 * a typed failure of its handler (`Effect.fail`) is an error result
 * (`isError: true`) whose text is the failure encoded with the tool's failure
 * Schema, so the model reads the structured failure; a defect (`Effect.die`,
 * a throw), a timeout and invalid arguments are error results too. A failure
 * ends the run (`ToolFatalError`) only when asked for: the tool is annotated
 * `fatal: true`, or the handler fails or dies with {@link FatalFailure}
 * (or, in tests, a defect with `ToolRegistry.FailOnDefect` on). The typed
 * failure comes back after the run: {@link fatalError} reads it from the
 * `ToolFatalError`, {@link unwrapFatal} puts it in the error channel.
 *
 * @example
 * ```ts
 * import { Schema } from "effect"
 * import { Tool } from "effect/ai"
 * import { AgentTool } from "effect-agent"
 *
 * const Deploy = AgentTool.annotate(
 *   Tool.make("deploy", { parameters: Schema.Struct({ env: Schema.String }) }),
 *   { execution: "exclusive", timeout: "2 minutes", replaySafe: false }
 * )
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Tool from "effect/ai/Tool"
import { dual } from "effect/Function"
import { ToolFatalError } from "./AgentError.ts"

/**
 * How a call runs beside the other calls of its batch: `parallel` calls run
 * together (up to `maxParallelTools`), `sequential` calls run one at a time
 * after the parallel ones, and one `exclusive` call makes the whole batch
 * sequential.
 *
 * @since 0.1.0
 * @category models
 */
export type ExecutionMode = "parallel" | "sequential" | "exclusive"

/**
 * How long one call may run before it is interrupted and answered with a
 * timeout result. Unset: the config's `toolTimeout`.
 *
 * @since 0.1.0
 * @category annotations
 */
export const Timeout = Context.Reference<Duration.Duration | undefined>("effect-agent/AgentTool/Timeout", {
  defaultValue: () => undefined
})

/**
 * The tool's {@link ExecutionMode}; `parallel` by default.
 *
 * @since 0.1.0
 * @category annotations
 */
export const Execution = Context.Reference<ExecutionMode>("effect-agent/AgentTool/Execution", {
  defaultValue: () => "parallel"
})

/**
 * A successful result of this tool votes to end the run. The run ends when
 * every counted result of a batch votes so.
 *
 * @since 0.1.0
 * @category annotations
 */
export const Terminating = Context.Reference<boolean>("effect-agent/AgentTool/Terminating", {
  defaultValue: () => false
})

/**
 * Whether this tool's results take part in the termination vote (advisory
 * tools such as progress reports do not); `true` by default.
 *
 * @since 0.1.0
 * @category annotations
 */
export const CountsTowardVote = Context.Reference<boolean>("effect-agent/AgentTool/CountsTowardVote", {
  defaultValue: () => true
})

/**
 * Whether this tool's calls count toward `maxToolCallsPerTurn` (read-only
 * lookups may be exempt); `true` by default.
 *
 * @since 0.1.0
 * @category annotations
 */
export const CountsTowardCallLimit = Context.Reference<boolean>("effect-agent/AgentTool/CountsTowardCallLimit", {
  defaultValue: () => true
})

/**
 * The longest result text the model is given; longer results are cut with a
 * marker and the full text kept in `details`. Unset: the config's
 * `maxResultChars`.
 *
 * @since 0.1.0
 * @category annotations
 */
export const MaxResultChars = Context.Reference<number | undefined>("effect-agent/AgentTool/MaxResultChars", {
  defaultValue: () => undefined
})

/**
 * Whether a call that had started before a crash may simply be run again on
 * resume; `true` by default. When `false`, the resumed run answers the call
 * with a result saying the earlier attempt's outcome is unknown.
 *
 * @since 0.1.0
 * @category annotations
 */
export const ReplaySafe = Context.Reference<boolean>("effect-agent/AgentTool/ReplaySafe", {
  defaultValue: () => true
})

/**
 * Whether the tool hands the run off to another agent (the tools
 * `Agent.handoff` makes); `false` by default. Its call acts on the run
 * itself, not on the world: a durable session makes it again each time it
 * replays, rather than answer it from a record (which would not hand off).
 *
 * @since 0.1.0
 * @category annotations
 */
export const HandsOff = Context.Reference<boolean>("effect-agent/AgentTool/HandsOff", {
  defaultValue: () => false
})

/**
 * Whether a typed failure of this tool's handler ends the run with
 * `ToolFatalError`; `false` by default, when the failure is an error result
 * the model reads (whatever the tool's `failureMode`). Defects and timeouts
 * stay results either way (a defect ends the run with
 * `ToolRegistry.FailOnDefect` on). After the run, {@link fatalError} and
 * {@link unwrapFatal} give the failure back with its type.
 *
 * @since 0.1.0
 * @category annotations
 */
export const Fatal = Context.Reference<boolean>("effect-agent/AgentTool/Fatal", {
  defaultValue: () => false
})

/**
 * A failure that ends the run. A handler fails with it (when the tool's
 * failure Schema includes it) or dies with it to stop the run with
 * `ToolFatalError`, whatever the tool's annotations: for the one failure a
 * model cannot work around (a corrupt store, revoked credentials), where its
 * other failures stay results.
 *
 * @example
 * ```ts
 * import { Effect, Schema } from "effect"
 * import { Tool } from "effect/ai"
 * import { AgentTool } from "effect-agent"
 *
 * const Query = Tool.make("query", {
 *   parameters: Schema.Struct({ sql: Schema.String }),
 *   success: Schema.String,
 *   failure: Schema.Union([Schema.String, AgentTool.FatalFailure])
 * })
 * const handler = ({ sql }: { readonly sql: string }) =>
 *   sql === "" ? Effect.fail("empty query") : Effect.fail(new AgentTool.FatalFailure({ reason: "database is gone" }))
 * ```
 *
 * @since 0.1.0
 * @category errors
 */
export class FatalFailure extends Schema.TaggedError<FatalFailure>()("FatalFailure", {
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

/**
 * Limits on this tool's use: calls per run and per turn, and its time in all
 * (`maxDurationMs`, the sum of its calls' durations in the run, as agnt's
 * `max_duration_us`: a call is refused once the tool has used it up, so the
 * batch that passes it runs whole and the next call is refused). Calls over
 * a quota get an error result and never run. A resumed run keeps what was
 * used before. A field that is none of these is a defect at `annotate`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Quota {
  readonly perRun?: number | undefined
  readonly perTurn?: number | undefined
  readonly maxDurationMs?: number | undefined
}

const quotaFields: ReadonlySet<string> = new Set(["perRun", "perTurn", "maxDurationMs"])

/**
 * The tool's {@link Quota}; none by default.
 *
 * @since 0.1.0
 * @category models
 */
export const Quota = Context.Reference<Quota | undefined>("effect-agent/AgentTool/Quota", {
  defaultValue: () => undefined
})

/**
 * The annotations of {@link annotate}, all optional.
 *
 * @since 0.1.0
 * @category options
 */
export interface Options {
  readonly timeout?: Duration.Input | undefined
  readonly execution?: ExecutionMode | undefined
  readonly terminating?: boolean | undefined
  readonly countsTowardVote?: boolean | undefined
  readonly countsTowardCallLimit?: boolean | undefined
  readonly maxResultChars?: number | undefined
  readonly replaySafe?: boolean | undefined
  readonly quota?: Quota | undefined
  readonly fatal?: boolean | undefined
}

type AnyConfig = {
  readonly parameters: Schema.Constraint
  readonly success: Schema.Constraint
  readonly failure: Schema.Constraint
  readonly failureMode: Tool.FailureMode
}

const annotateOptions = <Name extends string, Config extends AnyConfig, R>(
  tool: Tool.Tool<Name, Config, R>,
  options: Options
): Tool.Tool<Name, Config, R> => {
  let out = tool
  if (options.timeout !== undefined) out = out.annotate(Timeout, Duration.fromInputUnsafe(options.timeout))
  if (options.execution !== undefined) out = out.annotate(Execution, options.execution)
  if (options.terminating !== undefined) out = out.annotate(Terminating, options.terminating)
  if (options.countsTowardVote !== undefined) out = out.annotate(CountsTowardVote, options.countsTowardVote)
  if (options.countsTowardCallLimit !== undefined) {
    out = out.annotate(CountsTowardCallLimit, options.countsTowardCallLimit)
  }
  if (options.maxResultChars !== undefined) out = out.annotate(MaxResultChars, options.maxResultChars)
  if (options.replaySafe !== undefined) out = out.annotate(ReplaySafe, options.replaySafe)
  if (options.quota !== undefined) {
    // A misspelt or unknown limit would be no limit at all: refused here, where it is written.
    const unknown = Object.keys(options.quota).filter((key) => !quotaFields.has(key))
    if (unknown.length > 0) {
      throw new Error(
        `AgentTool.annotate(${tool.name}): unknown quota field ${unknown.map((key) => JSON.stringify(key)).join(", ")} ` +
          "(perRun, perTurn and maxDurationMs are)"
      )
    }
    out = out.annotate(Quota, options.quota)
  }
  if (options.fatal !== undefined) out = out.annotate(Fatal, options.fatal)
  return out
}

/**
 * Sets several loop annotations on a tool at once.
 *
 * @example
 * ```ts
 * import { Schema } from "effect"
 * import { Tool } from "effect/ai"
 * import { AgentTool } from "effect-agent"
 *
 * const Done = AgentTool.annotate(
 *   Tool.make("done", { parameters: Schema.Struct({ summary: Schema.String }) }),
 *   { terminating: true }
 * )
 * ```
 *
 * @since 0.1.0
 * @category annotations
 */
export const annotate: {
  (options: Options): <Name extends string, Config extends AnyConfig, R>(
    tool: Tool.Tool<Name, Config, R>
  ) => Tool.Tool<Name, Config, R>
  <Name extends string, Config extends AnyConfig, R>(
    tool: Tool.Tool<Name, Config, R>,
    options: Options
  ): Tool.Tool<Name, Config, R>
} = dual(2, annotateOptions)

/**
 * A tool's loop annotations, resolved with their defaults.
 *
 * @since 0.1.0
 * @category models
 */
export interface Settings {
  readonly timeout: Duration.Duration | undefined
  readonly execution: ExecutionMode
  readonly terminating: boolean
  readonly countsTowardVote: boolean
  readonly countsTowardCallLimit: boolean
  readonly maxResultChars: number | undefined
  readonly replaySafe: boolean
  readonly quota: Quota | undefined
  readonly fatal: boolean
  readonly handsOff: boolean
}

const settingsCache = new WeakMap<Tool.Any, Settings>()

/**
 * Reads a tool's loop annotations (cached per tool: the loop reads them for
 * every call).
 *
 * @since 0.1.0
 * @category getters
 */
export const settings = (tool: Tool.Any): Settings => {
  let cached = settingsCache.get(tool)
  if (cached === undefined) {
    const annotations = tool.annotations
    cached = {
      timeout: Context.get(annotations, Timeout),
      execution: Context.get(annotations, Execution),
      terminating: Context.get(annotations, Terminating),
      countsTowardVote: Context.get(annotations, CountsTowardVote),
      countsTowardCallLimit: Context.get(annotations, CountsTowardCallLimit),
      maxResultChars: Context.get(annotations, MaxResultChars),
      replaySafe: Context.get(annotations, ReplaySafe),
      quota: Context.get(annotations, Quota),
      fatal: Context.get(annotations, Fatal),
      handsOff: Context.get(annotations, HandsOff)
    }
    settingsCache.set(tool, cached)
  }
  return cached
}

// -----------------------------------------------------------------------------
// Typed fatal failures
// -----------------------------------------------------------------------------

/**
 * The typed failure a fatal failure of `tool` ended a run with: the
 * `ToolFatalError`'s `error` decoded with the tool's failure Schema (it is
 * kept as JSON, so it survives a durable session's store). `None` when
 * `error` is not a `ToolFatalError` of this tool, or holds no failure its
 * Schema decodes (a defect, a failure the Schema does not describe).
 *
 * @example
 * ```ts
 * import { Effect, Layer, Option, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { Agent, AgentTool, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * class DatabaseDown extends Schema.TaggedError<DatabaseDown>()("DatabaseDown", { host: Schema.String }) {}
 * const Query = AgentTool.annotate(
 *   Tool.make("query", { parameters: Schema.Struct({ sql: Schema.String }), success: Schema.String, failure: DatabaseDown }),
 *   { fatal: true }
 * )
 * const kit = Toolkit.make(Query)
 * const Tools = ToolRegistry.layer(kit).pipe(
 *   Layer.provide(kit.toLayer({ query: () => Effect.fail(new DatabaseDown({ host: "db-1" })) }))
 * )
 * const program = Effect.gen(function*() {
 *   const error = yield* Effect.flip(Agent.run({ prompt: "count the users" }))
 *   const down = yield* AgentTool.fatalError(Query, error)
 *   return Option.map(down, (down) => down.host)
 * }).pipe(Effect.provide(Layer.merge(Tools, ScriptedModel.layer([{ toolCalls: [{ name: "query", params: { sql: "" } }] }]))))
 * Effect.runPromise(program).then(console.log)
 * // Output: { _id: 'Option', _tag: 'Some', value: 'db-1' }
 * ```
 *
 * @since 0.1.0
 * @category fatal failures
 */
export const fatalError = <Name extends string, Config extends AnyConfig, R>(
  tool: Tool.Tool<Name, Config, R>,
  error: unknown
): Effect.Effect<Option.Option<Config["failure"]["Type"]>, never, Config["failure"]["DecodingServices"]> =>
  error instanceof ToolFatalError && error.toolName === tool.name && error.defect === undefined &&
    error.error !== undefined
    ? Effect.option(Schema.decodeUnknownEffect(Schema.toCodecJson(tool.failureSchema))(error.error))
    : Effect.succeedNone

/**
 * Puts the typed failure of `tool` in the error channel: a `ToolFatalError`
 * of that tool becomes the failure it holds (decoded by {@link fatalError}),
 * which `Effect.catchTag` then finds by its tag. Any other error goes on as
 * it is (so does a `ToolFatalError` of that tool with no failure its Schema
 * decodes). The typed failure does not carry the run's `state`: to continue
 * the run, read the `ToolFatalError` with {@link fatalError} instead.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { Agent, AgentTool, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * class DatabaseDown extends Schema.TaggedError<DatabaseDown>()("DatabaseDown", { host: Schema.String }) {}
 * const Query = AgentTool.annotate(
 *   Tool.make("query", { parameters: Schema.Struct({ sql: Schema.String }), success: Schema.String, failure: DatabaseDown }),
 *   { fatal: true }
 * )
 * const kit = Toolkit.make(Query)
 * const Tools = ToolRegistry.layer(kit).pipe(
 *   Layer.provide(kit.toLayer({ query: () => Effect.fail(new DatabaseDown({ host: "db-1" })) }))
 * )
 * const program = Agent.run({ prompt: "count the users" }).pipe(
 *   AgentTool.unwrapFatal(Query),
 *   Effect.map((result) => result.outcome._tag),
 *   Effect.catchTag("DatabaseDown", (down) => Effect.succeed(`the database at ${down.host} is down`)),
 *   Effect.provide(Layer.merge(Tools, ScriptedModel.layer([{ toolCalls: [{ name: "query", params: { sql: "" } }] }])))
 * )
 * Effect.runPromise(program).then(console.log)
 * // Output: the database at db-1 is down
 * ```
 *
 * @since 0.1.0
 * @category fatal failures
 */
export const unwrapFatal = <Name extends string, Config extends AnyConfig, RT>(tool: Tool.Tool<Name, Config, RT>) =>
<A, E, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, E | Config["failure"]["Type"], R | Config["failure"]["DecodingServices"]> =>
  Effect.catch(self, (error) =>
    Effect.flatMap(
      fatalError(tool, error),
      (failure): Effect.Effect<never, E | Config["failure"]["Type"]> =>
        Option.isSome(failure) ? Effect.fail(failure.value) : Effect.fail(error)
    ))
