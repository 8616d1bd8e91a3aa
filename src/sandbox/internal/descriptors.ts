/**
 * The descriptors a command must not inherit. Node opens each descriptor of
 * its own close-on-exec, but those the process inherited are not (a shell's
 * `100</secret/key`, a job runner's pipe), and Node cannot mark them: every
 * child it spawns would get them, and read or write what they lead to (a
 * directory's descriptor leads to everything below it, past the sandbox's
 * view). So a command starts in a shell that closes every descriptor above 2
 * it finds (in `/proc/self/fd`, else `/dev/fd`) and then execs the command in
 * its place: the same process, the same environment, with stdin, stdout and
 * stderr only. Under bubblewrap the shell runs inside the sandbox, after
 * `bwrap` (which passes descriptors on by design).
 *
 * The shell is bash, where it is in one of the system's places
 * ({@link bashPaths}); else `/bin/sh`, which can close only the descriptors
 * 3 to 9 (`exec 12>&-` is a command named `12` to dash): with one above 9
 * open, it refuses to run the command (exit 126, saying why on stderr). The
 * command's environment is the one it was given: bash runs with `--norc -p`
 * (no startup file, nothing imported, every variable passed on as it came), the
 * `PWD` a shell adds is taken out, and so is the `SHLVL` bash's `exec` sets
 * (made an array, which bash does not export).
 *
 * @internal
 */
import * as Fs from "node:fs"
import * as NodePath from "node:path"
import type { Argv } from "./process.ts"

/**
 * Where bash is looked for: the system's places only, which the bubblewrap
 * sandbox shows (`/usr`, `/bin`, NixOS's current system); a bash elsewhere on
 * the `PATH` might not be in the sandbox's view.
 */
export const bashPaths: ReadonlyArray<string> = [
  "/usr/bin/bash",
  "/bin/bash",
  "/run/current-system/sw/bin/bash",
  "/usr/local/bin/bash"
]

/** The shell that closes the descriptors: bash, or `/bin/sh`. */
export interface Shell {
  readonly program: string
  readonly bash: boolean
}

/** Whether `file` is a regular file this process may execute. */
const executable = (file: string): boolean => {
  try {
    if (!Fs.statSync(file).isFile()) return false
    Fs.accessSync(file, Fs.constants.X_OK)
    return true
  } catch {
    return false
  }
}

let found: Shell | undefined

/** The shell, looked up once. */
const shell = (): Shell => {
  if (found === undefined) {
    const bash = bashPaths.find(executable)
    found = bash === undefined ? { program: "/bin/sh", bash: false } : { program: bash, bash: true }
  }
  return found
}

/** What the script takes out of the environment it passes on: what the command was not given. */
interface Added {
  readonly pwd: boolean
  readonly shlvl: boolean
}

/**
 * The script: close every descriptor above 2 (a directory listing's own
 * descriptor is closed by then, and closing a closed one is nothing), then
 * exec the arguments. `/dev/fd` where there is no `/proc` (macOS).
 */
const script = (bash: boolean, added: Added): string =>
  [
    `d=/proc/self/fd; [ -d "$d" ] || d=/dev/fd`,
    `for f in "$d"/*; do n=\${f##*/}; case $n in *[!0-9]*|[012]) ;; ${
      bash
        ? `*) eval "exec $n>&-" ;;`
        : `?) eval "exec $n>&-" ;; *) if [ -e "$d/$n" ]; then ` +
          `echo "effect-agent: descriptor $n is open, and /bin/sh cannot close it (bash can): the command did not run" >&2; ` +
          `exit 126; fi ;;`
    } esac; done`,
    ...(added.pwd ? ["unset PWD"] : []),
    // bash's exec sets SHLVL (0 when it was not set) and exports it; an array is not exported.
    ...(bash && added.shlvl ? ["unset SHLVL; declare -a SHLVL"] : []),
    // dash takes no `--`, bash needs it before a program named `-x`.
    bash ? `exec -- "$@"` : `exec "$@"`
  ].join("\n")

const scripts = new Map<string, string>()

/**
 * `argv` started through the shell that closes every inherited descriptor
 * above 2, with `env` as its environment (the shell: bash where there is one,
 * looked up once, else `/bin/sh`).
 */
export const closingInherited = (
  argv: Argv,
  env: Readonly<Record<string, string>>,
  { bash, program }: Shell = shell()
): Argv => {
  const added: Added = { pwd: !("PWD" in env), shlvl: !("SHLVL" in env) }
  const key = `${bash}:${added.pwd}:${added.shlvl}`
  let text = scripts.get(key)
  if (text === undefined) {
    text = script(bash, added)
    scripts.set(key, text)
  }
  // --norc: no ~/.bashrc, which bash reads when its stdin is a socket (as Node's pipes are) "for rshd";
  // -p: no BASH_ENV, no function imported from the environment, which it passes on as it came.
  return [program, ...(bash ? ["--norc", "--noprofile", "-p"] : []), "-c", text, "effect-agent", ...argv]
}

/**
 * Whether `program` is there to run, looked up as the spawn would (a name
 * with a `/` from `cwd`, any other on `PATH`): the shell that closes the
 * descriptors runs first, so the spawn no longer says when the program itself
 * is missing.
 */
export const programExists = (program: string, env: Readonly<Record<string, string>>, cwd: string): boolean => {
  if (program.includes("/")) return Fs.existsSync(NodePath.resolve(cwd, program))
  const dirs = (env.PATH ?? "/usr/bin:/bin").split(":")
  return dirs.some((dir) => executable(NodePath.resolve(cwd, dir === "" ? "." : dir, program)))
}
