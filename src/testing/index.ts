/**
 * Test doubles for applications built on effect-agent.
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as ScriptedModel from "./ScriptedModel.ts"
