/**
 * The control protocol: one JSON object per line on the command's stdin,
 * talking to the run while it runs.
 *
 * | line | does |
 * |---|---|
 * | `{"type":"approve","id":"call_1"}` | approves the tool call with that `approvalId` (without `id`: the oldest call waiting) |
 * | `{"type":"deny","id":"call_1","reason":"not on main"}` | denies it; the model reads the reason |
 * | `{"type":"steer","text":"Use metric units."}` | delivered before the next model call |
 * | `{"type":"follow_up","text":"Now write the tests."}` | restarts the run when it would stop |
 * | `{"type":"cancel","reason":"enough"}` | ends the run at once (`Cancelled`, exit 30) |
 *
 * In a supervised run `steer` and `follow_up` reach the worker when it is
 * our own loop; an external CLI worker takes neither (the line is refused
 * with a note), and `cancel` ends any supervised run at once.
 *
 * A decision for a call that is not waiting yet is kept, and answers the
 * call when it asks. Malformed and unknown lines are reported on stderr and
 * ignored. End of input is not a cancel unless asked (`--stdin-eof cancel`);
 * once stdin has ended nobody can answer, so calls that wait for approval
 * then are denied, unless a decision for them came before.
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Result, Schema, Stream } from "effect"
import * as Approvals from "../Approvals.ts"
import type * as Steering from "../Steering.ts"

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
  Schema.Struct({ type: Schema.Literal("approve_plan") }),
  Schema.Struct({ type: Schema.Literal("refine_plan"), notes: Schema.String }),
  Schema.Struct({ type: Schema.Literal("reject_plan"), notes: Schema.optionalKey(Schema.String) }),
  Schema.Struct({ type: Schema.Literal("approve_turn") }),
  Schema.Struct({ type: Schema.Literal("replace_feedback"), text: Schema.String })
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
 * import { Control } from "effect-agent/cli"
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
  const type = "type" in value ? value.type : undefined
  if (typeof type !== "string") return Result.fail(`no "type" (expected ${expected})`)
  if (!types.some((known) => known === type)) return Result.fail(`unknown type ${JSON.stringify(type)} (expected ${expected})`)
  const command = decodeCommand(value)
  return Result.isFailure(command)
    ? Result.fail(`${type}: ${command.failure.message.replace(/\n\s*/g, " ")}`)
    : Result.succeed(command.success)
}

const expected = "approve, deny, steer, follow_up, cancel, approve_plan, refine_plan, reject_plan, approve_turn " +
  "or replace_feedback"

/**
 * What control lines act on: the run's steering handle, and its approvals
 * when they are asked on stdin (`--approve ask`).
 *
 * @since 0.1.0
 * @category serving
 */
export interface Target {
  readonly steering: Steering.Service
  readonly approvals: Approvals.Interactive | undefined
  /**
   * Why `steer` and `follow_up` cannot reach the run, when they cannot (a
   * supervised run's external worker takes neither): such a line is refused
   * with this note and not queued; `cancel` still applies.
   */
  readonly messagesRefused?: string | undefined
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
        : Effect.as(target.steering.steer(command.text), undefined)
    case "follow_up":
      return target.messagesRefused !== undefined
        ? Effect.succeed(`follow_up: ${target.messagesRefused}; ignored`)
        : Effect.as(target.steering.followUp(command.text), undefined)
    case "cancel":
      return Effect.as(target.steering.cancel(command.reason ?? "cancelled by the user"), undefined)
    case "approve":
    case "deny":
      return decide(command, target.approvals)
    case "approve_plan":
      return decideWith(target.approvals, command.type, (a) => a.decidePlanWith({ _tag: "Approve" }))
    case "refine_plan":
      return decideWith(
        target.approvals,
        command.type,
        (a) => a.decidePlanWith({ _tag: "Refine", notes: command.notes })
      )
    case "reject_plan":
      return decideWith(
        target.approvals,
        command.type,
        (a) => a.decidePlanWith({ _tag: "Reject", notes: command.notes ?? "rejected by the user" })
      )
    case "approve_turn":
      return decideWith(target.approvals, command.type, (a) => a.decideTurnWith({ _tag: "Approve" }))
    case "replace_feedback":
      return decideWith(
        target.approvals,
        command.type,
        (a) => a.decideTurnWith({ _tag: "Replace", feedback: command.text })
      )
  }
}

/** A plan or turn decision: answers what waits, or is kept for the next one to ask. */
const decideWith = (
  approvals: Approvals.Interactive | undefined,
  type: string,
  answer: (approvals: Approvals.Interactive) => Effect.Effect<boolean>
): Effect.Effect<string | undefined> =>
  approvals === undefined
    ? Effect.succeed(`${type}: decisions are not asked on stdin (run with --approve ask or --approve-turns)`)
    : Effect.as(answer(approvals), undefined)

const decide = (
  command: Extract<Command, { readonly type: "approve" | "deny" }>,
  approvals: Approvals.Interactive | undefined
): Effect.Effect<string | undefined> =>
  Effect.gen(function*() {
    if (approvals === undefined) return `${command.type}: approvals are not asked on stdin (run with --approve ask)`
    const id = command.id ?? (yield* approvals.pending)[0]?.approvalId
    if (id === undefined) return `${command.type}: no call is waiting for approval (give its "id" to decide ahead)`
    yield* command.type === "approve" ? approvals.approve(id) : approvals.deny(id, command.reason)
    return undefined
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
 * The lines of a byte stream (stdin when it is not a terminal).
 *
 * @since 0.1.0
 * @category serving
 */
export const lines = <E>(bytes: Stream.Stream<Uint8Array, E>): Stream.Stream<string, E> =>
  bytes.pipe(Stream.decodeText(), Stream.splitLines)

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
    if (options.onEof === "cancel") yield* options.target.steering.cancel("stdin was closed")
  })

/**
 * Approvals asked on stdin: the interactive handle's decisions, and once
 * `eof` completes (nobody is left to answer), a denial for every call that
 * has no decision yet.
 *
 * @since 0.1.0
 * @category serving
 */
export const approvalsUntilEof = (
  interactive: Approvals.Interactive,
  eof: Deferred.Deferred<void>
): Approvals.Service => {
  const closed = Effect.as(
    Deferred.await(eof),
    Approvals.denied("no one can approve this call: the control input (stdin) was closed")
  )
  // A decision given before the call asked is already there: `decide` completes at once and wins the race.
  // With stdin closed, a plan waiting is rejected and a turn waiting is interrupted (no one can answer them).
  const gone = "the control input (stdin) was closed"
  return {
    decide: (request) => Effect.raceFirst(interactive.decide(request), closed),
    decidePlan: (request) =>
      Effect.raceFirst(
        interactive.decidePlan(request),
        Effect.as(Deferred.await(eof), { _tag: "Reject", notes: gone } as const)
      ),
    decideTurn: (request) =>
      Effect.raceFirst(interactive.decideTurn(request), Effect.as(Deferred.await(eof), { _tag: "Interrupt" } as const))
  }
}
