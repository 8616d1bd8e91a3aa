/**
 * The agent server: durable sessions over HTTP with their events as
 * Server-Sent Events (`AgentServer`), and the inspector page it serves
 * (`Inspector`).
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as AgentServer from "./AgentServer.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Inspector from "./Inspector.ts"
