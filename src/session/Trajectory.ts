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
 * It writes only to a regular file, never through a link: a symbolic link,
 * a FIFO, a device or a directory at `path` (an agent could plant one where
 * its trajectory goes) is refused like any file that cannot be written. A
 * trajectory that cannot be written (a missing directory, a full disk, such
 * a file) logs a warning and stops writing; it never fails the run it
 * observes.
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
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FileSystem from "effect/FileSystem"
import * as PlatformError from "effect/PlatformError"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Tracer from "effect/Tracer"
import * as AgentEvent from "../AgentEvent.ts"
import type * as Hooks from "../Hooks.ts"

const encoder = new TextEncoder()
const NEWLINE = 10

const fileKinds: Partial<Record<FileSystem.File.Type, string>> = {
  Directory: "a directory",
  SymbolicLink: "a symbolic link",
  FIFO: "a FIFO",
  Socket: "a socket",
  BlockDevice: "a device",
  CharacterDevice: "a device"
}

/** What an open that refused the file found there, by `errno` code. */
const openRefusals: Readonly<Record<string, FileSystem.File.Type>> = { ELOOP: "SymbolicLink", EISDIR: "Directory" }

const errnoCode = (error: PlatformError.PlatformError): string | undefined => {
  const cause: unknown = error.reason.cause
  return typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined
}

/**
 * One line: the event's JSON encoding, with the trace and span ids of the
 * span the event happened in when there is one (see {@link Line}). Written
 * by hand: one event per write, without a stream to feed.
 */
const lineText = (event: AgentEvent.AgentEvent, span: Tracer.AnySpan | undefined): string => {
  const encoded = AgentEvent.encodeJson(event)
  const traced = span === undefined || typeof encoded !== "object" || encoded === null || Array.isArray(encoded)
    ? encoded
    : { ...encoded, traceId: span.traceId, spanId: span.spanId }
  return JSON.stringify(traced) + "\n"
}

/**
 * The span an event happens in: the fiber's current span (the run's
 * `invoke_agent`, the turn's `chat`, a call's `execute_tool`, or the
 * application's own when the run makes none).
 */
const currentSpan: Effect.Effect<Tracer.AnySpan | undefined> = Effect.withFiber((fiber) =>
  Effect.succeed(Context.getOrUndefined(fiber.context, Tracer.ParentSpan))
)

/**
 * One line of a trajectory, read back: an event, and, when it happened in a
 * span, that span's `traceId` and `spanId` (lines written before they were
 * recorded, and lines of runs without a span, have none). On disk the ids
 * are two more keys of the event's JSON object, so a reader of events alone
 * reads the lines as before.
 *
 * @since 0.1.0
 * @category models
 */
export interface Line {
  readonly event: AgentEvent.AgentEvent
  readonly traceId?: string
  readonly spanId?: string
}

const Ids = Schema.Struct({
  traceId: Schema.optionalKey(Schema.String),
  spanId: Schema.optionalKey(Schema.String)
})
const decodeJson = Schema.decodeUnknownEffect(Schema.fromJsonString(Schema.Unknown))
const decodeIds = Schema.decodeUnknownEffect(Ids)

/**
 * Reads one line of a trajectory: the event, and the span ids when the line
 * has them (older lines have none, and still load). Fails with a
 * `SchemaError` when the line is not an event.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decodeLine = (text: string): Effect.Effect<Line, Schema.SchemaError> =>
  Effect.flatMap(decodeJson(text), (json) =>
    Effect.map(
      Effect.all([AgentEvent.decodeJson(json), decodeIds(json)]),
      ([event, ids]): Line => ({ event, ...ids })
    ))

/**
 * How events are written: `make` gives, for each run (at its `AgentStart`),
 * what writes its events, each as the lines it becomes (each ending in a
 * newline; none to write nothing), given the span it happened in. The
 * default, {@link events}, writes each event's JSON encoding; another (ynh's
 * format: `YnhTrajectory.format` of `effect-agent/cli`) maps them to its own
 * lines, keeping what it needs across a run's events.
 *
 * @since 0.1.0
 * @category models
 */
export interface Format {
  readonly make: () => (event: AgentEvent.AgentEvent, span: Tracer.AnySpan | undefined) => ReadonlyArray<string>
}

/**
 * The default format: each event's JSON encoding, with its span's ids (see
 * {@link Line}).
 *
 * @since 0.1.0
 * @category codecs
 */
export const events: Format = {
  make: () => (event, span) => [lineText(event, span)]
}

/**
 * A plugin writing the run's events to `path` (see the module
 * documentation), in `format` ({@link events} unless given). Give it in a
 * run's `plugins`; it is built afresh for each run. A file it creates is
 * readable by its owner alone (`0600`): it holds the transcript. With
 * `append`, every run appends to the file, one started from a prompt too:
 * for events that reach it from outside the run (a session's, read from
 * `Sessions.watch`), where it cannot tell a fresh run from a continued one.
 *
 * @since 0.1.0
 * @category codecs
 */
export const ndjson = (
  path: string,
  options?: { readonly append?: boolean | undefined; readonly format?: Format | undefined }
): Effect.Effect<Hooks.Plugin, never, FileSystem.FileSystem> =>
  Effect.map(Effect.service(FileSystem.FileSystem), (fs) => {
    let scope: Scope.Closeable | undefined
    let file: FileSystem.File | undefined
    const format = options?.format ?? events
    let lines = format.make()

    const stop = (error: PlatformError.PlatformError) =>
      Effect.andThen(close, Effect.logWarning(`trajectory ${path}: stopped writing: ${error.message}`))

    const notRegular = (type: FileSystem.File.Type) =>
      Effect.fail(PlatformError.badArgument({
        module: "Trajectory",
        method: "ndjson",
        description: `${path} is ${fileKinds[type] ?? "something else"}, not a regular file`
      }))

    /** An open that failed on a link or a directory says so. */
    const refused = (error: PlatformError.PlatformError) => {
      const found = openRefusals[errnoCode(error) ?? ""]
      return found === undefined ? Effect.fail(error) : notRegular(found)
    }

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

    // The agent may plant a link or a FIFO where the trajectory goes: the file is opened without
    // following a link ("noFollow": O_NOFOLLOW), read and write ("a+": on Linux, opening a FIFO
    // read-write does not wait for a peer, as "w" would), and used only if it is a regular file.
    // A fresh run then truncates it: "w" would have truncated whatever it opened.
    const open = (fresh: boolean) =>
      Effect.gen(function*() {
        const opened = yield* Scope.make()
        scope = opened
        // Created readable by its owner alone: a transcript holds every prompt and tool result.
        const handle = yield* Scope.provide(fs.open(path, { flag: "a+", noFollow: true, mode: 0o600 }), opened).pipe(
          Effect.catch(refused)
        )
        const info = yield* handle.stat
        if (info.type !== "File") return yield* notRegular(info.type)
        if (fresh) yield* handle.truncate(0)
        else yield* endPreviousLine(handle)
        file = handle
      })

    const write = (event: AgentEvent.AgentEvent): Effect.Effect<void> => {
      const handle = file
      if (handle === undefined) return Effect.void
      const encoded = (span: Tracer.AnySpan | undefined) =>
        Effect.try({ try: () => lines(event, span).join(""), catch: (cause) => cause })
      return Effect.flatMap(currentSpan, encoded).pipe(
        Effect.matchEffect({
          onFailure: (cause) => Effect.logWarning(`trajectory ${path}: an ${event._tag} event does not encode:`, cause),
          onSuccess: (text) => text === "" ? Effect.void : Effect.catch(handle.writeAll(encoder.encode(text)), stop)
        })
      )
    }

    return {
      name: "trajectory",
      onEvent: (event, ctx) => {
        switch (event._tag) {
          case "AgentStart":
            lines = format.make()
            // A fresh run reports its whole transcript as its own; a continued run reports none of it.
            return Effect.andThen(
              Effect.catch(
                Effect.andThen(close, open(options?.append !== true && event.messages.length === ctx.messages.length)),
                stop
              ),
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
