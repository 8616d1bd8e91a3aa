/**
 * How hooks and the outside world steer a run between model calls: the
 * control hooks (`beforeModelCall`, `afterTurn`) and their decisions, the
 * `transformContext` hooks that shape each request, and the steering and
 * follow-up messages that enter the run.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import type * as Outcome from "../Outcome.ts"
import * as Output from "../Output.ts"
import type * as Steering from "../Steering.ts"
import * as Events from "./events.ts"
import type * as LiveRun from "./liveRun.ts"
import * as Step from "./step.ts"
import * as Transcript from "./transcript.ts"

// -----------------------------------------------------------------------------
// Control hooks
// -----------------------------------------------------------------------------

/**
 * One control hook of a plugin (its `beforeModelCall` or `afterTurn`, with
 * the arguments bound); `undefined` when the plugin has none.
 *
 * @internal
 */
export type ControlHook<R> = (plugin: Hooks.Plugin<R>) => Effect.Effect<Hooks.Control, never, R> | undefined

type ControlRun<R> = LiveRun.Uses<R, "transcript" | "events" | "progress" | "output">

/** Whether a hook answered with a finished `Proceed`. */
const isProceeding = (effect: Effect.Effect<Hooks.Control, never, unknown>): boolean =>
  Step.isSucceeded(effect) && effect.value._tag === "Proceed"

/**
 * Runs a control hook of each plugin in order, applying each decision before
 * the next hook runs: `Inject` appends its messages, `WrapUp` asks the model
 * to finish (once per run), and the first `Stop` ends the run with its
 * outcome (the hooks after it do not run). Hooks that answer with a finished
 * `Proceed` (the built-in guards do on most turns) are read without a fiber
 * step; when all do, the step is settled at once.
 *
 * @internal
 */
export const consult = <R>(
  run: ControlRun<R>,
  plugins: ReadonlyArray<Hooks.Plugin<R>>,
  hook: ControlHook<R>
): Step.Step<Outcome.Outcome | undefined, never, R> => {
  for (let i = 0; i < plugins.length; i++) {
    const effect = hook(plugins[i]!)
    if (effect === undefined || isProceeding(effect)) continue
    return consultFrom(run, plugins, hook, i, effect)
  }
  return Step.done
}

function* consultFrom<R>(
  run: ControlRun<R>,
  plugins: ReadonlyArray<Hooks.Plugin<R>>,
  hook: ControlHook<R>,
  start: number,
  first: Effect.Effect<Hooks.Control, never, R>
) {
  for (let i = start; i < plugins.length; i++) {
    const effect = i === start ? first : hook(plugins[i]!)
    if (effect === undefined || isProceeding(effect)) continue
    const decision = yield* effect
    switch (decision._tag) {
      case "Stop":
        return decision.outcome
      case "Inject":
        yield* appendAll(run, decision.messages)
        break
      case "WrapUp":
        yield* wrapUp(run, decision)
        break
    }
  }
  return undefined
}

/** Appends messages, each with its `MessageEnd`. */
function* appendAll<R>(run: ControlRun<R>, messages: ReadonlyArray<Message.Message>) {
  for (const message of messages) {
    Transcript.append(run.transcript, message)
    yield* Events.emit(run.events, { _tag: "MessageEnd", message })
  }
}

/**
 * The one-shot wrap-up request: `WrapUpRequested`, then the request as a
 * system message. A run with a typed output asks for the final answer
 * through its tool.
 */
function* wrapUp<R>(run: ControlRun<R>, decision: Extract<Hooks.Control, { readonly _tag: "WrapUp" }>) {
  if (run.progress.wrapUpRequested) return
  run.progress.wrapUpRequested = true
  const message = run.output === undefined
    ? decision.message
    : `${decision.message}\n\n${run.output.native === undefined ? Output.wrapUpNote : Output.nativeWrapUpNote}`
  yield* Events.emit(run.events, { _tag: "WrapUpRequested", source: decision.source, message })
  yield* appendAll(run, [Message.system(message)])
}

// -----------------------------------------------------------------------------
// The request
// -----------------------------------------------------------------------------

/**
 * The request for the next model call as the `transformContext` hooks shape
 * it, in order, each given the previous one's messages (the transcript itself
 * never changes). A hook that changes the messages is reported with
 * `ContextTransformed`. (Without such hooks the request is
 * `Transcript.request`.)
 *
 * @internal
 */
export const transformedRequest = Effect.fnUntraced(function*<R>(
  run: LiveRun.Uses<R, "env" | "transcript" | "events" | "context">
) {
  const original = run.transcript.messages
  let messages: ReadonlyArray<Message.Message> = original
  for (const plugin of run.env.hooks.transformContext) {
    if (plugin.transformContext === undefined) continue
    const out = yield* plugin.transformContext(messages, run.context)
    const next = "messages" in out ? out.messages : out
    if (next === messages) continue
    const counts = { plugin: plugin.name, messagesBefore: messages.length, messagesAfter: next.length }
    yield* Events.emit(
      run.events,
      "messages" in out
        ? { _tag: "ContextTransformed", ...counts, tokensBefore: out.tokensBefore, tokensAfter: out.tokensAfter }
        : { _tag: "ContextTransformed", ...counts }
    )
    messages = next
  }
  return messages === original ? Transcript.request(run.transcript) : Transcript.requestOf(run.transcript, messages)
})

// -----------------------------------------------------------------------------
// Steering and follow-ups
// -----------------------------------------------------------------------------

type Kind = "steering" | "followUp"

type InboxRun<R> = LiveRun.Uses<R, "env" | "inbox" | "context">

const nothing: Effect.Effect<ReadonlyArray<Message.Message>> = Effect.succeed([])

/**
 * What is waiting of one kind, to deliver next: from the `Steering` handle
 * and the plugins' `steering` / `followUp` hooks, into the inbox; then the
 * first of the inbox by the handle's delivery mode (all at once, or one at a
 * time). They stay in the inbox until {@link deliver} takes them out, in the
 * same step as it appends them: a run stopped in between (an interruption
 * comes between two steps) returns them undelivered in its state.
 *
 * @internal
 */
export const poll = <R>(run: InboxRun<R>, kind: Kind): Effect.Effect<ReadonlyArray<Message.Message>, never, R> => {
  const queue = kind === "steering" ? run.inbox.steering : run.inbox.followUps
  if (run.env.steering === undefined && run.env.hooks[kind].length === 0 && queue.length === 0) return nothing
  return pollNow(run, kind, queue)
}

const pollNow = Effect.fnUntraced(function*<R>(run: InboxRun<R>, kind: Kind, queue: Array<Message.Message>) {
  const { steering } = run.env
  const mode = steering === undefined ? "all" : kind === "steering" ? steering.steeringMode : steering.followUpMode
  // One at a time, the handle's messages stay in it (counted against its bound) until the inbox is empty.
  if (steering !== undefined && (mode === "all" || queue.length === 0)) {
    yield* into(queue, kind === "steering" ? steering.takeSteering : steering.takeFollowUps)
  }
  for (const plugin of run.env.hooks[kind]) {
    const hook = kind === "steering" ? plugin.steering : plugin.followUp
    if (hook !== undefined) queue.push(...yield* hook(run.context))
  }
  if (queue.length === 0) return []
  return next(queue, mode)
})

/**
 * Moves what the `Steering` handle gives into the inbox as one uninterruptible step: a message the handle gave
 * up is in the inbox, and a run stopped then returns it (invariant 3: a message given to `steer` or `followUp`
 * is delivered, returned or saved, never dropped). A handle's take is quick (the library's is synchronous);
 * a plugin's `steering` hook, which may take its time, stays interruptible. A handle whose take may wait (the
 * durable session's is an activity) makes it interruptible itself, when interrupting it loses nothing.
 */
const into = (
  queue: Array<Message.Message>,
  take: Effect.Effect<ReadonlyArray<Message.Message>>
): Effect.Effect<void> => Effect.uninterruptible(Effect.map(take, (taken) => void queue.push(...taken)))

const next = (queue: Array<Message.Message>, mode: Steering.DeliveryMode): ReadonlyArray<Message.Message> =>
  mode === "all" ? queue.slice() : queue.slice(0, 1)

/**
 * Delivers the messages {@link poll} found, the first of the inbox: the
 * `beforeDelivery` hooks check them first, in order; when all proceed, they
 * leave the inbox and are appended to the transcript in one step, and are
 * announced with `SteeringDelivered` or `FollowUpDelivered`. When one stops,
 * they leave the inbox and never enter the transcript: `DeliveryBlocked`
 * announces them, and the step answers the hook's outcome, which ends the
 * run (`undefined`: delivered).
 *
 * @internal
 */
export const deliver = <R>(
  run: LiveRun.Uses<R, "env" | "inbox" | "transcript" | "events" | "context">,
  kind: Kind,
  messages: ReadonlyArray<Message.Message>
): Step.Step<Outcome.Outcome | undefined, never, R> =>
  messages.length === 0 ? Step.done : deliverNow(run, kind, messages)

function* deliverNow<R>(
  run: LiveRun.Uses<R, "env" | "inbox" | "transcript" | "events" | "context">,
  kind: Kind,
  messages: ReadonlyArray<Message.Message>
) {
  const queue = kind === "steering" ? run.inbox.steering : run.inbox.followUps
  const checks = run.env.hooks.beforeDelivery
  if (checks.length > 0) {
    const delivery: Hooks.Delivery = { kind, messages }
    for (const plugin of checks) {
      const decision = yield* plugin.beforeDelivery!(delivery, run.context)
      if (decision._tag === "Proceed") continue
      queue.splice(0, messages.length)
      yield* Events.emit(run.events, { _tag: "DeliveryBlocked", kind, messages, plugin: plugin.name })
      return decision.outcome
    }
  }
  queue.splice(0, messages.length)
  Transcript.appendAll(run.transcript, messages)
  yield* Events.emit(run.events, { _tag: kind === "steering" ? "SteeringDelivered" : "FollowUpDelivered", messages })
  return undefined
}

/**
 * Moves what is still queued in the `Steering` handle into the inbox, so a
 * run that ends returns it undelivered in its state: nothing is dropped.
 *
 * @internal
 */
export const drain = <R>(run: LiveRun.Uses<R, "env" | "inbox">): Effect.Effect<void> => {
  const { steering } = run.env
  return steering === undefined ? Effect.void : Effect.flatMap(
    Effect.all([steering.takeSteering, steering.takeFollowUps]),
    ([steeringMessages, followUps]) =>
      Effect.sync(() => {
        run.inbox.steering.push(...steeringMessages)
        run.inbox.followUps.push(...followUps)
      })
  )
}
