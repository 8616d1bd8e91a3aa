/**
 * The tools a run may call: one service over any number of `effect/ai`
 * toolkits with handlers (the application's, the built-in ones, tools from
 * MCP servers), with lookup by name and the definitions the model is given.
 *
 * @example
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { Tool, Toolkit } from "effect/ai"
 * import { ToolRegistry } from "effect-agent"
 *
 * const Add = Tool.make("add", {
 *   parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
 *   success: Schema.Finite
 * })
 * const Math = Toolkit.make(Add)
 * const Tools = ToolRegistry.layer(Math).pipe(
 *   Layer.provide(Math.toLayer({ add: ({ a, b }) => Effect.succeed(a + b) }))
 * )
 * ```
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, type Stream } from "effect"
import { AiError, type Tool, Toolkit } from "effect/ai"

/**
 * Runs one call of a registered tool: decodes the arguments with the tool's
 * Schema, runs the handler, and streams its preliminary and final results.
 *
 * @since 0.1.0
 */
export type Handle = (
  name: string,
  params: unknown,
  toolCallId: string
) => Effect.Effect<Stream.Stream<Tool.HandlerResult<Tool.Any>, unknown>, AiError.AiError>

/**
 * The registry's service shape.
 *
 * @since 0.1.0
 */
export interface Service {
  /** The registered tools, in registration order (a later tool replaces an earlier one of the same name). */
  readonly tools: ReadonlyArray<Tool.Any>
  /** The tool registered under a name. */
  readonly get: (name: string) => Tool.Any | undefined
  /** Runs one call (see {@link Handle}). */
  readonly handle: Handle
  /**
   * The tools as a toolkit for `LanguageModel`, which sends their definitions
   * to the model. The loop runs calls itself, so this toolkit's `handle` is
   * never used and fails if called. (Its static type lists no tools: the
   * registry's tools are only known at run time.)
   */
  readonly toolkit: Toolkit.WithHandler<{}>
}

/**
 * The registry service.
 *
 * @since 0.1.0
 */
export class ToolRegistry extends Context.Service<ToolRegistry, Service>()("effect-agent/ToolRegistry") {}

/**
 * A toolkit with handlers whose static types have been erased (see {@link erase}).
 *
 * @since 0.1.0
 */
export interface Entry {
  readonly tools: Record<string, Tool.Any>
  readonly handle: Handle
}

/**
 * Erases a toolkit's static types so toolkits of different types can share a
 * registry.
 *
 * @since 0.1.0
 */
export const erase = <Tools extends Record<string, Tool.Any>>(kit: Toolkit.WithHandler<Tools>): Entry => ({
  tools: kit.tools,
  // `Toolkit.handle` is typed by tool name and encoded parameters. A registry
  // holds toolkits of different types and receives untyped JSON from the model,
  // which `handle` validates against the tool's Schema at run time: this is the
  // one place where the static types are erased.
  handle: kit.handle as unknown as Handle
})

const notUsed: Toolkit.WithHandler<{}>["handle"] = (name) =>
  Effect.fail(AiError.make({
    module: "ToolRegistry",
    method: "toolkit.handle",
    reason: new AiError.ToolConfigurationError({
      toolName: String(name),
      description: "effect-agent runs tool calls itself: call the tool through ToolRegistry.handle"
    })
  }))

/**
 * Builds a registry from toolkits with handlers (later tools replace earlier
 * ones of the same name).
 *
 * @since 0.1.0
 */
export const make = (...entries: ReadonlyArray<Entry>): Service => {
  const byName = new Map<string, { readonly tool: Tool.Any; readonly handle: Handle }>()
  for (const entry of entries) {
    for (const tool of Object.values(entry.tools)) byName.set(tool.name, { tool, handle: entry.handle })
  }
  const tools = Array.from(byName.values(), (registered) => registered.tool)
  const record: Record<string, Tool.Any> = {}
  for (const tool of tools) record[tool.name] = tool
  return {
    tools,
    get: (name) => byName.get(name)?.tool,
    handle: (name, params, toolCallId) => {
      const registered = byName.get(name)
      return registered === undefined
        ? Effect.fail(AiError.make({
          module: "ToolRegistry",
          method: "handle",
          reason: new AiError.ToolNotFoundError({ toolName: name, availableTools: Array.from(byName.keys()) })
        }))
        : registered.handle(name, params, toolCallId)
    },
    toolkit: { tools: record, handle: notUsed }
  }
}

/**
 * A registry with no tools.
 *
 * @since 0.1.0
 */
export const empty: Service = make()

/**
 * The registry from one or more `effect/ai` toolkits; their handlers come
 * from `toolkit.toLayer(...)` layers.
 *
 * @since 0.1.0
 */
export const layer = <const Toolkits extends ReadonlyArray<Toolkit.Any>>(
  ...toolkits: Toolkits
): Layer.Layer<ToolRegistry, never, Tool.HandlersFor<Toolkit.MergedTools<Toolkits>>> =>
  Layer.effect(ToolRegistry, Effect.map(Toolkit.merge(...toolkits), (kit) => make(erase(kit))))

/**
 * The registry as a layer, from toolkits with handlers already built.
 *
 * @since 0.1.0
 */
export const layerEntries = (...entries: ReadonlyArray<Entry>): Layer.Layer<ToolRegistry> =>
  Layer.succeed(ToolRegistry, make(...entries))
