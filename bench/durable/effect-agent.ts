/**
 * effect-agent's rows: `Agent.run` (no persistence), `Session` on files
 * (`CheckpointStore.fileSystem`), and `DurableSession` on effect/cluster and
 * PostgreSQL as one process runs it: `ClusterWorkflowEngine` on a
 * `SingleRunner` (SQL message and runner storage) over `@effect/sql-pg`'s
 * `PgClient` (its default pool, 10 connections), the store
 * `DurableSession.layerSqlStore` (tables made by `migrateSql`). Effect's
 * default sharding settings.
 *
 * The model is `ScriptedModel` (request recording off), one per process,
 * shared by the sessions: each call finds its session's script by the prompt
 * (the session id) and the turn by the assistant messages in the request.
 */
import { NodeCrypto } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, ManagedRuntime, Redacted, Schema } from "effect"
import { Prompt, Tool, Toolkit } from "effect/ai"
import { ClusterWorkflowEngine, SingleRunner } from "effect/cluster"
import { WorkflowEngine } from "effect/workflow"
import { Agent, Message, ToolRegistry } from "../../src/index.ts"
import { CheckpointStore, DurableSession, Session } from "../../src/session/index.ts"
import { ScriptedModel } from "../../src/testing/index.ts"
import { NOOP, noopResult, type Script } from "../workload.ts"
import type { Entry, Row, RowOptions, Scripts } from "./workload.ts"

const Params = Schema.Struct({ i: Schema.Finite })
const Noop = Tool.make(NOOP, { description: "Does nothing.", parameters: Params, success: Schema.String })
const Kit = Toolkit.make(Noop)

const tools = (scripts: Scripts) =>
  ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
    [NOOP]: ({ i }) =>
      Effect.sync(() => {
        scripts.toolRuns++
        return noopResult(i)
      })
  })))

/** Checks the request ended with the previous turn's tool result. */
const checkRequest = (script: Script, prompt: Prompt.Prompt): void => {
  const last = prompt.content[prompt.content.length - 1]
  if (last?.role !== "tool") return script.check(undefined, undefined)
  const result = last.content[last.content.length - 1]
  if (result?.type !== "tool-result") return script.check(undefined, undefined)
  script.check(result.id, typeof result.result === "string" ? result.result : JSON.stringify(result.result))
}

/** The process's model: the session's script, found by its prompt. */
const model = (scripts: Scripts) =>
  ScriptedModel.layer((_index, request) => {
    const first = request.prompt.content.find((message) => message.role === "user")
    const prompt = first === undefined
      ? ""
      : typeof first.content === "string"
      ? first.content
      : first.content.map((part) => (part.type === "text" ? part.text : "")).join("")
    const script = scripts.of(prompt)
    checkRequest(script, request.prompt)
    scripts.calls++
    const turn = script.next()
    // The text in one piece (a string would stream word by word).
    return { text: [turn.text], toolCalls: turn.calls.map((c) => ({ id: c.id, name: c.name, rawParams: c.json })) }
  }, { record: false })

const config = (toolTurns: number) => ({ maxTurns: toolTurns + 1, graceTurns: 0 })

/** effect-agent's messages as transcript entries. */
export const entries = (messages: ReadonlyArray<Message.Message>): ReadonlyArray<Entry> =>
  messages.map((message): Entry => {
    switch (message.role) {
      case "user":
        return { role: "user", text: Message.textOf(message), calls: [] }
      case "assistant":
        return {
          role: "assistant",
          text: Message.textOf(message),
          calls: Message.toolCalls(message).map((c) => `${c.id} ${c.name} ${JSON.stringify(c.params)}`)
        }
      case "toolResult":
        return { role: "tool", text: Message.textOf(message), calls: [], toolCallId: message.toolCallId }
      default:
        return { role: "user", text: `unexpected ${message.role} message`, calls: [] }
    }
  })

const completed = (name: string, result: { readonly outcome: { readonly _tag: string } }) => {
  if (result.outcome._tag !== "Completed") throw new Error(`${name}: the run ended with ${result.outcome._tag}`)
}

/** `Agent.run`, no persistence: the result is kept in memory for the check. */
export const agentRun = async ({ scripts }: RowOptions): Promise<Row> => {
  const runtime = ManagedRuntime.make(Layer.mergeAll(model(scripts), tools(scripts)))
  const results = new Map<string, ReadonlyArray<Message.Message>>()
  const name = "effect-agent `Agent.run`, no persistence"
  return {
    name,
    async session(sessionId, toolTurns) {
      const result = await runtime.runPromise(Agent.run({ prompt: sessionId, config: config(toolTurns) }))
      completed(name, result)
      results.set(sessionId, result.messages)
    },
    async readBack(sessionId) {
      return { transcript: entries(results.get(sessionId) ?? []), events: 0 }
    },
    close: () => runtime.dispose()
  }
}

/** `Session.run` on `CheckpointStore.fileSystem` (fsynced head and journal). */
export const sessionFiles = async ({ scripts, dir }: RowOptions): Promise<Row> => {
  const runtime = ManagedRuntime.make(Layer.mergeAll(model(scripts), tools(scripts), CheckpointStore.layerFileSystem(dir)))
  const name = "effect-agent `Session` on files"
  return {
    name,
    async session(sessionId, toolTurns) {
      completed(name, await runtime.runPromise(Session.run({ id: sessionId, prompt: sessionId, config: config(toolTurns) })))
    },
    async readBack(sessionId) {
      // A store of its own, reading the files afresh.
      const checkpoint = await Effect.runPromise(
        Effect.flatMap(CheckpointStore.fileSystem(dir), (store) => store.load(sessionId))
      )
      if (checkpoint.finished === undefined) throw new Error(`${name}: session ${sessionId} is not finished in its checkpoint`)
      return { transcript: entries(checkpoint.state.messages), events: 0 }
    },
    close: () => runtime.dispose()
  }
}

/**
 * `DurableSession.run` on `ClusterWorkflowEngine` + `SingleRunner` + `PgClient`; `storeOnly`, on
 * `WorkflowEngine.layerMemory` instead (activities kept in memory, not durable): what the session's own store
 * costs (its events, its inbox, its rows), apart from what the engine adds.
 */
const durable = (mode: "store" | "sqlEngine" | "cluster") => async ({ scripts, url }: RowOptions): Promise<Row> => {
  const database = PgClient.layer({ url: Redacted.make(url) })
  await Effect.runPromise(DurableSession.migrateSql.pipe(Effect.provide(database)))
  const engine = mode === "store"
    ? WorkflowEngine.layerMemory
    : mode === "sqlEngine"
    ? DurableSession.layerSqlEngine()
    : ClusterWorkflowEngine.layer.pipe(
      Layer.provideMerge(SingleRunner.layer()),
      Layer.provide(NodeCrypto.layerDigest)
    )
  // The database is built first and closed last (the runner's stop hands its shards back through it).
  const runner = DurableSession.layer().pipe(
    Layer.provideMerge(Layer.mergeAll(model(scripts), tools(scripts), DurableSession.layerSqlStore)),
    Layer.provideMerge(engine),
    Layer.provideMerge(database)
  )
  const runtime = ManagedRuntime.make(runner)
  const name = mode === "store"
    ? "effect-agent `DurableSession`, its store alone (engine in memory)"
    : mode === "sqlEngine"
    ? "effect-agent `DurableSession`, own SQL engine + PostgreSQL"
    : "effect-agent `DurableSession`, cluster + PostgreSQL"
  return {
    name,
    async session(sessionId, toolTurns) {
      completed(name, await runtime.runPromise(DurableSession.run({ sessionId, prompt: sessionId, config: config(toolTurns) })))
    },
    async readBack(sessionId) {
      const status = await runtime.runPromise(DurableSession.poll(sessionId))
      if (status._tag !== "Finished") throw new Error(`${name}: session ${sessionId} is ${status._tag}`)
      const events = await runtime.runPromise(DurableSession.events(sessionId))
      return { transcript: entries(status.result.messages), events: events.length }
    },
    close: () => runtime.dispose()
  }
}

/** `DurableSession.run` on `ClusterWorkflowEngine` + `SingleRunner` + `PgClient`. */
export const durableSession = durable("cluster")

/** `DurableSession.run` on `DurableSession.layerSqlEngine` + `PgClient`: the engine and the store in one database. */
export const durableSqlEngine = durable("sqlEngine")

/** `DurableSession.run` with its store on `PgClient` and the engine in memory: the store's share. */
export const durableStore = durable("store")
