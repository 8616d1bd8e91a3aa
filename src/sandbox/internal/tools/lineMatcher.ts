/**
 * Matches the lines of texts against a regular expression off the event
 * loop. The pattern comes from the model, and JavaScript's backtracking
 * engine can take exponential time (`(a+)+$` on 28 characters runs for
 * seconds, and a few more characters for hours): run on the event loop, it
 * would freeze every fiber of the process, timeouts included. Here it runs in
 * a worker thread, which a timeout or an interruption of the caller
 * terminates (V8 stops a running regular expression at once).
 *
 * The workers are pooled (`effect`'s `Pool`): spawning one costs about 40 ms
 * and a request to a warm one about 25 µs. A worker whose request did not
 * complete (interrupted, failed) is invalidated, so the next request gets a
 * fresh one.
 *
 * Why not `effect/workers`: its requests are interrupted by a message to the
 * worker, which a thread stuck in a regular expression never reads, and its
 * runner needs a worker entry file and the Effect runtime loaded in every
 * worker. The worker here is a few lines evaluated from a string (no file to
 * resolve, in the sources or in `dist`), answering one kind of message.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Pool from "effect/Pool"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { availableParallelism } from "node:os"
import { Worker } from "node:worker_threads"

/** Lines of `texts` that match `new RegExp(pattern, flags)`, at most `wanted` in all (in order). */
export interface Request {
  readonly pattern: string
  readonly flags: string
  readonly texts: ReadonlyArray<string>
  readonly wanted: number
}

/**
 * For each text, its matching lines as flat triples: the 1-based line
 * number, and the start and end offsets of the line's text in the text (no
 * newline, no carriage return before it).
 */
export type Matches = ReadonlyArray<ReadonlyArray<number>>

/** The worker failed (it ran out of memory, or exited); the search did not complete. */
export class MatcherError extends Schema.TaggedError<MatcherError>()("MatcherError", {
  reason: Schema.String
}) {
  override get message(): string {
    return `the search failed: ${this.reason}`
  }
}

export interface LineMatcher {
  readonly match: (request: Request) => Effect.Effect<Matches, MatcherError>
}

/**
 * The worker, as CommonJS source. Lines are split as `BuiltinTools` always
 * split them: on "\n", without the empty line after a final newline, a
 * trailing "\r" dropped.
 */
const workerSource = `"use strict"
const { parentPort } = require("node:worker_threads")
parentPort.on("message", ({ pattern, flags, texts, wanted }) => {
  try {
    const regex = new RegExp(pattern, flags)
    const found = []
    let left = wanted
    for (const text of texts) {
      const lines = []
      for (let start = 0, line = 1; left > 0 && start < text.length; line++) {
        const newline = text.indexOf("\\n", start)
        let end = newline === -1 ? text.length : newline
        if (end > start && text.charCodeAt(end - 1) === 13) end--
        if (regex.test(text.slice(start, end))) {
          lines.push(line, start, end)
          left--
        }
        start = newline === -1 ? text.length : newline + 1
      }
      found.push(lines)
    }
    parentPort.postMessage({ found })
  } catch (error) {
    parentPort.postMessage({ error: String(error instanceof Error ? error.message : error) })
  }
})
`

const Reply = Schema.Union([
  Schema.Struct({ found: Schema.Array(Schema.Array(Schema.Number)) }),
  Schema.Struct({ error: Schema.String })
])
const decodeReply = Schema.decodeUnknownEffect(Reply)

/** Workers at most: matching is CPU-bound, so about one per core. */
const poolSize = Math.min(8, Math.max(2, availableParallelism()))

const spawn = Effect.acquireRelease(
  Effect.try({
    try: () => {
      // A heap bound: a batch of texts is a few megabytes; a runaway worker fails alone.
      const worker = new Worker(workerSource, { eval: true, resourceLimits: { maxOldGenerationSizeMb: 512 } })
      // An idle worker does not keep the process alive.
      worker.unref()
      return worker
    },
    catch: (error) => new MatcherError({ reason: `cannot start a worker thread: ${String(error)}` })
  }),
  (worker) => Effect.promise(() => worker.terminate())
)

const ask = (worker: Worker, request: Request): Effect.Effect<Matches, MatcherError> =>
  Effect.callback<Matches, MatcherError>((resume) => {
    const done = () => {
      worker.off("message", onMessage)
      worker.off("error", onError)
      worker.off("exit", onExit)
      worker.unref()
    }
    const onMessage = (message: unknown) => {
      done()
      resume(decodeReply(message).pipe(
        Effect.mapError((error) => new MatcherError({ reason: `a malformed reply: ${error.message}` })),
        Effect.flatMap((reply) =>
          "found" in reply ? Effect.succeed(reply.found) : Effect.fail(new MatcherError({ reason: reply.error }))
        )
      ))
    }
    const onError = (error: Error) => {
      done()
      resume(Effect.fail(new MatcherError({ reason: error.message })))
    }
    const onExit = (code: number) => {
      done()
      resume(Effect.fail(new MatcherError({ reason: `the worker thread exited with code ${code}` })))
    }
    worker.on("message", onMessage)
    worker.on("error", onError)
    worker.on("exit", onExit)
    // Busy, it keeps the process alive until it answers.
    worker.ref()
    worker.postMessage(request)
    return Effect.sync(done)
  })

/**
 * A matcher on a pool of worker threads, spawned when first needed, retired
 * after a minute unused, and terminated when the scope closes.
 */
export const make: Effect.Effect<LineMatcher, never, Scope.Scope> = Effect.map(
  Pool.makeWithTTL({ acquire: spawn, min: 0, max: poolSize, timeToLive: "1 minute" }),
  (pool) => ({
    match: (request) =>
      Pool.use(pool, (worker) =>
        ask(worker, request).pipe(
          // Interrupted (a timeout) or failed: the worker may still be running the pattern; it is terminated.
          Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Pool.invalidate(pool, worker))
        ))
  })
)
