/**
 * Building and collecting `effect/ai` response parts, shared by the
 * providers: the finish part (with the call's cost when the price table knows
 * the model), and {@link collect}, which turns a provider's own stream into
 * the parts of a `generateText` response, so that each provider has a single
 * decoding path.
 *
 * @since 0.1.0
 */
import { Effect, Stream } from "effect"
import type { Response } from "effect/ai"
import * as Pricing from "../../Pricing.ts"

/**
 * The metadata key under which the finish part carries the call's cost:
 * `metadata["effect-agent"].costUsd`.
 *
 * @since 0.1.0
 */
export const metadataKey = "effect-agent"

/**
 * The finish part of a call: its reason and usage, and its cost in US dollars
 * when `prices` has the model.
 *
 * @since 0.1.0
 */
export const finish = (options: {
  readonly reason: Response.FinishReason
  readonly usage: Response.FinishPartEncoded["usage"]
  readonly modelId: string
  readonly prices: Pricing.PriceTable
}): Response.FinishPartEncoded => {
  const price = Pricing.find(options.prices, options.modelId)
  return price === undefined
    ? { type: "finish", reason: options.reason, usage: options.usage }
    : {
      type: "finish",
      reason: options.reason,
      usage: options.usage,
      metadata: { [metadataKey]: { costUsd: Pricing.cost(price, options.usage) } }
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
