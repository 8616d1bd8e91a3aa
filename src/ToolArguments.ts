/**
 * Tool-call arguments as a model sent them. Providers parse the JSON text of
 * each call's arguments with {@link parse}: valid JSON becomes the value, and
 * anything else becomes a {@link Malformed} value that keeps the raw text, so
 * the loop can tell the model exactly what it sent instead of failing the
 * stream. {@link toJsonText} turns either back into the text to replay.
 *
 * @since 0.1.0
 */
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"

/**
 * Arguments that were not valid JSON: the raw text and the parser's complaint.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Malformed = Schema.Struct({
  _tag: Schema.Literal("MalformedToolArguments"),
  raw: Schema.String,
  error: Schema.String
})
/**
 * @since 0.1.0
 * @category models
 */
export type Malformed = typeof Malformed.Type

const isMalformedValue = Schema.is(Malformed)

/**
 * Whether arguments are a {@link Malformed} value.
 *
 * @since 0.1.0
 * @category guards
 */
export const isMalformed = (u: unknown): u is Malformed =>
  // the tag first: every call's arguments are checked, and most are not malformed
  Predicate.isTagged(u, "MalformedToolArguments") && isMalformedValue(u)

/**
 * Builds a {@link Malformed} value.
 *
 * @since 0.1.0
 * @category constructors
 */
export const malformed = (raw: string, error: string): Malformed => ({ _tag: "MalformedToolArguments", raw, error })

/**
 * Parses the JSON text of a tool call's arguments. Empty text means no
 * arguments (`{}`), as providers send for parameterless tools.
 *
 * @example
 * ```ts
 * import { ToolArguments } from "effect-agent"
 *
 * console.log(ToolArguments.parse('{"a":1}')) // Output: { a: 1 }
 * // A malformed text is a value the model can be shown, not an exception:
 * const malformed = ToolArguments.parse('{"a":')
 * if (ToolArguments.isMalformed(malformed)) console.log(malformed._tag, malformed.raw) // Output: MalformedToolArguments {"a":
 * ```
 *
 * @since 0.1.0
 * @category parsing
 */
export const parse = (text: string): unknown => {
  if (text.trim() === "") return {}
  try {
    return JSON.parse(text)
  } catch (error) {
    return malformed(text, error instanceof Error ? error.message : String(error))
  }
}

/**
 * The JSON text to send back to a provider for arguments: the raw text for
 * malformed arguments, the JSON encoding otherwise.
 *
 * @since 0.1.0
 * @category codecs
 */
export const toJsonText = (params: unknown): string =>
  isMalformed(params) ? params.raw : JSON.stringify(params ?? {})
