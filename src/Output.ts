/**
 * Typed final output: `Agent.run({ output: S })` ends with a value of
 * `S["Type"]`. The loop offers the model a terminating `final_answer` tool
 * whose parameters are `S` (its JSON Schema made by effect's Schema, as for
 * every tool), beside the run's other tools, on every provider. The run ends
 * when the model calls it with arguments that decode; arguments that do not
 * go back to the model as an error it reads (what was wrong, the expected
 * schema) for `outputRetries` more attempts, and then the run ends
 * `OutputInvalid` (never an exception).
 *
 * A Schema whose JSON Schema is not an object (a string, an array, a union)
 * is wrapped: the tool's parameters are `{ value: S }`, as the providers
 * require an object, and the output is the `value`.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Agent, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const Verdict = Schema.Struct({ approved: Schema.Boolean, reasons: Schema.Array(Schema.String) })
 *
 * const program = Effect.gen(function*() {
 *   const result = yield* Agent.run({ prompt: "Review the change", output: Verdict })
 *   // typed: { approved: boolean; reasons: ReadonlyArray<string> } | undefined
 *   console.log(result.outcome._tag, result.output?.approved, result.output?.reasons)
 * })
 *
 * const Model = ScriptedModel.layer([
 *   { toolCalls: [{ name: "final_answer", params: { approved: true, reasons: ["tests pass"] } }] }
 * ])
 * Effect.runPromise(program.pipe(Effect.provide(Layer.merge(Model, ToolRegistry.layerEntries()))))
 * // Output: Completed true [ 'tests pass' ]
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Hash from "effect/Hash"
import type * as JsonSchema from "effect/JsonSchema"
import * as Schema from "effect/Schema"
import * as Tool from "effect/ai/Tool"
import * as AgentTool from "./AgentTool.ts"

/**
 * The name of the tool the model gives its final answer with.
 *
 * @since 0.1.0
 * @category constants
 */
export const toolName = "final_answer"

/**
 * A Schema a run's output can have: any Schema that decodes and encodes
 * without services.
 *
 * @since 0.1.0
 * @category models
 */
export type Any = Schema.Codec<unknown, unknown>

/**
 * How many invalid final answers the model may correct, by default: the
 * run ends `OutputInvalid` at the third invalid one.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultRetries = 2

/**
 * What the final answer tool is made of, for one output Schema.
 *
 * @since 0.1.0
 * @category models
 */
export interface FinalAnswer {
  /** The `final_answer` tool: its parameters are the Schema (or `{ value: S }`, see {@link wrapped}). */
  readonly tool: Tool.Any
  /** The tool's parameter Schema: the output Schema, or `{ value: S }`. */
  readonly parameters: Any
  /** Whether the Schema's JSON Schema is not an object, so the tool takes it as `{ value }`. */
  readonly wrapped: boolean
  /** The Schema's identity: a digest of the tool's JSON Schema (see {@link identity}). */
  readonly identity: string
}

/**
 * The description of the `final_answer` tool.
 *
 * @since 0.1.0
 * @category constants
 */
export const description = "Give your final answer, and end the task. Call this tool once, when you are done, " +
  "with the answer as its arguments; the arguments must match its schema. Do not answer in plain text."

/**
 * What a wrap-up request (the turn limit's, a budget's) adds for a run with
 * a typed output.
 *
 * @since 0.1.0
 * @category constants
 */
export const wrapUpNote = `Give your final answer by calling the ${toolName} tool: it is the only way to deliver ` +
  "your result. Put in it what you have, even if the task is not complete."

/**
 * What a wrap-up request adds for a run with a native typed output.
 *
 * @since 0.1.0
 * @category constants
 */
export const nativeWrapUpNote = "Give your final answer now, as the JSON object your answer must be: put in it " +
  "what you have, even if the task is not complete."

const isObjectSchema = (schema: JsonSchema.JsonSchema): boolean => schema.type === "object"

/** JSON with the keys of every object sorted, so a digest does not depend on key order. */
const canonical = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`
  if (typeof value === "object" && value !== null) {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined)
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`
  }
  return JSON.stringify(value) ?? "null"
}

/**
 * A Schema's identity, as a session saves it: a digest of the JSON Schema
 * the model is given for it (keys sorted), with its length. Two Schemas with
 * the same JSON Schema have the same identity; a Schema that changes what
 * the model must send gets another.
 *
 * @since 0.1.0
 * @category utils
 */
export const identity = (jsonSchema: JsonSchema.JsonSchema): string => {
  const text = canonical(jsonSchema)
  return `json-schema:${text.length.toString(16)}:${(Hash.string(text) >>> 0).toString(16).padStart(8, "0")}`
}

const cache = new WeakMap<Any, FinalAnswer>()

/**
 * The `final_answer` tool for a Schema (made once per Schema). The tool does
 * not count toward the per-turn call limit or the termination vote: the loop
 * ends the run itself when a call of it decodes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const finalAnswer = (schema: Any): FinalAnswer => {
  const cached = cache.get(schema)
  if (cached !== undefined) return cached
  const wrapped = !isObjectSchema(Tool.getJsonSchemaFromSchema(schema))
  const parameters: Any = wrapped ? Schema.Struct({ value: schema }) : schema
  const tool = AgentTool.annotate(
    Tool.make(toolName, { description, parameters, success: Schema.String }),
    { countsTowardVote: false, countsTowardCallLimit: false, replaySafe: true }
  )
  const made: FinalAnswer = { tool, parameters, wrapped, identity: identity(Tool.getJsonSchema(tool)) }
  cache.set(schema, made)
  return made
}

/**
 * How the model is asked for the final answer:
 *
 * - `"tool"` (the default): through the `final_answer` tool, on every
 *   provider, beside any other tools.
 * - `"native"`: through the provider's own structured output (OpenAI Chat
 *   Completions' `response_format: json_schema`, the Responses API's
 *   `text.format`), for a run with no other tools: the reply's text is the
 *   answer, as JSON. The Anthropic layer does not support it (its model call
 *   fails, saying so). The Schema's JSON Schema is sent in OpenAI's strict
 *   form, so give it required fields only.
 *
 * @since 0.1.0
 * @category models
 */
export type Mode = "tool" | "native"

/**
 * The structured output a model call is asked for, when the run asks for it
 * natively (see {@link Mode}): the loop provides it around the model call,
 * and a provider that supports structured output reads it (the layers of
 * `effect-agent/providers` do) as it would `generateObject`'s schema.
 *
 * @since 0.1.0
 * @category references
 */
export const NativeFormat = Context.Reference<
  { readonly objectName: string; readonly schema: Schema.Top } | undefined
>("effect-agent/Output/NativeFormat", { defaultValue: () => undefined })

/**
 * What a native-mode run tells the model when its reply does not decode.
 *
 * @since 0.1.0
 * @category constants
 */
export const nativeRetry = (issue: string, jsonSchema: JsonSchema.JsonSchema): string =>
  `Your answer is not valid: ${issue}\n` +
  `Answer again with only a JSON object matching this schema: ${JSON.stringify(jsonSchema)}`
