/**
 * An OTLP/HTTP receiver for tests: a node:http server on 127.0.0.1 that keeps
 * the body of every POST, and the spans of the JSON traces bodies it got.
 */
import { Effect } from "effect"
import * as Http from "node:http"

/** An OTLP/HTTP receiver: keeps the body of every POST, answers 200. */
export const receiver = Effect.acquireRelease(
  Effect.callback<{ readonly url: string; readonly bodies: Array<{ path: string; text: string }> }>((resume) => {
    const bodies: Array<{ path: string; text: string }> = []
    const server = Http.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        bodies.push({ path: request.url ?? "", text: Buffer.concat(chunks).toString("utf8") })
        response.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      resume(Effect.succeed({ url: `http://127.0.0.1:${port}`, bodies, server } as const))
    })
  }),
  (found) =>
    Effect.callback<void>((resume) => {
      const server = (found as unknown as { readonly server: Http.Server }).server
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
)

/** An OTLP attribute value as a plain value. */
const plain = (value: any): unknown =>
  value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : undefined) ?? value.doubleValue ??
    value.boolValue ?? (value.arrayValue ? (value.arrayValue.values ?? []).map(plain) : undefined)

export interface OtlpSpan {
  readonly name: string
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly kind: number
  readonly attributes: Record<string, unknown>
  readonly status: { readonly code: number; readonly message?: string }
  readonly links: ReadonlyArray<{ readonly traceId: string; readonly spanId: string }>
}

/** Every span of every traces body. */
export const spansOf = (bodies: ReadonlyArray<{ path: string; text: string }>): Array<OtlpSpan> =>
  bodies.filter((body) => body.path === "/v1/traces").flatMap((body) =>
    JSON.parse(body.text).resourceSpans.flatMap((resource: any) =>
      resource.scopeSpans.flatMap((scope: any) =>
        scope.spans.map((span: any): OtlpSpan => ({
          ...span,
          attributes: Object.fromEntries(span.attributes.map((a: any) => [a.key, plain(a.value)]))
        }))
      )
    )
  )

