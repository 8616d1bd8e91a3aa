/**
 * The command's output streams and environment. Output is written
 * synchronously, one write per piece (Node writes to files, pipes and
 * terminals synchronously on Linux), so what the command shows is in the
 * order of the events, and nothing is lost when the process exits; the
 * `Stdio` service's sinks would need a fiber and a queue for the same.
 *
 * A stream whose reader is gone (a pipe closed by `| head`: `EPIPE`) stops
 * being written, quietly (Node ignores `SIGPIPE` and reports the error on the
 * stream, which would end the process with a stack trace); its `closed`
 * says so, for the run to stop.
 *
 * @since 0.1.0
 */
// effect's modules one by one: the command's start loads this (see Commands).
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"

/**
 * One output stream.
 *
 * @since 0.1.0
 */
export interface Output {
  readonly write: (text: string) => void
  /** Whether it is a terminal that understands cursor movement (not `TERM=dumb`). */
  readonly isTerminal: boolean
  /** Its width in cells (80 when unknown). */
  readonly columns: () => number
  /**
   * The regular file it writes to (`> result.json`), when the system says
   * which (Linux's `/proc`); `undefined` for a pipe, a terminal, or unknown.
   */
  readonly file?: string | undefined
  /**
   * Completes when it can no longer be written (its reader is gone: a
   * closed pipe); what is written from then on is dropped. Without it, it
   * stays open.
   */
  readonly closed?: Effect.Effect<void> | undefined
}

/**
 * The service shape.
 *
 * @since 0.1.0
 */
export interface Service {
  readonly stdout: Output
  readonly stderr: Output
  /** Colours allowed on terminals (`NO_COLOR` unset). */
  readonly color: boolean
  /** The working directory. */
  readonly cwd: string
  /** The environment variables. */
  readonly env: Readonly<Record<string, string | undefined>>
}

/** The path of the regular file open on a descriptor, as `/proc` names it (not a file, or unknown: `undefined`). */
const fileOf = (fd: number): string | undefined => {
  try {
    if (!Fs.fstatSync(fd).isFile()) return undefined
    const target = Fs.readlinkSync(`/proc/self/fd/${fd}`)
    return target.startsWith("/") && !target.endsWith(" (deleted)") ? target : undefined
  } catch {
    return undefined
  }
}

/** Whether a stream of the process can still be written, and the signal that it cannot; one for each stream. */
interface Watched {
  gone: boolean
  readonly closed: Deferred.Deferred<void>
}

const watched = new WeakMap<NodeJS.WriteStream, Watched>()

/**
 * Watches a stream of the process for the error that ends it (`EPIPE`, once
 * its reader is gone; `EIO`, a terminal hung up): written no more from then
 * on, and no `error` event left unhandled, which would end the process.
 */
const watch = (stream: NodeJS.WriteStream): Watched => {
  let state = watched.get(stream)
  if (state === undefined) {
    const created: Watched = { gone: false, closed: Deferred.makeUnsafe<void>() }
    stream.on("error", () => {
      created.gone = true
      Deferred.doneUnsafe(created.closed, Effect.void)
    })
    watched.set(stream, created)
    state = created
  }
  return state
}

const output = (stream: NodeJS.WriteStream, dumb: boolean, fd: number): Output => {
  const state = watch(stream)
  return {
    write: (text) => {
      if (!state.gone) stream.write(text)
    },
    isTerminal: stream.isTTY === true && !dumb,
    columns: () => stream.columns ?? 80,
    file: fileOf(fd),
    closed: Deferred.await(state.closed)
  }
}

/**
 * The process's streams, working directory and environment, as they are now.
 *
 * @since 0.1.0
 */
export const fromProcess = (): Service => {
  const dumb = process.env.TERM === "dumb"
  return {
    stdout: output(process.stdout, dumb, 1),
    stderr: output(process.stderr, dumb, 2),
    color: (process.env.NO_COLOR ?? "") === "",
    cwd: process.cwd(),
    env: process.env
  }
}

/**
 * The command's output streams and environment: by default the process's (as
 * they are when the command first uses them), so that the command tree runs
 * where it is mounted without more set-up; a test or a program that captures
 * the command's output provides its own.
 *
 * @since 0.1.0
 */
export class Io extends Context.Reference<Service>("effect-agent/cli/Io", { defaultValue: fromProcess }) {}

/**
 * The process's streams, read when the layer is built.
 *
 * @since 0.1.0
 */
export const layerProcess: Layer.Layer<never> = Layer.sync(Io, fromProcess)
