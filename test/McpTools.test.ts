import { NodeHttpClient, NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Layer, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { Agent, AgentTool, Hooks, McpTools, type Message, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { createServer } from "node:net"
import { fileURLToPath } from "node:url"
import { captureLogs } from "./support.ts"

// Both servers are dev dependencies, run offline with this Node.
const require = createRequire(import.meta.url)
const everything = require.resolve("@modelcontextprotocol/server-everything/dist/index.js")
const filesystem = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js")
const mediaServer = fileURLToPath(new URL("fixtures/mcp-media-server.mjs", import.meta.url))

const everythingTools = new Set(["echo", "get-sum", "trigger-long-running-operation"])

/** The registry over server-everything (its echo, get-sum and long operation), tools prefixed `ev_`. */
const everythingRegistry = (command = ChildProcess.make(process.execPath, [everything, "stdio"])) =>
  Layer.effect(
    ToolRegistry.ToolRegistry,
    Effect.map(
      McpTools.stdio(command, { prefix: "ev_", filter: (tool) => everythingTools.has(tool.name) }),
      (entry) => ToolRegistry.make(entry)
    )
  ).pipe(Layer.provide(NodeServices.layer))

/** What the model read for each tool call of a run, in order. */
const toolResults = (messages: ReadonlyArray<Message.Message>) =>
  messages.flatMap((message) =>
    message.role === "toolResult"
      ? [{
        tool: message.toolName,
        isError: message.isError,
        text: message.content.map((part) => (part.type === "text" ? part.text : `[${part.type}]`)).join("")
      }]
      : []
  )

describe.concurrent("McpTools", () => {
  it.live("registers the server's tools with a prefix and the loop annotations from its hints", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.ToolRegistry
      assert.deepStrictEqual(
        registry.tools.map((tool) => [tool.name, AgentTool.settings(tool).execution]),
        [["ev_echo", "parallel"], ["ev_get-sum", "parallel"], ["ev_trigger-long-running-operation", "parallel"]]
      )
      assert.strictEqual(registry.get("ev_echo")?.description, "Echoes back the input string")
    }).pipe(Effect.provide(everythingRegistry())))

  it.live("a full Agent.run calls echo and get-sum; the transcript holds the server's answers", () =>
    Effect.gen(function*() {
      const result = yield* Agent.run({ prompt: "Echo hi, then add 2 and 3." })
      assert.strictEqual(result.outcome._tag, "Completed")
      assert.deepStrictEqual(toolResults(result.messages), [
        { tool: "ev_echo", isError: false, text: "Echo: hi" },
        { tool: "ev_get-sum", isError: false, text: "The sum of 2 and 3 is 5." },
        {
          tool: "ev_echo",
          isError: true,
          text: "MCP error -32602: Input validation error: Invalid arguments for tool echo: " +
            "Invalid input: expected string, received number at message"
        }
      ])
      const requests = yield* ScriptedModel.ScriptedModel.use((model) => model.requests)
      assert.deepStrictEqual(requests[0]?.tools, ["ev_echo", "ev_get-sum", "ev_trigger-long-running-operation"])
    }).pipe(
      Effect.provide(everythingRegistry()),
      Effect.provide(ScriptedModel.layer([
        {
          toolCalls: [
            { name: "ev_echo", params: { message: "hi" } },
            { name: "ev_get-sum", params: { a: 2, b: 3 } }
          ]
        },
        { toolCalls: [{ name: "ev_echo", params: { message: 1 } }] },
        { text: "hi; 2 + 3 = 5" }
      ]))
    ))

  it.live("images in a result reach the model as image parts of the tool result; audio is named in the text", () =>
    Effect.gen(function*() {
      const registry = (command: ChildProcess.Command, name: string) =>
        Layer.effect(
          ToolRegistry.ToolRegistry,
          Effect.map(McpTools.stdio(command, { filter: (tool) => tool.name === name }), (entry) => ToolRegistry.make(entry))
        )
      const run = (command: ChildProcess.Command, name: string) =>
        Effect.gen(function*() {
          const result = yield* Agent.run({ prompt: "Show me." })
          const requests = yield* ScriptedModel.ScriptedModel.use((model) => model.requests)
          return { result, request: requests[1]! }
        }).pipe(
          Effect.provide(registry(command, name)),
          Effect.provide(ScriptedModel.layer([{ toolCalls: [{ id: "m", name, params: {} }] }, { text: "seen" }]))
        )

      // server-everything's get-tiny-image: text, a PNG, text
      const tiny = yield* run(ChildProcess.make(process.execPath, [everything, "stdio"]), "get-tiny-image")
      const answer = tiny.result.messages.find((m) => m.role === "toolResult")!
      if (answer.role !== "toolResult") return assert.fail("expected a tool result")
      assert.isFalse(answer.isError)
      assert.deepStrictEqual(answer.content.map((part) => part.type === "text" ? part.text : [part.mediaType, part.source.type]), [
        "Here's the image you requested:",
        ["image/png", "base64"],
        "The image above is the MCP logo."
      ])
      const image = answer.content[1]!
      assert.match(image.type === "image" && image.source.type === "base64" ? image.source.data : "", /^iVBORw0KGgo/)
      // the model's request carries the image as a file part of the tool result
      const sent = tiny.request.prompt.content.flatMap((message) =>
        message.role === "tool" ? message.content.flatMap((part) => part.type === "tool-result" ? [part] : []) : []
      )[0]!
      assert.deepStrictEqual(sent.modelOutput?.map((part) => part.type === "text" ? part.type : part.mediaType), [
        "text",
        "image/png",
        "text"
      ])

      // a server answering with text, an image and audio: the audio is named, never dropped silently
      const media = yield* run(ChildProcess.make(process.execPath, [mediaServer]), "media")
      assert.deepStrictEqual(toolResults(media.result.messages), [
        {
          tool: "media",
          isError: false,
          text: "Here they are:[image][audio audio/wav, 16 bytes, omitted]\nThat is all."
        }
      ])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("server-filesystem on a temp directory: writes and reads a real file", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-mcp-fs-" }))
      const note = `${dir}/note.txt`
      const registry = Layer.effect(
        ToolRegistry.ToolRegistry,
        Effect.map(
          McpTools.stdio(ChildProcess.make(process.execPath, [filesystem, dir]), { prefix: "fs_" }),
          (entry) => ToolRegistry.make(entry)
        )
      )
      const result = yield* Agent.run({ prompt: "Write a note, then read it back." }).pipe(
        Effect.provide(registry),
        Effect.provide(ScriptedModel.layer([
          { toolCalls: [{ name: "fs_write_file", params: { path: note, content: "from the agent\n" } }] },
          { toolCalls: [{ name: "fs_read_text_file", params: { path: note } }] },
          { toolCalls: [{ name: "fs_read_text_file", params: { path: "/etc/passwd" } }] },
          { text: "done" }
        ]))
      )
      assert.strictEqual(yield* fs.readFileString(note), "from the agent\n")
      const [write, read, denied] = toolResults(result.messages)
      assert.deepStrictEqual(write, { tool: "fs_write_file", isError: false, text: `Successfully wrote to ${note}` })
      assert.deepStrictEqual(read, { tool: "fs_read_text_file", isError: false, text: "from the agent\n" })
      assert.strictEqual(denied?.isError, true)
      assert.match(denied?.text ?? "", /Access denied - path outside allowed directories/)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a server that dies mid-call gives error results, a warning each, and the run goes on", () => {
    const logs = captureLogs()
    return Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-mcp-dies-" })
      const pidFile = `${dir}/server.pid`
      const command = ChildProcess.make("sh", [
        "-c",
        `echo $$ > ${pidFile}; exec "${process.execPath}" ${everything} stdio`
      ])
      // Kill the server 300 ms into the long operation (20 s).
      let killedAt = 0
      const killer = Hooks.plugin({
        name: "killer",
        onEvent: (event) =>
          event._tag === "ToolExecutionStart" && event.toolName === "ev_trigger-long-running-operation"
            ? Effect.forkDetach(Effect.delay(
              Effect.sync(() => {
                killedAt = Date.now()
                process.kill(Number(readFileSync(pidFile, "utf8")), "SIGKILL")
              }),
              "300 millis"
            )).pipe(Effect.asVoid)
            : Effect.void
      })
      const result = yield* Agent.run({ prompt: "Run the long operation.", plugins: [killer] }).pipe(
        Effect.provide(everythingRegistry(command)),
        Effect.provide(ScriptedModel.layer([
          { toolCalls: [{ name: "ev_trigger-long-running-operation", params: { duration: 20, steps: 2 } }] },
          { toolCalls: [{ name: "ev_echo", params: { message: "still there?" } }] },
          { text: "The server is gone." }
        ]))
      )
      // the run went on once the server was gone, well before its 20 s operation would have ended
      assert.isAbove(killedAt, 0)
      assert.isBelow(Date.now() - killedAt, 15_000, "the run waited for the dead server")
      assert.strictEqual(result.outcome._tag, "Completed")
      const results = toolResults(result.messages)
      assert.deepStrictEqual(results.map((r) => [r.tool, r.isError]), [
        ["ev_trigger-long-running-operation", true],
        ["ev_echo", true]
      ])
      for (const r of results) assert.match(r.text, /^MCP server mcp-servers\/everything is unavailable: /)
      // a warning for each call that failed, with what the client noticed first: the server's stdout closing, or
      // its stdin refusing the next request (a race the machine's load decides)
      assert.strictEqual(logs.lines.length, 2, logs.lines.join("\n"))
      for (const line of logs.lines) {
        assert.match(line, /^Warn: MCP server mcp-servers\/everything is unavailable: MCP (server closed stdout|stdin failed)$/)
      }
    }).pipe(Effect.provide([NodeServices.layer, logs.layer]))
  })

  it.live("over Streamable HTTP too", () =>
    Effect.gen(function*() {
      const port = yield* freePort
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      const server = yield* spawner.spawn(ChildProcess.make(process.execPath, [everything, "streamableHttp"], {
        env: { PORT: String(port) },
        extendEnv: true
      }))
      // The server says on stderr when it listens.
      yield* server.stderr.pipe(
        Stream.decodeText(),
        Stream.takeUntil((text) => text.includes("listening")),
        Stream.runDrain
      )
      const entry = yield* McpTools.http(`http://127.0.0.1:${port}/mcp`, {
        prefix: "ev_",
        filter: (tool) => tool.name === "get-sum"
      })
      const result = yield* Agent.run({ prompt: "Add 20 and 22." }).pipe(
        Effect.provide(ToolRegistry.layerEntries(entry)),
        Effect.provide(ScriptedModel.layer([
          { toolCalls: [{ name: "ev_get-sum", params: { a: 20, b: 22 } }] },
          { text: "42" }
        ]))
      )
      assert.deepStrictEqual(toolResults(result.messages), [
        { tool: "ev_get-sum", isError: false, text: "The sum of 20 and 22 is 42." }
      ])
    }).pipe(Effect.provide(Layer.mergeAll(NodeServices.layer, NodeHttpClient.layerUndici))))
})

/** A TCP port nobody listens on right now. */
const freePort = Effect.callback<number>((resume) => {
  const probe = createServer()
  probe.listen(0, "127.0.0.1", () => {
    const address = probe.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    probe.close(() => resume(Effect.succeed(port)))
  })
})
