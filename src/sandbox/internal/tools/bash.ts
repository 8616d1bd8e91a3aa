/**
 * The `bash` tool: a command run in the sandbox, its output and exit code as
 * text.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { CommandResult, Operations } from "../model.ts"
import { limits } from "./limits.ts"
import { describeError } from "./text.ts"

/** The parameters of `BuiltinTools.Bash`. */
export interface Parameters {
  readonly command: string
  readonly timeout?: number
}

const format = (result: CommandResult, timeoutSeconds: number): string => {
  const parts: Array<string> = []
  if (result.stdout !== "") parts.push(result.stdout.replace(/\n$/, ""))
  if (result.stderr !== "") parts.push(`[stderr]\n${result.stderr.replace(/\n$/, "")}`)
  if (parts.length === 0) parts.push("(no output)")
  parts.push(
    result.timedOut
      ? `[timed out after ${timeoutSeconds}s; the command and its processes were killed]`
      : result.exitCode === null
      ? "[killed by a signal]"
      : `[exit code ${result.exitCode}]`
  )
  return parts.join("\n")
}

/** Runs the command under bash; a command that does not exit with 0 is a failure the model reads. */
export const bash = (sandbox: Operations) => (params: Parameters): Effect.Effect<string, string> => {
  const timeout = Math.min(
    Math.max(params.timeout ?? limits.defaultTimeoutSeconds, 1),
    limits.maxTimeoutSeconds
  )
  return sandbox.exec({
    command: ["bash", "-c", params.command],
    timeout: `${timeout} seconds`,
    maxOutputBytes: limits.commandOutputBytes
  }).pipe(
    Effect.mapError(describeError),
    Effect.flatMap((result) => {
      const text = format(result, timeout)
      return result.exitCode === 0 ? Effect.succeed(text) : Effect.fail(text)
    })
  )
}
