/**
 * The Codex protocol: `codex exec --json`, the message on stdin (`-`), one
 * process per turn, the conversation carried by the thread id Codex reports
 * (`codex exec resume <id>` from the second turn on).
 *
 * The event shapes are Codex's `ThreadEvent`s, as `codex-rs/exec/src/
 * exec_events.rs` defines them and the Codex TypeScript SDK types them
 * (`sdk/typescript/src/events.ts` in openai/codex): `thread.started`
 * (`thread_id`), `item.completed` (an `agent_message` item's `text`),
 * `turn.completed` (`usage`), `turn.failed` (`error.message`) and `error`
 * (`message`). Other kinds (`turn.started`, `item.started`, `item.updated`, …)
 * are skipped.
 *
 * Usage: `turn.completed` reports the thread's running totals (Codex 0.155
 * and later count the whole conversation, a resumed one included), so a
 * turn's usage is the difference from the totals this worker last saw for the
 * thread. Totals that fell (a Codex that counts from the resume) are the
 * turn's own. A thread this worker has not seen (resumed after a restart) is
 * counted in full once: an over-count that ends a budget early rather than
 * late.
 *
 * @internal
 */
import * as Schema from "effect/Schema"
import type { TurnReply } from "../Worker.ts"
import { Count, type Ending, on, type Protocol, readLine } from "./protocol.ts"

/**
 * A thread id as it may reach `codex exec resume <id>`: a UUID or a thread
 * name, never an option (`-…`) or anything with spaces or control characters.
 */
const ThreadId = Schema.String.check(Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/))
const isThreadId = Schema.is(ThreadId)

const Usage = Schema.Struct({
  input_tokens: Count,
  cached_input_tokens: Schema.optionalKey(Count),
  output_tokens: Count
})

const ThreadStarted = Schema.Struct({ thread_id: ThreadId })
const ItemCompleted = Schema.Struct({
  item: Schema.Struct({ type: Schema.String, text: Schema.optionalKey(Schema.Unknown) })
})
const TurnCompleted = Schema.Struct({ usage: Usage })
const TurnFailed = Schema.Struct({ error: Schema.Struct({ message: Schema.String }) })
const ErrorEvent = Schema.Struct({ message: Schema.String })

type Totals = TurnReply["usage"]

/** The running totals last seen per thread, for the threads of the most recent turns. */
export class ThreadTotals {
  private readonly totals = new Map<string, Totals>()
  private readonly capacity: number
  constructor(capacity = 64) {
    this.capacity = capacity
  }
  /** The turn's usage from the thread's new totals; records them. */
  turnUsage(thread: string, fresh: boolean, current: Totals): Totals {
    const previous = fresh ? { inputTokens: 0, outputTokens: 0 } : this.totals.get(thread)
    this.totals.delete(thread)
    this.totals.set(thread, current)
    const oldest = this.totals.keys().next()
    if (this.totals.size > this.capacity && oldest.done !== true) this.totals.delete(oldest.value)
    if (previous === undefined) return current
    const inputTokens = current.inputTokens - previous.inputTokens
    const outputTokens = current.outputTokens - previous.outputTokens
    return inputTokens < 0 || outputTokens < 0 ? current : { inputTokens, outputTokens }
  }
}

/** The protocol, with the flags each phase adds; `totals` is the worker's, across its turns. */
export const protocol = (options: {
  readonly model: string | undefined
  readonly args: ReadonlyArray<string>
  readonly phaseArgs: { readonly plan: ReadonlyArray<string>; readonly act: ReadonlyArray<string> }
  readonly totals: ThreadTotals
}): Protocol => ({
  begin: (request) => {
    const resumed = request.resumeToken
    if (resumed !== undefined && !isThreadId(resumed)) return "the resume token is not a Codex thread id"
    const args = [
      "exec",
      "--json",
      ...(options.model === undefined ? [] : [`--model=${options.model}`]),
      ...options.args,
      ...options.phaseArgs[request.phase],
      ...(resumed === undefined ? [] : ["resume", resumed]),
      "-"
    ]
    return { args, decoder: decoder(resumed, options.totals) }
  }
})

/** Reads one turn's events. */
const decoder = (resumed: string | undefined, totals: ThreadTotals) => {
  let thread = resumed
  const messages: Array<string> = []
  let completed: typeof Usage.Type | undefined
  let failure: string | undefined
  let lastError: string | undefined
  const handlers = {
    "thread.started": on(ThreadStarted, (event) => {
      thread = event.thread_id
      return undefined
    }),
    "item.completed": on(ItemCompleted, ({ item }) => {
      if (item.type !== "agent_message") return undefined
      if (typeof item.text !== "string") return "an agent_message item without its text"
      messages.push(item.text)
      return undefined
    }),
    "turn.completed": on(TurnCompleted, (event) => {
      completed = event.usage
      return undefined
    }),
    "turn.failed": on(TurnFailed, (event) => {
      failure = event.error.message
      return undefined
    }),
    // Codex also reports errors it retries ("Reconnecting… 2/5"): one alone does not end the turn.
    error: on(ErrorEvent, (event) => {
      lastError = event.message
      return undefined
    })
  }
  const over = () => completed !== undefined || failure !== undefined
  return {
    line: (line: string) => over() ? undefined : readLine(handlers, line),
    end: (): Ending => {
      if (failure !== undefined) return { _tag: "Failed", message: `the turn failed: ${failure}` }
      if (completed === undefined) return { _tag: "Incomplete", message: lastError }
      if (thread === undefined) {
        return { _tag: "Broken", message: "the turn completed without a thread.started event: it cannot be resumed" }
      }
      const current = { inputTokens: completed.input_tokens, outputTokens: completed.output_tokens }
      return {
        _tag: "Completed",
        reply: {
          text: messages.join("\n\n"),
          usage: totals.turnUsage(thread, resumed === undefined, current),
          resumeToken: thread
        }
      }
    }
  }
}
