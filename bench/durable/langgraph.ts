/**
 * The peer: LangGraph.js `createReactAgent` (`@langchain/langgraph/prebuilt`)
 * with `PostgresSaver` (`@langchain/langgraph-checkpoint-postgres`, its own
 * `pg` pool, 10 connections by default), one thread per session, over a
 * scripted chat model (a `BaseChatModel` whose `_generate` plays the same
 * script: the turn's text and one `noop` call) and one tool (`tool()` from
 * `@langchain/core/tools`, a zod schema).
 *
 * Two rows: LangGraph's default `durability: "async"` (each step's checkpoint
 * is written while the next step runs; `invoke` waits for them all before it
 * returns), the peer of the ratios; and `durability: "sync"` (each step's
 * checkpoint written before the next step starts).
 */
import { BaseChatModel } from "@langchain/core/language_models/chat_models"
import { AIMessage, type BaseMessage } from "@langchain/core/messages"
import type { ChatResult } from "@langchain/core/outputs"
import { tool } from "@langchain/core/tools"
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres"
import { createReactAgent } from "@langchain/langgraph/prebuilt"
import { z } from "zod"
import { NOOP, noopResult } from "../workload.ts"
import type { Entry, Row, RowOptions, Scripts } from "./workload.ts"

const textOf = (content: BaseMessage["content"]): string =>
  typeof content === "string"
    ? content
    : content.map((part) => (typeof part === "string" ? part : part.type === "text" && "text" in part ? String(part.text) : "")).join("")

/** A chat model playing the script of the session whose prompt (the first human message) the request starts with. */
class ScriptedChat extends BaseChatModel {
  private readonly scripts: Scripts

  constructor(scripts: Scripts) {
    super({})
    this.scripts = scripts
  }

  _llmType(): string {
    return "bench-scripted"
  }

  // The tools' schemas are the graph's business; the script knows its calls.
  override bindTools(): this {
    return this
  }

  async _generate(messages: Array<BaseMessage>): Promise<ChatResult> {
    const first = messages.find((m) => m.type === "human")
    const script = this.scripts.of(first === undefined ? "" : textOf(first.content))
    const last = messages[messages.length - 1]
    if (last !== undefined && last.type === "tool" && "tool_call_id" in last && typeof last.tool_call_id === "string") {
      script.check(last.tool_call_id, textOf(last.content))
    } else {
      script.check(undefined, undefined)
    }
    this.scripts.calls++
    const turn = script.next()
    const message = new AIMessage({
      content: turn.text,
      tool_calls: turn.calls.map((c) => ({ id: c.id, name: c.name, args: c.args, type: "tool_call" as const }))
    })
    return { generations: [{ text: turn.text, message }] }
  }
}

/** LangChain messages as transcript entries. */
const entries = (messages: ReadonlyArray<BaseMessage>): ReadonlyArray<Entry> =>
  messages.map((m): Entry => {
    if (m.type === "human") return { role: "user", text: textOf(m.content), calls: [] }
    if (m.type === "ai" && AIMessage.isInstance(m)) {
      return {
        role: "assistant",
        text: textOf(m.content),
        calls: (m.tool_calls ?? []).map((c) => `${c.id} ${c.name} ${JSON.stringify(c.args)}`)
      }
    }
    if (m.type === "tool" && "tool_call_id" in m && typeof m.tool_call_id === "string") {
      return { role: "tool", text: textOf(m.content), calls: [], toolCallId: m.tool_call_id }
    }
    return { role: "user", text: `unexpected ${m.type} message`, calls: [] }
  })

const make = (durability: "async" | "sync") => async ({ scripts, url }: RowOptions): Promise<Row> => {
  const saver = PostgresSaver.fromConnString(url)
  await saver.setup()
  const noop = tool(async ({ i }: { i: number }) => {
    scripts.toolRuns++
    return noopResult(i)
  }, { name: NOOP, description: "Does nothing.", schema: z.object({ i: z.number() }) })
  const agent = createReactAgent({ llm: new ScriptedChat(scripts), tools: [noop], checkpointSaver: saver })
  const name = `LangGraph.js \`createReactAgent\` + \`PostgresSaver\`${durability === "sync" ? " (`durability: \"sync\"`)" : ""}`
  const threadOf = (sessionId: string) => ({ configurable: { thread_id: sessionId } })
  return {
    name,
    async session(sessionId, toolTurns) {
      await agent.invoke(
        { messages: [{ role: "user", content: sessionId }] },
        // Each tool turn is two steps (model, tools), then the answer's.
        { ...threadOf(sessionId), recursionLimit: 2 * toolTurns + 5, durability }
      )
    },
    async readBack(sessionId) {
      const state = await agent.getState(threadOf(sessionId))
      const values: { readonly messages?: ReadonlyArray<BaseMessage> } = state.values
      if (state.next.length > 0) throw new Error(`${name}: thread ${sessionId} has steps left: ${state.next.join(", ")}`)
      return { transcript: entries(values.messages ?? []), events: 0 }
    },
    close: () => saver.end()
  }
}

export const langGraph = make("async")
export const langGraphSync = make("sync")
