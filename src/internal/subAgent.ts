/**
 * How a sub-agent runs: a child run started by a sub-agent tool's handler
 * (`Agent.asTool`) below the run that called it, and a run handed off to
 * another agent (`Agent.handoff`).
 *
 * A child run is the loop itself (`Loop.start`, or `Loop.resume` for a child
 * saved in its parent's state), on the fiber of the call that runs it, with
 * the plugins below: they report its events to the parent (`Nested`) and
 * roll its usage up into every run above it; its model calls reserve against
 * the budgets of every run above it (the loop's `Reservations`, through its
 * `Lineage`). Everything else comes with the fiber: interrupting
 * the parent interrupts the child and its tools, and the parent's
 * `Approvals` service decides the child's calls.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as AgentConfig from "../AgentConfig.ts"
import type { AgentError } from "../AgentError.ts"
import type * as Backend from "../Backend.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as RunState from "../RunState.ts"
import { ToolRegistry } from "../ToolRegistry.ts"
import * as ToolRegistryModule from "../ToolRegistry.ts"
import * as Lineage from "./lineage.ts"
import * as Loop from "./loop.ts"
import * as OutputPart from "./output.ts"
import * as Progress from "./progress.ts"
import * as Stops from "./stops.ts"
import * as Transcript from "./transcript.ts"

/** The default of `maxDepth`: a child, a grandchild and a great-grandchild. */
const defaultMaxDepth = 3

/** How many handoffs one `Agent.run` follows, at most (a cycle of agents handing off to each other ends there). */
const maxHandoffs = 8

/**
 * The Schema of a sub-agent's input: the parameters of its tool, so a
 * Schema whose JSON form is an object (a `Schema.Struct`).
 *
 * @since 0.1.0
 * @category models
 */
export type InputSchema = Schema.Codec<unknown, { readonly [key: string]: unknown }>

/**
 * A sub-agent.
 *
 * @since 0.1.0
 * @category models
 */
export interface Definition<Name extends string, Input extends InputSchema, Out = string> {
  /** The tool's name, and the agent's in `Nested` paths, figures and `HandedOff`. */
  readonly name: Name
  /** What the calling model is told the agent does. */
  readonly description: string
  readonly system?: string | undefined
  /** The tool's parameters: what the calling model passes. */
  readonly input: Input
  /** The task as the agent reads it (by default, the input as JSON). */
  prompt?(input: Input["Type"]): string
  /** The agent's tools (none by default: not the caller's). */
  readonly tools?: Layer.Layer<ToolRegistry> | undefined
  /** The agent's model (by default, the caller's). */
  readonly model?: Layer.Layer<LanguageModel.LanguageModel> | undefined
  readonly config?: AgentConfig.Input | undefined
  readonly plugins?: ReadonlyArray<Hooks.PluginInput> | undefined
  /** How deep sub-agents may run below the top run, counting this one (default 3; the least on the path wins). */
  readonly maxDepth?: number | undefined
  /**
   * The answer's Schema: the tool's result. `Schema.String` (the default)
   * answers with the agent's final reply; any other Schema is the typed
   * output the agent gives through its `final_answer` tool (see `Output`).
   */
  readonly output: Schema.Codec<Out, unknown>
  /** How many invalid final answers the agent may correct (see `Agent.run`'s `outputRetries`). */
  readonly outputRetries?: number | undefined
}

/**
 * Where a run sits among agents.
 *
 * @since 0.1.0
 * @category models
 */
export interface Identity {
  readonly runId: string
  /** The agent's name; `undefined` for a run the application started. */
  readonly agent: string | undefined
  readonly parentRunId: string | undefined
  /** 0 for a run the application started, 1 for its sub-agents, … */
  readonly depth: number
  /** The agents' names from the top run down to this one. */
  readonly path: ReadonlyArray<string>
  /** When the run's wall-clock budget (its own, or inherited from its parent) runs out, in epoch ms. */
  readonly deadline: number | undefined
}

/**
 * A definition with its types erased, but for its answer's.
 *
 * @internal
 */
export type AnyDefinition<Out = unknown> = Definition<string, InputSchema, Out>

/** What every step but the answer uses of a definition. */
type Common = Omit<AnyDefinition, "output">

/**
 * What the calling model reads when a sub-agent cannot answer: it was not
 * started (too deep), it did not finish (`outcome`: how it ended), or its run
 * failed. A typed failure of the sub-agent tool: an error result, never the
 * end of the calling run.
 *
 * @since 0.1.0
 * @category errors
 */
export class SubAgentFailed extends Schema.TaggedError<SubAgentFailed>()("SubAgentFailed", {
  agent: Schema.String,
  reason: Schema.String,
  outcome: Schema.optionalKey(Outcome.Outcome)
}) {
  override get message(): string {
    return this.reason
  }
}

const failed = (agent: string, reason: string, outcome?: Outcome.Outcome): Effect.Effect<never, SubAgentFailed> =>
  Effect.fail(new SubAgentFailed(outcome === undefined ? { agent, reason } : { agent, reason, outcome }))

/** The task as the child reads it: its `prompt` function, the input as text, or its JSON. */
const promptOf = (definition: Common, params: unknown): string =>
  definition.prompt !== undefined
    ? definition.prompt(params)
    : typeof params === "string"
    ? params
    : JSON.stringify(Schema.encodeUnknownSync(definition.input)(params))

/**
 * The tools and model of a definition: its own tools only (none when it has none), and its model if it has one.
 *
 * @internal
 */
export const provideOwn = <A, E, R>(
  definition: Common,
  effect: Effect.Effect<A, E, R>,
  wrap?: ((registry: ToolRegistry["Service"]) => ToolRegistry["Service"]) | undefined
): Effect.Effect<A, E, Exclude<R, ToolRegistry>> => {
  const tools: Layer.Layer<ToolRegistry> = definition.tools ?? Layer.succeed(ToolRegistry, ToolRegistryModule.empty)
  const withTools = Effect.provide(wrapping(effect, wrap), tools)
  return definition.model === undefined ? withTools : Effect.provide(withTools, definition.model)
}

/**
 * `effect` with the registry in its context wrapped by `wrap` (a backend's
 * way of making tool calls, see `Backend`), if any.
 *
 * @internal
 */
export const wrapping = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  wrap: ((registry: ToolRegistry["Service"]) => ToolRegistry["Service"]) | undefined
): Effect.Effect<A, E, R | ToolRegistry> =>
  wrap === undefined
    ? effect
    : Effect.flatMap(Effect.service(ToolRegistry), (registry) => Effect.provideService(effect, ToolRegistry, wrap(registry)))

// -----------------------------------------------------------------------------
// A child run
// -----------------------------------------------------------------------------

/**
 * Runs a sub-agent below the run in progress (if any) for one call: only the
 * input goes in, only the answer comes back. A child saved in the parent's
 * state under the call's id is continued from there rather than started
 * again.
 *
 * @internal
 */
export const runChild = <Out>(
  definition: AnyDefinition<Out>,
  params: unknown,
  toolCallId: string | undefined
): Effect.Effect<Out, SubAgentFailed, LanguageModel.LanguageModel> =>
  Effect.gen(function*() {
    const parent = yield* Lineage.Current
    const agent = definition.name
    const depth = (parent?.depth ?? 0) + 1
    const maxDepth = Math.min(definition.maxDepth ?? defaultMaxDepth, parent?.maxDepth ?? Infinity)
    if (depth > maxDepth) {
      return yield* failed(
        agent,
        `${agent} was not started: it would run at depth ${depth}, and sub-agents may run at most ${maxDepth} deep`
      )
    }
    const saved = toolCallId === undefined ? undefined : parent?.restored.get(toolCallId)
    if (saved !== undefined) parent!.restored.delete(toolCallId!)
    // A child saved after its last reply had finished: its answer is in its transcript.
    const text = definition.output === Schema.String
    if (saved !== undefined && text && finished(saved.state)) {
      return yield* answer(definition, { messages: saved.state.messages, outcome: Outcome.completed })
    }
    const config = yield* childConfig(definition, parent, saved?.state.elapsedMs ?? 0)
    const output = text
      ? undefined
      : yield* OutputPart.request(definition.output, definition.outputRetries, undefined).pipe(
        Effect.catch((error) => failed(agent, `${agent} was not started: ${error.message}`))
      )
    const options: Loop.Options<never> = {
      config,
      plugins: [...definition.plugins ?? [], childPlugin(parent, agent, toolCallId)],
      link: { parent, agent, toolCallId, maxDepth },
      name: agent,
      output
    }
    const run = saved === undefined
      ? Loop.start(freshState(definition, params), options)
      : Loop.resume(saved.state, options)
    const result = yield* provideOwn(definition, run).pipe(
      Effect.ensuring(Effect.sync(() => {
        if (parent !== undefined && toolCallId !== undefined) parent.children.delete(toolCallId)
      })),
      Effect.catch((error: AgentError) =>
        // A defect of one of its tools, with `ToolRegistry.FailOnDefect` on: a defect of this call too, so
        // that it ends the calling run as well (the calling model does not work around it).
        error._tag === "ToolFatalError" && error.defect !== undefined
          ? Effect.die(error)
          : failed(agent, `${agent} failed: ${error.message}`)
      )
    )
    return yield* answer(definition, { ...result, messages: result.state.messages })
  })

const freshState = (definition: Common, params: unknown): RunState.RunState =>
  RunState.make({
    runId: globalThis.crypto.randomUUID(),
    system: definition.system,
    messages: [Message.user(promptOf(definition, params))]
  })

/** Whether a saved child has nothing left to do: its last message is a reply, and nothing is queued. */
const finished = (state: RunState.RunState): boolean =>
  Transcript.endsWithReply(state.messages) && state.steering.length === 0 && state.followUps.length === 0

/**
 * The child's config: its own, with a wall-clock budget no later than its
 * parent's deadline (the child's budget counts its whole life, `elapsed`
 * included, as a resumed run's does).
 */
const childConfig = (definition: Common, parent: Lineage.Lineage | undefined, elapsed: number) =>
  Effect.gen(function*() {
    const config = yield* Effect.orDie(AgentConfig.make(definition.config))
    const remaining = parent?.run === undefined ? undefined : yield* remainingMs(parent.run)
    if (remaining === undefined) return config
    const inherited = elapsed + Math.max(1, remaining)
    const own = config.budgets.wallClock
    return own !== null && own <= inherited
      ? config
      : { ...config, budgets: { ...config.budgets, wallClock: inherited } }
  })

/** What is left of a run's wall-clock budget, if it has one. */
const remainingMs = (run: Lineage.Attached): Effect.Effect<number | undefined> =>
  Effect.map(Clock.currentTimeMillis, (now) =>
    run.stops.wallClock === null ? undefined : run.stops.wallClock - Progress.elapsedMs(run.progress, now))

/**
 * What the parent's model reads: the child's answer (its final reply as its
 * output Schema decodes it, or its typed output), or why it did not give one.
 */
const answer = <Out>(
  definition: AnyDefinition<Out>,
  result: { readonly messages: ReadonlyArray<Message.Message>; readonly outcome: Outcome.Outcome; readonly output?: unknown }
): Effect.Effect<Out, SubAgentFailed> => {
  const { outcome } = result
  const agent = definition.name
  if (outcome._tag !== "Completed" && outcome._tag !== "WrappedUp" && outcome._tag !== "Terminated") {
    return failed(agent, `${agent} did not finish: ${describe(outcome)}`, outcome)
  }
  const given = definition.output === Schema.String ? lastReply(result.messages) : result.output
  if (given === undefined) return failed(agent, `${agent} finished without giving its answer`, outcome)
  // Text decoded as a string; a typed output was decoded with the Schema already, and is checked again here.
  return Schema.decodeUnknownEffect(definition.output)(given).pipe(
    Effect.catch((issue) => failed(agent, `${agent}'s answer does not fit its output Schema: ${issue.message}`, outcome))
  )
}

const lastReply = (messages: ReadonlyArray<Message.Message>): string => {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === "assistant") return Message.textOf(messages[i]!)
  }
  return ""
}

const describe = (outcome: Outcome.Outcome): string => {
  switch (outcome._tag) {
    case "MaxTurns":
      return `it reached its cap of ${outcome.limit} turns`
    case "BudgetExceeded":
      return outcome.used >= outcome.limit
        ? `its ${outcome.budget} budget ran out (${outcome.used} of ${outcome.limit})`
        : `its ${outcome.budget} budget had no room for its next model call (${outcome.used} of ${outcome.limit} used)`
    case "LoopDetected":
      return "it kept repeating the same tool calls"
    case "Stagnated":
      return "it kept giving the same reply"
    case "Cancelled":
      return `it was cancelled: ${outcome.reason}`
    case "GuardrailTripped":
      return `its ${outcome.phase} guardrail ${outcome.guardrail} tripped: ${outcome.reason}`
    case "HandedOff":
      return `it handed off to ${outcome.to}`
    default:
      return outcome._tag
  }
}

// -----------------------------------------------------------------------------
// What ties a child to the runs above it
// -----------------------------------------------------------------------------

/**
 * The plugin of a child run: it reports the child's events to the parent as
 * `Nested` (when the parent's events are observed), and adds the usage of
 * each of its replies and its turns to every run above it (their usage,
 * budgets and per-agent figures) when the reply ends, before the reply's
 * reservation is released. The budgets of the runs above are kept by the
 * loop's reservations (see `Reservations`): a child's call reserves against
 * them, and does not start when it does not fit.
 */
const childPlugin = (
  parent: Lineage.Lineage | undefined,
  agent: string,
  toolCallId: string | undefined
): Hooks.Plugin => {
  const path = [...parent?.path ?? [], agent]
  // The calls that started the agents of a `Nested` path, when every one is known.
  const calls = (below: ReadonlyArray<string> | undefined) =>
    toolCallId === undefined || below === undefined ? undefined : [toolCallId, ...below]
  const rollUp = (usage: Message.Usage, turns: number) => {
    for (let lineage = parent; lineage !== undefined; lineage = lineage.parent) {
      const run = lineage.run
      if (run === undefined) continue
      const key = path.slice(lineage.depth).join("/")
      const { progress } = run
      if (usage !== Message.emptyUsage) progress.usage = Message.addUsage(progress.usage, usage)
      const before = progress.agents?.[key]
      progress.agents = {
        ...progress.agents,
        [key]: {
          turns: (before?.turns ?? 0) + turns,
          usage: before === undefined ? usage : Message.addUsage(before.usage, usage)
        }
      }
    }
  }
  const forward = parent?.run?.observed === true ? parent.run.emit : undefined
  return {
    name: "subAgent",
    observe: (event) => {
      if (event._tag === "MessageEnd" && event.message.role === "assistant") rollUp(event.message.usage, 0)
      else if (event._tag === "TurnEnd") rollUp(Message.emptyUsage, 1)
    },
    onEvent: forward === undefined ? undefined : (event) => {
      const nested = event._tag === "Nested"
      const ids = calls(nested ? event.calls : [])
      return forward({
        _tag: "Nested",
        path: nested ? [agent, ...event.path] : [agent],
        ...(ids === undefined ? {} : { calls: ids }),
        event: nested ? event.event : event
      })
    }
  }
}

// -----------------------------------------------------------------------------
// Handoffs
// -----------------------------------------------------------------------------

/** What a handoff tool leaves for the run that follows. */
interface Target {
  readonly definition: Common
  readonly params: unknown
  readonly history: (messages: ReadonlyArray<Message.Message>) => ReadonlyArray<Message.Message>
}

/**
 * A handoff tool's handler: it leaves the target for {@link follow} and halts
 * the run, which ends `HandedOff`.
 *
 * @internal
 */
export const handOff = (
  definition: Common,
  params: unknown,
  history: Target["history"]
): Effect.Effect<string, SubAgentFailed> =>
  Effect.gen(function*() {
    const lineage = yield* Lineage.Current
    if (lineage?.handoffs === undefined || lineage.run === undefined) {
      return yield* failed(
        definition.name,
        `cannot hand off to ${definition.name}: only a run started by Agent.run, Agent.runStream or a session ` +
          `can hand off`
      )
    }
    const target: Target = { definition, params, history }
    lineage.handoffs.pending = { to: definition.name, target }
    Stops.halt(lineage.run.stops, Outcome.handedOff(definition.name), `the run was handed off to ${definition.name}`)
    return `Handed off to ${definition.name}.`
  })

/**
 * The run a handoff starts: the agent handed off to, and its first state
 * (the history the handoff keeps, then its input as a user message).
 *
 * @internal
 */
export interface Next {
  readonly definition: Common
  readonly state: RunState.RunState
}

/**
 * The run the pending handoff starts, from the messages of the run that
 * handed off ({@link follow} makes it once per handoff, and tells the
 * backend of it before it starts).
 *
 * @internal
 */
export const nextRun = (
  pending: NonNullable<Lineage.Handoffs["pending"]>,
  messages: ReadonlyArray<Message.Message>
): Next => {
  // `handOff` left it: a `Target`.
  const { definition, history, params } = pending.target as Target
  const state = RunState.make({
    runId: globalThis.crypto.randomUUID(),
    system: definition.system,
    messages: [...history(messages), Message.user(promptOf(definition, params))]
  })
  return { definition, state }
}

/**
 * Runs `first` and follows the handoffs it ends with: each target runs from
 * the history its handoff keeps, with the handoff's input as the last user
 * message, its own system prompt, tools, model and config, and the run's
 * plugins, steering and sinks (not its `announce`: those open the first run
 * only). The result is the last run's, with `agent` naming who answered;
 * `agent` names the agent `first` runs in, when it is not the application's
 * (a session resumed after a handoff).
 *
 * @internal
 */
export const follow = <R>(
  options: Loop.Options<R>,
  first: (options: Loop.Options<R>) => Effect.Effect<RunState.RunResult, AgentError, Loop.Requirements | R>,
  around: {
    /** The agent `first` runs in, when not the application's. */
    readonly agent?: string | undefined
    /** Told of each handoff before the agent handed off to starts. */
    readonly handedOff?: ((next: Backend.Handoff) => Effect.Effect<void>) | undefined
    /** How each agent's tool calls are made: its registry, wrapped (see `Backend`). */
    readonly tools?: ((registry: ToolRegistry["Service"]) => ToolRegistry["Service"]) | undefined
  } = {}
): Effect.Effect<RunState.RunResult, AgentError, Loop.Requirements | R> =>
  Effect.gen(function*() {
    const handoffs: Lineage.Handoffs = options.handoffs ?? { pending: undefined }
    const firstResult = yield* first({ ...options, handoffs })
    const agent = around.agent
    let result = agent === undefined ? firstResult : { ...firstResult, agent }
    for (let hop = 0; hop < maxHandoffs; hop++) {
      const pending = handoffs.pending
      if (result.outcome._tag !== "HandedOff" || pending === undefined) return result
      handoffs.pending = undefined
      const { definition, state } = nextRun(pending, result.state.messages)
      if (around.handedOff !== undefined) {
        yield* around.handedOff({ agent: definition.name, config: definition.config, state })
      }
      const next = yield* provideOwn(
        definition,
        Loop.start<R>(state, {
          ...options,
          config: definition.config,
          plugins: [...options.plugins ?? [], ...definition.plugins ?? []],
          name: definition.name,
          announce: undefined,
          handoffs
        }),
        around.tools
      )
      result = { ...next, agent: definition.name }
    }
    return result
  })

// -----------------------------------------------------------------------------
// Identity
// -----------------------------------------------------------------------------

/**
 * Where the run in progress sits among agents.
 *
 * @internal
 */
export const identity: Effect.Effect<Identity | undefined> = Effect.flatMap(
  Lineage.Current,
  (lineage) => {
    if (lineage === undefined) return Effect.succeed(undefined)
    const remaining = lineage.run === undefined ? Effect.succeed(undefined) : remainingMs(lineage.run)
    return Effect.flatMap(remaining, (left) =>
      Effect.map(Clock.currentTimeMillis, (now): Identity => ({
        runId: lineage.runId,
        agent: lineage.agent,
        parentRunId: lineage.parent?.runId,
        depth: lineage.depth,
        path: lineage.path,
        deadline: left === undefined ? undefined : now + left
      })))
  }
)
