/**
 * The flags of `effect-agent run`, `serve` and `runner`, on `effect/cli`,
 * and the parsers of the values they take that `effect/cli` does not parse:
 * durations, MCP command lines and tool lists. What the flags mean together
 * is `Settings`'s. It loads no more than `effect/cli` and the names the flags
 * take (see `Target`), so that the help is shown without loading a run.
 *
 * @since 0.1.0
 */
// effect's modules one by one: the command's start loads this (see Commands).
import { type Command, Flag } from "effect/cli"
import * as CommandLine from "effect/process/CommandLine"
import * as Result from "effect/Result"
import type * as Control from "../../protocol/Control.ts"
import type * as AgentServer from "../../server/AgentServer.ts"
import { Approve, builtinTools, defaultModels, Provider, SandboxKind } from "./Target.ts"

const describe = <A>(flag: Flag.Flag<A>, text: string) => Flag.withDescription(flag, text)

/** A value of `Control.OnEof` missing from the list (`never`: none). */
type OnEofUnlisted = Exclude<Control.OnEof, "ignore" | "cancel">

/**
 * The values of `--stdin-eof`: `Control.OnEof`'s, written out so that the
 * help does not load the control protocol (the compiler checks the list
 * against it both ways).
 */
const onEof: readonly ["ignore", "cancel"] & ([OnEofUnlisted] extends [never] ? unknown : { readonly unlisted: OnEofUnlisted }) = [
  "ignore",
  "cancel"
] as const satisfies ReadonlyArray<Control.OnEof>

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
    "The model's replies for --provider scripted, a JSON file {\"turns\": [turn, …]}, one turn a model call; a turn " +
      "has text, reasoning, toolCalls [{name, params, id}], usage {input, output, cacheRead, cacheWrite, reasoning, " +
      "cost}, delay (ms), fail (a provider failure) or hang (see EXAMPLES; examples/scripted-run.json in the repository)"
  ),
  workspace: describe(Flag.optional(Flag.String("workspace")), "The directory the tools work in (default: here)"),
  sandbox: describe(
    Flag.optional(Flag.Literals("sandbox", SandboxKind.literals)),
    "Where commands run (default auto: bubblewrap where it works, else local)"
  ),
  allowRead: describe(
    Flag.atLeast(Flag.String("allow-read"), 0),
    "A host path bubblewrap's commands may read, beyond the workspace and the system's directories (repeatable)"
  ),
  allowWrite: describe(
    Flag.atLeast(Flag.String("allow-write"), 0),
    "A host path bubblewrap's commands may read and write, beyond the workspace (repeatable)"
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
  pg: describe(
    Flag.optional(Flag.String("pg")),
    "Submit the session to the runners of a cluster on this PostgreSQL URL and follow it (see effect-agent runner)"
  ),
  sessionId: describe(
    Flag.optional(Flag.String("session-id")),
    "With --pg: the session's id (default: a new one); submitting it again follows the session that has it"
  ),
  emitJsonl: describe(
    Flag.optional(Flag.String("emit-jsonl")),
    "Write every event as a JSON line to this file, or - for stdout"
  ),
  jsonlFormat: describe(
    Flag.withDefault(Flag.Literals("jsonl-format", ["events", "ynh"]), "events"),
    "The lines of --emit-jsonl: events (ours, the default) or ynh ({timestamp, type, turn, data}, as ynh agent run)"
  ),
  otlp: describe(
    Flag.optional(Flag.String("otlp")),
    "Export the run's traces over OTLP/HTTP (JSON) to this collector: http://host:4318 or its /v1/traces URL"
  ),
  quiet: describe(Flag.withDefault(Flag.Boolean("quiet"), false), "Show no progress on stderr"),
  json: describe(Flag.withDefault(Flag.Boolean("json"), false), "Print the result as one JSON object on stdout"),
  check: describe(
    Flag.atLeast(Flag.String("check"), 0),
    "A check: a shell command run in the sandbox after each turn, exit 0 passes (repeatable; a supervised run)"
  ),
  verifier: describe(Flag.optional(Flag.String("verifier")), "A final check, consulted once every --check passes"),
  plan: describe(
    Flag.withDefault(Flag.Boolean("plan"), false),
    "Ask for a plan first, with the work tools withheld (decided on stdin with --approve ask)"
  ),
  maxPlanIterations: describe(
    Flag.optional(Flag.Int("max-plan-iterations")),
    "Plans proposed at most before the run ends (default 5)"
  ),
  tolerateKnownFailures: describe(
    Flag.withDefault(Flag.Boolean("tolerate-known-failures"), false),
    "Converge when the only failing checks fail as they did before the run (ends Tolerated, exit 0)"
  ),
  approveTurns: describe(
    Flag.withDefault(Flag.Boolean("approve-turns"), false),
    "Ask on stdin before each feedback goes to the worker (approve_turn, replace_feedback)"
  ),
  worker: describe(
    Flag.optional(Flag.Literals("worker", ["agent", "claude", "codex", "cursor", "acp"])),
    "Who does the work of a supervised run: agent (this loop, the default), claude, codex, cursor, or acp (an agent that speaks the Agent Client Protocol: --worker-command)"
  ),
  workerCommand: describe(
    Flag.optional(Flag.String("worker-command")),
    "With --worker acp: the agent to run, its program and arguments (split at spaces; quotes group), given again on --resume"
  ),
  stdinEof: describe(
    Flag.withDefault(Flag.Literals("stdin-eof", onEof), "ignore"),
    "What the end of stdin does to the run (default ignore)"
  )
}

/**
 * The flags of `effect-agent run`, as parsed.
 *
 * @since 0.1.0
 */
export type Flags = Command.Command.Config.Infer<typeof flags>

// -----------------------------------------------------------------------------
// serve
// -----------------------------------------------------------------------------

/**
 * The server's defaults that `serve`'s flags show: `AgentServer.defaults`
 * (the compiler checks they are the same), written out so that the help
 * does not load the server.
 */
const serverDefaults = { maxRunning: 32, maxStreams: 256, maxStreamsPerSession: 16 } as const satisfies Pick<
  typeof AgentServer.defaults,
  "maxRunning" | "maxStreams" | "maxStreamsPerSession"
>

// `run`'s flags but those about one run (its task, session, outputs and stdin), those of a supervised run (the
// server runs none: given, they would be ignored, so they are not taken), and --quiet (it shows no progress).
const serveTaken = ({
  task: _task,
  resume: _resume,
  sessionDir: _sessionDir,
  emitJsonl: _emitJsonl,
  jsonlFormat: _jsonlFormat,
  json: _json,
  stdinEof: _stdinEof,
  pg: _pg,
  sessionId: _sessionId,
  quiet: _quiet,
  check: _check,
  verifier: _verifier,
  plan: _plan,
  maxPlanIterations: _maxPlanIterations,
  approveTurns: _approveTurns,
  tolerateKnownFailures: _tolerateKnownFailures,
  worker: _worker,
  workerCommand: _workerCommand,
  ...runFlags
}: typeof flags) => runFlags

/**
 * The flags of `effect-agent serve`: where it listens, its token and store,
 * and those of `run` that choose the model, the tools and the limits.
 *
 * @since 0.1.0
 */
export const serveFlags = {
  ...serveTaken(flags),
  approve: describe(
    Flag.optional(Flag.Literals("approve", Approve.literals)),
    "Calls that need approval: ask (default: decided over HTTP, POST /sessions/:id/control), all, none"
  ),
  port: describe(Flag.withDefault(Flag.Int("port"), 8080), "The port to listen on (default 8080; 0: any free port)"),
  host: describe(Flag.withDefault(Flag.String("host"), "127.0.0.1"), "The address to listen on (default 127.0.0.1)"),
  tokenEnv: describe(
    Flag.optional(Flag.String("token-env")),
    "The environment variable holding the token every request must carry (default: a random one, printed once)"
  ),
  withoutToken: describe(
    Flag.withDefault(Flag.Boolean("without-token"), false),
    "Serve without a token (loopback only): any program on this machine can then run agents and approve their calls"
  ),
  allowOrigin: describe(
    Flag.atLeast(Flag.String("allow-origin"), 0),
    "An origin whose web pages may call the server, e.g. http://localhost:3000 (repeatable; with CORS)"
  ),
  store: describe(
    Flag.optional(Flag.String("store")),
    "Where sessions are kept (default ~/.local/state/effect-agent/server; outside the workspace)"
  ),
  maxRunning: describe(
    Flag.withDefault(Flag.Int("max-running"), serverDefaults.maxRunning),
    `Sessions running at once (default ${serverDefaults.maxRunning}): starting one more is a 429`
  ),
  maxStreams: describe(
    Flag.withDefault(Flag.Int("max-streams"), serverDefaults.maxStreams),
    `Events streams open at once (default ${serverDefaults.maxStreams}, ` +
      `${serverDefaults.maxStreamsPerSession} to a session): one more is a 429`
  )
}

/**
 * The flags of `effect-agent serve`, as parsed.
 *
 * @since 0.1.0
 */
export type ServeFlags = {
  readonly [K in keyof typeof serveFlags]: typeof serveFlags[K] extends Flag.Flag<infer A> ? A : never
}

// -----------------------------------------------------------------------------
// runner
// -----------------------------------------------------------------------------

// `run`'s flags that choose the model and the tools (a session's task, prompt and limits are the client's). Not
// those of a supervised run (a runner runs none), nor --quiet (it shows no progress) or --otlp (it exports no
// traces): a flag a runner would ignore is not taken, so that giving it is an error (exit 22), not a silent no-op.
const runnerTaken = ({
  task: _task,
  system: _system,
  resume: _resume,
  sessionDir: _sessionDir,
  emitJsonl: _emitJsonl,
  jsonlFormat: _jsonlFormat,
  json: _json,
  stdinEof: _stdinEof,
  maxTurns: _maxTurns,
  maxTokens: _maxTokens,
  maxCost: _maxCost,
  maxWall: _maxWall,
  pg: _pg,
  sessionId: _sessionId,
  quiet: _quiet,
  otlp: _otlp,
  check: _check,
  verifier: _verifier,
  plan: _plan,
  maxPlanIterations: _maxPlanIterations,
  approveTurns: _approveTurns,
  tolerateKnownFailures: _tolerateKnownFailures,
  worker: _worker,
  workerCommand: _workerCommand,
  approve: _approve,
  ...modelFlags
}: typeof flags) => modelFlags

/**
 * The flags of `effect-agent runner`.
 *
 * @since 0.1.0
 */
export const runnerFlags = {
  ...runnerTaken(flags),
  approve: describe(
    Flag.optional(Flag.Literals("approve", Approve.literals)),
    "Calls that need approval: ask (default: each waits for DurableSession.approve, from any process), all, none"
  ),
  pg: describe(Flag.String("pg"), "The PostgreSQL URL the cluster keeps its sessions in"),
  port: describe(Flag.withDefault(Flag.Int("port"), 34431), "The port runners reach this one on (default 34431)"),
  host: describe(
    Flag.withDefault(Flag.String("host"), "127.0.0.1"),
    "The address other runners reach this one at (default 127.0.0.1)"
  )
}

/**
 * The flags of `effect-agent runner`, as parsed.
 *
 * @since 0.1.0
 */
export type RunnerFlags = {
  readonly [K in keyof typeof runnerFlags]: typeof runnerFlags[K] extends Flag.Flag<infer A> ? A : never
}

// -----------------------------------------------------------------------------
// Values
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

/**
 * The tools of a `--tools` value: `builtin` (all of them), `none`, or names
 * of built-in tools, separated by commas.
 *
 * @since 0.1.0
 */
export const parseTools = (text: string): Result.Result<ReadonlyArray<string>, string> => {
  const names = text.split(",").map((name) => name.trim()).filter((name) => name !== "")
  if (names.length === 1 && names[0] === "none") return Result.succeed([])
  const out = new Set<string>()
  for (const name of names) {
    if (name === "builtin") builtinTools.forEach((tool) => out.add(tool))
    else if (builtinTools.includes(name)) out.add(name)
    else {
      const expected = `builtin, none, or some of ${builtinTools.join(", ")}`
      return Result.fail(`unknown tool ${JSON.stringify(name)} (expected ${expected})`)
    }
  }
  return Result.succeed(Array.from(out))
}
