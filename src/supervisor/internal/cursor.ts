/**
 * The Cursor protocol: `cursor-agent -p --output-format stream-json`, the
 * message on stdin, one process per turn, the conversation carried by the
 * chat id Cursor reports (`--resume <chat id>` from the second turn on; the
 * first turn omits it, as ynh's `cursor` worker does).
 *
 * Cursor's CLI is closed source; the event shapes follow its documentation
 * (`cursor.com/docs/cli/reference/output-format`: "Stream JSON format") and
 * the streams others captured from it and published (reifying/cursor-hack's
 * `docs/stream-json-events.md`, and the captures in the comments of
 * sanlee-ys/telltale's cursor adapter, cursor-agent 2026.07 and 2026.08): a
 * `system` event of subtype `init` with the `session_id` (the chat id that
 * `--resume` takes back), `assistant` events carrying a `message` with
 * `content` text blocks, and one `result` event that ends the turn with
 * `is_error`, the whole reply in `result` ("the concatenation of all text
 * deltas"), the `session_id` and, in recent versions, a `usage` of
 * `inputTokens`, `outputTokens`, `cacheReadTokens` and `cacheWriteTokens`.
 * Other kinds (`user` echoes, `thinking`, `tool_call`, …) are skipped. The
 * stream reports no cost: a cursor turn has none (`costUsd` stays unset).
 * On failure the process exits non-zero, possibly before any `result`.
 *
 * The reply's text is the `result`'s: the assistant events repeat their text
 * (deltas, then the whole message) in ways that changed between versions, and
 * the `result` is documented as the whole of it. Only a `result` without its
 * text falls back to the assistant events, each one message.
 *
 * @internal
 */
import * as Schema from "effect/Schema"
import type { TurnReply } from "../Worker.ts"
import { add, Count, type Ending, on, type Protocol, readLine } from "./protocol.ts"

/**
 * A chat id as it may reach `--resume <id>`: a UUID in practice, never an
 * option or a relative index (`--resume -1` is "the most recent chat"),
 * spaces or control characters.
 */
const ChatId = Schema.String.check(Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/))
const isChatId = Schema.is(ChatId)

/** Cursor's usage: input tokens exclude the cache reads and writes. */
const Usage = Schema.Struct({
  inputTokens: Count,
  outputTokens: Count,
  cacheReadTokens: Schema.optionalKey(Count),
  cacheWriteTokens: Schema.optionalKey(Count)
})
type Usage = typeof Usage.Type

const SystemEvent = Schema.Struct({ subtype: Schema.String, session_id: Schema.optionalKey(ChatId) })

const AssistantEvent = Schema.Struct({
  message: Schema.Struct({ content: Schema.Array(Schema.Unknown) }),
  session_id: Schema.optionalKey(ChatId)
})

const ResultEvent = Schema.Struct({
  subtype: Schema.String,
  is_error: Schema.Boolean,
  result: Schema.optionalKey(Schema.String),
  session_id: Schema.optionalKey(ChatId),
  usage: Schema.optionalKey(Usage)
})

const isTextBlock = Schema.is(Schema.Struct({ type: Schema.Literal("text"), text: Schema.String }))

const fromUsage = (usage: Usage | undefined): TurnReply["usage"] =>
  usage === undefined ? { inputTokens: 0, outputTokens: 0 } : {
    inputTokens: add(add(usage.inputTokens, usage.cacheReadTokens ?? 0), usage.cacheWriteTokens ?? 0),
    outputTokens: usage.outputTokens
  }

/** The protocol, with the flags each phase adds. */
export const protocol = (options: {
  readonly model: string | undefined
  readonly args: ReadonlyArray<string>
  readonly phaseArgs: { readonly plan: ReadonlyArray<string>; readonly act: ReadonlyArray<string> }
}): Protocol => ({
  begin: (request) => {
    const resumed = request.resumeToken
    if (resumed !== undefined && !isChatId(resumed)) return "the resume token is not a Cursor chat id"
    const args = [
      "-p",
      "--output-format",
      "stream-json",
      ...(resumed === undefined ? [] : ["--resume", resumed]),
      ...(options.model === undefined ? [] : [`--model=${options.model}`]),
      ...options.args,
      ...options.phaseArgs[request.phase]
    ]
    return { args, decoder: decoder(resumed) }
  }
})

/** Reads one turn's events. */
const decoder = (resumed: string | undefined) => {
  let chat = resumed
  const messages: Array<string> = []
  let result: typeof ResultEvent.Type | undefined
  const handlers = {
    system: on(SystemEvent, (event) => {
      if (event.session_id !== undefined) chat = event.session_id
      return undefined
    }),
    assistant: on(AssistantEvent, (event) => {
      if (event.session_id !== undefined) chat = event.session_id
      let text = ""
      for (const block of event.message.content) if (isTextBlock(block)) text += block.text
      if (text !== "") messages.push(text)
      return undefined
    }),
    result: on(ResultEvent, (event) => {
      result = event
      if (event.session_id !== undefined) chat = event.session_id
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
      if (chat === undefined) {
        return { _tag: "Broken", message: "the turn completed without a session_id: its chat cannot be resumed" }
      }
      return {
        _tag: "Completed",
        reply: { text: result.result ?? messages.join("\n\n"), usage: fromUsage(result.usage), resumeToken: chat }
      }
    }
  }
}

const detail = (text: string | undefined): string =>
  text === undefined || text === "" ? "" : `: ${text.length <= 300 ? text : `${text.slice(0, 300)}…`}`
