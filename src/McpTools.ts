/**
 * Tools from MCP servers, as entries of a `ToolRegistry`: connect to a server
 * over stdio ({@link stdio}) or Streamable HTTP ({@link http}), or take a
 * connected `effect/ai` `McpClient` ({@link fromClient}), and register its
 * tools beside the application's.
 *
 * `effect/ai`'s `McpClient.toolkit` is not used as is: it fails on image
 * content. Here a result's text and images reach the model as they are
 * (images as image parts of the tool result; audio and other binary content
 * named in the text), every failure (a tool-reported error, a server that
 * died, a timeout) becomes an error result the model reads and a warning in
 * the log, never a failed or hung run, and the loop annotations follow the
 * server's hints: read-only tools run in parallel and may be replayed, others
 * run one at a time.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { ChildProcess } from "effect/process"
 * import { McpTools, ToolRegistry } from "effect-agent"
 *
 * const Tools = Layer.effect(
 *   ToolRegistry.ToolRegistry,
 *   Effect.map(
 *     McpTools.stdio(ChildProcess.make("npx", ["-y", "@modelcontextprotocol/server-everything"]), { prefix: "ev_" }),
 *     (entry) => ToolRegistry.make(entry)
 *   )
 * )
 * ```
 *
 * @since 0.1.0
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as McpClient from "effect/ai/McpClient"
import * as McpClientError from "effect/ai/McpClientError"
import * as McpProtocol from "effect/ai/McpProtocol"
import type * as McpSchema from "effect/ai/McpSchema"
import * as Prompt from "effect/ai/Prompt"
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import * as Base64 from "effect/encoding/Base64"
import type * as HttpClient from "effect/http/HttpClient"
import type * as ChildProcess from "effect/process/ChildProcess"
import type * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as AgentTool from "./AgentTool.ts"
import * as ToolRegistry from "./ToolRegistry.ts"

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
 * @category options
 */
export interface Options {
  readonly prefix?: string | undefined
  readonly filter?: ((tool: McpSchema.Tool) => boolean) | undefined
  readonly timeout?: Duration.Input | undefined
  readonly needsApproval?: boolean | undefined
}

/**
 * {@link Options}, and how to connect: the MCP protocol revision (default
 * 2025-11-25) and how long connecting and listing the tools may take (default
 * 60 seconds).
 *
 * @since 0.1.0
 * @category options
 */
export interface ConnectOptions extends Options {
  readonly protocol?: McpProtocol.ProtocolAdapter<McpClient.ProtocolVersion> | undefined
  readonly connectTimeout?: Duration.Input | undefined
}

/**
 * {@link ConnectOptions} and the HTTP headers sent with every request.
 *
 * @since 0.1.0
 * @category options
 */
export interface HttpOptions extends ConnectOptions {
  readonly headers?: Readonly<Record<string, string>> | undefined
}

const validName = /^[a-zA-Z0-9_-]{1,64}$/

/** A model-facing name: the prefix and the server's name, other characters replaced by `_`. */
const modelName = (prefix: string, name: string): string => `${prefix}${name}`.replace(/[^a-zA-Z0-9_-]/g, "_")

const optionalText = (text: string | undefined, before: string, after = "") =>
  text === undefined ? "" : `${before}${text}${after}`

/** MCP content as text the model reads; content it cannot show as text is named, not dropped silently. */
const describeBlock = (block: McpSchema.ContentBlock): string => {
  switch (block.type) {
    case "text":
      return block.text
    case "resource_link":
      return `${block.title ?? block.name}: ${block.uri}${optionalText(block.description, "\n")}`
    case "resource":
      return "text" in block.resource
        ? block.resource.text
        : `[resource ${block.resource.uri}${optionalText(block.resource.mimeType, " (", ")")} omitted]`
    case "image":
    case "audio":
      return `[${block.type} ${block.mimeType}, ${block.data.length} bytes, omitted]`
  }
}

/** A tool-reported error, as text. */
const toText = (result: McpSchema.CallToolResult): string => {
  if (result.content.length > 0) return result.content.map(describeBlock).join("\n")
  return result.structuredContent === undefined ? "" : JSON.stringify(result.structuredContent)
}

/**
 * What a call of an MCP tool returns to the loop: its content in order, text
 * (consecutive blocks joined by a line break) and images (base64, with their
 * media type). Audio and other binary content are named in the text.
 */
const Content = Schema.Array(Schema.Union([
  Schema.Struct({ type: Schema.Literal("text"), text: Schema.String }),
  Schema.Struct({ type: Schema.Literal("image"), mediaType: Schema.String, data: Schema.String })
]))
type Content = typeof Content.Type

const toContent = (result: McpSchema.CallToolResult): Content => {
  const parts: Array<Content[number]> = []
  const pushText = (text: string) => {
    const last = parts.at(-1)
    if (last?.type === "text") parts[parts.length - 1] = { type: "text", text: `${last.text}\n${text}` }
    else parts.push({ type: "text", text })
  }
  for (const block of result.content) {
    if (block.type === "image" && block.mimeType.startsWith("image/")) {
      parts.push({ type: "image", mediaType: block.mimeType, data: Base64.encode(block.data) })
    } else pushText(describeBlock(block))
  }
  if (parts.length === 0) {
    pushText(result.structuredContent === undefined ? "" : JSON.stringify(result.structuredContent))
  }
  return parts
}

/** The content as the parts the model is given (images as image parts of the tool result). */
const toModelOutput = (content: Content): ReadonlyArray<Prompt.ToolModelOutputPart> =>
  content.map((part) =>
    part.type === "text"
      ? Prompt.makePart("text", { text: part.text })
      : Prompt.makePart("file", { mediaType: part.mediaType, data: part.data })
  )

const describeFailure = (server: string, error: McpClientError.McpClientError): string => {
  switch (error.reason._tag) {
    case "TransportError":
    case "ClosedError":
      return `MCP server ${server} is unavailable: ${error.message}`
    case "TimeoutError":
      return `MCP server ${server} did not answer in time: ${error.message}`
    default:
      return `MCP server ${server} failed: ${error.message}`
  }
}

const isArguments = Schema.is(Schema.Record(Schema.String, Schema.Unknown))

/**
 * The tools of a connected MCP server (`effect/ai`'s `McpClient`, over any
 * transport) as a registry entry. Each call goes to the server; its result
 * reaches the model as the server gave it.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { McpClient } from "effect/ai"
 * import { McpTools, ToolRegistry } from "effect-agent"
 *
 * const Tools = Layer.effect(
 *   ToolRegistry.ToolRegistry,
 *   Effect.gen(function*() {
 *     const client = yield* McpClient.McpClient
 *     return ToolRegistry.make(yield* McpTools.fromClient(client, { prefix: "docs_" }))
 *   })
 * )
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromClient = Effect.fnUntraced(function*(client: McpClient.McpClient, options?: Options) {
  const server = client.serverInfo?.name ?? "server"
  const descriptors = (yield* client.listTools()).filter(options?.filter ?? (() => true))
  const callOptions = options?.timeout === undefined ? undefined : { timeout: options.timeout }
  const tools: Array<Tool.Any> = []
  const handlers: Record<string, (params: unknown) => Effect.Effect<Content, string>> = {}
  for (const descriptor of descriptors) {
    const name = modelName(options?.prefix ?? "", descriptor.name)
    if (!validName.test(name) || Object.hasOwn(handlers, name)) {
      return yield* new McpClientError.McpClientError({
        reason: new McpClientError.ConfigurationError({
          description: `MCP tool ${descriptor.name} of ${server} has an invalid or duplicate model name: ${name}`
        })
      })
    }
    const readOnly = descriptor.annotations?.readOnlyHint === true
    tools.push(AgentTool.annotate(
      Tool.dynamic(name, {
        parameters: descriptor.inputSchema,
        description: descriptor.description ?? descriptor.title,
        success: Content,
        failure: Schema.String,
        failureMode: "return",
        needsApproval: options?.needsApproval === true,
        toModelOutput
      }).annotate(Tool.Strict, false),
      {
        // The server's hints: read-only tools may run beside others and be replayed.
        execution: readOnly ? "parallel" : "sequential",
        replaySafe: readOnly || descriptor.annotations?.idempotentHint === true
      }
    ))
    handlers[name] = (params) =>
      isArguments(params)
        ? client.callTool({ tool: descriptor, arguments: params }, callOptions).pipe(
          Effect.catch((error) =>
            Effect.logWarning(describeFailure(server, error)).pipe(
              Effect.andThen(Effect.fail(describeFailure(server, error)))
            )
          ),
          Effect.flatMap((result) =>
            result.isError === true ? Effect.fail(toText(result)) : Effect.succeed(toContent(result))
          )
        )
        : Effect.fail("the arguments must be a JSON object")
  }
  const kit = Toolkit.make(...tools)
  const entry: ToolRegistry.Entry = yield* ToolRegistry.fromToolkit(kit).pipe(
    Effect.provideContext(yield* kit.toHandlers(handlers))
  )
  return entry
})

const clientInfo = { name: "effect-agent", version: "0.1.0" }

const connect = <R>(
  transport: Effect.Effect<McpClient.Transport, McpClientError.McpClientError, R>,
  options: ConnectOptions | undefined
): Effect.Effect<ToolRegistry.Entry, McpClientError.McpClientError, R | Scope.Scope> =>
  Effect.gen(function*() {
    const client = yield* McpClient.make({ ...clientInfo, timeout: options?.connectTimeout }).pipe(
      Effect.provideService(McpClient.Transport, yield* transport)
    )
    return yield* fromClient(client, options)
  })

const protocolOf = (options: ConnectOptions | undefined) => options?.protocol ?? McpProtocol.v2025_11_25

/**
 * Starts an MCP server as a subprocess (stdio transport) and registers its
 * tools ({@link fromClient}). The server lives as long as the scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const stdio = (
  command: ChildProcess.Command,
  options?: ConnectOptions
): Effect.Effect<
  ToolRegistry.Entry,
  McpClientError.McpClientError,
  Scope.Scope | ChildProcessSpawner.ChildProcessSpawner
> => connect(McpClient.stdio({ command, protocol: protocolOf(options) }), options)

/**
 * Connects to an MCP server over Streamable HTTP and registers its tools
 * ({@link fromClient}). The connection lives as long as the scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const http = (
  url: string | URL,
  options?: HttpOptions
): Effect.Effect<ToolRegistry.Entry, McpClientError.McpClientError, Scope.Scope | HttpClient.HttpClient> =>
  connect(McpClient.http({ url, protocol: protocolOf(options), headers: options?.headers }), options)
