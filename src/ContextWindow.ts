/**
 * How big a request is: a token estimate over messages (characters / 4, a
 * rule of thumb that errs on the large side for English and code).
 *
 * @since 0.1.0
 */
import type * as Message from "./Message.ts"

const partChars = (part: Message.UserContent | Message.AssistantContent): number => {
  switch (part.type) {
    case "text":
    case "reasoning":
      return part.text.length
    case "image":
      return 1_000 * 4
    case "tool-call":
      return part.name.length + JSON.stringify(part.params ?? {}).length
  }
}

/**
 * Characters a message contributes to a request.
 *
 * @since 0.1.0
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
 * Estimated tokens of messages (characters / 4, rounded up).
 *
 * @since 0.1.0
 */
export const estimateTokens = (messages: ReadonlyArray<Message.Message>): number => {
  let chars = 0
  for (const message of messages) chars += messageChars(message)
  return Math.ceil(chars / 4)
}
