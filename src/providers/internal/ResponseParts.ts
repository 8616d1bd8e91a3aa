/**
 * Building and collecting `effect/ai` response parts, shared by the
 * providers. A provider's decoder builds its parts through a {@link Maker}:
 * {@link encoded} makes the encoded parts `LanguageModel.make` decodes (every
 * call of an `effect/ai` user goes that way); `compat.decodedParts` makes the
 * parts that decoding yields, directly, for the agent loop's calls (the
 * provider has already validated each wire event with its own Schema, so the
 * parts it builds are valid by construction, and a second decode would only
 * copy them). {@link collect} turns a provider's own stream into the parts of a
 * `generateText` response, so that each provider has a single decoding path.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type * as Types from "effect/Types"
import * as Response from "effect/ai/Response"
import * as Pricing from "../Pricing.ts"

/**
 * The metadata key under which the finish part carries the call's cost:
 * `metadata["effect-agent"].costUsd`.
 *
 * @since 0.1.0
 * @category constants
 */
export const metadataKey = "effect-agent"

/**
 * The parts the agent loop streams: `effect/ai`'s decoded stream parts, tool
 * calls passed through with their parameters as the provider parsed them
 * (deferred validation).
 *
 * @since 0.1.0
 * @category models
 */
export type Decoded = Response.StreamPart<{}, "deferred">

/**
 * Makes each kind of stream part a provider's decoder emits, as encoded or
 * decoded parts. A `metadata` argument left out is no metadata.
 *
 * @since 0.1.0
 * @category models
 */
export interface Maker<P> {
  /** The response's id, model and creation time (milliseconds since the epoch). */
  metadata(id: string | undefined, modelId: string | undefined, createdMillis: number | undefined): P
  start(type: "text-start" | "reasoning-start", id: string): P
  delta(type: "text-delta" | "reasoning-delta", id: string, delta: string): P
  end(type: "text-end" | "reasoning-end", id: string, metadata?: Response.ProviderMetadata): P
  paramsStart(id: string, name: string): P
  paramsDelta(id: string, delta: string): P
  paramsEnd(id: string): P
  toolCall(id: string, name: string, params: unknown, metadata?: Response.ProviderMetadata): P
  /** The finish part: its reason, its usage, and the call's cost when `prices` has the model. */
  finish(finish: Finish): P
}

/**
 * What a finish part is made from.
 *
 * @since 0.1.0
 * @category models
 */
export interface Finish {
  readonly reason: Response.FinishReason
  readonly usage: Response.FinishPartEncoded["usage"]
  readonly modelId: string
  readonly prices: Pricing.PriceTable
}

/**
 * The finish part's metadata: the call's cost when the price table knows the model.
 *
 * @since 0.1.0
 * @category makers
 */
export const finishMetadata = (finish: Finish): Response.ProviderMetadata | undefined => {
  const price = Pricing.find(finish.prices, finish.modelId)
  return price === undefined ? undefined : { [metadataKey]: { costUsd: Pricing.cost(price, finish.usage) } }
}

// The range of a JavaScript Date.
const maxMillis = 8.64e15

/**
 * Whether a creation time is within a JavaScript Date's range: one outside
 * it (a server's bad `created`) is left out rather than thrown on.
 *
 * @since 0.1.0
 * @category makers
 */
export const validMillis = (millis: number | undefined): millis is number =>
  millis !== undefined && Number.isFinite(millis) && Math.abs(millis) <= maxMillis

/**
 * The encoded parts, which `LanguageModel.make` decodes.
 *
 * @since 0.1.0
 * @category makers
 */
export const encoded: Maker<Response.StreamPartEncoded> = {
  metadata: (id, modelId, createdMillis) => {
    const part: Types.Mutable<Response.ResponseMetadataPartEncoded> = { type: "response-metadata" }
    if (id !== undefined) part.id = id
    if (modelId !== undefined) part.modelId = modelId
    if (validMillis(createdMillis)) part.timestamp = new Date(createdMillis).toISOString()
    return part
  },
  start: (type, id) => ({ type, id }),
  delta: (type, id, delta) => ({ type, id, delta }),
  end: (type, id, metadata) => metadata === undefined ? { type, id } : { type, id, metadata },
  paramsStart: (id, name) => ({ type: "tool-params-start", id, name }),
  paramsDelta: (id, delta) => ({ type: "tool-params-delta", id, delta }),
  paramsEnd: (id) => ({ type: "tool-params-end", id }),
  toolCall: (id, name, params, metadata) =>
    metadata === undefined
      ? { type: "tool-call", id, name, params }
      : { type: "tool-call", id, name, params, metadata },
  finish: (finish) => {
    const metadata = finishMetadata(finish)
    return metadata === undefined
      ? { type: "finish", reason: finish.reason, usage: finish.usage }
      : { type: "finish", reason: finish.reason, usage: finish.usage, metadata }
  }
}

type Metadata = NonNullable<Response.StreamPartEncoded["metadata"]>

const mergeMetadata = (into: Metadata | undefined, from: Metadata | undefined): Metadata | undefined => {
  if (from === undefined) return into
  if (into === undefined) return from
  const merged: Record<string, Metadata[string]> = { ...into }
  for (const key in from) {
    const left = merged[key]
    const right = from[key]
    if (right === undefined) continue
    merged[key] = isRecord(left) && isRecord(right) ? { ...left, ...right } : right
  }
  return merged
}

const isRecord = (value: unknown): value is { readonly [key: string]: Metadata[string] } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

class Block {
  readonly type: "text" | "reasoning"
  text = ""
  metadata: Metadata | undefined
  constructor(type: "text" | "reasoning", metadata: Metadata | undefined) {
    this.type = type
    this.metadata = metadata
  }
  toPart(): Response.PartEncoded {
    return this.metadata === undefined
      ? { type: this.type, text: this.text }
      : { type: this.type, text: this.text, metadata: this.metadata }
  }
}

/**
 * Collects a stream into the parts of a whole response: each text or
 * reasoning block becomes one part (its deltas joined, the metadata of its
 * start, deltas and end merged), in the order the blocks started; tool calls,
 * response metadata and the finish part are kept; tool parameter deltas are
 * dropped.
 *
 * @since 0.1.0
 * @category collecting
 */
export const collect = <E, R>(
  stream: Stream.Stream<Response.StreamPartEncoded, E, R>
): Effect.Effect<Array<Response.PartEncoded>, E, R> =>
  Effect.suspend(() => {
    const parts: Array<Response.PartEncoded | Block> = []
    const open = new Map<string, Block>()
    const start = (type: Block["type"], id: string, metadata: Metadata | undefined) => {
      const block = new Block(type, metadata)
      open.set(`${type}:${id}`, block)
      parts.push(block)
    }
    const append = (type: Block["type"], id: string, delta: string, metadata: Metadata | undefined) => {
      const block = open.get(`${type}:${id}`)
      if (block === undefined) return
      block.text += delta
      block.metadata = mergeMetadata(block.metadata, metadata)
    }
    return Effect.map(
      Stream.runForEach(stream, (part) => {
        switch (part.type) {
          case "text-start":
          case "reasoning-start":
            start(part.type === "text-start" ? "text" : "reasoning", part.id, part.metadata)
            break
          case "text-delta":
            append("text", part.id, part.delta, part.metadata)
            break
          case "reasoning-delta":
            append("reasoning", part.id, part.delta, part.metadata)
            break
          case "text-end":
          case "reasoning-end":
            append(part.type === "text-end" ? "text" : "reasoning", part.id, "", part.metadata)
            open.delete(`${part.type === "text-end" ? "text" : "reasoning"}:${part.id}`)
            break
          case "tool-params-start":
          case "tool-params-delta":
          case "tool-params-end":
          case "error":
            break
          default:
            parts.push(part)
        }
        return Effect.void
      }),
      () => parts.map((part) => part instanceof Block ? part.toPart() : part)
    )
  })
