/**
 * The recovery journal of a run: what a checkpoint taken in the middle of a
 * tool batch must hold so that a resume neither loses a result nor runs a
 * call twice. The results the batch has produced, the calls whose handler
 * has started and not finished, and the calls waiting for approval; and,
 * for a run continued from such a checkpoint, what that batch had done.
 *
 * @internal
 */
import type * as Message from "../Message.ts"
import type * as RunState from "../RunState.ts"

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
export const make = (state: RunState.RunState): Journal => ({
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
export const start = (journal: Journal, toolCallId: string): void => {
  journal.started.add(toolCallId)
}

/**
 * Records a call's result. From "started" to "has a result" in one step: a
 * snapshot taken in between must not see a call that ran as never started,
 * or a resume would run it again.
 *
 * @internal
 */
export const record = (journal: Journal, result: Message.ToolResultMessage): void => {
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
export const snapshot = (
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
