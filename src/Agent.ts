/**
 * The agent loop: call the model with the transcript and the tools, run the
 * tool calls it asks for, append their results, and repeat until the model
 * stops, a tool ends the run, or a guard does.
 *
 * ```
 * AgentStart
 * loop (outer: follow-ups)
 *   loop (inner: while the model asks for tools, or steering is pending)
 *     deliver steering → guards (beforeModelCall) → TurnStart
 *     transformContext (request only) → model stream → MessageStart / MessageUpdate… / MessageEnd
 *     tool batch → ToolExecutionStart / Update / End → results appended in the calls' order
 *     TurnEnd → BudgetSnapshot → afterTurn hooks → stop if the batch voted terminate
 *   natural stop → poll follow-ups; none → done
 * AgentEnd
 * ```
 *
 * Outcomes are values (`RunResult.outcome`); a run fails only when it cannot
 * go on (`AgentError`). Interrupting the run's fiber interrupts its tools and
 * still delivers `AgentEnd` to observers. (The loop itself is internal:
 * `src/internal/loop.ts`, read top-down.)
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { Agent, Message, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const Add = Tool.make("add", {
 *   parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
 *   success: Schema.Finite
 * })
 * const Tools = Toolkit.make(Add)
 *
 * const program = Agent.run({ prompt: "What is 1 + 2?" }).pipe(
 *   Effect.provide(ToolRegistry.layer(Tools).pipe(
 *     Layer.provide(Tools.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) }))
 *   )),
 *   Effect.provide(ScriptedModel.layer([
 *     { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }] },
 *     { text: "1 + 2 = 3" }
 *   ]))
 * )
 *
 * Effect.runPromise(program).then((result) => console.log(result.outcome._tag, Message.textOf(result.messages.at(-1)!)))
 * // Output: Completed 1 + 2 = 3
 * ```
 *
 * @since 0.1.0
 */
import { Effect, Queue, Stream } from "effect"
import type { LanguageModel } from "effect/ai"
import type * as AgentConfig from "./AgentConfig.ts"
import type { AgentError } from "./AgentError.ts"
import type * as AgentEvent from "./AgentEvent.ts"
import type * as Hooks from "./Hooks.ts"
import * as Message from "./Message.ts"
import * as RunState from "./RunState.ts"
import type * as Steering from "./Steering.ts"
import type { ToolRegistry } from "./ToolRegistry.ts"
import * as Loop from "./internal/loop.ts"

/**
 * What starts a run.
 *
 * @since 0.1.0
 * @category options
 */
export interface RunOptions<R = never> extends ContinueOptions<R> {
  /** The task: text, a message, or messages. */
  readonly prompt: string | Message.Message | ReadonlyArray<Message.Message>
  /** The system prompt. */
  readonly system?: string | undefined
  /** The run id (a random UUID by default). */
  readonly runId?: string | undefined
}

/**
 * What a continued run can change.
 *
 * @since 0.1.0
 * @category options
 */
export interface ContinueOptions<R = never> {
  /** Settings; defaults for anything left out. Validated by the run. */
  readonly config?: AgentConfig.Input | undefined
  /** Plugins, after the guards the config installs. */
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /** The steering handle (else the `Steering` service, if provided). */
  readonly steering?: Steering.Service | undefined
  /** The agent's name, in its spans: `invoke_agent {name}` (default `agent`; see `Telemetry`). */
  readonly name?: string | undefined
}

/**
 * What every run needs: a `LanguageModel` and a `ToolRegistry`.
 *
 * @since 0.1.0
 * @category models
 */
export type Requirements = LanguageModel.LanguageModel | ToolRegistry

const promptMessages = (prompt: RunOptions["prompt"]): ReadonlyArray<Message.Message> =>
  typeof prompt === "string" ? [Message.user(prompt)] : "role" in prompt ? [prompt] : prompt

const freshState = (options: RunOptions<unknown>): RunState.RunState =>
  RunState.make({
    runId: options.runId ?? globalThis.crypto.randomUUID(),
    system: options.system,
    messages: promptMessages(options.prompt)
  })

/**
 * Runs an agent on a task until the model stops, a tool ends the run, or a
 * guard does.
 *
 * @since 0.1.0
 * @category running
 */
export const run = <R = never>(
  options: RunOptions<R>
): Effect.Effect<RunState.RunResult, AgentError, Requirements | R> =>
  Effect.suspend(() => Loop.start(freshState(options), options))

/**
 * Continues a run from its state: answers tool calls left open, delivers
 * queued steering and follow-ups, and goes on. Fails with
 * `InvalidContinuation` when there is nothing to continue (an empty
 * transcript, or a final assistant reply with nothing queued).
 *
 * @since 0.1.0
 * @category running
 */
export const runContinue = <R = never>(
  state: RunState.RunState,
  options: ContinueOptions<R> = {}
): Effect.Effect<RunState.RunResult, AgentError, Requirements | R> => Loop.resume(state, options)

/**
 * Runs an agent and returns its events as a stream; the last element is
 * `AgentEnd`, which carries the result. Stopping the stream early interrupts
 * the run.
 *
 * @since 0.1.0
 * @category running
 */
export const runStream = <R = never>(
  options: RunOptions<R>
): Stream.Stream<AgentEvent.AgentEvent, AgentError, Requirements | R> =>
  Stream.callback<AgentEvent.AgentEvent, AgentError, Requirements | R>((queue) =>
    Effect.suspend(() =>
      Loop.start(freshState(options), { ...options, sinks: [(event) => void Queue.offerUnsafe(queue, event)] })
    ).pipe(
      Effect.matchCauseEffect({
        onSuccess: () => Queue.end(queue),
        onFailure: (cause) => Queue.failCause(queue, cause)
      })
    )
  )
