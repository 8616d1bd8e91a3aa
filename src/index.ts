/**
 * effect-agent: a typed, hookable agent runtime for Effect 4. This entry
 * point is the core: the loop, its config, messages, events, tools, hooks,
 * guards, steering and approvals. The platform parts have their own:
 * `effect-agent/providers` (model layers), `effect-agent/sandbox` (the
 * sandbox and built-in tools), `effect-agent/session` (durable sessions),
 * `effect-agent/testing` (a scripted model) and `effect-agent/cli` (the
 * command).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as Agent from "./Agent.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as AgentConfig from "./AgentConfig.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as AgentError from "./AgentError.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as AgentEvent from "./AgentEvent.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as AgentTool from "./AgentTool.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Approvals from "./Approvals.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Backend from "./Backend.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as ContextWindow from "./ContextWindow.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Guards from "./Guards.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Guardrail from "./Guardrail.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Hooks from "./Hooks.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as McpTools from "./McpTools.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Message from "./Message.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Outcome from "./Outcome.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Output from "./Output.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as RunState from "./RunState.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Steering from "./Steering.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as SubAgent from "./SubAgent.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Telemetry from "./Telemetry.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as ToolArguments from "./ToolArguments.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as ToolRegistry from "./ToolRegistry.ts"
