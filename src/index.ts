/**
 * effect-agent: a typed, hookable agent runtime for Effect 4.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as AgentError from "./AgentError.ts"
/** @since 0.1.0 */
export * as AgentTool from "./AgentTool.ts"
/** @since 0.1.0 */
export * as Message from "./Message.ts"
/** @since 0.1.0 */
export * as ToolArguments from "./ToolArguments.ts"
/** @since 0.1.0 */
export * as Pricing from "./Pricing.ts"
/** @since 0.1.0 */
export * as OpenAiChat from "./providers/OpenAiChat.ts"
/** @since 0.1.0 */
export * as Anthropic from "./providers/Anthropic.ts"
/** @since 0.1.0 */
export * as OpenAiResponses from "./providers/OpenAiResponses.ts"
