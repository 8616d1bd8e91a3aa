/**
 * A backend: how a run is carried out, where it is not the default: how each turn's
 * model call and each tool call is made, where the run's events go first, what it announces
 * after `AgentStart`, how long it had already run, and what happens between
 * the runs of a handoff. `Agent.run`, `Agent.runContinue` and
 * `Agent.runStream` (the one front door to a run) read it when they start;
 * a backend provides it around them. The default changes nothing.
 *
 * Sessions are backends: a `Session` announces the checkpoint it made and
 * saves the agent a run hands off to before that agent starts; a
 * `DurableSession` makes each model call an activity whose reply is stored
 * and replayed, and publishes every event to its store. They run through
 * the front door, so a feature of a run (typed output, handoffs,
 * sub-agents, guardrails, steering) is a feature of every backend.
 *
 * The run's own calls do not inherit it: the tools a run calls see the
 * default, so an `Agent.run` inside a tool is a run of its own.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Agent, Backend, Message, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const seen: Array<string> = []
 * const program = Agent.run({ prompt: "Hi" }).pipe(
 *   Effect.provideService(Backend.Backend, {
 *     // every model call passes here: a backend may store its reply
 *     modelCall: (turn, call) => Effect.tap(call, () => Effect.sync(() => seen.push(`model call ${turn}`))),
 *     sinks: [(event) => seen.push(event._tag)]
 *   }),
 *   Effect.provideService(ToolRegistry.ToolRegistry, ToolRegistry.empty),
 *   Effect.provide(ScriptedModel.layer([{ text: "Hello." }]))
 * )
 *
 * Effect.runPromise(program).then((result) =>
 *   console.log(Message.textOf(result.messages.at(-1)!), seen.filter((line) => !line.startsWith("Message")).join(", "))
 * )
 * // Output: Hello. AgentStart, TurnStart, model call 1, TurnEnd, BudgetSnapshot, AgentEnd
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as AgentConfig from "./AgentConfig.ts"
import type { ModelError } from "./AgentError.ts"
import type * as AgentEvent from "./AgentEvent.ts"
import type * as Hooks from "./Hooks.ts"
import type * as Message from "./Message.ts"
import type * as Outcome from "./Outcome.ts"
import type * as RunState from "./RunState.ts"
import type * as ToolRegistry from "./ToolRegistry.ts"

/**
 * Why a model call ended the run as it returned: the run was cancelled, its
 * wall clock ran out, or something halted it (a guardrail that tripped
 * during the call) with the outcome it ends with.
 *
 * @since 0.1.0
 * @category models
 */
export type Stop =
  | { readonly _tag: "Cancel"; readonly reason: string }
  | { readonly _tag: "Deadline" }
  | { readonly _tag: "Halt"; readonly outcome: Outcome.Outcome; readonly reason: string }

/**
 * A model call's reply: the assistant message, and what stopped the run as
 * it came, if anything.
 *
 * @since 0.1.0
 * @category models
 */
export interface ModelReply {
  readonly message: Message.AssistantMessage
  readonly stopped: Stop | undefined
}

/**
 * Makes a turn's model call: given the turn and the call (which streams the
 * reply, publishing its deltas), answers its reply. A durable backend runs
 * `call` once and answers a replay from what it stored.
 *
 * @since 0.1.0
 * @category models
 */
export type ModelCall = <R>(
  turn: number,
  call: Effect.Effect<ModelReply, ModelError, R>
) => Effect.Effect<ModelReply, ModelError, R>

/**
 * The run a handoff starts: the agent handed off to (its name and config)
 * and the state its run starts from.
 *
 * @since 0.1.0
 * @category models
 */
export interface Handoff {
  readonly agent: string
  readonly config: AgentConfig.Input | undefined
  readonly state: RunState.RunState
}

/**
 * What a backend changes in how a run is carried out; each part is optional.
 *
 * @since 0.1.0
 * @category models
 */
export interface Service {
  /** How each turn's model call is made (else: the model is called). */
  readonly modelCall?: ModelCall | undefined
  /**
   * How each tool call is made: the registry of each agent the run is in
   * (the application's, or an agent's own after a handoff), wrapped. A
   * durable backend makes each call an activity whose result is stored.
   */
  readonly tools?: ((registry: ToolRegistry.ToolRegistry["Service"]) => ToolRegistry.ToolRegistry["Service"]) | undefined
  /** Synchronous sinks every event of the run reaches first, before the plugins. */
  readonly sinks?: ReadonlyArray<(event: AgentEvent.AgentEvent) => void> | undefined
  /** Plugins of the backend, after the run's own (a session's checkpointer). */
  readonly plugins?: ReadonlyArray<Hooks.Plugin> | undefined
  /** Events emitted right after the first run's `AgentStart` (a session announces itself with them). */
  readonly announce?: ReadonlyArray<AgentEvent.Input> | undefined
  /**
   * The wall-clock time already spent before a new run starts, in
   * milliseconds: a backend that started the run earlier (and was restarted)
   * counts it against the wall-clock budget.
   */
  readonly elapsedBefore?: number | undefined
  /** Called when a run hands off, before the agent handed off to starts (a session saves it). */
  readonly handedOff?: ((next: Handoff) => Effect.Effect<void>) | undefined
}

/**
 * How runs are carried out here: read by the front door when a run starts
 * (the default changes nothing).
 *
 * @since 0.1.0
 * @category services
 */
export class Backend extends Context.Reference<Service>("effect-agent/Backend", {
  defaultValue: () => defaults
}) {}

/**
 * The default: nothing changed.
 *
 * @since 0.1.0
 * @category constructors
 */
export const defaults: Service = {}
