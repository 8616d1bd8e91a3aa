/**
 * Deciding tool calls that need a human's (or a policy's) approval: tools
 * flagged with `effect/ai`'s `needsApproval`, or calls a `beforeToolCall`
 * hook sends for approval. A call waiting for approval does not block the
 * other calls of its batch; a denied call's handler never runs and the model
 * reads the reason.
 *
 * When a run has no `Approvals` service, calls that need approval are denied.
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
import { Context, Deferred, Effect, Layer } from "effect"

/**
 * A call waiting for a decision.
 *
 * @since 0.1.0
 * @category models
 */
export interface Request {
  readonly runId: string
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
 * @since 0.1.0
 * @category services
 */
export interface Service {
  readonly decide: (request: Request) => Effect.Effect<Decision>
  readonly decidePlan?: ((request: PlanRequest) => Effect.Effect<PlanDecision>) | undefined
  readonly decideTurn?: ((request: TurnRequest) => Effect.Effect<TurnDecision>) | undefined
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
 * @since 0.1.0
 * @category models
 */
export interface Interactive extends Service {
  readonly decidePlan: (request: PlanRequest) => Effect.Effect<PlanDecision>
  readonly decideTurn: (request: TurnRequest) => Effect.Effect<TurnDecision>
  /** The requests waiting for a decision, oldest first. */
  readonly pending: Effect.Effect<ReadonlyArray<Request>>
  /**
   * Approves a call by its `approvalId` (see {@link Request}): a sub-agent's
   * call and its parent's with the same call id are told apart. A call of
   * the top run is also answered by its plain call id. A decision for a call
   * not (yet) waiting is kept and answers the call when it asks (a restarted
   * run re-asks for its pending approvals, under the same ids). Returns
   * whether a waiting call was answered.
   */
  readonly approve: (approvalId: string) => Effect.Effect<boolean>
  /** Denies a call with a reason the model reads; see `approve`. */
  readonly deny: (approvalId: string, reason?: string) => Effect.Effect<boolean>
  /** The plan waiting for a decision, if any. */
  readonly pendingPlan: Effect.Effect<PlanRequest | undefined>
  /**
   * Decides the plan waiting (or the next one asked for, when none waits).
   * Returns whether a waiting plan was answered.
   */
  readonly decidePlanWith: (decision: PlanDecision) => Effect.Effect<boolean>
  /** The feedback waiting for the operator, if any. */
  readonly pendingTurn: Effect.Effect<TurnRequest | undefined>
  /** Decides the feedback waiting (or the next, when none waits); returns whether one waited. */
  readonly decideTurnWith: (decision: TurnDecision) => Effect.Effect<boolean>
}

/**
 * One decision at a time, asked by the run and answered through the handle:
 * answers given before their questions are kept, in order, for the next ones.
 */
const slot = <Q, D>() => {
  let waiting: { readonly request: Q; readonly decision: Deferred.Deferred<D> } | undefined
  const early: Array<D> = []
  return {
    ask: (request: Q): Effect.Effect<D> =>
      Effect.suspend(() => {
        if (early.length > 0) return Effect.succeed(early.shift()!)
        return Effect.flatMap(Deferred.make<D>(), (decision) => {
          const entry = { request, decision }
          waiting = entry
          return Deferred.await(decision).pipe(
            Effect.onExit(() => Effect.sync(() => void (waiting === entry && (waiting = undefined))))
          )
        })
      }),
    pending: Effect.sync(() => waiting?.request),
    answer: (decision: D): Effect.Effect<boolean> =>
      Effect.suspend(() => {
        const entry = waiting
        if (entry === undefined) {
          early.push(decision)
          return Effect.succeed(false)
        }
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
    const waiting = new Map<string, { readonly request: Request; readonly decision: Deferred.Deferred<Decision> }>()
    const early = new Map<string, Decision>()
    /** The call waiting under `id`: its approval id, else (a call of the top run) its call id. */
    const waitingAs = (id: string) => {
      const exact = waiting.get(id)
      if (exact !== undefined) return exact
      for (const entry of waiting.values()) if (topLevel(entry.request) && entry.request.toolCallId === id) return entry
      return undefined
    }
    /** The decision given before the call asked: under its approval id, else (top run) its call id. */
    const takeEarly = (request: Request) => {
      const key = early.has(request.approvalId)
        ? request.approvalId
        : topLevel(request) && early.has(request.toolCallId)
        ? request.toolCallId
        : undefined
      if (key === undefined) return undefined
      const decision = early.get(key)
      early.delete(key)
      return decision
    }
    const answer = (id: string, decision: Decision) =>
      Effect.suspend(() => {
        const entry = waitingAs(id)
        if (entry === undefined) {
          early.set(id, decision)
          return Effect.succeed(false)
        }
        waiting.delete(entry.request.approvalId)
        return Effect.as(Deferred.succeed(entry.decision, decision), true)
      })
    const plans = slot<PlanRequest, PlanDecision>()
    const turns = slot<TurnRequest, TurnDecision>()
    const handle: Interactive = {
      decidePlan: plans.ask,
      pendingPlan: plans.pending,
      decidePlanWith: plans.answer,
      decideTurn: turns.ask,
      pendingTurn: turns.pending,
      decideTurnWith: turns.answer,
      decide: (request) =>
        Effect.suspend(() => {
          const decided = takeEarly(request)
          if (decided !== undefined) return Effect.succeed(decided)
          return Effect.flatMap(Deferred.make<Decision>(), (decision) => {
            const entry = { request, decision }
            waiting.set(request.approvalId, entry)
            return Deferred.await(decision).pipe(
              Effect.onInterrupt(() =>
                Effect.sync(() => void (waiting.get(request.approvalId) === entry && waiting.delete(request.approvalId)))
              )
            )
          })
        }),
      pending: Effect.sync(() => Array.from(waiting.values(), (entry) => entry.request)),
      approve: (id) => answer(id, approved),
      deny: (id, reason = "denied by the user") => answer(id, denied(reason))
    }
    handles.add(handle)
    return handle
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

/** A call of the top run: its approval id has no `/` (an encoded id never has one). */
const topLevel = (request: Request): boolean => !request.approvalId.includes("/")

/**
 * A layer providing an approvals service.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (service: Service): Layer.Layer<Approvals> => Layer.succeed(Approvals, service)
