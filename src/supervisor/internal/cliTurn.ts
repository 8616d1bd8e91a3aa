/**
 * One turn of an external CLI: the process spawned in the workspace with an
 * allowlisted environment and the message on its stdin, its stdout decoded
 * line by line under the caps, and the outcome read from the events and the
 * exit code. The process runs in its own scope and process group: the end of
 * the turn, its timeout or its interruption kills the whole group.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as PlatformError from "effect/PlatformError"
import * as Stream from "effect/Stream"
import * as ChildProcess from "effect/process/ChildProcess"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import { redactor } from "../../providers/Redaction.ts"
import * as HostProcess from "../../sandbox/HostProcess.ts"
import { type TurnReply, type TurnRequest, WorkerError } from "../Worker.ts"
import { type Exceeded, LineSplitter } from "./lines.ts"
import type { Ending, Protocol, TurnDecoder } from "./protocol.ts"

/** Everything a turn needs, resolved and clamped. */
export interface Settings {
  readonly worker: string
  readonly executable: string
  readonly cwd: string
  /** The variables of the parent's environment the CLI gets (when set). */
  readonly env: ReadonlyArray<string>
  /** Those of `env` whose values are kept out of error messages. */
  readonly secrets: ReadonlyArray<string>
  readonly timeout: Duration.Duration
  readonly maxTurnBytes: number
  readonly maxLineBytes: number
}

/** How long the process group gets after SIGTERM before SIGKILL. */
const killGrace = Duration.seconds(2)
/** How long output still in the pipes is read after the exit. */
const outputGrace = Duration.millis(500)
/** Bytes of stderr kept for error messages (its start and end). */
const stderrCap = 4096

const encoder = new TextEncoder()

/** Runs one turn of `protocol` for `request`. */
export const run = (
  settings: Settings,
  protocol: Protocol,
  request: TurnRequest
): Effect.Effect<TurnReply, WorkerError, ChildProcessSpawner.ChildProcessSpawner> =>
  Effect.gen(function*() {
    const fail = failure(settings.worker)
    const turn = protocol.begin(request, yield* Effect.sync(() => globalThis.crypto.randomUUID()))
    if (typeof turn === "string") return yield* fail("spawn", turn)
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    return yield* Effect.scoped(attempt(spawner, settings, turn.args, turn.decoder, request.message)).pipe(
      Effect.timeoutOrElse({
        duration: settings.timeout,
        orElse: () =>
          fail("timeout", `no reply within ${Duration.format(settings.timeout)}: the process was killed`)
      })
    )
  })

const failure = (worker: string) => (reason: WorkerError["reason"], message: string, exitCode?: number) =>
  Effect.fail(new WorkerError({ worker, reason, message, exitCode }))

const attempt = (
  spawner: ChildProcessSpawner.ChildProcessSpawner["Service"],
  settings: Settings,
  args: ReadonlyArray<string>,
  decoder: TurnDecoder,
  message: string
) =>
  Effect.gen(function*() {
    const fail = failure(settings.worker)
    const env = HostProcess.environment(settings.env)
    // The CLI starts in the shell that closes the descriptors this process inherited: the spawn runs the shell.
    if (!HostProcess.programExists(settings.executable, env, settings.cwd)) {
      return yield* fail("spawn", `program not found: ${settings.executable}`)
    }
    const [shell, ...shellArgs] = HostProcess.closingInherited([settings.executable, ...args], env)
    const handle = yield* spawner.spawn(ChildProcess.make(shell, shellArgs, {
      cwd: settings.cwd,
      env,
      extendEnv: false,
      // Its own process group, so that the kill reaches every descendant.
      detached: true,
      forceKillAfter: killGrace,
      stdin: Stream.make(encoder.encode(message))
    })).pipe(Effect.catch((error) => fail("spawn", spawnFailure(settings, error))))
    const stderr = new HostProcess.CappedOutput(stderrCap)
    const stderrReader = yield* Effect.forkChild(
      Stream.runForEach(handle.stderr, (chunk) => Effect.sync(() => stderr.push(chunk))).pipe(Effect.ignore)
    )
    const splitter = new LineSplitter(settings.maxLineBytes, settings.maxTurnBytes)
    const read = Stream.runForEach(handle.stdout, (chunk) => {
      const problem = readChunk(splitter, decoder, chunk)
      return problem === undefined ? Effect.void : fail("decode", problem)
    }).pipe(
      Effect.catchTag(
        "PlatformError",
        (error) => fail("eof", `its output could not be read: ${HostProcess.describeFailure(error)}`)
      ),
      Effect.andThen(Effect.suspend(() => {
        const last = splitter.end()
        const problem = last === undefined ? undefined : decoder.line(last)
        return problem === undefined ? Effect.void : fail("decode", problem)
      }))
    )
    const exitCode = handle.exitCode.pipe(
      Effect.map((code): number | undefined => code),
      Effect.orElseSucceed(() => undefined) // killed by a signal
    )
    // A protocol error ends the turn at once; otherwise the exit does, and then the output still in the
    // pipe is read for a moment (a descendant holding the pipe open is not waited for: it dies with the group).
    const reader = yield* Effect.forkChild(read)
    const code = yield* Effect.raceFirst(exitCode, Effect.andThen(Fiber.join(reader), Effect.never))
    yield* Effect.timeoutOption(Fiber.join(reader), outputGrace)
    yield* Effect.timeoutOption(Fiber.join(stderrReader), outputGrace)
    const redact = secretRedactor(env, settings.secrets)
    return yield* outcome(settings.worker, decoder.end(), code, stderr.text().trim(), redact)
  })

/** The lines of `chunk` read; a message when the output broke the caps or the protocol. */
const readChunk = (splitter: LineSplitter, decoder: TurnDecoder, chunk: Uint8Array): string | undefined => {
  const lines = splitter.push(chunk)
  if (isExceeded(lines)) return lines.message
  for (const line of lines) {
    const problem = decoder.line(line)
    if (problem !== undefined) return problem
  }
  return undefined
}

const isExceeded = (lines: ReadonlyArray<string> | Exceeded): lines is Exceeded => "_tag" in lines

/** The reply, or the error, from how the events ended and how the process exited. */
const outcome = (
  worker: string,
  ending: Ending,
  code: number | undefined,
  stderr: string,
  redact: (text: string) => string
): Effect.Effect<TurnReply, WorkerError> => {
  const error = (reason: WorkerError["reason"], message: string) =>
    Effect.fail(
      new WorkerError({
        worker,
        reason,
        message: redact(stderr === "" ? message : `${message}; stderr: ${stderr}`),
        exitCode: code
      })
    )
  if (ending._tag === "Broken") return error("decode", ending.message)
  if (code !== 0) {
    const status = code === undefined ? "it was killed by a signal" : `it exited with code ${code}`
    const detail = ending._tag === "Completed" ? undefined : ending.message
    return error("exit", detail === undefined ? status : `${status}: ${detail}`)
  }
  switch (ending._tag) {
    case "Completed":
      // The CLI has the key in its environment: a reply that echoes it must not carry it into the transcript.
      return Effect.succeed({ ...ending.reply, text: redact(ending.reply.text) })
    case "Failed":
      return error("exit", ending.message)
    case "Incomplete":
      return error("eof", `its output ended before the turn did${suffix(ending.message)}`)
  }
}

const suffix = (message: string | undefined): string => message === undefined ? "" : `: ${message}`

/** Keeps the values of the named variables out of a text (a CLI may echo its key in an error). */
const secretRedactor = (env: Readonly<Record<string, string>>, secrets: ReadonlyArray<string>) => {
  const redactors = secrets.flatMap((name) => {
    const value = env[name]
    return value === undefined || value.length < 4 ? [] : [redactor(value)]
  })
  return (text: string): string => redactors.reduce((current, redact) => redact(current), text)
}

const spawnFailure = (settings: Settings, error: PlatformError.PlatformError): string =>
  // The spawner checks the working directory with the file system before it spawns.
  error.reason.module === "FileSystem"
    ? `the workspace cannot be entered: ${settings.cwd} (${HostProcess.describeFailure(error)})`
    : error.reason._tag === "NotFound"
    ? `program not found: ${settings.executable}`
    : error.reason._tag === "BadArgument"
    ? error.reason.description ?? "bad argument"
    : HostProcess.describeFailure(error)
