/**
 * `effect-agent run`: sets up what the settings ask for (the model, the
 * sandbox and tools, approvals, the control input, the view and the event
 * outputs), runs the agent (a plain run, a new session or a resumed one),
 * prints the result and ends with the exit code of how the run ended.
 *
 * - stdout: the final answer (unless the live view already streamed it to
 *   the same terminal), or one JSON object with `--json`, or the events as
 *   JSON lines with `--emit-jsonl -`.
 * - stderr: the view (see `View`), warnings, and what went wrong.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import type * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import type * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import * as Stdio from "effect/Stdio"
import * as Stream from "effect/Stream"
import type * as Terminal from "effect/Terminal"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as McpClientError from "effect/ai/McpClientError"
import * as Model from "effect/ai/Model"
import { identity } from "effect/Function"
import type * as HttpClient from "effect/http/HttpClient"
import * as ChildProcess from "effect/process/ChildProcess"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as Agent from "../../Agent.ts"
import * as AgentConfig from "../../AgentConfig.ts"
import * as AgentEvent from "../../AgentEvent.ts"
import * as Approvals from "../../Approvals.ts"
import type * as Hooks from "../../Hooks.ts"
import * as Message from "../../Message.ts"
import type { Outcome } from "../../Outcome.ts"
import * as Provider from "../../providers/Provider.ts"
import type * as RunState from "../../RunState.ts"
import * as BuiltinTools from "../../sandbox/BuiltinTools.ts"
import * as Sandbox from "../../sandbox/Sandbox.ts"
import * as CheckpointStore from "../../session/CheckpointStore.ts"
import * as Sessions from "../../session/Sessions.ts"
import * as Trajectory from "../../session/Trajectory.ts"
import * as Steering from "../../Steering.ts"
import * as ScriptedModel from "../../testing/ScriptedModel.ts"
import * as ToolRegistry from "../../ToolRegistry.ts"
import * as Check from "../../supervisor/Check.ts"
import * as Supervisor from "../../supervisor/Supervisor.ts"
import * as ExternalWorker from "../../supervisor/ExternalWorker.ts"
import * as SupervisedSession from "../../supervisor/SupervisedSession.ts"
import * as SupervisorEvent from "../../supervisor/SupervisorEvent.ts"
import * as SupervisorOutcome from "../../supervisor/SupervisorOutcome.ts"
import * as Worker from "../../supervisor/Worker.ts"
import * as Control from "../../protocol/Control.ts"
import { codes, type ExitCode, ExitWith, fromError, fromOutcome, OnInterrupt } from "../ExitCode.ts"
import * as YnhTrajectory from "../YnhTrajectory.ts"
import { configError, resumeFailure } from "./Failure.ts"
import * as Flags from "./Flags.ts"
import * as PluginEvents from "./PluginEvents.ts"
import { Io, type Service as IoService } from "./Io.ts"
import * as ScriptFile from "./ScriptFile.ts"
import * as SessionFiles from "./SessionFiles.ts"
import { stateDirectory } from "./stateDirectory.ts"
import * as Settings from "./Settings.ts"
import type * as Target from "./Target.ts"
import * as TerminalInput from "./TerminalInput.ts"
import * as View from "./View.ts"

/**
 * What `run` needs from the platform.
 *
 * @since 0.1.0
 */
export type Requirements =
  | Stdio.Stdio
  | FileSystem.FileSystem
  | Path.Path
  | ChildProcessSpawner.ChildProcessSpawner
  | HttpClient.HttpClient
  | Terminal.Terminal

// -----------------------------------------------------------------------------
// The model
// -----------------------------------------------------------------------------

/**
 * The model layer of a target.
 *
 * @since 0.1.0
 */
export const providerLayer = (
  target: Target.Target,
  apiKey: Redacted.Redacted<string> | undefined,
  retry: Provider.RetryOptions
): Layer.Layer<
  LanguageModel.LanguageModel,
  Config.ConfigError | Provider.MissingApiKey | ScriptFile.ScriptFileError,
  HttpClient.HttpClient | FileSystem.FileSystem
> => {
  const options = { model: target.model, baseUrl: target.baseUrl, apiKey, retry }
  // Each provider's module is loaded when a run uses it (with effect's HTTP client and codecs): a run on a
  // script loads none of them.
  switch (target.provider) {
    case "openai":
      return Layer.unwrap(Effect.map(Effect.promise(() => import("../../providers/OpenAiChat.ts")), (_) => _.layer(options)))
    case "openai-responses":
      return Layer.unwrap(
        Effect.map(Effect.promise(() => import("../../providers/OpenAiResponses.ts")), (_) => _.layer(options))
      )
    case "anthropic":
      return Layer.unwrap(Effect.map(Effect.promise(() => import("../../providers/Anthropic.ts")), (_) => _.layer(options)))
    case "scripted":
      return Layer.unwrap(Effect.map(ScriptFile.load(target.script ?? ""), (script) => ScriptedModel.layer(script)))
  }
}

/** What a retried failure was: its HTTP status, or the transport failure in words. */
const retriedAfter = (reason: Provider.RetryReason): string =>
  reason._tag === "HttpStatus" ? `${reason.status}` : `a network failure (${reason.description})`

/** The provider's retries, shown in the view as they happen. */
const showRetries = (view: View.View): Provider.RetryOptions => ({
  maxRetries: Provider.defaultRetryPolicy.maxRetries,
  onRetry: (info) =>
    Effect.flatMap(Clock.currentTimeMillis, (timestamp) =>
      Effect.sync(() =>
        view.retrying({
          attempt: info.attempt,
          of: info.maxRetries,
          delayMs: Duration.toMillis(info.delay),
          after: retriedAfter(info.reason),
          timestamp
        })
      ))
})

/**
 * Builds the model in the scope; a provider that cannot be set up (a bad
 * script) is a config error. The key was read by `Settings` from the
 * command's environment, which is also where the layer reads anything else
 * (and without a key, finds none there either).
 */
const model = (settings: Settings.Settings, env: IoService["env"], view: View.View) =>
  Layer.build(providerLayer(settings.target, settings.apiKey, showRetries(view))).pipe(
    // The model, with its provider's and model's names when it has them (for the run's spans).
    Effect.map((context) => {
      const provider = Context.getOrUndefined(context, Model.ProviderName)
      const modelName = Context.getOrUndefined(context, Model.ModelName)
      const services = Context.make(LanguageModel.LanguageModel, Context.get(context, LanguageModel.LanguageModel))
      const named = provider === undefined ? services : Context.add(services, Model.ProviderName, provider)
      return modelName === undefined ? named : Context.add(named, Model.ModelName, modelName)
    }),
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord({ ...env })),
    Effect.mapError((error) =>
      configError(
        error._tag === "ScriptFileError"
          ? error.message
          : `cannot set up the ${settings.target.provider} provider: ${error.message}`
      )
    )
  )

// -----------------------------------------------------------------------------
// The tools
// -----------------------------------------------------------------------------

/**
 * The variables commands must not read: the providers' keys, `--api-key-env`,
 * and every name that looks like a secret's (`Sandbox.isSecretName`).
 */
const secretVariables = (target: Target.Target): Array<string> => [
  "OPENAI_API_KEY",
  "ANTHROPIC_API_KEY",
  ...(target.apiKeyEnv === undefined ? [] : [target.apiKeyEnv]),
  ...Object.keys(process.env).filter(Sandbox.isSecretName)
]

/**
 * The target's sandbox; bubblewrap shows the paths granted (`--allow-read`, `--allow-write`) and hides `hide`
 * (the command's own session directory, the server's store) and the command's state directory (the key that
 * seals its sessions) even inside them. `auto` does not fall back to local while secrets are in the environment;
 * `--sandbox local` accepts it.
 */
const sandboxLayer = (target: Target.Target, hide: ReadonlyArray<string>) =>
  Layer.unwrap(Effect.gen(function*() {
    const state = stateDirectory(yield* Path.Path, (yield* Io).env)
    const isolation = {
      allowRead: target.allowRead,
      allowWrite: target.allowWrite,
      hide: state === undefined ? hide : [...hide, state]
    }
    switch (target.sandbox) {
      case "bubblewrap":
        return Sandbox.bubblewrap(target.workspace, isolation)
      case "local":
        return Sandbox.local(target.workspace)
      default:
        return Sandbox.auto(target.workspace, { ...isolation, secretVariables: secretVariables(target) })
    }
  }))

const sandboxFailure = (
  target: Target.Target,
  error: Sandbox.SandboxError | Sandbox.IsolationUnavailableError
) => {
  if (error._tag !== "IsolationUnavailableError") {
    return configError(`--sandbox ${target.sandbox} on ${target.workspace}: ${error.message}`)
  }
  const [names, verb, pronoun] = error.variables.length === 1
    ? [error.variables[0], "is", "it"]
    : [error.variables.join(", "), "are", "them"]
  return configError(
    `bubblewrap is not usable here (${error.reason}) and ${names} ${verb} in the environment: ` +
      `install bubblewrap, or pass --sandbox local to accept that commands can read ${pronoun}`
  )
}

/** The built-in tools the target asks for, on its sandbox (which hides `hide`). */
const builtinEntry = (target: Target.Target, hide: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const handlers = yield* Layer.build(BuiltinTools.layer.pipe(Layer.provide(sandboxLayer(target, hide)))).pipe(
      Effect.mapError((error) => sandboxFailure(target, error))
    )
    const kit = BuiltinTools.make({ requireApproval: target.approve !== "all" })
    const entry = yield* Effect.provideContext(ToolRegistry.fromToolkit(kit), handlers)
    const tools: Record<string, (typeof entry.tools)[string]> = {}
    for (const name of target.tools) {
      const tool = entry.tools[name]
      if (tool !== undefined) tools[name] = tool
    }
    return { ...entry, tools }
  })

const decoder = () => new TextDecoder()

/**
 * A spawner that watches the process it starts: the end of what it writes on
 * stderr (which the MCP client reads and drops) and its exit code, to say why
 * a server did not start.
 */
const watchingSpawner = (spawner: ChildProcessSpawner.ChildProcessSpawner["Service"]) => {
  let stderr = ""
  let handle: ChildProcessSpawner.ChildProcessHandle | undefined
  const text = decoder()
  const service = ChildProcessSpawner.make((command) =>
    Effect.map(spawner.spawn(command), (spawned) => {
      handle = spawned
      return ChildProcessSpawner.makeHandle({
        ...spawned,
        stderr: Stream.tap(spawned.stderr, (chunk) =>
          Effect.sync(() => {
            stderr = (stderr + text.decode(chunk, { stream: true })).slice(-maxStderrTail * 2)
          }))
      })
    })
  )
  /** The process's exit code (when it exits within a second) and the end of its stderr. */
  const report = Effect.gen(function*() {
    const exited = handle === undefined
      ? undefined
      : yield* handle.exitCode.pipe(Effect.timeoutOption("1 second"), Effect.orElseSucceed(() => Option.none()))
    const tail = stderr.trim().slice(-maxStderrTail).trim()
    const parts: Array<string> = []
    if (exited !== undefined && Option.isSome(exited)) parts.push(`it exited with code ${exited.value}`)
    if (tail !== "") parts.push(`its stderr ends: ${JSON.stringify(tail)}`)
    return parts
  })
  return { service, report }
}

const maxStderrTail = 500

/** The system error code (`ENOENT`, `EPIPE`) somewhere in a chain of causes. */
const errnoOf = (cause: unknown): string | undefined => {
  for (let depth = 0; depth < 4 && typeof cause === "object" && cause !== null; depth++) {
    const code: unknown = Reflect.get(cause, "code")
    if (typeof code === "string" && /^E[A-Z]+$/.test(code)) return code
    cause = Reflect.get(cause, "cause") ?? Reflect.get(cause, "reason")
  }
  return undefined
}

/** Why the client failed, with the cause it carries (a spawn's ENOENT, a broken pipe). */
const mcpFailure = (error: McpClientError.McpClientError): string => {
  const cause: unknown = "cause" in error.reason ? error.reason.cause : undefined
  const detail = cause instanceof Error ? cause.message : cause === undefined ? undefined : String(cause)
  const errno = errnoOf(cause)
  const text = detail === undefined || error.message.includes(detail) ? error.message : `${error.message}: ${detail}`
  return errno === undefined || text.includes(errno) ? text : `${text} (${errno})`
}

const mcpEntry = (target: Target.Target, command: string) =>
  Effect.gen(function*() {
    const argv = Flags.mcpArgv(command)
    if (Result.isFailure(argv)) return yield* configError(`--mcp ${JSON.stringify(command)}: ${argv.failure}`)
    const [program, ...args] = argv.success
    const watched = watchingSpawner(yield* ChildProcessSpawner.ChildProcessSpawner)
    // loaded when a run has --mcp (with effect's RPC and MCP client)
    const McpTools = yield* Effect.promise(() => import("../../McpTools.ts"))
    return yield* McpTools.stdio(ChildProcess.make(program, args, { cwd: target.workspace }), {
      needsApproval: target.approve !== "all"
    }).pipe(
      Effect.provideService(ChildProcessSpawner.ChildProcessSpawner, watched.service),
      Effect.catch((error) =>
        Effect.flatMap(watched.report, (more) =>
          configError(
            `--mcp ${JSON.stringify(command)}: the server did not start: ${[mcpFailure(error), ...more].join("; ")}`
          ))
      )
    )
  })

/**
 * The registry: built-in tools, then each MCP server's (a later tool
 * replaces an earlier one of the same name). The sandbox of the built-in
 * tools hides `hide` (what the command keeps of its sessions), even inside a
 * path granted to it.
 *
 * @since 0.1.0
 */
export const tools = (target: Target.Target, note: (text: string) => void, hide: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    const entries: Array<ToolRegistry.Entry> = []
    if (target.tools.length > 0) entries.push(yield* builtinEntry(target, hide))
    for (const command of target.mcp) entries.push(yield* mcpEntry(target, command))
    const seen = new Set<string>()
    for (const entry of entries) {
      for (const name of Object.keys(entry.tools)) {
        if (seen.has(name)) note(`two tools are named ${name}: the one from the later --mcp server is used`)
        seen.add(name)
      }
    }
    return ToolRegistry.make(...entries)
  })

// -----------------------------------------------------------------------------
// Outputs
// -----------------------------------------------------------------------------

/** An event as a line of `--emit-jsonl`. */
export const eventLine = (event: AgentEvent.AgentEvent) => JSON.stringify(AgentEvent.encodeJson(event)) + "\n"

/**
 * Events as JSON lines on stdout: each as `lines` writes it (its JSON line,
 * unless given; none when it writes nothing).
 *
 * @since 0.1.0
 */
export const jsonLines = (
  write: (text: string) => void,
  lines: (event: AgentEvent.AgentEvent) => string = eventLine
): Hooks.Plugin => ({
  name: "jsonl",
  observe: (event) => {
    const text = lines(event)
    if (text !== "") write(text)
  }
})

/**
 * Events as JSON lines in the `--emit-jsonl` file, opened once for the
 * command (appended to by a resumed run) without following a link at its
 * name: the file may be in the workspace, where the agent could plant one.
 * A file that cannot be written is a note, and the run goes on.
 *
 * Each event is written once, in the order the events happen, whichever
 * fiber emits it (the calls of a parallel batch): its line is queued where it
 * happens (`observe`), and the lines queued are written by one write at a
 * time (`onEvent`, which the emitting fiber waits for). A file handle's
 * writes are not ordered by themselves: two at once both write where the file
 * ended before either (the handle keeps its position), and one overwrites the
 * other. What is queued when the command ends is written then (`write`
 * queues more: the last line of a trajectory, written as the command ends).
 */
const jsonLinesFile = (
  file: string,
  append: boolean,
  workspace: string,
  note: (text: string) => void,
  lines: (event: AgentEvent.AgentEvent) => string
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    // In the workspace, a directory on the way could be a link the agent made to lead the file elsewhere.
    const dir = path.dirname(file)
    if (SessionFiles.isWithin(path, dir, workspace)) {
      const real = yield* Effect.all([fs.realPath(dir), fs.realPath(workspace)]).pipe(Effect.option)
      if (Option.isSome(real) && !SessionFiles.isWithin(path, real.value[0], real.value[1])) {
        return yield* configError(
          `--emit-jsonl: ${dir} is a link out of the workspace: the command does not write through it`
        )
      }
    }
    const handle = yield* fs.open(file, { flag: append ? "a" : "w", noFollow: true }).pipe(
      Effect.catch((error) =>
        Effect.flatMap(Effect.option(fs.lstat(file)), (info) =>
          configError(
            Option.isSome(info) && info.value.type === "SymbolicLink"
              ? `--emit-jsonl: ${file} is a symbolic link: the command does not write through it`
              : `--emit-jsonl: cannot open ${file}: ${error.message}`
          ))
      )
    )
    const encoder = new TextEncoder()
    const lock = yield* Semaphore.make(1)
    let open = true
    let queued: Array<string> = []
    // Taken from the queue and written as one step: the fiber that flushes may be one being interrupted (a call
    // cancelled with the run), and lines taken and not written would be lost.
    const flush = lock.withPermits(1)(Effect.uninterruptible(Effect.suspend(() => {
      if (queued.length === 0) return Effect.void
      const text = queued.join("")
      queued = []
      return Effect.catch(handle.writeAll(encoder.encode(text)), (error) =>
        Effect.sync(() => {
          open = false
          queued = []
          note(`--emit-jsonl ${file}: stopped writing: ${error.message}`)
        }))
    })))
    // Released before the handle is closed (it was opened first).
    yield* Effect.addFinalizer(() => flush)
    const write = (text: string) => {
      if (open && text !== "") queued.push(text)
    }
    const plugin: Hooks.Plugin = {
      name: "jsonl",
      observe: (event) => write(lines(event)),
      onEvent: () => flush
    }
    return { plugin, write }
  })

/**
 * What `session_start` of a ynh trajectory says of the run (`YnhTrajectory.Session`): its worker, model and the
 * caps in force, each from its flag or the default (a resumed session's own: it writes `session_resumed`).
 */
const ynhSession = (settings: Settings.Settings, flags: Flags.Flags, planApproval: boolean): YnhTrajectory.Session => {
  const supervision = settings.supervision
  const source = (given: Option.Option<unknown>): YnhTrajectory.Source =>
    Option.isSome(given) ? "flag" : settings.session?.resume === true ? "session" : "default"
  const { config } = settings
  const budgets = supervision === undefined
    ? {
      maxTurns: config.maxTurns === undefined ? AgentConfig.defaults.maxTurns : config.maxTurns,
      maxTokens: config.budgets?.tokens ?? null,
      // as the limit flags give it: milliseconds
      maxWallMs: typeof config.budgets?.wallClock === "number" ? config.budgets.wallClock : null,
      maxCostUsd: config.budgets?.costUsd ?? null
    }
    : {
      maxTurns: supervision.maxTurns ?? Supervisor.defaults.maxTurns,
      maxTokens: supervision.maxTokens ?? null,
      maxWallMs: supervision.maxWallMs ?? null,
      maxCostUsd: supervision.maxCostUsd ?? null
    }
  const backend = supervision?.worker ?? "agent"
  return {
    backend,
    // an external worker runs the model its CLI chooses: ours is not it
    ...(backend === "agent" ? { provider: settings.target.provider, model: settings.target.model } : {}),
    budgets,
    budgetSources: { turns: source(flags.maxTurns), tokens: source(flags.maxTokens), wall: source(flags.maxWall) },
    planApproval
  }
}

/**
 * Keeps what the result reports of a run that ended without an outcome
 * (failed, interrupted): its id, its last figures, its `AgentEnd`, and the
 * time it ran (from its events' timestamps, with the time a resumed session
 * had used before).
 */
const tally = () => {
  let runId: string | null = null
  let figures: Figures = { turns: 0, usage: Message.emptyUsage, elapsedMs: 0 }
  let end: AgentEvent.Of<"AgentEnd"> | undefined
  let startedAt: number | undefined
  let lastAt = 0
  let before = 0
  const plugin: Hooks.Plugin = {
    name: "tally",
    observe: (event) => {
      runId = event.runId
      lastAt = event.timestamp
      if (event._tag === "AgentStart") startedAt = event.timestamp
      else if (event._tag === "SessionResumed") before = event.restored.elapsedMs
      else if (event._tag === "BudgetSnapshot") {
        figures = { turns: event.figures.turns, usage: event.figures.usage, elapsedMs: event.figures.elapsedMs }
      } else if (event._tag === "AgentEnd") end = event
    }
  }
  return {
    plugin,
    end: () => end,
    figures: (): Figures & { readonly runId: string | null } => {
      const state = end?.result?.state
      if (state !== undefined) return { runId: state.runId, ...stateFigures(state) }
      const elapsedMs = startedAt === undefined ? figures.elapsedMs : before + lastAt - startedAt
      return { runId, ...figures, elapsedMs: Math.max(figures.elapsedMs, elapsedMs) }
    }
  }
}

/** The text of the transcript's last assistant reply. */
const answerOf = (messages: ReadonlyArray<Message.Message>): string | undefined => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!
    if (message.role === "assistant") return Message.textOf(message)
  }
  return undefined
}

/**
 * The JSON object `--json` prints: how the run ended and its figures.
 *
 * @since 0.1.0
 */
export interface Report {
  readonly exitCode: ExitCode
  /** How the run ended: a supervised run's own ending as it is (`SupervisorOutcome`). */
  readonly outcome: Outcome | SupervisorOutcome.SupervisorOutcome | null
  /** The outcome or the error, in words. */
  readonly summary: string
  readonly answer: string | null
  readonly error: { readonly _tag: string; readonly message: string } | null
  readonly runId: string | null
  readonly turns: number
  readonly usage: Message.Usage
  readonly elapsedMs: number
  readonly session: string | null
}

interface Figures {
  readonly turns: number
  readonly usage: Message.Usage
  readonly elapsedMs: number
}

const stateFigures = (state: RunState.RunState): Figures => ({
  turns: state.turn,
  usage: state.usage,
  elapsedMs: state.elapsedMs
})

// -----------------------------------------------------------------------------
// The run
// -----------------------------------------------------------------------------

/**
 * The external workers of `--worker claude|codex|cursor` (`ExternalWorker`), in the workspace. The CLI gets
 * the allowlisted environment and its API key's variable: `--api-key-env`, else `ANTHROPIC_API_KEY` for
 * claude, `OPENAI_API_KEY` for codex and `CURSOR_API_KEY` for cursor.
 */
const externalWorker = (
  kind: "claude" | "codex" | "cursor",
  target: Target.Target,
  apiKeyEnv: string | undefined
): Worker.Worker<ChildProcessSpawner.ChildProcessSpawner> => {
  const options = { cwd: target.workspace, env: [apiKeyEnv ?? externalKeys[kind]] }
  switch (kind) {
    case "claude":
      return ExternalWorker.claude(options)
    case "codex":
      return ExternalWorker.codex(options)
    case "cursor":
      return ExternalWorker.cursor(options)
  }
}

/** The code the command exits with, from how its run ended (see `ExitCode.fromExit`). */
const exitCodeOf = (exit: Exit.Exit<void, ExitWith>, onInterrupt: ExitCode): ExitCode => {
  if (Exit.isSuccess(exit)) return codes.ok
  const error = Cause.findErrorOption(exit.cause)
  if (Option.isSome(error)) return error.value.code
  return Cause.hasInterruptsOnly(exit.cause) ? onInterrupt : codes.unexpected
}

/**
 * The worker of `--worker acp`: the agent of `--worker-command` in the workspace, with the allowlisted
 * environment and `--api-key-env`'s variable when given. Its permission requests are allowed in act turns
 * only with `--approve all`: `ask` has nobody to ask over ACP here, so it rejects them as `none` does.
 */
const acpWorker = (
  command: ReadonlyArray<string>,
  target: Target.Target
): Worker.Worker<ChildProcessSpawner.ChildProcessSpawner> => {
  const [program = "", ...args] = command
  return ExternalWorker.acp({
    command: program,
    args,
    cwd: target.workspace,
    approve: target.approve === "all" ? "all" : "none",
    env: target.apiKeyEnv === undefined ? [] : [target.apiKeyEnv]
  })
}

/** The variable each external worker's API key is read from by default. */
const externalKeys = { claude: "ANTHROPIC_API_KEY", codex: "OPENAI_API_KEY", cursor: "CURSOR_API_KEY" } as const

/** A failure's exit code. */
const failureCode = (error: Supervisor.RunError | Sessions.SessionsError): ExitCode => fromError(error._tag)

/** The name the command's supervisor has in its `Sessions` layer. */
const supervisorName = "run"

/**
 * Follows a session the command started: its events go to `deliver` as they
 * are published, each once and in order. `follow` goes up to its run's
 * ending and answers its result (a session that answers a stored result
 * publishes nothing, and nothing is delivered); a supervised session's worker
 * failure (`WorkerFailed`, then an ending that says so in words) is the
 * `WorkerError` it was. `drain` delivers what was published and not yet
 * delivered: an interrupted session's last events. The command follows its
 * sessions with it, on whichever layer they are (`run --pg`: the cluster's).
 *
 * @since 0.1.0
 */
export const follower = (
  sessions: Sessions.Service,
  sessionId: string,
  deliver: (event: AgentEvent.AgentEvent) => Effect.Effect<void>
) => {
  let delivered = 0
  let workerFailed: SupervisorEvent.Of<"WorkerFailed"> | undefined
  // whole or not at all: an interrupted follow leaves nothing half-delivered for `drain`
  const send = ({ seq, event }: Sessions.Published) =>
    Effect.uninterruptible(Effect.suspend(() => {
      if (seq <= delivered) return Effect.void
      delivered = seq
      const own = SupervisorEvent.of(event)
      if (own?._tag === "WorkerFailed") workerFailed = own
      return deliver(event)
    }))
  const follow = Effect.gen(function*() {
    // from what was delivered: a follow made again (the database came back) shows nothing twice
    const delivering = yield* Effect.forkChild(sessions.watch(sessionId, delivered).pipe(
      Stream.takeUntil(({ event }) => Sessions.isEnding(event)),
      Stream.runForEach(send)
    ))
    const exit = yield* Effect.exit(sessions.result(sessionId))
    // An ending was published: delivered when the watch reaches it. None (a stored result): nothing more comes.
    const published = (yield* sessions.events(sessionId)).some(({ event }) => Sessions.isEnding(event))
    yield* published ? Fiber.join(delivering) : Fiber.interrupt(delivering)
    if (Exit.isFailure(exit) && workerFailed !== undefined && Cause.hasDies(exit.cause)) {
      const { worker, reason, message, exitCode } = workerFailed
      return yield* new Worker.WorkerError({ worker, reason, message, ...(exitCode === undefined ? {} : { exitCode }) })
    }
    return yield* exit
  })
  const drain = Effect.flatMap(
    Effect.orElseSucceed(sessions.events(sessionId, delivered), () => []),
    (rest) => Effect.forEach(rest, send, { discard: true })
  )
  return { follow, drain }
}

const maxTaskLength = 10_000_000

/** Reads the task from stdin, to its end. */
const taskFromStdin = Effect.gen(function*() {
  const stdio = yield* Stdio.Stdio
  const text = yield* stdio.stdin.pipe(
    Stream.decodeText(),
    Stream.runFoldEffect(
      () => "",
      (text, chunk) =>
        text.length + chunk.length > maxTaskLength
          ? Effect.fail(configError(`the task on stdin is longer than ${maxTaskLength} characters`))
          : Effect.succeed(text + chunk)
    ),
    Effect.catchTag("PlatformError", (error) => Effect.fail(configError(`cannot read the task from stdin: ${error.message}`)))
  )
  if (text.trim() === "") return yield* configError("the task on stdin is empty")
  return text.trim()
})

const logText = (message: unknown): string =>
  (Array.isArray(message) ? message : [message]).map((part) =>
    typeof part === "string" ? part : part instanceof Error ? part.message : View.compact(part, 500)
  ).join(" ")

/** Warnings and errors logged by the run (a sandbox without isolation, a dead MCP server) become notes. */
const logger = (note: (text: string) => void) =>
  Logger.make<unknown, void>(({ logLevel, message }) => {
    if (logLevel === "Fatal" || logLevel === "Error" || logLevel === "Warn") note(logText(message))
  })

/** The view; a live one has an input line when control lines are typed on the terminal. */
const makeView = (
  settings: Settings.Settings,
  input: boolean
): Effect.Effect<View.View | View.LiveView, never, Scope.Scope> =>
  Effect.gen(function*() {
    const io = yield* Io
    if (settings.quiet) return View.quiet(io.stderr.write)
    const session = settings.session?.dir
    if (io.stderr.isTerminal) {
      return yield* View.live({ write: io.stderr.write, columns: io.stderr.columns, color: io.color, input, session })
    }
    return View.log(io.stderr.write, { session })
  })

/**
 * The name of the command's agent in its spans (`invoke_agent effect-agent`), `run`'s and `serve`'s.
 *
 * @since 0.1.0
 */
export const agentName = "effect-agent"

/**
 * `--otlp`: the spans exported as OTLP/HTTP JSON to `url`, over the command's HTTP client (`run`'s and `serve`'s).
 *
 * @since 0.1.0
 */
export const tracing = (url: string) =>
  // loaded when a run exports its spans
  Layer.unwrap(Effect.map(
    Effect.promise(() => Promise.all([import("effect/observability/OtlpTracer"), import("effect/observability/OtlpSerialization")])),
    ([OtlpTracer, OtlpSerialization]) =>
      OtlpTracer.layer({ url, resource: { serviceName: "effect-agent" } }).pipe(Layer.provide(OtlpSerialization.layerJson))
  ))

/**
 * Runs `effect-agent run` with its parsed flags. Ends with the run's exit
 * code: it succeeds for exit code 0 and fails with `ExitWith` otherwise,
 * having reported what happened.
 *
 * @since 0.1.0
 */
export const run = (flags: Flags.Flags): Effect.Effect<void, ExitWith, Requirements> =>
  Effect.gen(function*() {
    const io = yield* Io
    const stdio = yield* Stdio.Stdio
    const stdinIsTerminal = yield* stdio.stdinIsTerminal
    let view: View.View | undefined
    let json = flags.json
    let sessionDir: string | undefined
    let stdoutClosed = false
    // An interrupt line, or the end of input at the plan gate (as in ynh): the run stops as SIGINT stops it.
    const interruptAsked = yield* Deferred.make<void>()
    const interrupt = Effect.asVoid(Deferred.succeed(interruptAsked, undefined))
    const runTally = tally()
    // A ynh trajectory's last line, written as the command exits (with its code and why it ends).
    let endTrajectory: ((timestamp: number, code: ExitCode) => void) | undefined
    let endReason: string | undefined
    const onInterrupted = yield* OnInterrupt
    // Notes before the view exists (and logs) go to stderr as they are.
    const note = (text: string) => (view ?? View.quiet(io.stderr.write)).note(text)

    const printJson = (code: ExitCode, report: Omit<Report, "exitCode" | "session" | "runId" | keyof Figures>) => {
      const figures = runTally.figures()
      io.stdout.write(JSON.stringify({ exitCode: code, ...report, ...figures, session: sessionDir ?? null }) + "\n")
    }

    const finish = (code: ExitCode, report: Parameters<typeof printJson>[1]) =>
      Effect.suspend(() => {
        endReason = report.summary
        view?.close()
        if (json) printJson(code, report)
        return code === codes.ok ? Effect.void : Effect.fail(new ExitWith({ code }))
      })

    const fail = (code: ExitCode, error: { readonly _tag: string; readonly message: string }) =>
      Effect.suspend(() => {
        const message = View.errorText(error.message)
        // A live view's bottom lines (the control prompt) go first, so the error starts on a clean line.
        view?.close()
        // A failed run's view has shown the error already (but a quiet one shows nothing).
        if (runTally.end() === undefined || flags.quiet) io.stderr.write(`effect-agent: ${message}\n`)
        return finish(code, { outcome: null, summary: message, answer: null, error: { _tag: error._tag, message } })
      })

    const program = Effect.gen(function*() {
      const settings = yield* Settings.resolve(flags, { cwd: io.cwd, env: io.env, stdinIsTerminal })
      json = settings.json
      // The result and the events on stdout are records too: not in a file the agent can replace.
      const record = settings.json ? "--json" : settings.emitJsonl === "-" ? "--emit-jsonl -" : undefined
      if (record !== undefined && io.stdout.file !== undefined) {
        const worker = settings.supervision?.worker
        yield* SessionFiles.checkOutside(record, io.stdout.file, settings.target, worker, `stdout (${io.stdout.file})`)
      }
      // Stdin carries the control lines, unless it carries the task.
      const controlled = settings.task !== undefined || settings.session?.resume === true
      const shown = yield* makeView(settings, controlled && stdinIsTerminal)
      view = shown
      for (const warning of settings.warnings) shown.note(warning)
      const task = controlled ? settings.task : yield* taskFromStdin

      // Approvals and the control input
      const steering = yield* Steering.make()
      const eof = yield* Deferred.make<void>()
      const asks = settings.target.approve === "ask"
      // A resumed supervised session keeps its turn gate (its run.json's), with or without --approve-turns now.
      const approveTurns = settings.supervision?.approveTurns === true
      const interactive = asks || approveTurns ? yield* Approvals.interactive() : undefined
      const untilEof = interactive === undefined
        ? undefined
        : Control.approvalsUntilEof(interactive, eof, { interrupt })
      const policy = settings.target.approve === "all"
        ? Approvals.allowAll
        : Approvals.denyAll("this call needs approval, and the run was started with --approve none")
      // Tool calls and plans are decided on stdin with --approve ask; feedback with --approve-turns.
      const approvals: Approvals.Service = {
        decide: asks && untilEof !== undefined ? untilEof.decide : policy.decide,
        open: asks ? untilEof?.open : undefined,
        decidePlan: asks ? untilEof?.decidePlan : undefined,
        openPlan: asks ? untilEof?.openPlan : undefined,
        decideTurn: approveTurns ? untilEof?.decideTurn : undefined,
        openTurn: approveTurns ? untilEof?.openTurn : undefined
      }
      /** The control lines on stdin (when it does not carry the task), to `messages`: the run's or the session's. */
      const serveControl = (messages: Control.Messages) =>
        Effect.gen(function*() {
          if (!controlled) return
          const lines = stdinIsTerminal && "typing" in shown
            ? yield* TerminalInput.lines(shown.typing)
            : Control.lines(stdio.stdin)
          yield* Effect.forkScoped(Control.serve({
            lines,
            target: {
              messages,
              approvals: interactive,
              messagesRefused: settings.supervision === undefined || settings.supervision.worker === "agent"
                ? undefined
                : `the ${settings.supervision.worker} worker (a CLI run) takes no steering or follow-ups, only cancel`,
              interrupt
            },
            onEof: settings.stdinEof,
            eof,
            report: (text) => Effect.sync(() => shown.note(text))
          }))
        })

      // What the agent runs on
      const languageModel = yield* model(settings, io.env, shown)
      // The sandbox hides the session's own directory, even inside a path granted to it.
      const hidden = settings.session === undefined ? [] : [settings.session.dir]
      const registry = yield* tools(settings.target, shown.note, hidden)
      const services = languageModel.pipe(
        Context.add(ToolRegistry.ToolRegistry, registry),
        Context.add(Approvals.Approvals, approvals)
      )

      // Outputs: the events as JSON lines are ours, or ynh's trajectory, whose session_end the command writes as
      // it exits (with its exit code)
      const plugins: Array<Hooks.PluginInput<FileSystem.FileSystem>> = [shown.plugin, runTally.plugin]
      const ynh = settings.jsonlFormat === "ynh" ? YnhTrajectory.encoder(ynhSession(settings, flags, asks)) : undefined
      const lineOf = ynh === undefined
        ? eventLine
        : (event: AgentEvent.AgentEvent) => ynh.lines(event).map(YnhTrajectory.encode).join("")
      const endOf = (timestamp: number, code: ExitCode, reason: string | undefined) =>
        ynh === undefined ? "" : ynh.end(timestamp, { exitCode: code, reason }).map(YnhTrajectory.encode).join("")
      if (settings.emitJsonl === "-") {
        plugins.push(jsonLines(io.stdout.write, lineOf))
        endTrajectory = (timestamp, code) => {
          const text = endOf(timestamp, code, endReason)
          if (text !== "") io.stdout.write(text)
        }
      } else if (settings.emitJsonl !== undefined) {
        const append = settings.session?.resume === true
        const output = yield* jsonLinesFile(settings.emitJsonl, append, settings.target.workspace, shown.note, lineOf)
        plugins.push(output.plugin)
        endTrajectory = (timestamp, code) => output.write(endOf(timestamp, code, endReason))
      }

      // The run: plain or supervised; a new session, or a resumed one
      const session = settings.session
      const supervision = settings.supervision
      const onInterrupt = yield* OnInterrupt
      /** From here on, SIGINT and SIGTERM leave a session to resume. */
      const path = yield* Path.Path
      let resumeHint = ""
      const resumable = (dir: string) => {
        sessionDir = dir
        resumeHint = SessionFiles.resumeCommand(dir, settings.target, { cwd: io.cwd, env: io.env }, path, supervision)
        onInterrupt.code = codes.interrupted
      }
      const interrupted = Effect.sync(() => {
        shown.close()
        const why = stdoutClosed ? "stdout was closed" : "interrupted"
        endReason = why
        io.stderr.write(
          sessionDir !== undefined
            ? `effect-agent: ${why}; the session is saved: resume it with ${resumeHint}\n`
            : `effect-agent: ${why}\n`
        )
        if (json) {
          printJson(onInterrupt.code, {
            outcome: runTally.end()?.outcome ?? null,
            summary: "interrupted",
            answer: null,
            error: null
          })
        }
      })

      // A supervised run's checks and worker, and its limits (the worker's own config has none of them)
      const supervisionOptions = (): SupervisedSession.Supervision<Sandbox.Sandbox | ChildProcessSpawner.ChildProcessSpawner> | undefined => {
        if (supervision === undefined) return undefined
        const worker = supervision.worker === "agent"
          ? undefined
          : supervision.worker === "acp"
          ? acpWorker(settings.workerCommand ?? [], settings.target)
          : externalWorker(supervision.worker, settings.target, settings.target.apiKeyEnv)
        return {
          checks: [
            ...supervision.checks.map((command) => Check.command(command, command)),
            ...(supervision.verifier === undefined
              ? []
              : [Check.command(supervision.verifier, supervision.verifier, { role: "verifier" as const })])
          ],
          plan: supervision.plan,
          maxPlanIterations: supervision.maxPlanIterations,
          approveTurns: supervision.approveTurns,
          tolerateKnownFailures: supervision.tolerateKnownFailures === true,
          maxTurns: supervision.maxTurns,
          maxTokens: supervision.maxTokens,
          maxCostUsd: supervision.maxCostUsd,
          maxWallClock: supervision.maxWallMs,
          readOnlyTools: [],
          ...(worker === undefined ? {} : { worker })
        }
      }
      const supervised = supervisionOptions()
      const { maxTurns: _maxTurns, budgets: _budgets, ...workerConfig } = settings.config
      // The checks' commands run in the target's sandbox
      const checkSandbox = Layer.build(sandboxLayer(settings.target, hidden)).pipe(
        Effect.mapError((error) => sandboxFailure(settings.target, error))
      )

      /** The sessions of the command's session directory: the `Sessions` layer on its files, and its supervisor. */
      const sessionsOn = (store: Context.Context<CheckpointStore.CheckpointStore>) =>
        Effect.gen(function*() {
          const given = Context.merge(services, store)
          const layer = supervised === undefined
            ? Sessions.layer({ name: agentName }).pipe(Layer.provide(Layer.succeedContext(given)))
            : Sessions.layer({ name: agentName, supervisors: { [supervisorName]: SupervisedSession.supervisor(supervised) } })
              .pipe(Layer.provide(Layer.succeedContext(Context.merge(given, yield* checkSandbox))))
          return Context.get(yield* Layer.build(layer), Sessions.Sessions)
        })

      /**
       * A session (`--session-dir`, `--resume`): the `Sessions` service on the files of its directory (`run
       * --pg` follows one on the cluster's layer). Its events come to the outputs as they are published, and the
       * control lines reach it by its id.
       */
      const sessionRun = (session: { readonly dir: string; readonly resume: boolean }) =>
        Effect.gen(function*() {
          const paths = SessionFiles.sessionPaths(path, session.dir)
          const store = yield* Layer.build(CheckpointStore.layerFileSystem(paths.store))
          const sessionId = SessionFiles.sessionId
          if (session.resume) {
            // Said before anything starts: nothing to resume, or not the kind of run its run.json says.
            const cannot = (error: { readonly message: string }) =>
              resumeFailure(`cannot resume ${session.dir}: ${error.message}`)
            const saved = yield* Effect.mapError(Context.get(store, CheckpointStore.CheckpointStore).load(sessionId), cannot)
            if (supervised !== undefined) {
              yield* Effect.mapError(Effect.provideContext(SupervisedSession.load(sessionId), store), cannot)
            } else if (SupervisedSession.key in saved.state.pluginState) {
              return yield* resumeFailure(
                `cannot resume ${session.dir}: its checkpoint is a supervised run's, and its run.json says it is not`
              )
            }
          } else {
            // A directory that holds checkpoints (its run.json gone) is no place for a new session: it would
            // resume them. (One with its run.json is refused as it is written, with its own words.)
            const fs = yield* FileSystem.FileSystem
            const held = !(yield* fs.exists(paths.settings).pipe(Effect.orElseSucceed(() => false))) &&
              (yield* Context.get(store, CheckpointStore.CheckpointStore).load(sessionId).pipe(
                Effect.as(true),
                Effect.catchTag("CheckpointMissing", () => Effect.succeed(false)),
                Effect.orElseSucceed(() => true)
              ))
            if (held) {
              return yield* configError(
                `--session-dir: ${session.dir} already holds a session's checkpoints: resume it with --resume ` +
                  `${session.dir}, or choose another directory`
              )
            }
            yield* SessionFiles.writeSessionFile(session.dir, settings.target, io.env, supervision)
          }
          const sessions = yield* sessionsOn(store)
          // the session's trajectory goes on in its file, run after run
          const outputs = yield* PluginEvents.deliverTo([
            ...plugins,
            Trajectory.ndjson(paths.trajectory, { append: true })
          ])
          const followed = follower(sessions, sessionId, outputs)
          // Stopped (SIGINT, SIGTERM, stdout closed): the run is interrupted, and its last events (the calls it
          // cancelled, its ending) still reach the outputs, before the layer's scope ends.
          yield* Effect.addFinalizer((exit) =>
            Exit.isSuccess(exit) ? Effect.void : Effect.andThen(Effect.ignore(sessions.interrupt(sessionId)), followed.drain)
          )
          resumable(session.dir)
          yield* sessions.start({
            sessionId,
            prompt: session.resume ? [] : task ?? "",
            system: settings.system,
            config: supervised === undefined ? settings.config : workerConfig,
            supervisor: supervised === undefined ? undefined : supervisorName,
            followUp: session.resume ? task : undefined,
            // a finished session resumed goes on under the limits given now, as --resume promises
            resume: session.resume
          }).pipe(Effect.catchTag("SteeringFull", (full) => configError(`--task: ${full.message}`)))
          yield* serveControl({
            steer: (text) => sessions.steer(sessionId, text),
            followUp: (text) => sessions.followUp(sessionId, text),
            cancel: (reason) => sessions.cancel(sessionId, reason)
          })
          return yield* followed.follow
        }).pipe(Effect.scoped)

      // A run of the command's own: through the front door of a run (`Agent.run`) or of a supervised run
      const start = Effect.gen(function*() {
        if (session !== undefined) return yield* sessionRun(session)
        // cancel ends the run; steer and follow_up reach our loop (an external worker refuses them)
        yield* serveControl(steering)
        if (supervised === undefined) {
          return yield* Agent.run({
            prompt: task ?? "",
            system: settings.system,
            config: settings.config,
            plugins,
            steering,
            name: agentName
          })
        }
        const { readOnlyTools: _readOnly, ...limits } = supervised
        const done = yield* Supervisor.run({
          ...limits,
          task: task ?? "",
          agent: { system: settings.system, config: workerConfig, readOnlyTools: [] },
          onEvent: yield* PluginEvents.deliverTo(plugins),
          steering
        }).pipe(Effect.provideContext(yield* checkSandbox))
        return Supervisor.runResult(done)
      })

      const result = yield* start.pipe(
        Effect.provideContext(services),
        // Spans are flushed to the collector when the run ends, however it ends.
        settings.otlp === undefined ? identity : Effect.provide(tracing(settings.otlp)),
        Effect.onInterrupt(() => interrupted)
      )

      const outcome = SupervisorOutcome.fromOutcome(result.outcome)
      const code = fromOutcome(outcome)
      const summary = `${outcome._tag}: ${View.describe(outcome)}`
      const answer = answerOf(result.state.messages)
      shown.close()
      const streamedHere = io.stderr.isTerminal && io.stdout.isTerminal && !settings.quiet
      if (!settings.json && settings.emitJsonl !== "-" && answer !== undefined && answer !== "" && !streamedHere) {
        const shownAnswer = View.answer(answer, io.stdout.isTerminal)
        io.stdout.write(shownAnswer.endsWith("\n") ? shownAnswer : `${shownAnswer}\n`)
      }
      if (settings.quiet && (code !== codes.ok || outcome._tag === "WrappedUp")) {
        io.stderr.write(`effect-agent: ${summary}\n`)
      }
      return yield* finish(code, { outcome, summary, answer: answer ?? null, error: null })
    })

    const running = yield* Effect.forkChild(program.pipe(
      Effect.catch((error) =>
        error._tag === "ExitWith"
          ? Effect.fail(error)
          : fail(error._tag === "CliFailure" ? error.code : failureCode(error), error)
      ),
      // however the command ends (an interrupt too), with the code it exits with
      Effect.onExit((exit) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.sync(() => endTrajectory?.(now, exitCodeOf(exit, onInterrupted.code))))
      ),
      Effect.provide(Logger.layer([logger(note)]))
    ))
    // Asked on stdin: the run stops as SIGINT stops it, its session left to resume (exit 31; 30 without one).
    yield* Effect.forkChild(Effect.andThen(Deferred.await(interruptAsked), Fiber.interrupt(running)))
    // Stdout's reader gone (`| head`): the run stops as SIGTERM stops it, there being no one to read what it does.
    if (io.stdout.closed !== undefined) {
      yield* Effect.forkChild(Effect.andThen(
        io.stdout.closed,
        Effect.suspend(() => {
          stdoutClosed = true
          return Fiber.interrupt(running)
        })
      ))
    }
    // Stopped (SIGINT, SIGTERM): the run is interrupted and waited for before the command's scope closes, so its
    // last events (the calls it cancelled, its ending) reach the outputs while they are open. A child fiber is
    // interrupted only after its parent's scope has closed: the JSON lines file would be closed under it, and
    // its last writes made to a descriptor closed (or, reused, to another file).
    return yield* Fiber.join(running).pipe(Effect.onInterrupt(() => Fiber.interrupt(running)))
  }).pipe(Effect.scoped)
