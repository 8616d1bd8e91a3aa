/**
 * A run in progress, made of parts; each step of the loop declares the parts
 * it uses (`LiveRun.Uses<R, "transcript" | "events">`).
 *
 * - `env`: what the run was given: config, model, tools, approvals,
 *   steering, plugins (and the ones with each hook), services.
 * - `transcript`: the messages and their `Prompt` form.
 * - `events`: where the run's events go.
 * - `journal`: what a mid-batch checkpoint must hold (the recovery journal).
 * - `progress`: turns, usage, wall time, the wrap-up request, quotas.
 * - `inbox`: steering and follow-ups taken but not yet delivered.
 * - `stops`: the cancel and the deadline.
 * - `output`: the typed output, for a run that asked for one.
 * - `context`: the view of the run its hooks get.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as Toolkit from "effect/ai/Toolkit"
import * as AgentConfig from "../AgentConfig.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Approvals from "../Approvals.ts"
import type * as Backend from "../Backend.ts"
import * as Guards from "../Guards.ts"
import type * as Hooks from "../Hooks.ts"
import type * as Message from "../Message.ts"
import type * as Outcome from "../Outcome.ts"
import * as RunState from "../RunState.ts"
import * as Steering from "../Steering.ts"
import { ToolRegistry } from "../ToolRegistry.ts"
import * as Events from "./events.ts"
import * as Output from "./output.ts"
import * as Progress from "./progress.ts"
import * as Stops from "./stops.ts"
import * as Telemetry from "./telemetry.ts"
import * as Transcript from "./transcript.ts"

/**
 * The hooks a plugin may have that the loop calls in order.
 *
 * @internal
 */
export type HookName =
  | "beforeModelCall"
  | "afterTurn"
  | "beforeToolCall"
  | "afterToolCall"
  | "transformContext"
  | "steering"
  | "followUp"
  | "beforeDelivery"
  | "beforeAnswer"

/**
 * A model call's reply (see `Execution`).
 *
 * @internal
 */
export type ModelReply = Backend.ModelReply

/**
 * Runs a turn's model call (see `Execution`).
 *
 * @internal
 */
export type ModelCall = Backend.ModelCall

/**
 * What a run was given.
 *
 * @internal
 */
export interface Environment<R> {
  readonly runId: string
  readonly config: AgentConfig.AgentConfig
  /** The model, looked up once per run. */
  readonly model: LanguageModel.LanguageModel
  readonly registry: ToolRegistry["Service"]
  /** The registry's definitions as the toolkit the model is given. */
  readonly toolkit: Toolkit.WithHandler<{}>
  readonly approvals: Approvals.Service | undefined
  readonly steering: Steering.Service | undefined
  /** The guards the config installs, then the application's plugins. */
  readonly plugins: ReadonlyArray<Hooks.Plugin<R>>
  /** The plugins that have each hook, in order (looked up once per run, not per call). */
  readonly hooks: { readonly [K in HookName]: ReadonlyArray<Hooks.Plugin<R>> }
  /** The run's services (those its hooks need). */
  readonly services: Context.Context<R>
  /** How the model is called, when not directly (a durable session's activity). */
  readonly modelCall: ModelCall | undefined
  /** The run's spans and metrics; `undefined` when telemetry is off (see `Telemetry`). */
  readonly telemetry: Telemetry.RunTelemetry | undefined
  /** The trace context a checkpoint saves: this run's when it is traced, else the one it continued from. */
  readonly trace: RunState.TraceContext | undefined
}

/**
 * Steering and follow-ups taken from their sources and not yet delivered.
 *
 * @internal
 */
export interface Inbox {
  readonly steering: Array<Message.Message>
  readonly followUps: Array<Message.Message>
}

/**
 * A run in progress.
 *
 * @internal
 */
export interface LiveRun<R> {
  readonly env: Environment<R>
  readonly transcript: Transcript.Transcript
  readonly events: Events.EventSink<R>
  readonly journal: Transcript.Journal
  readonly progress: Progress.Progress
  readonly inbox: Inbox
  readonly stops: Stops.Stops
  /** The typed output (`Agent.run({ output })`); `undefined` for a run without one. */
  readonly output: Output.LiveOutput | undefined
  readonly context: Hooks.Context
}

/**
 * The parts of a run a step uses.
 *
 * @internal
 */
export type Uses<R, K extends keyof LiveRun<R>> = Pick<LiveRun<R>, K>

/**
 * What a run starts from.
 *
 * @internal
 */
export interface Setup<R> {
  readonly state: RunState.RunState
  /** Index of the first message the run reports as its own. */
  readonly firstNew: number
  readonly config: AgentConfig.Input | undefined
  readonly plugins: ReadonlyArray<Hooks.PluginInput<R>>
  readonly steering: Steering.Service | undefined
  /** Synchronous event sinks before the plugins' (the stream of `runStream`). */
  readonly sinks: ReadonlyArray<(event: AgentEvent.AgentEvent) => void>
  readonly modelCall?: ModelCall | undefined
  readonly telemetry: Telemetry.RunTelemetry | undefined
  /** The typed output asked for, if any. */
  readonly output: Output.Request | undefined
}

const resolvePlugins = <R>(
  inputs: ReadonlyArray<Hooks.PluginInput<R>>
): Effect.Effect<ReadonlyArray<Hooks.Plugin<R>>, never, R> =>
  Effect.forEach(inputs, (input) => Effect.isEffect(input) ? input : Effect.succeed(input))

const hookLists = <R>(plugins: ReadonlyArray<Hooks.Plugin<R>>): Environment<R>["hooks"] => {
  const having = (name: HookName) => plugins.filter((plugin) => plugin[name] !== undefined)
  return {
    beforeModelCall: having("beforeModelCall"),
    afterTurn: having("afterTurn"),
    beforeToolCall: having("beforeToolCall"),
    afterToolCall: having("afterToolCall"),
    transformContext: having("transformContext"),
    steering: having("steering"),
    followUp: having("followUp"),
    beforeDelivery: having("beforeDelivery"),
    beforeAnswer: having("beforeAnswer")
  }
}

/**
 * The registry's tools as the toolkit `LanguageModel.streamText` takes: it
 * sends their definitions to the model. The loop runs calls itself
 * (`disableToolCallResolution`), so this toolkit's `handle` is never used.
 */
const toolkitOf = (registry: ToolRegistry["Service"]): Toolkit.WithHandler<{}> => ({
  tools: registry.definitions,
  handle: (name) =>
    Effect.fail(AiError.make({
      module: "effect-agent",
      method: "toolkit.handle",
      reason: new AiError.ToolConfigurationError({
        toolName: String(name),
        description: "effect-agent runs tool calls itself: call the tool through ToolRegistry.invoke"
      })
    }))
})

/**
 * Sets a run up: validates its config, resolves its plugins, restores their
 * state, and looks up its services once.
 *
 * @internal
 */
export const make = Effect.fnUntraced(function*<R>(setup: Setup<R>) {
  const { state } = setup
  const config = yield* AgentConfig.make(setup.config)
  const base = yield* ToolRegistry
  const output = yield* Output.make(setup.output, state, base)
  const registry = output === undefined ? base : Output.registry(base, output)
  const steering = setup.steering ?? Option.getOrUndefined(yield* Effect.serviceOption(Steering.Steering))
  const guards = yield* resolvePlugins(Guards.fromConfig(config))
  const plugins: ReadonlyArray<Hooks.Plugin<R>> = [...guards, ...yield* resolvePlugins(setup.plugins)]
  const services = yield* Effect.context<R>()
  const env: Environment<R> = {
    runId: state.runId,
    config,
    model: yield* LanguageModel.LanguageModel,
    registry,
    toolkit: toolkitOf(registry),
    approvals: Option.getOrUndefined(yield* Effect.serviceOption(Approvals.Approvals)),
    steering,
    plugins,
    hooks: hookLists(plugins),
    services,
    modelCall: setup.modelCall,
    telemetry: setup.telemetry,
    trace: (setup.telemetry === undefined ? undefined : Telemetry.traceContext(setup.telemetry)) ?? state.trace
  }
  const clock = yield* Clock.Clock
  const sinks = setup.sinks.slice()
  const listeners: Array<(event: AgentEvent.AgentEvent) => Effect.Effect<void, never, R>> = []
  for (const plugin of plugins) {
    const { observe, onEvent } = plugin
    // `context` is made below, before the first event.
    if (observe !== undefined) sinks.push((event) => observe(event, context))
    if (onEvent !== undefined) listeners.push((event) => onEvent(event, context))
  }
  const parts: Omit<LiveRun<R>, "context"> = {
    env,
    transcript: Transcript.make(state.system, state.messages, setup.firstNew),
    events: Events.make(state.runId, clock, state.turn, sinks, listeners),
    journal: Transcript.journal(state),
    progress: Progress.make(state, config, clock),
    inbox: { steering: state.steering.slice(), followUps: state.followUps.slice() },
    stops: Stops.make(steering?.cancelled, config.budgets.wallClock),
    output
  }
  const context: Hooks.Context = new HookContext(parts)
  for (const plugin of plugins) {
    const saved = state.pluginState[plugin.name]
    if (plugin.state !== undefined && saved !== undefined) yield* plugin.state.restore(saved, context)
  }
  const run: LiveRun<R> = { ...parts, context }
  return run
})

/**
 * The hook context: a live view of the run. A class, not a literal with
 * getters: a literal's accessors are set up anew for every run, and cost more
 * than the rest of the view.
 */
class HookContext<R> implements Hooks.Context {
  readonly emit: Hooks.Context["emit"]
  private readonly run: Omit<LiveRun<R>, "context">
  constructor(run: Omit<LiveRun<R>, "context">) {
    this.run = run
    this.emit = (input) => Effect.provideContext(Events.emit(run.events, input), run.env.services)
  }
  get runId() {
    return this.run.env.runId
  }
  get turn() {
    return this.run.progress.turn
  }
  get messages() {
    return this.run.transcript.messages
  }
  get usage() {
    return this.run.progress.usage
  }
  get elapsedMs() {
    return Progress.elapsedMs(this.run.progress)
  }
  get config() {
    return this.run.env.config
  }
  get system() {
    return this.run.transcript.system
  }
  get wrapUpRequested() {
    return this.run.progress.wrapUpRequested
  }
  get snapshot() {
    return Effect.provideContext(snapshot(this.run), this.run.env.services)
  }
  get stopper() {
    const stops = this.run.stops
    return Effect.sync(() => {
      Stops.arm(stops)
      return (outcome: Outcome.Outcome, reason: string) => Effect.sync(() => Stops.halt(stops, outcome, reason))
    })
  }
}

/**
 * The run's state as a checkpoint saves it.
 *
 * @internal
 */
export const snapshot = <R>(
  run: Uses<R, "env" | "transcript" | "progress" | "inbox" | "journal" | "output">
): Effect.Effect<RunState.RunState, never, R> =>
  Effect.map(
    Effect.forEach(run.env.plugins, (plugin) =>
      plugin.state === undefined
        ? Effect.succeed(undefined)
        : Effect.map(plugin.state.save, (saved) => saved === undefined ? undefined : [plugin.name, saved] as const)),
    (saved): RunState.RunState => {
      const { inbox, progress, transcript } = run
      const state: RunState.RunState = {
        version: RunState.version,
        runId: run.env.runId,
        messages: transcript.messages.slice(),
        turn: progress.turn,
        usage: progress.usage,
        elapsedMs: Progress.elapsedMs(progress),
        steering: inbox.steering.slice(),
        followUps: inbox.followUps.slice(),
        ...Transcript.journalSnapshot(run.journal),
        wrapUpRequested: progress.wrapUpRequested,
        pluginState: Object.fromEntries(saved.filter((entry) => entry !== undefined))
      }
      const use = Progress.toolUse(progress)
      const used = use === undefined ? state : { ...state, toolUse: use }
      const { trace } = run.env
      const traced = trace === undefined ? used : { ...used, trace }
      const withOutput = run.output === undefined ? traced : { ...traced, output: Output.snapshot(run.output) }
      return transcript.system === undefined ? withOutput : { ...withOutput, system: transcript.system }
    }
  )
