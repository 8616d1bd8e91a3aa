/**
 * The worker contract of a supervised run: whatever does the work between
 * two rounds of checks. One supervised turn is one `turn` call: the worker gets
 * a message (the task, a plan request, or the checks' feedback) and answers
 * with its reply once it has stopped working. Our own loop is a worker
 * (`AgentWorker`); so is an external coding-agent CLI driven as a subprocess
 * (`ExternalWorker`).
 *
 * @since 0.1.0
 */
import { type Effect, Schema } from "effect"

/**
 * What the supervisor asks of a worker for one turn.
 *
 * - `message`: the text the worker reads (task, plan request, feedback).
 * - `phase`: `"plan"` while a plan is asked for (a worker must not change
 *   anything then: work tools withheld), `"act"` afterwards.
 * - `resumeToken`: the worker's own conversation id from the previous turn
 *   (or from a checkpoint), `undefined` on a fresh conversation.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnRequest {
  readonly message: string
  readonly phase: "plan" | "act"
  readonly resumeToken: string | undefined
}

/**
 * A worker's answer to one turn: its reply text, the tokens the turn used,
 * and the token that resumes its conversation (kept in the checkpoint).
 * `costUsd`, when the worker knows it, counts against the cost budget.
 *
 * @since 0.1.0
 * @category models
 */
export interface TurnReply {
  readonly text: string
  readonly usage: { readonly inputTokens: number; readonly outputTokens: number }
  readonly resumeToken: string | undefined
  readonly costUsd?: number | undefined
}

/**
 * A worker failed a turn: its process exited, its stream ended mid-turn
 * (`eof`), its output could not be decoded, it could not be started, or it
 * timed out.
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
 * A worker: a name (for events and errors) and one turn.
 *
 * @since 0.1.0
 * @category models
 */
export interface Worker<R = never> {
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
 *   Effect.succeed({ text: `did: ${request.message}`, usage: { inputTokens: 0, outputTokens: 0 }, resumeToken: undefined })
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
