/**
 * One model reply: the request streamed to the model, and the assistant
 * message built from its stream parts, part by part, with a `MessageUpdate`
 * for each delta (in a run with an output guardrail, the reply is held until
 * it ends, and `Answer` releases or withholds it). Each part is looked at
 * once; text is kept as chunks and joined once at the end. Each tool call
 * gets an id unique in the message here, the one place a model's calls
 * become the transcript's (see `AssistantBuilder.giveId`): the batch, the
 * approvals, a checkpoint's journal and a durable session's activities all
 * key a call by it.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type * as AiError from "effect/ai/AiError"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import type * as AgentEvent from "../AgentEvent.ts"
import { ModelError } from "../AgentError.ts"
import type * as Message from "../Message.ts"
import * as Output from "../Output.ts"
import * as Answer from "./answer.ts"
import * as Events from "./events.ts"
import type * as LiveRun from "./liveRun.ts"
import * as OutputPart from "./output.ts"
import * as Stops from "./stops.ts"

/**
 * A reply: the message (what streamed before a stop is kept) and the stop that cut it, if one did.
 *
 * @internal
 */
export interface Reply {
  readonly message: Message.AssistantMessage
  readonly stopped: Stops.Stop | undefined
}

const modelError = (turn: number) => (error: AiError.AiError) => ModelError.fromAiError(error, turn)

/**
 * Streams one model reply, emitting its events; `stopped` when a cancel or
 * the deadline cut it. A plain generator: the turn delegates to it with
 * `yield*`.
 *
 * @internal
 */
export function* streamReply<R>(
  run: LiveRun.Uses<R, "env" | "events" | "stops" | "output" | "context">,
  prompt: Prompt.Prompt
) {
  const { events } = run
  const builder = new AssistantBuilder()
  yield* Events.messageStarted(events)
  const streamed = run.env.model.streamText({
    prompt,
    toolkit: run.env.toolkit,
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  })
  const { output } = run
  // A run with a typed output also streams its final answer (`OutputDelta`); a native one asks the provider for it.
  const native = output?.native
  const stream = native === undefined ? streamed : Stream.provideService(streamed, Output.NativeFormat, native)
  const updates = output === undefined
    ? Events.messageUpdates
    : native === undefined
    ? OutputPart.messageUpdates
    : OutputPart.nativeUpdates
  // A run with an output guardrail holds the reply until it is known to be no answer, or one that passed.
  const holding = run.env.hooks.beforeAnswer.length > 0
  const observed = events.observed && !holding
  const consume = Stream.runForEachArray(stream, (parts) => {
    let deltas: Array<AgentEvent.Delta> | undefined
    for (const part of parts) {
      const delta = builder.push(part)
      if (delta !== undefined && observed) (deltas ??= []).push(delta)
    }
    return deltas === undefined ? Effect.void : updates(events, deltas)
  })
  // The stream ends with `void`, a stop with its reason: no step to map the one to `undefined`.
  const stopped: void | Stops.Stop = yield* Stops.race(
    run.stops,
    Effect.mapError(consume, modelError(events.turn)),
    (stop): void | Stops.Stop => stop
  )
  // What streamed before a stop is kept; its complete tool calls are answered by the batch.
  const message = builder.build(stopped !== undefined)
  if (holding) return yield* Answer.release(run, message, stopped === undefined ? undefined : stopped, updates)
  yield* Events.messageEnded(events, message)
  const reply: Reply = { message, stopped: stopped === undefined ? undefined : stopped }
  return reply
}

// -----------------------------------------------------------------------------
// The assistant message, from stream parts
// -----------------------------------------------------------------------------

interface OpenBlock {
  readonly id: string
  readonly kind: "text" | "reasoning"
  index: number
  readonly chunks: Array<string>
  metadata: Record<string, unknown> | undefined
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] }

const isEmptyRecord = (record: Record<string, unknown>): boolean => {
  for (const _ in record) return false
  return true
}

const mergeMetadata = (
  into: Record<string, unknown> | undefined,
  metadata: Record<string, unknown>
): Record<string, unknown> | undefined => isEmptyRecord(metadata) ? into : { ...into, ...metadata }

const findSignature = (metadata: Record<string, unknown>): string | undefined => {
  for (const key in metadata) {
    const value = metadata[key]
    if (typeof value === "object" && value !== null && "signature" in value && typeof value.signature === "string") {
      return value.signature
    }
  }
  return undefined
}

const finishToStop = (reason: Response.FinishReason, hasToolCalls: boolean): Message.StopReason => {
  switch (reason) {
    case "tool-calls":
      return "toolUse"
    case "stop":
    case "unknown":
      return hasToolCalls ? "toolUse" : "stop"
    case "length":
      return "length"
    case "error":
      return "error"
    default:
      return "other"
  }
}

// A cost that is not a finite, non-negative number (a model's own metadata may say anything) is no cost:
// NaN would pass every budget check unnoticed.
const costOf = (metadata: Record<string, unknown>): number | undefined => {
  const ours = metadata["effect-agent"]
  if (typeof ours === "object" && ours !== null && "costUsd" in ours) {
    const cost = ours.costUsd
    if (typeof cost === "number" && Number.isFinite(cost) && cost >= 0) return cost
  }
  return undefined
}

// A token count below 0 (a server's usage may say anything) is none: it would give back budget already spent.
const tokens = (count: number | undefined): number => count === undefined || !(count > 0) ? 0 : count

/**
 * The usage of one model call, from `effect/ai`'s usage and the finish part's
 * metadata (where our providers put the cost).
 *
 * @internal
 */
export const usageFromFinish = (part: Response.FinishPart): Message.Usage => {
  const input = part.usage.inputTokens
  const output = part.usage.outputTokens
  const cacheRead = tokens(input.cacheRead)
  const cacheWrite = tokens(input.cacheWrite)
  const reasoning = tokens(output.reasoning)
  const usage: Mutable<Message.Usage> = {
    input: input.total === undefined ? tokens(input.uncached) + cacheRead + cacheWrite : tokens(input.total),
    output: output.total === undefined ? tokens(output.text) + reasoning : tokens(output.total),
    cacheRead,
    cacheWrite,
    reasoning
  }
  const cost = costOf(part.metadata)
  if (cost !== undefined) usage.cost = cost
  return usage
}

// -----------------------------------------------------------------------------
// Tool call ids
// -----------------------------------------------------------------------------

/** The longest tool call id the loop keeps as the model gave it. */
const maxCallIdLength = 128

/**
 * A call whose arguments stream, until its `tool-call` part: its id in the
 * message, its tool, and the call started before it under the same id of the
 * model's that has not ended yet, if any.
 */
interface StreamingCall {
  readonly id: string
  readonly name: string
  earlier: StreamingCall | undefined
  ended: boolean
}

/**
 * Whether the loop keeps a model's call id as it is: 1 to 128 characters of
 * printable ASCII (no space, no control character; `/` and the like are
 * encoded where ids are joined, in approval ids).
 */
const isPlainId = (id: string): boolean => {
  const length = id.length
  if (length === 0 || length > maxCallIdLength) return false
  for (let i = 0; i < length; i++) {
    const code = id.charCodeAt(i)
    if (code < 0x21 || code > 0x7e) return false
  }
  return true
}

/**
 * Builds one assistant message from stream parts.
 *
 * @internal
 */
export class AssistantBuilder {
  readonly content: Array<Message.AssistantContent> = []
  /**
   * The open blocks, in the order they opened: an array, not a Map. A reply
   * has one or two open at a time, and a Map allocated a table per reply and
   * another each time a close shrank it.
   */
  private readonly blocks: Array<OpenBlock> = []
  /** The calls whose arguments stream, by the model's id (made at the first call): see {@link giveId}. */
  private streaming: Map<string, StreamingCall> | undefined
  /** The id of the reply's first call; from the second on, the ids given, in a set. */
  private firstId: string | undefined
  private givenIds: Set<string> | undefined
  /** The next suffix a rename tries, by base (made at the first rename). */
  private nextSuffix: Map<string, number> | undefined
  private toolCallCount = 0
  private finish: Response.FinishPart | undefined
  private model: string | undefined
  private errorMessage: string | undefined

  /** Feeds one part; returns the delta it carries, if any. */
  push(part: Response.StreamPart<{}, "deferred">): AgentEvent.Delta | undefined {
    switch (part.type) {
      case "text-delta":
        return this.delta("text", part.id, part.delta, part.metadata)
      case "reasoning-delta":
        return this.delta("reasoning", part.id, part.delta, part.metadata)
      case "text-start":
      case "reasoning-start":
        this.open(part.type === "text-start" ? "text" : "reasoning", part.id, part.metadata)
        return undefined
      case "text-end":
      case "reasoning-end":
        this.close(part.id, part.metadata)
        return undefined
      case "tool-params-start": {
        // The call gets its id in the message now, so that its argument deltas carry it.
        const streaming = this.streaming ??= new Map()
        const id = this.giveId(part.id)
        // Only a call whose id was given already can have one started before it under the model's id.
        const earlier = id === part.id ? undefined : streaming.get(part.id)
        streaming.set(part.id, {
          id,
          name: part.name,
          earlier: earlier === undefined || earlier.ended ? undefined : earlier,
          ended: false
        })
        return undefined
      }
      case "tool-params-delta": {
        const call = this.streaming?.get(part.id)
        return { type: "toolCall", id: call?.id ?? part.id, name: call?.name ?? "", delta: part.delta }
      }
      case "tool-call": {
        if (part.providerExecuted) return undefined
        const id = this.endStreaming(part.id) ?? this.giveId(part.id)
        this.content.push(
          isEmptyRecord(part.metadata)
            ? { type: "tool-call", id, name: part.name, params: part.params }
            : { type: "tool-call", id, name: part.name, params: part.params, providerData: part.metadata }
        )
        this.toolCallCount++
        return undefined
      }
      case "response-metadata":
        if (part.modelId !== undefined) this.model = part.modelId
        return undefined
      case "finish":
        this.finish = part
        return undefined
      case "error":
        this.errorMessage = part.error instanceof Error ? part.error.message : String(part.error)
        return undefined
      default:
        return undefined
    }
  }

  /**
   * The id a call has in the message, from the model's: unique in the reply.
   * A call keeps the model's id when it is plain (1 to 128 characters of
   * printable ASCII) and no earlier call of the reply has it. Otherwise it
   * gets the model's id with the next free `_<n>` (`x`, then `x_2`, `x_3`),
   * or, for an id that is empty, too long or not plain, `call_<n>`. A reply's
   * first call is checked against nothing, and a set of the ids given is made
   * at its second.
   */
  private giveId(from: string): string {
    const plain = isPlainId(from)
    let given = this.givenIds
    if (given === undefined) {
      const first = this.firstId
      if (first === undefined && plain) return this.firstId = from
      given = this.givenIds = new Set()
      if (first !== undefined) given.add(first)
    }
    if (plain && !given.has(from)) {
      given.add(from)
      return from
    }
    const base = plain ? from : "call"
    const next = this.nextSuffix ??= new Map()
    // From where the last rename of this base stopped: each suffix is tried once.
    for (let n = next.get(base) ?? (plain ? 2 : 1);; n++) {
      const suffix = `_${n}`
      const id = base.length + suffix.length > maxCallIdLength
        ? base.slice(0, maxCallIdLength - suffix.length) + suffix
        : base + suffix
      if (given.has(id)) continue
      next.set(base, n + 1)
      given.add(id)
      return id
    }
  }

  /**
   * Ends the streaming call the model's `tool-call` part names: its id in the
   * message. Of two calls started under one id, the earlier ends first (a
   * provider ends its calls in the order they started); the deltas go to the
   * later one, the one streaming.
   */
  private endStreaming(from: string): string | undefined {
    const streaming = this.streaming
    const call = streaming?.get(from)
    if (call === undefined) return undefined
    if (call.ended) return undefined
    if (call.earlier === undefined) {
      call.ended = true
      return call.id
    }
    let later = call
    while (later.earlier!.earlier !== undefined) later = later.earlier!
    const earliest = later.earlier!
    later.earlier = undefined
    return earliest.id
  }

  private indexOf(id: string): number {
    const blocks = this.blocks
    for (let i = blocks.length - 1; i >= 0; i--) if (blocks[i]!.id === id) return i
    return -1
  }

  private open(kind: OpenBlock["kind"], id: string, metadata: Record<string, unknown>): void {
    const index = this.indexOf(id)
    const block: OpenBlock = { id, kind, index: -1, chunks: [], metadata: mergeMetadata(undefined, metadata) }
    // A start for an id already open replaces that block, as it would replace a Map entry.
    if (index === -1) this.blocks.push(block)
    else this.blocks[index] = block
  }

  private delta(
    kind: OpenBlock["kind"],
    id: string,
    delta: string,
    metadata: Record<string, unknown>
  ): AgentEvent.Delta | undefined {
    const at = this.indexOf(id)
    let block = at === -1 ? undefined : this.blocks[at]
    if (block === undefined) {
      block = { id, kind, index: -1, chunks: [], metadata: undefined }
      this.blocks.push(block)
    }
    if (!isEmptyRecord(metadata)) block.metadata = mergeMetadata(block.metadata, metadata)
    if (delta === "") return undefined
    if (block.index === -1) {
      // A block gets its slot at its first non-empty delta, so empty blocks never reach the transcript.
      block.index = this.content.length
      this.content.push(kind === "text" ? { type: "text", text: "" } : { type: "reasoning", text: "" })
    }
    block.chunks.push(delta)
    return { type: kind, index: block.index, delta }
  }

  private close(id: string, metadata: Record<string, unknown>): void {
    const index = this.indexOf(id)
    if (index === -1) return
    const block = this.blocks[index]!
    this.blocks.splice(index, 1)
    block.metadata = mergeMetadata(block.metadata, metadata)
    this.seal(block)
  }

  private seal(block: OpenBlock): void {
    const text = block.chunks.join("")
    if (block.kind === "text") {
      if (block.index !== -1) this.content[block.index] = { type: "text", text }
      return
    }
    // Reasoning may arrive with no text at all (redacted or encrypted reasoning): it still has to be
    // replayed, so it takes a slot when it carries provider data.
    if (block.index === -1) {
      if (block.metadata === undefined) return
      block.index = this.content.length
      this.content.push({ type: "reasoning", text: "" })
    }
    const part: Mutable<Message.ReasoningPart> = { type: "reasoning", text }
    if (block.metadata !== undefined) {
      const signature = findSignature(block.metadata)
      if (signature !== undefined) part.signature = signature
      if (text === "") part.redacted = true
      part.providerData = block.metadata
    }
    this.content[block.index] = part
  }

  /** Whether the stream ended with a finish part. */
  get finished(): boolean {
    return this.finish !== undefined
  }

  /** Whether the message asks for tool calls. */
  get hasToolCalls(): boolean {
    return this.toolCallCount > 0
  }

  /**
   * The message. `aborted`: the stream was cut by a cancel; complete tool
   * calls stay (they will be answered), unfinished text is kept as it was.
   */
  build(aborted: boolean): Message.AssistantMessage {
    for (const block of this.blocks) this.seal(block)
    this.blocks.length = 0
    const message: Mutable<Message.AssistantMessage> = {
      role: "assistant",
      content: this.content,
      stopReason: aborted
        ? "aborted"
        : this.errorMessage !== undefined
        ? "error"
        : this.finish === undefined
        ? (this.hasToolCalls ? "toolUse" : "other")
        : finishToStop(this.finish.reason, this.hasToolCalls),
      usage: this.finish === undefined
        ? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 }
        : usageFromFinish(this.finish)
    }
    if (this.errorMessage !== undefined) message.errorMessage = this.errorMessage
    if (this.model !== undefined) message.model = this.model
    return message
  }
}
