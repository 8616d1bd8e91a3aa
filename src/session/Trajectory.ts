/**
 * Trajectories: every event of a run, one JSON object per line (NDJSON), in
 * the events' JSON encoding (`AgentEvent.AgentEventJson`), for replay,
 * debugging and evaluation.
 *
 * A run that starts from a prompt truncates the file; a continued run
 * (`Agent.runContinue`, `Session.resume`) appends to it, starting on a new
 * line if the previous process was killed in the middle of one. Each event is
 * written as it happens (one `write` per event, no buffering in the process,
 * so a crash loses nothing already emitted; it is not fsynced). Every run's
 * trajectory ends with `AgentEnd`, also when the run was interrupted; only a
 * process that is killed outright leaves a run without one, and the resumed
 * run follows it in the same file.
 *
 * A trajectory that cannot be written (a missing directory, a full disk)
 * logs a warning and stops writing; it never fails the run it observes.
 *
 * @example
 * ```ts
 * import { Agent } from "effect-agent"
 * import { Trajectory } from "effect-agent/session"
 *
 * const run = Agent.run({ prompt: "Plan a trip", plugins: [Trajectory.ndjson("trip.ndjson")] })
 * ```
 *
 * @since 0.1.0
 */
import { Effect, Exit, FileSystem, type PlatformError, Scope } from "effect"
import * as AgentEvent from "../AgentEvent.ts"
import type * as Hooks from "../Hooks.ts"

const encoder = new TextEncoder()
const NEWLINE = 10

/** One line: the event's JSON encoding. Written by hand: one event per write, without a stream to feed. */
const line = (event: AgentEvent.AgentEvent): Uint8Array =>
  encoder.encode(JSON.stringify(AgentEvent.encodeJson(event)) + "\n")

/**
 * A plugin writing the run's events to `path` (see the module
 * documentation). Give it in a run's `plugins`; it is built afresh for each
 * run.
 *
 * @since 0.1.0
 */
export const ndjson = (path: string): Effect.Effect<Hooks.Plugin, never, FileSystem.FileSystem> =>
  Effect.map(Effect.service(FileSystem.FileSystem), (fs) => {
    let scope: Scope.Closeable | undefined
    let file: FileSystem.File | undefined

    const stop = (error: PlatformError.PlatformError) =>
      Effect.andThen(close, Effect.logWarning(`trajectory ${path}: stopped writing: ${error.message}`))

    const close = Effect.suspend(() => {
      const open = scope
      scope = undefined
      file = undefined
      return open === undefined ? Effect.void : Scope.close(open, Exit.void)
    })

    /** A file written by a killed process may end in the middle of a line: start on a new one. */
    const endPreviousLine = (handle: FileSystem.File) =>
      Effect.gen(function*() {
        const size = (yield* handle.stat).size
        if (size === 0n) return
        const last = new Uint8Array(1)
        yield* handle.read(last, { position: size - 1n })
        if (last[0] !== NEWLINE) yield* handle.writeAll(encoder.encode("\n"))
      })

    const open = (fresh: boolean) =>
      Effect.gen(function*() {
        const opened = yield* Scope.make()
        scope = opened
        const handle = yield* Scope.provide(fs.open(path, { flag: fresh ? "w" : "a+" }), opened)
        if (!fresh) yield* endPreviousLine(handle)
        file = handle
      })

    const write = (event: AgentEvent.AgentEvent): Effect.Effect<void> => {
      const handle = file
      if (handle === undefined) return Effect.void
      return Effect.try({ try: () => line(event), catch: (cause) => cause }).pipe(
        Effect.matchEffect({
          onFailure: (cause) => Effect.logWarning(`trajectory ${path}: an ${event._tag} event does not encode:`, cause),
          onSuccess: (bytes) => Effect.catch(handle.writeAll(bytes), stop)
        })
      )
    }

    return {
      name: "trajectory",
      onEvent: (event, ctx) => {
        switch (event._tag) {
          case "AgentStart":
            // A fresh run reports its whole transcript as its own; a continued run reports none of it.
            return Effect.andThen(
              Effect.catch(Effect.andThen(close, open(event.messages.length === ctx.messages.length)), stop),
              Effect.suspend(() => write(event))
            )
          case "AgentEnd":
            return Effect.andThen(write(event), close)
          default:
            return write(event)
        }
      }
    } satisfies Hooks.Plugin
  })
