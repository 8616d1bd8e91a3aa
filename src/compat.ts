/**
 * Every place the library relies on something of `effect` that its public
 * API does not promise, in one module, each with why the public API cannot
 * serve. `test/Compat.test.ts` fails when the installed `effect` changes
 * under one of them. Providers keep theirs apart (`providers/internal/`),
 * since they depend on `effect` alone.
 *
 * This module imports `effect` and nothing of the library, and no user
 * imports it (no entry point exports it): a leaf beside the core, which the
 * core uses (`ToolRegistry` for handlers, `Message` for `Prompt` literals),
 * so it lives beside the core modules rather than in the run's `internal/`.
 *
 * @internal
 */
import type * as Context from "effect/Context"
import * as Predicate from "effect/Predicate"
import type * as Prompt from "effect/ai/Prompt"
import type * as Tool from "effect/ai/Tool"

// -----------------------------------------------------------------------------
// Tool handlers: toolkit.toLayer's records
// -----------------------------------------------------------------------------

/**
 * The handler `toolkit.toLayer(...)` (or `toolkit.toHandlers`) registered for
 * a tool: its record in the context, a `Tool.Handler` kept under the tool's
 * `id`; `undefined` when the context has none.
 *
 * Why not the public API: `Toolkit.handle` runs each call on a forked fiber
 * behind a queue and a stream (about 60 µs of CPU per call, measured: fifty
 * times what decoding, running and encoding cost, more than the rest of a
 * turn) and decodes the arguments again, which the loop has decoded already.
 * `ToolRegistry` runs the handler in the caller's fiber by `Toolkit.handle`'s
 * rules; only where the record is kept is not public (`Tool.Handler`, its
 * shape, is).
 *
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const handlerOf = (tool: Tool.Any, handlers: Context.Context<never>): Tool.Handler<string> | undefined => {
  const record: unknown = handlers.mapUnsafe.get(tool.id)
  return isHandler(record) ? record : undefined
}

const isHandler = (u: unknown): u is Tool.Handler<string> =>
  Predicate.hasProperty(u, "handler") && typeof u.handler === "function" &&
  Predicate.hasProperty(u, "context") && Predicate.hasProperty(u.context, "mapUnsafe")

// -----------------------------------------------------------------------------
// Prompt parts and messages as literals
// -----------------------------------------------------------------------------

/**
 * `Prompt`'s part and message markers, spelled out.
 *
 * Why not the public API: `Prompt.makePart` and `Prompt.makeMessage` build the
 * same values with a generic spread and a computed key, which V8 builds the
 * slow way; the transcript converts each message once, when it is appended,
 * and these are the parts of every turn (text, tool calls, tool results).
 * Measured against `makePart` / `makeMessage` on the bench's workload the
 * difference is small (up to a few percent of a turn), so only these hot
 * shapes are written by hand; every other part is made with
 * `Prompt.makePart`. The markers are part of `Prompt`'s types: if effect
 * changes one, these literals stop type-checking, and the test compares them
 * with what `makePart` / `makeMessage` build.
 */
const PartMarker = "~effect/ai/Prompt/Part" as const
const MessageMarker = "~effect/ai/Prompt/Message" as const

/**
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const textPart = (text: string): Prompt.TextPart => ({
  "~effect/ai/Prompt/Part": PartMarker,
  type: "text",
  text,
  options: {}
})

/**
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const toolCallPart = (
  id: string,
  name: string,
  params: unknown,
  options: Prompt.ProviderOptions
): Prompt.ToolCallPart => ({
  "~effect/ai/Prompt/Part": PartMarker,
  type: "tool-call",
  id,
  name,
  params,
  providerExecuted: false,
  options
})

/**
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const toolResultPart = (
  id: string,
  name: string,
  isFailure: boolean,
  result: string
): Prompt.ToolResultPart => ({
  "~effect/ai/Prompt/Part": PartMarker,
  type: "tool-result",
  id,
  name,
  isFailure,
  result,
  providerExecuted: false,
  options: {}
})

/**
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const systemMessage = (content: string): Prompt.SystemMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "system",
  content,
  options: {}
})

/**
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const userMessage = (content: ReadonlyArray<Prompt.UserMessagePart>): Prompt.UserMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "user",
  content,
  options: {}
})

/**
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const assistantMessage = (content: ReadonlyArray<Prompt.AssistantMessagePart>): Prompt.AssistantMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "assistant",
  content,
  options: {}
})

/**
 * @since 0.1.0
 * @category compat
 * @internal
 */
export const toolMessage = (content: ReadonlyArray<Prompt.ToolMessagePart>): Prompt.ToolMessage => ({
  "~effect/ai/Prompt/Message": MessageMarker,
  role: "tool",
  content,
  options: {}
})
