/**
 * effect-agent: a typed, hookable agent runtime for Effect 4.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as Agent from "./Agent.ts"
/** @since 0.1.0 */
export * as AgentConfig from "./AgentConfig.ts"
/** @since 0.1.0 */
export * as AgentError from "./AgentError.ts"
/** @since 0.1.0 */
export * as AgentEvent from "./AgentEvent.ts"
/** @since 0.1.0 */
export * as AgentTool from "./AgentTool.ts"
/** @since 0.1.0 */
export * as Approvals from "./Approvals.ts"
/** @since 0.1.0 */
export * as ContextWindow from "./ContextWindow.ts"
/** @since 0.1.0 */
export * as Guards from "./Guards.ts"
/** @since 0.1.0 */
export * as Hooks from "./Hooks.ts"
/** @since 0.1.0 */
export * as McpTools from "./McpTools.ts"
/** @since 0.1.0 */
export * as Message from "./Message.ts"
/** @since 0.1.0 */
export * as Outcome from "./Outcome.ts"
/** @since 0.1.0 */
export * as Pricing from "./Pricing.ts"
/** @since 0.1.0 */
export * as RunState from "./RunState.ts"
/** @since 0.1.0 */
export * as Steering from "./Steering.ts"
/** @since 0.1.0 */
export * as ToolArguments from "./ToolArguments.ts"
/** @since 0.1.0 */
export * as ToolRegistry from "./ToolRegistry.ts"
/** @since 0.1.0 */
export * as Sandbox from "./sandbox/Sandbox.ts"
/** @since 0.1.0 */
export * as BuiltinTools from "./sandbox/BuiltinTools.ts"
/** @since 0.1.0 */
export * as CheckpointStore from "./session/CheckpointStore.ts"
/** @since 0.1.0 */
export * as Session from "./session/Session.ts"
/** @since 0.1.0 */
export * as Trajectory from "./session/Trajectory.ts"
/** @since 0.1.0 */
export * as OpenAiChat from "./providers/OpenAiChat.ts"
/** @since 0.1.0 */
export * as OpenAiResponses from "./providers/OpenAiResponses.ts"
/** @since 0.1.0 */
export * as Anthropic from "./providers/Anthropic.ts"
/** @since 0.1.0 */
export * as ProviderConfig from "./providers/ProviderConfig.ts"
/** @since 0.1.0 */
export * as Retry from "./providers/Retry.ts"
