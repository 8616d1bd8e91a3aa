/**
 * What the agent of `effect-agent run` runs on: the provider and model, the
 * API root and the name of the key's variable (never a key), the workspace,
 * the sandbox and the host paths it grants, the built-in tools, MCP servers
 * and approvals. A session saves
 * it in its `run.json` (see `SessionFiles`). Also each provider's defaults.
 *
 * @since 0.1.0
 */
// effect's Schema alone: the command's start loads this (see Commands).
import * as Schema from "effect/Schema"
import type * as BuiltinTools from "../../sandbox/BuiltinTools.ts"

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
  /** Host paths bubblewrap's commands may read (`--allow-read`), absolute. */
  allowRead: Schema.optionalKey(Schema.Array(Schema.String)),
  /** Host paths bubblewrap's commands may read and write (`--allow-write`), absolute. */
  allowWrite: Schema.optionalKey(Schema.Array(Schema.String)),
  tools: Schema.Array(Schema.String),
  mcp: Schema.Array(Schema.String),
  approve: Approve
})
/** @since 0.1.0 */
export type Target = typeof Target.Type

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

/** A built-in tool's name. */
type BuiltinTool = keyof typeof BuiltinTools.toolkit.tools

const builtinToolNames = ["bash", "read_file", "write_file", "edit_file", "list_files", "grep"] as const satisfies
  ReadonlyArray<BuiltinTool>

/** A tool of the toolkit missing from the list (`never`: none). */
type Unlisted = Exclude<BuiltinTool, typeof builtinToolNames[number]>

/**
 * The names of the built-in tools, in the toolkit's order: written out, so
 * that the command's help names them without loading the tools. The
 * compiler checks the list against the toolkit both ways: a name that is no
 * tool, or a tool left out ("Property 'unlisted' is missing"), is an error.
 *
 * @since 0.1.0
 */
export const builtinTools: ReadonlyArray<string> & ([Unlisted] extends [never] ? unknown : { readonly unlisted: Unlisted }) =
  builtinToolNames

/**
 * Who does the work of a supervised run: `agent` (this loop), or an external
 * coding-agent CLI, `claude`, `codex` or `cursor`, or `acp`: an agent that speaks
 * the Agent Client Protocol (`--worker-command`).
 *
 * @since 0.1.0
 */
export const WorkerKind = Schema.Literals(["agent", "claude", "codex", "cursor", "acp"])
/** @since 0.1.0 */
export type WorkerKind = typeof WorkerKind.Type

const Limit = Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0))

/**
 * How a supervised run is supervised (`--check`, `--verifier`, `--plan`,
 * `--max-plan-iterations`, `--approve-turns`, `--worker` and its limits); a
 * supervised session saves it in its `run.json` beside the `Target`.
 *
 * @since 0.1.0
 */
export const Supervision = Schema.Struct({
  checks: Schema.Array(Schema.String),
  verifier: Schema.optionalKey(Schema.String),
  plan: Schema.Boolean,
  maxPlanIterations: Schema.optionalKey(Schema.Int),
  approveTurns: Schema.Boolean,
  /** `--tolerate-known-failures` (absent in sessions saved before it: false). */
  tolerateKnownFailures: Schema.optionalKey(Schema.Boolean),
  worker: WorkerKind,
  maxTurns: Schema.optionalKey(Limit),
  maxTokens: Schema.optionalKey(Limit),
  maxCostUsd: Schema.optionalKey(Limit),
  maxWallMs: Schema.optionalKey(Limit)
})
/** @since 0.1.0 */
export type Supervision = typeof Supervision.Type
