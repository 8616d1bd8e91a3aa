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
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as AgentConfig from "./AgentConfig.ts"
import type { AgentError, ConfigError, OutputSchemaMismatch } from "./AgentError.ts"
import type * as AgentEvent from "./AgentEvent.ts"
import * as Backend from "./Backend.ts"
import type * as Hooks from "./Hooks.ts"
import type * as Output from "./Output.ts"
import * as RunState from "./RunState.ts"
import type * as Steering from "./Steering.ts"
import type * as SubAgent from "./SubAgent.ts"
import type { ToolRegistry } from "./ToolRegistry.ts"
import * as Loop from "./internal/loop.ts"
import * as OutputPart from "./internal/output.ts"
import * as SubAgents from "./internal/subAgent.ts"

export {
  /**
   * Makes a tool that runs a sub-agent on a child run (see `SubAgent`).
   *
   * @since 0.1.0
   */
  asTool,
  /**
   * Defines a sub-agent: a name, a description, a system prompt, an input
   * Schema, tools, a model and a config (see `SubAgent`).
   *
   * @since 0.1.0
   */
  define,
  /**
   * Makes a tool that hands the run off to a sub-agent (see `SubAgent`).
   *
   * @since 0.1.0
   */
  handoff
} from "./SubAgent.ts"

export {
  /**
   * What a run returns (`run`, `runContinue`, a session's `result`): the
   * messages the run added, the state to continue from, the outcome, the
   * usage, and, for a run with an output Schema, the decoded `output`. The
   * Schema and the type of `RunState.RunResult`, here where a run is made.
   *
   * @since 0.1.0
   * @category models
   */
  RunResult
} from "./RunState.ts"

/**
 * What starts a run.
 *
 * @since 0.1.0
 * @category options
 */
export interface RunOptions<R = never, A = never> extends ContinueOptions<R, A> {
  /** The task: text, a message, or messages. */
  readonly prompt: RunState.Prompt
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
export interface ContinueOptions<R = never, A = never> {
  /**
   * The Schema of the run's final answer: the model is offered a
   * `final_answer` tool whose parameters are this Schema, and the run ends
   * when it calls it with valid arguments; `RunResult.output` is the decoded
   * answer (see `Output`). A continued run must give the Schema it was
   * started with (`OutputSchemaMismatch` otherwise).
   */
  readonly output?: Schema.Codec<A, unknown> | undefined
  /**
   * How many invalid final answers (arguments that do not decode, or a reply
   * in plain text) the model may correct before the run ends
   * `OutputInvalid` (default 2).
   */
  readonly outputRetries?: number | undefined
  /**
   * How the final answer is asked for: through the `final_answer` tool
   * (`"tool"`, the default, on every provider), or as the provider's own
   * structured output (`"native"`, OpenAI's; for a run without tools). See
   * `Output.Mode`.
   */
  readonly outputMode?: Output.Mode | undefined
  /** Settings; defaults for anything left out. Validated by the run. */
  readonly config?: AgentConfig.Input | undefined
  /** Plugins, after the guards the config installs. */
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /** The steering handle (else the `Steering` service, if provided). */
  readonly steering?: Steering.Service | undefined
  /** The agent's name, in its spans: `invoke_agent {name}` (default `agent`; see `Telemetry`). */
  readonly name?: string | undefined
  /**
   * The agent the run is in, when not the application's: a run continued
   * after it was handed off to a sub-agent (`Agent.handoff`) goes on in
   * that agent, with its tools, model, config's plugins and name.
   */
  readonly agent?: SubAgent.Definition<string, SubAgent.InputSchema, unknown> | undefined
}

/**
 * What every run needs: a `LanguageModel` and a `ToolRegistry`.
 *
 * @since 0.1.0
 * @category models
 */
export type Requirements = LanguageModel.LanguageModel | ToolRegistry

/**
 * The front door: every run starts here (`run`, `runContinue`, `runStream`,
 * and through them every session and backend). It checks the options,
 * reads how the run is carried out (`Backend`), follows the handoffs the
 * run ends with, and types its output. The run's own tools see the default
 * `Backend`: a run inside a tool is a run of its own.
 */
const execute = <R, A>(
  options: ContinueOptions<R, A>,
  begin: (loop: Loop.Options<R>) => Effect.Effect<RunState.RunResult, AgentError, Requirements | R>,
  sink?: (event: AgentEvent.AgentEvent) => void
): Effect.Effect<RunState.RunResult<A>, AgentError, Requirements | R> =>
  Effect.gen(function*() {
    const output = yield* OutputPart.request(options.output, options.outputRetries, options.outputMode)
    const execution = yield* Backend.Backend
    const agent = options.agent
    const sinks = [...execution.sinks ?? [], ...(sink === undefined ? [] : [sink])]
    const loop: Loop.Options<R> = {
      config: options.config,
      plugins: [...options.plugins ?? [], ...agent?.plugins ?? [], ...execution.plugins ?? []],
      steering: options.steering,
      name: agent?.name ?? options.name,
      output,
      sinks,
      modelCall: execution.modelCall,
      announce: execution.announce
    }
    const result = yield* SubAgents.follow(
      loop,
      // In the agent handed off to (a session resumed after a handoff): its own tools and model.
      (withHandoffs) =>
        agent === undefined
          ? SubAgents.wrapping(begin(withHandoffs), execution.tools)
          : SubAgents.provideOwn(agent, begin(withHandoffs), execution.tools),
      { agent: agent?.name, handedOff: execution.handedOff, tools: execution.tools }
    ).pipe(Effect.provideService(Backend.Backend, Backend.defaults))
    return OutputPart.typed(options.output)(result)
  })

/**
 * Checks a run's options as the run does when it starts (its config, and
 * its output's settings), without running it: a backend that stores a
 * session before its run starts checks first. Answers the config, with
 * defaults for what was left out.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Agent } from "effect-agent"
 *
 * Effect.runPromise(Effect.flip(Agent.validate({ config: { maxTurns: -1 } }))).then((error) =>
 *   console.log(error._tag, error.field)
 * )
 * // Output: ConfigError maxTurns
 * ```
 *
 * @since 0.1.0
 * @category running
 */
export const validate = <R, A>(options: ContinueOptions<R, A>): Effect.Effect<AgentConfig.AgentConfig, ConfigError> =>
  Effect.tap(
    AgentConfig.make(options.config),
    () => OutputPart.request(options.output, options.outputRetries, options.outputMode)
  )

/**
 * A finished run's result, typed by the output Schema it is asked with (the
 * value its state saved, decoded): what a session answers when it is opened
 * after its run finished. Fails with `OutputSchemaMismatch` when the run was
 * made with another Schema (or with none, or without one given here).
 *
 * @since 0.1.0
 * @category running
 */
export const typedResult = <A = never>(
  output: Schema.Codec<A, unknown> | undefined,
  result: RunState.RunResult<unknown>
): Effect.Effect<RunState.RunResult<A>, OutputSchemaMismatch> => OutputPart.saved(output, result)

/** A new run's state: its prompt, with the time the backend had already spent on it. */
const freshState = (options: RunOptions<unknown, unknown>, elapsedBefore: number | undefined): RunState.RunState => {
  const state = RunState.fromPrompt(options)
  return elapsedBefore === undefined ? state : { ...state, elapsedMs: elapsedBefore }
}

const startFresh = <R, A>(options: RunOptions<R, A>) =>
  Effect.map(Backend.Backend, (execution) => (loop: Loop.Options<R>) =>
    Loop.start(freshState(options, execution.elapsedBefore), loop))

/**
 * Runs an agent on a task until the model stops, a tool ends the run, or a
 * guard does. A run that hands off (`Agent.handoff`) goes on in the agent it
 * handed off to; the result is that agent's, and says which it was.
 *
 * @since 0.1.0
 * @category running
 */
export const run = <R = never, A = never>(
  options: RunOptions<R, A>
): Effect.Effect<RunState.RunResult<A>, AgentError, Requirements | R> =>
  Effect.flatMap(startFresh(options), (begin) => execute(options, begin))

/**
 * Continues a run from its state: answers tool calls left open, delivers
 * queued steering and follow-ups, and goes on. Fails with
 * `InvalidContinuation` when there is nothing to continue (an empty
 * transcript, or a final assistant reply with nothing queued).
 *
 * @since 0.1.0
 * @category running
 */
export const runContinue = <R = never, A = never>(
  state: RunState.RunState,
  options: ContinueOptions<R, A> = {}
): Effect.Effect<RunState.RunResult<A>, AgentError, Requirements | R> =>
  execute(options, (loop) => Loop.resume(state, loop))

/**
 * Runs an agent and returns its events as a stream; the last element is
 * `AgentEnd`, which carries the result (after a handoff, the events of the
 * agent handed off to follow, each run from its `AgentStart` to its
 * `AgentEnd`). Stopping the stream early interrupts
 * the run.
 *
 * @since 0.1.0
 * @category running
 */
export const runStream = <R = never, A = never>(
  options: RunOptions<R, A>
): Stream.Stream<AgentEvent.AgentEvent, AgentError, Requirements | R> =>
  Stream.callback<AgentEvent.AgentEvent, AgentError, Requirements | R>((queue) =>
    Effect.flatMap(startFresh(options), (begin) =>
      execute(options, begin, (event) => void Queue.offerUnsafe(queue, event))).pipe(
      Effect.matchCauseEffect({
        onSuccess: () => Queue.end(queue),
        onFailure: (cause) => Queue.failCause(queue, cause)
      })
    )
  )
