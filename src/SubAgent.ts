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
 * - in a durable session, its state saved with the parent's at each of its
 *   turns and tool calls, so a resumed session continues the child from its
 *   last checkpoint rather than starting it again.
 *
 * A child that does not finish (a turn cap, a budget, a guardrail, a failure)
 * answers with `SubAgentFailed`, an error result the calling model reads.
 *
 * @since 0.1.0
 */
import { type Effect, Schema } from "effect"
import { LanguageModel, Tool, type Toolkit } from "effect/ai"
import * as AgentTool from "./AgentTool.ts"
import type * as Message from "./Message.ts"
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
