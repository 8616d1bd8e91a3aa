/**
 * Keeping requests inside the model's context window: a token estimate, and
 * the default context transform that prunes the request (never the
 * transcript) when the estimate exceeds `contextBudgetTokens`.
 *
 * The estimate is characters / 4 by default, or the `effect/ai` `Tokenizer`
 * service's count when one is provided. It is kept incrementally: each
 * message is measured once, when it first appears, so a request under budget
 * costs nothing beyond looking at the new messages.
 *
 * Pruning, when over budget:
 * 1. the newest `pruneKeepToolResults` tool results stay whole; older ones are
 *    replaced by a short placeholder saying what was removed;
 * 2. if still over, the request keeps the system messages, the first user
 *    message (the task) and the newest `pruneKeepTail` messages, cut at a
 *    user or assistant message so that no tool result loses its call and no
 *    call loses its result (pass 1 still applies inside the tail).
 *
 * Pass 1's size is known from running totals before any message is rebuilt,
 * and pass 2 touches only the tail, so the cost of a pruned turn does not
 * grow with the number of turns already pruned.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Tokenizer from "effect/ai/Tokenizer"
import * as Hooks from "./Hooks.ts"
import * as Message from "./Message.ts"

const IMAGE_CHARS = 4_000

const partChars = (part: Message.UserContent | Message.AssistantContent): number => {
  switch (part.type) {
    case "text":
    case "reasoning":
      return part.text.length
    case "image":
      return IMAGE_CHARS
    case "tool-call":
      return part.name.length + (JSON.stringify(part.params ?? {})?.length ?? 0)
  }
}

/**
 * Characters a message contributes to a request.
 *
 * @since 0.1.0
 * @category measuring
 */
export const messageChars = (message: Message.Message): number => {
  switch (message.role) {
    case "system":
      return message.content.length
    case "custom":
      return 0
    default: {
      let chars = 0
      for (const part of message.content) chars += partChars(part)
      return chars
    }
  }
}

/**
 * Estimated tokens of one message: characters / 4, rounded up.
 *
 * @since 0.1.0
 * @category measuring
 */
export const messageTokens = (message: Message.Message): number => Math.ceil(messageChars(message) / 4)

/**
 * Estimated tokens of messages (characters / 4).
 *
 * @example
 * ```ts
 * import { ContextWindow, Message } from "effect-agent"
 *
 * console.log(ContextWindow.estimateTokens([Message.user("12345678")])) // Output: 2
 * ```
 *
 * @since 0.1.0
 * @category measuring
 */
export const estimateTokens = (messages: ReadonlyArray<Message.Message>): number => {
  let tokens = 0
  for (const message of messages) tokens += messageTokens(message)
  return tokens
}

/**
 * Counts a message's tokens: the default estimate (synchronous), or a
 * tokenizer's count.
 *
 * @since 0.1.0
 * @category models
 */
export type Measure = (message: Message.Message) => number | Effect.Effect<number>

/**
 * The tokenizer's count when a `Tokenizer` is provided, else the estimate.
 *
 * @since 0.1.0
 * @category measuring
 */
export const measure: Effect.Effect<Measure> = Effect.map(
  Effect.serviceOption(Tokenizer.Tokenizer),
  Option.match({
    onNone: (): Measure => messageTokens,
    onSome: (tokenizer): Measure => (message) => {
      const converted = Message.toPromptMessage(message)
      if (converted === undefined) return Effect.succeed(0)
      return tokenizer.tokenize([converted]).pipe(
        Effect.map((tokens) => tokens.length),
        // A tokenizer that fails must not fail the run: fall back to the estimate.
        Effect.orElseSucceed(() => messageTokens(message))
      )
    }
  })
)

/**
 * What the pruning transform is given.
 *
 * @since 0.1.0
 * @category options
 */
export interface PruneOptions {
  readonly budgetTokens: number
  readonly keepToolResults: number
  readonly keepTail: number
}

const placeholderText = (result: Message.ToolResultMessage): string =>
  `[${result.toolName} result removed to save context: ${Message.textOf(result).length} characters]`

/**
 * The default context transform, as a plugin built for each run.
 *
 * @since 0.1.0
 * @category pruning
 */
export const prune = (options: PruneOptions): Effect.Effect<Hooks.Plugin> =>
  Effect.map(measure, (count) => {
    // Running totals over the transcript, extended with each new message.
    let source: ReadonlyArray<Message.Message> | undefined
    let seen = 0
    let total = 0
    const tokens: Array<number> = []
    const results: Array<number> = [] // indices of tool results, in order
    const resultsBefore: Array<number> = [0] // resultsBefore[k]: tokens of the first k tool results
    const systems: Array<number> = [] // indices of system messages
    let firstUser = -1
    const placeholders = new WeakMap<Message.ToolResultMessage, Message.ToolResultMessage>()
    const PLACEHOLDER_TOKENS = 16

    const reset = () => {
      seen = total = 0
      tokens.length = results.length = systems.length = 0
      resultsBefore.length = 1
      firstUser = -1
    }

    const extend = Effect.fnUntraced(function*(messages: ReadonlyArray<Message.Message>) {
      if (messages !== source || messages.length < seen) {
        source = messages
        reset()
      }
      for (; seen < messages.length; seen++) {
        const message = messages[seen]!
        const counted = count(message)
        const n = typeof counted === "number" ? counted : yield* counted
        tokens.push(n)
        total += n
        if (message.role === "toolResult") {
          results.push(seen)
          resultsBefore.push(resultsBefore.at(-1)! + n)
        } else if (message.role === "system") systems.push(seen)
        else if (message.role === "user" && firstUser === -1) firstUser = seen
      }
    })

    const placeholder = (result: Message.ToolResultMessage): Message.ToolResultMessage => {
      let replaced = placeholders.get(result)
      if (replaced === undefined) {
        replaced = { ...result, content: [Message.text(placeholderText(result))] }
        placeholders.set(result, replaced)
      }
      return replaced
    }

    /** Tool results at or after this index stay whole. */
    const keptResultsFrom = (): number =>
      options.keepToolResults >= results.length
        ? 0
        : options.keepToolResults === 0
        ? Number.POSITIVE_INFINITY
        : results[results.length - options.keepToolResults]!

    const withPlaceholders = (message: Message.Message, index: number, keptFrom: number): Message.Message =>
      message.role === "toolResult" && index < keptFrom ? placeholder(message) : message

    const transform = Effect.fnUntraced(function*(messages: ReadonlyArray<Message.Message>) {
      yield* extend(messages)
      if (total <= options.budgetTokens) return messages
      const keptFrom = keptResultsFrom()
      // Pass 1's size, from the running totals.
      const prunedCount = Math.max(0, results.length - options.keepToolResults)
      const prunedTokens = resultsBefore[prunedCount]!
      const afterPass1 = total - prunedTokens + prunedCount * PLACEHOLDER_TOKENS
      if (afterPass1 <= options.budgetTokens || messages.length <= options.keepTail) {
        return {
          messages: messages.map((message, index) => withPlaceholders(message, index, keptFrom)),
          tokensBefore: total,
          tokensAfter: afterPass1
        }
      }
      // Pass 2: system messages, the task, and the tail from a user or assistant message.
      let cut = messages.length - options.keepTail
      while (cut > 0 && messages[cut]!.role === "toolResult") cut--
      const out: Array<Message.Message> = []
      let after = 0
      const keep = (index: number) => {
        const message = withPlaceholders(messages[index]!, index, keptFrom)
        out.push(message)
        after += message === messages[index] ? tokens[index]! : PLACEHOLDER_TOKENS
      }
      for (const index of systems) if (index < cut) keep(index)
      if (firstUser !== -1 && firstUser < cut) keep(firstUser)
      for (let index = cut; index < messages.length; index++) keep(index)
      return { messages: out, tokensBefore: total, tokensAfter: after }
    })

    return Hooks.plugin({ name: "contextWindow", transformContext: transform })
  })
