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
import { Context, type Duration, Effect, Layer, type Scope, type Stream } from "effect"
import {
  AiError,
  type McpClient,
  type McpClientError,
  type McpProtocol,
  type McpSchema,
  type Tool,
  Toolkit
} from "effect/ai"
import type { HttpClient } from "effect/http"
import type { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Mcp from "./internal/mcp.ts"
import * as ToolRun from "./internal/toolRun.ts"

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
   * Runs one call whose arguments are already decoded (the loop's path):
   * the final result, with preliminary results passed to `onPreliminary`.
   * Handlers from `toolkit.toLayer` run in the caller's fiber; others go
   * through `Toolkit.handle`.
   */
  readonly run: (
    name: string,
    call: { readonly params: unknown; readonly rawParams: unknown; readonly toolCallId: string },
    onPreliminary: (encoded: unknown) => Effect.Effect<void>
  ) => Effect.Effect<Tool.HandlerResult<Tool.Any>, unknown>
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
  /** Tools whose handlers the loop can run directly, by name. */
  readonly runners?: ReadonlyMap<string, ToolRun.Runner> | undefined
}

/**
 * Erases a toolkit's static types so toolkits of different types can share a
 * registry.
 *
 * @since 0.1.0
 */
export const erase = <Tools extends Record<string, Tool.Any>>(
  kit: Toolkit.WithHandler<Tools>,
  handlers?: Context.Context<never>
): Entry => {
  const runners = new Map<string, ToolRun.Runner>()
  if (handlers !== undefined) {
    for (const tool of Object.values<Tool.Any>(kit.tools)) {
      const record = ToolRun.findHandler(handlers, tool)
      if (record !== undefined) runners.set(tool.name, ToolRun.direct(tool, record))
    }
  }
  return {
    tools: kit.tools,
    // `Toolkit.handle` is typed by tool name and encoded parameters. A registry
    // holds toolkits of different types and receives untyped JSON from the model,
    // which `handle` validates against the tool's Schema at run time: this is the
    // one place where the static types are erased.
    handle: kit.handle as unknown as Handle,
    runners
  }
}

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
  const byName = new Map<string, { readonly tool: Tool.Any; readonly handle: Handle; readonly run: ToolRun.Runner }>()
  for (const entry of entries) {
    for (const tool of Object.values(entry.tools)) {
      const run = entry.runners?.get(tool.name) ?? ToolRun.viaHandle(entry.handle, tool.name)
      byName.set(tool.name, { tool, handle: entry.handle, run })
    }
  }
  const notFound = (name: string) =>
    AiError.make({
      module: "ToolRegistry",
      method: "handle",
      reason: new AiError.ToolNotFoundError({ toolName: name, availableTools: Array.from(byName.keys()) })
    })
  const tools = Array.from(byName.values(), (registered) => registered.tool)
  const record: Record<string, Tool.Any> = {}
  for (const tool of tools) record[tool.name] = tool
  return {
    tools,
    get: (name) => byName.get(name)?.tool,
    handle: (name, params, toolCallId) => {
      const registered = byName.get(name)
      return registered === undefined ? Effect.fail(notFound(name)) : registered.handle(name, params, toolCallId)
    },
    run: (name, call, onPreliminary) => {
      const registered = byName.get(name)
      return registered === undefined
        ? Effect.fail(notFound(name))
        : registered.run(call.params, call.rawParams, call.toolCallId, onPreliminary)
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
  Layer.effect(
    ToolRegistry,
    Effect.gen(function*() {
      const kit = yield* Toolkit.merge(...toolkits)
      return make(erase(kit, yield* Effect.context<never>()))
    })
  )

/**
 * The registry as a layer, from toolkits with handlers already built.
 *
 * @since 0.1.0
 */
export const layerEntries = (...entries: ReadonlyArray<Entry>): Layer.Layer<ToolRegistry> =>
  Layer.succeed(ToolRegistry, make(...entries))

// -----------------------------------------------------------------------------
// MCP
// -----------------------------------------------------------------------------

/**
 * How the tools of an MCP server are registered.
 *
 * - `prefix`: put before each tool's name (`"fs_"`: `read_file` becomes
 *   `fs_read_file`); characters a model API refuses become `_`.
 * - `filter`: keep only the tools it accepts.
 * - `timeout`: how long one call may wait for the server (unset: the run's
 *   `toolTimeout` applies).
 * - `needsApproval`: every tool of the server needs approval.
 *
 * @since 0.1.0
 */
export interface McpOptions {
  readonly prefix?: string | undefined
  readonly filter?: ((tool: McpSchema.Tool) => boolean) | undefined
  readonly timeout?: Duration.Input | undefined
  readonly needsApproval?: boolean | undefined
}

/**
 * {@link McpOptions}, and how to connect: the MCP protocol revision
 * (default 2025-11-25) and how long connecting and listing the tools may take
 * (default 60 seconds).
 *
 * @since 0.1.0
 */
export interface McpConnectOptions extends McpOptions {
  readonly protocol?: McpProtocol.ProtocolAdapter<McpClient.ProtocolVersion> | undefined
  readonly connectTimeout?: Duration.Input | undefined
}

/**
 * {@link McpConnectOptions} and the HTTP headers sent with every request.
 *
 * @since 0.1.0
 */
export interface McpHttpOptions extends McpConnectOptions {
  readonly headers?: Readonly<Record<string, string>> | undefined
}

/**
 * The tools of a connected MCP server (`effect/ai`'s `McpClient`, over any
 * transport) as a registry entry. Each call goes to the server; its result
 * reaches the model as the server gave it: text, and images as image parts
 * of the tool result (audio and other binary content is named in the text).
 * A tool-reported error, a server that died and a
 * timeout all become error results the model reads (and a warning in the
 * log), never a failed or hung run. The server's hints set the loop
 * annotations: read-only tools run in parallel, others one at a time.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { McpClient } from "effect/ai"
 * import { ToolRegistry } from "effect-agent"
 *
 * const Tools = Layer.effect(
 *   ToolRegistry.ToolRegistry,
 *   Effect.gen(function*() {
 *     const client = yield* McpClient.McpClient
 *     return ToolRegistry.make(yield* ToolRegistry.fromMcp(client, { prefix: "docs_" }))
 *   })
 * )
 * ```
 *
 * @since 0.1.0
 */
export const fromMcp = (
  client: McpClient.McpClient,
  options?: McpOptions
): Effect.Effect<Entry, McpClientError.McpClientError> => Effect.map(Mcp.toolkit(client, options), erase)

/**
 * Starts an MCP server as a subprocess (stdio transport) and registers its
 * tools ({@link fromMcp}). The server lives as long as the scope.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { ChildProcess } from "effect/process"
 * import { ToolRegistry } from "effect-agent"
 *
 * const Tools = Layer.effect(
 *   ToolRegistry.ToolRegistry,
 *   Effect.map(
 *     ToolRegistry.fromMcpStdio(ChildProcess.make("npx", ["-y", "@modelcontextprotocol/server-everything"])),
 *     (entry) => ToolRegistry.make(entry)
 *   )
 * )
 * ```
 *
 * @since 0.1.0
 */
export const fromMcpStdio = (
  command: ChildProcess.Command,
  options?: McpConnectOptions
): Effect.Effect<Entry, McpClientError.McpClientError, Scope.Scope | ChildProcessSpawner.ChildProcessSpawner> =>
  Effect.map(Mcp.stdio(command, options), erase)

/**
 * Connects to an MCP server over Streamable HTTP and registers its tools
 * ({@link fromMcp}). The connection lives as long as the scope.
 *
 * @since 0.1.0
 */
export const fromMcpHttp = (
  url: string | URL,
  options?: McpHttpOptions
): Effect.Effect<Entry, McpClientError.McpClientError, Scope.Scope | HttpClient.HttpClient> =>
  Effect.map(Mcp.http(url, options), erase)
