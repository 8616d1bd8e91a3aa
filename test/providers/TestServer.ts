/**
 * A real HTTP server on 127.0.0.1 for provider tests: it records each request
 * (path, headers, JSON body) and answers with what the test's `reply` returns,
 * typically a recorded SSE stream sent in small chunks.
 */
import { NodeHttpServer, NodeHttpServerRequest } from "@effect/platform-node"
import { type Duration, Effect, Stream } from "effect"
import { TestClock } from "effect/testing"
import { HttpServer, HttpServerRequest, HttpServerResponse } from "effect/http"
import * as Fs from "node:fs"
import * as Http from "node:http"

export interface Recorded {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: any
  /** The client's port: two requests with the same one came over the same connection. */
  readonly remotePort: number | undefined
  /** Destroys the connection, as a proxy or a crashing server would. */
  readonly reset: Effect.Effect<void>
}

export type Reply = (request: Recorded, index: number) => Effect.Effect<HttpServerResponse.HttpServerResponse>

export const start = Effect.fnUntraced(function*(reply: Reply) {
  const raw = Http.createServer()
  const server = yield* NodeHttpServer.make(() => raw, { port: 0, host: "127.0.0.1" })
  const requests: Array<Recorded> = []
  yield* server.serve(Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const text = yield* Effect.orDie(request.text)
    const socket = NodeHttpServerRequest.toIncomingMessage(request).socket
    const recorded: Recorded = {
      url: request.url,
      headers: request.headers,
      body: text === "" ? undefined : JSON.parse(text),
      remotePort: socket.remotePort,
      reset: Effect.sync(() => socket.destroy())
    }
    const index = requests.push(recorded) - 1
    return yield* reply(recorded, index)
  }))
  // Handlers that never answer keep their connections open: close them first,
  // so that the server's graceful shutdown (timed on the test clock) ends.
  yield* Effect.addFinalizer(() => Effect.sync(() => raw.closeAllConnections()))
  return { baseUrl: HttpServer.formatAddress(server.address), requests }
})

const encoder = new TextEncoder()

/** Bytes in pieces of `size`, so that events, lines and UTF-8 sequences are split across reads. */
export const chunks = (text: string, size = 7): Array<Uint8Array> => {
  const bytes = encoder.encode(text)
  const out: Array<Uint8Array> = []
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size))
  return out
}

/** An SSE response whose body is `text`, sent in small chunks. */
export const sse = (text: string) =>
  HttpServerResponse.stream(Stream.fromIterable(chunks(text)), { contentType: "text/event-stream" })

/** An SSE response that sends `text`, then destroys the connection. */
export const sseThenReset = (text: string, request: Recorded) => {
  // The pause (real time: the server runs on the test's clock) lets the bytes reach the client first.
  const reset = Effect.andThen(TestClock.withLive(Effect.sleep("20 millis")), request.reset)
  return HttpServerResponse.stream(
    Stream.concat(Stream.fromIterable(chunks(text)), Stream.drain(Stream.fromEffect(reset))),
    { contentType: "text/event-stream" }
  )
}

/** An SSE response that sends `text`, then ends its body once `wait` is done (in a read of its own). */
export const sseThenEnd = (text: string, wait: Effect.Effect<void>) =>
  HttpServerResponse.stream(Stream.concat(Stream.fromIterable(chunks(text)), Stream.drain(Stream.fromEffect(wait))), {
    contentType: "text/event-stream"
  })

/** An SSE response that sends `text` and then nothing more, without closing. */
export const sseThenHang = (text: string) =>
  HttpServerResponse.stream(Stream.concat(Stream.fromIterable(chunks(text)), Stream.never), {
    contentType: "text/event-stream"
  })

/**
 * An SSE response that sends `head`, then `pieces` one at a time, each after
 * `every` (on the server's clock: the test clock in `it.effect`), then
 * hangs without closing.
 */
export const trickle = (head: string, pieces: ReadonlyArray<string | Uint8Array>, every: Duration.Input) =>
  HttpServerResponse.stream(
    Stream.concat(
      Stream.fromIterable(chunks(head)),
      Stream.concat(
        Stream.mapEffect(
          Stream.fromIterable(pieces),
          (piece) => Effect.as(Effect.sleep(every), typeof piece === "string" ? encoder.encode(piece) : piece)
        ),
        Stream.never
      )
    ),
    { contentType: "text/event-stream" }
  )

export const fixture = (path: string): string =>
  Fs.readFileSync(new URL(`../fixtures/providers/${path}`, import.meta.url), "utf8")

/** The SSE text of JSON events, each as `data: <json>`, optionally named. */
export const events = (...items: ReadonlyArray<unknown | { readonly event: string; readonly data: unknown }>) =>
  items.map((item) =>
    typeof item === "object" && item !== null && "event" in item && "data" in item
      ? `event: ${String(item.event)}\ndata: ${JSON.stringify(item.data)}\n\n`
      : `data: ${typeof item === "string" ? item : JSON.stringify(item)}\n\n`
  ).join("")
