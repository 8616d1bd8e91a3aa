/**
 * A program of the host started with the hygiene the sandbox gives its own
 * commands, for a program that runs beside the sandbox rather than in it (the
 * supervisor's external CLI workers, Claude Code and Codex): only the
 * allowlisted variables of the host's environment ({@link environment}), no
 * descriptor but stdin, stdout and stderr (the program starts in a shell
 * that closes every other one it inherited, {@link closingInherited}; check
 * that the program is there first with {@link programExists}, since the
 * shell runs either way), and its output kept up to a cap
 * ({@link CappedOutput}).
 *
 * @example
 * ```ts
 * import { HostProcess } from "effect-agent/sandbox"
 *
 * const env = HostProcess.environment(["PATH"], { LANG: "C" })
 * const argv = HostProcess.closingInherited(["git", "status"], env)
 * console.log(HostProcess.programExists("sh", env, "/"), argv.at(-2), argv.at(-1)) // Output: true git status
 * ```
 *
 * @since 0.1.0
 */
import type * as PlatformError from "effect/PlatformError"
import * as Descriptors from "./internal/descriptors.ts"
import * as Errors from "./internal/errors.ts"
import * as Process from "./internal/process.ts"

export {
  /**
   * @since 0.1.0
   * @category capture
   */
  CappedOutput
} from "./internal/capture.ts"

/**
 * The host variables named in `allowlist` that are set, with `extra` over
 * them: the whole environment to start a program with (spawn it with
 * `extendEnv: false`, so that nothing else is inherited).
 *
 * @since 0.1.0
 * @category environment
 */
export const environment = (
  allowlist: ReadonlyArray<string>,
  extra?: Readonly<Record<string, string>> | undefined
): Record<string, string> => Process.allowlistedEnv(allowlist, extra)

/**
 * The argv that starts `argv` through a shell that closes every descriptor
 * above 2 it inherited, with `env` as its environment: spawn this instead of
 * `argv` itself (bash where there is one, else `/bin/sh`).
 *
 * @since 0.1.0
 * @category spawning
 */
export const closingInherited = (
  argv: readonly [string, ...Array<string>],
  env: Readonly<Record<string, string>>
): readonly [string, ...Array<string>] => Descriptors.closingInherited(argv, env)

/**
 * Whether `program` is there to run, looked up as a spawn would (a name with
 * a `/` from `cwd`, any other on `env`'s `PATH`). The shell of
 * {@link closingInherited} starts either way, so its spawn no longer says
 * when the program itself is missing: ask this first.
 *
 * @since 0.1.0
 * @category spawning
 */
export const programExists = (program: string, env: Readonly<Record<string, string>>, cwd: string): boolean =>
  Descriptors.programExists(program, env, cwd)

/**
 * A platform failure in a few words, as the sandbox's errors say it: its
 * `errno` code's meaning (`permission denied`, `not a directory`, …), else
 * its reason's tag.
 *
 * @since 0.1.0
 * @category errors
 */
export const describeFailure = (error: PlatformError.PlatformError): string => Errors.describe(error)
