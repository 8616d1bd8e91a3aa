/**
 * Deciding tool calls that need a human's (or a policy's) approval: tools
 * flagged with `effect/ai`'s `needsApproval`, or calls a `beforeToolCall`
 * hook sends for approval. A call waiting for approval does not block the
 * other calls of its batch; a denied call's handler never runs and the model
 * reads the reason.
 *
 * When a run has no `Approvals` service, calls that need approval are denied.
 *
 * A decision given through an {@link Interactive} handle answers only the
 * question waiting now, named exactly (a call by its `approvalId`): one for
 * no waiting question is refused and never kept, so it cannot answer a
 * later call that happens to reuse the id.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Agent, Approvals } from "effect-agent"
 *
 * const program = Effect.gen(function*() {
 *   const approvals = yield* Approvals.interactive()
 *   // elsewhere, e.g. on an ApprovalRequested event:
 *   //   yield* approvals.approve(approvalId)   or   approvals.deny(approvalId, "not today")
 *   return yield* Agent.run({ prompt: "Deploy it" }).pipe(Effect.provideService(Approvals.Approvals, approvals))
 * })
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"

/**
 * A call waiting for a decision.
 *
 * @since 0.1.0
 * @category models
 */
export interface Request {
  /** The run that asks: a sub-agent's own run id for its calls. */
  readonly runId: string
  /** The turn of the run that asks (a sub-agent counts its own), when the run says. */
  readonly turn?: number | undefined
  readonly toolCallId: string
  /**
   * The id that answers the call ({@link Interactive}), unique across the run and its sub-agents: the ids of the
   * calls that run each sub-agent from the top run down, then the call's own, each URI-encoded and joined by `/`.
   * A call of the top run keeps its id (when it needs no encoding); the call `c1` of the sub-agent that the call
   * `c7` runs is `c7/c1`.
   */
  readonly approvalId: string
  readonly toolName: string
  readonly params: unknown
  /** Why approval is needed, when a hook said. */
  readonly reason?: string | undefined
}

/**
 * A decision: approved, or denied with a reason the model reads.
 *
 * @since 0.1.0
 * @category models
 */
export type Decision =
  | { readonly approved: true }
  | { readonly approved: false; readonly reason: string }

/**
 * @since 0.1.0
 * @category constructors
 */
export const approved: Decision = { approved: true }

/**
 * @since 0.1.0
 * @category constructors
 */
export const denied = (reason: string): Decision => ({ approved: false, reason })

/**
 * A supervised run's plan waiting for a decision (see `effect-agent/supervisor`).
 *
 * @since 0.1.0
 * @category plans and turns
 */
export interface PlanRequest {
  readonly runId: string
  /** The plan, as the worker wrote it. */
  readonly plan: string
  /** 1 for the first plan, then one more per refinement. */
  readonly iteration: number
  /** The typed plan (decoded with `planOutput`), when the supervised run asked for one. */
  readonly value?: unknown
}

/**
 * A decision on a plan: approve it (the act phase starts), refine it with
 * notes (the worker is asked for a revised plan, with the notes verbatim), or
 * reject it (the run ends `Rejected`).
 *
 * @since 0.1.0
 * @category plans and turns
 */
export type PlanDecision =
  | { readonly _tag: "Approve" }
  | { readonly _tag: "Refine"; readonly notes: string }
  | { readonly _tag: "Reject"; readonly notes: string }

/**
 * A supervised run's feedback waiting for the operator before it goes to
 * the worker (with `approveTurns`).
 *
 * @since 0.1.0
 * @category plans and turns
 */
export interface TurnRequest {
  readonly runId: string
  readonly turn: number
  readonly feedback: string
}

/**
 * A decision on a turn's feedback: send it, send the operator's text
 * instead, or interrupt the run (a session can resume it).
 *
 * @since 0.1.0
 * @category plans and turns
 */
export type TurnDecision =
  | { readonly _tag: "Approve" }
  | { readonly _tag: "Replace"; readonly feedback: string }
  | { readonly _tag: "Interrupt" }

/**
 * The approvals service shape. `decide` answers tool calls; a supervised run
 * also asks `decidePlan` and `decideTurn`, and approves on its own when they
 * are absent.
 *
 * A service whose answers come later from outside (a person, another process)
 * also has `open` (`openPlan`, `openTurn`): the run calls it instead of
 * `decide` *before* it announces the question (`ApprovalRequested`,
 * `PlanProposed`, `TurnApprovalRequested`), so the question is waiting by the
 * time anyone can see it, and an answer given as soon as the event is seen
 * finds it. It returns the wait for the answer; closing the scope withdraws
 * the question, answered or not. A policy that decides at once needs none.
 *
 * @since 0.1.0
 * @category services
 */
export interface Service {
  readonly decide: (request: Request) => Effect.Effect<Decision>
  readonly decidePlan?: ((request: PlanRequest) => Effect.Effect<PlanDecision>) | undefined
  readonly decideTurn?: ((request: TurnRequest) => Effect.Effect<TurnDecision>) | undefined
  readonly open?: ((request: Request) => Effect.Effect<Effect.Effect<Decision>, never, Scope.Scope>) | undefined
  readonly openPlan?:
    | ((request: PlanRequest) => Effect.Effect<Effect.Effect<PlanDecision>, never, Scope.Scope>)
    | undefined
  readonly openTurn?:
    | ((request: TurnRequest) => Effect.Effect<Effect.Effect<TurnDecision>, never, Scope.Scope>)
    | undefined
}

/**
 * The approvals service.
 *
 * @since 0.1.0
 * @category services
 */
export class Approvals extends Context.Service<Approvals, Service>()("effect-agent/Approvals") {}

/**
 * Approves every call.
 *
 * @since 0.1.0
 * @category constructors
 */
export const allowAll: Service = { decide: () => Effect.succeed(approved) }

/**
 * Denies every call.
 *
 * @since 0.1.0
 * @category constructors
 */
export const denyAll = (reason = "denied by policy"): Service => ({ decide: () => Effect.succeed(denied(reason)) })

/**
 * Decides each call with a function.
 *
 * @example
 * ```ts
 * import { Approvals } from "effect-agent"
 *
 * const onlyReads = Approvals.policy((request) =>
 *   request.toolName.startsWith("read") ? Approvals.approved : Approvals.denied("writes need a human")
 * )
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const policy = (decide: (request: Request) => Decision | Effect.Effect<Decision>): Service => ({
  decide: (request) => {
    const decision = decide(request)
    return Effect.isEffect(decision) ? decision : Effect.succeed(decision)
  }
})

/**
 * Approvals answered later through a handle.
 *
 * A decision answers only the question waiting now: a call by its exact
 * `approvalId` (the id its `ApprovalRequested` event and {@link pending}
 * give), the plan or the feedback waiting. A decision for nothing waiting
 * answers nothing and is not kept (the methods return `false`): a call that
 * asks later, even under the same id, waits for a decision of its own. A
 * restarted run asks again for the calls that were waiting, under the same
 * ids: answer them then.
 *
 * @since 0.1.0
 * @category models
 */
export interface Interactive extends Service {
  readonly decidePlan: (request: PlanRequest) => Effect.Effect<PlanDecision>
  readonly decideTurn: (request: TurnRequest) => Effect.Effect<TurnDecision>
  readonly open: (request: Request) => Effect.Effect<Effect.Effect<Decision>, never, Scope.Scope>
  readonly openPlan: (request: PlanRequest) => Effect.Effect<Effect.Effect<PlanDecision>, never, Scope.Scope>
  readonly openTurn: (request: TurnRequest) => Effect.Effect<Effect.Effect<TurnDecision>, never, Scope.Scope>
  /** The requests waiting for a decision, oldest first. */
  readonly pending: Effect.Effect<ReadonlyArray<Request>>
  /**
   * Approves the call waiting under this `approvalId` (see {@link Request}):
   * a sub-agent's call and its parent's with the same call id are told apart.
   * Returns whether a waiting call was answered; when none waits under the
   * id, nothing is answered and nothing kept.
   */
  readonly approve: (approvalId: string) => Effect.Effect<boolean>
  /** Denies the call waiting under this `approvalId`, with a reason the model reads; see `approve`. */
  readonly deny: (approvalId: string, reason?: string) => Effect.Effect<boolean>
  /** The plan waiting for a decision, if any. */
  readonly pendingPlan: Effect.Effect<PlanRequest | undefined>
  /** Decides the plan waiting; returns whether one waited (else nothing is decided or kept). */
  readonly decidePlanWith: (decision: PlanDecision) => Effect.Effect<boolean>
  /** The feedback waiting for the operator, if any. */
  readonly pendingTurn: Effect.Effect<TurnRequest | undefined>
  /** Decides the feedback waiting; returns whether one waited (else nothing is decided or kept). */
  readonly decideTurnWith: (decision: TurnDecision) => Effect.Effect<boolean>
}

/** A question waiting, and the answer it waits for. */
interface Waiting<Q, D> {
  readonly request: Q
  readonly decision: Deferred.Deferred<D>
}

/** A question answered as it is entered, without waiting. */
interface Answered<D> {
  readonly answered: D
}

/**
 * Asking questions answered through a handle: `enter` makes a question wait
 * (or answers it at once), `leave` takes it out if it still waits as `entry`.
 * Asked (`ask`), a question waits until it is answered or the asker is
 * interrupted; opened (`open`), until the scope closes.
 */
const asking = <Q, D>(
  enter: (request: Q) => Waiting<Q, D> | Answered<D>,
  leave: (entry: Waiting<Q, D>) => void
) => ({
  ask: (request: Q): Effect.Effect<D> =>
    Effect.suspend(() => {
      const entered = enter(request)
      if ("answered" in entered) return Effect.succeed(entered.answered)
      return Deferred.await(entered.decision).pipe(Effect.ensuring(Effect.sync(() => leave(entered))))
    }),
  open: (request: Q): Effect.Effect<Effect.Effect<D>, never, Scope.Scope> =>
    Effect.suspend(() => {
      const entered = enter(request)
      if ("answered" in entered) return Effect.succeed(Effect.succeed(entered.answered))
      return Effect.as(Effect.addFinalizer(() => Effect.sync(() => leave(entered))), Deferred.await(entered.decision))
    })
})

/**
 * One question at a time (a supervised run's plan, its feedback), asked by
 * the run and answered through the handle: an answer when none waits is
 * refused, not kept.
 */
const slot = <Q, D>() => {
  let waiting: Waiting<Q, D> | undefined
  const { ask, open } = asking<Q, D>(
    (request) => (waiting = { request, decision: Deferred.makeUnsafe<D>() }),
    (entry) => void (waiting === entry && (waiting = undefined))
  )
  return {
    ask,
    open,
    pending: Effect.sync(() => waiting?.request),
    answer: (decision: D): Effect.Effect<boolean> =>
      Effect.suspend(() => {
        const entry = waiting
        if (entry === undefined) return Effect.succeed(false)
        waiting = undefined
        return Effect.as(Deferred.succeed(entry.decision, decision), true)
      })
  }
}

/**
 * A new interactive approvals handle.
 *
 * @since 0.1.0
 * @category constructors
 */
export const interactive = (): Effect.Effect<Interactive> =>
  Effect.sync(() => {
    // By approval id, in the order the calls asked.
    const waiting = new Map<string, Waiting<Request, Decision>>()
    const calls = asking<Request, Decision>(
      (request) => {
        // Two calls waiting under one id (a provider that repeats an id in a batch) could not be told apart.
        if (waiting.has(request.approvalId)) return duplicate(request.approvalId)
        const entry = { request, decision: Deferred.makeUnsafe<Decision>() }
        waiting.set(request.approvalId, entry)
        return entry
      },
      (entry) => void (waiting.get(entry.request.approvalId) === entry && waiting.delete(entry.request.approvalId))
    )
    const answer = (id: string, decision: Decision) =>
      Effect.suspend(() => {
        const entry = waiting.get(id)
        if (entry === undefined) return Effect.succeed(false)
        waiting.delete(id)
        return Effect.as(Deferred.succeed(entry.decision, decision), true)
      })
    const plans = slot<PlanRequest, PlanDecision>()
    const turns = slot<TurnRequest, TurnDecision>()
    const handle: Interactive = {
      decide: calls.ask,
      open: calls.open,
      decidePlan: plans.ask,
      openPlan: plans.open,
      pendingPlan: plans.pending,
      decidePlanWith: plans.answer,
      decideTurn: turns.ask,
      openTurn: turns.open,
      pendingTurn: turns.pending,
      decideTurnWith: turns.answer,
      pending: Effect.sync(() => Array.from(waiting.values(), (entry) => entry.request)),
      approve: (id) => answer(id, approved),
      deny: (id, reason = "denied by the user") => answer(id, denied(reason))
    }
    handles.add(handle)
    return handle
  })

/** The answer to a call asking under an approval id another waiting call has. */
const duplicate = (approvalId: string): Answered<Decision> => ({
  answered: denied(`another call is waiting for approval under the same id (${approvalId}); call ids must be unique`)
})

/** The handles {@link interactive} made. */
const handles = new WeakSet<Service>()

/**
 * Whether `service` is a handle made by {@link interactive} (its decisions
 * come from this process's `approve` / `deny`), not a policy.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Approvals } from "effect-agent"
 *
 * const handle = Effect.runSync(Approvals.interactive())
 * console.log(Approvals.isInteractive(handle), Approvals.isInteractive(Approvals.allowAll))
 * // Output: true false
 * ```
 *
 * @since 0.1.0
 * @category guards
 */
export const isInteractive = (service: Service): service is Interactive => handles.has(service)

/**
 * A layer providing an approvals service.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (service: Service): Layer.Layer<Approvals> => Layer.succeed(Approvals, service)
