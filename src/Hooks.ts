/**
 * Plugins: how applications and the built-in guards gate, rewrite and observe
 * a run. A `Plugin` is a record with a name and any of the hooks below; each
 * hook is an Effect, so a hook may require services, which then join the
 * run's requirements.
 *
 * | hook | when | may |
 * |---|---|---|
 * | `beforeModelCall` | before each model call, after steering is delivered | stop the run with an outcome, inject messages |
 * | `beforeToolCall` | after a call's arguments are validated, before its handler | allow, block with a reason, require approval, rewrite the arguments |
 * | `afterToolCall` | after every call, also blocked, denied and failed ones | replace the result, mark it an error, vote terminate |
 * | `afterTurn` | after each turn's results are appended | stop the run with an outcome, inject messages |
 * | `transformContext` | before each model call, on the request only | prune, redact, summarise (return the input unchanged to do nothing) |
 * | `onEvent` | every event | log, trace, persist |
 * | `steering` / `followUp` | between batches / at a natural stop | inject messages |
 * | `state` | at checkpoint and resume | save and restore the plugin's own counters |
 *
 * A plugin with per-run state is given as an Effect that builds it: the loop
 * runs the Effect at the start of each run.
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
import type { Effect } from "effect"
import type { Tool } from "effect/ai"
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
  /** Whether the model has been asked to wrap up (the request is one-shot: guards check this first). */
  readonly wrapUpRequested: boolean
}

/**
 * The context of a hook: the run, and a way to emit events.
 *
 * @since 0.1.0
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
}

/**
 * A tool call as hooks see it.
 *
 * @since 0.1.0
 */
export interface ToolCall {
  readonly id: string
  readonly name: string
  /** The arguments decoded by the tool's parameter Schema (the raw arguments when they did not decode). */
  readonly params: unknown
  /** The arguments as the model sent them. */
  readonly rawParams: unknown
  /** The tool, when one by that name is registered. */
  readonly tool: Tool.Any | undefined
}

/**
 * What a `beforeToolCall` hook decides.
 *
 * @since 0.1.0
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
 */
export const allow: BeforeToolCall = { _tag: "Allow" }

/**
 * Refuse the call: the model reads the reason, the handler never runs.
 *
 * @since 0.1.0
 */
export const block = (reason: string, details?: unknown): BeforeToolCall =>
  details === undefined ? { _tag: "Block", reason } : { _tag: "Block", reason, details }

/**
 * Ask the run's `Approvals` service before running the call.
 *
 * @since 0.1.0
 */
export const requireApproval = (reason?: string): BeforeToolCall => ({ _tag: "RequireApproval", reason })

/**
 * Run the call with other arguments (given as JSON, as a model would send
 * them; they are validated by the tool's Schema again).
 *
 * @since 0.1.0
 */
export const rewrite = (params: unknown): BeforeToolCall => ({ _tag: "Rewrite", params })

/**
 * The result of a finished call, as `afterToolCall` hooks see it.
 *
 * @since 0.1.0
 */
export interface ToolCallResult {
  readonly result: Message.ToolResultMessage
  /** Whether the result votes to end the run. */
  readonly terminate: boolean
  /** Whether the handler ran. */
  readonly executed: boolean
}

/**
 * What an `afterToolCall` hook changes; fields left out stay as they were.
 *
 * @since 0.1.0
 */
export interface AfterToolCall {
  readonly content?: ReadonlyArray<Message.UserContent> | undefined
  readonly isError?: boolean | undefined
  readonly details?: unknown
  readonly terminate?: boolean | undefined
}

/**
 * A finished turn, as `afterTurn` hooks see it.
 *
 * @since 0.1.0
 */
export interface Turn {
  readonly message: Message.AssistantMessage
  readonly toolResults: ReadonlyArray<Message.ToolResultMessage>
  /** Whether the batch voted to end the run. */
  readonly terminated: boolean
}

/**
 * What `beforeModelCall` and `afterTurn` hooks decide: go on, inject messages
 * before the next model call, ask the model to wrap up, or stop the run with
 * an outcome.
 *
 * @since 0.1.0
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
 */
export const proceed: Control = { _tag: "Proceed" }

/**
 * Append messages before the next model call.
 *
 * @since 0.1.0
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
 */
export const wrapUp = (source: string, message: string): Control => ({ _tag: "WrapUp", source, message })

/**
 * End the run with an outcome (the transcript stays valid: every tool call
 * already has its result).
 *
 * @since 0.1.0
 */
export const stop = (outcome: Outcome): Control => ({ _tag: "Stop", outcome })

/**
 * What a `transformContext` hook may return instead of the bare messages:
 * the messages and its own token estimates before and after (reported in the
 * `ContextTransformed` event).
 *
 * @since 0.1.0
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
 */
export interface Plugin<R = never> {
  readonly name: string
  readonly beforeModelCall?: ((ctx: Context) => Effect.Effect<Control, never, R>) | undefined
  readonly beforeToolCall?: ((call: ToolCall, ctx: Context) => Effect.Effect<BeforeToolCall, never, R>) | undefined
  readonly afterToolCall?:
    | ((call: ToolCall, result: ToolCallResult, ctx: Context) => Effect.Effect<AfterToolCall | void, never, R>)
    | undefined
  readonly afterTurn?: ((turn: Turn, ctx: Context) => Effect.Effect<Control, never, R>) | undefined
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
  readonly steering?: ((ctx: Context) => Effect.Effect<ReadonlyArray<Message.Message>, never, R>) | undefined
  readonly followUp?: ((ctx: Context) => Effect.Effect<ReadonlyArray<Message.Message>, never, R>) | undefined
  readonly state?: State<R> | undefined
}

/**
 * A plugin, or an Effect that builds a fresh one for each run.
 *
 * @since 0.1.0
 */
export type PluginInput<R = never> = Plugin<R> | Effect.Effect<Plugin<R>, never, R>

/**
 * Defines a plugin (an identity function that helps inference).
 *
 * @since 0.1.0
 */
export const plugin = <R = never>(plugin: Plugin<R>): Plugin<R> => plugin
