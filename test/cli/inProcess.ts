/**
 * The `effect-agent` command run inside the test process: the same command
 * tree and exit codes as the built `bin`, on captured output streams, a
 * given environment and stdin, and a terminal that can be faked. Faster than
 * a process, and the only way to see what the command draws on a terminal.
 */
import { NodeHttpClient, NodeServices } from "@effect/platform-node"
import { type Cause, Effect, Fiber, Layer, Queue, type Scope, Stdio, Stream, Terminal } from "effect"
import { Cli, ExitCode } from "effect-agent/cli"
import * as Io from "../../src/cli/internal/Io.ts"
import { type Proc, stateHome, waitForLine } from "./support.ts"

export interface Options {
  readonly cwd: string
  /** The whole environment the command sees, on top of `PATH`, `HOME` and the tests' `XDG_STATE_HOME`. */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
  /** What stdin holds (it ends after it), or its bytes as they come. */
  readonly stdin?: string | Stream.Stream<Uint8Array> | undefined
  /** Sees what the command writes on stdout, as it writes it (to answer events on stdin, say). */
  readonly onStdout?: ((text: string) => void) | undefined
  /** Make stderr (and stdin, with `stdinIsTerminal`) a terminal. */
  readonly stderrIsTerminal?: boolean | undefined
  readonly stdinIsTerminal?: boolean | undefined
  /** Make stdout a terminal. */
  readonly stdoutIsTerminal?: boolean | undefined
}

export interface Ran {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** A terminal whose keyboard is never pressed. */
const quietTerminal = Terminal.make({
  columns: Effect.succeed(100),
  rows: Effect.succeed(40),
  size: Effect.flatMap(Queue.unbounded<Terminal.Size, never>(), (queue) => Effect.succeed(queue)),
  readInput: Effect.flatMap(Queue.unbounded<Terminal.UserInput, never>(), (queue) => Effect.succeed(queue)),
  readLine: Effect.never,
  display: () => Effect.void
})

/** Runs `effect-agent <args>` in this process, to its exit code. */
export const runCommand = (args: ReadonlyArray<string>, options: Options): Effect.Effect<Ran> =>
  Effect.gen(function*() {
    let stdout = ""
    let stderr = ""
    const io: Io.Service = {
      stdout: {
        write: (text) => {
          stdout += text
          options.onStdout?.(text)
        },
        isTerminal: options.stdoutIsTerminal === true,
        columns: () => 100
      },
      stderr: {
        write: (text) => void (stderr += text),
        isTerminal: options.stderrIsTerminal === true,
        columns: () => 100
      },
      color: false,
      cwd: options.cwd,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, XDG_STATE_HOME: stateHome, ...options.env }
    }
    const onInterrupt: { code: ExitCode.ExitCode } = { code: ExitCode.codes.cancelled }
    const stdin = options.stdin === undefined
      ? Stream.empty
      : typeof options.stdin === "string"
      ? Stream.make(new TextEncoder().encode(options.stdin))
      : options.stdin
    const exit = yield* Cli.command.pipe(
      Effect.provideService(ExitCode.OnInterrupt, onInterrupt),
      Effect.provide(Layer.mergeAll(
        Layer.succeed(Io.Io, io),
        Stdio.layerTest({
          args: Effect.succeed(args),
          stdin,
          stdinIsTerminal: Effect.succeed(options.stdinIsTerminal === true)
        }),
        Layer.succeed(Terminal.Terminal, quietTerminal)
      )),
      Effect.provide(Layer.mergeAll(NodeServices.layer, NodeHttpClient.layerUndici)),
      Effect.exit
    )
    const code = ExitCode.fromExit(exit, onInterrupt, (text) => void (stderr += text))
    return { code, stdout, stderr }
  })

const encoder = new TextEncoder()

/**
 * `effect-agent <args>` started in this process, beside the test, as `spawn` starts it as a process: lines sent
 * to its stdin, its stdout lines waited for, its exit. For the stdin protocol and the run's own ends; signals
 * are a process's (`spawn`), and ask for one here is a defect.
 */
export const startCommand = (
  args: ReadonlyArray<string>,
  options: Omit<Options, "stdin" | "onStdout">
): Effect.Effect<Proc, never, Scope.Scope> =>
  Effect.gen(function*() {
    const input = yield* Queue.unbounded<Uint8Array, Cause.Done>()
    const lines: Array<string> = []
    let partial = ""
    const onStdout = (text: string) => {
      const parts = (partial + text).split("\n")
      partial = parts.pop() ?? ""
      lines.push(...parts)
    }
    const running = yield* Effect.forkScoped(runCommand(args, { ...options, stdin: Stream.fromQueue(input), onStdout }))
    const proc: Proc = {
      send: (line) => Effect.asVoid(Queue.offer(input, encoder.encode(`${line}\n`))),
      closeStdin: Effect.asVoid(Queue.end(input)),
      waitFor: (matches) => waitForLine(Effect.sync(() => lines), matches),
      signal: (signal) =>
        Effect.die(new Error(`${signal}: a command run in the test's process takes no signals (spawn it)`)),
      exit: Fiber.join(running).pipe(
        Effect.timeoutOrElse({
          duration: "60 seconds",
          orElse: () => Effect.die(new Error(`${args.join(" ")}: no exit in 60 s`))
        })
      )
    }
    return proc
  })
