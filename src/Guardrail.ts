/**
 * Guardrails: checks on what goes into a run and what comes out of it, as
 * plugins. A check is an Effect that answers {@link pass} or {@link trip}
 * with a reason; it may need services (a model of its own, a moderation
 * API), which join the run's requirements.
 *
 * - {@link input} checks the prompt before the first model call, in
 *   parallel with it: the model call is not held back, but it is
 *   interrupted when the check trips, no tool of the first turn runs before
 *   the check has passed, and the run does not end before it has.
 * - {@link output} checks the final answer: each reply that calls no tool,
 *   or the typed output the run accepted.
 *
 * A trip ends the run `GuardrailTripped { guardrail, reason, phase }`, after
 * a `GuardTripped` event (`guard: "guardrail:<name>"`), with a valid
 * transcript (an interrupted reply is kept as it stopped, without its calls;
 * an answer that tripped stays in the transcript: the outcome says not to
 * use it).
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
import { Deferred, Effect } from "effect"
import * as Hooks from "./Hooks.ts"
import * as Message from "./Message.ts"
import * as Outcome from "./Outcome.ts"
import * as Output from "./Output.ts"

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
 * What an input guardrail checks: the messages the run starts from, and the
 * text of their user messages.
 *
 * @since 0.1.0
 * @category models
 */
export interface Prompt {
  readonly messages: ReadonlyArray<Message.Message>
  readonly text: string
}

/**
 * What an output guardrail checks: the final answer. For a run with a typed
 * output (`Agent.run({ output })`), the `final_answer` call the run accepted:
 * `output` holds its arguments as the model sent them (their JSON form), and
 * `text` their JSON text; else a reply that calls no tool, and its text.
 *
 * @since 0.1.0
 * @category models
 */
export interface Answer {
  readonly message: Message.AssistantMessage
  readonly text: string
  readonly output?: unknown
}

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

const proceeding: Effect.Effect<Hooks.Control> = Effect.succeed(Hooks.proceed)
const allowing: Effect.Effect<Hooks.BeforeToolCall> = Effect.succeed(Hooks.allow)

/** Announces a trip and gives its outcome. */
const tripped = (ctx: Hooks.Context, name: string, reason: string, phase: "input" | "output") =>
  Effect.as(
    ctx.emit({ _tag: "GuardTripped", guard: `guardrail:${name}`, action: "stop", detail: reason, figures: {} }),
    Outcome.guardrailTripped(name, reason, phase)
  )

const userText = (messages: ReadonlyArray<Message.Message>): string =>
  messages.filter((message) => message.role === "user").map(Message.textOf).join("\n")

/**
 * A guardrail on the prompt: `check` runs before the first model call of a
 * run that starts from a prompt (not of a continued run), in parallel with
 * that call (see the module documentation).
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
    /** The check's verdict, once it is started; `undefined` before, and for a continued run. */
    let verdict: Deferred.Deferred<Verdict> | undefined
    let passed = false
    const start = (ctx: Hooks.Context) =>
      Effect.gen(function*() {
        const stop = yield* ctx.stopper
        const done = Deferred.makeUnsafe<Verdict>()
        verdict = done
        const messages = ctx.messages.slice()
        const checked = Effect.tap(check({ messages, text: userText(messages) }, ctx), (answer) =>
          answer._tag === "Pass"
            ? Effect.void
            : Effect.flatMap(tripped(ctx, name, answer.reason, "input"), (outcome) => stop(outcome, answer.reason)))
        // Beside the model call, on a fiber of the run's: interrupting the run interrupts it.
        yield* Effect.forkChild(Effect.onExit(checked, (exit) => Deferred.done(done, exit)))
        return Hooks.proceed
      })
    /** Waits for the verdict (at once once it passed). */
    const waitFor = <A>(onPass: Effect.Effect<A>, onTrip: (reason: string) => Effect.Effect<A>) =>
      verdict === undefined || passed ? onPass : Effect.flatMap(Deferred.await(verdict), (answer) => {
        if (answer._tag === "Pass") {
          passed = true
          return onPass
        }
        return onTrip(answer.reason)
      })
    const plugin: Hooks.Plugin<R> = {
      name: `guardrail:${name}`,
      beforeModelCall: (ctx) => verdict === undefined && ctx.turn === 0 ? start(ctx) : proceeding,
      beforeToolCall: () => waitFor(allowing, (reason) => Effect.succeed(Hooks.block(`guardrail ${name}: ${reason}`))),
      afterTurn: () =>
        waitFor(proceeding, (reason) => Effect.succeed(Hooks.stop(Outcome.guardrailTripped(name, reason, "input"))))
    }
    return plugin
  })

/** The final answer of a turn, if it gave one: an accepted `final_answer` call, or a reply without calls. */
const finalAnswer = (turn: Hooks.Turn): Answer | undefined => {
  const calls = Message.toolCalls(turn.message)
  if (calls.length === 0) return { message: turn.message, text: Message.textOf(turn.message) }
  const accepted = turn.toolResults.find((result) => result.toolName === Output.toolName && !result.isError)
  const call = accepted === undefined ? undefined : calls.find((part) => part.id === accepted.toolCallId)
  return call === undefined
    ? undefined
    : { message: turn.message, text: JSON.stringify(call.params) ?? "", output: call.params }
}

/**
 * A guardrail on the final answer: `check` runs on each reply that calls no
 * tool, and on the typed output the run accepts, after its turn; a trip ends
 * the run (before the answer is taken: the run has no `output`).
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
    afterTurn: (turn, ctx) => {
      const answer = finalAnswer(turn)
      if (answer === undefined) return proceeding
      return Effect.flatMap(check(answer, ctx), (verdict) =>
        verdict._tag === "Pass" ? proceeding : Effect.gen(function*() {
          const outcome = yield* tripped(ctx, name, verdict.reason, "output")
          // A stop, rather than a hook's decision: it comes before the run's acceptance of a typed answer.
          const stop = yield* ctx.stopper
          yield* stop(outcome, verdict.reason)
          return Hooks.stop(outcome)
        }))
    }
  }
}
