/**
 * From the flags of `effect-agent run` to checked settings: the provider,
 * tools and sandbox the agent runs on, its config (every number through
 * `AgentConfig.fromUntrusted`), the session, and the outputs. Whatever is
 * wrong is a `Failure` with exit code 22 that names the flag; a session that
 * cannot be resumed is a `Failure` with exit code 21.
 *
 * A session directory holds `run.json` (what the agent runs on: provider,
 * model, base URL, the name of the key's variable, never a key; workspace,
 * sandbox, tools, MCP servers, approvals), the checkpoint (`checkpoint/`) and
 * the trajectory (`trajectory.ndjson`). It may not overlap the workspace of
 * an agent with tools, and the command does not write through links in it.
 * `run.json` is sealed (see `Seal`); `--resume DIR` runs on what a `run.json`
 * with a matching seal says, with the flags given on top, except what widens
 * the agent's reach (workspace, local sandbox, approvals, MCP servers, base
 * URL, key variable), which must be given again as flags.
 *
 * @since 0.1.0
 */
import { Effect, FileSystem, Option, Path, Redacted, Result, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import { CommandLine } from "effect/process"
import * as AgentConfig from "../../AgentConfig.ts"
import * as BuiltinTools from "../../sandbox/BuiltinTools.ts"
import * as Control from "../Control.ts"
import { codes } from "../ExitCode.ts"
import { Failure } from "./Failure.ts"
import * as Seal from "./Seal.ts"

/**
 * The providers: `openai` (Chat Completions, and any compatible server),
 * `openai-responses`, `anthropic`, and `scripted` (a script file, offline).
 *
 * @since 0.1.0
 */
export const Provider = Schema.Literals(["openai", "openai-responses", "anthropic", "scripted"])
/** @since 0.1.0 */
export type Provider = typeof Provider.Type

/**
 * The sandboxes: `auto` (bubblewrap where it works, else local), `bubblewrap`,
 * `local`, or `none` (no built-in tools).
 *
 * @since 0.1.0
 */
export const SandboxKind = Schema.Literals(["auto", "bubblewrap", "local", "none"])
/** @since 0.1.0 */
export type SandboxKind = typeof SandboxKind.Type

/**
 * Which calls that need approval are approved: `all`, `none` (denied), or
 * `ask` (decided on stdin).
 *
 * @since 0.1.0
 */
export const Approve = Schema.Literals(["all", "none", "ask"])
/** @since 0.1.0 */
export type Approve = typeof Approve.Type

/**
 * What the agent runs on; a session saves it in `run.json`.
 *
 * @since 0.1.0
 */
export const Target = Schema.Struct({
  provider: Provider,
  model: Schema.String,
  baseUrl: Schema.optionalKey(Schema.String),
  apiKeyEnv: Schema.optionalKey(Schema.String),
  script: Schema.optionalKey(Schema.String),
  workspace: Schema.String,
  sandbox: SandboxKind,
  tools: Schema.Array(Schema.String),
  mcp: Schema.Array(Schema.String),
  approve: Approve
})
/** @since 0.1.0 */
export type Target = typeof Target.Type

/**
 * The `run.json` of a session directory.
 *
 * @since 0.1.0
 */
export const SessionFile = Schema.Struct({ version: Schema.Literal(1), target: Target })

/** `run.json` as written: the session file and its seal (see `Seal`). */
const SessionFileSealed = Schema.Struct({ ...SessionFile.fields, seal: Schema.optionalKey(Schema.String) })

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
  /** The session directory (absolute), and whether it is resumed. */
  readonly session: { readonly dir: string; readonly resume: boolean } | undefined
  /** Where the events go as JSON lines: a file, `-` for stdout, or nowhere. */
  readonly emitJsonl: string | undefined
  readonly quiet: boolean
  readonly json: boolean
  readonly stdinEof: Control.OnEof
  /** Settings that were changed to fit (a limit clamped into its safe range). */
  readonly warnings: ReadonlyArray<string>
}

/**
 * The default model of each provider.
 *
 * @since 0.1.0
 */
export const defaultModels: Record<Provider, string> = {
  openai: "gpt-4o",
  "openai-responses": "gpt-5-mini",
  anthropic: "claude-sonnet-4-5",
  scripted: "scripted"
}

/**
 * The environment variable that sets each provider's API root when
 * `--base-url` is not given.
 *
 * @since 0.1.0
 */
export const baseUrlEnv: Record<Provider, string | undefined> = {
  openai: "OPENAI_BASE_URL",
  "openai-responses": "OPENAI_BASE_URL",
  anthropic: "ANTHROPIC_BASE_URL",
  scripted: undefined
}

/**
 * The environment variable each provider reads its API key from when
 * `--api-key-env` is not given.
 *
 * @since 0.1.0
 */
export const apiKeyEnv: Record<Provider, string | undefined> = {
  openai: "OPENAI_API_KEY",
  "openai-responses": "OPENAI_API_KEY",
  anthropic: "ANTHROPIC_API_KEY",
  scripted: undefined
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

/**
 * The names of the built-in tools.
 *
 * @since 0.1.0
 */
export const builtinTools: ReadonlyArray<string> = Object.keys(BuiltinTools.toolkit.tools)

const describe = <A>(flag: Flag.Flag<A>, text: string) => Flag.withDescription(flag, text)

/**
 * The flags of `effect-agent run`.
 *
 * @since 0.1.0
 */
export const flags = {
  task: describe(Flag.optional(Flag.String("task")), "The task (else read from stdin; with --resume, a follow-up)"),
  system: describe(Flag.optional(Flag.String("system")), "The system prompt"),
  provider: describe(
    Flag.optional(Flag.Literals("provider", Provider.literals)),
    "The model provider (default openai)"
  ),
  model: describe(
    Flag.optional(Flag.String("model")),
    `The model id (default ${defaultModels.openai}, ${defaultModels["openai-responses"]}, ${defaultModels.anthropic})`
  ),
  baseUrl: describe(
    Flag.optional(Flag.String("base-url")),
    "The API root, e.g. http://localhost:11434/v1 for a local OpenAI-compatible server"
  ),
  apiKeyEnv: describe(
    Flag.optional(Flag.String("api-key-env")),
    "The environment variable holding the API key (default OPENAI_API_KEY, ANTHROPIC_API_KEY)"
  ),
  script: describe(
    Flag.optional(Flag.String("script")),
    "The script file of --provider scripted (replies as JSON; see the README)"
  ),
  workspace: describe(Flag.optional(Flag.String("workspace")), "The directory the tools work in (default: here)"),
  sandbox: describe(
    Flag.optional(Flag.Literals("sandbox", SandboxKind.literals)),
    "Where commands run (default auto: bubblewrap where it works, else local)"
  ),
  tools: describe(
    Flag.optional(Flag.String("tools")),
    `Built-in tools: builtin (all), none, or names (${builtinTools.join(",")})`
  ),
  mcp: describe(Flag.atLeast(Flag.String("mcp"), 0), "An MCP server to start, as a command line (repeatable)"),
  maxTurns: describe(Flag.optional(Flag.Int("max-turns")), "Model calls at most (1-200, default 50)"),
  maxTokens: describe(Flag.optional(Flag.Int("max-tokens")), "Token budget (input and output)"),
  maxCost: describe(Flag.optional(Flag.Finite("max-cost")), "Cost budget in US dollars"),
  maxWall: describe(Flag.optional(Flag.String("max-wall")), "Wall-clock budget: 90 (seconds), 90s, 5m, 2h"),
  approve: describe(
    Flag.optional(Flag.Literals("approve", Approve.literals)),
    "Calls that need approval (bash, write_file, edit_file, MCP tools): all, none (default), ask (decided on stdin)"
  ),
  sessionDir: describe(
    Flag.optional(Flag.String("session-dir")),
    "Save a checkpoint and the trajectory in this directory (outside the workspace), to resume later"
  ),
  resume: describe(Flag.optional(Flag.String("resume")), "Resume the session saved in this directory"),
  emitJsonl: describe(
    Flag.optional(Flag.String("emit-jsonl")),
    "Write every event as a JSON line to this file, or - for stdout"
  ),
  quiet: describe(Flag.withDefault(Flag.Boolean("quiet"), false), "Show no progress on stderr"),
  json: describe(Flag.withDefault(Flag.Boolean("json"), false), "Print the result as one JSON object on stdout"),
  stdinEof: describe(
    Flag.withDefault(Flag.Literals("stdin-eof", Control.OnEof.literals), "ignore"),
    "What the end of stdin does to the run (default ignore)"
  )
}

/**
 * The flags of `effect-agent run`, as parsed.
 *
 * @since 0.1.0
 */
export type Flags = Command.Command.Config.Infer<typeof flags>

const invalid = (message: string) => new Failure({ code: codes.configError, message })

const orUndefined = Option.getOrUndefined

// -----------------------------------------------------------------------------
// Limits
// -----------------------------------------------------------------------------

const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/**
 * A duration flag in milliseconds: `90` (seconds), `1500ms`, `90s`, `5m`,
 * `2h`. (`Duration.Input` takes typed template strings, not a flag's text.)
 *
 * @since 0.1.0
 */
export const parseDuration = (text: string): number | undefined => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text)
  if (match === null) return undefined
  return Number(match[1]) * units[match[2] ?? "s"]!
}

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

const { budgets: budgetRanges, maxTurns: turnRange } = AgentConfig.untrustedRanges

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
    ? invalid(`${flag}: ${shown ?? given.value} is not a limit a run can have; give ${rangeText[flag]}`)
    : Effect.void

/** The config from the limit flags, through `AgentConfig.fromUntrusted`; only the given settings when resuming. */
const limits = (flags: Flags, resume: boolean) =>
  Effect.gen(function*() {
    const wall = Option.map(flags.maxWall, (text) => ({ text, ms: parseDuration(text) }))
    if (Option.isSome(wall) && wall.value.ms === undefined) {
      return yield* invalid(`--max-wall: ${JSON.stringify(wall.value.text)} is not a duration (e.g. 90, 90s, 5m, 2h)`)
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
    const config = yield* Effect.mapError(AgentConfig.fromUntrusted(input), (error) =>
      invalid(`${flagOfField[error.field] ?? error.field}: ${error.rule}`))
    const given: Array<Limit> = []
    if (input.maxTurns !== undefined) given.push({ flag: "--max-turns", given: input.maxTurns, read: (c) => c.maxTurns })
    if (budgets.tokens !== undefined) given.push({ flag: "--max-tokens", given: budgets.tokens, read: (c) => c.budgets.tokens })
    if (budgets.costUsd !== undefined) given.push({ flag: "--max-cost", given: budgets.costUsd, read: (c) => c.budgets.costUsd })
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

/**
 * The argument vector of an `--mcp` command line (quotes group words).
 *
 * @since 0.1.0
 */
export const mcpArgv = (command: string): Result.Result<readonly [string, ...Array<string>], string> => {
  // CommandLine.template splits a template's text the way a shell splits words; here the text is the flag's value.
  const words = CommandLine.template(Object.assign([command], { raw: [command] }))
  if (Result.isFailure(words)) return Result.fail(words.failure.message)
  const argv = words.success.filter((word): word is string => typeof word === "string")
  const [program, ...args] = argv
  return program === undefined ? Result.fail("the command is empty") : Result.succeed([program, ...args])
}

const parseTools = (text: string): Result.Result<ReadonlyArray<string>, string> => {
  const names = text.split(",").map((name) => name.trim()).filter((name) => name !== "")
  if (names.length === 1 && names[0] === "none") return Result.succeed([])
  const out = new Set<string>()
  for (const name of names) {
    if (name === "builtin") builtinTools.forEach((tool) => out.add(tool))
    else if (builtinTools.includes(name)) out.add(name)
    else return Result.fail(`unknown tool ${JSON.stringify(name)} (expected builtin, none, or some of ${builtinTools.join(", ")})`)
  }
  return Result.succeed(Array.from(out))
}

const checkUrl = (url: string): boolean => {
  try {
    const parsed = new URL(url)
    return parsed.protocol === "http:" || parsed.protocol === "https:"
  } catch {
    return false
  }
}

interface Widening {
  readonly flag: "workspace" | "sandbox" | "approve" | "mcp" | "baseUrl" | "apiKeyEnv"
  readonly text: string
}

/**
 * What a target lets the agent (or the command) do past the defaults, as the
 * flags that ask for it: another workspace than the working directory, the
 * local sandbox, every call approved, MCP servers, another API root than the
 * provider's variable gives, another key variable.
 */
const widening = (target: Target, options: Environment, path: Path.Path): ReadonlyArray<Widening> => {
  const out: Array<Widening> = []
  if (target.workspace !== path.resolve(options.cwd)) {
    out.push({ flag: "workspace", text: `--workspace ${target.workspace}` })
  }
  if (target.sandbox === "local") out.push({ flag: "sandbox", text: "--sandbox local" })
  if (target.approve === "all") out.push({ flag: "approve", text: "--approve all" })
  for (const command of target.mcp) out.push({ flag: "mcp", text: `--mcp ${JSON.stringify(command)}` })
  const envVar = baseUrlEnv[target.provider]
  const fromEnv = envVar === undefined || options.env[envVar] === "" ? undefined : options.env[envVar]
  if (target.baseUrl !== undefined && target.baseUrl !== fromEnv) {
    out.push({ flag: "baseUrl", text: `--base-url ${target.baseUrl}` })
  }
  if (target.apiKeyEnv !== undefined) out.push({ flag: "apiKeyEnv", text: `--api-key-env ${target.apiKeyEnv}` })
  return out
}

/**
 * The command that resumes the session in `dir` run on `target`: `--resume`
 * with the flags a resumed run must be given again (see the module
 * documentation).
 *
 * @since 0.1.0
 */
export const resumeCommand = (dir: string, target: Target, options: Environment, path: Path.Path): string =>
  ["effect-agent run --resume", dir, ...widening(target, options, path).map((item) => item.text)].join(" ")

/** The target from the flags over a base (the defaults, or a session's `run.json`). */
const target = (flags: Flags, base: Target | undefined, options: Environment, path: Path.Path) =>
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
        onFailure: (problem) => Effect.fail(invalid(`--tools: ${problem}`)),
        onSuccess: Effect.succeed
      })
    const mcp = flags.mcp.length > 0 ? flags.mcp : base?.mcp ?? []
    const approve = orUndefined(flags.approve) ?? base?.approve ?? "none"

    if (provider === "scripted" && script === undefined) {
      return yield* invalid("--provider scripted needs --script FILE (the replies, as JSON)")
    }
    if (provider !== "scripted" && scriptFlag !== undefined) return yield* invalid("--script is for --provider scripted")
    if (baseUrl !== undefined && !checkUrl(baseUrl)) {
      return yield* invalid(`--base-url: ${JSON.stringify(baseUrl)} is not an http(s) URL`)
    }
    if (apiKeyEnv !== undefined && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(apiKeyEnv)) {
      return yield* invalid(`--api-key-env: ${JSON.stringify(apiKeyEnv)} is not an environment variable name`)
    }
    if (sandbox === "none" && tools.length > 0) {
      return yield* invalid("--sandbox none leaves no sandbox for the built-in tools: add --tools none, or choose a sandbox")
    }
    for (const command of mcp) {
      const argv = mcpArgv(command)
      if (Result.isFailure(argv)) return yield* invalid(`--mcp ${JSON.stringify(command)}: ${argv.failure}`)
    }
    if (base !== undefined) {
      // What widens the agent's reach past the defaults comes from the flags, never from the session directory.
      const given: Record<Widening["flag"], boolean> = {
        workspace: Option.isSome(flags.workspace),
        sandbox: Option.isSome(flags.sandbox),
        approve: Option.isSome(flags.approve),
        mcp: flags.mcp.length > 0,
        baseUrl: Option.isSome(flags.baseUrl) || !sameProvider,
        apiKeyEnv: Option.isSome(flags.apiKeyEnv)
      }
      const confirm = widening(base, options, path).filter((item) => !given[item.flag]).map((item) => item.text)
      if (confirm.length > 0) {
        return yield* invalid(
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
      tools,
      mcp,
      approve
    }
    return result
  })

// -----------------------------------------------------------------------------
// Session files
// -----------------------------------------------------------------------------

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

const resumeFailure = (message: string) => new Failure({ code: codes.resumeFailure, message })

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

const readSessionFile = (dir: string, env: Environment["env"]) =>
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
    if (!Seal.verify(key, sealedText({ version: saved.version, target: saved.target }), saved.seal)) {
      return yield* resumeFailure(
        `${file} was changed after the session was written (its seal does not match): it is not trusted ` +
          `(a session sealed with another key than ${Seal.keyPath(path, env)} is not resumed either)`
      )
    }
    return saved.target
  })

/**
 * Writes a new session's `run.json` (creating the directory), sealed with
 * the key of `Seal` (found through `env`). The file is created exclusively:
 * the command fails when the directory already holds a session, and never
 * writes through a link planted at its name.
 *
 * @since 0.1.0
 */
export const writeSessionFile = (dir: string, target: Target, env: Environment["env"]) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const file = sessionPaths(path, dir).settings
    const ioError = (error: { readonly message: string }) =>
      new Failure({ code: codes.configError, message: `--session-dir: cannot write ${file}: ${error.message}` })
    const key = yield* Effect.mapError(Seal.key(env), ioError)
    yield* Effect.mapError(fs.makeDirectory(dir, { recursive: true }), ioError)
    const content = { version: 1 as const, target }
    const sealed = { ...Schema.encodeSync(SessionFile)(content), seal: Seal.sign(key, sealedText(content)) }
    yield* fs.writeFileString(file, JSON.stringify(sealed, null, 2) + "\n", { flag: "wx" }).pipe(
      Effect.mapError((error) =>
        error.reason._tag === "AlreadyExists"
          ? invalid(`--session-dir: ${dir} already holds a session: resume it with --resume ${dir}, or choose another directory`)
          : ioError(error)
      )
    )
  })

// -----------------------------------------------------------------------------
// Where a session may be
// -----------------------------------------------------------------------------

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

/** Whether the agent has anything that can write in its workspace: built-in tools, or MCP servers (run there). */
const touchesWorkspace = (target: Target) => target.tools.length > 0 || target.mcp.length > 0

/**
 * Refuses a session directory that overlaps the workspace (inside it, or
 * holding it), compared as given and on real paths (links resolved): the
 * agent can write its workspace, and the host trusts what the session
 * directory holds.
 */
const checkPlacement = (flag: string, dir: string, target: Target) =>
  Effect.gen(function*() {
    if (!touchesWorkspace(target)) return
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dirs = [dir, yield* realPathOf(fs, path, dir)]
    const spaces = [target.workspace, yield* realPathOf(fs, path, target.workspace)]
    for (const d of dirs) {
      for (const w of spaces) {
        if (isWithin(path, d, w) || isWithin(path, w, d)) {
          return yield* invalid(
            `${flag}: ${dir} ${isWithin(path, d, w) ? "is inside" : "holds"} the workspace ${target.workspace}, ` +
              "where the agent can write: keep sessions outside it (e.g. ~/.local/state/effect-agent/sessions/NAME)"
          )
        }
      }
    }
  })

/**
 * Refuses a session directory whose parts are links or special files: the
 * command writes them, and does not write through a link.
 */
const checkEntries = (dir: string, fail: (message: string) => Failure) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const paths = sessionPaths(path, dir)
    const kind = (file: string) =>
      Effect.map(Effect.option(fs.lstat(file)), Option.map((info) => info.type))
    const expect = (file: string, type: "File" | "Directory") =>
      Effect.flatMap(kind(file), (found) => {
        if (Option.isNone(found) || found.value === type) return Effect.void
        const what = found.value === "SymbolicLink" ? "a symbolic link" : `not a ${type === "File" ? "regular file" : "directory"}`
        return Effect.fail(fail(`${file} is ${what}: the command does not write through it`))
      })
    yield* expect(paths.settings, "File")
    yield* expect(paths.trajectory, "File")
    const store = path.join(paths.store, sessionId)
    yield* expect(store, "Directory")
    const entries = yield* Effect.orElseSucceed(fs.readDirectory(store), () => [])
    for (const entry of entries) yield* expect(path.join(store, entry), "File")
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
export interface Environment {
  readonly cwd: string
  readonly env: Readonly<Record<string, string | undefined>>
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
      return yield* invalid("--resume DIR continues the session in DIR: leave out --session-dir")
    }
    const resume = Option.isSome(resumeDir)
    if (resume && Option.isSome(flags.system)) return yield* invalid("--system: a resumed session keeps its system prompt")
    const task = orUndefined(flags.task)
    if (task !== undefined && task.trim() === "") return yield* invalid("--task is empty")
    const taskFromStdin = task === undefined && !resume
    if (taskFromStdin && options.stdinIsTerminal) {
      return yield* invalid("no task: give --task TEXT, or pipe the task on stdin")
    }
    const base = resume ? yield* readSessionFile(resumeDir.value, options.env) : undefined
    const resolved = yield* target(flags, base, options, path)
    if (Option.isSome(resumeDir)) {
      yield* checkPlacement("--resume", resumeDir.value, resolved)
      yield* checkEntries(resumeDir.value, resumeFailure)
    } else if (Option.isSome(sessionDir)) {
      yield* checkPlacement("--session-dir", sessionDir.value, resolved)
      yield* checkEntries(sessionDir.value, invalid)
    }
    if (taskFromStdin && resolved.approve === "ask") {
      return yield* invalid("--approve ask reads decisions on stdin: give the task with --task")
    }
    if (taskFromStdin && flags.stdinEof === "cancel") {
      return yield* invalid("--stdin-eof cancel watches the control input on stdin: give the task with --task")
    }
    const emitJsonl = orUndefined(flags.emitJsonl)
    if (emitJsonl === "-" && flags.json) return yield* invalid("--emit-jsonl - and --json both want stdout: give --emit-jsonl a file")
    const { config, warnings } = yield* limits(flags, resume)
    const key = apiKey(resolved, options.env)
    if (Result.isFailure(key)) return yield* invalid(key.failure)
    const dir = Option.isSome(resumeDir) ? resumeDir : sessionDir
    const settings: Settings = {
      target: resolved,
      apiKey: key.success,
      task,
      system: orUndefined(flags.system),
      config,
      session: Option.isSome(dir) ? { dir: dir.value, resume } : undefined,
      emitJsonl: emitJsonl === undefined || emitJsonl === "-" ? emitJsonl : path.resolve(options.cwd, emitJsonl),
      quiet: flags.quiet,
      json: flags.json,
      stdinEof: flags.stdinEof,
      warnings
    }
    return settings
  })
