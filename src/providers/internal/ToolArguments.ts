/**
 * The providers' side of the run's tool-argument contract (core
 * `ToolArguments`): arguments that are not valid JSON reach the loop as the
 * marker `{ _tag: "MalformedToolArguments", raw, error }`, which the loop
 * shows the model, and such arguments go back to the provider as their raw
 * text. The providers depend on `effect/ai` alone, so they speak the marker
 * by its shape rather than import the core's module: the marker is data the
 * two sides exchange, as a wire format is. `test/providers/LoopContract.test.ts`
 * pins that both sides read and write the same values.
 *
 * @internal
 */
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"

/** Arguments that were not valid JSON: the raw text and the parser's complaint. */
const Malformed = Schema.Struct({
  _tag: Schema.Literal("MalformedToolArguments"),
  raw: Schema.String,
  error: Schema.String
})
type Malformed = typeof Malformed.Type

const isMalformedValue = Schema.is(Malformed)

/** Whether arguments are the {@link Malformed} marker (the tag first: most arguments are not). */
export const isMalformed = (u: unknown): u is Malformed =>
  Predicate.isTagged(u, "MalformedToolArguments") && isMalformedValue(u)

/**
 * Parses the JSON text of a tool call's arguments: the value, or the
 * {@link Malformed} marker. Empty text means no arguments (`{}`), as
 * providers send for parameterless tools.
 */
export const parse = (text: string): unknown => {
  if (text.trim() === "") return {}
  try {
    return JSON.parse(text)
  } catch (error) {
    const malformed: Malformed = {
      _tag: "MalformedToolArguments",
      raw: text,
      error: error instanceof Error ? error.message : String(error)
    }
    return malformed
  }
}

/** The JSON text to send back for arguments: the raw text of the marker, the JSON encoding otherwise. */
export const toJsonText = (params: unknown): string =>
  isMalformed(params) ? params.raw : JSON.stringify(params ?? {})
