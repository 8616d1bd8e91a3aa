/**
 * Supervised runs: a worker (our own loop, or an external coding agent) works
 * on a task in turns, and after each turn the checks run; the run ends when
 * they pass, and otherwise the worker gets one feedback message listing what
 * failed, until a budget, the turn cap or the no-progress watchdog ends it.
 *
 * ```
 * AgentStart → baseline checks (failures there are "known")
 * [plan: WorkerTurnStart/End (work tools withheld) → PlanProposed → Approvals.decidePlan
 *        → approve (PlanApproved) | refine (PlanRevised, ask again) | reject (PlanRejected → Rejected)]
 * act turn: WorkerTurnStart → worker → WorkerTurnEnd → CheckStarted/CheckResult… (in parallel)
 *   → every blocking check passes (then the verifier) → Converged
 *   → else watchdog (Stuck) → feedback (new failures first) → caps (Unverified)
 *     → [TurnApprovalRequested → Approvals.decideTurn] → FeedbackSent → next act turn
 * AgentEnd (always last)
 * ```
 *
 * With `planOutput` (a Schema) and our own loop as the worker, the plan is a
 * typed value: the plan turn is `Agent.run({ output })`, `PlanProposed`
 * carries the value (in its JSON form) beside the text, the approver sees it
 * (`PlanRequest.value`), and the approved value is in the result
 * (`planValue`) and the checkpoint. An external CLI worker gives text only:
 * `planOutput` with one is a `ConfigError`.
 *
 * Outcomes: `Converged`, `Unverified` (a budget or the turn cap ended the run
 * before the checks passed; never `Completed`), `Stuck`, `Rejected`,
 * `PlanIterationCap`, and `Cancelled` when the run is interrupted or
 * cancelled through its `steering` (at once, whatever it is doing). Plan
 * turns count against tokens, cost and wall clock, not the act turn cap.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Data, Deferred, Duration, Effect, Exit, Option, Schema } from "effect"
import type * as Agent from "../Agent.ts"
import type * as CheckpointStore from "../session/CheckpointStore.ts"
import {
  AgentError as AgentErrorSchema,
  type AgentError,
  ConfigError,
  OutputSchemaMismatch
} from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Approvals from "../Approvals.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as Output from "../Output.ts"
import * as RunState from "../RunState.ts"
import * as Steering from "../Steering.ts"
import * as AgentWorker from "./AgentWorker.ts"
import * as Check from "./Check.ts"
import * as Worker from "./Worker.ts"

// -----------------------------------------------------------------------------
// Models
// -----------------------------------------------------------------------------

/**
 * The endings of a supervised run.
 *
 * @since 0.1.0
 * @category models
 */
export type SupervisedOutcome = Extract<
  Outcome.Outcome,
  { readonly _tag: "Converged" | "Unverified" | "Stuck" | "Rejected" | "PlanIterationCap" | "Cancelled" }
>

/**
 * Tokens (and cost, when the worker reports it) a supervised run used.
 *
 * @since 0.1.0
 * @category models
 */
export const Usage = Schema.Struct({
  inputTokens: Schema.Finite,
  outputTokens: Schema.Finite,
  costUsd: Schema.Finite
})
/**
 * @since 0.1.0
 * @category models
 */
export type Usage = typeof Usage.Type

/**
 * Where a supervised run is, saved after each step that changes it (the
 * start, before the baseline; each plan request; act entry; each turn that
 * did not converge): what a resumed run needs to carry on in the phase it was
 * in, redoing at most one turn.
 *
 * @since 0.1.0
 * @category models
 */
export const Checkpoint = Schema.Struct({
  version: Schema.Literal(1),
  runId: Schema.String,
  task: Schema.String,
  phase: Schema.Literals(["plan", "act"]),
  /** The plan iteration being asked for (plan phase) or the approved one. */
  planIteration: Schema.Finite,
  approvedPlan: Schema.optionalKey(Schema.String),
  /** The identity of the plan's Schema (`Output.identity`), when the run asked for a typed plan. */
  planSchema: Schema.optionalKey(Schema.String),
  /** The approved typed plan, in its JSON form (encoded with the plan's Schema). */
  approvedPlanValue: Schema.optionalKey(Schema.Unknown),
  /** The message the next worker turn gets (re-sent on resume). */
  pendingMessage: Schema.String,
  /**
   * The pending message is feedback the turn gate (`approveTurns`) had not
   * approved when this was saved: a resumed run asks the gate again before
   * the worker gets it (and refuses to go on without a gate to ask).
   */
  awaitingApproval: Schema.optionalKey(Schema.Boolean),
  /** Act turns completed. */
  turns: Schema.Finite,
  usage: Usage,
  elapsedMs: Schema.Finite,
  /** The baseline round (absent: it had not run yet, and a resumed run runs it). */
  baseline: Schema.optionalKey(Schema.Array(Check.CheckResult)),
  resumeToken: Schema.optionalKey(Schema.String),
  /**
   * How the run ended, once it has (not when it was interrupted). A run
   * resumed from a checkpoint that `Converged` or was `Rejected` ends so
   * again without a turn; one that ended otherwise (a budget, the watchdog,
   * the plan-iteration cap) goes on from where it was, with the limits it is
   * given now.
   */
  outcome: Schema.optionalKey(Outcome.Outcome),
  /**
   * Saved in the middle of a worker turn (by `SupervisedSession`, for our own
   * loop): the agent's state already holds the pending message and the part
   * of the turn done, and a resumed run continues that turn (a call that had
   * started and is not replay-safe is answered "outcome unknown") rather than
   * sending the message again.
   */
  inTurn: Schema.optionalKey(Schema.Boolean),
  /** The agent worker's transcript (absent for external workers). */
  agentState: Schema.optionalKey(RunState.RunState)
})
/**
 * @since 0.1.0
 * @category models
 */
export type Checkpoint = typeof Checkpoint.Type

/**
 * How a supervised run ended.
 *
 * @since 0.1.0
 * @category models
 */
export interface Result<P = never> {
  readonly outcome: SupervisedOutcome
  /** Act turns run. */
  readonly turns: number
  /** Plans proposed. */
  readonly planIterations: number
  /** The approved plan, if the run had a plan phase and it was approved. */
  readonly plan: string | undefined
  /** The approved typed plan, when the run asked for one (`planOutput`) and it was approved. */
  readonly planValue: P | undefined
  readonly baseline: ReadonlyArray<Check.CheckResult>
  /** The last round of checks. */
  readonly checks: ReadonlyArray<Check.CheckResult>
  /** The worker's last reply. */
  readonly reply: string
  readonly usage: Usage
  /** The run as a transcript (the agent worker's own; messages and replies for an external worker). */
  readonly state: RunState.RunState
}

/**
 * What a supervised run is given.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<R = never, P = never> {
  /** The task. */
  readonly task: string
  /** The checks run after each turn (none: the first ended turn converges). */
  readonly checks?: ReadonlyArray<Check.Check<R>> | undefined
  /** The worker; our own loop when absent (built from `agent`). */
  readonly worker?: Worker.Worker<R> | AgentWorker.AgentWorker<R> | undefined
  /** The default worker's settings. */
  readonly agent?: AgentWorker.Options<R> | undefined
  readonly runId?: string | undefined
  /** Ask for a plan first, with the work tools withheld. */
  readonly plan?: boolean | undefined
  /**
   * The plan's Schema: the plan is a typed value the worker gives through
   * the same typed output as `Agent.run({ output })`. Our own loop only: an
   * external worker gives text (a `ConfigError`).
   */
  readonly planOutput?: Schema.Codec<P, unknown> | undefined
  /** Plans proposed at most (default 5); a refinement past it ends `PlanIterationCap`. */
  readonly maxPlanIterations?: number | undefined
  /** Ask the operator (`Approvals.decideTurn`) before each feedback goes out. */
  readonly approveTurns?: boolean | undefined
  /** Act turns at most (default 10). */
  readonly maxTurns?: number | undefined
  readonly maxTokens?: number | undefined
  readonly maxCostUsd?: number | undefined
  readonly maxWallClock?: Duration.Input | undefined
  /** Checks running at once (default 4). */
  readonly checkConcurrency?: number | undefined
  /** Lines of a failing check's output in feedback (default 20). */
  readonly feedbackLines?: number | undefined
  /** Run the checks once before the first turn; failures there are known (default true). */
  readonly baseline?: boolean | undefined
  /** Stuck when the checks' results repeat this many more times after a first sighting (default 5; 0 disables). */
  readonly stuckAfterIdenticalChecks?: number | undefined
  /** Stuck on this many identical replies in a row (default 3; 0 disables). */
  readonly stuckAfterIdenticalReplies?: number | undefined
  /** Every event of the run, in order. */
  readonly onEvent?: ((event: AgentEvent.AgentEvent) => Effect.Effect<void>) | undefined
  /**
   * Talking to the run while it runs (else the `Steering` service, if provided). `cancel` ends it at once with
   * `Cancelled`, whatever it is doing: a worker turn, the checks, a wait for the operator. `steer` and `followUp`
   * reach our own loop (the default worker) as they reach `Agent.run`: before its next model call, and when it
   * would stop (between turns they wait for the next worker turn). An external worker takes neither: what is
   * not delivered when the run ends comes back in the result's state, as `Agent.run` returns it.
   */
  readonly steering?: Steering.Service | undefined
  /** Durable runs: the checkpoint to resume from, and where to save one. */
  readonly checkpoint?: {
    readonly resume?: Checkpoint | undefined
    readonly save: (checkpoint: Checkpoint) => Effect.Effect<void, AgentError | CheckpointStore.CheckpointError>
  } | undefined
}

/**
 * The defaults of the options.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaults = {
  maxPlanIterations: 5,
  maxTurns: 10,
  checkConcurrency: 4,
  feedbackLines: 20,
  stuckAfterIdenticalChecks: 5,
  stuckAfterIdenticalReplies: 3
} as const

// -----------------------------------------------------------------------------
// Messages to the worker
// -----------------------------------------------------------------------------

/**
 * The first plan request.
 *
 * @since 0.1.0
 * @category messages
 */
export const planRequest = (task: string): string =>
  "Write a clear, structured plan for the task below. Reply with the plan in your message; " +
  `do not change any files yet.\n\nTask: ${task}`

/**
 * A request for a revised plan, with the operator's notes verbatim.
 *
 * @since 0.1.0
 * @category messages
 */
export const revisionRequest = (notes: string): string =>
  `Revise your plan following these notes from the reviewer:\n\n${notes}\n\n` +
  "Reply with the complete revised plan; do not change any files yet."

/**
 * The act phase's first message: the approved plan and the original task.
 *
 * @since 0.1.0
 * @category messages
 */
export const actRequest = (plan: string, task: string): string =>
  `Plan approved:\n\n${plan}\n\nProceed with implementation. Original task: ${task}`

const tail = (text: string, lines: number): ReadonlyArray<string> => {
  if (lines <= 0 || text === "") return []
  const all = text.replace(/\n+$/, "").split("\n")
  return all.length <= lines ? all : ["…", ...all.slice(all.length - lines)]
}

/**
 * The feedback after a round of checks: one entry per failing check (new
 * failures first, then advisory ones, then known ones), each with its summary
 * and at most `lines` lines of its output, ending with an instruction.
 *
 * @since 0.1.0
 * @category messages
 */
export const feedback = (turn: number, results: ReadonlyArray<Check.CheckResult>, lines: number): string => {
  const rank = (result: Check.CheckResult) =>
    result.status === "known" ? 2 : result.role === "advisory" ? 1 : 0
  const failing = results.filter((result) => result.status !== "pass").sort((a, b) => rank(a) - rank(b))
  const entries = failing.map((result) => {
    const label = result.status === "known"
      ? "known: failing before this task started"
      : result.role === "advisory"
      ? "advisory"
      : "new"
    const head = `- ${result.check} [${label}, ${(result.durationMs / 1000).toFixed(1)}s]: ${result.summary}`
    return [head, ...tail(result.details, lines).map((line) => `    ${line}`)].join("\n")
  })
  return `The checks after turn ${turn} did not pass:\n\n${entries.join("\n")}\n\n` +
    "Continue the work: fix the new failures first, then reply with what you changed."
}

// -----------------------------------------------------------------------------
// The run
// -----------------------------------------------------------------------------

/**
 * Why a supervised run could not go on: its worker failed, or its checkpoint
 * could not be saved.
 *
 * @since 0.1.0
 * @category errors
 */
export type RunError = AgentError | CheckpointStore.CheckpointError

/** A typed plan: decoded, and in its JSON form. */
interface TypedPlan<P> {
  readonly value: P
  readonly encoded: unknown
}

/** Ends the run with an outcome (internal control flow, caught by `run`). */
class Stop extends Data.TaggedError("Stop")<{ readonly outcome: SupervisedOutcome }> {}

/** A worker as the supervisor drives it: an external one, or our loop (which may fail with any `AgentError`). */
interface AnyWorker<R> {
  readonly _tag?: "AgentWorker"
  readonly name: string
  readonly turn: (request: AgentWorker.TypedRequest) => Effect.Effect<AgentWorker.TypedReply, AgentError, R>
  readonly state?: Effect.Effect<RunState.RunState | undefined>
}

const nonNegative = (value: number | undefined, fallback: number): number =>
  value === undefined || !Number.isFinite(value) ? fallback : Math.max(0, Math.floor(value))

const resultsKey = (results: ReadonlyArray<Check.CheckResult>): string =>
  results.length === 0 ? "" : JSON.stringify(results.map((result) => [result.check, result.status, result.summary]))

/**
 * Runs a supervised run to its outcome. It fails only when it cannot go on:
 * the worker failed (`WorkerError`, or any `AgentError` of our loop), or a
 * checkpoint could not be saved (the `save` function's error). With no `worker`, the worker is our own loop
 * (`AgentWorker`), which needs a `LanguageModel` and a `ToolRegistry`.
 *
 * @since 0.1.0
 * @category running
 */
export const run: {
  <R = never, P = never>(
    options: Options<R, P> & { readonly worker: Worker.Worker<R> }
  ): Effect.Effect<Result<P>, RunError, R>
  <R = never, P = never>(options: Options<R, P>): Effect.Effect<Result<P>, RunError, Agent.Requirements | R>
} = <R, P>(options: Options<R, P>): Effect.Effect<Result<P>, RunError, Agent.Requirements | R> =>
  Effect.flatMap(Effect.serviceOption(Steering.Steering), (service) => {
    const steering = options.steering ?? Option.getOrUndefined(service)
    const resume = options.checkpoint?.resume
    const runId = resume?.runId ?? options.runId ?? globalThis.crypto.randomUUID()
    // Our own loop is given the run's steering: it delivers steering and follow-ups, and ends its turn on a cancel.
    const worker: AnyWorker<Agent.Requirements | R> = options.worker ??
      AgentWorker.make<R>({
        ...options.agent,
        runId,
        state: resume?.agentState ?? options.agent?.state,
        ...(steering === undefined ? {} : { steering })
      })
    return supervise(options, runId, worker, steering, options.worker === undefined)
  })

const supervise = <R, RW, P>(
  options: Options<R, P>,
  runId: string,
  worker: AnyWorker<RW>,
  steering: Steering.Service | undefined,
  /** The worker is our own loop given `steering`: a cancel ends its turn, which it answers with a valid transcript. */
  workerCancels: boolean
): Effect.Effect<Result<P>, RunError, R | RW> =>
  Effect.gen(function*() {
    const resume = options.checkpoint?.resume
    const task = resume?.task ?? options.task
    const checks = options.checks ?? []
    const verifiers = checks.filter((check) => check.role === "verifier")
    if (verifiers.length > 1) {
      const names = verifiers.map((check) => JSON.stringify(check.name)).join(", ")
      return yield* new ConfigError({ field: "checks", rule: `at most one check is the verifier, got ${names}` })
    }
    const regular = checks.filter((check) => check.role !== "verifier")
    const planOutput = options.planOutput
    if (planOutput !== undefined && worker._tag !== "AgentWorker") {
      return yield* new ConfigError({
        field: "planOutput",
        rule: `the ${worker.name} worker gives its plan as text only: a typed plan needs our own loop (AgentWorker)`
      })
    }
    const planSchema = planOutput === undefined ? undefined : Output.finalAnswer(planOutput).identity
    if (resume !== undefined && (resume.planSchema ?? null) !== (planSchema ?? null)) {
      return yield* new OutputSchemaMismatch({ saved: resume.planSchema ?? null, given: planSchema ?? null })
    }
    const isPlan = planOutput === undefined ? undefined : Schema.is(planOutput)
    const savedPlan = resume?.approvedPlanValue
    const resumedPlanValue: TypedPlan<P> | undefined = planOutput === undefined || savedPlan === undefined
      ? undefined
      : {
        value: yield* Schema.decodeUnknownEffect(Schema.toCodecJson(planOutput))(savedPlan).pipe(
          Effect.mapError((error) =>
            new ConfigError({ field: "checkpoint", rule: `its approved plan does not decode: ${error.message}` })
          )
        ),
        encoded: savedPlan
      }
    const maxTurns = nonNegative(options.maxTurns, defaults.maxTurns)
    const maxPlanIterations = Math.max(1, nonNegative(options.maxPlanIterations, defaults.maxPlanIterations))
    const concurrency = Math.max(1, nonNegative(options.checkConcurrency, defaults.checkConcurrency))
    const lines = nonNegative(options.feedbackLines, defaults.feedbackLines)
    const stuckChecks = nonNegative(options.stuckAfterIdenticalChecks, defaults.stuckAfterIdenticalChecks)
    const stuckReplies = nonNegative(options.stuckAfterIdenticalReplies, defaults.stuckAfterIdenticalReplies)
    const maxWallMs = options.maxWallClock === undefined
      ? undefined
      : Duration.toMillis(Duration.fromInputUnsafe(options.maxWallClock))

    // The run's mutable state, in one place (a checkpoint is a copy of it).
    const s = {
      phase: resume?.phase ?? "act" as "plan" | "act",
      pending: resume?.pendingMessage ?? task,
      turn: resume?.turns ?? 0,
      planIteration: resume?.planIteration ?? 1,
      plan: resume?.approvedPlan,
      planValue: resumedPlanValue,
      usage: resume?.usage ?? { inputTokens: 0, outputTokens: 0, costUsd: 0 },
      resumeToken: resume?.resumeToken,
      baseline: resume?.baseline,
      last: [] as ReadonlyArray<Check.CheckResult>,
      reply: "",
      transcript: [Message.user(task)] as Array<Message.Message>,
      checksKey: "",
      checksRepeats: 0,
      lastReply: undefined as string | undefined,
      /** The first worker turn of a run resumed in the middle of a turn continues it. */
      continueTurn: resume?.inTurn === true,
      /** The pending message is feedback the turn gate has not approved yet. */
      awaitingApproval: resume?.awaitingApproval === true,
      replyRepeats: 0
    }
    const startedAt = (yield* Clock.currentTimeMillis) - (resume?.elapsedMs ?? 0)
    const elapsed = Effect.map(Clock.currentTimeMillis, (now) => now - startedAt)

    const emit = (event: AgentEvent.Input) =>
      Effect.flatMap(Clock.currentTimeMillis, (timestamp) => {
        const full: AgentEvent.AgentEvent = { ...event, runId, turn: s.turn, timestamp }
        return options.onEvent === undefined ? Effect.void : options.onEvent(full)
      })
    const forward = (event: AgentEvent.AgentEvent) =>
      options.onEvent === undefined ? Effect.void : options.onEvent(event)

    const state = Effect.gen(function*() {
      const inner = worker.state === undefined ? undefined : yield* worker.state
      const base = inner ?? RunState.make({ runId, messages: s.transcript })
      return { ...base, turn: s.turn }
    })

    const failingNames = () => s.last.filter(Check.blocks).map((result) => result.check)

    const cancelled = steering?.cancelled
    const cancelStop = (reason: string) => new Stop({ outcome: { _tag: "Cancelled", reason } })
    /** Ends the run if it was cancelled (before and after each worker turn, and before anything that waits). */
    const checkCancelled = Effect.suspend(() =>
      cancelled !== undefined && Deferred.isDoneUnsafe(cancelled)
        ? Effect.flatMap(Deferred.await(cancelled), (reason) => Effect.fail(cancelStop(reason)))
        : Effect.void
    )
    /** What waits (the checks, the operator, an external worker's turn) gives way to a cancel at once. */
    const cancellable = <A, E, R2>(effect: Effect.Effect<A, E, R2>): Effect.Effect<A, E | Stop, R2> =>
      cancelled === undefined ? effect : Effect.andThen(
        checkCancelled,
        Effect.raceFirst(effect, Effect.flatMap(Deferred.await(cancelled), (reason) => Effect.fail(cancelStop(reason))))
      )

    /** Ends the run `Unverified` when a budget (or, with `turns`, the turn cap) is spent. */
    const checkBudgets = (turns: boolean) =>
      Effect.gen(function*() {
        const unverified = (budget: "turns" | "tokens" | "costUsd" | "wallClock", limit: number, used: number) =>
          new Stop({ outcome: { _tag: "Unverified", budget, limit, used, failing: failingNames() } })
        if (turns && s.turn >= maxTurns) return yield* unverified("turns", maxTurns, s.turn)
        const tokens = s.usage.inputTokens + s.usage.outputTokens
        if (options.maxTokens !== undefined && tokens >= options.maxTokens) {
          return yield* unverified("tokens", options.maxTokens, tokens)
        }
        if (options.maxCostUsd !== undefined && s.usage.costUsd >= options.maxCostUsd) {
          return yield* unverified("costUsd", options.maxCostUsd, s.usage.costUsd)
        }
        const used = yield* elapsed
        if (maxWallMs !== undefined && used >= maxWallMs) return yield* unverified("wallClock", maxWallMs, used)
      })

    const save = (phase: "plan" | "act", pendingMessage: string, outcome?: SupervisedOutcome) =>
      options.checkpoint === undefined ? Effect.void : Effect.gen(function*() {
        s.phase = phase
        s.pending = pendingMessage
        const agentState = worker.state === undefined ? undefined : yield* worker.state
        const checkpoint: Checkpoint = {
          version: 1,
          runId,
          task,
          phase,
          planIteration: s.planIteration,
          pendingMessage,
          turns: s.turn,
          usage: s.usage,
          elapsedMs: yield* elapsed,
          ...(s.baseline === undefined ? {} : { baseline: s.baseline }),
          ...(s.plan === undefined ? {} : { approvedPlan: s.plan }),
          ...(planSchema === undefined ? {} : { planSchema }),
          ...(s.planValue === undefined ? {} : { approvedPlanValue: s.planValue.encoded }),
          ...(s.resumeToken === undefined ? {} : { resumeToken: s.resumeToken }),
          ...(outcome === undefined ? {} : { outcome }),
          // Until the turn it was saved in goes on, a checkpoint of a run resumed in the middle of one says so.
          ...(s.continueTurn ? { inTurn: true } : {}),
          ...(s.awaitingApproval ? { awaitingApproval: true } : {}),
          ...(agentState === undefined ? {} : { agentState })
        }
        yield* options.checkpoint!.save(checkpoint)
      })

    /** One worker turn, bounded by what is left of the wall clock. */
    const workerTurn = (phase: "plan" | "act", message: string) =>
      Effect.gen(function*() {
        yield* checkCancelled
        yield* emit({ _tag: "WorkerTurnStart", worker: worker.name, phase, message })
        const request: AgentWorker.TypedRequest = {
          message,
          phase,
          resumeToken: s.resumeToken,
          ...(phase === "plan" && planOutput !== undefined ? { output: planOutput } : {}),
          ...(s.continueTurn ? { continue: true } : {})
        }
        s.continueTurn = false
        const working = worker.turn(request).pipe(Effect.provideService(AgentWorker.Events, forward))
        // Our loop ends its own turn on a cancel (its calls answered); any other worker's turn is cut short.
        const turn = workerCancels ? working : cancellable(working)
        const left = maxWallMs === undefined ? undefined : maxWallMs - (yield* elapsed)
        const reply = left === undefined ? yield* turn : yield* Effect.timeoutOrElse(turn, {
          duration: Duration.millis(Math.max(0, left)),
          orElse: () =>
            Effect.flatMap(elapsed, (used) =>
              Effect.fail(
                new Stop({
                  outcome: { _tag: "Unverified", budget: "wallClock", limit: maxWallMs!, used, failing: failingNames() }
                })
              ))
        })
        s.usage = {
          inputTokens: s.usage.inputTokens + reply.usage.inputTokens,
          outputTokens: s.usage.outputTokens + reply.usage.outputTokens,
          costUsd: s.usage.costUsd + (reply.costUsd ?? 0)
        }
        s.resumeToken = reply.resumeToken ?? s.resumeToken
        s.reply = reply.text
        s.transcript.push(Message.user(message), {
          role: "assistant",
          content: [Message.text(reply.text)],
          stopReason: "stop",
          usage: { ...Message.emptyUsage, input: reply.usage.inputTokens, output: reply.usage.outputTokens }
        })
        yield* emit({ _tag: "WorkerTurnEnd", worker: worker.name, phase, text: reply.text, usage: reply.usage })
        yield* checkCancelled
        return reply
      })

    const runChecks = (round: ReadonlyArray<Check.Check<R>>, baseline: boolean) => {
      const known = new Map<string, string>()
      if (!baseline) {
        for (const result of s.baseline ?? []) {
          if (result.status !== "pass") known.set(result.check, Check.failureKey(result.summary))
        }
      }
      return cancellable(Effect.forEach(round, (check) =>
        Effect.gen(function*() {
          yield* emit({ _tag: "CheckStarted", check: check.name, role: check.role, baseline })
          const result = yield* Check.run(check, known.get(check.name))
          yield* emit({ _tag: "CheckResult", ...result, baseline })
          return result
        }), { concurrency }))
    }

    /** The typed plan of a plan turn's reply, when the run asked for one (the Schema's guard, not a cast). */
    const typedPlan = (reply: AgentWorker.TypedReply) =>
      Effect.gen(function*() {
        if (isPlan === undefined) return undefined
        const value = reply.output?.value
        if (reply.output === undefined || !isPlan(value)) {
          return yield* new Worker.WorkerError({
            worker: worker.name,
            reason: "decode",
            message: "the plan turn gave no plan of the plan's Schema"
          })
        }
        const plan: TypedPlan<P> = { value, encoded: reply.output.encoded }
        return plan
      })

    /** The plan phase: propose, then approve, refine (up to the cap) or reject. */
    const planPhase = (approvals: Approvals.Service | undefined, firstMessage: string) =>
      Effect.gen(function*() {
        let message = firstMessage
        while (true) {
          yield* save("plan", message)
          const reply = yield* workerTurn("plan", message)
          yield* checkBudgets(false)
          const plan = reply.text
          const typed = yield* typedPlan(reply)
          const request: Approvals.PlanRequest = {
            runId,
            plan,
            iteration: s.planIteration,
            ...(typed === undefined ? {} : { value: typed.value })
          }
          // Opened before it is announced (`Approvals.Service.openPlan`): an answer on seeing the event finds it.
          const decision: Approvals.PlanDecision = yield* Effect.scoped(Effect.gen(function*() {
            const decide = approvals?.decidePlan
            const opened = decide === undefined || approvals?.openPlan === undefined
              ? undefined
              : yield* approvals.openPlan(request)
            yield* emit({
              _tag: "PlanProposed",
              plan,
              iteration: s.planIteration,
              ...(typed === undefined ? {} : { value: typed.encoded })
            })
            return decide === undefined ? { _tag: "Approve" } as const : yield* cancellable(opened ?? decide(request))
          }))
          switch (decision._tag) {
            case "Approve": {
              yield* emit({ _tag: "PlanApproved", iteration: s.planIteration, plan })
              s.planValue = typed
              return plan
            }
            case "Reject": {
              yield* emit({ _tag: "PlanRejected", iteration: s.planIteration, notes: decision.notes })
              return yield* new Stop({ outcome: { _tag: "Rejected", notes: decision.notes } })
            }
            case "Refine": {
              if (s.planIteration >= maxPlanIterations) {
                return yield* new Stop({ outcome: { _tag: "PlanIterationCap", limit: maxPlanIterations } })
              }
              s.planIteration += 1
              yield* emit({ _tag: "PlanRevised", iteration: s.planIteration, notes: decision.notes })
              message = revisionRequest(decision.notes)
            }
          }
        }
      })

    /** The watchdog, on a turn that did not converge. */
    const watch = (results: ReadonlyArray<Check.CheckResult>, reply: string) =>
      Effect.gen(function*() {
        const key = resultsKey(results)
        if (key !== "" && key === s.checksKey) s.checksRepeats += 1
        else {
          s.checksKey = key
          s.checksRepeats = 0
        }
        if (reply === s.lastReply) s.replyRepeats += 1
        else {
          s.lastReply = reply
          s.replyRepeats = 1
        }
        if (stuckChecks > 0 && s.checksRepeats >= stuckChecks) {
          return yield* new Stop({ outcome: { _tag: "Stuck", reason: "checks", repeats: s.checksRepeats } })
        }
        if (stuckReplies > 0 && s.replyRepeats >= stuckReplies) {
          return yield* new Stop({ outcome: { _tag: "Stuck", reason: "replies", repeats: s.replyRepeats } })
        }
      })

    /**
     * The turn gate: with `approveTurns`, the operator approves the feedback, replaces it or interrupts the run
     * before it goes out. It is saved as awaiting approval first, so that a run stopped while the gate waits asks
     * again when it is resumed, and saved again once decided.
     */
    const gate = (approvals: Approvals.Service | undefined, feedbackText: string) =>
      Effect.gen(function*() {
        let text = feedbackText
        const decideTurn = approvals?.decideTurn
        if (options.approveTurns === true && decideTurn !== undefined) {
          const request: Approvals.TurnRequest = { runId, turn: s.turn, feedback: text }
          // Opened before it is announced (`Approvals.Service.openTurn`): an answer on seeing the event finds it.
          const decision = yield* Effect.scoped(Effect.gen(function*() {
            const opened = approvals?.openTurn === undefined ? undefined : yield* approvals.openTurn(request)
            yield* emit({ _tag: "TurnApprovalRequested", feedback: text })
            return yield* cancellable(opened ?? decideTurn(request))
          }))
          if (decision._tag === "Interrupt") return yield* Effect.interrupt
          if (decision._tag === "Replace") text = decision.feedback
          s.awaitingApproval = false
          yield* save("act", text)
        }
        yield* emit({ _tag: "FeedbackSent", feedback: text, failing: failingNames() })
        return text
      })

    /** The act phase: turns until the checks pass or something ends the run. */
    const actPhase = (approvals: Approvals.Service | undefined, firstMessage: string) =>
      Effect.gen(function*() {
        let message = firstMessage
        if (s.awaitingApproval) {
          // Resumed while the gate waited: the feedback has not been approved, so the gate is asked again.
          if (options.approveTurns !== true || approvals?.decideTurn === undefined) {
            return yield* new ConfigError({
              field: "approveTurns",
              rule: "the run was saved while its feedback waited for the turn gate: resume it with approveTurns " +
                "and an Approvals service that has decideTurn"
            })
          }
          yield* checkBudgets(true)
          message = yield* gate(approvals, message)
        } else {
          yield* save("act", message)
        }
        while (true) {
          yield* checkBudgets(true)
          s.turn += 1
          const reply = yield* workerTurn("act", message)
          const results = yield* runChecks(regular, false)
          s.last = results
          if (!results.some(Check.blocks)) {
            const verdict = yield* runChecks(verifiers, false)
            s.last = [...results, ...verdict]
            if (!verdict.some(Check.blocks)) return { _tag: "Converged", turns: s.turn } as const
          }
          yield* watch(s.last, reply.text)
          const text = feedback(s.turn, s.last, lines)
          s.awaitingApproval = options.approveTurns === true && approvals?.decideTurn !== undefined
          yield* save("act", text)
          yield* checkBudgets(true)
          message = yield* gate(approvals, text)
        }
      })

    const body = Effect.gen(function*() {
      yield* emit({ _tag: "AgentStart", messages: [Message.user(task)] })
      const approvals = Option.getOrUndefined(yield* Effect.serviceOption(Approvals.Approvals))
      if (resume?.outcome?._tag === "Converged" || resume?.outcome?._tag === "Rejected") return resume.outcome
      const phase = resume?.phase ?? (options.plan === true ? "plan" : "act")
      const message = resume?.pendingMessage ?? (phase === "plan" ? planRequest(task) : task)
      if (s.baseline === undefined) {
        // Saved before the baseline, so that a run stopped from here on can be resumed.
        if (resume === undefined) yield* save(phase, message)
        s.baseline = options.baseline !== false && regular.length > 0 ? yield* runChecks(regular, true) : []
      }
      if (phase === "act") return yield* actPhase(approvals, message)
      yield* checkBudgets(false)
      const plan = yield* planPhase(approvals, message)
      s.plan = plan
      return yield* actPhase(approvals, actRequest(plan, task))
    })

    /** What was queued and never delivered (to an external worker, or after our loop's last turn), for the result. */
    const undelivered = steering === undefined
      ? Effect.succeed<readonly [ReadonlyArray<Message.Message>, ReadonlyArray<Message.Message>]>([[], []])
      : Effect.all([steering.takeSteering, steering.takeFollowUps])
    const result = (outcome: SupervisedOutcome) =>
      Effect.map(Effect.all([state, undelivered]), ([inner, [steered, followUps]]): Result<P> => {
        const runState = steered.length === 0 && followUps.length === 0 ? inner : {
          ...inner,
          steering: [...inner.steering, ...steered],
          followUps: [...inner.followUps, ...followUps]
        }
        return {
          outcome,
          turns: s.turn,
          planIterations: s.planIteration,
          plan: s.plan,
          planValue: s.planValue?.value,
          baseline: s.baseline ?? [],
          checks: s.last,
          reply: s.reply,
          usage: s.usage,
          state: runState
        }
      })
    const runResult = (done: Result<P>): RunState.RunResult => ({
      messages: done.state.messages,
      state: done.state,
      outcome: done.outcome,
      usage: { ...Message.emptyUsage, input: done.usage.inputTokens, output: done.usage.outputTokens }
    })

    return yield* body.pipe(
      Effect.catchTag("Stop", (stop) => Effect.succeed(stop.outcome)),
      // The ending is saved (an interrupted run keeps its last checkpoint, to go on from).
      Effect.tap((outcome) => outcome._tag === "Cancelled" ? Effect.void : save(s.phase, s.pending, outcome)),
      Effect.flatMap(result),
      Effect.onExit((exit) => {
        if (Exit.isSuccess(exit)) {
          return emit({ _tag: "AgentEnd", outcome: exit.value.outcome, result: runResult(exit.value) })
        }
        if (Cause.hasInterruptsOnly(exit.cause)) {
          return Effect.flatMap(result({ _tag: "Cancelled", reason: "interrupted" }), (done) =>
            emit({ _tag: "AgentEnd", outcome: done.outcome, result: runResult(done) }))
        }
        const error = Cause.findErrorOption(exit.cause)
        if (error._tag === "None") return emit({ _tag: "AgentEnd", defect: Cause.pretty(exit.cause) })
        // A checkpoint that could not be saved is not an `AgentError`: the event says it in words.
        return Schema.is(AgentErrorSchema)(error.value)
          ? emit({ _tag: "AgentEnd", error: error.value })
          : emit({ _tag: "AgentEnd", defect: error.value.message })
      })
    )
  })
