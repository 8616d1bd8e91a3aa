/**
 * Guardrails: checks on what goes into a run and what comes out of it, as
 * plugins. A check is an Effect that answers {@link pass} or {@link trip}
 * with a reason; it may need services (a model of its own, a moderation
 * API), which join the run's requirements.
 *
 * {@link input} checks every text that enters the run from outside:
 *
 * - a new run's prompt, before the first model call, in parallel with it:
 *   the model call is not held back, but it is interrupted when the check
 *   trips, no tool of the first turn runs before the check has passed, and
 *   the run does not end before it has;
 * - a continued run's messages that have not passed this guardrail yet (a
 *   new prompt the application appended, or a task that tripped before):
 *   before its first model call, which waits for the check;
 * - steering and follow-ups, whatever brought them (the `Steering` handle, a
 *   plugin's `steering` or `followUp` hook, a resumed session's queue, the
 *   agent server's `steer` and `follow_up`): before they are delivered (the
 *   `beforeDelivery` hook; the run waits for the check). Those it blocks never
 *   enter the transcript, no model sees them; `DeliveryBlocked` announces
 *   them, and they are neither delivered nor returned in the run's state.
 *
 * It saves, with the run's state, how far the transcript has passed it
 * (under its plugin name, `guardrail:<name>`: give two input guardrails of
 * one run different names), so a continued run checks only what is new.
 *
 * {@link output} checks the final answer before anyone sees it (the
 * `beforeAnswer` hook): each reply that calls no tool, and each `final_answer`
 * call with valid arguments of a run with a typed output. In a run with an
 * output guardrail, a reply's deltas (`MessageUpdate`, `OutputDelta`) and its
 * `MessageEnd` are held until the reply ends: a reply that calls tools is
 * then released at once, an answer once it has passed. So streaming is per
 * reply, not per token, in such a run (a released reply comes as one delta
 * per content part); a run without one streams each token as it comes. A
 * trip withholds the answer from everyone: from the stream of
 * `Agent.runStream`, every plugin's `observe` and `onEvent` (trajectories,
 * the agent server's event log and its SSE clients, the command's view), the
 * transcript, the run's state and its checkpoints, and the result the
 * application gets. A reply that says it was withheld (and why) takes its
 * place, with the same usage; its tool calls never run. Only `check` sees
 * the blocked answer: keep it there if the application needs it, and keep
 * it out of the reason, which every consumer sees.
 *
 * A trip ends the run `GuardrailTripped { guardrail, reason, phase }`, after
 * a `GuardTripped` event (`guard: "guardrail:<name>"`), with a valid
 * transcript (an interrupted reply is kept as it stopped, without its
 * calls).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Agent, Guardrail } from "effect-agent"
 *
 * const noSecrets = Guardrail.input(({ text }) =>
 *   Effect.succeed(text.includes("password") ? Guardrail.trip("the prompt holds a password") : Guardrail.pass),
 *   { name: "no-secrets" }
 * )
 * const run = Agent.run({ prompt: "Summarise the report", plugins: [noSecrets] })
 * ```
 *
 * @since 0.1.0
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import { InvalidPluginState } from "./AgentError.ts"
import * as Hooks from "./Hooks.ts"
import * as Message from "./Message.ts"
import * as Outcome from "./Outcome.ts"

/**
 * What a check answers.
 *
 * @since 0.1.0
 * @category models
 */
export type Verdict =
  | { readonly _tag: "Pass" }
  | { readonly _tag: "Trip"; readonly reason: string }

/**
 * Let it through.
 *
 * @since 0.1.0
 * @category constructors
 */
export const pass: Verdict = { _tag: "Pass" }

/**
 * Stop the run, saying why.
 *
 * @since 0.1.0
 * @category constructors
 */
export const trip = (reason: string): Verdict => ({ _tag: "Trip", reason })

/**
 * What an input guardrail checks: messages that enter the run from outside
 * (`source`: the run's opening messages, steering or follow-ups), and the
 * text of their user messages.
 *
 * @since 0.1.0
 * @category models
 */
export interface Prompt {
  readonly messages: ReadonlyArray<Message.Message>
  readonly text: string
  readonly source: "prompt" | "steering" | "followUp"
}

/**
 * What an output guardrail checks: the final answer. For a run with a typed
 * output (`Agent.run({ output })`), a `final_answer` call with valid
 * arguments: `output` holds them as the model sent them (their JSON form),
 * and `text` their JSON text; else a reply that calls no tool, and its text.
 *
 * @since 0.1.0
 * @category models
 */
export type Answer = Hooks.Answer

/**
 * A guardrail's settings.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Names the guardrail in the outcome and the event (`"input"` or `"output"` by default). */
  readonly name?: string | undefined
}

const proceeding: Effect.Effect<Hooks.Check> = Effect.succeed(Hooks.proceed)
const allowing: Effect.Effect<Hooks.BeforeToolCall> = Effect.succeed(Hooks.allow)

/** Announces a trip and gives its outcome. */
const tripped = (ctx: Hooks.Context, name: string, reason: string, phase: "input" | "output") =>
  Effect.as(
    ctx.emit({ _tag: "GuardTripped", guard: `guardrail:${name}`, action: "stop", detail: reason, figures: {} }),
    Outcome.guardrailTripped(name, reason, phase)
  )

const userText = (messages: ReadonlyArray<Message.Message>): string =>
  messages.filter((message) => message.role === "user").map(Message.textOf).join("\n")

const hasUserMessage = (messages: ReadonlyArray<Message.Message>): boolean =>
  messages.some((message) => message.role === "user")

/** What an input guardrail saves: the transcript before `checked` has passed it. */
const isSaved = (u: unknown): u is { readonly checked: number } =>
  typeof u === "object" && u !== null && "checked" in u && Number.isSafeInteger(u.checked)

/**
 * A guardrail on every text that enters the run from outside: the prompt (in
 * parallel with the first model call of a new run), a continued run's
 * messages that have not passed it, steering and follow-ups (before they
 * are delivered). See the module documentation.
 *
 * @since 0.1.0
 * @category constructors
 */
export const input = <R = never>(
  check: (prompt: Prompt, info: Hooks.RunInfo) => Effect.Effect<Verdict, never, R>,
  options: Options = {}
): Hooks.PluginInput<R> =>
  Effect.sync(() => {
    const name = options.name ?? "input"
    const pluginName = `guardrail:${name}`
    /** The messages before this index had passed this guardrail when the run started (from its saved state). */
    let checked = 0
    /** Where the run's opening messages end: the transcript's length when this guardrail first saw it. */
    let opening: number | undefined
    /** The transcript's length when a hook last saw it. */
    let seen = 0
    /** Whether the opening check is started (or there was nothing to check). */
    let started = false
    /** The verdict of an opening check that runs beside the model call; `undefined` when none does. */
    let verdict: Deferred.Deferred<Verdict> | undefined
    /** Whether the opening messages have passed: from then on the whole transcript has. */
    let passed = false
    const see = (ctx: Hooks.RunInfo) => {
      opening ??= ctx.messages.length
      seen = ctx.messages.length
    }
    const stopWith = (ctx: Hooks.Context, reason: string) =>
      Effect.map(tripped(ctx, name, reason, "input"), Hooks.stop)
    /** The opening check beside the model call, on a fiber of the run's: interrupting the run interrupts it. */
    const startBeside = (ctx: Hooks.Context, prompt: Prompt) =>
      Effect.gen(function*() {
        const stop = yield* ctx.stopper
        const done = Deferred.makeUnsafe<Verdict>()
        verdict = done
        const checkedPrompt = Effect.tap(check(prompt, ctx), (answer) =>
          answer._tag === "Pass"
            ? Effect.sync(() => void (passed = true))
            : Effect.flatMap(tripped(ctx, name, answer.reason, "input"), (outcome) => stop(outcome, answer.reason)))
        yield* Effect.forkChild(Effect.onExit(checkedPrompt, (exit) => Deferred.done(done, exit)))
        return Hooks.proceed
      })
    /** The opening messages this guardrail has not passed yet, checked before the run's first model call. */
    const opened = (ctx: Hooks.Context): Effect.Effect<Hooks.Check, never, R> => {
      started = true
      const messages = ctx.messages.slice(checked, opening)
      if (!hasUserMessage(messages)) {
        passed = true
        return proceeding
      }
      const prompt: Prompt = { messages, text: userText(messages), source: "prompt" }
      // A new run's prompt is checked beside its first model call; anything else before the call.
      if (ctx.turn === 0) return startBeside(ctx, prompt)
      return Effect.flatMap(check(prompt, ctx), (answer) => {
        if (answer._tag === "Trip") return stopWith(ctx, answer.reason)
        passed = true
        return proceeding
      })
    }
    /** Waits for the verdict of a check beside the model call (at once when there is none, or it passed). */
    const waitFor = <A>(onPass: Effect.Effect<A>, onTrip: (reason: string) => Effect.Effect<A>) =>
      verdict === undefined || passed ? onPass : Effect.flatMap(Deferred.await(verdict), (answer) => {
        if (answer._tag === "Pass") return onPass
        return onTrip(answer.reason)
      })
    const plugin: Hooks.Plugin<R> = {
      name: pluginName,
      beforeModelCall: (ctx) => {
        see(ctx)
        return started ? proceeding : opened(ctx)
      },
      beforeDelivery: (delivery, ctx) => {
        see(ctx)
        const prompt: Prompt = { messages: delivery.messages, text: userText(delivery.messages), source: delivery.kind }
        return Effect.flatMap(check(prompt, ctx), (answer) =>
          answer._tag === "Pass" ? proceeding : stopWith(ctx, answer.reason))
      },
      beforeToolCall: () => waitFor(allowing, (reason) => Effect.succeed(Hooks.block(`guardrail ${name}: ${reason}`))),
      afterTurn: (_turn, ctx) => {
        see(ctx)
        return waitFor(
          proceeding,
          (reason) => Effect.succeed(Hooks.stop(Outcome.guardrailTripped(name, reason, "input")))
        )
      },
      state: {
        // Once the opening messages passed, all the transcript has: the rest entered through `beforeDelivery`.
        save: Effect.sync(() => {
          const upTo = passed ? seen : checked
          return upTo === 0 ? undefined : { checked: upTo }
        }),
        restore: (saved, info) =>
          isSaved(saved) && saved.checked >= 0 && saved.checked <= info.messages.length
            ? Effect.sync(() => void (checked = saved.checked))
            : Effect.fail(
              new InvalidPluginState({
                plugin: pluginName,
                reason: `expected { checked: n } with n from 0 to ${info.messages.length}, got ${JSON.stringify(saved)}`
              })
            )
      }
    }
    return plugin
  })

/**
 * A guardrail on the final answer: `check` runs on each reply that calls no
 * tool, and on each `final_answer` call with valid arguments, when the reply
 * ends and before anyone sees it; a trip withholds the answer and ends the
 * run (see the module documentation).
 *
 * @since 0.1.0
 * @category constructors
 */
export const output = <R = never>(
  check: (answer: Answer, info: Hooks.RunInfo) => Effect.Effect<Verdict, never, R>,
  options: Options = {}
): Hooks.Plugin<R> => {
  const name = options.name ?? "output"
  return {
    name: `guardrail:${name}`,
    beforeAnswer: (answer, ctx) =>
      Effect.flatMap(check(answer, ctx), (verdict) =>
        verdict._tag === "Pass" ? proceeding : Effect.map(tripped(ctx, name, verdict.reason, "output"), Hooks.stop))
  }
}
