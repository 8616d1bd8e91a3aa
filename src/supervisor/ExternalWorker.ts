/**
 * Workers that drive an external coding-agent CLI, one process per turn, the
 * way ynh drives them: Claude Code (`claude -p --output-format stream-json
 * --verbose`, with a session id this worker chooses and `--resume` on later
 * turns), Codex (`codex exec --json`, with the thread id its stream
 * reports and `codex exec resume` on later turns) and Cursor (`cursor-agent
 * -p --output-format stream-json`, with the chat id its stream reports and
 * `--resume <chat id>` on later turns). The session id comes back
 * as the reply's `resumeToken`; hand it to the next turn (the supervisor keeps
 * it in the checkpoint) to continue the conversation.
 *
 * Each turn runs the CLI in the workspace (`cwd`) with the message on its
 * stdin and only an allowlisted environment: {@link defaultEnv} and the
 * variables named in `env` (an API key reaches the CLI only when named).
 * Their output is hostile input: it is decoded with Schemas line by line, an
 * event of a kind the worker does not read is skipped, and a line that is not
 * a JSON event, or an event of a known kind without its documented shape,
 * fails the turn with a `decode` error rather than being guessed at. The
 * bytes of a turn and of one line are capped, and a turn past its timeout is
 * killed with its whole process group.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as Acp from "./internal/acp.ts"
import * as Claude from "./internal/claude.ts"
import { run, type Settings } from "./internal/cliTurn.ts"
import * as Codex from "./internal/codex.ts"
import * as Cursor from "./internal/cursor.ts"
import type { Protocol } from "./internal/protocol.ts"
import { type Worker, WorkerError } from "./Worker.ts"

/**
 * The options of an external worker.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * The CLI: a path, or a name looked up on the allowlisted `PATH`. Defaults to `claude`, `codex` or
   * `cursor-agent`.
   */
  readonly executable?: string | undefined
  /** The workspace: the CLI's working directory. */
  readonly cwd: string
  /** The model, passed as `--model=<model>`. */
  readonly model?: string | undefined
  /** Arguments added to every turn (before the resume arguments). */
  readonly args?: ReadonlyArray<string> | undefined
  /**
   * Arguments added to plan turns; the default keeps the CLI read-only (see {@link claude}, {@link codex},
   * {@link cursor}).
   */
  readonly planArgs?: ReadonlyArray<string> | undefined
  /** Arguments added to act turns; the default lets the CLI write in the workspace. */
  readonly actArgs?: ReadonlyArray<string> | undefined
  /**
   * Variables of this process's environment passed to the CLI besides
   * {@link defaultEnv} (when set): name its API key here
   * (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`…). Their values are kept out of
   * error messages.
   */
  readonly env?: ReadonlyArray<string> | undefined
  /** How long one turn may run before its process is killed (default 30 minutes, at most 24 hours). */
  readonly timeout?: Duration.Input | undefined
  /** The bytes of output one turn may produce (default 64 MiB, between 1 KiB and 1 GiB). */
  readonly maxTurnBytes?: number | undefined
  /** The bytes of one line of output (default 8 MiB, between 1 KiB and `maxTurnBytes`). */
  readonly maxLineBytes?: number | undefined
}

/**
 * The variables of this process's environment every external worker gets
 * (when set): enough to find programs, the CLI's own login under `HOME`, and
 * the locale. Nothing else is inherited.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultEnv: ReadonlyArray<string> = [
  "PATH",
  "HOME",
  "USER",
  "LOGNAME",
  "LANG",
  "LC_ALL",
  "LC_CTYPE",
  "TZ",
  "TMPDIR",
  "TERM"
]

/**
 * A worker that drives Claude Code: `claude -p --output-format stream-json
 * --verbose`, `--session-id=<uuid>` (a new UUID) on a turn without a resume
 * token and `--resume=<id>` on the others; the resume token is the session id
 * Claude Code reports. Plan turns add `--permission-mode=plan` and act turns
 * `--permission-mode=acceptEdits` unless `planArgs` / `actArgs` say otherwise.
 * The usage is the `result` event's (input tokens including cache reads and
 * writes), or the sum of the messages' usages when it has none.
 *
 * @since 0.1.0
 * @category constructors
 */
export const claude = (options: Options): Worker<ChildProcessSpawner.ChildProcessSpawner> =>
  make("claude", options, (model, args, phaseArgs) => Claude.protocol({ model, args, phaseArgs }), {
    plan: ["--permission-mode=plan"],
    act: ["--permission-mode=acceptEdits"]
  })

/**
 * A worker that drives Codex: `codex exec --json -` (the message on stdin),
 * `codex exec --json … resume <thread id> -` once a turn has reported its
 * thread (`thread.started`); the resume token is that thread id. Plan turns
 * add `--sandbox=read-only` and act turns `--sandbox=workspace-write` unless
 * `planArgs` / `actArgs` say otherwise. Codex reports the thread's running
 * token totals; the usage of a turn is their growth since the worker's
 * previous turn on the thread (a thread resumed by a new worker is counted in
 * full on its first turn).
 *
 * @since 0.1.0
 * @category constructors
 */
export const codex = (options: Options): Worker<ChildProcessSpawner.ChildProcessSpawner> => {
  const totals = new Codex.ThreadTotals()
  return make("codex", options, (model, args, phaseArgs) => Codex.protocol({ model, args, phaseArgs, totals }), {
    plan: ["--sandbox=read-only"],
    act: ["--sandbox=workspace-write"]
  })
}

/**
 * A worker that drives Cursor's CLI: `cursor-agent -p --output-format
 * stream-json` (the message on stdin), `--resume <chat id>` once a turn has
 * reported its chat (the first turn omits it); the resume token is that chat
 * id (the `session_id` of its events). Plan turns add `--mode=plan` (Cursor's
 * read-only planning mode) and act turns `--force` (without it a headless
 * Cursor only proposes its edits) unless `planArgs` / `actArgs` say
 * otherwise. Pass `args: ["--trust"]` for a workspace Cursor has not been
 * told to trust (it would ask, and nobody can answer). The usage is the
 * `result` event's (input tokens including cache reads and writes), zero
 * when a version reports none; Cursor reports no cost. Name its key
 * (`CURSOR_API_KEY`) in `env` unless it is logged in under `HOME`.
 *
 * @example
 * ```ts
 * import { ExternalWorker } from "effect-agent/supervisor"
 *
 * const worker = ExternalWorker.cursor({ cwd: "/work/repo", env: ["CURSOR_API_KEY"], args: ["--trust"] })
 * console.log(worker.name)
 * // Output: cursor
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const cursor = (options: Options): Worker<ChildProcessSpawner.ChildProcessSpawner> =>
  make("cursor", options, (model, args, phaseArgs) => Cursor.protocol({ model, args, phaseArgs }), {
    plan: ["--mode=plan"],
    act: ["--force"]
  }, "cursor-agent")

/**
 * The options of an ACP worker ({@link acp}).
 *
 * @since 0.1.0
 * @category models
 */
export interface AcpOptions {
  /** The agent's program: a path, or a name looked up on the allowlisted `PATH`. */
  readonly command: string
  /** Its arguments (`["--acp"]`, say). */
  readonly args?: ReadonlyArray<string> | undefined
  /** The workspace: the agent's working directory and its session's `cwd`. */
  readonly cwd: string
  /**
   * How the agent's permission requests are answered in act turns, nobody being there to ask: `none` (the
   * default) rejects them, `all` allows them. Plan turns reject them whatever this says.
   */
  readonly approve?: "all" | "none" | undefined
  /** Variables of this process's environment passed to the agent besides {@link defaultEnv}: its API key. */
  readonly env?: ReadonlyArray<string> | undefined
  /** How long one turn may run before its process is killed (default 30 minutes, at most 24 hours). */
  readonly timeout?: Duration.Input | undefined
  /** The bytes of output one turn may produce (default 64 MiB, between 1 KiB and 1 GiB). */
  readonly maxTurnBytes?: number | undefined
  /** The bytes of one message of its output (default 8 MiB, between 1 KiB and `maxTurnBytes`). */
  readonly maxLineBytes?: number | undefined
}

/**
 * A worker that drives any agent speaking the Agent Client Protocol over
 * stdio (agentclientprotocol.com, v1), one process per turn: `initialize`
 * (advertising no `fs` or `terminal` capability: the agent works in the
 * workspace with its own tools), `session/load` of the resume token when the
 * agent advertises `loadSession` (else `session/new` in the workspace: an
 * agent that cannot load sessions starts a new one each turn, seeing the
 * workspace but not the conversation), then `session/prompt` with the
 * message. The reply is the agent's message chunks of the prompt; the resume
 * token is the session id; the usage is the prompt response's `usage` when
 * the agent reports one (input including cache reads and writes), the cost
 * the growth of the session's USD cost. Permission requests are rejected in
 * plan turns, and in act turns unless `approve` is `all`. A cancel of the run
 * sends `session/cancel` and ends the turn. It needs the optional package
 * `@agentclientprotocol/sdk`, loaded when a turn starts.
 *
 * @example
 * ```ts
 * import { ExternalWorker } from "effect-agent/supervisor"
 *
 * const worker = ExternalWorker.acp({ command: "gemini", args: ["--experimental-acp"], cwd: "/work/repo" })
 * console.log(worker.name)
 * // Output: acp
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const acp = (options: AcpOptions): Worker<ChildProcessSpawner.ChildProcessSpawner> => {
  const name = "acp"
  const settings = resolve(name, options.command, options)
  if (typeof settings === "string") {
    const error = new WorkerError({ worker: name, reason: "spawn", message: settings })
    return { name, turn: () => Effect.fail(error) }
  }
  const acpSettings = { ...settings, args: options.args ?? [], approve: options.approve ?? "none" }
  return { name, turn: (request) => Acp.run(acpSettings, request) }
}

interface PhaseArgs {
  readonly plan: ReadonlyArray<string>
  readonly act: ReadonlyArray<string>
}

const make = (
  name: string,
  options: Options,
  protocol: (model: string | undefined, args: ReadonlyArray<string>, phaseArgs: PhaseArgs) => Protocol,
  defaults: PhaseArgs,
  executable: string = name
): Worker<ChildProcessSpawner.ChildProcessSpawner> => {
  const settings = resolve(name, executable, options)
  if (typeof settings === "string") {
    const error = new WorkerError({ worker: name, reason: "spawn", message: settings })
    return { name, turn: () => Effect.fail(error) }
  }
  const cli = protocol(options.model, options.args ?? [], {
    plan: options.planArgs ?? defaults.plan,
    act: options.actArgs ?? defaults.act
  })
  return { name, turn: (request) => run(settings, cli, request) }
}

const kib = 1024
const mib = 1024 * kib
const maxTimeout = Duration.hours(24)
const envName = /^[A-Za-z_][A-Za-z0-9_]*$/

/** The settings of a worker, or why its options are refused. */
const resolve = (
  worker: string,
  executable: string,
  options: Pick<Options, "executable" | "cwd" | "model" | "env" | "timeout" | "maxTurnBytes" | "maxLineBytes">
): Settings | string => {
  const timeout = options.timeout === undefined
    ? Option.some(Duration.minutes(30))
    : Duration.fromInput(options.timeout)
  if (Option.isNone(timeout) || !Duration.isGreaterThan(timeout.value, Duration.zero)) {
    return `invalid option: timeout must be a positive duration`
  }
  const names = options.env ?? []
  const invalid = names.find((name) => !envName.test(name))
  if (invalid !== undefined) return `invalid option: env names a variable that cannot exist: ${JSON.stringify(invalid)}`
  if (options.model !== undefined && !/^[^\s\0-\x1f]+$/.test(options.model)) {
    return `invalid option: model must be a non-empty name without spaces or control characters`
  }
  const maxTurnBytes = clamp(options.maxTurnBytes, 64 * mib, kib, 1024 * mib)
  return {
    worker,
    executable: options.executable ?? executable,
    cwd: options.cwd,
    env: [...new Set([...defaultEnv, ...names])],
    secrets: names.filter((name) => !defaultEnv.includes(name)),
    timeout: Duration.min(timeout.value, maxTimeout),
    maxTurnBytes,
    maxLineBytes: clamp(options.maxLineBytes, 8 * mib, kib, maxTurnBytes)
  }
}

/** A whole number of bytes within bounds: the default when none is given or it is not a number. */
const clamp = (value: number | undefined, fallback: number, min: number, max: number): number =>
  value === undefined || Number.isNaN(value) ? Math.min(fallback, max) : Math.min(Math.max(Math.floor(value), min), max)
