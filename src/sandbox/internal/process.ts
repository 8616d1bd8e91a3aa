/**
 * Host processes: a command spawned in its own process group with an
 * allowlisted environment, its output captured up to a cap, and its whole
 * process tree killed when it times out, exits or is interrupted
 * ({@link ProcessTree}).
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as PlatformError from "effect/PlatformError"
import * as Stream from "effect/Stream"
import * as ChildProcess from "effect/process/ChildProcess"
import type * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import { CappedOutput } from "./capture.ts"
import { CommandError, describe } from "./errors.ts"
import type { CommandResult } from "./model.ts"
import * as ProcessTree from "./processTree.ts"

/** A program and its arguments. */
export type Argv = readonly [string, ...Array<string>]

/** A command to spawn, with everything resolved. */
export interface Command {
  readonly argv: Argv
  /** How the command is named in errors (the command as it was given). */
  readonly display: string
  readonly cwd: string
  /** The whole environment: nothing is inherited. */
  readonly env: Readonly<Record<string, string>>
  readonly stdin: string | undefined
  readonly timeout: Duration.Duration
  /** Bytes kept of each of stdout and stderr. */
  readonly cap: number
  /** How long the process tree gets after SIGTERM before SIGKILL. */
  readonly killGracePeriod: Duration.Duration
  /**
   * Whether the command's processes carry a marker in their environment, which finds those that left its tree
   * (a local command's `setsid` children once their parent is gone); without it, the tree is the command's
   * descendants, all of them in a PID namespace of the command's own (bubblewrap). A marker would let a command
   * hand it to a process of the host it does not own (a file a user's shell sources), to have it killed.
   */
  readonly marked: boolean
}

/** How long output still in the pipes is read after the command exited. */
const outputGrace = Duration.millis(250)

/** The host variables named in `allowlist` that are set, with `extra` over them. */
export const allowlistedEnv = (
  allowlist: ReadonlyArray<string>,
  extra: Readonly<Record<string, string>> | undefined
): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const name of allowlist) {
    const value = process.env[name]
    if (value !== undefined) env[name] = value
  }
  return Object.assign(env, extra)
}

/**
 * Runs a command in its own scope: the scope's release (on exit, timeout or
 * interruption) kills the command's whole process tree, SIGTERM then SIGKILL
 * after the grace period: every process that descends from the command or
 * (when `marked`) carries its marker in its environment ({@link ProcessTree.kill}),
 * then its process group (the Node spawner's `forceKillAfter`), which is all
 * there is to kill where `/proc` is missing.
 */
export const run = (
  spawner: ChildProcessSpawner.ChildProcessSpawner["Service"],
  command: Command
): Effect.Effect<CommandResult, CommandError> =>
  Effect.scoped(Effect.gen(function*() {
    const [program, ...args] = command.argv
    const start = yield* Clock.currentTimeMillis
    const marker = command.marked ? ProcessTree.newMarker() : undefined
    const handle = yield* spawner.spawn(ChildProcess.make(program, args, {
      cwd: command.cwd,
      env: marker === undefined ? command.env : { ...command.env, [ProcessTree.markerVariable]: marker },
      extendEnv: false,
      // Its own process group (the spawner's default on POSIX), so a kill
      // reaches every descendant that did not start a session of its own.
      detached: true,
      forceKillAfter: command.killGracePeriod,
      stdin: command.stdin === undefined ? "ignore" : Stream.make(new TextEncoder().encode(command.stdin))
    })).pipe(
      Effect.mapError((error) => new CommandError({ command: command.display, reason: spawnFailure(program, error) }))
    )
    // Added after the spawn, so released before the spawner's group kill: the tree is found while its root,
    // and the parents that tie the rest to it, are still there.
    const root = yield* ProcessTree.identify(handle.pid)
    yield* Effect.addFinalizer(() =>
      ProcessTree.kill(
        marker === undefined ? undefined : `${ProcessTree.markerVariable}=${marker}`,
        root,
        command.killGracePeriod
      ).pipe(
        Effect.flatMap((left) =>
          left.length === 0
            ? Effect.void
            : Effect.logWarning(`${command.display}: processes ${left.join(", ")} could not be killed`)
        )
      )
    )
    const stdout = new CappedOutput(command.cap)
    const stderr = new CappedOutput(command.cap)
    const readers = yield* Effect.forkChild(
      Effect.all([
        Stream.runForEach(handle.stdout, (chunk) => Effect.sync(() => stdout.push(chunk))),
        Stream.runForEach(handle.stderr, (chunk) => Effect.sync(() => stderr.push(chunk)))
      ], { concurrency: 2, discard: true }).pipe(Effect.ignore)
    )
    const exit = yield* handle.exitCode.pipe(
      Effect.map((code): number | null => code),
      Effect.orElseSucceed(() => null), // killed by a signal
      Effect.timeoutOption(command.timeout)
    )
    // Output still in the pipes after the exit; a background process holding
    // them open is not waited for (it is killed with the group).
    if (exit._tag === "Some") yield* Effect.timeoutOption(Fiber.join(readers), outputGrace)
    const end = yield* Clock.currentTimeMillis
    return {
      exitCode: exit._tag === "Some" ? exit.value : null,
      stdout: stdout.text(),
      stderr: stderr.text(),
      durationMs: end - start,
      timedOut: exit._tag === "None",
      truncated: stdout.dropped > 0 || stderr.dropped > 0
    }
  }))

const spawnFailure = (program: string, error: PlatformError.PlatformError): string =>
  error.reason._tag === "NotFound"
    ? `program not found: ${program}`
    : error.reason._tag === "BadArgument"
    ? error.reason.description ?? "bad argument"
    : describe(error)
