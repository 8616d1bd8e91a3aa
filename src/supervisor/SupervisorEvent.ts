/**
 * The events a supervised run adds to those of its worker's runs. They are
 * not in the core's union: each is carried as one `Custom` event of kind
 * {@link kind} (see `AgentEvent.custom`), its payload one of the tagged
 * structs below, so they reach every observer, round-trip through JSON and
 * trajectories, and a reader that does not know them keeps them as they are.
 *
 * - `WorkerTurnStart` / `WorkerTurnEnd`: one worker turn, plan or act (the
 *   end with the turn's `usage`).
 * - `SupervisedBudget`: after each worker turn, plan or act (also one a cancel
 *   or the wall clock cut short), the supervised run's running totals (act
 *   turns, plan iterations, usage, time) and its own limits; plan turns
 *   report the act turns so far (0 before the act phase). The last one holds
 *   the totals the run ends with (`Supervisor.Result`'s `turns` and
 *   `usage`). Our own loop's runs still emit their own `BudgetSnapshot`
 *   (the core's, with the inner limits) within the turn.
 * - `CheckStarted` / `CheckResult`: a check of the baseline or after a turn.
 * - `PlanProposed` / `PlanRevised` / `PlanApproved` / `PlanRejected`: the plan
 *   phase; `PlanProposed` carries the typed plan's JSON form as `value` when
 *   the run asked for one (`planOutput`).
 * - `TurnApprovalRequested`: the feedback waits for the operator.
 * - `FeedbackSent`: the failing checks went back to the worker.
 * - `WorkerFailed`: the worker's turn failed (`Worker.WorkerError`): the run
 *   fails with it, and its `AgentEnd` says so in words.
 *
 * Read them with {@link of} (the supervisor's event an event carries, with
 * that event's run id, turn and time) or {@link tagOf}.
 *
 * @example
 * ```ts
 * import { SupervisorEvent } from "effect-agent/supervisor"
 * import type { AgentEvent } from "effect-agent"
 *
 * const event: AgentEvent.AgentEvent = {
 *   ...SupervisorEvent.make({ _tag: "FeedbackSent", feedback: "fix it", failing: ["tests"] }),
 *   runId: "r",
 *   turn: 2,
 *   timestamp: 0
 * }
 * console.log(event._tag, SupervisorEvent.tagOf(event), SupervisorEvent.of(event)?.turn)
 * // Output: Custom FeedbackSent 2
 * ```
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as AgentEvent from "../AgentEvent.ts"
import * as Message from "../Message.ts"
import * as Check from "./Check.ts"

const Phase = Schema.Literals(["plan", "act"])

/**
 * The supervised run's own events (without the run id, turn and time every
 * event carries: the `Custom` event that carries one has them).
 *
 * @since 0.1.0
 * @category schemas
 */
export const SupervisorEvent = Schema.TaggedUnion({
  WorkerTurnStart: { worker: Schema.String, phase: Phase, message: Schema.String },
  WorkerTurnEnd: { worker: Schema.String, phase: Phase, text: Schema.String, usage: Message.Usage },
  SupervisedBudget: {
    phase: Phase,
    /** Act turns started so far (the one just run included). */
    turns: Schema.Finite,
    /** Plans proposed so far (0 in a run without a plan phase). */
    planIterations: Schema.Finite,
    /** What the run has used, plan and act turns alike. */
    usage: Message.Usage,
    /** Time since the run started (a resumed run's included). */
    elapsedMs: Schema.Finite,
    /** The supervised run's limits (`null`: none): the act turn cap, tokens, US dollars, wall clock in ms. */
    limits: Schema.Struct({
      turns: Schema.Finite,
      tokens: Schema.NullOr(Schema.Finite),
      costUsd: Schema.NullOr(Schema.Finite),
      wallClock: Schema.NullOr(Schema.Finite)
    })
  },
  WorkerFailed: {
    worker: Schema.String,
    reason: Schema.Literals(["exit", "eof", "decode", "spawn", "timeout"]),
    message: Schema.String,
    exitCode: Schema.optionalKey(Schema.Finite)
  },
  CheckStarted: { check: Schema.String, role: Check.Role, baseline: Schema.Boolean },
  CheckResult: { ...Check.CheckResult.fields, baseline: Schema.Boolean },
  PlanProposed: {
    plan: Schema.String,
    iteration: Schema.Finite,
    /** The typed plan in its JSON form (encoded with the plan's Schema), when the run asked for one. */
    value: Schema.optionalKey(Schema.Unknown)
  },
  PlanRevised: { iteration: Schema.Finite, notes: Schema.String },
  PlanApproved: { iteration: Schema.Finite, plan: Schema.String },
  PlanRejected: { iteration: Schema.Finite, notes: Schema.String },
  TurnApprovalRequested: { feedback: Schema.String },
  FeedbackSent: { feedback: Schema.String, failing: Schema.Array(Schema.String) }
})
/**
 * @since 0.1.0
 * @category models
 */
export type SupervisorEvent = typeof SupervisorEvent.Type

/**
 * The tags of the supervised run's events.
 *
 * @since 0.1.0
 * @category models
 */
export type Tag = SupervisorEvent["_tag"]

/**
 * A supervised run's event with the run id, turn (the act turn) and time of
 * the event that carried it.
 *
 * @since 0.1.0
 * @category models
 */
export type Stamped = SupervisorEvent & { readonly runId: string; readonly turn: number; readonly timestamp: number }

/**
 * The stamped event with a given tag.
 *
 * @since 0.1.0
 * @category models
 */
export type Of<T extends Tag> = Extract<Stamped, { readonly _tag: T }>

/**
 * The kind of the `Custom` events that carry them.
 *
 * @since 0.1.0
 * @category constants
 */
export const kind = "effect-agent/supervisor"

/**
 * The custom event definition (`AgentEvent.custom`) of the supervised run's
 * events.
 *
 * @since 0.1.0
 * @category constants
 */
export const Definition: AgentEvent.CustomEvent<SupervisorEvent> = AgentEvent.custom(kind, SupervisorEvent)

/**
 * The event that carries a supervised run's event (without the run id, turn
 * and time, which the supervisor stamps).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (event: SupervisorEvent): AgentEvent.Input => Definition.make(event)

/**
 * The supervised run's event an event carries, stamped with its run id,
 * turn and time; `undefined` for any other event.
 *
 * @since 0.1.0
 * @category conversions
 */
export const of = (event: AgentEvent.AgentEvent): Stamped | undefined => {
  if (!Definition.is(event)) return undefined
  const payload = Option.getOrUndefined(Definition.payload(event))
  return payload === undefined
    ? undefined
    : { ...payload, runId: event.runId, turn: event.turn, timestamp: event.timestamp }
}

/**
 * The supervised run's events of a given tag among events.
 *
 * @since 0.1.0
 * @category conversions
 */
export const ofTag = <T extends Tag>(events: ReadonlyArray<AgentEvent.AgentEvent>, tag: T): Array<Of<T>> => {
  const isTag = (own: Stamped | undefined): own is Of<T> => own?._tag === tag
  const found: Array<Of<T>> = []
  for (const event of events) {
    const own = of(event)
    if (isTag(own)) found.push(own)
  }
  return found
}

/**
 * The tag of an event: its supervised run's tag when it carries one (`CheckResult`), its own otherwise.
 *
 * @since 0.1.0
 * @category conversions
 */
export const tagOf = (event: AgentEvent.AgentEvent): AgentEvent.Tag | Tag => of(event)?._tag ?? event._tag
