/**
 * The Claude Code protocol: `claude -p --output-format stream-json --verbose`,
 * the message on stdin, a session id we choose (`--session-id` on the first
 * turn, `--resume` on the next ones).
 *
 * The event shapes follow the Claude Code documentation of headless mode
 * (`code.claude.com/docs/en/headless`, "Streaming JSON output") and the Agent
 * SDK's message types (`SDKSystemMessage`, `SDKAssistantMessage`,
 * `SDKResultMessage`): a `system` event of subtype `init` with the
 * `session_id`, `assistant` events carrying an Anthropic API message (its
 * `content` blocks and `usage`), and one `result` event that ends the turn
 * with the whole invocation's `usage`. Other kinds (`user` tool results,
 * `stream_event`, …) are skipped.
 *
 * @internal
 */
import * as Schema from "effect/Schema"
import type { TurnReply } from "../Worker.ts"
import { add, Count, type Ending, on, type Protocol, readLine } from "./protocol.ts"

/** Claude Code's session ids are UUIDs; nothing else reaches its argv. */
const SessionId = Schema.String.check(Schema.isUUID())
const isSessionId = Schema.is(SessionId)

/** An Anthropic API usage: input tokens exclude the cache reads and writes. */
const Usage = Schema.Struct({
  input_tokens: Count,
  output_tokens: Count,
  cache_creation_input_tokens: Schema.optionalKey(Schema.NullOr(Count)),
  cache_read_input_tokens: Schema.optionalKey(Schema.NullOr(Count))
})
type Usage = typeof Usage.Type

const SystemEvent = Schema.Struct({ subtype: Schema.String, session_id: Schema.optionalKey(SessionId) })

const AssistantEvent = Schema.Struct({
  message: Schema.Struct({
    id: Schema.optionalKey(Schema.String),
    content: Schema.Array(Schema.Unknown),
    usage: Schema.optionalKey(Usage)
  }),
  session_id: Schema.optionalKey(SessionId)
})

const ResultEvent = Schema.Struct({
  subtype: Schema.String,
  is_error: Schema.Boolean,
  result: Schema.optionalKey(Schema.String),
  session_id: Schema.optionalKey(SessionId),
  usage: Schema.optionalKey(Usage)
})

const isTextBlock = Schema.is(Schema.Struct({ type: Schema.Literal("text"), text: Schema.String }))

type TurnReplyUsage = TurnReply["usage"]

const fromUsage = (usage: Usage): TurnReplyUsage => ({
  inputTokens: add(
    add(usage.input_tokens, usage.cache_creation_input_tokens ?? 0),
    usage.cache_read_input_tokens ?? 0
  ),
  outputTokens: usage.output_tokens
})

/** The protocol, with the flags each phase adds. */
export const protocol = (options: {
  readonly model: string | undefined
  readonly args: ReadonlyArray<string>
  readonly phaseArgs: { readonly plan: ReadonlyArray<string>; readonly act: ReadonlyArray<string> }
}): Protocol => ({
  begin: (request, fresh) => {
    const resumed = request.resumeToken
    if (resumed !== undefined && !isSessionId(resumed)) return "the resume token is not a Claude Code session id"
    const sessionId = resumed ?? fresh
    const args = [
      "-p",
      "--output-format",
      "stream-json",
      "--verbose",
      resumed === undefined ? `--session-id=${sessionId}` : `--resume=${sessionId}`,
      ...(options.model === undefined ? [] : [`--model=${options.model}`]),
      ...options.args,
      ...options.phaseArgs[request.phase]
    ]
    return { args, decoder: decoder(sessionId) }
  }
})

/** Reads one turn's events. */
const decoder = (sessionId: string) => {
  let session = sessionId
  // The text of each assistant message, in order (Claude Code sends a message's blocks as separate events).
  const messages: Array<{ readonly id: string | undefined; text: string }> = []
  // Per message id, its last usage: the events of one message repeat its usage.
  const messageUsage = new Map<string, TurnReplyUsage>()
  let anonymousUsage: TurnReplyUsage = { inputTokens: 0, outputTokens: 0 }
  let result: typeof ResultEvent.Type | undefined
  const handlers = {
    system: on(SystemEvent, (event) => {
      if (event.session_id !== undefined) session = event.session_id
      return undefined
    }),
    assistant: on(AssistantEvent, (event) => {
      const { id, content, usage } = event.message
      const last = messages.at(-1)
      const message = last !== undefined && id !== undefined && last.id === id ? last : { id, text: "" }
      if (message !== last) messages.push(message)
      for (const block of content) if (isTextBlock(block)) message.text += block.text
      if (usage !== undefined) {
        if (id !== undefined) messageUsage.set(id, fromUsage(usage))
        else anonymousUsage = sum(anonymousUsage, fromUsage(usage))
      }
      return undefined
    }),
    result: on(ResultEvent, (event) => {
      result = event
      if (event.session_id !== undefined) session = event.session_id
      return undefined
    })
  }
  return {
    // After the result, the turn is over: later lines are read (under the caps) but not decoded.
    line: (line: string) => result === undefined ? readLine(handlers, line) : undefined,
    end: (): Ending => {
      if (result === undefined) return { _tag: "Incomplete", message: undefined }
      if (result.is_error) {
        return { _tag: "Failed", message: `the turn ended in error (${result.subtype})${detail(result.result)}` }
      }
      const text = messages.map((message) => message.text).filter((text) => text !== "").join("\n\n")
      return {
        _tag: "Completed",
        reply: {
          text: text === "" ? result.result ?? "" : text,
          // The result's usage covers the whole invocation; without it, the messages' usages are summed.
          usage: result.usage !== undefined
            ? fromUsage(result.usage)
            : [...messageUsage.values()].reduce(sum, anonymousUsage),
          resumeToken: session
        }
      }
    }
  }
}

const sum = (a: TurnReplyUsage, b: TurnReplyUsage): TurnReplyUsage => ({
  inputTokens: add(a.inputTokens, b.inputTokens),
  outputTokens: add(a.outputTokens, b.outputTokens)
})

const detail = (text: string | undefined): string =>
  text === undefined || text === "" ? "" : `: ${text.length <= 300 ? text : `${text.slice(0, 300)}…`}`
