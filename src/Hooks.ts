/**
 * Plugins: how applications and the built-in guards gate, rewrite and observe
 * a run. A `Plugin` is a record with a name and any of the hooks below; each
 * hook is an Effect, so a hook may require services, which then join the
 * run's requirements.
 *
 * | hook | when | may |
 * |---|---|---|
 * | `beforeModelCall` | before each model call, after steering is delivered | stop the run, inject messages, ask to wrap up |
 * | `beforeToolCall` | after a call's arguments are validated, before its handler | allow, block with a reason, require approval, rewrite the arguments |
 * | `afterToolCall` | after every call, also blocked, denied and failed ones | replace the result, mark it an error, vote terminate |
 * | `afterTurn` | after each turn's results are appended | stop the run, inject messages, ask to wrap up |
 * | `transformContext` | before each model call, on the request only | prune, redact, summarise (return the input unchanged to do nothing) |
 * | `onEvent` | every event | log, trace, persist |
 * | `steering` / `followUp` | between batches / at a natural stop | inject messages |
 * | `beforeDelivery` | before steering or follow-ups enter the transcript | keep them out and stop the run |
 * | `beforeAnswer` | when a reply that may be the final answer ends, before anyone sees it | withhold it and stop the run |
 * | `state` | at checkpoint and resume | save and restore the plugin's own counters |
 *
 * A plugin with per-run state is given as an Effect that builds it: the loop
 * runs the Effect at the start of each run.
 *
 * How hooks combine: a run's plugins are the guards its config installs,
 * then the application's, in order, and every hook runs in that order. Hooks
 * of one kind chain: each sees what the ones before it decided (the call as
 * rewritten, the result as replaced, the messages as transformed, the
 * messages injected), and a decision that ends something (`Block`, `Stop`)
 * skips the hooks after it. Hooks cannot fail (their error type is `never`):
 * a hook that dies (a defect, a throw) ends the run with that defect
 * (`AgentEnd` carries it, and the run fails with it), its open tool calls
 * answered. See each hook on {@link Plugin} for when it runs and what each
 * answer does.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Hooks } from "effect-agent"
 *
 * const noDeletes = Hooks.plugin({
 *   name: "no-deletes",
 *   beforeToolCall: (call) =>
 *     Effect.succeed(call.name === "delete_file" ? Hooks.block("deleting files is not allowed") : Hooks.allow)
 * })
 * ```
 *
 * @since 0.1.0
 */
import type * as Effect from "effect/Effect"
import type * as Tool from "effect/ai/Tool"
import type { AgentConfig } from "./AgentConfig.ts"
import type { InvalidPluginState } from "./AgentError.ts"
import type * as AgentEvent from "./AgentEvent.ts"
import type * as Message from "./Message.ts"
import type { Outcome } from "./Outcome.ts"
import type { RunState } from "./RunState.ts"

/**
 * A read-only view of the run, given to every hook.
 *
 * @since 0.1.0
 * @category models
 */
export interface RunInfo {
  readonly runId: string
  /** Completed turns so far. */
  readonly turn: number
  /** The transcript so far (never mutate it). */
  readonly messages: ReadonlyArray<Message.Message>
  readonly usage: Message.Usage
  /** Wall time used by the run so far, across continuations. */
  readonly elapsedMs: number
  readonly config: AgentConfig
  /** The system prompt. */
  readonly system: string | undefined
  /**
   * Whether the model has been asked to wrap up (a {@link wrapUp} decision;
   * the request is one-shot: guards check this first). Saved with the run's
   * state.
   */
  readonly wrapUpRequested: boolean
}

/**
 * The context of a hook: the run, and a way to emit events.
 *
 * @since 0.1.0
 * @category models
 */
export interface Context extends RunInfo {
  /**
   * Emits an event; the loop fills in the run id, turn and timestamp. It only
   * reports: emitting `WrapUpRequested` asks nothing of the model (a control
   * hook returns {@link wrapUp} for that).
   */
  readonly emit: (event: AgentEvent.Input) => Effect.Effect<void>
  /** The run's state as a checkpoint would save it. */
  readonly snapshot: Effect.Effect<RunState>
  /**
   * Arms a stop for the run and gives the function that pulls it. Once it is
   * armed, the model call and the tool calls and approval waits that start
   * race it: pulling it stops what is in flight at once (finalizers run,
   * open calls are answered with `reason`), and the run ends with `outcome`
   * (a stop pulled between steps ends the run at the next one). For a plugin
   * that checks something in the background, such as an input guardrail
   * (`Guardrail.input`). The first stop pulled wins.
   */
  readonly stopper: Effect.Effect<(outcome: Outcome, reason: string) => Effect.Effect<void>>
}

/**
 * A tool call as hooks see it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolCall {
  readonly id: string
  readonly name: string
  /**
   * The arguments decoded by the tool's parameter Schema (for `afterToolCall`
   * of a call that never got that far, the arguments as sent). A
   * `beforeToolCall` rewrite does not change them for the hooks after it
   * (it is validated once all have run); `afterToolCall` sees the rewrite
   * decoded.
   */
  readonly params: unknown
  /** The arguments as the model sent them, or as the last `beforeToolCall` rewrite set them. */
  readonly rawParams: unknown
  /** The tool, when one by that name is registered. */
  readonly tool: Tool.Any | undefined
}

/**
 * What a `beforeToolCall` hook decides.
 *
 * - `Allow`: nothing; the next hook runs.
 * - `Block`: the call is answered with `Tool call blocked: <reason>` as an
 *   error result (`details`: `{ kind: "blocked", plugin, details }`); the
 *   handler never runs and the hooks after this one do not either. The first
 *   block wins over every earlier decision.
 * - `RequireApproval`: the call waits for the run's `Approvals` service
 *   (after the quotas are checked); the first reason given is the one asked
 *   with. Without an `Approvals` service the call is denied.
 * - `Rewrite`: the hooks after this one see `params` as their `rawParams`;
 *   once all have run, the last rewrite is validated by the tool's Schema and
 *   the call runs with it (invalid: an error result saying so, with
 *   `rewrittenBy` in its details).
 *
 * @since 0.1.0
 * @category models
 */
export type BeforeToolCall =
  | { readonly _tag: "Allow" }
  | { readonly _tag: "Block"; readonly reason: string; readonly details?: unknown }
  | { readonly _tag: "RequireApproval"; readonly reason?: string | undefined }
  | { readonly _tag: "Rewrite"; readonly params: unknown }

/**
 * Let the call run.
 *
 * @since 0.1.0
 * @category decisions
 */
export const allow: BeforeToolCall = { _tag: "Allow" }

/**
 * Refuse the call: the model reads the reason, the handler never runs.
 *
 * @since 0.1.0
 * @category decisions
 */
export const block = (reason: string, details?: unknown): BeforeToolCall =>
  details === undefined ? { _tag: "Block", reason } : { _tag: "Block", reason, details }

/**
 * Ask the run's `Approvals` service before running the call.
 *
 * @since 0.1.0
 * @category decisions
 */
export const requireApproval = (reason?: string): BeforeToolCall => ({ _tag: "RequireApproval", reason })

/**
 * Run the call with other arguments (given as JSON, as a model would send
 * them; they are validated by the tool's Schema again).
 *
 * @since 0.1.0
 * @category decisions
 */
export const rewrite = (params: unknown): BeforeToolCall => ({ _tag: "Rewrite", params })

/**
 * The result of a finished call, as `afterToolCall` hooks see it.
 *
 * @since 0.1.0
 * @category models
 */
export interface ToolCallResult {
  /**
   * The result as the hooks before this one left it: at first, what the
   * handler gave (or the loop's answer for a call that never ran: unknown,
   * invalid, blocked, over a limit or a quota, denied, stopped, timed out),
   * not yet cut to `maxResultChars`.
   */
  readonly result: Message.ToolResultMessage
  /**
   * Whether the result votes to end the run, as the hooks before this one
   * left it: at first, whether the tool is `Terminating`, its handler ran and
   * the result is not an error.
   */
  readonly terminate: boolean
  /** Whether the handler ran (it did not for a call answered without running it). */
  readonly executed: boolean
}

/**
 * What an `afterToolCall` hook changes. Each field given replaces the
 * result's, whole (there is no merge, deep or shallow); a field left out (or
 * `undefined`) keeps what the hooks before left; answering `void` changes
 * nothing. The next hook sees the result as changed. After the last hook the
 * text the model reads is cut to the tool's `maxResultChars` (else the
 * config's), the full text kept in `details`; the result is then recorded and
 * reported with `ToolExecutionEnd`.
 *
 * @since 0.1.0
 * @category models
 */
export interface AfterToolCall {
  /** Replaces the whole content (text and images) the model reads. */
  readonly content?: ReadonlyArray<Message.UserContent> | undefined
  /** Replaces the error flag. */
  readonly isError?: boolean | undefined
  /** Replaces the `details` (never sent to the model). */
  readonly details?: unknown
  /** Replaces the call's vote to end the run (a call counts only if its tool counts toward the vote). */
  readonly terminate?: boolean | undefined
}

/**
 * A finished turn, as `afterTurn` hooks see it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Turn {
  readonly message: Message.AssistantMessage
  readonly toolResults: ReadonlyArray<Message.ToolResultMessage>
  /** Whether the batch voted to end the run. */
  readonly terminated: boolean
}

/**
 * What `beforeModelCall` and `afterTurn` hooks decide. Each decision is
 * applied before the next hook runs, so that hook sees it:
 *
 * - `Proceed`: go on.
 * - `Inject`: append the messages to the transcript (each with a
 *   `MessageEnd`), before the next model call.
 * - `WrapUp`: ask the model, once per run, to finish (see {@link wrapUp}).
 * - `Stop`: end the run with the outcome; the hooks after this one do not
 *   run. After a turn, a cancel, the deadline and the tools' vote to end the
 *   run come first.
 *
 * @since 0.1.0
 * @category models
 */
export type Control =
  | { readonly _tag: "Proceed" }
  | { readonly _tag: "Inject"; readonly messages: ReadonlyArray<Message.Message> }
  | { readonly _tag: "WrapUp"; readonly source: string; readonly message: string }
  | { readonly _tag: "Stop"; readonly outcome: Outcome }

/**
 * Go on.
 *
 * @since 0.1.0
 * @category decisions
 */
export const proceed: Check = { _tag: "Proceed" }

/**
 * Append messages before the next model call.
 *
 * @since 0.1.0
 * @category decisions
 */
export const inject = (messages: ReadonlyArray<Message.Message>): Control => ({ _tag: "Inject", messages })

/**
 * Ask the model, once per run, to stop calling work tools and deliver its
 * final result: the loop records the request (`wrapUpRequested`, saved in the
 * run's state: a run that then ends by itself ends `WrappedUp`), emits
 * `WrapUpRequested` with `source` and `message`, and appends `message` as a
 * system message before the next model call. A request after the first is
 * ignored.
 *
 * @since 0.1.0
 * @category decisions
 */
export const wrapUp = (source: string, message: string): Control => ({ _tag: "WrapUp", source, message })

/**
 * End the run with an outcome (the transcript stays valid: every tool call
 * already has its result).
 *
 * @since 0.1.0
 * @category decisions
 */
export const stop = (outcome: Outcome): Check => ({ _tag: "Stop", outcome })

/**
 * What a `beforeDelivery` or `beforeAnswer` hook decides: `Proceed` lets the
 * text through; `Stop` keeps it from the model (steering, follow-ups) or
 * from everyone (an answer) and ends the run with the outcome. The other
 * hooks of that kind do not run after a `Stop`.
 *
 * @since 0.1.0
 * @category models
 */
export type Check = Extract<Control, { readonly _tag: "Proceed" | "Stop" }>

/**
 * Messages about to enter a run from outside it, as `beforeDelivery` hooks
 * see them: steering (from the `Steering` handle or a plugin's `steering`
 * hook) before the next model call, or follow-ups at a natural stop.
 *
 * @since 0.1.0
 * @category models
 */
export interface Delivery {
  readonly kind: "steering" | "followUp"
  readonly messages: ReadonlyArray<Message.Message>
}

/**
 * A reply that may be the run's final answer, as `beforeAnswer` hooks see
 * it: a reply that calls no tool (`text` is its text), or, in a run with a
 * typed output in the `"tool"` mode, one `final_answer` call whose arguments
 * are valid (`output` holds them as the model sent them, their JSON form, and
 * `text` their JSON text). A reply with two such calls is checked once for
 * each.
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
 * What a `transformContext` hook may return instead of the bare messages:
 * the messages and its own token estimates before and after (reported in the
 * `ContextTransformed` event).
 *
 * @since 0.1.0
 * @category models
 */
export interface Transformed {
  readonly messages: ReadonlyArray<Message.Message>
  readonly tokensBefore: number
  readonly tokensAfter: number
}

/**
 * A plugin's saved state, restored on resume.
 *
 * @since 0.1.0
 * @category models
 */
export interface State<R = never> {
  readonly save: Effect.Effect<unknown, never, R>
  /**
   * Restores what `save` returned, once the run's transcript is restored
   * (`info` is the run, to check the state against). Saved state comes from
   * a checkpoint: check it as tightly as the plugin uses it, and fail with
   * `InvalidPluginState` rather than use what does not fit (the run fails
   * with that error before it starts; a session reports a corrupt checkpoint).
   */
  readonly restore: (saved: unknown, info: RunInfo) => Effect.Effect<void, InvalidPluginState, R>
}

/**
 * A plugin: a name and any hooks.
 *
 * @since 0.1.0
 * @category models
 */
export interface Plugin<R = never> {
  /** Names the plugin in events, in its saved state and in the details of a call it blocked. */
  readonly name: string
  /**
   * Before each model call, after pending steering is delivered and before
   * `TurnStart` (`ctx.turn` counts the turns completed). See {@link Control}.
   */
  readonly beforeModelCall?: ((ctx: Context) => Effect.Effect<Control, never, R>) | undefined
  /**
   * For each call of a batch, in the calls' order and before any call runs:
   * after its tool is found and its arguments are validated (calls to unknown
   * tools, with invalid arguments, over the per-turn limit or already
   * answered before a resume never get here), before the tool's quotas and
   * its own approval requirement. See {@link BeforeToolCall}.
   */
  readonly beforeToolCall?: ((call: ToolCall, ctx: Context) => Effect.Effect<BeforeToolCall, never, R>) | undefined
  /**
   * After each call of a batch has its result, whether its handler ran or
   * not (unknown, invalid, blocked, denied, over a limit, stopped, failed,
   * timed out), before truncation and `ToolExecutionEnd`. Calls of a batch
   * that run in parallel reach it as they finish. Not called for a fatal
   * failure (the run fails), nor for results restored from a checkpoint
   * (their hooks ran before it was saved). See {@link AfterToolCall}.
   */
  readonly afterToolCall?:
    | ((call: ToolCall, result: ToolCallResult, ctx: Context) => Effect.Effect<AfterToolCall | void, never, R>)
    | undefined
  /**
   * After each turn: its reply and results are in the transcript, `TurnEnd`
   * and `BudgetSnapshot` are out, `ctx.turn` counts it. See {@link Control}.
   */
  readonly afterTurn?: ((turn: Turn, ctx: Context) => Effect.Effect<Control, never, R>) | undefined
  /**
   * Before each model call, after the `beforeModelCall` hooks and
   * `TurnStart`: shapes the request only (the transcript never changes).
   * Each hook gets the messages the one before returned; returning them
   * unchanged (the same array) does nothing, anything else is reported with
   * `ContextTransformed`.
   */
  readonly transformContext?:
    | ((
      messages: ReadonlyArray<Message.Message>,
      ctx: Context
    ) => Effect.Effect<ReadonlyArray<Message.Message> | Transformed, never, R>)
    | undefined
  /**
   * Sees every event, as an Effect: an observer that needs services, or to
   * snapshot the run (a checkpoint) or emit events through the context. An
   * event it ignores costs nothing when it answers `Effect.void`.
   */
  readonly onEvent?: ((event: AgentEvent.AgentEvent, ctx: Context) => Effect.Effect<void, never, R>) | undefined
  /**
   * Sees every event synchronously, where it happens, before the `onEvent`
   * hooks: for observers that only look (count, render, buffer), with no
   * Effect to build and run per event. It must not throw: a throw is a
   * defect that ends the run.
   *
   * @example
   * ```ts
   * import { Hooks } from "effect-agent"
   *
   * let deltas = 0
   * const counter = Hooks.plugin({
   *   name: "counter",
   *   observe: (event) => {
   *     if (event._tag === "MessageUpdate") deltas++
   *   }
   * })
   * ```
   */
  readonly observe?: ((event: AgentEvent.AgentEvent, ctx: Context) => void) | undefined
  /**
   * At the start and after each turn, with the `Steering` handle: messages
   * to deliver before the next model call (`SteeringDelivered`).
   */
  readonly steering?: ((ctx: Context) => Effect.Effect<ReadonlyArray<Message.Message>, never, R>) | undefined
  /** At a natural stop, with the `Steering` handle: messages that restart the run (`FollowUpDelivered`). */
  readonly followUp?: ((ctx: Context) => Effect.Effect<ReadonlyArray<Message.Message>, never, R>) | undefined
  /**
   * Before steering or follow-ups enter the transcript, whatever brought them
   * (the `Steering` handle, a plugin's `steering` or `followUp` hook, a
   * resumed session's queue): the run waits for it. A `Stop` keeps the
   * messages out of the transcript (no model sees them) and ends the run
   * with its outcome; they are announced with `DeliveryBlocked`, neither
   * delivered nor returned. What an input guardrail uses (`Guardrail.input`).
   * See {@link Check}.
   */
  readonly beforeDelivery?: ((delivery: Delivery, ctx: Context) => Effect.Effect<Check, never, R>) | undefined
  /**
   * When a reply that may be the final answer has ended (see {@link Answer}),
   * before it enters the transcript and before any event shows it. In a run
   * with such a hook, a reply's deltas (`MessageUpdate`, `OutputDelta`) and
   * its `MessageEnd` are held until the reply ends: a reply that calls tools
   * (other than a valid `final_answer`) is then released at once, one that may
   * be the answer once every `beforeAnswer` hook has proceeded. So streaming
   * is per reply, not per token. A `Stop` withholds the reply: nothing of
   * it is announced, a reply that says it was withheld (same usage, no
   * calls) takes its place in the events, the transcript, the run's state
   * and result (its tool calls never run), and the run ends with the
   * outcome. A reply cut short by a stop
   * (a cancel, the deadline) that may have been the answer is withheld
   * unchecked. What an output guardrail uses (`Guardrail.output`). See
   * {@link Check}.
   */
  readonly beforeAnswer?: ((answer: Answer, ctx: Context) => Effect.Effect<Check, never, R>) | undefined
  /**
   * Saved with every snapshot of the run (a checkpoint, the result's state); restored before it starts.
   * A plugin whose `save` gives `undefined` saves nothing (and is not restored).
   */
  readonly state?: State<R> | undefined
}

/**
 * A plugin, or an Effect that builds a fresh one for each run.
 *
 * @since 0.1.0
 * @category models
 */
export type PluginInput<R = never> = Plugin<R> | Effect.Effect<Plugin<R>, never, R>

/**
 * Defines a plugin (an identity function that helps inference).
 *
 * @since 0.1.0
 * @category constructors
 */
export const plugin = <R = never>(plugin: Plugin<R>): Plugin<R> => plugin
