/**
 * The script file of `--provider scripted`: what a `ScriptedModel` replies,
 * as JSON, so that CI and tests run the command offline.
 *
 * ```json
 * {
 *   "turns": [
 *     {
 *       "text": "Let me look.",
 *       "toolCalls": [{ "name": "read_file", "params": { "path": "README.md" } }],
 *       "usage": { "input": 120, "output": 14, "cost": 0.0004 }
 *     },
 *     { "text": "The README is about agents.", "delay": 200 }
 *   ]
 * }
 * ```
 *
 * Each turn may have `text`, `reasoning`, `toolCalls` (`name`, `params`, an
 * optional `id`; without one a call is `call_<turn>_<n>`), `usage` (`input`,
 * `output`, `cacheRead`, `cacheWrite`, `reasoning` tokens and `cost` in USD),
 * `delay` (milliseconds before the reply streams), `fail` (the call fails with
 * this message: a provider failure) and `hang` (the reply never finishes).
 *
 * The reply to a request is the turn whose index is the number of assistant
 * messages the request already holds, not the number of calls made: a
 * resumed run carries on where its checkpoint left off. A request past the
 * last turn fails (a provider failure).
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Schema from "effect/Schema"
import * as AiError from "effect/ai/AiError"
import type * as ScriptedModel from "../../testing/ScriptedModel.ts"

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

/**
 * One scripted model reply.
 *
 * @since 0.1.0
 */
export const Turn = Schema.Struct({
  text: Schema.optionalKey(Schema.String),
  reasoning: Schema.optionalKey(Schema.String),
  toolCalls: Schema.optionalKey(Schema.Array(Schema.Struct({
    id: Schema.optionalKey(Schema.String),
    name: Schema.String,
    params: Schema.optionalKey(Schema.Unknown)
  }))),
  usage: Schema.optionalKey(Schema.Struct({
    input: Schema.optionalKey(Count),
    output: Schema.optionalKey(Count),
    cacheRead: Schema.optionalKey(Count),
    cacheWrite: Schema.optionalKey(Count),
    reasoning: Schema.optionalKey(Count),
    cost: Schema.optionalKey(Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)))
  })),
  delay: Schema.optionalKey(Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 600_000 }))),
  fail: Schema.optionalKey(Schema.String),
  hang: Schema.optionalKey(Schema.Boolean)
})
/** @since 0.1.0 */
export type Turn = typeof Turn.Type

/**
 * A script file.
 *
 * @since 0.1.0
 */
export const ScriptFile = Schema.Struct({ turns: Schema.Array(Turn) })
/** @since 0.1.0 */
export type ScriptFile = typeof ScriptFile.Type

/**
 * A script file that cannot be used: `problem` says what is wrong, and where.
 *
 * @since 0.1.0
 */
export class ScriptFileError extends Schema.TaggedError<ScriptFileError>()("ScriptFileError", {
  path: Schema.String,
  problem: Schema.String
}) {
  override get message(): string {
    return `script file ${this.path}: ${this.problem}`
  }
}

const decode = Schema.decodeUnknownEffect(Schema.fromJsonString(ScriptFile), { onExcessProperty: "error" })

const toTurn = (turn: Turn): ScriptedModel.Turn => {
  const { delay, fail, ...rest } = turn
  return {
    ...rest,
    ...(delay === undefined ? {} : { delay: `${delay} millis` }),
    ...(fail === undefined ? {} : { fail: new AiError.UnknownError({ description: fail }) })
  }
}

/**
 * The `ScriptedModel` script of a script file: the turn for each request is
 * chosen by the number of replies the request holds.
 *
 * @since 0.1.0
 */
export const toScript = (file: ScriptFile): ScriptedModel.Script => {
  const turns = file.turns.map(toTurn)
  return (_index, request) => {
    let replies = 0
    for (const message of request.prompt.content) if (message.role === "assistant") replies++
    return turns[replies]
  }
}

/**
 * Reads and checks a script file.
 *
 * @since 0.1.0
 */
export const load = (path: string): Effect.Effect<ScriptedModel.Script, ScriptFileError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* Effect.mapError(
      fs.readFileString(path),
      (error) =>
        new ScriptFileError({ path, problem: error.reason._tag === "NotFound" ? "no such file" : error.message })
    )
    const file = yield* Effect.mapError(
      decode(text),
      (error) => new ScriptFileError({ path, problem: error.message.replace(/\n\s*/g, " ") })
    )
    return toScript(file)
  })
