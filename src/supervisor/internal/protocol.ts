/**
 * What the process runner needs of a CLI's protocol: the arguments of a turn,
 * and a decoder that reads the turn's NDJSON events one line at a time.
 *
 * Decoding policy (the same for both CLIs): every line must be a JSON object
 * with a string `type`. An event of a kind the decoder does not read is
 * skipped, so a CLI that adds kinds keeps working. An event of a kind it reads
 * must match that kind's documented shape. Anything else (a line that is not
 * JSON, a known event with a wrong field) is a protocol error and fails the
 * turn with a `decode` WorkerError: the output of a CLI that no longer speaks
 * the protocol is not guessed at.
 *
 * @internal
 */
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import type { TurnReply, TurnRequest } from "../Worker.ts"

/** How a turn's events ended. */
export type Ending =
  | { readonly _tag: "Completed"; readonly reply: TurnReply }
  | { readonly _tag: "Failed"; readonly message: string }
  | { readonly _tag: "Incomplete"; readonly message: string | undefined }
  | { readonly _tag: "Broken"; readonly message: string }

/** Reads the events of one turn. */
export interface TurnDecoder {
  /** Reads one line of output; a message when the line breaks the protocol. */
  readonly line: (line: string) => string | undefined
  /** How the turn ended, once the output has. */
  readonly end: () => Ending
}

/** One turn about to start: the CLI's arguments and the decoder of its output. */
export interface Turn {
  readonly args: ReadonlyArray<string>
  readonly decoder: TurnDecoder
}

/** A CLI's protocol. */
export interface Protocol {
  /**
   * The arguments and decoder of a turn, or why the request cannot start one.
   * `fresh` is a new session id, for a CLI whose session ids the caller chooses.
   */
  readonly begin: (request: TurnRequest, fresh: string) => Turn | string
}

/** Reads one event of a known kind: a message when it breaks the protocol. */
export type EventHandler = (event: unknown, kind: string) => string | undefined

/** The handler of one event kind: the event decoded with its schema, then applied. */
export const on = <A>(schema: Schema.Decoder<A>, apply: (event: A) => string | undefined): EventHandler => {
  const decode = Schema.decodeUnknownExit(schema)
  return (event, kind) => {
    const decoded = decode(event)
    return Exit.isSuccess(decoded) ? apply(decoded.value) : `a "${kind}" event that does not have its documented shape`
  }
}

/** A JSON object with a string `type`: the envelope of every event of both CLIs. */
const Envelope = Schema.fromJsonString(
  Schema.StructWithRest(Schema.Struct({ type: Schema.String }), [Schema.Record(Schema.String, Schema.Unknown)])
)
const decodeEnvelope = Schema.decodeUnknownExit(Envelope)

/** Reads one line with the handlers of the kinds a decoder reads (see the policy above). */
export const readLine = (handlers: Readonly<Record<string, EventHandler>>, line: string): string | undefined => {
  if (line.trim() === "") return undefined
  const envelope = decodeEnvelope(line)
  if (Exit.isFailure(envelope)) return `a line that is not a JSON event: ${preview(line)}`
  const kind = envelope.value.type
  const handler = Object.hasOwn(handlers, kind) ? handlers[kind] : undefined
  return handler === undefined ? undefined : handler(envelope.value, kind)
}

/** A line as an error message shows it: its start only. */
const preview = (line: string): string => line.length <= 120 ? line : `${line.slice(0, 120)}…`

/** A token count: a non-negative safe integer (a hostile worker's 1e300 is refused, not summed). */
export const Count = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }))

/** A sum of token counts, kept a safe integer whatever the counts. */
export const add = (a: number, b: number): number => Math.min(a + b, Number.MAX_SAFE_INTEGER)
