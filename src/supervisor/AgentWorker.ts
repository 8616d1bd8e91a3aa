/**
 * The default worker of a supervised run: our own loop. One supervised turn
 * is one inner run (`Agent.run`, then `Agent.runContinue` over the same
 * transcript with the supervisor's message appended) until the model stops
 * asking for tools. In the plan phase the model sees only the read-only
 * tools: the built-in readers (`read_file`, `list_files`, `grep`) and the
 * tools named in `readOnlyTools`.
 *
 * Each inner run is given the worker's options (system prompt, config,
 * plugins and guardrails, name, the typed output's settings) and, as its
 * budgets, at most what is left of the supervised run's (`Room`): it stops
 * before a model call past them, or at the wall clock, with every call
 * answered. The reply says how the inner run ended (`outcome`), so that the
 * supervised run never hides it.
 *
 * The inner runs' events (tool calls, messages, guards) reach the supervised
 * run's observers; their own `AgentStart` / `AgentEnd` do not (the supervised
 * run has one of each), but for a handoff's: the `AgentEnd` of the run that
 * handed off (`HandedOff`) and the `AgentStart` of the agent handed off to,
 * as `Agent.run`'s observers see them.
 *
 * A turn whose run hands off (`Agent.handoff`) ends in the agent handed off
 * to, and the worker's next turns go on in it (its tools, model and plugins),
 * as `Agent.runContinue` does with its `agent`: give its definition in
 * `agents`.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Agent from "../Agent.ts"
import type * as AgentConfig from "../AgentConfig.ts"
import { type AgentError, ConfigError } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import type * as Outcome from "../Outcome.ts"
import type * as Output from "../Output.ts"
import type * as RunState from "../RunState.ts"
import type * as Steering from "../Steering.ts"
import type * as SubAgent from "../SubAgent.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import * as SupervisorOutcome from "./SupervisorOutcome.ts"
import { type TurnReply, type TurnRequest, WorkerError } from "./Worker.ts"

/**
 * The tools every plan phase keeps: the built-in tools that only read.
 *
 * @since 0.1.0
 * @category constants
 */
export const builtinReaders: ReadonlyArray<string> = ["read_file", "list_files", "grep"]

/**
 * What the agent worker is made of.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<R = never> {
  readonly system?: string | undefined
  readonly config?: AgentConfig.Input | undefined
  readonly plugins?: ReadonlyArray<Hooks.PluginInput<R>> | undefined
  /** The agent's name, in its spans (see `Agent.run`'s `name`). */
  readonly name?: string | undefined
  /** Invalid typed answers the model may correct in a turn asked for one (see `Agent.run`'s `outputRetries`). */
  readonly outputRetries?: number | undefined
  /** How a typed answer is asked for (see `Agent.run`'s `outputMode`). */
  readonly outputMode?: Output.Mode | undefined
  /** Tools (besides the built-in readers) the plan phase may use. */
  readonly readOnlyTools?: ReadonlyArray<string> | undefined
  /** The run id of the inner runs (the supervised run's, when the supervisor makes the worker). */
  readonly runId?: string | undefined
  /** The transcript to go on from (a resumed session). */
  readonly state?: RunState.RunState | undefined
  /**
   * The agents the worker's run may hand off to (`Agent.handoff`): after a handoff, the next turns go on in the
   * agent that answered, as `Agent.runContinue` does with its `agent`. A turn to go on in an agent this list
   * lacks fails with `ConfigError` (field `agents`).
   */
  readonly agents?: ReadonlyArray<SubAgent.Definition<string, SubAgent.InputSchema, unknown>> | undefined
  /** The agent `state` is in, when a handoff passed it on (its name; its definition in `agents`). */
  readonly handedOffTo?: string | undefined
  /**
   * The steering of the inner runs: `steer` reaches the model before its next call, `followUp` restarts a turn's
   * run when it would stop, `cancel` ends the turn's run (`Cancelled`). A supervised run gives its own.
   */
  readonly steering?: Steering.Service | undefined
}

/**
 * The agent worker: a worker whose turn may fail with any `AgentError` (the
 * model failed, a tool failed fatally), whose transcript the supervisor keeps
 * in its checkpoint, and which can give a typed plan ({@link TypedRequest}).
 *
 * @since 0.1.0
 * @category models
 */
export interface AgentWorker<R = never> {
  readonly _tag: "AgentWorker"
  readonly name: string
  readonly turn: (request: TypedRequest) => Effect.Effect<TypedReply, AgentError | WorkerError, Agent.Requirements | R>
  /** The transcript and counters after the last turn (`undefined` before the first). */
  readonly state: Effect.Effect<RunState.RunState | undefined>
  /** The agent the transcript is in, when a handoff passed it on (its name); `undefined` in the worker's own. */
  readonly agent: Effect.Effect<string | undefined>
}

/**
 * What is left of the supervised run's budgets: the most a turn may use of
 * tokens (input and output), US dollars and wall-clock milliseconds (absent:
 * no such budget).
 *
 * @since 0.1.0
 * @category models
 */
export interface Room {
  readonly tokens?: number | undefined
  readonly costUsd?: number | undefined
  readonly wallClock?: number | undefined
}

/**
 * A turn that may ask for a typed answer: with `output`, the inner run is
 * `Agent.run({ output })` (the model answers through `final_answer`, checked
 * against the Schema), and the reply's text is the answer's JSON.
 *
 * @since 0.1.0
 * @category models
 */
export interface TypedRequest extends TurnRequest {
  readonly output?: Output.Any | undefined
  /**
   * The transcript already holds `message` and part of the turn (a session
   * saved in the middle of it): the inner run continues it rather than
   * appending the message again.
   */
  readonly continue?: boolean | undefined
  /** What is left of the supervised run's budgets: the inner run's budgets are at most this. */
  readonly budgets?: Room | undefined
  /**
   * The message is these follow-ups (its text is theirs): the inner run is given them queued, and delivers them
   * as `Agent.runContinue` delivers a follow-up (its `beforeDelivery` hooks, `FollowUpDelivered`) rather than
   * taking `message` as a new user message.
   */
  readonly followUps?: ReadonlyArray<Message.Message> | undefined
}

/**
 * What a turn asked for a typed answer produced: the answer, decoded
 * (`output`) and in its JSON form (`encoded`).
 *
 * @since 0.1.0
 * @category models
 */
export interface TypedReply extends TurnReply {
  readonly output?: { readonly value: unknown; readonly encoded: unknown } | undefined
  /** How the inner run ended (our loop's turns): the supervisor ends the run when it did not end by itself. */
  readonly outcome?: Outcome.Outcome | undefined
}

/**
 * Where a worker reports the events of its own work, so that they reach the
 * supervised run's observers. The supervisor sets it around each turn.
 *
 * @since 0.1.0
 * @category references
 */
export const Events = Context.Reference<(event: AgentEvent.AgentEvent) => Effect.Effect<void>>(
  "effect-agent/supervisor/AgentWorker/Events",
  { defaultValue: () => () => Effect.void }
)

/** The registry the plan phase sees: the read-only tools of `registry`, nothing else. */
const readOnly = (registry: ToolRegistry.Service, allowed: ReadonlySet<string>): ToolRegistry.Service => {
  const tools: Record<string, ToolRegistry.Service["tools"][number]> = {}
  for (const tool of registry.tools) if (allowed.has(tool.name)) tools[tool.name] = tool
  return ToolRegistry.make({ tools, invoke: registry.invoke })
}

/**
 * Each turn with a message of its own asks for its own answer: a typed plan's output state does not carry over to
 * the next turn. (A turn that goes on with follow-ups keeps it: the run it continues stopped at that answer, and
 * goes on from there as `Agent.runContinue` does.)
 */
const withoutOutput = (state: RunState.RunState): RunState.RunState => {
  const { output: _, ...rest } = state
  return rest
}

/** The least of a limit of the config and one that `room` leaves (`null`/`undefined`: none). */
const least = (given: number | null | undefined, left: number | undefined): number | null | undefined =>
  left === undefined ? given : given === null || given === undefined ? left : Math.min(given, left)

const millisOf = (input: Duration.Input | null | undefined): number | null | undefined =>
  input === null || input === undefined ? input : Option.getOrUndefined(Option.map(Duration.fromInput(input), Duration.toMillis))

/**
 * The config of an inner run: the worker's, its budgets at most what the supervised run has left, counted as the
 * inner run counts them (over its whole transcript: what `prior` used, plus the room).
 */
const withRoom = (
  config: AgentConfig.Input | undefined,
  room: Room | undefined,
  prior: RunState.RunState | undefined
): AgentConfig.Input | undefined => {
  if (room === undefined || (room.tokens === undefined && room.costUsd === undefined && room.wallClock === undefined)) {
    return config
  }
  const usage = prior?.usage ?? Message.emptyUsage
  const over = (before: number, left: number | undefined) => left === undefined ? undefined : before + left
  const budgets = config?.budgets
  const tokens = least(budgets?.tokens, over(Message.totalTokens(usage), room.tokens))
  const costUsd = least(budgets?.costUsd, over(usage.cost ?? 0, room.costUsd))
  const wallClock = least(millisOf(budgets?.wallClock), over(prior?.elapsedMs ?? 0, room.wallClock))
  return {
    ...config,
    budgets: {
      ...budgets,
      // A budget is at least 1 (a positive limit): the supervisor checks its own before each turn.
      ...(tokens === undefined ? {} : { tokens: tokens === null ? null : Math.max(1, Math.floor(tokens)) }),
      ...(costUsd === undefined ? {} : { costUsd: costUsd === null ? null : Math.max(Number.EPSILON, costUsd) }),
      ...(wallClock === undefined ? {} : { wallClock: wallClock === null ? null : Math.max(1, Math.ceil(wallClock)) })
    }
  }
}

const lastText = (messages: ReadonlyArray<Message.Message>): string => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!
    if (message.role === "assistant") return Message.textOf(message)
  }
  return ""
}

/**
 * A worker on our own loop.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <R = never>(options: Options<R> = {}): AgentWorker<R> => {
  let current = options.state
  let handedOffTo = current === undefined ? undefined : options.handedOffTo
  const allowed = new Set([...builtinReaders, ...(options.readOnlyTools ?? [])])
  const turn = (request: TypedRequest) =>
    Effect.gen(function*() {
      const emit = yield* Events
      // A handoff's boundary is forwarded: the end of the run that handed off, the start of the one it went to.
      let handedOff = false
      const forward: Hooks.Plugin = {
        name: "supervisor",
        onEvent: (event) => {
          if (event._tag === "AgentEnd") {
            handedOff = event.outcome?._tag === "HandedOff"
            return handedOff ? emit(event) : Effect.void
          }
          if (event._tag !== "AgentStart") return emit(event)
          if (!handedOff) return Effect.void
          handedOff = false
          return emit(event)
        }
      }
      const plugins = [...(options.plugins ?? []), forward]
      const followUps = request.followUps ?? []
      const prior = current === undefined || followUps.length > 0 ? current : withoutOutput(current)
      const output = request.output
      const last = prior?.messages.at(-1)
      const ended = request.continue === true && output === undefined && last?.role === "assistant" &&
        !Message.hasToolCalls(last) && prior?.steering.length === 0 && prior.followUps.length === 0
      if (ended) {
        // The turn had ended when it was saved: its reply is the last one (its usage is in the saved one).
        const reply: TypedReply = {
          text: Message.textOf(last),
          usage: { inputTokens: 0, outputTokens: 0 },
          resumeToken: undefined
        }
        return reply
      }
      // After a handoff the transcript is the agent's that answered: the turn goes on in it.
      const agent = prior === undefined || handedOffTo === undefined
        ? undefined
        : options.agents?.find((definition) => definition.name === handedOffTo)
      if (prior !== undefined && handedOffTo !== undefined && agent === undefined) {
        const known = (options.agents ?? []).map((definition) => definition.name)
        return yield* new ConfigError({
          field: "agents",
          rule: `the worker's run was handed off to the agent ${handedOffTo}, and goes on in it: give its ` +
            `definition in agents (given: ${known.length === 0 ? "none" : known.join(", ")})`
        })
      }
      const continued: Agent.ContinueOptions<R | Agent.Requirements, unknown> = {
        config: withRoom(options.config, request.budgets, prior),
        plugins,
        output,
        outputRetries: options.outputRetries,
        outputMode: options.outputMode,
        steering: options.steering,
        name: options.name,
        agent
      }
      const run = prior === undefined
        ? Agent.run({ ...continued, prompt: request.message, system: options.system, runId: options.runId })
        : Agent.runContinue(
          request.continue === true
            ? prior
            : followUps.length > 0
            ? { ...prior, followUps: [...prior.followUps, ...followUps] }
            : { ...prior, messages: [...prior.messages, Message.user(request.message)] },
          continued
        )
      const result = yield* request.phase === "plan"
        ? Effect.flatMap(ToolRegistry.ToolRegistry, (registry) =>
          Effect.provideService(run, ToolRegistry.ToolRegistry, readOnly(registry, allowed)))
        : run
      current = result.state
      handedOffTo = result.agent
      const before = prior?.usage ?? Message.emptyUsage
      const encoded = result.state.output?.value
      // A run that did not end by itself has no answer to give: the reply says how it ended.
      const stopped = SupervisorOutcome.fromInner(result.outcome, []) !== undefined
      if (output !== undefined && !stopped && (result.output === undefined || encoded === undefined)) {
        return yield* new WorkerError({
          worker: "agent",
          reason: "decode",
          message: `the ${request.phase} turn ended without an answer matching its Schema (${result.outcome._tag})`
        })
      }
      const typed = output === undefined || stopped || encoded === undefined
        ? undefined
        : { value: result.output, encoded }
      const reply: TypedReply = {
        text: typed === undefined ? lastText(result.messages) : JSON.stringify(typed.encoded, null, 2),
        output: typed,
        usage: {
          inputTokens: result.usage.input - before.input,
          outputTokens: result.usage.output - before.output
        },
        resumeToken: undefined,
        costUsd: result.usage.cost === undefined ? undefined : result.usage.cost - (before.cost ?? 0),
        outcome: result.outcome
      }
      return reply
    })
  return {
    _tag: "AgentWorker",
    name: "agent",
    turn,
    state: Effect.sync(() => current),
    agent: Effect.sync(() => handedOffTo)
  }
}
