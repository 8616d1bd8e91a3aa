/**
 * Checks: the named verifications a supervised run runs after each worker
 * turn (and once before the first, as the baseline). A check is a shell
 * command run in the `Sandbox` (exit 0 passes), or any Effect that returns a
 * {@link Verdict}.
 *
 * Roles:
 * - `blocking`: must pass for the run to converge (the default);
 * - `advisory`: reported (and listed in feedback), never blocks;
 * - `verifier`: consulted last, only once every blocking check passes; at
 *   most one per run.
 *
 * Check output is written by whatever the worker changed, so it is treated as
 * hostile text: control characters are dropped and every field is capped
 * before it reaches an event or the worker's feedback.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Check } from "effect-agent/supervisor"
 *
 * const tests = Check.command("tests", "npm test")
 * const lint = Check.command("lint", "npm run lint", { role: "advisory" })
 * const todo = Check.make("no TODO left", Effect.succeed({ status: "pass", summary: "none found" }))
 * ```
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { Sandbox } from "../sandbox/Sandbox.ts"

/**
 * What a check is for (see the module's documentation).
 *
 * @since 0.1.0
 * @category models
 */
export const Role = Schema.Literals(["blocking", "advisory", "verifier"])
/**
 * @since 0.1.0
 * @category models
 */
export type Role = typeof Role.Type

/**
 * A check's status in a result: `known` is a failure that was already there
 * in the baseline (before the first turn), failing the same way. It is
 * reported apart from new failures (listed last in feedback) and holds the
 * run like any failure, unless the run tolerates known failures
 * (`Supervisor.Options.tolerateKnownFailures`).
 *
 * @since 0.1.0
 * @category models
 */
export const Status = Schema.Literals(["pass", "fail", "known"])
/**
 * @since 0.1.0
 * @category models
 */
export type Status = typeof Status.Type

/**
 * What a check's Effect returns: pass or fail, a one-line summary, details
 * (the output a worker needs to fix it) and, optionally, its own duration.
 *
 * @since 0.1.0
 * @category models
 */
export interface Verdict {
  readonly status: "pass" | "fail"
  readonly summary: string
  readonly details?: string | undefined
  readonly durationMs?: number | undefined
  /** A command's exit code, when the check ran one that exited. */
  readonly exitCode?: number | undefined
}

/**
 * One check's result after a round: what events carry and feedback lists.
 *
 * @since 0.1.0
 * @category models
 */
export const CheckResult = Schema.Struct({
  check: Schema.String,
  role: Role,
  status: Status,
  summary: Schema.String,
  details: Schema.String,
  durationMs: Schema.Finite,
  /** A command check's exit code (absent when the command timed out or was killed, and for other checks). */
  exitCode: Schema.optionalKey(Schema.Finite)
})
/**
 * @since 0.1.0
 * @category models
 */
export type CheckResult = typeof CheckResult.Type

/**
 * A check: a name, a role and the Effect that runs it (its failures are
 * already folded into a failing verdict).
 *
 * @since 0.1.0
 * @category models
 */
export interface Check<R = never> {
  readonly name: string
  readonly role: Role
  readonly run: Effect.Effect<Verdict, never, R>
}

/**
 * Options shared by the constructors.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** `blocking` (the default), `advisory` or `verifier`. */
  readonly role?: Role | undefined
}

/** At most this many characters of a summary. */
const maxSummaryChars = 300
/** At most this many characters of a check's details (the tail is kept: that is where test runners report). */
const maxDetailsChars = 8_000

// Keep tabs and newlines; drop every other C0 control, DEL and the C1 range (terminal escapes start there).
const controls = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g

const clean = (text: string): string => text.replace(controls, "")

const capTail = (text: string, max: number): string =>
  text.length <= max ? text : `…${text.slice(text.length - max + 1)}`

const capHead = (text: string, max: number): string => text.length <= max ? text : `${text.slice(0, max - 1)}…`

const describe = (error: unknown): string =>
  error instanceof Error ? error.message : typeof error === "string" ? error : JSON.stringify(error) ?? String(error)

/**
 * A check from any Effect returning a verdict. A failure of the Effect is a
 * failing verdict (with the error's message); a defect is one too.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <E, R>(name: string, run: Effect.Effect<Verdict, E, R>, options?: Options): Check<R> => ({
  name,
  role: options?.role ?? "blocking",
  run: run.pipe(
    Effect.catchCause((cause) => {
      if (Cause.hasInterruptsOnly(cause)) return Effect.interrupt
      const error = Cause.findErrorOption(cause)
      const reason = error._tag === "Some" ? describe(error.value) : Cause.pretty(cause)
      return Effect.succeed<Verdict>({ status: "fail", summary: `the check failed: ${reason}`, details: "" })
    })
  )
})

/**
 * Options of a command check.
 *
 * @since 0.1.0
 * @category models
 */
export interface CommandOptions extends Options {
  /** How long the command may run (else the sandbox's default); a timeout fails the check. */
  readonly timeout?: Duration.Input | undefined
  /** The working directory, inside the sandbox. */
  readonly cwd?: string | undefined
}

const lastLine = (text: string): string => {
  const lines = text.split("\n")
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i]!.trim()
    if (line !== "") return line
  }
  return ""
}

/**
 * A check that runs a shell command in the `Sandbox`: exit 0 passes. The
 * summary is the exit code and the last line of output; the details are the
 * output's tail (stdout, then stderr).
 *
 * @since 0.1.0
 * @category constructors
 */
export const command = (name: string, command: string, options?: CommandOptions): Check<Sandbox> =>
  make(
    name,
    Effect.gen(function*() {
      const sandbox = yield* Sandbox
      const result = yield* sandbox.exec({
        command,
        cwd: options?.cwd,
        timeout: options?.timeout
      })
      const output = [result.stdout, result.stderr].filter((text) => text !== "").join("\n")
      const passed = result.exitCode === 0 && !result.timedOut
      const status = result.timedOut ? "timed out" : result.exitCode === null ? "killed" : `exit ${result.exitCode}`
      const last = lastLine(output)
      return {
        status: passed ? "pass" : "fail",
        summary: last === "" ? status : `${status}: ${last}`,
        details: output,
        durationMs: result.durationMs,
        ...(result.timedOut || result.exitCode === null ? {} : { exitCode: result.exitCode })
      } satisfies Verdict
    }),
    options
  )

/**
 * Runs one check: times it (unless it timed itself), cleans and caps its
 * text, and marks a failure `known` when it fails the way it failed in the
 * baseline: `known` is the {@link failureKey} of the baseline's result (its summary and details).
 *
 * @since 0.1.0
 * @category running
 */
export const run = <R>(check: Check<R>, known?: string | undefined): Effect.Effect<CheckResult, never, R> =>
  Effect.gen(function*() {
    const started = yield* Clock.currentTimeMillis
    const verdict = yield* check.run
    const ended = yield* Clock.currentTimeMillis
    const summary = capHead(clean(verdict.summary).replace(/\s+/g, " ").trim(), maxSummaryChars)
    const details = capTail(clean(verdict.details ?? ""), maxDetailsChars)
    return {
      check: check.name,
      role: check.role,
      status: verdict.status === "pass"
        ? "pass"
        : known !== undefined && failureKey(summary, details) === known
        ? "known"
        : "fail",
      summary,
      details,
      durationMs: verdict.durationMs ?? ended - started,
      ...(verdict.exitCode === undefined ? {} : { exitCode: verdict.exitCode })
    }
  })

// A duration ("Duration 1.2s", "in 340ms") or a time of day ("Start at 02:41:18") changes from run to run; it does
// not make a failure new.
const durations = /\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds|m|min)\b/g
const clockTimes = /\b\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?\b/g

const normalized = (text: string): string => text.replace(durations, "#").replace(clockTimes, "#")

/**
 * What makes two failures of a check the same failure: its summary and its
 * details (the output's tail, as results keep it), without the durations
 * and times of day in them. A check failing in the baseline and again after
 * a turn with the same key is `known` (already failing before the task);
 * with another key the failure is new. The details count: a last line alone
 * ("exit 1: ⎯⎯⎯[1/1]⎯") is the same for a suite with one failing test and
 * one with three, and another test failing is not the failure that was there.
 *
 * @since 0.1.0
 * @category running
 */
export const failureKey = (summary: string, details = ""): string =>
  `${normalized(summary)}\n${normalized(details)}`

/**
 * Whether a result holds the run: a failure of a blocking check (or the
 * verifier), a known one included, unless `tolerateKnown` is set, when only
 * a new failure does. (Advisory checks never hold it.)
 *
 * @example
 * ```ts
 * import { Check } from "effect-agent/supervisor"
 *
 * const known: Check.CheckResult = {
 *   check: "tests", role: "blocking", status: "known", summary: "exit 1", details: "", durationMs: 3
 * }
 * console.log(Check.blocks(known), Check.blocks(known, { tolerateKnown: true }))
 * // Output: true false
 * ```
 *
 * @since 0.1.0
 * @category running
 */
export const blocks = (
  result: CheckResult,
  options?: { readonly tolerateKnown?: boolean | undefined }
): boolean =>
  result.role !== "advisory" &&
  (result.status === "fail" || (result.status === "known" && options?.tolerateKnown !== true))
