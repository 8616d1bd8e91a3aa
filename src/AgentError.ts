/**
 * The failures that end a run: the loop cannot go on. Everything the loop
 * chose to stop on (a turn cap, a budget, a stuck model, a cancel) is an
 * outcome, not an error. Each error is a `Schema.TaggedError`, so it can be
 * caught by tag, persisted and sent over the wire.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import * as AiError from "effect/ai/AiError"
import { RunState } from "./RunState.ts"

/**
 * The model transport failed (after the provider's own retries): it wraps the
 * provider's `AiError` reason.
 *
 * When a run fails with it, `state` holds the run's state at the failure:
 * the transcript with every open call answered, and the steering and
 * follow-ups not yet delivered. Nothing queued is lost: continue it with
 * `Agent.runContinue(error.state)` once the model is reachable again.
 *
 * @since 0.1.0
 * @category errors
 */
export class ModelError extends Schema.TaggedError<ModelError>()("ModelError", {
  reason: AiError.AiErrorReason,
  turn: Schema.Finite,
  state: Schema.optionalKey(RunState)
}) {
  /**
   * Wraps an `AiError` raised at a turn.
   *
   * @since 0.1.0
   */
  static fromAiError(error: AiError.AiError, turn: number): ModelError {
    return new ModelError({ reason: error.reason, turn })
  }
  override get message(): string {
    return `model call failed at turn ${this.turn}: ${this.reason.message}`
  }
}

/**
 * A tool failed in a way declared fatal: its handler failed and the tool is
 * annotated `fatal: true` (`AgentTool.annotate`), or the handler failed or
 * died with `AgentTool.FatalFailure`; or, with `ToolRegistry.FailOnDefect`
 * on (in tests), the tool had a defect (`defect` says what it was). Every
 * other failure of a tool is an error result the model reads, whatever the
 * tool's `failureMode`.
 *
 * `error` holds the failure as JSON, encoded with the tool's failure Schema
 * when it can be (the failure in words otherwise): `AgentTool.fatalError`
 * decodes it back to the tool's typed failure, and `AgentTool.unwrapFatal`
 * puts that failure in the error channel, where `Effect.catchTag` finds it.
 * Like {@link ModelError}, it carries the run's `state` when a run fails
 * with it (the fatal call answered with its failure).
 *
 * @since 0.1.0
 * @category errors
 */
export class ToolFatalError extends Schema.TaggedError<ToolFatalError>()("ToolFatalError", {
  toolName: Schema.String,
  toolCallId: Schema.String,
  description: Schema.String,
  error: Schema.optionalKey(Schema.Unknown),
  defect: Schema.optionalKey(Schema.String),
  state: Schema.optionalKey(RunState)
}) {
  override get message(): string {
    return this.defect === undefined
      ? `tool ${this.toolName} (${this.toolCallId}) failed fatally: ${this.description}`
      : `tool ${this.toolName} (${this.toolCallId}) had a defect: ${this.defect}`
  }
}

/**
 * A config broke a rule: `field` names the setting (`budgets.costUsd`),
 * `rule` says what it must be, and `range` gives the allowed range when the
 * setting came from untrusted input (`UntrustedConfig.decode`, `effect-agent/protocol`).
 *
 * @since 0.1.0
 * @category errors
 */
export class ConfigError extends Schema.TaggedError<ConfigError>()("ConfigError", {
  field: Schema.String,
  rule: Schema.String,
  range: Schema.optionalKey(Schema.Struct({ min: Schema.Finite, max: Schema.Finite }))
}) {
  override get message(): string {
    return `invalid config: ${this.field}: ${this.rule}`
  }
}

/**
 * `runContinue` was given a state that cannot be continued.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidContinuation extends Schema.TaggedError<InvalidContinuation>()("InvalidContinuation", {
  reason: Schema.String
}) {
  override get message(): string {
    return `cannot continue the run: ${this.reason}`
  }
}

/**
 * A plugin's saved state cannot be restored (a plugin's `state.restore`
 * refused it): a continued run would misbehave with it. A session reports it
 * as its checkpoint being corrupt.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidPluginState extends Schema.TaggedError<InvalidPluginState>()("InvalidPluginState", {
  plugin: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `the saved state of plugin ${this.plugin} cannot be restored: ${this.reason}`
  }
}

/**
 * A run asked for a typed output with a Schema other than the one its state
 * was started with (or with none, or with one where it had none): the saved
 * final answer, and the model's attempts so far, are for another shape. The
 * Schemas are named by their identity (`Output.identity`).
 *
 * @since 0.1.0
 * @category errors
 */
export class OutputSchemaMismatch extends Schema.TaggedError<OutputSchemaMismatch>()("OutputSchemaMismatch", {
  saved: Schema.NullOr(Schema.String),
  given: Schema.NullOr(Schema.String)
}) {
  override get message(): string {
    const name = (identity: string | null) => identity === null ? "no output Schema" : `output Schema ${identity}`
    return `cannot continue the run: it was started with ${name(this.saved)}, and is continued with ${
      name(this.given)
    }`
  }
}

/**
 * Any failure of a run.
 *
 * @since 0.1.0
 * @category schemas
 */
export const AgentError = Schema.Union([
  ModelError,
  ToolFatalError,
  ConfigError,
  InvalidContinuation,
  InvalidPluginState,
  OutputSchemaMismatch
])
/**
 * @since 0.1.0
 * @category models
 */
export type AgentError = typeof AgentError.Type
