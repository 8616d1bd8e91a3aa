/**
 * The worker contract of a supervised run: what the supervisor asks of the
 * thing that does the work, one turn at a time. A worker is our own loop or an
 * external coding-agent CLI (see `ExternalWorker`); the supervisor sees only
 * this: a message in, the reply's text and token usage out, and an opaque
 * resume token it keeps in the session checkpoint and hands back on the next
 * turn.
 *
 * @since 0.1.0
 */
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/**
 * One turn asked of a worker.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnRequest {
  /** The message the worker acts on: the task, the approved plan, or the checks' feedback. */
  readonly message: string
  /** `plan` asks for a plan with the work tools withheld; `act` does the work. */
  readonly phase: "plan" | "act"
  /** The token of the conversation to continue, as the previous reply returned it; `undefined` starts one. */
  readonly resumeToken: string | undefined
}

/**
 * What a worker's turn produced.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnReply {
  /** The worker's reply text (its messages of the turn, in order). */
  readonly text: string
  /** The tokens the turn consumed; input tokens include cached ones. */
  readonly usage: { readonly inputTokens: number; readonly outputTokens: number }
  /** The token that continues this conversation on the next turn; the supervisor keeps it in the checkpoint. */
  readonly resumeToken: string | undefined
  /** What the turn cost in US dollars, when the worker knows it (our loop does); it counts against the cost budget. */
  readonly costUsd?: number | undefined
}

/**
 * A turn the worker could not complete: `spawn` (it could not be started, or
 * the request was refused before it was), `exit` (it ended with a failure),
 * `eof` (its output ended before the turn did), `decode` (its output broke
 * the protocol or the caps on it) or `timeout` (it ran past the per-turn
 * limit and was killed).
 *
 * @since 0.1.0
 * @category errors
 */
export class WorkerError extends Schema.TaggedError<WorkerError>()("WorkerError", {
  worker: Schema.String,
  reason: Schema.Literals(["exit", "eof", "decode", "spawn", "timeout"]),
  message: Schema.String,
  exitCode: Schema.optional(Schema.Number)
}) {}

/**
 * A worker: one turn at a time, each a message in and a reply out. `R` is
 * what its turns need (an external worker needs the `ChildProcessSpawner`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Worker<R = never> {
  /** How the worker is named in events and errors (`claude`, `codex`, `agent`…). */
  readonly name: string
  readonly turn: (request: TurnRequest) => Effect.Effect<TurnReply, WorkerError, R>
}

/**
 * Builds a worker from a name and its turn.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Worker } from "effect-agent/supervisor"
 *
 * const echo = Worker.make("echo", (request) =>
 *   Effect.succeed({
 *     text: `did: ${request.message}`,
 *     usage: { inputTokens: 0, outputTokens: 0 },
 *     resumeToken: undefined
 *   })
 * )
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <R = never>(
  name: string,
  turn: (request: TurnRequest) => Effect.Effect<TurnReply, WorkerError, R>
): Worker<R> => ({ name, turn })
