/**
 * The workload every adapter runs, and the checks every session must pass.
 *
 * A scripted in-memory model: on call n < T it streams 20 small text deltas
 * and then one call to the no-op tool `noop({ i: n })`; on call T it streams
 * the final answer (also 20 deltas) and stops. Nothing here touches the
 * network or a timer: the only waiting is the loop's own.
 *
 * Each adapter translates a `Turn` into its library's model protocol
 * (pi-ai's AssistantMessageEventStream, the AI SDK's LanguageModelV4 stream,
 * the Agents SDK's `Model` stream events, effect/ai's `LanguageModel`), so all
 * of them stream the same content in the same order.
 */

/** Text deltas streamed per model call. */
export const DELTAS_PER_TURN = 20

/** Name of the no-op tool. */
export const NOOP = "noop"

/** Name of the tool of the parallel batch phase (sleeps, then answers). */
export const WAIT = "wait"

/** One tool call as the model emits it: arguments both as a value and as JSON text. */
export interface CallSpec {
  readonly id: string
  readonly name: string
  readonly args: { readonly i: number }
  readonly json: string
}

/** What one model call streams: text deltas, then tool calls (none on the final turn). */
export interface Turn {
  readonly deltas: ReadonlyArray<string>
  readonly text: string
  readonly calls: ReadonlyArray<CallSpec>
}

/** What the no-op tool returns for `{ i }`. */
export const noopResult = (i: number): string => `ok ${i}`

/** The exact final text of a session of T tool turns. */
export const finalText = (toolTurns: number): string => finalDeltas(toolTurns).join("")

const finalDeltas = (toolTurns: number): ReadonlyArray<string> => {
  const out: Array<string> = []
  for (let k = 0; k < DELTAS_PER_TURN - 1; k++) out.push(`w${k} `)
  out.push(`done after ${toolTurns} tool turns.`)
  return out
}

const call = (name: string, n: number): CallSpec => ({
  id: `call_${n}`,
  name,
  args: { i: n },
  json: JSON.stringify({ i: n })
})

const textTurn = (deltas: ReadonlyArray<string>, calls: ReadonlyArray<CallSpec>): Turn => ({
  deltas,
  text: deltas.join(""),
  calls
})

/**
 * Turns built once per process and shared by every session, so that building
 * the script costs no adapter anything per turn.
 */
export class Turns {
  private readonly tool: Array<Turn> = []
  private readonly finals = new Map<number, Turn>()

  toolTurn(n: number): Turn {
    let turn = this.tool[n]
    if (turn === undefined) {
      const deltas: Array<string> = []
      for (let k = 0; k < DELTAS_PER_TURN; k++) deltas.push(`t${n}.${k} `)
      turn = textTurn(deltas, [call(NOOP, n)])
      this.tool[n] = turn
    }
    return turn
  }

  finalTurn(toolTurns: number): Turn {
    let turn = this.finals.get(toolTurns)
    if (turn === undefined) {
      turn = textTurn(finalDeltas(toolTurns), [])
      this.finals.set(toolTurns, turn)
    }
    return turn
  }
}

/** The process-wide turns. */
export const turns = new Turns()

/**
 * The script of one session: `next()` returns what model call number `calls`
 * streams and fails loudly when the loop calls the model past the script's end.
 * `check` verifies a request ended with the previous turn's last tool result.
 */
export interface Script {
  readonly name: string
  calls: number
  next(): Turn
  /** Throws unless the request of the current call ended with this tool result. */
  check(lastToolCallId: string | undefined, lastOutput: string | undefined): void
  readonly finalText: string
}

/** The session script: T calls of `noop`, then the final answer. */
export const sessionScript = (adapter: string, toolTurns: number): Script => {
  const last = turns.finalTurn(toolTurns)
  return {
    name: adapter,
    calls: 0,
    finalText: last.text,
    next() {
      const n = this.calls++
      if (n < toolTurns) return turns.toolTurn(n)
      if (n === toolTurns) return last
      throw new Error(`${adapter}: model called ${n + 1} times, the script has ${toolTurns + 1} turns`)
    },
    check(id, output) {
      const n = this.calls
      if (n === 0) return
      const expected = `call_${n - 1}`
      if (id !== expected || (output !== undefined && !output.includes(noopResult(n - 1)))) {
        throw new Error(
          `${adapter}: model call ${n + 1} expected the result of ${expected} (${noopResult(n - 1)}) last in its request, got ${id} (${output})`
        )
      }
    }
  }
}

/** The parallel batch phase: one turn of `calls` tool calls, each sleeping `ms`. */
export interface BatchSpec {
  readonly calls: number
  readonly ms: number
  readonly maxParallel: number
}

/** The batch's final answer. */
export const batchFinalText = (calls: number) => `waited for ${calls} tools.`

/** The batch script: call 0 asks for all the waits at once, call 1 answers. */
export const batchScript = (adapter: string, spec: BatchSpec): Script => {
  const ask: Array<CallSpec> = []
  for (let n = 0; n < spec.calls; n++) ask.push(call(WAIT, n))
  const first = textTurn(["waiting "], ask)
  const last = textTurn([batchFinalText(spec.calls)], [])
  return {
    name: adapter,
    calls: 0,
    finalText: last.text,
    next() {
      const n = this.calls++
      if (n === 0) return first
      if (n === 1) return last
      throw new Error(`${adapter}: batch model called ${n + 1} times, the script has 2 turns`)
    },
    check(id) {
      if (this.calls === 1 && id !== `call_${spec.calls - 1}`) {
        throw new Error(`${adapter}: batch answer expected the result of call_${spec.calls - 1} last, got ${id}`)
      }
    }
  }
}

/** Observes how many `wait` handlers run at once. */
export class Concurrency {
  inFlight = 0
  max = 0
  runs = 0
  /** The `wait` tool's body: sleep `ms` (a real timer: this phase measures scheduling), tracking concurrency. */
  wait(i: number, ms: number): Promise<string> {
    this.runs++
    this.inFlight++
    if (this.inFlight > this.max) this.max = this.inFlight
    return new Promise((resolve) =>
      setTimeout(() => {
        this.inFlight--
        resolve(`waited ${i}`)
      }, ms)
    )
  }
}

/** What one session reports back to the harness. */
export interface SessionOutcome {
  /** Events delivered to the consumer. */
  readonly events: number
  /** Times the tool handler ran. */
  readonly toolRuns: number
  /** The final answer as the library reports it. */
  readonly text: string
  /** Model calls made. */
  readonly modelCalls: number
  /** The library's own result object, kept alive to measure retained heap. */
  readonly keep: unknown
}

/** Fails loudly unless the session ran the tool T times and ended with the exact text. */
export const verifySession = (adapter: string, toolTurns: number, outcome: SessionOutcome): void => {
  const expected = finalText(toolTurns)
  const problems: Array<string> = []
  if (outcome.toolRuns !== toolTurns) problems.push(`the tool ran ${outcome.toolRuns} times, expected ${toolTurns}`)
  if (outcome.modelCalls !== toolTurns + 1) {
    problems.push(`the model was called ${outcome.modelCalls} times, expected ${toolTurns + 1}`)
  }
  if (outcome.text !== expected) problems.push(`final text ${JSON.stringify(outcome.text)}, expected ${JSON.stringify(expected)}`)
  if (outcome.events < (toolTurns + 1) * DELTAS_PER_TURN) problems.push(`only ${outcome.events} events delivered`)
  if (problems.length > 0) throw new Error(`${adapter}: session of T=${toolTurns} failed: ${problems.join("; ")}`)
}

/** What the batch phase reports. */
export interface BatchOutcome {
  readonly text: string
  readonly toolRuns: number
  readonly maxInFlight: number
  readonly modelCalls: number
}

/** Fails loudly unless every wait ran once and the batch ended with the exact text. */
export const verifyBatch = (adapter: string, spec: BatchSpec, outcome: BatchOutcome): void => {
  const problems: Array<string> = []
  if (outcome.toolRuns !== spec.calls) problems.push(`ran ${outcome.toolRuns} tools, expected ${spec.calls}`)
  if (outcome.modelCalls !== 2) problems.push(`called the model ${outcome.modelCalls} times, expected 2`)
  if (outcome.text !== batchFinalText(spec.calls)) problems.push(`final text ${JSON.stringify(outcome.text)}`)
  if (problems.length > 0) throw new Error(`${adapter}: batch failed: ${problems.join("; ")}`)
}

/** An adapter: one library's real loop driven by the scripted model. */
export interface Adapter {
  readonly name: string
  /** How the library bounds parallel tool calls (shown in the batch table). */
  readonly cap: string
  /** Runs one session of T tool turns; `onTurn` (memory runs only) is called once per tool run. */
  session(toolTurns: number, onTurn?: () => void): Promise<SessionOutcome>
  /** Runs the parallel batch. */
  batch(spec: BatchSpec): Promise<BatchOutcome>
}
