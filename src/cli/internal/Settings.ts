/**
 * From the flags of `effect-agent run` and the command's environment to
 * checked settings: the `Target` the agent runs on (over a resumed session's
 * `run.json`), its API key, its config (every limit through
 * `UntrustedConfig.decode`), how a supervised run is supervised (over a
 * resumed session's), the session directory, and the outputs.
 * Whatever is wrong is a `Failure` with exit code 22 that names the flag; a
 * session that cannot be resumed is a `Failure` with exit code 21.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as AgentConfig from "../../AgentConfig.ts"
import type * as Control from "../../protocol/Control.ts"
import * as UntrustedConfig from "../../protocol/UntrustedConfig.ts"
import { configError, resumeFailure } from "./Failure.ts"
import { type Flags, mcpArgv, parseDuration, parseTools } from "./Flags.ts"
import {
  checkEntries,
  checkOutside,
  checkPlacement,
  type Place,
  readSessionFile,
  type SessionFile,
  type Widening,
  widening
} from "./SessionFiles.ts"
import { apiKeyEnv, baseUrlEnv, builtinTools, defaultModels, type Supervision, type Target } from "./Target.ts"

/**
 * Checked settings of a run.
 *
 * @since 0.1.0
 */
export interface Settings {
  readonly target: Target
  /** The API key, read from the environment (see {@link apiKey}). */
  readonly apiKey: Redacted.Redacted<string> | undefined
  /** The task; when resuming, a follow-up. `undefined`: read it from stdin (a new run), or none (a resume). */
  readonly task: string | undefined
  readonly system: string | undefined
  /** A new run's whole config, or what a resumed run changes in its saved one. */
  readonly config: AgentConfig.Input
  /** A supervised run's checks, plan, worker and limits; `undefined` for a plain run. */
  readonly supervision: Supervision | undefined
  /** The agent `--worker acp` runs (`--worker-command`, split): its program and arguments. */
  readonly workerCommand: ReadonlyArray<string> | undefined
  /** The session directory (absolute), and whether it is resumed. */
  readonly session: { readonly dir: string; readonly resume: boolean } | undefined
  /** Where the events go as JSON lines: a file, `-` for stdout, or nowhere. */
  readonly emitJsonl: string | undefined
  /** The lines of `--emit-jsonl`: our events, or ynh's trajectory (`YnhTrajectory`). */
  readonly jsonlFormat: "events" | "ynh"
  /** The OTLP/HTTP traces endpoint the run's spans are exported to (`.../v1/traces`), or none. */
  readonly otlp: string | undefined
  readonly quiet: boolean
  readonly json: boolean
  readonly stdinEof: Control.OnEof
  /** Settings that were changed to fit (a limit clamped into its safe range). */
  readonly warnings: ReadonlyArray<string>
}

/** The providers' own API hosts, which answer nothing without a key. */
const keyedHosts = new Set(["api.openai.com", "api.anthropic.com"])

const hostOf = (url: string): string => {
  try {
    return new URL(url).hostname
  } catch {
    return ""
  }
}

/**
 * The target's API key, read from the environment: from the variable
 * `--api-key-env` names, else the provider's (see {@link apiKeyEnv}). A key
 * is required when a variable was named, for Anthropic, and for OpenAI's own
 * API (no `--base-url`, or one on api.openai.com); a server behind another
 * base URL may need none. A missing key fails with a sentence saying what to
 * do, so that no request goes out without it. An empty variable is not set.
 *
 * @since 0.1.0
 */
export const apiKey = (
  target: Target,
  env: Readonly<Record<string, string | undefined>>
): Result.Result<Redacted.Redacted<string> | undefined, string> => {
  const name = target.apiKeyEnv ?? apiKeyEnv[target.provider]
  if (name === undefined) return Result.succeed(undefined)
  const value = env[name]
  if (value !== undefined && value !== "") return Result.succeed(Redacted.make(value))
  if (target.apiKeyEnv !== undefined) {
    return Result.fail(`${name} is not set; set it, or pass --api-key-env NAME to read the key from another variable`)
  }
  if (target.provider === "anthropic") {
    return Result.fail(`${name} is not set; pass --api-key-env NAME to read the key from another variable`)
  }
  const ownApi = target.baseUrl === undefined || keyedHosts.has(hostOf(target.baseUrl))
  return ownApi
    ? Result.fail(`${name} is not set; pass --api-key-env NAME, or --base-url for a server that needs no key`)
    : Result.succeed(undefined)
}


const orUndefined = Option.getOrUndefined

// -----------------------------------------------------------------------------
// Limits
// -----------------------------------------------------------------------------

const flagOfField: Record<string, string> = {
  maxTurns: "--max-turns",
  "budgets.tokens": "--max-tokens",
  "budgets.costUsd": "--max-cost",
  "budgets.wallClock": "--max-wall"
}

interface Limit {
  readonly flag: string
  readonly given: number
  readonly read: (config: AgentConfig.AgentConfig) => number | null
  /** A value as the flag takes it. */
  readonly show?: (value: number | null) => string
}

const { budgets: budgetRanges, maxTurns: turnRange } = UntrustedConfig.ranges

/** Each limit flag's safe range, in the flag's own unit. */
const rangeText: Record<string, string> = {
  "--max-turns": `${turnRange.min} to ${turnRange.max}`,
  "--max-tokens": `${budgetRanges.tokens.min} to ${budgetRanges.tokens.max.toLocaleString("en-US")}`,
  "--max-cost": `${budgetRanges.costUsd.min} to ${budgetRanges.costUsd.max.toLocaleString("en-US")} (US dollars)`,
  "--max-wall": `${budgetRanges.wallClock.min / 1000}s to ${budgetRanges.wallClock.max / 3_600_000}h`
}

/**
 * A limit no run can have (zero or less: not one model call would fit) is
 * refused; one in its safe range's direction but past it is clamped later,
 * with a warning.
 */
const possible = (flag: string, given: Option.Option<number>, shown: string | undefined = undefined) =>
  Option.isSome(given) && !(given.value > 0)
    ? configError(`${flag}: ${shown ?? given.value} is not a limit a run can have; give ${rangeText[flag]}`)
    : Effect.void

/**
 * The flags that set limits.
 *
 * @since 0.1.0
 */
export type LimitFlags = Pick<Flags, "maxTurns" | "maxTokens" | "maxCost" | "maxWall">

/**
 * The config from the limit flags, through `UntrustedConfig.decode`
 * (only the given settings when resuming), and a warning for each clamped.
 *
 * @since 0.1.0
 */
export const limits = (flags: LimitFlags, resume: boolean) =>
  Effect.gen(function*() {
    const wall = Option.map(flags.maxWall, (text) => ({ text, ms: parseDuration(text) }))
    if (Option.isSome(wall) && wall.value.ms === undefined) {
      return yield* configError(
        `--max-wall: ${JSON.stringify(wall.value.text)} is not a duration (e.g. 90, 90s, 5m, 2h)`
      )
    }
    const wallMs = Option.flatMap(wall, ({ ms }) => Option.fromNullishOr(ms))
    yield* possible("--max-turns", flags.maxTurns)
    yield* possible("--max-tokens", flags.maxTokens)
    yield* possible("--max-cost", flags.maxCost)
    yield* possible("--max-wall", wallMs, Option.getOrUndefined(flags.maxWall))
    const budgets = {
      ...(Option.isSome(flags.maxTokens) ? { tokens: flags.maxTokens.value } : {}),
      ...(Option.isSome(flags.maxCost) ? { costUsd: flags.maxCost.value } : {}),
      ...(Option.isSome(wallMs) ? { wallClock: wallMs.value } : {})
    }
    const input = {
      ...(Option.isSome(flags.maxTurns) ? { maxTurns: flags.maxTurns.value } : {}),
      ...(Object.keys(budgets).length > 0 ? { budgets } : {})
    }
    const config = yield* Effect.mapError(UntrustedConfig.decode(input), (error) =>
      configError(`${flagOfField[error.field] ?? error.field}: ${error.rule}`))
    const given: Array<Limit> = []
    if (input.maxTurns !== undefined) {
      given.push({ flag: "--max-turns", given: input.maxTurns, read: (c) => c.maxTurns })
    }
    if (budgets.tokens !== undefined) {
      given.push({ flag: "--max-tokens", given: budgets.tokens, read: (c) => c.budgets.tokens })
    }
    if (budgets.costUsd !== undefined) {
      given.push({ flag: "--max-cost", given: budgets.costUsd, read: (c) => c.budgets.costUsd })
    }
    if (budgets.wallClock !== undefined) {
      given.push({
        flag: "--max-wall",
        given: budgets.wallClock,
        read: (c) => c.budgets.wallClock,
        show: (ms) => ms === null ? "none" : `${ms / 1000}s`
      })
    }
    const warnings = given.flatMap((limit) => {
      const used = limit.read(config)
      const show = limit.show ?? String
      return used === limit.given
        ? []
        : [`${limit.flag} ${show(limit.given)} is outside its safe range; using ${show(used)}`]
    })
    const chosen: AgentConfig.Input = resume
      ? {
        ...(input.maxTurns === undefined ? {} : { maxTurns: config.maxTurns }),
        budgets: {
          ...(budgets.tokens === undefined ? {} : { tokens: config.budgets.tokens }),
          ...(budgets.costUsd === undefined ? {} : { costUsd: config.budgets.costUsd }),
          ...(budgets.wallClock === undefined ? {} : { wallClock: config.budgets.wallClock })
        }
      }
      : config
    return { config: chosen, warnings }
  })

// -----------------------------------------------------------------------------
// What the agent runs on
// -----------------------------------------------------------------------------

const checkUrl = (url: string): boolean => {
  try {
    const parsed = new URL(url)
    return parsed.protocol === "http:" || parsed.protocol === "https:"
  } catch {
    return false
  }
}

/**
 * The flags that choose what the agent runs on.
 *
 * @since 0.1.0
 */
export type TargetFlags = Pick<
  Flags,
  | "provider"
  | "model"
  | "baseUrl"
  | "apiKeyEnv"
  | "script"
  | "workspace"
  | "sandbox"
  | "allowRead"
  | "allowWrite"
  | "tools"
  | "mcp"
  | "approve"
>

/**
 * The target from the flags over a base (the defaults, or a session's
 * `run.json`).
 *
 * @since 0.1.0
 */
export const target = (flags: TargetFlags, base: Target | undefined, options: Place, path: Path.Path) =>
  Effect.gen(function*() {
    const cwd = options.cwd
    const provider = orUndefined(flags.provider) ?? base?.provider ?? "openai"
    const sameProvider = base?.provider === provider
    const model = orUndefined(flags.model) ?? (sameProvider ? base.model : defaultModels[provider])
    const envVar = baseUrlEnv[provider]
    const fromEnv = envVar === undefined || options.env[envVar] === "" ? undefined : options.env[envVar]
    const baseUrl = orUndefined(flags.baseUrl) ?? (sameProvider ? base.baseUrl : undefined) ?? fromEnv
    const apiKeyEnv = orUndefined(flags.apiKeyEnv) ?? base?.apiKeyEnv
    const scriptFlag = orUndefined(flags.script)
    const script = scriptFlag === undefined ? base?.script : path.resolve(cwd, scriptFlag)
    const workspace = path.resolve(cwd, orUndefined(flags.workspace) ?? base?.workspace ?? ".")
    const sandbox = orUndefined(flags.sandbox) ?? base?.sandbox ?? "auto"
    const toolsFlag = orUndefined(flags.tools)
    const tools = toolsFlag === undefined
      ? base?.tools ?? (sandbox === "none" ? [] : builtinTools)
      : yield* Result.match(parseTools(toolsFlag), {
        onFailure: (problem) => Effect.fail(configError(`--tools: ${problem}`)),
        onSuccess: Effect.succeed
      })
    const mcp = flags.mcp.length > 0 ? flags.mcp : base?.mcp ?? []
    const approve = orUndefined(flags.approve) ?? base?.approve ?? "none"
    const allowRead = flags.allowRead.length > 0
      ? flags.allowRead.map((granted) => path.resolve(cwd, granted))
      : base?.allowRead ?? []
    const allowWrite = flags.allowWrite.length > 0
      ? flags.allowWrite.map((granted) => path.resolve(cwd, granted))
      : base?.allowWrite ?? []

    if (provider === "scripted" && script === undefined) {
      return yield* configError("--provider scripted needs --script FILE (the replies, as JSON)")
    }
    if (provider !== "scripted" && scriptFlag !== undefined) {
      return yield* configError("--script is for --provider scripted")
    }
    if (baseUrl !== undefined && !checkUrl(baseUrl)) {
      return yield* configError(`--base-url: ${JSON.stringify(baseUrl)} is not an http(s) URL`)
    }
    if (apiKeyEnv !== undefined && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(apiKeyEnv)) {
      return yield* configError(`--api-key-env: ${JSON.stringify(apiKeyEnv)} is not an environment variable name`)
    }
    if (sandbox === "none" && tools.length > 0) {
      return yield* configError(
        "--sandbox none leaves no sandbox for the built-in tools: add --tools none, or choose a sandbox"
      )
    }
    if ((sandbox === "local" || sandbox === "none") && allowRead.length + allowWrite.length > 0) {
      const flag = allowRead.length > 0 ? "--allow-read" : "--allow-write"
      return yield* configError(
        `${flag} grants a host path to bubblewrap's commands: under --sandbox ${sandbox} ` +
          (sandbox === "local" ? "commands reach all their user can, granted or not" : "there are no commands") +
          "; choose --sandbox bubblewrap or auto"
      )
    }
    for (const command of mcp) {
      const argv = mcpArgv(command)
      if (Result.isFailure(argv)) return yield* configError(`--mcp ${JSON.stringify(command)}: ${argv.failure}`)
    }
    if (base !== undefined) {
      // What widens the agent's reach past the defaults comes from the flags, never from the session directory.
      const given: Record<Widening["flag"], boolean> = {
        workspace: Option.isSome(flags.workspace),
        sandbox: Option.isSome(flags.sandbox),
        approve: Option.isSome(flags.approve),
        mcp: flags.mcp.length > 0,
        allowRead: flags.allowRead.length > 0,
        allowWrite: flags.allowWrite.length > 0,
        baseUrl: Option.isSome(flags.baseUrl) || !sameProvider,
        apiKeyEnv: Option.isSome(flags.apiKeyEnv),
        // An external worker is checked with the rest of the supervision (see `supervision`).
        worker: true
      }
      const confirm = widening(base, options, path).filter((item) => !given[item.flag]).map((item) => item.text)
      if (confirm.length > 0) {
        return yield* configError(
          `--resume: the session was started with ${confirm.join(" ")}; a resumed run takes what widens the agent's ` +
            "reach only from its own flags, never from the session directory: pass them again (or others) to go on"
        )
      }
    }
    const result: Target = {
      provider,
      model,
      ...(baseUrl === undefined ? {} : { baseUrl }),
      ...(apiKeyEnv === undefined ? {} : { apiKeyEnv }),
      ...(script === undefined ? {} : { script }),
      workspace,
      sandbox,
      ...(allowRead.length === 0 ? {} : { allowRead }),
      ...(allowWrite.length === 0 ? {} : { allowWrite }),
      tools,
      mcp,
      approve
    }
    return result
  })

// -----------------------------------------------------------------------------
// All together
// -----------------------------------------------------------------------------

/**
 * Where the command runs: the working directory, the environment (for
 * `OPENAI_BASE_URL` and `ANTHROPIC_BASE_URL`), and whether stdin is a
 * terminal (then a missing task cannot be read from it).
 *
 * @since 0.1.0
 */
export interface Environment extends Place {
  readonly stdinIsTerminal: boolean
}

/**
 * Checks the flags of `effect-agent run` and resolves them into settings.
 *
 * @since 0.1.0
 */
export const resolve = (flags: Flags, options: Environment) =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const resumeDir = Option.map(flags.resume, (dir) => path.resolve(options.cwd, dir))
    const sessionDir = Option.map(flags.sessionDir, (dir) => path.resolve(options.cwd, dir))
    if (Option.isSome(resumeDir) && Option.isSome(sessionDir)) {
      return yield* configError("--resume DIR continues the session in DIR: leave out --session-dir")
    }
    const resume = Option.isSome(resumeDir)
    if (resume && Option.isSome(flags.system)) {
      return yield* configError("--system: a resumed session keeps its system prompt")
    }
    const task = orUndefined(flags.task)
    if (task !== undefined && task.trim() === "") return yield* configError("--task is empty")
    const taskFromStdin = task === undefined && !resume
    if (taskFromStdin && options.stdinIsTerminal) {
      return yield* configError("no task: give --task TEXT, or pipe the task on stdin")
    }
    const saved = resume ? yield* readSessionFile(resumeDir.value, options.env) : undefined
    const base = saved?.target
    const resolved = yield* target(flags, base, options, path)
    // An external worker (a CLI run in the workspace) writes there too; a resumed session keeps its own.
    const worker = saved?.supervision?.worker ?? orUndefined(flags.worker)

    if (Option.isSome(resumeDir)) {
      yield* checkPlacement("--resume", resumeDir.value, resolved, worker)
      yield* checkEntries(resumeDir.value, resumeFailure)
    } else if (Option.isSome(sessionDir)) {
      yield* checkPlacement("--session-dir", sessionDir.value, resolved, worker)
      yield* checkEntries(sessionDir.value, configError)
    }
    if (taskFromStdin && resolved.approve === "ask") {
      return yield* configError("--approve ask reads decisions on stdin: give the task with --task")
    }
    if (taskFromStdin && flags.stdinEof === "cancel") {
      return yield* configError("--stdin-eof cancel watches the control input on stdin: give the task with --task")
    }
    const emitJsonlFlag = orUndefined(flags.emitJsonl)
    if (emitJsonlFlag === "-" && flags.json) {
      return yield* configError("--emit-jsonl - and --json both want stdout: give --emit-jsonl a file")
    }
    if (flags.jsonlFormat !== "events" && emitJsonlFlag === undefined) {
      return yield* configError("--jsonl-format: it is the format of --emit-jsonl: give --emit-jsonl FILE (or -) too")
    }
    const emitJsonl = emitJsonlFlag === undefined || emitJsonlFlag === "-"
      ? emitJsonlFlag
      : path.resolve(options.cwd, emitJsonlFlag)
    // The events are a record a pipeline keeps: never where the agent can replace them.
    if (emitJsonl !== undefined && emitJsonl !== "-") yield* checkOutside("--emit-jsonl", emitJsonl, resolved, worker)
    const otlp = tracesUrl(orUndefined(flags.otlp))
    if (Result.isFailure(otlp)) return yield* configError(otlp.failure)
    const { config, warnings } = yield* limits(flags, resume)
    const resumed = saved === undefined ? undefined : { file: saved, options, path }
    // A supervised run's limits are those given (a new run's defaults are the supervisor's: 10 act turns).
    const given = resume ? config : (yield* limits(flags, true)).config
    const supervised = yield* supervision(flags, given, resumed)
    const workerCommand = yield* agentCommand(orUndefined(flags.workerCommand), supervised?.worker)
    if (resume && supervised !== undefined && task !== undefined) {
      return yield* configError("--task: a resumed supervised session keeps its task (it has no follow-ups)")
    }
    // An external worker calls no model of ours: our provider's key is not needed (its own, if any, is passed to it).
    const external = supervised !== undefined && supervised.worker !== "agent"
    const key = external ? Result.succeed(undefined) : apiKey(resolved, options.env)
    if (Result.isFailure(key)) return yield* configError(key.failure)
    const dir = Option.isSome(resumeDir) ? resumeDir : sessionDir
    const settings: Settings = {
      target: resolved,
      apiKey: key.success,
      task,
      system: orUndefined(flags.system),
      config,
      supervision: supervised,
      workerCommand,
      session: Option.isSome(dir) ? { dir: dir.value, resume } : undefined,
      emitJsonl,
      jsonlFormat: flags.jsonlFormat,
      otlp: otlp.success,
      quiet: flags.quiet,
      json: flags.json,
      stdinEof: flags.stdinEof,
      warnings
    }
    return settings
  })


/**
 * The flags that make a run supervised.
 *
 * @since 0.1.0
 */
export type SupervisionFlags = Pick<
  Flags,
  "check" | "verifier" | "plan" | "maxPlanIterations" | "approveTurns" | "worker" | "tolerateKnownFailures"
>

/** The limits of a supervised run: the config's (checked by `limits`), the act turn cap being its `maxTurns`. */
const supervisionLimits = (config: AgentConfig.Input) => {
  const wall = config.budgets?.wallClock
  return {
    ...(typeof config.maxTurns === "number" ? { maxTurns: config.maxTurns } : {}),
    ...(typeof config.budgets?.tokens === "number" ? { maxTokens: config.budgets.tokens } : {}),
    ...(typeof config.budgets?.costUsd === "number" ? { maxCostUsd: config.budgets.costUsd } : {}),
    ...(typeof wall === "number" ? { maxWallMs: wall } : {})
  }
}

/**
 * How a run is supervised: from the flags for a new run (`undefined` when
 * none asks for supervision), or a resumed session's (`run.json`) with the
 * limits and `--approve-turns` given now on top. Its limits are those of
 * `config` (checked by `limits`, the given ones only): `--max-turns` caps
 * the act turns. A resumed session keeps its
 * checks, plan and worker: flags that would change them are refused, and an
 * external worker must be named again (it runs outside the sandbox).
 *
 * @since 0.1.0
 */
export const supervision = (
  flags: SupervisionFlags,
  config: AgentConfig.Input,
  resumed: { readonly file: SessionFile; readonly options: Place; readonly path: Path.Path } | undefined
) =>
  Effect.gen(function*() {
    const limits = supervisionLimits(config)
    const shaping = [
      ...(flags.check.length > 0 ? ["--check"] : []),
      ...(Option.isSome(flags.verifier) ? ["--verifier"] : []),
      ...(flags.plan ? ["--plan"] : []),
      ...(Option.isSome(flags.maxPlanIterations) ? ["--max-plan-iterations"] : []),
      ...(flags.tolerateKnownFailures ? ["--tolerate-known-failures"] : [])
    ]
    if (resumed !== undefined) {
      const saved = resumed.file.supervision
      if (saved === undefined) {
        const given = [...shaping, ...(flags.approveTurns ? ["--approve-turns"] : []), ...(
          Option.isSome(flags.worker) ? ["--worker"] : []
        )]
        if (given.length > 0) {
          return yield* configError(
            `${given.join(", ")}: the session was not supervised; a resumed session keeps how it runs`
          )
        }
        return undefined
      }
      if (shaping.length > 0) {
        return yield* configError(
          `${shaping.join(", ")}: a resumed supervised session keeps its checks and plan settings; leave them out`
        )
      }
      const worker = Option.getOrUndefined(flags.worker)
      if (worker !== undefined && worker !== saved.worker) {
        return yield* configError(
          `--worker ${worker}: the session's worker is ${saved.worker}; a resumed supervised session keeps it`
        )
      }
      if (saved.worker !== "agent" && worker === undefined) {
        const again = widening(resumed.file.target, resumed.options, resumed.path, saved).map((item) => item.text)
        return yield* configError(
          `--resume: the session was started with --worker ${saved.worker}, a CLI run outside the sandbox; a resumed ` +
            `run takes it only from its own flags: pass it again (${again.join(" ")})`
        )
      }
      const result: Supervision = { ...saved, ...limits, approveTurns: saved.approveTurns || flags.approveTurns }
      return result
    }
    const supervised = shaping.length > 0 || flags.approveTurns || Option.isSome(flags.worker)
    if (!supervised) return undefined
    const result: Supervision = {
      checks: flags.check,
      ...(Option.isSome(flags.verifier) ? { verifier: flags.verifier.value } : {}),
      plan: flags.plan,
      ...(Option.isSome(flags.maxPlanIterations) ? { maxPlanIterations: flags.maxPlanIterations.value } : {}),
      approveTurns: flags.approveTurns,
      ...(flags.tolerateKnownFailures ? { tolerateKnownFailures: true } : {}),
      worker: Option.getOrElse(flags.worker, () => "agent" as const),
      ...limits
    }
    return result
  })

/**
 * The agent of `--worker acp`, from `--worker-command`: its words, split at
 * whitespace, quotes (`"…"` or `'…'`) grouping. Required by that worker, and
 * refused with any other (it would be ignored).
 */
const agentCommand = (text: string | undefined, worker: Supervision["worker"] | undefined) =>
  Effect.gen(function*() {
    if (worker !== "acp") {
      if (text !== undefined) return yield* configError("--worker-command: only --worker acp runs an agent command")
      return undefined
    }
    if (text === undefined) {
      return yield* configError(
        `--worker acp needs --worker-command "<program> <args>": the agent that speaks ACP on stdio (named again on --resume)`
      )
    }
    const words = splitWords(text)
    if (words === undefined) return yield* configError("--worker-command: a quote is not closed")
    if (words.length === 0) return yield* configError("--worker-command is empty")
    return words
  })

/** Words split at whitespace, quotes grouping; `undefined` when a quote is left open. */
const splitWords = (text: string): ReadonlyArray<string> | undefined => {
  const words: Array<string> = []
  let word: string | undefined
  let quote: string | undefined
  for (const char of text) {
    if (quote !== undefined) {
      if (char === quote) quote = undefined
      else word = (word ?? "") + char
    } else if (char === `"` || char === "'") {
      quote = char
      word = word ?? ""
    } else if (/\s/.test(char)) {
      if (word !== undefined) words.push(word)
      word = undefined
    } else {
      word = (word ?? "") + char
    }
  }
  if (quote !== undefined) return undefined
  if (word !== undefined) words.push(word)
  return words
}

/**
 * The traces endpoint of `--otlp`: an http(s) URL, the collector's base
 * (`/v1/traces` is added, as OTLP exporters do with a base endpoint) or the
 * traces URL itself. Credentials in the URL are refused: they would be sent
 * in the clear to whatever the URL names, and shown in errors.
 */
export const tracesUrl = (text: string | undefined): Result.Result<string | undefined, string> => {
  if (text === undefined) return Result.succeed(undefined)
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return Result.fail(`--otlp: ${JSON.stringify(text)} is not an http(s) URL`)
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return Result.fail(`--otlp: ${JSON.stringify(text)} is not an http(s) URL`)
  }
  if (url.username !== "" || url.password !== "") {
    return Result.fail("--otlp: the URL may not hold credentials")
  }
  if (!url.pathname.endsWith("/v1/traces")) url.pathname = `${url.pathname.replace(/\/+$/, "")}/v1/traces`
  return Result.succeed(url.href)
}
