/**
 * The control protocol: one JSON object per line on the command's stdin,
 * talking to the run while it runs. The server takes the same commands, one
 * per `POST /sessions/:id/control`; both apps read it from here.
 *
 * | line | does |
 * |---|---|
 * | `{"type":"approve","id":"call_1"}` | approves the tool call waiting with that `approvalId` (without `id`: the oldest call waiting) |
 * | `{"type":"deny","id":"call_1","reason":"not on main"}` | denies it; the model reads the reason |
 * | `{"type":"steer","text":"Use metric units."}` | delivered before the next model call |
 * | `{"type":"follow_up","text":"Now write the tests."}` | restarts the run when it would stop |
 * | `{"type":"cancel","reason":"enough"}` | ends the run at once (`Cancelled`, exit 30) |
 * | `{"type":"interrupt"}` | stops the command as SIGINT does: its session is left to resume (exit 31) |
 *
 * ynh's spelling is taken too: `{"action":"approve_plan"}` for `type`, and
 * `feedback` for the text of `replace_feedback` and the notes of
 * `reject_plan`; a `replace_feedback` while a plan waits refines it, as in
 * ynh (our `refine_plan`).
 *
 * In a supervised run `steer` and `follow_up` reach the worker when it is
 * our own loop; an external CLI worker takes neither (the line is refused
 * with a note), and `cancel` ends any supervised run at once.
 *
 * A decision answers only a call waiting now: one for a call that is not
 * waiting (not asked yet, or answered) is reported on stderr and dropped,
 * never kept for a later call that reuses the id. A program answers each
 * `ApprovalRequested` event it reads (`--emit-jsonl -`): the call waits by
 * the time the event is written. A `steer` or `follow_up` past the queue's
 * bound (`Steering.limits`) is reported and dropped. Malformed and unknown
 * lines are reported on stderr and ignored; a line longer than
 * {@link maxLineLength} is reported as soon as it is, and dropped up to its
 * newline ({@link lines}). End of input is not a cancel
 * unless asked (`--stdin-eof cancel`); once stdin has ended nobody can
 * answer, so calls that wait for approval then are denied.
 *
 * @since 0.1.0
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Approvals from "../Approvals.ts"

/**
 * One control line.
 *
 * @since 0.1.0
 * @category protocol
 */
export const Command = Schema.Union([
  Schema.Struct({ type: Schema.Literal("approve"), id: Schema.optionalKey(Schema.String) }),
  Schema.Struct({
    type: Schema.Literal("deny"),
    id: Schema.optionalKey(Schema.String),
    reason: Schema.optionalKey(Schema.String)
  }),
  Schema.Struct({ type: Schema.Literal("steer"), text: Schema.String }),
  Schema.Struct({ type: Schema.Literal("follow_up"), text: Schema.String }),
  Schema.Struct({ type: Schema.Literal("cancel"), reason: Schema.optionalKey(Schema.String) }),
  Schema.Struct({ type: Schema.Literal("interrupt") }),
  // A plan decision may name the plan iteration it answers, a turn decision the act turn: a decision for one
  // that no longer waits (answered, or revised since its sender read it) is then refused, not applied to the next.
  Schema.Struct({ type: Schema.Literal("approve_plan"), iteration: Schema.optionalKey(Schema.Int) }),
  Schema.Struct({
    type: Schema.Literal("refine_plan"),
    notes: Schema.String,
    iteration: Schema.optionalKey(Schema.Int)
  }),
  Schema.Struct({
    type: Schema.Literal("reject_plan"),
    notes: Schema.optionalKey(Schema.String),
    iteration: Schema.optionalKey(Schema.Int)
  }),
  Schema.Struct({ type: Schema.Literal("approve_turn"), turn: Schema.optionalKey(Schema.Int) }),
  Schema.Struct({ type: Schema.Literal("replace_feedback"), text: Schema.String, turn: Schema.optionalKey(Schema.Int) })
])
/**
 * @since 0.1.0
 * @category protocol
 */
export type Command = typeof Command.Type

/**
 * The `type`s a line may have.
 *
 * @since 0.1.0
 * @category protocol
 */
export const types: ReadonlyArray<Command["type"]> = [
  "approve",
  "deny",
  "steer",
  "follow_up",
  "cancel",
  "interrupt",
  "approve_plan",
  "refine_plan",
  "reject_plan",
  "approve_turn",
  "replace_feedback"
]

/**
 * The longest line accepted, in characters.
 *
 * @since 0.1.0
 * @category protocol
 */
export const maxLineLength = 1_000_000

const decodeJson = Schema.decodeUnknownResult(Schema.fromJsonString(Schema.Unknown))
const decodeCommand = Schema.decodeUnknownResult(Command)

/**
 * Parses one line: the command, or what is wrong with the line.
 *
 * @example
 * ```ts
 * import { Result } from "effect"
 * import { Control } from "effect-agent/protocol"
 *
 * const steer = Control.parse(`{"type":"steer","text":"Use metric units."}`)
 * if (Result.isSuccess(steer)) console.log(steer.success) // Output: { type: 'steer', text: 'Use metric units.' }
 * const pause = Control.parse(`{"type":"pause"}`)
 * if (Result.isFailure(pause)) console.log(pause.failure.slice(0, pause.failure.indexOf(" (expected")))
 * // Output: unknown type "pause"
 * ```
 *
 * @since 0.1.0
 * @category protocol
 */
export const parse = (line: string): Result.Result<Command, string> => {
  if (line.length > maxLineLength) return Result.fail(`the line is longer than ${maxLineLength} characters`)
  const json = decodeJson(line)
  if (Result.isFailure(json)) return Result.fail("not a JSON object")
  const value = json.success
  if (typeof value !== "object" || value === null || Array.isArray(value)) return Result.fail("not a JSON object")
  const given = fromYnh(value)
  const type = "type" in given ? given.type : undefined
  if (typeof type !== "string") return Result.fail(`no "type" (expected ${expected})`)
  if (!types.some((known) => known === type)) return Result.fail(`unknown type ${JSON.stringify(type)} (expected ${expected})`)
  const command = decodeCommand(given)
  return Result.isFailure(command)
    ? Result.fail(`${type}: ${command.failure.message.replace(/\n\s*/g, " ")}`)
    : Result.succeed(command.success)
}

const expected = "approve, deny, steer, follow_up, cancel, interrupt, approve_plan, refine_plan, reject_plan, " +
  "approve_turn or replace_feedback"

/**
 * A line in ynh's spelling (`action` for `type`; `feedback` for the text of `replace_feedback` and the notes of
 * `reject_plan`) in ours; any other line as it is. A line with both `type` and `action` is ours.
 */
const fromYnh = (value: object): object => {
  if ("type" in value || !("action" in value)) return value
  const field = value.action === "replace_feedback" ? "text" : value.action === "reject_plan" ? "notes" : undefined
  const line: Record<string, unknown> = { type: value.action }
  for (const [key, item] of Object.entries(value)) {
    if (key === "action") continue
    if (key === "feedback" && field !== undefined && !(field in value)) line[field] = item
    else line[key] = item
  }
  return line
}

/**
 * Where `steer`, `follow_up` and `cancel` go: a run's steering handle
 * (`Steering.Service` is one), or a session's, by its id (`Sessions`). A
 * message refused (a full queue, a session that has ended) is told, not
 * queued.
 *
 * @since 0.1.0
 * @category serving
 */
export interface Messages {
  readonly steer: (text: string) => Effect.Effect<void, { readonly message: string }>
  readonly followUp: (text: string) => Effect.Effect<void, { readonly message: string }>
  readonly cancel: (reason: string) => Effect.Effect<void, { readonly message: string }>
}

/**
 * What control lines act on: where the messages go, and the approvals when
 * they are asked on stdin (`--approve ask`).
 *
 * @since 0.1.0
 * @category serving
 */
export interface Target {
  readonly messages: Messages
  readonly approvals: Approvals.Interactive | undefined
  /**
   * Why `steer` and `follow_up` cannot reach the run, when they cannot (a
   * supervised run's external worker takes neither): such a line is refused
   * with this note and not queued; `cancel` still applies.
   */
  readonly messagesRefused?: string | undefined
  /**
   * Stops the run as SIGINT does, leaving its session to resume (the command's); without it, `interrupt` is
   * refused with a note.
   */
  readonly interrupt?: Effect.Effect<void> | undefined
}

/**
 * Applies a command; returns a note for the user when it could not apply.
 *
 * @since 0.1.0
 * @category serving
 */
export const apply = (command: Command, target: Target): Effect.Effect<string | undefined> => {
  switch (command.type) {
    case "steer":
      return target.messagesRefused !== undefined
        ? Effect.succeed(`steer: ${target.messagesRefused}; ignored`)
        : queue(command.type, target.messages.steer(command.text))
    case "follow_up":
      return target.messagesRefused !== undefined
        ? Effect.succeed(`follow_up: ${target.messagesRefused}; ignored`)
        : queue(command.type, target.messages.followUp(command.text))
    case "cancel":
      return queue(command.type, target.messages.cancel(command.reason ?? "cancelled by the user"))
    case "interrupt":
      return target.interrupt === undefined
        ? Effect.succeed("interrupt: not taken here (cancel ends the run); ignored")
        : Effect.as(target.interrupt, undefined)
    case "approve":
    case "deny":
      return decide(command, target.approvals)
    case "approve_plan":
    case "refine_plan":
    case "reject_plan":
    case "approve_turn":
    case "replace_feedback":
      return decideWith(target.approvals, command)
  }
}

/**
 * Why a plan or turn decision does not answer the question waiting now, or `undefined` when it does: nothing
 * waits, or it names another plan iteration or act turn than the one waiting. One rule for every surface that
 * takes decisions (the command's control lines, the agent server's control route).
 *
 * @example
 * ```ts
 * import { Control } from "effect-agent/protocol"
 *
 * const waiting = { plan: { iteration: 2 }, turn: undefined }
 * console.log(Control.decisionMismatch({ type: "approve_plan", iteration: 1 }, waiting))
 * // Output: approve_plan: plan iteration 2 waits for a decision, not iteration 1
 * console.log(Control.decisionMismatch({ type: "approve_plan", iteration: 2 }, waiting))
 * // Output: undefined
 * ```
 *
 * @since 0.1.0
 * @category protocol
 */
export const decisionMismatch = (
  command: Decision,
  waiting: {
    readonly plan: { readonly iteration: number } | undefined
    readonly turn: { readonly turn: number } | undefined
  }
): string | undefined => {
  const type = command.type
  if (type === "approve_plan" || type === "refine_plan" || type === "reject_plan") {
    if (waiting.plan === undefined) return `${type}: no plan waits for a decision`
    const named = command.iteration
    return named === undefined || named === waiting.plan.iteration
      ? undefined
      : `${type}: plan iteration ${waiting.plan.iteration} waits for a decision, not iteration ${named}`
  }
  if (waiting.turn === undefined) return `${type}: no feedback waits for a decision`
  const named = command.turn
  return named === undefined || named === waiting.turn.turn
    ? undefined
    : `${type}: the feedback of turn ${waiting.turn.turn} waits for a decision, not turn ${named}`
}

/**
 * A plan or turn decision.
 *
 * @since 0.1.0
 * @category protocol
 */
export type Decision = Extract<
  Command,
  { readonly type: "approve_plan" | "refine_plan" | "reject_plan" | "approve_turn" | "replace_feedback" }
>

/**
 * The answer a plan or turn decision gives.
 *
 * @example
 * ```ts
 * import { Control } from "effect-agent/protocol"
 *
 * console.log(Control.planOrTurnDecision({ type: "refine_plan", notes: "Smaller steps.", iteration: 2 }))
 * // Output: { _tag: 'plan', decision: { _tag: 'Refine', notes: 'Smaller steps.' } }
 * ```
 *
 * @since 0.1.0
 * @category protocol
 */
export const planOrTurnDecision = (
  command: Decision
):
  | { readonly _tag: "plan"; readonly decision: Approvals.PlanDecision }
  | { readonly _tag: "turn"; readonly decision: Approvals.TurnDecision } =>
{
  switch (command.type) {
    case "approve_plan":
      return { _tag: "plan", decision: { _tag: "Approve" } }
    case "refine_plan":
      return { _tag: "plan", decision: { _tag: "Refine", notes: command.notes } }
    case "reject_plan":
      return { _tag: "plan", decision: { _tag: "Reject", notes: command.notes ?? "rejected by the user" } }
    case "approve_turn":
      return { _tag: "turn", decision: { _tag: "Approve" } }
    case "replace_feedback":
      return { _tag: "turn", decision: { _tag: "Replace", feedback: command.text } }
  }
}

/** A message queued for the run; past the queue's bound it is dropped, and the note says so. */
const queue = (type: string, queued: Effect.Effect<void, { readonly message: string }>): Effect.Effect<string | undefined> =>
  queued.pipe(
    Effect.as(undefined),
    Effect.catch((refused) => Effect.succeed(`${type}: ${refused.message}; dropped`))
  )

/**
 * A plan or turn decision: answers what waits (the plan iteration or the act turn it names, when it names one);
 * otherwise nothing is decided or kept.
 */
const decideWith = (
  approvals: Approvals.Interactive | undefined,
  command: Decision
): Effect.Effect<string | undefined> =>
  Effect.gen(function*() {
    const type = command.type
    if (approvals === undefined) {
      return `${type}: decisions are not asked on stdin (run with --approve ask or --approve-turns)`
    }
    const plan = yield* approvals.pendingPlan
    const turn = yield* approvals.pendingTurn
    // ynh's replace_feedback at a plan gate is a refine
    if (command.type === "replace_feedback" && plan !== undefined && turn === undefined) {
      return yield* decideWith(approvals, { type: "refine_plan", notes: command.text })
    }
    const mismatch = decisionMismatch(command, { plan, turn })
    if (mismatch !== undefined) return `${mismatch}; ignored`
    const answer = planOrTurnDecision(command)
    const answered = answer._tag === "plan"
      ? yield* approvals.decidePlanWith(answer.decision)
      : yield* approvals.decideTurnWith(answer.decision)
    return answered ? undefined : `${type}: no ${answer._tag === "plan" ? "plan" : "feedback"} waits for a decision; ignored`
  })

/** An id from a line, quoted, and cut to a length a note can show. */
const clip = (id: string): string => JSON.stringify(id.length > 48 ? `${id.slice(0, 47)}…` : id)

const decide = (
  command: Extract<Command, { readonly type: "approve" | "deny" }>,
  approvals: Approvals.Interactive | undefined
): Effect.Effect<string | undefined> =>
  Effect.gen(function*() {
    if (approvals === undefined) return `${command.type}: approvals are not asked on stdin (run with --approve ask)`
    const id = command.id ?? (yield* approvals.pending)[0]?.approvalId
    if (id === undefined) return `${command.type}: no call is waiting for approval; ignored`
    const answered = yield* command.type === "approve" ? approvals.approve(id) : approvals.deny(id, command.reason)
    return answered ? undefined : `${command.type}: no call waits for approval as ${clip(id)}; ignored`
  })

/**
 * What {@link serve} does at the end of input: nothing, or cancel the run.
 *
 * @since 0.1.0
 * @category serving
 */
export const OnEof = Schema.Literals(["ignore", "cancel"])
/**
 * @since 0.1.0
 * @category serving
 */
export type OnEof = typeof OnEof.Type

/**
 * The lines of a byte stream (stdin when it is not a terminal), none held
 * longer than {@link maxLineLength}: a longer line is given as its first
 * `maxLineLength + 1` characters as soon as they have come (so that
 * {@link parse} reports it at once), and the rest of it, up to its end of
 * line, is read and dropped. Nothing without a line break grows the memory
 * held.
 *
 * @example
 * ```ts
 * import { Effect, Stream } from "effect"
 * import { Control } from "effect-agent/protocol"
 *
 * const long = "x".repeat(Control.maxLineLength + 5)
 * const bytes = Stream.make(new TextEncoder().encode(`${long}\n{"type":"cancel"}\n`))
 * const lines = Effect.runSync(Stream.runCollect(Control.lines(bytes)))
 * console.log(lines.map((line) => line.length)) // Output: [ 1000001, 17 ]
 * ```
 *
 * @since 0.1.0
 * @category serving
 */
export const lines = <E>(bytes: Stream.Stream<Uint8Array, E>): Stream.Stream<string, E> =>
  bytes.pipe(Stream.decodeText(), Stream.mapAccum(() => initialCut, cutLongLines), Stream.splitLines)

/**
 * Where the text is in its current line: how many characters it has had,
 * whether the rest of the line is being dropped, and whether the text cut
 * there ended with a `\r` (a `\n` right after it ends the same line).
 */
interface Cut {
  readonly length: number
  readonly dropping: boolean
  readonly afterCr: boolean
}

const initialCut: Cut = { length: 0, dropping: false, afterCr: false }

const lineBreak = /[\r\n]/g

/**
 * Cuts every line at `maxLineLength + 1` characters: the part kept ends with
 * a line break of its own, and what follows, up to and with the line's own
 * break, is dropped (so that the lines keep their numbers).
 */
const cutLongLines = (cut: Cut, text: string): readonly [Cut, ReadonlyArray<string>] => {
  const keep = maxLineLength + 1
  let { afterCr, dropping, length } = cut
  let out = ""
  let from = 0
  while (from < text.length) {
    // A "\r\n" whose "\r" ended the dropped part: its "\n" goes too.
    if (afterCr && from === 0 && text[0] === "\n") {
      afterCr = false
      from = 1
      continue
    }
    afterCr = false
    lineBreak.lastIndex = from
    const found = lineBreak.exec(text)
    const end = found === null ? text.length : found.index
    if (!dropping) {
      const kept = Math.min(end - from, keep - length)
      out += text.slice(from, from + kept)
      length += kept
      if (length === keep) {
        out += "\n"
        dropping = true
      }
    }
    if (found === null) break
    if (dropping) afterCr = text[end] === "\r" && end === text.length - 1
    else out += text[end]
    const crlf = dropping && text[end] === "\r" && text[end + 1] === "\n"
    from = end + (crlf ? 2 : 1)
    length = 0
    dropping = false
  }
  return [{ length, dropping, afterCr }, out === "" ? [] : [out]]
}

/**
 * Reads control lines until they end, applying each one and reporting bad
 * lines through `report`; at the end, completes `eof` and, with
 * `onEof: "cancel"`, cancels the run. A failing input counts as its end.
 *
 * @since 0.1.0
 * @category serving
 */
export const serve = <E>(options: {
  readonly lines: Stream.Stream<string, E>
  readonly target: Target
  readonly onEof: OnEof
  readonly eof: Deferred.Deferred<void>
  readonly report: (note: string) => Effect.Effect<void>
}): Effect.Effect<void> =>
  Effect.gen(function*() {
    let lineNumber = 0
    const handle = (line: string) => {
      lineNumber++
      if (line.trim() === "") return Effect.void
      const command = parse(line)
      if (Result.isFailure(command)) return options.report(`stdin line ${lineNumber}: ${command.failure}; ignored`)
      return Effect.flatMap(apply(command.success, options.target), (note) =>
        note === undefined ? Effect.void : options.report(`stdin line ${lineNumber}: ${note}`))
    }
    yield* options.lines.pipe(
      Stream.runForEach(handle),
      Effect.catch(() => options.report("stdin could not be read; treating it as closed"))
    )
    yield* Deferred.succeed(options.eof, undefined)
    if (options.onEof === "cancel") {
      const refused = yield* Effect.flip(options.target.messages.cancel("stdin was closed")).pipe(Effect.option)
      if (refused._tag === "Some") yield* options.report(`end of stdin: cannot cancel: ${refused.value.message}`)
    }
  })

/**
 * Approvals asked on stdin: the interactive handle's decisions, and once
 * `eof` completes (nobody is left to answer), a denial for every call that
 * waits; a plan or a feedback waiting stops the run with `interrupt` (the
 * command's SIGINT, as ynh does at the end of its input: the session is
 * left to resume); without it a plan is rejected and a feedback interrupts
 * the run. Questions are opened through the handle (`open`), so they wait
 * before they are announced.
 *
 * @since 0.1.0
 * @category serving
 */
export const approvalsUntilEof = (
  interactive: Approvals.Interactive,
  eof: Deferred.Deferred<void>,
  options: {
    /** Stops the run, leaving it to resume (it does not return: the run is interrupted meanwhile). */
    readonly interrupt?: Effect.Effect<void> | undefined
  } = {}
): Approvals.Service => {
  const gone = "the control input (stdin) was closed"
  const call = Approvals.denied(`no one can approve this call: ${gone}`)
  const plan: Approvals.PlanDecision = { _tag: "Reject", notes: gone }
  const turn: Approvals.TurnDecision = { _tag: "Interrupt" }
  const untilEof = <D>(wait: Effect.Effect<D>, closed: D) => Effect.raceFirst(wait, Effect.as(Deferred.await(eof), closed))
  const interrupt = options.interrupt
  /** A plan or a feedback waiting: at the end of input, the run is stopped to resume when it can be. */
  const untilEofGate = <D>(wait: Effect.Effect<D>, closed: D): Effect.Effect<D> =>
    interrupt === undefined
      ? untilEof(wait, closed)
      : Effect.raceFirst(wait, Effect.andThen(Deferred.await(eof), Effect.andThen(interrupt, Effect.never)))
  return {
    decide: (request) => untilEof(interactive.decide(request), call),
    open: (request) => Effect.map(interactive.open(request), (wait) => untilEof(wait, call)),
    decidePlan: (request) => untilEofGate(interactive.decidePlan(request), plan),
    openPlan: (request) => Effect.map(interactive.openPlan(request), (wait) => untilEofGate(wait, plan)),
    decideTurn: (request) => untilEofGate(interactive.decideTurn(request), turn),
    openTurn: (request) => Effect.map(interactive.openTurn(request), (wait) => untilEofGate(wait, turn))
  }
}
