/**
 * The one rule for a session id, shared by every surface that takes one: the
 * checkpoint stores (`Session`), `DurableSession` and its stores, the agent
 * server's routes and the command's `--session-id`. An id names a directory
 * (the file store), a row (the SQL store) and a workflow execution, so it is
 * 1 to 128 letters, digits, `.`, `_` or `-`, not starting with `.`: no path
 * separator, no control character (PostgreSQL's `text` refuses a NUL byte,
 * so a session under such an id could never be recorded, run or finished).
 *
 * `CheckpointStore` re-exports the schema as `SessionId`; the server's
 * `AgentServer.SessionId` is the same schema.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { InvalidSessionId } from "./errors.ts"

const pattern = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/

/**
 * The rule, in words (an `InvalidSessionId` carries it).
 *
 * @internal
 */
export const rule = "1 to 128 characters among letters, digits, '.', '_' and '-', not starting with '.'"

/**
 * A session id: 1 to 128 letters, digits, `.`, `_` or `-`, not starting with `.`.
 *
 * @internal
 */
export const SessionId = Schema.String.check(Schema.isPattern(pattern, { expected: `a session id (${rule})` }))

/**
 * Whether a string is a valid session id.
 *
 * @internal
 */
export const isValid = (sessionId: string): boolean => pattern.test(sessionId)

/**
 * Succeeds with the id when it is valid; fails with `InvalidSessionId` otherwise.
 *
 * @internal
 */
export const validate = (sessionId: string): Effect.Effect<string, InvalidSessionId> =>
  isValid(sessionId) ? Effect.succeed(sessionId) : Effect.fail(new InvalidSessionId({ sessionId, rule }))
