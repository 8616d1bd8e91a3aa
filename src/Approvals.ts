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
 *   //   yield* approvals.approve(toolCallId)   or   approvals.deny(toolCallId, "not today")
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
 * The approvals service shape.
 *
 * @since 0.1.0
 * @category services
 */
export interface Service {
  readonly decide: (request: Request) => Effect.Effect<Decision>
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
  /** The requests waiting for a decision, oldest first. */
  readonly pending: Effect.Effect<ReadonlyArray<Request>>
  /**
   * Approves a call. A decision for a call not (yet) waiting is kept and
   * answers the call when it asks (a restarted run re-asks for its pending
   * approvals). Returns whether a waiting call was answered.
   */
  readonly approve: (toolCallId: string) => Effect.Effect<boolean>
  /** Denies a call with a reason the model reads; see `approve`. */
  readonly deny: (toolCallId: string, reason?: string) => Effect.Effect<boolean>
}

/**
 * A new interactive approvals handle.
 *
 * @since 0.1.0
 * @category constructors
 */
export const interactive = (): Effect.Effect<Interactive> =>
  Effect.sync(() => {
    const waiting = new Map<string, { readonly request: Request; readonly decision: Deferred.Deferred<Decision> }>()
    const early = new Map<string, Decision>()
    const answer = (toolCallId: string, decision: Decision) =>
      Effect.suspend(() => {
        const entry = waiting.get(toolCallId)
        if (entry === undefined) {
          early.set(toolCallId, decision)
          return Effect.succeed(false)
        }
        waiting.delete(toolCallId)
        return Effect.as(Deferred.succeed(entry.decision, decision), true)
      })
    return {
      decide: (request) =>
        Effect.suspend(() => {
          const decided = early.get(request.toolCallId)
          if (decided !== undefined) {
            early.delete(request.toolCallId)
            return Effect.succeed(decided)
          }
          return Effect.flatMap(Deferred.make<Decision>(), (decision) => {
            waiting.set(request.toolCallId, { request, decision })
            return Deferred.await(decision).pipe(
              Effect.onInterrupt(() => Effect.sync(() => waiting.delete(request.toolCallId)))
            )
          })
        }),
      pending: Effect.sync(() => Array.from(waiting.values(), (entry) => entry.request)),
      approve: (toolCallId) => answer(toolCallId, approved),
      deny: (toolCallId, reason = "denied by the user") => answer(toolCallId, denied(reason))
    }
  })

/**
 * A layer providing an approvals service.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (service: Service): Layer.Layer<Approvals> => Layer.succeed(Approvals, service)
