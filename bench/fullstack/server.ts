/**
 * The full-stack benchmark's model server, run in its own process: a bare
 * `node:http` server on 127.0.0.1 that answers `POST …/chat/completions` with
 * the workload's Chat Completions SSE stream (see `wire.ts`) and checks every
 * request's history, counting the requests whose history is wrong.
 *
 * - `/fast/v1/chat/completions`: the whole response in one write, as fast as
 *   possible (a client reads it in one or a few reads).
 * - `/spaced/v1/chat/completions`: one event per write, each after a timer
 *   (about 1 ms), so that each event arrives in its own read, as tokens from a
 *   real model do.
 * - `GET /stats`: `{ requests, mismatches, problems }` (the first problems found).
 * - `POST /reset`: zeroes the counters.
 *
 * Prints `listening <port>` when ready.
 *
 *   node bench/fullstack/server.ts
 */
import * as Http from "node:http"
import { check, turnEvents } from "./wire.ts"

let requests = 0
let mismatches = 0
const problems: Array<string> = []

const json = (res: Http.ServerResponse, status: number, value: unknown) => {
  const body = JSON.stringify(value)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const stream = (res: Http.ServerResponse, events: ReadonlyArray<string>, spaced: boolean) => {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
  if (!spaced) {
    res.end(events.join(""))
    return
  }
  let i = 0
  const next = () => {
    if (res.destroyed) return
    const event = events[i++]
    if (event === undefined) {
      res.end()
      return
    }
    res.write(event)
    setTimeout(next, 1)
  }
  next()
}

const server = Http.createServer((req, res) => {
  const url = req.url ?? ""
  if (req.method === "GET" && url === "/stats") return json(res, 200, { requests, mismatches, problems })
  if (req.method === "POST" && url === "/reset") {
    requests = 0
    mismatches = 0
    problems.length = 0
    return json(res, 200, {})
  }
  const spaced = url === "/spaced/v1/chat/completions"
  if (req.method !== "POST" || (!spaced && url !== "/fast/v1/chat/completions")) {
    return json(res, 404, { error: { message: `no route ${req.method} ${url}` } })
  }
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    requests++
    let body: unknown
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
    } catch {
      body = undefined
    }
    const checked = check(body)
    if (checked.problems.length > 0) {
      mismatches++
      if (problems.length < 20) problems.push(checked.problems.join("; "))
    }
    stream(res, turnEvents(checked.turn, checked.toolTurns), spaced)
  })
})
server.keepAliveTimeout = 60_000

server.listen(0, "127.0.0.1", () => {
  const address = server.address()
  if (address === null || typeof address === "string") throw new Error("no port")
  process.stdout.write(`listening ${address.port}\n`)
})
