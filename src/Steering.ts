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
 * The queue is bounded (see {@link Limits}): what waits for delivery, steering
 * and follow-ups together, holds at most 100 messages and 4 MiB by default
 * (the UTF-8 size of their JSON). Past that, `steer` and `followUp` fail with
 * {@link SteeringFull} and queue nothing: whoever sends (a client, a script)
 * hears it, and a run's checkpoint, which holds the queue, stays small.
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
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
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
 * How much may wait for delivery in one `Steering`, steering and follow-ups
 * together: `messages`, and `bytes` (the UTF-8 size of the messages' JSON).
 *
 * @since 0.1.0
 * @category models
 */
export interface Limits {
  readonly messages: number
  readonly bytes: number
}

/**
 * The default {@link Limits}: 100 messages, 4 MiB.
 *
 * @since 0.1.0
 * @category models
 */
export const defaultLimits: Limits = { messages: 100, bytes: 4 * 1024 * 1024 }

/**
 * A message was refused: queued, it would put the `Steering` past its
 * {@link Limits}. `queued` and `bytes` are what waits already; nothing was
 * queued. It is accepted again once the run has taken what waits (at its
 * next delivery point).
 *
 * @since 0.1.0
 * @category errors
 */
export class SteeringFull extends Schema.TaggedError<SteeringFull>()("SteeringFull", {
  kind: Schema.Literals(["steer", "followUp"]),
  /** The messages waiting. */
  queued: Schema.Finite,
  /** Their size, in bytes. */
  bytes: Schema.Finite,
  /** The size of the message refused, in bytes. */
  size: Schema.Finite,
  limits: Schema.Struct({ messages: Schema.Finite, bytes: Schema.Finite })
}) {
  override get message(): string {
    return `the run's queue is full: ${this.queued} messages (${this.bytes} bytes) wait for delivery, and it ` +
      `holds at most ${this.limits.messages} messages or ${this.limits.bytes} bytes (this one: ${this.size} bytes)`
  }
}

/**
 * The steering service shape.
 *
 * @since 0.1.0
 * @category services
 */
export interface Service {
  /** Queues a message for delivery before the next model call; fails with {@link SteeringFull} past the bound. */
  readonly steer: (message: string | Message.Message) => Effect.Effect<void, SteeringFull>
  /** Queues a message that restarts the run at its next natural stop; fails with {@link SteeringFull} past the bound. */
  readonly followUp: (message: string | Message.Message) => Effect.Effect<void, SteeringFull>
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

const encoder = new TextEncoder()

/** A limit as given (`Infinity`: none), else the default. */
const bound = (given: number | undefined, otherwise: number): number =>
  given === undefined || Number.isNaN(given) ? otherwise : Math.max(0, given)

/**
 * A message's size as the {@link Limits} count it: the UTF-8 bytes of its
 * JSON. Every queue of steering and follow-ups measures with it (a run's, a
 * durable session's inbox).
 *
 * @example
 * ```ts
 * import { Message, Steering } from "effect-agent"
 *
 * console.log(Steering.sizeOf(Message.user("hi"))) // Output: 55
 * ```
 *
 * @since 0.1.0
 * @category limits
 */
export const sizeOf = (message: Message.Message): number => encoder.encode(JSON.stringify(message)).byteLength

/**
 * A new steering handle. `limits` bound what may wait for delivery (see
 * {@link Limits}; the defaults are {@link defaultLimits}).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Steering } from "effect-agent"
 *
 * const program = Effect.gen(function*() {
 *   const steering = yield* Steering.make({ limits: { messages: 1 } })
 *   yield* steering.steer("Use metric units.")
 *   const refused = yield* Effect.flip(steering.followUp("And tomorrow?"))
 *   console.log(refused._tag, refused.queued)
 * })
 * Effect.runSync(program) // Output: SteeringFull 1
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options: {
  readonly steeringMode?: DeliveryMode | undefined
  readonly followUpMode?: DeliveryMode | undefined
  readonly limits?: Partial<Limits> | undefined
} = {}): Effect.Effect<Service> =>
  Effect.map(Deferred.make<string>(), (cancelled) => {
    const limits: Limits = {
      messages: bound(options.limits?.messages, defaultLimits.messages),
      bytes: bound(options.limits?.bytes, defaultLimits.bytes)
    }
    const steering: Array<Message.Message> = []
    const followUps: Array<Message.Message> = []
    /** The size of what waits, in bytes (both queues). */
    let bytes = 0
    const sizes = new WeakMap<Message.Message, number>()
    const queue = (kind: SteeringFull["kind"], into: Array<Message.Message>) => (input: string | Message.Message) =>
      Effect.suspend(() => {
        const message = toMessage(input)
        const size = sizeOf(message)
        const queued = steering.length + followUps.length
        if (queued + 1 > limits.messages || bytes + size > limits.bytes) {
          return Effect.fail(new SteeringFull({ kind, queued, bytes, size, limits }))
        }
        into.push(message)
        sizes.set(message, size)
        bytes += size
        return Effect.void
      })
    const takeAll = (from: Array<Message.Message>): Effect.Effect<ReadonlyArray<Message.Message>> =>
      Effect.sync(() => {
        const taken = from.splice(0)
        for (const message of taken) bytes -= sizes.get(message) ?? 0
        return taken
      })
    return {
      steer: queue("steer", steering),
      followUp: queue("followUp", followUps),
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
