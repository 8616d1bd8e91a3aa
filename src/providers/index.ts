/**
 * The model providers: `effect/ai` `LanguageModel` layers over OpenAI's Chat
 * Completions (and every compatible server), OpenAI's Responses API and
 * Anthropic's Messages API, the options they share (`Provider`), and the
 * prices they put each call's cost with (`Pricing`). They
 * need an `HttpClient` (on Node, `NodeHttpClient.layerUndici`). `Redaction`
 * keeps an API key out of the text a server or a CLI echoes.
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 * @category modules
 */
export * as Anthropic from "./Anthropic.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as OpenAiChat from "./OpenAiChat.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as OpenAiResponses from "./OpenAiResponses.ts"
/**
 * @since 0.1.0
 * @category modules
 */
/**
 * @since 0.1.0
 * @category modules
 */
export * as Pricing from "./Pricing.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Provider from "./Provider.ts"
/**
 * @since 0.1.0
 * @category modules
 */
export * as Redaction from "./Redaction.ts"
