/**
 * An in-memory Chat Completions server behind a `fetch` function, for the rows
 * that run a library's real provider (request encoding, the `fetch` call, the
 * `Response` body read, SSE framing, JSON.parse, decoding) with no socket.
 *
 * Per request it reads the request's JSON body, checks with the session's
 * `Script` that the last message is the previous turn's tool result, and
 * answers with a `Response` whose body is a `ReadableStream` delivering the
 * turn's SSE body (`bench/sse.ts`, the bytes the provider-shaped row decodes)
 * in one chunk. A mismatch, or a call past the script's end, answers HTTP 400
 * (which no client retries) and is kept in `error`: the adapter rethrows it,
 * so the run fails loudly.
 *
 * Only the request's last message is parsed. Both clients send the whole
 * history each turn, so parsing the whole body would add work that grows with
 * the history to every turn of both rows, which is the server's cost, not the
 * client's: a session of T = 1,000 turns sends 500 turns of history on
 * average. The last message is found from the end of the body instead (see
 * `lastMessage`) and parsed with `JSON.parse`.
 */
import { bodyOf } from "./sse.ts"
import type { Script } from "./workload.ts"

/** The last message of a Chat Completions request, as far as the check reads it. */
export interface LastMessage {
  readonly role: string
  readonly toolCallId: string | undefined
  readonly text: string | undefined
}

// Every message both clients send starts with its role (`JSON.stringify` of an object whose first key is `role`).
// Inside a JSON string a quote is escaped, so this cannot occur in the text of a message: its last occurrence
// starts the last message. A client that put `role` elsewhere would have its last message read as an earlier
// one, whose tool result is not the expected one: the check fails, it cannot pass wrongly.
const MESSAGE_START = "{\"role\":\""

/** Where the JSON object starting at `start` ends (one past its closing brace), honouring strings. */
const objectEnd = (json: string, start: number): number => {
  let depth = 0
  let inString = false
  for (let i = start; i < json.length; i++) {
    const c = json.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // a backslash escapes the next character
      else if (c === 34) inString = false
    } else if (c === 34) {
      inString = true
    } else if (c === 123) {
      depth++
    } else if (c === 125 && --depth === 0) {
      return i + 1
    }
  }
  return -1
}

const textOf = (content: unknown): string | undefined => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return undefined
  let text = ""
  for (const part of content) {
    if (typeof part === "object" && part !== null && "text" in part && typeof part.text === "string") text += part.text
  }
  return text
}

/**
 * The last message of a Chat Completions request body: found from the end of
 * the body (the start of the last `{"role":"…` object), its object cut out by
 * matching braces outside strings, and parsed with `JSON.parse`. Throws when
 * the body has no message.
 */
export const lastMessage = (body: string | Uint8Array): LastMessage => {
  let json: string
  let start: number
  if (typeof body === "string") {
    json = body
    start = body.lastIndexOf(MESSAGE_START)
  } else {
    // A view, not a copy: `Buffer#lastIndexOf` searches the bytes from the end, and only the tail is decoded.
    const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength)
    const at = bytes.lastIndexOf(MESSAGE_START)
    json = at < 0 ? "" : bytes.toString("utf8", at)
    start = at < 0 ? -1 : 0
  }
  const end = start < 0 ? -1 : objectEnd(json, start)
  if (end < 0) throw new Error("the request has no message")
  const message: unknown = JSON.parse(json.slice(start, end))
  if (typeof message !== "object" || message === null || !("role" in message) || typeof message.role !== "string") {
    throw new Error("the request's last message has no role")
  }
  return {
    role: message.role,
    toolCallId: "tool_call_id" in message && typeof message.tool_call_id === "string"
      ? message.tool_call_id
      : undefined,
    text: "content" in message ? textOf(message.content) : undefined
  }
}

const sseHeaders = { "content-type": "text/event-stream" }

/** The request body as the clients send it: a string (the `openai` SDK) or bytes (effect's `HttpBody`). */
const bodyText = (body: unknown): string | Uint8Array => {
  if (typeof body === "string" || body instanceof Uint8Array) return body
  throw new Error(`the in-memory server reads string or byte bodies, got ${Object.prototype.toString.call(body)}`)
}

/** One session's in-memory server: its `fetch` plays the session's script. */
export class MemoryServer {
  /** The first failed check or script error; the adapter rethrows it after the run. */
  error: Error | undefined
  readonly script: Script
  constructor(script: Script) {
    this.script = script
  }

  /** Rethrows the first failure the server answered with HTTP 400, if any. */
  rethrow(): void {
    if (this.error !== undefined) throw this.error
  }

  readonly fetch = async (_input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    let body: Uint8Array
    try {
      const last = lastMessage(bodyText(init?.body))
      if (last.role === "tool") this.script.check(last.toolCallId, last.text)
      else this.script.check(undefined, undefined)
      body = bodyOf(this.script.next())
    } catch (cause) {
      const error = cause instanceof Error ? cause : new Error(String(cause))
      this.error ??= error
      return new Response(JSON.stringify({ error: { message: error.message, type: "invalid_request_error" } }), {
        status: 400,
        headers: { "content-type": "application/json" }
      })
    }
    return new Response(
      new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(body)
          controller.close()
        }
      }),
      { status: 200, headers: sseHeaders }
    )
  }
}

/** The header that routes a request of the global `fetch` to its session's server (see `route`). */
export const SESSION_HEADER = "x-bench-session"

const routes = new Map<string, MemoryServer>()
let nextRoute = 0
let original: typeof globalThis.fetch | undefined

const headerOf = (input: string | URL | Request, init: RequestInit | undefined): string | null => {
  const headers = init?.headers ?? (input instanceof Request ? input.headers : undefined)
  if (headers === undefined) return null
  if (headers instanceof Headers) return headers.get(SESSION_HEADER)
  return new Headers(headers).get(SESSION_HEADER)
}

/** The global `fetch` while a route is open: a request carrying `SESSION_HEADER` goes to its session's server. */
const routed = (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  const id = headerOf(input, init)
  const server = id === null ? undefined : routes.get(id)
  if (server !== undefined) return server.fetch(input, init)
  // Not a benchmark request (another test file of the same worker, say): the real fetch.
  return original!(input, init)
}

/**
 * Routes the global `fetch` to `server` for requests carrying the returned
 * header value, for clients that take `fetch` from the global and send
 * per-session headers (pi-ai's `openai` SDK client). The global is replaced
 * while at least one route is open and restored when the last one closes.
 */
export const route = (server: MemoryServer): { readonly id: string; readonly close: () => void } => {
  const id = String(nextRoute++)
  routes.set(id, server)
  if (original === undefined) {
    original = globalThis.fetch
    globalThis.fetch = routed
  }
  return {
    id,
    close: () => {
      if (!routes.delete(id) || routes.size > 0 || original === undefined) return
      globalThis.fetch = original
      original = undefined
    }
  }
}
