/**
 * A run's transcript and its `Prompt` form, kept in step: each message is
 * converted once, when it is appended, and a request holds the converted
 * messages as they are, never a copy of the history. Beside it, the recovery
 * journal: the results of the tool batch in progress, before they are
 * appended, and what a checkpoint taken in the middle of a batch must hold
 * so that a resume neither loses a result nor runs a call twice (the calls
 * whose handler has started and not finished, the calls waiting for
 * approval; and, for a run continued from such a checkpoint, what that
 * batch had done).
 *
 * @internal
 */
import * as Prompt from "effect/ai/Prompt"
import * as Message from "../Message.ts"
import type * as RunState from "../RunState.ts"

/**
 * The transcript of a run in progress.
 *
 * @internal
 */
export interface Transcript {
  readonly system: string | undefined
  /** The messages; append with {@link append}. */
  readonly messages: Array<Message.Message>
  /** Their `Prompt` messages, system prompt first; custom messages have none. */
  readonly prompt: Array<Prompt.Message>
  /** `Prompt` forms of messages in requests a transform rebuilt (made on first use). */
  converted: Map<Message.Message, Prompt.Message> | undefined
  /** Index of the first message this run added (the result reports those). */
  readonly firstNew: number
}

/**
 * A transcript of `messages` (converted here), of which those from `firstNew` on are the run's own.
 *
 * @internal
 */
export const make = (
  system: string | undefined,
  messages: ReadonlyArray<Message.Message>,
  firstNew: number
): Transcript => {
  const transcript: Transcript = {
    system,
    messages: [],
    prompt: system === undefined ? [] : [Prompt.makeMessage("system", { content: system })],
    converted: undefined,
    firstNew
  }
  appendAll(transcript, messages)
  return transcript
}

/**
 * Appends a message to the transcript and its `Prompt` form.
 *
 * @internal
 */
export const append = (transcript: Transcript, message: Message.Message): void => {
  transcript.messages.push(message)
  const converted = Message.toPromptMessage(message)
  if (converted !== undefined) transcript.prompt.push(converted)
}

/**
 * Appends messages in order.
 *
 * @internal
 */
export const appendAll = (transcript: Transcript, messages: ReadonlyArray<Message.Message>): void => {
  for (const message of messages) append(transcript, message)
}

/**
 * The messages the run added.
 *
 * @internal
 */
export const added = (transcript: Transcript): ReadonlyArray<Message.Message> =>
  transcript.messages.slice(transcript.firstNew)

/**
 * The request for the transcript as it is. It holds the transcript's `Prompt`
 * messages, not a copy: the loop appends to them only between model calls,
 * never while one runs (copying them would cost every turn the length of the
 * history).
 *
 * @internal
 */
export const request = (transcript: Transcript): Prompt.Prompt => Prompt.fromMessages(transcript.prompt)

/**
 * The request for other messages (a `transformContext` hook's), with the
 * system prompt first; each message is converted once, then cached.
 *
 * @internal
 */
export const requestOf = (transcript: Transcript, messages: ReadonlyArray<Message.Message>): Prompt.Prompt => {
  const request: Array<Prompt.Message> = transcript.system === undefined ? [] : [transcript.prompt[0]!]
  const cache = transcript.converted ??= new Map()
  for (const message of messages) {
    let converted = cache.get(message)
    if (converted === undefined) {
      converted = Message.toPromptMessage(message)
      if (converted === undefined) continue
      cache.set(message, converted)
    }
    request.push(converted)
  }
  return Prompt.fromMessages(request)
}

/**
 * The last assistant message and its calls that have no result after it.
 *
 * @internal
 */
export const openCalls = (messages: ReadonlyArray<Message.Message>): {
  readonly message: Message.AssistantMessage | undefined
  readonly calls: ReadonlyArray<Message.ToolCallPart>
} => {
  let index = messages.length - 1
  while (index >= 0 && messages[index]!.role !== "assistant") index--
  const last = messages[index]
  if (last === undefined || last.role !== "assistant") return { message: undefined, calls: [] }
  const answered = new Set<string>()
  for (let i = index + 1; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role === "toolResult") answered.add(message.toolCallId)
  }
  return { message: last, calls: Message.toolCalls(last).filter((call) => !answered.has(call.id)) }
}

/**
 * Whether the transcript ends with an assistant reply that asks for no tools.
 *
 * @internal
 */
export const endsWithReply = (messages: ReadonlyArray<Message.Message>): boolean => {
  const last = messages.at(-1)
  return last !== undefined && last.role === "assistant" && !Message.hasToolCalls(last)
}

// -----------------------------------------------------------------------------
// The recovery journal
// -----------------------------------------------------------------------------

/**
 * A run's recovery journal.
 *
 * @internal
 */
export interface Journal {
  /** Results of the batch in progress, by call id (kept as they are if the run is interrupted). */
  readonly results: Map<string, Message.ToolResultMessage>
  /** Calls of the batch in progress whose handler has started and not finished. */
  readonly started: Set<string>
  /** Calls waiting for approval, by call id. */
  readonly pendingApprovals: Map<string, RunState.PendingApproval>
  /** From a state saved mid-batch: the results that batch had produced, by call id. */
  readonly restoredResults: Map<string, Message.ToolResultMessage>
  /** From a state saved mid-batch: the calls that had started. */
  readonly restoredStarted: Set<string>
}

/**
 * The journal of a run continued from `state` (empty for a new run).
 *
 * @internal
 */
export const journal = (state: RunState.RunState): Journal => ({
  results: new Map(),
  started: new Set(),
  pendingApprovals: new Map(),
  restoredResults: new Map(state.partialResults.map((result) => [result.toolCallId, result])),
  restoredStarted: new Set(state.startedCalls)
})

/**
 * Marks a call's handler as started.
 *
 * @internal
 */
export const startCall = (journal: Journal, toolCallId: string): void => {
  journal.started.add(toolCallId)
}

/**
 * Records a call's result. From "started" to "has a result" in one step: a
 * snapshot taken in between must not see a call that ran as never started,
 * or a resume would run it again.
 *
 * @internal
 */
export const recordResult = (journal: Journal, result: Message.ToolResultMessage): void => {
  journal.results.set(result.toolCallId, result)
  journal.started.delete(result.toolCallId)
}

/**
 * Ends a batch: its results are in the transcript now, and what a restored
 * batch had done is done. (What was restored stays until here, so a snapshot
 * taken while the batch runs still has it: a call that started before the
 * crash must never look unstarted.)
 *
 * @internal
 */
export const endBatch = (journal: Journal): void => {
  journal.results.clear()
  journal.restoredResults.clear()
  journal.restoredStarted.clear()
}

/**
 * The journal's part of a snapshot.
 *
 * @internal
 */
export const journalSnapshot = (
  journal: Journal
): Pick<RunState.RunState, "pendingApprovals" | "partialResults" | "startedCalls"> => {
  const { restoredResults, restoredStarted, results, started } = journal
  return {
    pendingApprovals: Array.from(journal.pendingApprovals.values()),
    partialResults: [
      ...Array.from(restoredResults.values()).filter((result) => !results.has(result.toolCallId)),
      ...results.values()
    ],
    startedCalls: [
      ...Array.from(restoredStarted).filter((id) => !results.has(id) && !started.has(id)),
      ...started
    ]
  }
}
