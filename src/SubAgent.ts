/**
 * Agents that other agents call: a definition (`Agent.define`) is an agent
 * with its own system prompt, tools, model and config; `Agent.asTool` makes it
 * an `effect/ai` tool, and `Agent.handoff` a tool that passes the whole run
 * on to it.
 *
 * A sub-agent tool's handler runs a child run on the calling tool's fiber,
 * with its own transcript: only the input goes in (as its first user
 * message), only its final reply comes back (as the tool's result). The child
 * has its own guards (its config's turn cap, budgets, detectors) and:
 *
 * - an identity ({@link current}): its run id, its parent's, its depth and
 *   path; at most `maxDepth` (default 3) sub-agents deep, a call deeper is
 *   answered that it was not started;
 * - its parent's deadline: its wall-clock budget ends no later than the
 *   parent's;
 * - its parent's stops: interrupting or cancelling the parent interrupts the
 *   child and its tools (their finalizers run);
 * - its parent's `Approvals` service, which decides the child's calls that
 *   need approval;
 * - its usage counted in every run above it (their `usage`, their budgets,
 *   and per agent in their `BudgetSnapshot`'s `agents`): a budget of a run
 *   above it that runs out stops the child before its next model call;
 * - its events reported to the parent's observers as `Nested { path, calls,
 *   event }`, `calls` naming the tool calls that started the agents of `path`
 *   (the trajectory keeps them);
 * - in a `Session`, its state saved with the parent's at each of its turns
 *   and tool calls, so a resumed session continues the child from its last
 *   checkpoint rather than starting it again; in a `DurableSession`, its state
 *   kept when one of its calls waits for an approval, and continued from there
 *   once it is decided ({@link inFlight}, {@link continuing}).
 *
 * A child that does not finish (a turn cap, a budget, a guardrail, a failure)
 * answers with `SubAgentFailed`, an error result the calling model reads.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Tool from "effect/ai/Tool"
import type * as Toolkit from "effect/ai/Toolkit"
import * as AgentTool from "./AgentTool.ts"
import * as Message from "./Message.ts"
import * as RunState from "./RunState.ts"
import * as Lineage from "./internal/lineage.ts"
import * as Internal from "./internal/subAgent.ts"
import type { Definition, Identity, InputSchema } from "./internal/subAgent.ts"

export {
  /**
   * @since 0.1.0
   * @category models
   */
  type Definition,
  /**
   * @since 0.1.0
   * @category models
   */
  type Identity,
  /**
   * @since 0.1.0
   * @category models
   */
  type InputSchema,
  /**
   * @since 0.1.0
   * @category errors
   */
  SubAgentFailed
} from "./internal/subAgent.ts"

/**
 * What defines a sub-agent: a {@link Definition} whose `output` may be left
 * out (the agent then answers with its final reply, as text).
 *
 * @since 0.1.0
 * @category models
 */
export type Options<Name extends string, Input extends InputSchema, Out> =
  & Omit<Definition<Name, Input, Out>, "output">
  & { readonly output?: Schema.Codec<Out, unknown> | undefined }

/**
 * Defines a sub-agent. With an `output` Schema its answer is typed: the
 * agent gives it through its `final_answer` tool (see `Output`), and the
 * calling model reads it encoded; without one, its answer is its final reply.
 *
 * @since 0.1.0
 * @category constructors
 */
export function define<const Name extends string, Input extends InputSchema, Out = string>(
  options: Options<Name, Input, Out>
): Definition<Name, Input, Out>
/**
 * @since 0.1.0
 * @category constructors
 */
export function define(options: Options<string, InputSchema, unknown>): Definition<string, InputSchema, unknown> {
  return { ...options, output: options.output ?? Schema.String }
}

/**
 * The tool that runs a sub-agent: its parameters are the agent's input, its
 * result the agent's final reply, its failure {@link SubAgentFailed}. Replay
 * safe: a resumed session calls it again, and the call continues the child
 * saved with the session.
 *
 * @since 0.1.0
 * @category constructors
 */
export const asTool = <const Name extends string, Input extends InputSchema, Out>(
  definition: Definition<Name, Input, Out>
) =>
  AgentTool.annotate(
    Tool.make(definition.name, {
      description: definition.description,
      parameters: definition.input,
      success: definition.output,
      failure: Internal.SubAgentFailed,
      dependencies: [LanguageModel.LanguageModel]
    }),
    { replaySafe: true }
  )

/**
 * The handler of {@link asTool}'s tool, for its toolkit's `toLayer`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const handler = <const Name extends string, Input extends InputSchema, Out>(
  definition: Definition<Name, Input, Out>
) =>
(
  params: Input["Type"],
  context: Toolkit.HandlerContext<Tool.Any>
): Effect.Effect<Out, Internal.SubAgentFailed, LanguageModel.LanguageModel> =>
  Internal.runChild(definition, params, context.toolCallId)

/**
 * A tool, `transfer_to_<name>`, that passes the run on to a sub-agent: the
 * run ends `HandedOff { to }` after the call's turn, and `Agent.run` goes on
 * with the agent, from the history its handler keeps ({@link handoffHandler})
 * and the call's input as a user message. The result is that agent's run,
 * and its `agent` names it. A run started by `Agent.run`,
 * `Agent.runStream`, a `Session` or a `DurableSession` can hand off (a
 * session saves the agent it was handed to, and resumes in it); in a
 * sub-agent's run the call is answered that it cannot.
 *
 * @since 0.1.0
 * @category constructors
 */
export const handoff = <const Name extends string, Input extends InputSchema, Out>(
  definition: Definition<Name, Input, Out>
) =>
  Tool.make(`transfer_to_${definition.name}`, {
    description: `Hand the conversation over to ${definition.name}: ${definition.description}`,
    parameters: definition.input,
    success: Schema.String,
    failure: Internal.SubAgentFailed
  }).annotate(AgentTool.HandsOff, true)

/**
 * What a handoff keeps of the run's transcript for the agent that takes it
 * over: all of it by default.
 *
 * @since 0.1.0
 * @category models
 */
export interface HandoffOptions {
  readonly history?: ((messages: ReadonlyArray<Message.Message>) => ReadonlyArray<Message.Message>) | undefined
}

/**
 * The handler of {@link handoff}'s tool, for its toolkit's `toLayer`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const handoffHandler = <const Name extends string, Input extends InputSchema, Out>(
  definition: Definition<Name, Input, Out>,
  options: HandoffOptions = {}
) =>
(params: Input["Type"]): Effect.Effect<string, Internal.SubAgentFailed> =>
  Internal.handOff(definition, params, options.history ?? ((messages) => messages))

/**
 * The identity of the run in progress, for its tools and hooks; `undefined`
 * outside a run.
 *
 * @since 0.1.0
 * @category accessors
 */
export const current: Effect.Effect<Identity | undefined> = Internal.identity

// -----------------------------------------------------------------------------
// For backends that record calls
// -----------------------------------------------------------------------------

/**
 * A sub-agent's run saved while it was in flight: its agent and its state,
 * with the sub-agent runs in flight below it saved inside (as a snapshot of
 * a run saves them). {@link inFlight} takes one, {@link continuing}
 * continues it.
 *
 * @since 0.1.0
 * @category schemas
 */
export const Saved = Schema.Struct({ agent: Schema.String, state: RunState.RunState })

/**
 * @since 0.1.0
 * @category models
 */
export type Saved = typeof Saved.Type

/**
 * The sub-agent run in flight under a call of the run in progress (the tool
 * call `toolCallId`), saved as it is now; `undefined` when the call runs
 * none. A backend that stops a call part way (a durable session, when a
 * sub-agent's call waits for an approval) keeps it, and makes the call again
 * with {@link continuing}: the sub-agent goes on from there rather than
 * starting over. Read it from the run's own fiber (a backend's `tools`
 * wrapper, see `Backend`), not from the sub-agent's.
 *
 * @example
 * ```ts
 * import { Deferred, Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { Agent, Approvals, Backend, Message, SubAgent, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const Deploy = Toolkit.make(Tool.make("deploy", {
 *   parameters: Schema.Struct({ env: Schema.String }),
 *   success: Schema.String,
 *   needsApproval: true
 * }))
 * const deployer = Agent.define({
 *   name: "deployer",
 *   description: "Deploys",
 *   input: Schema.Struct({ env: Schema.String }),
 *   tools: ToolRegistry.layer(Deploy).pipe(Layer.provide(Deploy.toLayer({ deploy: ({ env }) => Effect.succeed(env) }))),
 *   model: ScriptedModel.layer([{ toolCalls: [{ id: "c1", name: "deploy", params: { env: "prod" } }] }])
 * })
 * const Kit = Toolkit.make(Agent.asTool(deployer))
 *
 * const program = Effect.gen(function*() {
 *   const asked = yield* Deferred.make<void>()
 *   return yield* Agent.run({ prompt: "Ship it." }).pipe(
 *     Effect.provideService(Backend.Backend, {
 *       // the call stops when its sub-agent asks for an approval, and answers where the sub-agent was
 *       tools: (registry) => ({
 *         ...registry,
 *         invoke: (name, invocation) =>
 *           Effect.raceFirst(
 *             registry.invoke(name, invocation),
 *             Effect.andThen(Deferred.await(asked), Effect.map(SubAgent.inFlight(invocation.toolCallId), (saved) => ({
 *               content: [{ type: "text" as const, text: `${saved?.agent} stopped in turn ${(saved?.state.turn ?? 0) + 1}` }],
 *               isError: false
 *             })))
 *           )
 *       })
 *     }),
 *     Effect.provide(ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({ deployer: SubAgent.handler(deployer) })))),
 *     Effect.provideService(Approvals.Approvals, {
 *       decide: () => Effect.andThen(Deferred.succeed(asked, undefined), Effect.never)
 *     }),
 *     Effect.provide(ScriptedModel.layer([
 *       { toolCalls: [{ id: "r1", name: "deployer", params: { env: "prod" } }] },
 *       { text: "Stopped." }
 *     ]))
 *   )
 * })
 *
 * Effect.runPromise(program).then((result) => console.log(Message.textOf(result.messages[2]!)))
 * // Output: deployer stopped in turn 1
 * ```
 *
 * @since 0.1.0
 * @category backends
 */
export const inFlight = (toolCallId: string): Effect.Effect<Saved | undefined> =>
  Effect.flatMap(Lineage.Current, (lineage) => {
    const child = lineage?.children.get(toolCallId)
    const run = child?.run
    return run === undefined
      ? Effect.succeed(undefined)
      : Effect.map(run.snapshot, (state): Saved => ({ agent: child?.agent ?? "", state }))
  })

/**
 * Makes a call of the run in progress (the tool call `toolCallId`) continue
 * the sub-agent run `saved` ({@link inFlight}) rather than start one: the
 * sub-agent goes on from its state (its calls that had started run again
 * when their tools are `ReplaySafe`, as in a resumed `Session`), with the
 * same run id.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Toolkit } from "effect/ai"
 * import { Agent, Backend, Message, RunState, SubAgent, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * // the researcher answers with the task it read
 * const task = (request: ScriptedModel.Request): string => {
 *   const first = request.prompt.content.find((message) => message.role === "user")
 *   const part = first?.role === "user" ? first.content[0] : undefined
 *   return part?.type === "text" ? part.text : ""
 * }
 * const researcher = Agent.define({
 *   name: "researcher",
 *   description: "Looks things up",
 *   input: Schema.Struct({ topic: Schema.String }),
 *   model: ScriptedModel.layer((_index, request) => ({ text: `Read: ${task(request)}` }))
 * })
 * const Kit = Toolkit.make(Agent.asTool(researcher))
 *
 * // the researcher's run as a backend saved it, on its task
 * const saved: SubAgent.Saved = {
 *   agent: "researcher",
 *   state: RunState.fromPrompt({ prompt: "research the saved topic" })
 * }
 *
 * const program = Agent.run({ prompt: "Look it up." }).pipe(
 *   Effect.provideService(Backend.Backend, {
 *     tools: (registry) => ({
 *       ...registry,
 *       invoke: (name, invocation) => SubAgent.continuing(invocation.toolCallId, saved)(registry.invoke(name, invocation))
 *     })
 *   }),
 *   Effect.provide(ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({ researcher: SubAgent.handler(researcher) })))),
 *   Effect.provide(ScriptedModel.layer([
 *     { toolCalls: [{ id: "r1", name: "researcher", params: { topic: "the new topic" } }] },
 *     { text: "Done." }
 *   ]))
 * )
 *
 * Effect.runPromise(program).then((result) => console.log(Message.textOf(result.messages[2]!)))
 * // Output: Read: research the saved topic
 * ```
 *
 * @since 0.1.0
 * @category backends
 */
export const continuing = (toolCallId: string, saved: Saved) =>
<A, E, R>(call: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Lineage.Current, (lineage) => {
    if (lineage === undefined) return call
    lineage.restored.set(toolCallId, saved)
    // taken by the call's sub-agent when it starts; left to no later call when it did not start one
    return Effect.ensuring(
      call,
      Effect.sync(() => {
        if (lineage.restored.get(toolCallId) === saved) lineage.restored.delete(toolCallId)
      })
    )
  })

/**
 * Counts, in the run in progress and every run above it, usage that
 * sub-agents spent in one of its calls that is not made again: a backend
 * that answers a call from its record (a durable session replaying) reports
 * what the call's sub-agents had spent, so the run's usage and budgets count
 * it as when they reported it.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { Agent, Backend, Message, SubAgent, ToolRegistry } from "effect-agent"
 * import { ScriptedModel } from "effect-agent/testing"
 *
 * const Kit = Toolkit.make(Tool.make("research", { parameters: Schema.Struct({}), success: Schema.String }))
 *
 * const program = Agent.run({ prompt: "Research it." }).pipe(
 *   Effect.provideService(Backend.Backend, {
 *     // the call is answered from a record: its sub-agents spent 100 input and 20 output tokens when it was made
 *     tools: (registry) => ({
 *       ...registry,
 *       invoke: () =>
 *         Effect.as(SubAgent.countSpent({ ...Message.emptyUsage, input: 100, output: 20 }), {
 *           content: [{ type: "text" as const, text: "found it" }],
 *           isError: false
 *         })
 *     })
 *   }),
 *   Effect.provide(ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({ research: () => Effect.succeed("") })))),
 *   Effect.provide(ScriptedModel.layer([
 *     { toolCalls: [{ id: "r1", name: "research", params: {} }], usage: { input: 10, output: 5 } },
 *     { text: "Done.", usage: { input: 10, output: 5 } }
 *   ]))
 * )
 *
 * Effect.runPromise(program).then((result) => console.log(result.usage.input, result.usage.output))
 * // Output: 120 30
 * ```
 *
 * @since 0.1.0
 * @category backends
 */
export const countSpent = (usage: Message.Usage): Effect.Effect<void> =>
  Effect.flatMap(Lineage.Current, (lineage) =>
    Effect.sync(() => {
      for (let at = lineage; at !== undefined; at = at.parent) {
        if (at.run !== undefined) at.run.progress.usage = Message.addUsage(at.run.progress.usage, usage)
      }
    }))
