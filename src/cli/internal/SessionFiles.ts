/**
 * The files of a session directory, and where one may be. A session
 * directory holds `run.json` (the run's `Target`: provider, model, base URL,
 * the name of the key's variable, never a key; workspace, sandbox, tools, MCP
 * servers, approvals; and for a supervised run its `Supervision`: checks,
 * plan, worker, limits), the checkpoint (`checkpoint/`) and the trajectory
 * (`trajectory.ndjson`). It may not overlap the workspace of an agent with
 * tools, and the command does not write through links in it. `run.json` is
 * sealed (see `Seal`) and not trusted when its seal does not match; `--resume
 * DIR` runs on what it says, with the flags given on top, except what widens
 * the agent's reach (workspace, local sandbox, approvals, MCP servers, base
 * URL, key variable, an external worker), which must be given again as
 * flags ({@link widening}).
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Schema from "effect/Schema"
import { configError, type Failure, resumeFailure } from "./Failure.ts"
import * as Seal from "./Seal.ts"
import { baseUrlEnv, Supervision, Target } from "./Target.ts"

/** The environment variables the command sees. */
type Env = Readonly<Record<string, string | undefined>>

/**
 * Where the command runs, as far as a target's reach depends on it: the
 * working directory, and the environment (for `OPENAI_BASE_URL` and
 * `ANTHROPIC_BASE_URL`).
 *
 * @since 0.1.0
 */
export interface Place {
  readonly cwd: string
  readonly env: Env
}

/**
 * The `run.json` of a session directory.
 *
 * @since 0.1.0
 */
export const SessionFile = Schema.Struct({
  version: Schema.Literal(1),
  target: Target,
  /** Present for a supervised session. */
  supervision: Schema.optionalKey(Supervision)
})
/** @since 0.1.0 */
export type SessionFile = typeof SessionFile.Type

/** `run.json` as written: the session file and its seal (see `Seal`). */
const SessionFileSealed = Schema.Struct({ ...SessionFile.fields, seal: Schema.optionalKey(Schema.String) })

/**
 * The paths of a session directory's parts.
 *
 * @since 0.1.0
 */
export const sessionPaths = (path: Path.Path, dir: string) => ({
  settings: path.join(dir, "run.json"),
  trajectory: path.join(dir, "trajectory.ndjson"),
  /** The checkpoint store's directory; the session's id in it is {@link sessionId}. */
  store: dir
})

/**
 * The id of the session in its directory's checkpoint store.
 *
 * @since 0.1.0
 */
export const sessionId = "checkpoint"

const versionOf = (json: unknown): unknown =>
  typeof json === "object" && json !== null && "version" in json ? json.version : undefined

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** The text a seal covers: the file's content in its one encoding. */
const sealedText = (file: typeof SessionFile.Type) => JSON.stringify(Schema.encodeSync(SessionFile)(file))

const maxSessionFileBytes = 256 * 1024

/**
 * A small regular file's text, read through one handle that does not follow
 * a link; anything else (a FIFO would block the open) is `None`.
 */
const readRegularFile = (fs: FileSystem.FileSystem, file: string, maxBytes: number) =>
  Effect.scoped(Effect.gen(function*() {
    if ((yield* fs.lstat(file)).type !== "File") return Option.none<string>()
    const handle = yield* fs.open(file, { flag: "r", noFollow: true })
    const info = yield* handle.stat
    if (info.type !== "File") return Option.none<string>()
    const bytes = yield* handle.readAlloc(maxBytes + 1)
    return Option.some(Option.match(bytes, { onNone: () => "", onSome: (b) => new TextDecoder().decode(b) }))
  }))

/**
 * What a session directory's `run.json` holds, once its seal is
 * checked: a `run.json` that is missing, not a small regular file, not a
 * session file, written by another version, unsealed or changed since it was
 * sealed is a failure with exit code 21.
 *
 * @since 0.1.0
 */
export const readSessionFile = (dir: string, env: Env) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const file = sessionPaths(path, dir).settings
    const read = yield* readRegularFile(fs, file, maxSessionFileBytes).pipe(
      Effect.mapError((error) =>
        resumeFailure(
          error.reason._tag === "NotFound"
            ? `${dir} holds no session to resume (no run.json)`
            : `cannot read ${file}: ${error.message}`
        )
      )
    )
    if (Option.isNone(read) || read.value.length > maxSessionFileBytes) {
      return yield* resumeFailure(`${file} is not a session file (not a small regular file)`)
    }
    const json = parseJson(read.value)
    const saved = yield* Schema.decodeUnknownEffect(SessionFileSealed)(json).pipe(
      Effect.mapError((error) => {
        const version = versionOf(json)
        return resumeFailure(
          version !== undefined && version !== 1
            ? `${file} was written by another version of effect-agent (session format ${version}; this one reads 1)`
            : `${file} is not a session file: ${error.message.replace(/\n\s*/g, " ")}`
        )
      })
    )
    const key = yield* Effect.mapError(
      Seal.key(env),
      (error) => resumeFailure(`cannot check ${file}: ${error.message}`)
    )
    if (saved.seal === undefined) {
      return yield* resumeFailure(`${file} has no seal (it was written by an earlier effect-agent): it is not trusted`)
    }
    const { seal, ...content } = saved
    if (!Seal.verify(key, sealedText(content), seal)) {
      return yield* resumeFailure(
        `${file} was changed after the session was written (its seal does not match): it is not trusted ` +
          `(a session sealed with another key than ${Seal.keyPath(path, env)} is not resumed either)`
      )
    }
    return content
  })

/**
 * Writes a new session's `run.json` (creating the directory), sealed with
 * the key of `Seal` (found through `env`). The file is created exclusively:
 * the command fails when the directory already holds a session, and never
 * writes through a link planted at its name.
 *
 * @since 0.1.0
 */
export const writeSessionFile = (dir: string, target: Target, env: Env, supervision?: Supervision) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const file = sessionPaths(path, dir).settings
    const ioError = (error: { readonly message: string }) =>
      configError(`--session-dir: cannot write ${file}: ${error.message}`)
    const key = yield* Effect.mapError(Seal.key(env), ioError)
    // The session's directories and files are its owner's alone (0700, 0600): they hold the transcript.
    yield* Effect.mapError(fs.makeDirectory(dir, { recursive: true, mode: 0o700 }), ioError)
    const content: SessionFile = { version: 1, target, ...(supervision === undefined ? {} : { supervision }) }
    const sealed = { ...Schema.encodeSync(SessionFile)(content), seal: Seal.sign(key, sealedText(content)) }
    yield* fs.writeFileString(file, JSON.stringify(sealed, null, 2) + "\n", { flag: "wx", mode: 0o600 }).pipe(
      Effect.mapError((error) =>
        error.reason._tag === "AlreadyExists"
          ? configError(
            `--session-dir: ${dir} already holds a session: resume it with --resume ${dir}, or choose another directory`
          )
          : ioError(error)
      )
    )
  })

/** The real path of `file`: the links of the part that exists resolved (the rest may not exist yet). */
const realPathOf = (fs: FileSystem.FileSystem, path: Path.Path, file: string) =>
  Effect.gen(function*() {
    const rest: Array<string> = []
    let head = file
    for (let depth = 0; depth < 256; depth++) {
      const real = yield* Effect.option(fs.realPath(head))
      if (Option.isSome(real)) return path.join(real.value, ...rest)
      const parent = path.dirname(head)
      if (parent === head) break
      rest.unshift(path.basename(head))
      head = parent
    }
    return file
  })

/**
 * Whether `inner` is `outer` or below it (absolute paths, compared as
 * given).
 *
 * @since 0.1.0
 */
export const isWithin = (path: Path.Path, inner: string, outer: string): boolean => {
  const relative = path.relative(outer, inner)
  return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative))
}

/**
 * Whether the agent has anything that can write in its workspace: built-in
 * tools, MCP servers (run there), or a supervised run's external worker (a
 * CLI run there, outside the sandbox).
 *
 * @since 0.1.0
 */
export const agentWrites = (target: Target, worker?: Supervision["worker"]): boolean =>
  target.tools.length > 0 || target.mcp.length > 0 || (worker !== undefined && worker !== "agent")

/**
 * Refuses a session directory that overlaps the workspace or a path granted
 * writable to the sandbox (`--allow-write`): inside it, or holding it,
 * compared as given and on real paths (links resolved). The agent can write
 * there, and the host trusts what the session directory holds.
 *
 * @since 0.1.0
 */
export const checkPlacement = (flag: string, dir: string, target: Target, worker?: Supervision["worker"]) =>
  Effect.gen(function*() {
    if (!agentWrites(target, worker)) return
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dirs = [dir, yield* realPathOf(fs, path, dir)]
    const places = [
      { name: `the workspace ${target.workspace}`, given: target.workspace },
      ...(target.sandbox === "local" ? [] : target.allowWrite ?? []).map((granted) => ({
        name: `--allow-write ${granted}`,
        given: granted
      }))
    ]
    for (const place of places) {
      const spaces = [place.given, yield* realPathOf(fs, path, place.given)]
      for (const d of dirs) {
        for (const w of spaces) {
          if (isWithin(path, d, w) || isWithin(path, w, d)) {
            return yield* configError(
              `${flag}: ${dir} ${isWithin(path, d, w) ? "is inside" : "holds"} ${place.name}, ` +
                "where the agent can write: keep sessions outside it (e.g. ~/.local/state/effect-agent/sessions/NAME)"
            )
          }
        }
      }
    }
  })

/**
 * Refuses a record the command writes for the host or a pipeline to read
 * back (the `--emit-jsonl` file, `--json` on a stdout redirected to a file)
 * inside the workspace of an agent that can write there, compared as given
 * and on real paths (links resolved): the agent could delete it and write
 * its own in its place, while the command goes on writing to the unlinked
 * file. `what` names it in the message (the file, by default).
 *
 * @since 0.1.0
 */
export const checkOutside = (
  flag: string,
  file: string,
  target: Target,
  worker?: Supervision["worker"],
  what: string = file
) =>
  Effect.gen(function*() {
    if (!agentWrites(target, worker)) return
    if (yield* inWorkspace(file, target)) {
      return yield* configError(
        `${flag}: ${what} is inside the workspace ${target.workspace}, where the agent can delete it and write ` +
          "its own: write it outside (in CI, e.g. under $RUNNER_TEMP)"
      )
    }
  })

/** Whether `file` is inside the target's workspace, compared as given and on real paths (links resolved). */
const inWorkspace = (file: string, target: Target) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const files = [file, yield* realPathOf(fs, path, file)]
    const spaces = [target.workspace, yield* realPathOf(fs, path, target.workspace)]
    return files.some((f) => spaces.some((w) => isWithin(path, f, w)))
  })

/**
 * Refuses a file the command writes a secret to (`serve`'s stdout or stderr
 * redirected to a file, where it prints the token it made) inside the
 * workspace of an agent with tools, which can read it there: compared as
 * given and on real paths. `what` names the file and `instead` says what to
 * do.
 *
 * @since 0.1.0
 */
export const checkUnreadable = (what: string, file: string, target: Target, instead: string) =>
  Effect.gen(function*() {
    if (!agentWrites(target)) return
    if (yield* inWorkspace(file, target)) {
      return yield* configError(
        `${what} is inside the workspace ${target.workspace}, where the agent can read the token printed there: ` +
          instead
      )
    }
  })

/**
 * Refuses a session directory whose parts are links or special files: the
 * command writes them, and does not write through a link.
 *
 * @since 0.1.0
 */
export const checkEntries = (dir: string, fail: (message: string) => Failure) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const paths = sessionPaths(path, dir)
    const kind = (file: string) =>
      Effect.map(Effect.option(fs.lstat(file)), Option.map((info) => info.type))
    const expect = (file: string, type: "File" | "Directory") =>
      Effect.flatMap(kind(file), (found) => {
        if (Option.isNone(found) || found.value === type) return Effect.void
        const what = found.value === "SymbolicLink"
          ? "a symbolic link"
          : `not a ${type === "File" ? "regular file" : "directory"}`
        return Effect.fail(fail(`${file} is ${what}: the command does not write through it`))
      })
    yield* expect(paths.settings, "File")
    yield* expect(paths.trajectory, "File")
    const store = path.join(paths.store, sessionId)
    yield* expect(store, "Directory")
    const entries = yield* Effect.orElseSucceed(fs.readDirectory(store), () => [])
    for (const entry of entries) yield* expect(path.join(store, entry), "File")
  })

/**
 * A flag that widens the agent's reach, and how it reads on a command line.
 *
 * @since 0.1.0
 */
export interface Widening {
  readonly flag: "workspace" | "sandbox" | "allowRead" | "allowWrite" | "approve" | "mcp" | "baseUrl" | "apiKeyEnv" | "worker"
  readonly text: string
}

/**
 * What a target lets the agent (or the command) do past the defaults, as the
 * flags that ask for it: another workspace than the working directory, the
 * local sandbox, host paths granted to the sandbox, every call approved, MCP servers, another API root than the
 * provider's variable gives, another key variable, an external worker (a
 * CLI run outside the sandbox). A resumed run takes them only from its own
 * flags.
 *
 * @since 0.1.0
 */
export const widening = (
  target: Target,
  options: Place,
  path: Path.Path,
  supervision?: Supervision
): ReadonlyArray<Widening> => {
  const out: Array<Widening> = []
  if (target.workspace !== path.resolve(options.cwd)) {
    out.push({ flag: "workspace", text: `--workspace ${target.workspace}` })
  }
  if (target.sandbox === "local") out.push({ flag: "sandbox", text: "--sandbox local" })
  for (const granted of target.allowRead ?? []) out.push({ flag: "allowRead", text: `--allow-read ${granted}` })
  for (const granted of target.allowWrite ?? []) out.push({ flag: "allowWrite", text: `--allow-write ${granted}` })
  if (target.approve === "all") out.push({ flag: "approve", text: "--approve all" })
  for (const command of target.mcp) out.push({ flag: "mcp", text: `--mcp ${JSON.stringify(command)}` })
  const envVar = baseUrlEnv[target.provider]
  const fromEnv = envVar === undefined || options.env[envVar] === "" ? undefined : options.env[envVar]
  if (target.baseUrl !== undefined && target.baseUrl !== fromEnv) {
    out.push({ flag: "baseUrl", text: `--base-url ${target.baseUrl}` })
  }
  if (target.apiKeyEnv !== undefined) out.push({ flag: "apiKeyEnv", text: `--api-key-env ${target.apiKeyEnv}` })
  if (supervision !== undefined && supervision.worker !== "agent") {
    // The agent an ACP worker runs is not kept in the session: it is named again, as the worker is.
    const text = supervision.worker === "acp" ? `--worker acp --worker-command "<the agent>"` : `--worker ${supervision.worker}`
    out.push({ flag: "worker", text })
  }
  return out
}

/**
 * The command that resumes the session in `dir` run on `target`: `--resume`
 * with the flags a resumed run must be given again (see {@link widening}).
 *
 * @since 0.1.0
 */
export const resumeCommand = (
  dir: string,
  target: Target,
  options: Place,
  path: Path.Path,
  supervision?: Supervision
): string =>
  ["effect-agent run --resume", dir, ...widening(target, options, path, supervision).map((item) => item.text)].join(" ")
