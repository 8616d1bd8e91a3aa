/**
 * Supervised runs: a worker (our own loop, or an external coding agent) works
 * on a task in turns, and after each turn the checks run; the run ends when
 * they pass, and otherwise the worker gets one feedback message listing what
 * failed, until a budget, the turn cap or the no-progress watchdog ends it.
 * It is an outer loop over the worker's runs: with our own loop as the
 * worker, each turn is one `Agent.run` (then `Agent.runContinue` over the same
 * transcript), given the run's options (`agent`: system prompt, config and its
 * budgets, plugins and guardrails, `output`) and what is left of the
 * supervised run's budgets.
 *
 * ```
 * AgentStart → baseline checks (failures there are "known")
 * [plan: WorkerTurnStart/End (work tools withheld) → PlanProposed → Approvals.decidePlan
 *        → approve (PlanApproved) | refine (PlanRevised, ask again) | reject (PlanRejected → Rejected)]
 * act turn: WorkerTurnStart → worker → WorkerTurnEnd
 *   → the worker's run did not end by itself → its ending (SupervisorOutcome.fromInner)
 *   → CheckStarted/CheckResult… (in parallel)
 *   → every blocking check passes (then the verifier)
 *     → follow-ups queued on the steering? the next act turn, with them as its message : Converged
 *   → else watchdog (Stuck) → feedback (new failures first) → caps (Unverified)
 *     → [TurnApprovalRequested → Approvals.decideTurn] → FeedbackSent → next act turn
 * AgentEnd (always last)
 * ```
 *
 * The run's own events and endings are the supervisor's words, not the
 * core's: see `SupervisorEvent` (carried as `Custom` events) and
 * `SupervisorOutcome` (the result's outcome; `Custom` on the `AgentEnd`
 * event).
 *
 * With `planOutput` (a Schema) and our own loop as the worker, the plan is a
 * typed value: the plan turn is `Agent.run({ output })`, `PlanProposed`
 * carries the value (in its JSON form) beside the text, the approver sees it
 * (`PlanRequest.value`), and the approved value is in the result
 * (`planValue`) and the checkpoint. An external CLI worker gives text only:
 * `planOutput` with one is a `ConfigError`. With `output`, each act turn is
 * `Agent.run({ output })` the same way, and the last act turn's answer is
 * the result's `output`.
 *
 * Outcomes: `Converged`, `Unverified` (a budget or the turn cap ended the run
 * before the checks passed; never `Completed`), `Stuck`, `Rejected`,
 * `PlanIterationCap`, `Cancelled` when the run is interrupted or cancelled
 * through its `steering` (at once, whatever it is doing), and how the
 * worker's own run ended when it did not end by itself (a guardrail trip, its
 * own turn cap…: see `SupervisorOutcome.fromInner`). Plan turns count
 * against tokens, cost and wall clock, not the act turn cap.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as SchemaAST from "effect/SchemaAST"
import type * as Agent from "../Agent.ts"
import { type AgentError, ConfigError, OutputSchemaMismatch } from "../AgentError.ts"
import { AgentError as AgentErrorSchema } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Approvals from "../Approvals.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as Output from "../Output.ts"
import * as RunState from "../RunState.ts"
import type * as CheckpointStore from "../session/CheckpointStore.ts"
import type * as Sessions from "../session/Sessions.ts"
import * as Steering from "../Steering.ts"
import * as AgentWorker from "./AgentWorker.ts"
import * as Check from "./Check.ts"
import * as SupervisorEvent from "./SupervisorEvent.ts"
import * as SupervisorOutcome from "./SupervisorOutcome.ts"
import * as Worker from "./Worker.ts"

// -----------------------------------------------------------------------------
// Models
// -----------------------------------------------------------------------------

/**
 * The endings of a supervised run (see `SupervisorOutcome`).
 *
 * @since 0.1.0
 * @category models
 */
export type SupervisedOutcome = SupervisorOutcome.SupervisorOutcome

/**
 * Where a supervised run is, saved after each step that changes it (the
 * start, before the baseline; each plan request; act entry; each turn that
 * did not converge): what a resumed run needs to carry on in the phase it was
 * in, redoing at most one turn. Version 2: `usage` is the core's
 * `Message.Usage`, and `outcome` a `SupervisorOutcome` (a version 1
 * checkpoint is read by {@link decodeCheckpoint}).
 *
 * @since 0.1.0
 * @category models
 */
export const Checkpoint = Schema.Struct({
  version: Schema.Literal(2),
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
  /**
   * The pending message is these follow-ups (its text is theirs): our own
   * loop gets them as queued follow-ups, delivered as `Agent.runContinue`
   * delivers one (its `beforeDelivery` hooks, `FollowUpDelivered`), rather
   * than as a new user message.
   */
  pendingFollowUps: Schema.optionalKey(Schema.Array(Message.Message)),
  /** Act turns completed. */
  turns: Schema.Finite,
  /** What the run used, plan and act turns alike (the cost when the worker reports it). */
  usage: Message.Usage,
  elapsedMs: Schema.Finite,
  /** The baseline round (absent: it had not run yet, and a resumed run runs it). */
  baseline: Schema.optionalKey(Schema.Array(Check.CheckResult)),
  /**
   * The last round of checks after an act turn (absent before the first): a
   * resumed run that ends before another round (a budget already spent)
   * reports these, the checks still failing among them, as the run did.
   */
  checks: Schema.optionalKey(Schema.Array(Check.CheckResult)),
  resumeToken: Schema.optionalKey(Schema.String),
  /**
   * How the run ended, once it has (not when it was interrupted). A run
   * resumed from a checkpoint that `Converged` or was `Rejected` ends so
   * again without a turn; one that ended otherwise (a budget, the watchdog,
   * the plan-iteration cap, the worker's own run) goes on from where it was,
   * with the limits it is given now. With follow-ups pending (queued on its
   * `steering`, or saved undelivered in `pendingFollowUps`), a run that
   * ended after an act turn (but `Rejected`) goes on with them instead: a
   * new act round whose message is the follow-ups; a converged run with no
   * room left for that round ends `Converged` again, the follow-ups returned
   * undelivered.
   */
  outcome: Schema.optionalKey(SupervisorOutcome.SupervisorOutcome),
  /**
   * Saved in the middle of a worker turn (by `SupervisedSession`, for our own
   * loop): the agent's state already holds the pending message and the part
   * of the turn done, and a resumed run continues that turn (a call that had
   * started and is not replay-safe is answered "outcome unknown") rather than
   * sending the message again.
   */
  inTurn: Schema.optionalKey(Schema.Boolean),
  /**
   * The agent a handoff (`Agent.handoff`) passed the agent worker's run to,
   * when it did: its name, and the run id of the state it answered in (the
   * agent's state is that run's, not the supervised run's). A resumed run
   * goes on in that agent (give its definition in the agent worker's
   * `agents`).
   */
  handedOff: Schema.optionalKey(Schema.Struct({ agent: Schema.String, runId: Schema.String })),
  /** The agent worker's transcript (absent for external workers). */
  agentState: Schema.optionalKey(RunState.RunState)
})
/**
 * @since 0.1.0
 * @category models
 */
export type Checkpoint = typeof Checkpoint.Type

const UsageV1 = Schema.Struct({ inputTokens: Schema.Finite, outputTokens: Schema.Finite, costUsd: Schema.Finite })

/**
 * A checkpoint as version 1 wrote it (`usage` as `{ inputTokens,
 * outputTokens, costUsd }`, the outcome in the core's union of then).
 *
 * @since 0.1.0
 * @category models
 */
export const CheckpointV1 = Schema.Struct({
  ...Checkpoint.fields,
  version: Schema.Literal(1),
  usage: UsageV1
})

/**
 * The checkpoint of version 1 in today's form: its usage as `Message.Usage`
 * (the cost kept), its outcome unchanged (its endings are
 * `SupervisorOutcome`'s own).
 *
 * @since 0.1.0
 * @category conversions
 */
export const fromV1 = (checkpoint: typeof CheckpointV1.Type): Checkpoint => ({
  ...checkpoint,
  version: 2,
  usage: {
    ...Message.emptyUsage,
    input: checkpoint.usage.inputTokens,
    output: checkpoint.usage.outputTokens,
    cost: checkpoint.usage.costUsd
  }
})

const CheckpointJson = Schema.toCodecJson(Checkpoint)
const CheckpointV1Json = Schema.toCodecJson(CheckpointV1)

/**
 * Decodes a checkpoint from its JSON form, of this version or of version 1
 * (migrated with {@link fromV1}); fails with the `SchemaError` of today's
 * form when it is neither.
 *
 * @since 0.1.0
 * @category codecs
 */
export const decodeCheckpoint = (
  input: unknown,
  options?: SchemaAST.ParseOptions
): Effect.Effect<Checkpoint, Schema.SchemaError> =>
  Schema.decodeUnknownEffect(CheckpointJson)(input, options).pipe(
    Effect.catch((error) =>
      typeof input === "object" && input !== null && "version" in input && input.version === 1
        ? Effect.map(
          Effect.mapError(Schema.decodeUnknownEffect(CheckpointV1Json)(input, options), () => error),
          fromV1
        )
        : Effect.fail(error)
    )
  )

/**
 * Encodes a checkpoint to its JSON form.
 *
 * @since 0.1.0
 * @category codecs
 */
export const encodeCheckpoint = Schema.encodeSync(CheckpointJson)

/**
 * How a supervised run ended.
 *
 * @since 0.1.0
 * @category models
 */
export interface Result<P = never, A = never> {
  readonly outcome: SupervisedOutcome
  /** Act turns run. */
  readonly turns: number
  /** Plans proposed (0 in a run without a plan phase). */
  readonly planIterations: number
  /** The approved plan, if the run had a plan phase and it was approved. */
  readonly plan: string | undefined
  /** The approved typed plan, when the run asked for one (`planOutput`) and it was approved. */
  readonly planValue: P | undefined
  /** The last act turn's typed answer, when the run asked for one (`output`). */
  readonly output: A | undefined
  readonly baseline: ReadonlyArray<Check.CheckResult>
  /** The last round of checks. */
  readonly checks: ReadonlyArray<Check.CheckResult>
  /** The worker's last reply. */
  readonly reply: string
  /** What the run used, plan and act turns alike (the cost when the worker reports it). */
  readonly usage: Message.Usage
  /** The run as a transcript (the agent worker's own; messages and replies for an external worker). */
  readonly state: RunState.RunState
}

/**
 * What a supervised run is given.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<R = never, P = never, A = never> {
  /** The task. */
  readonly task: string
  /** The checks run after each turn (none: the first turn that ends by itself converges). */
  readonly checks?: ReadonlyArray<Check.Check<R>> | undefined
  /** The worker; our own loop when absent (built from `agent`). */
  readonly worker?: Worker.Worker<R> | AgentWorker.AgentWorker<R> | undefined
  /**
   * The default worker's settings: what each of its runs is given (system prompt, config with its budgets,
   * plugins and guardrails; handoffs and sub-agents are tools of the `ToolRegistry`).
   */
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
  /**
   * The Schema of each act turn's answer: each act turn is `Agent.run({ output })`, and the result's `output` is
   * the last one's, decoded. Our own loop only (a `ConfigError` with an external worker). A turn without a valid
   * answer ends the run `OutputInvalid`.
   */
  readonly output?: Schema.Codec<A, unknown> | undefined
  /** Plans proposed at most (default 5); a refinement past it ends `PlanIterationCap`. */
  readonly maxPlanIterations?: number | undefined
  /** Ask the operator (`Approvals.decideTurn`) before each feedback goes out. */
  readonly approveTurns?: boolean | undefined
  /** Act turns at most (default 10). */
  readonly maxTurns?: number | undefined
  /** Tokens (input and output) at most; our own loop's runs stop before a model call past it. */
  readonly maxTokens?: number | undefined
  /** US dollars at most (when the worker reports its cost); our own loop's runs stop before a call past it. */
  readonly maxCostUsd?: number | undefined
  /** Time at most, checks included; our own loop's runs stop at it with their calls answered. */
  readonly maxWallClock?: Duration.Input | undefined
  /** Checks running at once (default 4). */
  readonly checkConcurrency?: number | undefined
  /** Lines of a failing check's output in feedback (default 20). */
  readonly feedbackLines?: number | undefined
  /**
   * Run the checks once before the first turn (default true). A check that fails after a turn the way it failed
   * there is `known`: listed apart in feedback, after the new failures, and still failing the run.
   */
  readonly baseline?: boolean | undefined
  /**
   * Tolerate failures that were already there (default false: the run converges only when every blocking check
   * passes). With it, known failures do not hold the run, and a run whose only failures are known ends
   * `Tolerated`, naming them, not `Converged`.
   */
  readonly tolerateKnownFailures?: boolean | undefined
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
   * would stop (between turns they wait for the next worker turn). When the checks pass, follow-ups still
   * queued are the next act turn's message (any worker), as `Agent.run` delivers them before it ends; a resumed
   * run that had ended after an act turn goes on with them the same way. An external worker takes no steering:
   * what is not delivered when the run ends comes back in the result's state, as `Agent.run` returns it.
   */
  readonly steering?: Steering.Service | undefined
  /**
   * How each check's run is kept, so that a replay does not run it again (`Sessions.SupervisedRun.record`: the
   * durable layer's activities); by default it runs. A check is named `checks/<turn>/<i>` (the baseline's turn is
   * 0) or `verifier/<turn>/<i>`, its `CheckStarted` and `CheckResult` events inside it.
   */
  readonly record?: Sessions.Recorder | undefined
  /** Durable runs: the checkpoint to resume from, and where to save one. */
  readonly checkpoint?: {
    readonly resume?: Checkpoint | undefined
    readonly save: (checkpoint: Checkpoint) => Effect.Effect<void, RunError>
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
 * Why a supervised run could not go on: its worker failed (`WorkerError`,
 * or any `AgentError` of our loop), or its checkpoint could not be saved.
 *
 * @since 0.1.0
 * @category errors
 */
export type RunError = AgentError | Worker.WorkerError | CheckpointStore.CheckpointError

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
  <R = never, P = never, A = never>(
    options: Options<R, P, A> & { readonly worker: Worker.Worker<R> }
  ): Effect.Effect<Result<P, A>, RunError, R>
  <R = never, P = never, A = never>(
    options: Options<R, P, A>
  ): Effect.Effect<Result<P, A>, RunError, Agent.Requirements | R>
} = <R, P, A>(options: Options<R, P, A>): Effect.Effect<Result<P, A>, RunError, Agent.Requirements | R> =>
  Effect.gen(function*() {
    const steering = options.steering ?? Option.getOrUndefined(yield* Effect.serviceOption(Steering.Steering))
    const resume = options.checkpoint?.resume
    const runId = resume?.runId ?? options.runId ?? globalThis.crypto.randomUUID()
    // Our own loop is given the run's steering: it delivers steering and follow-ups, and ends its turn on a cancel.
    const worker: AnyWorker<Agent.Requirements | R> = options.worker ??
      AgentWorker.make<R>({
        ...options.agent,
        runId,
        // A resumed run goes on in the agent its transcript was handed off to, if it was.
        ...(resume?.agentState === undefined
          ? {}
          : { state: resume.agentState, handedOffTo: resume.handedOff?.agent }),
        ...(steering === undefined ? {} : { steering })
      })
    const live = yield* start(options, runId, worker, steering, options.worker === undefined)
    return yield* supervise(live)
  })

/** A worker as the supervisor drives it: an external one, or our loop (which may fail with any `AgentError`). */
interface AnyWorker<R> {
  readonly _tag?: "AgentWorker"
  readonly name: string
  readonly turn: (
    request: AgentWorker.TypedRequest
  ) => Effect.Effect<AgentWorker.TypedReply, AgentError | Worker.WorkerError, R>
  readonly state?: Effect.Effect<RunState.RunState | undefined>
  /** The agent a handoff passed the worker's transcript to (our loop's). */
  readonly agent?: Effect.Effect<string | undefined>
}

/** A typed value: decoded, and in its JSON form. */
interface Typed<P> {
  readonly value: P
  readonly encoded: unknown
}

/** The limits of a run: its act turn cap and its budgets (`null`: none). */
interface Limits {
  readonly turns: number
  readonly tokens: number | null
  readonly costUsd: number | null
  readonly wallClock: number | null
}

/** What a run was given, settled once: read, never changed. */
interface Settings<R, P, A> {
  readonly runId: string
  readonly task: string
  readonly checks: ReadonlyArray<Check.Check<R>>
  readonly verifiers: ReadonlyArray<Check.Check<R>>
  readonly planOutput: Schema.Codec<P, unknown> | undefined
  readonly planSchema: string | undefined
  readonly output: Schema.Codec<A, unknown> | undefined
  readonly limits: Limits
  readonly maxPlanIterations: number
  readonly concurrency: number
  readonly lines: number
  readonly stuckChecks: number
  readonly stuckReplies: number
  /** Known failures do not hold the run (`tolerateKnownFailures`). */
  readonly tolerateKnown: boolean
  /** The run has a plan phase (asked for, or resumed with one): else it proposes no plans. */
  readonly planned: boolean
  /** The operator approves each feedback (`approveTurns` and an `Approvals` service that has `decideTurn`). */
  readonly gated: boolean
}

/** Where the run is: what a checkpoint copies, and what the watchdog counts. */
interface Progress<P, A> {
  phase: "plan" | "act"
  /** The message the next worker turn gets. */
  pending: string
  /** Act turns started. */
  turns: number
  planIteration: number
  plan: string | undefined
  planValue: Typed<P> | undefined
  output: A | undefined
  usage: Message.Usage
  resumeToken: string | undefined
  baseline: ReadonlyArray<Check.CheckResult> | undefined
  /** The last round of checks. */
  last: ReadonlyArray<Check.CheckResult>
  reply: string
  /** An external worker's transcript: the messages sent and the replies. */
  readonly transcript: Array<Message.Message>
  checksKey: string
  checksRepeats: number
  lastReply: string | undefined
  replyRepeats: number
  /** The first worker turn of a run resumed in the middle of a turn continues it. */
  continueTurn: boolean
  /** The pending message is feedback the turn gate has not approved yet. */
  awaitingApproval: boolean
  /** The pending message is these follow-ups (taken from the steering, not yet given to the worker). */
  followUps: ReadonlyArray<Message.Message> | undefined
}

/** A supervised run in progress. */
interface Live<R, RW, P, A> {
  readonly options: Options<R, P, A>
  readonly settings: Settings<R, P, A>
  readonly worker: AnyWorker<RW>
  /** The worker is our own loop given `steering`: it ends its own turn on a cancel and at the wall clock. */
  readonly workerStops: boolean
  readonly steering: Steering.Service | undefined
  readonly approvals: Approvals.Service | undefined
  readonly startedAt: number
  /** The time by which the run decides (its wall clock): see `timeOf`. */
  readonly now: Effect.Effect<number>
  readonly progress: Progress<P, A>
}

/** What a step of the run gives: its value, or the run's ending. */
type Step<A> =
  | { readonly _tag: "Next"; readonly value: A }
  | { readonly _tag: "End"; readonly outcome: SupervisedOutcome }

const next = <A>(value: A): Step<A> => ({ _tag: "Next", value })
const end = (outcome: SupervisedOutcome): Step<never> => ({ _tag: "End", outcome })

const nonNegative = (value: number | undefined, fallback: number): number =>
  value === undefined || !Number.isFinite(value) ? fallback : Math.max(0, Math.floor(value))

const resultsKey = (results: ReadonlyArray<Check.CheckResult>): string =>
  results.length === 0 ? "" : JSON.stringify(results.map((result) => [result.check, result.status, result.summary]))

/** The options, checked and settled, and the run's progress (fresh, or the checkpoint's). */
const start = <R, RW, P, A>(
  options: Options<R, P, A>,
  runId: string,
  worker: AnyWorker<RW>,
  steering: Steering.Service | undefined,
  workerStops: boolean
): Effect.Effect<Live<R, RW, P, A>, ConfigError | OutputSchemaMismatch> =>
  Effect.gen(function*() {
    const resume = options.checkpoint?.resume
    const task = resume?.task ?? options.task
    const all = options.checks ?? []
    const verifiers = all.filter((check) => check.role === "verifier")
    if (verifiers.length > 1) {
      const names = verifiers.map((check) => JSON.stringify(check.name)).join(", ")
      return yield* new ConfigError({ field: "checks", rule: `at most one check is the verifier, got ${names}` })
    }
    for (const [field, schema] of [["planOutput", options.planOutput], ["output", options.output]] as const) {
      if (schema !== undefined && worker._tag !== "AgentWorker") {
        return yield* new ConfigError({
          field,
          rule: `the ${worker.name} worker gives its ${
            field === "planOutput" ? "plan" : "answer"
          } as text only: a typed ${field === "planOutput" ? "plan" : "answer"} needs our own loop (AgentWorker)`
        })
      }
    }
    const planOutput = options.planOutput
    const planSchema = planOutput === undefined ? undefined : Output.finalAnswer(planOutput).identity
    if (resume !== undefined && (resume.planSchema ?? null) !== (planSchema ?? null)) {
      return yield* new OutputSchemaMismatch({ saved: resume.planSchema ?? null, given: planSchema ?? null })
    }
    const savedPlan = resume?.approvedPlanValue
    const planValue: Typed<P> | undefined = planOutput === undefined || savedPlan === undefined
      ? undefined
      : {
        value: yield* Schema.decodeUnknownEffect(Schema.toCodecJson(planOutput))(savedPlan).pipe(
          Effect.mapError((error) =>
            new ConfigError({ field: "checkpoint", rule: `its approved plan does not decode: ${error.message}` })
          )
        ),
        encoded: savedPlan
      }
    const approvals = Option.getOrUndefined(yield* Effect.serviceOption(Approvals.Approvals))
    const settings: Settings<R, P, A> = {
      runId,
      task,
      checks: all.filter((check) => check.role !== "verifier"),
      verifiers,
      planOutput,
      planSchema,
      output: options.output,
      limits: {
        turns: nonNegative(options.maxTurns, defaults.maxTurns),
        tokens: options.maxTokens ?? null,
        costUsd: options.maxCostUsd ?? null,
        wallClock: options.maxWallClock === undefined
          ? null
          : Duration.toMillis(Duration.fromInputUnsafe(options.maxWallClock))
      },
      maxPlanIterations: Math.max(1, nonNegative(options.maxPlanIterations, defaults.maxPlanIterations)),
      concurrency: Math.max(1, nonNegative(options.checkConcurrency, defaults.checkConcurrency)),
      lines: nonNegative(options.feedbackLines, defaults.feedbackLines),
      stuckChecks: nonNegative(options.stuckAfterIdenticalChecks, defaults.stuckAfterIdenticalChecks),
      stuckReplies: nonNegative(options.stuckAfterIdenticalReplies, defaults.stuckAfterIdenticalReplies),
      tolerateKnown: options.tolerateKnownFailures === true,
      planned: options.plan === true || resume?.phase === "plan" || resume?.approvedPlan !== undefined,
      gated: options.approveTurns === true && approvals?.decideTurn !== undefined
    }
    const progress: Progress<P, A> = {
      phase: resume?.phase ?? "act",
      pending: resume?.pendingMessage ?? task,
      turns: resume?.turns ?? 0,
      planIteration: resume?.planIteration ?? 1,
      plan: resume?.approvedPlan,
      planValue,
      output: undefined,
      usage: resume?.usage ?? Message.emptyUsage,
      resumeToken: resume?.resumeToken,
      baseline: resume?.baseline,
      last: resume?.checks ?? [],
      reply: "",
      transcript: [Message.user(task)],
      checksKey: "",
      checksRepeats: 0,
      lastReply: undefined,
      replyRepeats: 0,
      continueTurn: resume?.inTurn === true,
      awaitingApproval: resume?.awaitingApproval === true,
      followUps: resume?.pendingFollowUps
    }
    const now = timeOf(options, settings.limits.wallClock !== null)
    const startedAt = (yield* now) - (resume?.elapsedMs ?? 0)
    return { options, settings, worker, workerStops, steering, approvals, startedAt, now, progress }
  })

/**
 * The run, from `AgentStart` to `AgentEnd`: its phases give its ending, which is saved (not a cancel: an
 * interrupted run keeps its last checkpoint, to go on from) and announced.
 */
const supervise = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<Result<P, A>, RunError, R | RW> =>
  phases(live).pipe(
    Effect.tap((outcome) =>
      outcome._tag === "Cancelled" ? Effect.void : save(live, live.progress.phase, live.progress.pending, outcome)
    ),
    Effect.flatMap((outcome) => result(live, outcome)),
    Effect.onExit((exit) => announceEnd(live, exit))
  )

/** The baseline, then the plan phase (when asked for, or resumed in it), then the act phase. */
const phases = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<SupervisedOutcome, RunError, R | RW> =>
  Effect.gen(function*() {
    const { options, progress, settings } = live
    yield* emit(live, { _tag: "AgentStart", messages: [Message.user(settings.task)] })
    const resume = options.checkpoint?.resume
    const ended = resume?.outcome
    // A finished run given a follow-up goes on with it, as `Agent.runContinue` does: a new act round. Not one
    // whose worker never had its act turn (it goes on as it is, the follow-up after), nor a rejected plan.
    const followUp = ended !== undefined && ended._tag !== "Rejected" && resume?.phase === "act" && resume.turns > 0
      ? yield* takeFollowUps(live)
      : undefined
    if (followUp === undefined && (passed(ended) || ended?._tag === "Rejected")) return ended
    const phase = resume?.phase ?? (options.plan === true ? "plan" : "act")
    const message = resume?.pendingMessage ?? (phase === "plan" ? planRequest(settings.task) : settings.task)
    if (progress.baseline === undefined) {
      // Saved before the baseline, so that a run stopped from here on can be resumed.
      if (resume === undefined) yield* save(live, phase, message)
      const baseline = options.baseline !== false && settings.checks.length > 0
        ? yield* checkRound(live, settings.checks, true)
        : next([])
      if (baseline._tag === "End") return baseline.outcome
      progress.baseline = baseline.value
    }
    if (followUp !== undefined) {
      // No room left for the follow-ups' round: a run whose checks passed has converged, as it had (they are
      // returned undelivered, and saved so).
      if (passed(ended) && (yield* exhausted(live, true)) !== undefined) return ended
      return yield* actPhase(live, followUp, true)
    }
    if (phase === "act") return yield* actPhase(live, message)
    const spent = yield* exhausted(live, false)
    if (spent !== undefined) return spent
    const plan = yield* planPhase(live, message)
    if (plan._tag === "End") return plan.outcome
    progress.plan = plan.value
    return yield* actPhase(live, actRequest(plan.value, settings.task))
  })

/** The plan phase: propose, then approve, refine (up to the cap) or reject. */
const planPhase = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  first: string
): Effect.Effect<Step<string>, RunError, RW> =>
  Effect.gen(function*() {
    const { progress, settings } = live
    let message = first
    while (true) {
      yield* save(live, "plan", message)
      const turn = yield* workerTurn(live, "plan", message)
      if (turn._tag === "End") return turn
      const spent = yield* exhausted(live, false)
      if (spent !== undefined) return end(spent)
      const plan = turn.value.text
      const typed = yield* typedPlan(live, turn.value)
      const decision = yield* askPlan(live, plan, typed)
      if (decision._tag === "End") return decision
      switch (decision.value._tag) {
        case "Approve": {
          yield* emitOwn(live, { _tag: "PlanApproved", iteration: progress.planIteration, plan })
          progress.planValue = typed
          return next(plan)
        }
        case "Reject": {
          yield* emitOwn(live, { _tag: "PlanRejected", iteration: progress.planIteration, notes: decision.value.notes })
          return end({ _tag: "Rejected", notes: decision.value.notes })
        }
        case "Refine": {
          if (progress.planIteration >= settings.maxPlanIterations) {
            return end({ _tag: "PlanIterationCap", limit: settings.maxPlanIterations })
          }
          progress.planIteration += 1
          yield* emitOwn(live, { _tag: "PlanRevised", iteration: progress.planIteration, notes: decision.value.notes })
          message = revisionRequest(decision.value.notes)
        }
      }
    }
  })

/**
 * The act phase: turns until the checks pass or something ends the run (at most the turn cap). When they pass,
 * follow-ups queued meanwhile go on as the next turn's message, as `Agent.run` delivers them before it ends.
 */
const actPhase = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  first: string,
  saved = false
): Effect.Effect<SupervisedOutcome, RunError, R | RW> =>
  Effect.gen(function*() {
    const { progress, settings } = live
    let message = first
    if (progress.awaitingApproval) {
      // Resumed while the gate waited: the feedback has not been approved, so the gate is asked again.
      if (!settings.gated) {
        return yield* new ConfigError({
          field: "approveTurns",
          rule: "the run was saved while its feedback waited for the turn gate: resume it with approveTurns " +
            "and an Approvals service that has decideTurn"
        })
      }
      const spent = yield* exhausted(live, true)
      if (spent !== undefined) return spent
      const approved = yield* gate(live, message)
      if (approved._tag === "End") return approved.outcome
      message = approved.value
    } else if (!saved) {
      yield* save(live, "act", message)
    }
    while (true) {
      const spent = yield* exhausted(live, true)
      if (spent !== undefined) return spent
      progress.turns += 1
      const turn = yield* workerTurn(live, "act", message)
      if (turn._tag === "End") return turn.outcome
      const verdict = yield* verify(live)
      if (verdict._tag === "End") return verdict.outcome
      if (verdict.value) {
        const converged = convergence(live)
        const followUp = yield* takeFollowUps(live)
        if (followUp === undefined) return converged
        // The checks passed: a limit that leaves no turn for the follow-ups does not make the run unverified
        // (they come back undelivered, and are saved so).
        if ((yield* exhausted(live, true)) !== undefined) return converged
        message = followUp
        continue
      }
      const stuck = watch(live, turn.value.text)
      if (stuck !== undefined) return stuck
      const text = feedback(progress.turns, progress.last, settings.lines)
      progress.awaitingApproval = settings.gated
      yield* save(live, "act", text)
      const spentAfter = yield* exhausted(live, true)
      if (spentAfter !== undefined) return spentAfter
      const approved = yield* gate(live, text)
      if (approved._tag === "End") return approved.outcome
      message = approved.value
    }
  })

// -----------------------------------------------------------------------------
// The steps
// -----------------------------------------------------------------------------

/**
 * One worker turn. Our own loop is given what is left of the run's budgets, and stops itself at them (and on a
 * cancel); any other worker's turn is cut short by a cancel and by the wall clock. When the worker's own run did
 * not end by itself, the supervised run ends as it did (see `SupervisorOutcome.fromInner`).
 */
const workerTurn = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  phase: "plan" | "act",
  message: string
): Effect.Effect<Step<AgentWorker.TypedReply>, AgentError | Worker.WorkerError, RW> =>
  Effect.gen(function*() {
    const { progress, settings, worker } = live
    const before = yield* cancelledNow(live)
    if (before !== undefined) return end(before)
    yield* emitOwn(live, { _tag: "WorkerTurnStart", worker: worker.name, phase, message })
    const followUps = progress.followUps
    // Our own loop's run delivers follow-ups itself (its hooks, its event); any other worker gets their text.
    if (followUps !== undefined && worker._tag !== "AgentWorker") {
      yield* emit(live, { _tag: "FollowUpDelivered", messages: followUps })
    }
    const output = phase === "plan" ? settings.planOutput : settings.output
    const request: AgentWorker.TypedRequest = {
      message,
      phase,
      resumeToken: progress.resumeToken,
      // Our own loop keeps the run's budgets within its turn; other workers are checked between turns.
      ...(worker._tag === "AgentWorker" ? { budgets: yield* room(live) } : {}),
      ...(output === undefined ? {} : { output }),
      ...(progress.continueTurn ? { continue: true } : {}),
      ...(followUps === undefined || worker._tag !== "AgentWorker" ? {} : { followUps })
    }
    progress.continueTurn = false
    progress.followUps = undefined
    const asked = worker.turn(request).pipe(
      Effect.provideService(AgentWorker.Events, (event) => forward(live, event))
    )
    // A worker of its own (a CLI agent) is kept as one step a turn where the run is kept (a durable session): a
    // replay does not ask it again. Our own loop's model and tool calls are kept one by one, by the layer.
    const record = live.options.record
    const working = record === undefined || worker._tag === "AgentWorker"
      ? asked
      : Effect.flatMap(
        record(
          `worker/${phase}/${phase === "plan" ? progress.planIteration : progress.turns}`,
          ExternalTurn,
          Effect.catch(
            Effect.map(asked, (reply): ExternalTurn => ({
              reply: {
                text: reply.text,
                usage: reply.usage,
                resumeToken: reply.resumeToken ?? null,
                ...(reply.costUsd === undefined ? {} : { costUsd: reply.costUsd })
              }
            })),
            (error) => error._tag === "WorkerError" ? Effect.succeed({ failed: error }) : Effect.die(error)
          )
        ),
        (kept): Effect.Effect<AgentWorker.TypedReply, Worker.WorkerError> =>
          "failed" in kept
            ? Effect.fail(kept.failed)
            : Effect.succeed({ ...kept.reply, resumeToken: kept.reply.resumeToken ?? undefined })
      )
    const turn = live.workerStops ? Effect.map(working, next) : yield* cutShort(live, working)
    const step = yield* turn
    if (step._tag === "End") {
      yield* snapshot(live, phase)
      return step
    }
    const reply = step.value
    const usage = usageOf(reply)
    progress.usage = Message.addUsage(progress.usage, usage)
    progress.resumeToken = reply.resumeToken ?? progress.resumeToken
    progress.reply = reply.text
    const answer = reply.output?.value
    if (phase === "act" && settings.output !== undefined && Schema.is(settings.output)(answer)) progress.output = answer
    progress.transcript.push(Message.user(message), {
      role: "assistant",
      content: [Message.text(reply.text)],
      stopReason: "stop",
      usage
    })
    yield* emitOwn(live, { _tag: "WorkerTurnEnd", worker: worker.name, phase, text: reply.text, usage })
    yield* snapshot(live, phase)
    const after = yield* cancelledNow(live)
    if (after !== undefined) return end(after)
    const inner = reply.outcome === undefined ? undefined : SupervisorOutcome.fromInner(reply.outcome, failing(live))
    if (inner === undefined) return next(reply)
    // A budget of the worker's run that is the supervised run's own is reported with the supervised run's figures.
    const spent = inner._tag === "Unverified" ? yield* exhausted(live, false) : undefined
    return end(spent ?? inner)
  })

/** A turn of a worker of its own as a durable session keeps it: its reply, or how it failed. */
const ExternalTurn = Schema.Union([
  Schema.Struct({
    reply: Schema.Struct({
      text: Schema.String,
      usage: Schema.Struct({ inputTokens: Schema.Finite, outputTokens: Schema.Finite }),
      resumeToken: Schema.NullOr(Schema.String),
      costUsd: Schema.optionalKey(Schema.Finite)
    })
  }),
  Schema.Struct({ failed: Worker.WorkerError })
])
type ExternalTurn = typeof ExternalTurn.Type

/** A worker that does not stop itself: its turn gives way to a cancel at once, and to the wall clock. */
const cutShort = <R, RW, P, A, B, E, R2>(
  live: Live<R, RW, P, A>,
  turn: Effect.Effect<B, E, R2>
): Effect.Effect<Effect.Effect<Step<B>, E, R2>> =>
  Effect.map(elapsed(live), (used) => {
    const limit = live.settings.limits.wallClock
    if (limit === null) return cancellable(live, turn)
    return Effect.timeoutOrElse(cancellable(live, turn), {
      duration: Duration.millis(Math.max(0, limit - used)),
      orElse: () => Effect.map(elapsed(live), (now) => end(unverified(live, "wallClock", limit, now)))
    })
  })

/** One round of checks, in parallel; failures the baseline already had are marked known. */
const checkRound = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  round: ReadonlyArray<Check.Check<R>>,
  baseline: boolean
): Effect.Effect<Step<ReadonlyArray<Check.CheckResult>>, never, R> => {
  const known = new Map<string, string>()
  if (!baseline) {
    for (const result of live.progress.baseline ?? []) {
      if (result.status !== "pass") known.set(result.check, Check.failureKey(result.summary, result.details))
    }
  }
  const record = live.options.record
  const kind = round.length > 0 && round[0]!.role === "verifier" ? "verifier" : "checks"
  return cancellable(
    live,
    Effect.forEach(round, (check, i) => {
      const step = Effect.gen(function*() {
        yield* emitOwn(live, { _tag: "CheckStarted", check: check.name, role: check.role, baseline })
        const result = yield* Check.run(check, known.get(check.name))
        yield* emitOwn(live, { _tag: "CheckResult", ...result, baseline })
        return result
      })
      return record === undefined ? step : record(`${kind}/${live.progress.turns}/${i}`, Check.CheckResult, step)
    }, { concurrency: live.settings.concurrency })
  )
}

/** The checks after an act turn: whether every blocking check passed, then the verifier. */
const verify = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<Step<boolean>, never, R> =>
  Effect.gen(function*() {
    const { progress, settings } = live
    const results = yield* checkRound(live, settings.checks, false)
    if (results._tag === "End") return results
    progress.last = results.value
    if (results.value.some((result) => blocking(live, result))) return next(false)
    const verdict = yield* checkRound(live, settings.verifiers, false)
    if (verdict._tag === "End") return verdict
    progress.last = [...results.value, ...verdict.value]
    return next(!verdict.value.some((result) => blocking(live, result)))
  })

/** The typed plan of a plan turn's reply, when the run asked for one (the Schema's guard, not a cast). */
const typedPlan = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  reply: AgentWorker.TypedReply
): Effect.Effect<Typed<P> | undefined, Worker.WorkerError> =>
  Effect.suspend(() => {
    const schema = live.settings.planOutput
    if (schema === undefined) return Effect.succeed(undefined)
    const value = reply.output?.value
    if (reply.output === undefined || !Schema.is(schema)(value)) {
      return Effect.fail(
        new Worker.WorkerError({
          worker: live.worker.name,
          reason: "decode",
          message: "the plan turn gave no plan of the plan's Schema"
        })
      )
    }
    return Effect.succeed({ value, encoded: reply.output.encoded })
  })

/** Asks the operator about a plan (`Approvals.decidePlan`; approved as proposed without one). */
const askPlan = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  plan: string,
  typed: Typed<P> | undefined
): Effect.Effect<Step<Approvals.PlanDecision>> =>
  Effect.scoped(Effect.gen(function*() {
    const { approvals, progress } = live
    const request: Approvals.PlanRequest = {
      runId: live.settings.runId,
      plan,
      iteration: progress.planIteration,
      ...(typed === undefined ? {} : { value: typed.value })
    }
    const decide = approvals?.decidePlan
    // Opened before it is announced (`Approvals.Service.openPlan`): an answer on seeing the event finds it.
    const opened = decide === undefined || approvals?.openPlan === undefined
      ? undefined
      : yield* approvals.openPlan(request)
    yield* emitOwn(live, {
      _tag: "PlanProposed",
      plan,
      iteration: progress.planIteration,
      ...(typed === undefined ? {} : { value: typed.encoded })
    })
    if (decide === undefined) return next<Approvals.PlanDecision>({ _tag: "Approve" })
    return yield* cancellable(live, opened ?? decide(request))
  }))

/** The watchdog, on a turn that did not converge: `Stuck` when the checks' results or the replies repeat. */
const watch = <R, RW, P, A>(live: Live<R, RW, P, A>, reply: string): SupervisedOutcome | undefined => {
  const { progress, settings } = live
  const key = resultsKey(progress.last)
  if (key !== "" && key === progress.checksKey) progress.checksRepeats += 1
  else {
    progress.checksKey = key
    progress.checksRepeats = 0
  }
  if (reply === progress.lastReply) progress.replyRepeats += 1
  else {
    progress.lastReply = reply
    progress.replyRepeats = 1
  }
  if (settings.stuckChecks > 0 && progress.checksRepeats >= settings.stuckChecks) {
    return { _tag: "Stuck", reason: "checks", repeats: progress.checksRepeats }
  }
  if (settings.stuckReplies > 0 && progress.replyRepeats >= settings.stuckReplies) {
    return { _tag: "Stuck", reason: "replies", repeats: progress.replyRepeats }
  }
  return undefined
}

/**
 * The turn gate: with `approveTurns`, the operator approves the feedback, replaces it or interrupts the run
 * before it goes out. It is saved as awaiting approval first, so that a run stopped while the gate waits asks
 * again when it is resumed, and saved again once decided.
 */
const gate = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  feedbackText: string
): Effect.Effect<Step<string>, RunError> =>
  Effect.gen(function*() {
    const { approvals, progress, settings } = live
    let text = feedbackText
    const decideTurn = approvals?.decideTurn
    if (settings.gated && decideTurn !== undefined) {
      const request: Approvals.TurnRequest = { runId: settings.runId, turn: progress.turns, feedback: text }
      // Opened before it is announced (`Approvals.Service.openTurn`): an answer on seeing the event finds it.
      const decision = yield* Effect.scoped(Effect.gen(function*() {
        const opened = approvals?.openTurn === undefined ? undefined : yield* approvals.openTurn(request)
        yield* emitOwn(live, { _tag: "TurnApprovalRequested", feedback: text })
        return yield* cancellable(live, opened ?? decideTurn(request))
      }))
      if (decision._tag === "End") return decision
      if (decision.value._tag === "Interrupt") return yield* Effect.interrupt
      if (decision.value._tag === "Replace") text = decision.value.feedback
      progress.awaitingApproval = false
      yield* save(live, "act", text)
    }
    yield* emitOwn(live, { _tag: "FeedbackSent", feedback: text, failing: failing(live) })
    return next(text)
  })

// -----------------------------------------------------------------------------
// Budgets, cancels, checkpoints, events
// -----------------------------------------------------------------------------

const elapsed = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<number> =>
  Effect.map(live.now, (now) => now - live.startedAt)

/**
 * The clock the run decides by. With a wall-clock limit and a `record` (a durable session), each reading is kept
 * (`clock/<n>`): a replay decides as the first run did, at the times it read then, and what it reads past them is
 * the time now (a wait for the operator counts, as in process). Otherwise the clock itself.
 */
const timeOf = (options: { readonly record?: Sessions.Recorder | undefined }, limited: boolean): Effect.Effect<number> => {
  const record = options.record
  if (record === undefined || !limited) return Clock.currentTimeMillis
  let reads = 0
  return Effect.suspend(() => record(`clock/${reads++}`, Schema.Finite, Clock.currentTimeMillis))
}

/** The blocking checks still failing. */
const failing = <R, RW, P, A>(live: Live<R, RW, P, A>): Array<string> =>
  live.progress.last.filter((result) => blocking(live, result)).map((result) => result.check)

const blocking = <R, RW, P, A>(live: Live<R, RW, P, A>, result: Check.CheckResult): boolean =>
  Check.blocks(result, { tolerateKnown: live.settings.tolerateKnown })

/** A run whose checks passed: `Converged`, or `Tolerated` when failures already there were tolerated. */
const convergence = <R, RW, P, A>(live: Live<R, RW, P, A>): SupervisedOutcome => {
  const known = live.progress.last.filter((result) => Check.blocks(result)).map((result) => result.check)
  return known.length === 0
    ? { _tag: "Converged", turns: live.progress.turns }
    : { _tag: "Tolerated", turns: live.progress.turns, known }
}

/** Plans proposed: the plan iteration, or none in a run without a plan phase. */
const plansProposed = <R, RW, P, A>(live: Live<R, RW, P, A>): number =>
  live.settings.planned ? live.progress.planIteration : 0

/** Whether a saved ending is one whose checks passed (a resumed run with nothing to do ends so again). */
const passed = (
  outcome: SupervisedOutcome | undefined
): outcome is Extract<SupervisedOutcome, { readonly _tag: "Converged" | "Tolerated" }> =>
  outcome?._tag === "Converged" || outcome?._tag === "Tolerated"

const unverified = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  budget: SupervisorOutcome.Budget,
  limit: number,
  used: number
): SupervisedOutcome => ({ _tag: "Unverified", budget, limit, used, failing: failing(live) })

/** What the run has used of each of its limits. */
const used = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<Record<keyof Limits, number>> =>
  Effect.map(elapsed(live), (wallClock) => ({
    turns: live.progress.turns,
    tokens: Message.totalTokens(live.progress.usage),
    costUsd: live.progress.usage.cost ?? 0,
    wallClock
  }))

const budgets = ["tokens", "costUsd", "wallClock"] as const

/**
 * The run's totals after a worker turn (`SupervisedBudget`). Its time is read from the clock, not through the run's
 * kept clock (`timeOf`): nothing is decided by it, and a durable session's kept readings stay as they were
 * (a replay publishes the event its first run published).
 */
const snapshot = <R, RW, P, A>(live: Live<R, RW, P, A>, phase: "plan" | "act"): Effect.Effect<void> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    emitOwn(live, {
      _tag: "SupervisedBudget",
      phase,
      turns: live.progress.turns,
      planIterations: plansProposed(live),
      usage: live.progress.usage,
      elapsedMs: Math.max(0, now - live.startedAt),
      limits: live.settings.limits
    }))

/** The first limit the run has spent (the turn cap too, with `turns`): the run's ending, `Unverified` by it. */
const exhausted = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  turns: boolean
): Effect.Effect<SupervisedOutcome | undefined> =>
  Effect.map(used(live), (spent) => {
    const limits = live.settings.limits
    if (turns && spent.turns >= limits.turns) return unverified(live, "turns", limits.turns, spent.turns)
    for (const budget of budgets) {
      const limit = limits[budget]
      if (limit !== null && spent[budget] >= limit) return unverified(live, budget, limit, spent[budget])
    }
    return undefined
  })

/** What is left of the run's budgets: the most the next worker turn may use. */
const room = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<AgentWorker.Room> =>
  Effect.map(used(live), (spent) => {
    const limits = live.settings.limits
    const left = (budget: typeof budgets[number]) => {
      const limit = limits[budget]
      return limit === null ? {} : { [budget]: Math.max(0, limit - spent[budget]) }
    }
    return { ...left("tokens"), ...left("costUsd"), ...left("wallClock") }
  })

/** The reply's usage as the core counts it. */
const usageOf = (reply: Worker.TurnReply): Message.Usage => ({
  ...Message.emptyUsage,
  input: reply.usage.inputTokens,
  output: reply.usage.outputTokens,
  ...(reply.costUsd === undefined ? {} : { cost: reply.costUsd })
})

/** The run's ending when it was cancelled (checked before and after each worker turn). */
const cancelledNow = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<SupervisedOutcome | undefined> =>
  Effect.suspend(() => {
    const cancelled = live.steering?.cancelled
    return cancelled !== undefined && Deferred.isDoneUnsafe(cancelled)
      ? Effect.map(Deferred.await(cancelled), Outcome.cancelled)
      : Effect.succeed(undefined)
  })

/** What waits (the checks, the operator, an external worker's turn) gives way to a cancel at once. */
const cancellable = <R, RW, P, A, B, E, R2>(
  live: Live<R, RW, P, A>,
  effect: Effect.Effect<B, E, R2>
): Effect.Effect<Step<B>, E, R2> => {
  const cancelled = live.steering?.cancelled
  if (cancelled === undefined) return Effect.map(effect, next)
  return Effect.flatMap(cancelledNow(live), (outcome) =>
    outcome !== undefined ? Effect.succeed(end(outcome)) : Effect.raceFirst(
      Effect.map(effect, next),
      Effect.map(Deferred.await(cancelled), (reason) => end(Outcome.cancelled(reason)))
    ))
}

/** Follow-ups as a worker's message: their text. */
const followUpText = (messages: ReadonlyArray<Message.Message>): string => messages.map(Message.textOf).join("\n\n")

/**
 * Follow-ups queued on the run's steering, taken as the next act turn's message (in place of what was pending:
 * unapproved feedback is not sent, a turn cut short is not continued) and saved as it, in one step: a follow-up
 * is delivered, returned or saved, never dropped. With those a resumed run saved undelivered before them.
 * `undefined` when there are none.
 */
const takeFollowUps = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<string | undefined, RunError> =>
  Effect.uninterruptible(Effect.gen(function*() {
    const { progress, steering } = live
    const taken = steering === undefined ? [] : yield* steering.takeFollowUps
    const followUps = [...progress.followUps ?? [], ...taken]
    if (followUps.length === 0) return undefined
    progress.followUps = followUps
    progress.awaitingApproval = false
    progress.continueTurn = false
    const text = followUpText(followUps)
    yield* save(live, "act", text)
    return text
  }))

/** Saves where the run is (with the worker's transcript, for our own loop), and its ending once it has one. */
const save = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  phase: "plan" | "act",
  pending: string,
  outcome?: SupervisedOutcome
): Effect.Effect<void, RunError> => {
  const saving = live.options.checkpoint
  if (saving === undefined) return Effect.void
  return Effect.gen(function*() {
    const { progress, settings, worker } = live
    progress.phase = phase
    progress.pending = pending
    const agentState = worker.state === undefined ? undefined : yield* worker.state
    const handedOff = agentState === undefined || worker.agent === undefined ? undefined : yield* worker.agent
    yield* saving.save({
      version: 2,
      runId: settings.runId,
      task: settings.task,
      phase,
      planIteration: progress.planIteration,
      pendingMessage: pending,
      turns: progress.turns,
      usage: progress.usage,
      elapsedMs: yield* elapsed(live),
      ...(progress.baseline === undefined ? {} : { baseline: progress.baseline }),
      ...(progress.last.length === 0 ? {} : { checks: progress.last }),
      ...(progress.plan === undefined ? {} : { approvedPlan: progress.plan }),
      ...(settings.planSchema === undefined ? {} : { planSchema: settings.planSchema }),
      ...(progress.planValue === undefined ? {} : { approvedPlanValue: progress.planValue.encoded }),
      ...(progress.resumeToken === undefined ? {} : { resumeToken: progress.resumeToken }),
      ...(outcome === undefined ? {} : { outcome }),
      // Until the turn it was saved in goes on, a checkpoint of a run resumed in the middle of one says so.
      ...(progress.continueTurn ? { inTurn: true } : {}),
      ...(progress.awaitingApproval ? { awaitingApproval: true } : {}),
      ...(progress.followUps === undefined ? {} : { pendingFollowUps: progress.followUps }),
      ...(agentState === undefined || handedOff === undefined
        ? {}
        : { handedOff: { agent: handedOff, runId: agentState.runId } }),
      ...(agentState === undefined ? {} : { agentState })
    })
  })
}

/** An event of the run, stamped with its id, act turn and time. */
const emit = <R, RW, P, A>(live: Live<R, RW, P, A>, event: AgentEvent.Input): Effect.Effect<void> => {
  const onEvent = live.options.onEvent
  if (onEvent === undefined) return Effect.void
  return Effect.flatMap(Clock.currentTimeMillis, (timestamp) => {
    const full: AgentEvent.AgentEvent = { ...event, runId: live.settings.runId, turn: live.progress.turns, timestamp }
    return onEvent(full)
  })
}

/** One of the supervised run's own events (a `Custom` event, see `SupervisorEvent`). */
const emitOwn = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  event: SupervisorEvent.SupervisorEvent
): Effect.Effect<void> => emit(live, SupervisorEvent.make(event))

/** An event of the worker's own run, as it is. */
const forward = <R, RW, P, A>(live: Live<R, RW, P, A>, event: AgentEvent.AgentEvent): Effect.Effect<void> =>
  live.options.onEvent === undefined ? Effect.void : live.options.onEvent(event)

// -----------------------------------------------------------------------------
// The ending
// -----------------------------------------------------------------------------

/** The state of the run: the agent worker's own, or the external worker's transcript. */
const stateOf = <R, RW, P, A>(live: Live<R, RW, P, A>): Effect.Effect<RunState.RunState> =>
  Effect.gen(function*() {
    const inner = live.worker.state === undefined ? undefined : yield* live.worker.state
    const base = inner ?? RunState.make({ runId: live.settings.runId, messages: live.progress.transcript })
    return { ...base, turn: live.progress.turns }
  })

/**
 * The run's result; what was queued and never delivered (steering an external worker cannot take, follow-ups
 * taken for a turn that never came, what came after the last turn of a run that did not converge) is in its state.
 */
const result = <R, RW, P, A>(live: Live<R, RW, P, A>, outcome: SupervisedOutcome): Effect.Effect<Result<P, A>> =>
  Effect.gen(function*() {
    const { progress, steering } = live
    const inner = yield* stateOf(live)
    const steered = steering === undefined ? [] : yield* steering.takeSteering
    const followUps = [...progress.followUps ?? [], ...steering === undefined ? [] : yield* steering.takeFollowUps]
    const state = steered.length === 0 && followUps.length === 0 ? inner : {
      ...inner,
      steering: [...inner.steering, ...steered],
      followUps: [...inner.followUps, ...followUps]
    }
    return {
      outcome,
      turns: progress.turns,
      planIterations: plansProposed(live),
      plan: progress.plan,
      planValue: progress.planValue?.value,
      output: progress.output,
      baseline: progress.baseline ?? [],
      checks: progress.last,
      reply: progress.reply,
      usage: progress.usage,
      state
    }
  })

/**
 * A supervised run's result as a run's (`RunState.RunResult`): its transcript, its usage, and its outcome as
 * the core's open union carries it (`SupervisorOutcome.toOutcome`). It is the result its `AgentEnd` carries.
 *
 * @since 0.1.0
 * @category running
 */
export const runResult = <P, A>(done: Result<P, A>): RunState.RunResult => ({
  messages: done.state.messages,
  state: done.state,
  outcome: SupervisorOutcome.toOutcome(done.outcome),
  usage: done.usage
})

/**
 * `AgentEnd`, always last: the ending and the result; an interrupted run's `Cancelled`; the `AgentError` it
 * failed with. A failure that is not an `AgentError` is said in words (a checkpoint that could not be saved; a
 * worker's failure, announced first by `WorkerFailed`).
 */
const announceEnd = <R, RW, P, A>(
  live: Live<R, RW, P, A>,
  exit: Exit.Exit<Result<P, A>, RunError>
): Effect.Effect<void> => {
  if (Exit.isSuccess(exit)) {
    const ended = runResult(exit.value)
    return emit(live, { _tag: "AgentEnd", outcome: ended.outcome, result: ended })
  }
  if (Cause.hasInterruptsOnly(exit.cause)) {
    return Effect.flatMap(result(live, Outcome.cancelled("interrupted")), (done) => {
      const ended = runResult(done)
      return emit(live, { _tag: "AgentEnd", outcome: ended.outcome, result: ended })
    })
  }
  const error = Cause.findErrorOption(exit.cause)
  if (error._tag === "None") return emit(live, { _tag: "AgentEnd", defect: Cause.pretty(exit.cause) })
  const failure = error.value
  if (Schema.is(AgentErrorSchema)(failure)) return emit(live, { _tag: "AgentEnd", error: failure })
  if (failure._tag === "WorkerError") {
    const { worker, reason, message, exitCode } = failure
    return Effect.andThen(
      emitOwn(live, { _tag: "WorkerFailed", worker, reason, message, ...(exitCode === undefined ? {} : { exitCode }) }),
      emit(live, { _tag: "AgentEnd", defect: `WorkerError: ${message}` })
    )
  }
  return emit(live, { _tag: "AgentEnd", defect: failure.message })
}
