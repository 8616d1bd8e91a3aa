/**
 * The durable rows' workload and its check: a scripted zero-latency model,
 * one tool call a turn. On call n < T the model answers the turn's text (the
 * in-memory workload's 20 deltas, in one piece: these rows compare what
 * persisting a turn costs, not streaming) and one call `noop({ i: n })` with
 * id `call_n`; on call T the final answer. Each session's prompt is its id,
 * which is how a model shared by a process's sessions finds the session's
 * script (and checks each request ends with the previous turn's result).
 *
 * After the clock stops, each session's transcript is read back (from its
 * store: the checkpoint file, the workflow's stored result, LangGraph's
 * checkpoint) and compared with the one the script implies, message by
 * message.
 */
import { finalText, noopResult, type Script, sessionScript, turns } from "../workload.ts"

/** One message of a transcript, in the shape every library's maps to. */
export interface Entry {
  readonly role: "user" | "assistant" | "tool"
  readonly text: string
  /** The assistant's calls, `id name json-args`. */
  readonly calls: ReadonlyArray<string>
  /** A tool result's call id. */
  readonly toolCallId?: string | undefined
}

/** The transcript of a finished session of T tool turns whose prompt was `prompt`. */
export const expected = (prompt: string, toolTurns: number): ReadonlyArray<Entry> => {
  const out: Array<Entry> = [{ role: "user", text: prompt, calls: [] }]
  for (let n = 0; n < toolTurns; n++) {
    const turn = turns.toolTurn(n)
    out.push({ role: "assistant", text: turn.text, calls: turn.calls.map((c) => `${c.id} ${c.name} ${c.json}`) })
    out.push({ role: "tool", text: noopResult(n), calls: [], toolCallId: `call_${n}` })
  }
  out.push({ role: "assistant", text: finalText(toolTurns), calls: [] })
  return out
}

/** Fails loudly unless the transcript is exactly the expected one. */
export const verifyTranscript = (row: string, sessionId: string, toolTurns: number, actual: ReadonlyArray<Entry>): void => {
  const want = expected(sessionId, toolTurns)
  const show = (e: Entry | undefined) => JSON.stringify(e)
  if (actual.length !== want.length) {
    throw new Error(`${row}: session ${sessionId} has ${actual.length} messages, expected ${want.length}; last ${show(actual.at(-1))}`)
  }
  for (let i = 0; i < want.length; i++) {
    if (show(actual[i]) !== show(want[i])) {
      throw new Error(`${row}: session ${sessionId}, message ${i}: ${show(actual[i])}, expected ${show(want[i])}`)
    }
  }
}

/** The scripts of a process's sessions, by session id (the prompt). */
export class Scripts {
  private readonly byId = new Map<string, Script>()
  /** Model calls made in all. */
  calls = 0
  /** Tool runs in all. */
  toolRuns = 0

  open(sessionId: string, toolTurns: number): void {
    if (this.byId.has(sessionId)) throw new Error(`session ${sessionId} started twice`)
    this.byId.set(sessionId, sessionScript(sessionId, toolTurns))
  }

  /** The script of the session whose prompt this is (unknown: fails loudly). */
  of(prompt: string): Script {
    const script = this.byId.get(prompt)
    if (script === undefined) throw new Error(`the model was called for an unknown session ${JSON.stringify(prompt)}`)
    return script
  }

  /** Checks the model was called T + 1 times for the session. */
  check(sessionId: string, toolTurns: number): void {
    const script = this.of(sessionId)
    if (script.calls !== toolTurns + 1) {
      throw new Error(`session ${sessionId}: the model was called ${script.calls} times, expected ${toolTurns + 1}`)
    }
  }
}

/** A row: one library's durable (or not) way of running the workload, in one process. */
export interface Row {
  readonly name: string
  /** Runs one session of T tool turns to its end. */
  session(sessionId: string, toolTurns: number): Promise<void>
  /** Reads the session's transcript back from where it was kept (after the clock), and its published events (0: none). */
  readBack(sessionId: string): Promise<{ readonly transcript: ReadonlyArray<Entry>; readonly events: number }>
  close(): Promise<void>
}

/** What a row is given. */
export interface RowOptions {
  /** The row's own database, `postgres://…/<name>` (rows without one ignore it). */
  readonly url: string
  /** A directory of its own (the file store's). */
  readonly dir: string
  readonly scripts: Scripts
}
