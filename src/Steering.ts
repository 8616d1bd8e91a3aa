/**
 * Talking to a run while it runs. `steer` queues a message delivered before
 * the next model call (between tool batches, never in the middle of one);
 * `followUp` queues a message that restarts the loop when the model would
 * otherwise stop; `cancel` ends the run at once with `Cancelled`: the model
 * stream is aborted and running tools are interrupted and answered with
 * "cancelled" results, so the transcript stays valid. Each such result says
 * whether the call's handler had started (`details.started`): a call that
 * ran and was cut short may have taken effect (`outcome: "unknown"`).
 *
 * Messages not delivered when a run ends are returned in its state, never
 * dropped. One `Steering` serves one run at a time; cancelling is final for
 * that `Steering`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Agent, Steering } from "effect-agent"
 *
 * const program = Effect.gen(function*() {
 *   const steering = yield* Steering.make()
 *   yield* steering.steer("Use metric units.")
 *   return yield* Agent.run({ prompt: "Weather in Oslo?", steering })
 * })
 * ```
 *
 * @since 0.1.0
 */
import { Context, Deferred, Effect, Layer } from "effect"
import * as Message from "./Message.ts"

/**
 * How queued messages are delivered at each delivery point: `all` at once,
 * or `oneAtATime` (the rest wait for the next point).
 *
 * @since 0.1.0
 * @category models
 */
export type DeliveryMode = "all" | "oneAtATime"

/**
 * The steering service shape.
 *
 * @since 0.1.0
 * @category services
 */
export interface Service {
  /** Queues a message for delivery before the next model call. */
  readonly steer: (message: string | Message.Message) => Effect.Effect<void>
  /** Queues a message that restarts the run at its next natural stop. */
  readonly followUp: (message: string | Message.Message) => Effect.Effect<void>
  /** Ends the run at once with `Cancelled`. */
  readonly cancel: (reason?: string) => Effect.Effect<void>
  readonly steeringMode: DeliveryMode
  readonly followUpMode: DeliveryMode
  /** Takes every queued steering message (used by the loop). */
  readonly takeSteering: Effect.Effect<ReadonlyArray<Message.Message>>
  /** Takes every queued follow-up (used by the loop). */
  readonly takeFollowUps: Effect.Effect<ReadonlyArray<Message.Message>>
  /** Completes with the reason once the run is cancelled (used by the loop). */
  readonly cancelled: Deferred.Deferred<string>
}

/**
 * The steering service.
 *
 * @since 0.1.0
 * @category services
 */
export class Steering extends Context.Service<Steering, Service>()("effect-agent/Steering") {}

const toMessage = (message: string | Message.Message): Message.Message =>
  typeof message === "string" ? Message.user(message) : message

const takeAll = (queue: Array<Message.Message>): Effect.Effect<ReadonlyArray<Message.Message>> =>
  Effect.sync(() => queue.splice(0))

/**
 * A new steering handle.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: {
  readonly steeringMode?: DeliveryMode | undefined
  readonly followUpMode?: DeliveryMode | undefined
} = {}): Effect.Effect<Service> =>
  Effect.map(Deferred.make<string>(), (cancelled) => {
    const steering: Array<Message.Message> = []
    const followUps: Array<Message.Message> = []
    return {
      steer: (message) => Effect.sync(() => void steering.push(toMessage(message))),
      followUp: (message) => Effect.sync(() => void followUps.push(toMessage(message))),
      cancel: (reason = "cancelled") => Effect.asVoid(Deferred.succeed(cancelled, reason)),
      steeringMode: options.steeringMode ?? "all",
      followUpMode: options.followUpMode ?? "all",
      takeSteering: takeAll(steering),
      takeFollowUps: takeAll(followUps),
      cancelled
    }
  })

/**
 * A layer providing a new steering handle.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options?: Parameters<typeof make>[0]): Layer.Layer<Steering> =>
  Layer.effect(Steering, make(options))
