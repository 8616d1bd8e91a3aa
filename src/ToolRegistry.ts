/**
 * The tools a run may call: one service over any number of `effect/ai`
 * toolkits with handlers (the application's, the built-in ones, tools from
 * MCP servers, see `McpTools`), with lookup by name, the definitions the
 * model is given, and the one way a call of a tool is invoked.
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
import { Context, Effect, Layer } from "effect"
import { type Tool, Toolkit } from "effect/ai"
import type { ToolFatalError } from "./AgentError.ts"
import * as Message from "./Message.ts"
import * as Feedback from "./internal/tools/feedback.ts"
import type { Invocation, Output } from "./internal/toolRun.ts"
import * as ToolRun from "./internal/toolRun.ts"

export type { Invocation, Output } from "./internal/toolRun.ts"

/**
 * Invokes one call of a tool by its name. Every failure is an error
 * {@link Output} the model reads, except a fatal one (the tool is
 * `AgentTool.Fatal`, or its handler failed or died with
 * `AgentTool.FatalFailure`), which fails with `ToolFatalError` and ends the run.
 *
 * @since 0.1.0
 * @category models
 */
export type Invoke = (name: string, invocation: Invocation) => Effect.Effect<Output, ToolFatalError>

/**
 * The registry's service shape.
 *
 * @since 0.1.0
 * @category services
 */
export interface Service {
  /** The registered tools, in registration order (a later tool replaces an earlier one of the same name). */
  readonly tools: ReadonlyArray<Tool.Any>
  /** The tool registered under a name. */
  readonly get: (name: string) => Tool.Any | undefined
  /** The tools by name: what the model is told it may call (their names, descriptions and JSON Schemas). */
  readonly definitions: Readonly<Record<string, Tool.Any>>
  /** Runs one call (see {@link Invoke}); a name that is not registered gives an error output. */
  readonly invoke: Invoke
}

/**
 * The registry service.
 *
 * @since 0.1.0
 * @category services
 */
export class ToolRegistry extends Context.Service<ToolRegistry, Service>()("effect-agent/ToolRegistry") {}

/**
 * Tools and the way to invoke them: what {@link make} merges. Made by
 * {@link fromToolkit} and by `McpTools`; `invoke` is asked only for the
 * names in `tools`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Entry {
  readonly tools: Readonly<Record<string, Tool.Any>>
  readonly invoke: Invoke
}

/**
 * A toolkit and the handlers its `toolkit.toLayer(...)` layer provides, as a
 * registry entry (erasing its static types, so toolkits of different types can
 * share a registry).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromToolkit = <Tools extends Record<string, Tool.Any>>(
  toolkit: Toolkit.Toolkit<Tools>
): Effect.Effect<Entry, never, Tool.HandlersFor<Tools>> =>
  // The handlers are found in the context under each tool's id (the requirement above puts them there).
  Effect.map(Effect.context<never>(), (handlers) => {
    const invokers = ToolRun.invokers(toolkit.tools, handlers)
    const tools: Readonly<Record<string, Tool.Any>> = toolkit.tools
    return {
      tools,
      invoke: (name, invocation) => {
        const invoke = invokers.get(name)
        return invoke === undefined ? unknownTool(name, Object.values(tools)) : invoke(invocation)
      }
    }
  })

const unknownTool = (name: string, available: ReadonlyArray<Tool.Any>): Effect.Effect<Output> =>
  Effect.succeed({ content: [Message.text(Feedback.unknownTool(name, available).text)], isError: true })

/**
 * Builds a registry from entries (later tools replace earlier ones of the
 * same name).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (...entries: ReadonlyArray<Entry>): Service => {
  const byName = new Map<string, { readonly tool: Tool.Any; readonly invoke: Invoke }>()
  for (const entry of entries) {
    for (const tool of Object.values(entry.tools)) byName.set(tool.name, { tool, invoke: entry.invoke })
  }
  const tools = Array.from(byName.values(), (registered) => registered.tool)
  const definitions: Record<string, Tool.Any> = {}
  for (const tool of tools) definitions[tool.name] = tool
  return {
    tools,
    get: (name) => byName.get(name)?.tool,
    definitions,
    invoke: (name, invocation) => {
      const registered = byName.get(name)
      return registered === undefined ? unknownTool(name, tools) : registered.invoke(name, invocation)
    }
  }
}

/**
 * A registry with no tools.
 *
 * @since 0.1.0
 * @category constructors
 */
export const empty: Service = make()

/**
 * The registry from one or more `effect/ai` toolkits; their handlers come
 * from `toolkit.toLayer(...)` layers.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <const Toolkits extends ReadonlyArray<Toolkit.Any>>(
  ...toolkits: Toolkits
): Layer.Layer<ToolRegistry, never, Tool.HandlersFor<Toolkit.MergedTools<Toolkits>>> =>
  Layer.effect(ToolRegistry, Effect.map(fromToolkit(Toolkit.merge(...toolkits)), (entry) => make(entry)))

/**
 * The registry as a layer, from entries already built.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerEntries = (...entries: ReadonlyArray<Entry>): Layer.Layer<ToolRegistry> =>
  Layer.succeed(ToolRegistry, make(...entries))
