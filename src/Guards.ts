/**
 * The guards that end a run before it runs away. Each is a plugin, installed
 * from the config by {@link fromConfig}, so an application can see it, switch
 * it off (set its limit to `null`, or `graceTurns` to 0) or replace it with
 * its own. Every guard ends a run with an outcome and a transcript in which
 * every tool call has its result, never with an exception.
 *
 * - {@link maxTurns}: the turn cap (`MaxTurns`).
 * - {@link gracefulTurnLimit}: asks the model to wrap up a few turns before the
 *   cap (`WrappedUp` when it then finishes in time).
 * - {@link budgets}: tokens, cost and wall clock (`BudgetExceeded`), with the
 *   same one-shot wrap-up request at `wrapUpAt` of any budget (the loop also
 *   reserves each model call's estimate against the config's token and cost
 *   budgets, see {@link budgets}).
 * - {@link loopDetector}: the same tool calls with the same results again and
 *   again: one warning, then `LoopDetected`.
 * - {@link stagnationDetector}: the same reply again and again (`Stagnated`).
 * - the context window transform (`ContextWindow.prune`).
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { AgentConfig } from "./AgentConfig.ts"
import { InvalidPluginState } from "./AgentError.ts"
import * as ContextWindow from "./ContextWindow.ts"
import * as Hooks from "./Hooks.ts"
import * as Message from "./Message.ts"
import * as Outcome from "./Outcome.ts"

/**
 * The answer of a guard with nothing to say, made once. The guards decide
 * when their hook is called rather than in an `Effect.suspend`: the loop runs
 * a hook's effect once, right after calling it, and reads a finished
 * `Proceed` without a fiber step (every turn, for every guard).
 */
const proceeding: Effect.Effect<Hooks.Control> = Effect.succeed(Hooks.proceed)

// -----------------------------------------------------------------------------
// Turn cap and wrap-up
// -----------------------------------------------------------------------------

/**
 * The turn cap: before a model call, once `limit` turns have completed, the
 * run ends with `MaxTurns`.
 *
 * @since 0.1.0
 * @category plugins
 */
export const maxTurns = (limit: number): Hooks.Plugin => ({
  name: "maxTurns",
  beforeModelCall: (ctx) =>
    ctx.turn < limit
      ? proceeding
      : Effect.as(
        ctx.emit({
          _tag: "GuardTripped",
          guard: "maxTurns",
          action: "stop",
          detail: `the run reached its cap of ${limit} turns`,
          figures: { turns: ctx.turn, limit }
        }),
        Hooks.stop(Outcome.maxTurns(limit))
      )
})

/**
 * Why the model is asked to wrap up: the turn limit, or a budget.
 *
 * @since 0.1.0
 * @category models
 */
export type WrapUpReason =
  | { readonly _tag: "Turns"; readonly turn: number; readonly maxTurns: number }
  | { readonly _tag: "Budget"; readonly budget: Outcome.Budget; readonly used: number; readonly limit: number }

/**
 * The default wrap-up request.
 *
 * @since 0.1.0
 * @category plugins
 */
export const wrapUpMessage = (reason: WrapUpReason): string =>
  (reason._tag === "Turns"
    ? `You have used ${reason.turn} of your ${reason.maxTurns} turns.`
    : `You have used ${Math.round((reason.used / reason.limit) * 100)}% of your ${reason.budget} budget.`) +
  " Stop calling work tools and deliver your final result now: summarise what you accomplished," +
  " what remains to be done, and any partial findings."

const requestWrapUp = (source: string, text: string): Effect.Effect<Hooks.Control> =>
  Effect.succeed(Hooks.wrapUp(source, text))

/**
 * The graceful turn limit's settings.
 *
 * @since 0.1.0
 * @category options
 */
export interface GracefulTurnLimitOptions {
  readonly maxTurns: number
  /**
   * Turns before the cap at which the model is asked to wrap up. Without `grace`, 0 or a window as wide as the
   * cap asks nothing (as the config's `graceTurns: 0` installs nothing, and as clark's constructor gives no plugin).
   */
  readonly graceTurns: number
  /** Gives the grace window at each poll (clamped to 1 … maxTurns − 1), e.g. to widen it as work in flight grows. */
  readonly grace?: ((info: Hooks.RunInfo) => number) | undefined
  /** The wrap-up request's wording. */
  readonly message?: ((reason: WrapUpReason) => string) | undefined
}

/**
 * The graceful turn limit, with its soft limit (the completed turns at which
 * the wrap-up request is delivered, for the static grace window; `maxTurns`
 * when it asks nothing).
 *
 * @since 0.1.0
 * @category models
 */
export interface GracefulTurnLimit extends Hooks.Plugin {
  readonly maxTurns: number
  readonly softLimit: number
}

const clamp = (value: number, min: number, max: number) => Math.min(max, Math.max(min, Math.floor(value)))

/**
 * Asks the model, once, to stop calling work tools and deliver its final
 * result when the completed turns reach `maxTurns - graceTurns`; the request
 * goes in before the next model call. If the run then ends by itself before
 * the cap, its outcome is `WrappedUp`; at the cap it is `MaxTurns` (the cap
 * itself is {@link maxTurns}).
 *
 * @example
 * ```ts
 * import { Guards } from "effect-agent"
 *
 * console.log(Guards.gracefulTurnLimit({ maxTurns: 50, graceTurns: 5 }).softLimit) // Output: 45
 * // a grace of 0 (or of the whole cap) asks nothing
 * console.log(Guards.gracefulTurnLimit({ maxTurns: 50, graceTurns: 0 }).softLimit) // Output: 50
 * ```
 *
 * @since 0.1.0
 * @category plugins
 */
export const gracefulTurnLimit = (options: GracefulTurnLimitOptions): GracefulTurnLimit => {
  if (options.grace === undefined && (options.graceTurns < 1 || options.graceTurns >= options.maxTurns)) {
    return { name: "gracefulTurnLimit", maxTurns: options.maxTurns, softLimit: options.maxTurns }
  }
  const window = (info: Hooks.RunInfo) =>
    clamp(options.grace === undefined ? options.graceTurns : options.grace(info), 1, options.maxTurns - 1)
  const text = options.message ?? wrapUpMessage
  return {
    name: "gracefulTurnLimit",
    maxTurns: options.maxTurns,
    softLimit: options.maxTurns - clamp(options.graceTurns, 1, options.maxTurns - 1),
    beforeModelCall: (ctx) =>
      ctx.wrapUpRequested || ctx.turn >= options.maxTurns || ctx.turn < options.maxTurns - window(ctx)
        ? proceeding
        : requestWrapUp("turns", text({ _tag: "Turns", turn: ctx.turn, maxTurns: options.maxTurns }))
  }
}

// -----------------------------------------------------------------------------
// Budgets
// -----------------------------------------------------------------------------

/**
 * The budgets' settings: limits (`null`: none) and the fraction at which the
 * model is asked to wrap up (`null`: never).
 *
 * @since 0.1.0
 * @category options
 */
export interface BudgetsOptions {
  readonly budgets: AgentConfig["budgets"]
  readonly wrapUpAt: number | null
  readonly message?: ((reason: WrapUpReason) => string) | undefined
}

const BUDGETS: ReadonlyArray<Outcome.Budget> = ["tokens", "inputTokens", "outputTokens", "costUsd", "wallClock"]

const usedOf = (budget: Outcome.Budget, info: Hooks.RunInfo): number =>
  budget === "wallClock" ? info.elapsedMs : Message.counted(budget, info.usage)

/**
 * Token, cost and wall-clock budgets, checked before each model call (so a
 * run, or a resumed run, never calls the model past a budget): an exhausted
 * budget ends the run with `BudgetExceeded { budget, limit, used }`. The
 * model is asked, once, to wrap up at `wrapUpAt` of any budget, or, for a
 * token or cost budget, when the call about to be made is likely the last
 * that fits it: when what is used plus twice the run's last call is over the
 * limit (`wrapUpAt: null`: never).
 *
 * The budgets of the config are also kept by the loop itself, whatever the
 * plugins: before each model call the call's estimate is reserved against
 * the token and cost budgets of the run and of every run above it (a
 * sub-agent's), and a call that does not fit beside what is spent and
 * reserved waits for room or, when none can come, ends the run
 * `BudgetExceeded` (see docs/concepts.md, Guards: Budgets).
 *
 * The wall clock is also a deadline the loop itself keeps, whatever the
 * plugins: when the config's `budgets.wallClock` runs out (counting the time
 * a continued run had used), the model stream, the tool calls in flight
 * (their finalizers run) and approval waits are stopped at once, every open
 * call is answered that the budget ran out, and the run ends with the same
 * outcome.
 *
 * @since 0.1.0
 * @category plugins
 */
export const budgets = (options: BudgetsOptions): Hooks.Plugin => {
  const active: Array<readonly [Outcome.Budget, number]> = []
  for (const budget of BUDGETS) {
    const limit = options.budgets[budget]
    if (limit !== null) active.push([budget, limit])
  }
  const text = options.message ?? wrapUpMessage
  return {
    name: "budgets",
    beforeModelCall: (ctx) => {
      for (const [budget, limit] of active) {
        const used = usedOf(budget, ctx)
        if (used >= limit) {
          return Effect.as(
            ctx.emit({
              _tag: "GuardTripped",
              guard: "budget",
              action: "stop",
              detail: `the ${budget} budget is exhausted: ${used} of ${limit}`,
              figures: { limit, used }
            }),
            Hooks.stop(Outcome.budgetExceeded(budget, limit, used))
          )
        }
      }
      if (options.wrapUpAt === null || ctx.wrapUpRequested) return proceeding
      // The run's last call: what its next is estimated at, for the token and cost budgets.
      const last = Message.lastCallUsage(ctx.messages)
      for (const [budget, limit] of active) {
        const used = usedOf(budget, ctx)
        const next = budget === "wallClock" || last === undefined ? 0 : Message.counted(budget, last)
        // At `wrapUpAt`, or when the call about to be made is likely the last that fits.
        if (used >= options.wrapUpAt * limit || used + 2 * next > limit) {
          return requestWrapUp(`budget:${budget}`, text({ _tag: "Budget", budget, used, limit }))
        }
      }
      return proceeding
    }
  }
}

// -----------------------------------------------------------------------------
// Stuck detection
// -----------------------------------------------------------------------------

/**
 * JSON with object keys sorted at every level, so equal values have equal text.
 *
 * @since 0.1.0
 * @category utils
 */
export const canonicalJson = (value: unknown): string => canonical(value) ?? "null"

const isIndex = (key: string): boolean => {
  // Most keys do not start with a digit: answered without the regular expression.
  const first = key.charCodeAt(0)
  return first >= 48 && first <= 57 && /^(?:0|[1-9]\d*)$/.test(key) && Number(key) < 4294967295
}

/**
 * Keys in the order an object built with sorted keys enumerates them: array
 * indices first, in numeric order (JavaScript puts them there), then the rest
 * sorted. `Object.keys` already gives the indices first and in order.
 */
const sortedKeys = (value: object): ReadonlyArray<string> => {
  const keys = Object.keys(value)
  let indices = 0
  while (indices < keys.length && isIndex(keys[indices]!)) indices++
  if (indices === 0) return keys.sort()
  return indices === keys.length ? keys : keys.slice(0, indices).concat(keys.slice(indices).sort())
}

// Written out rather than sorting a copy and stringifying it: this runs on every call of every turn
// (the loop detector), and the copy was most of its cost. `undefined` where JSON.stringify leaves a value out.
const canonical = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null) return JSON.stringify(value)
  if (Array.isArray(value)) {
    let out = "["
    for (let i = 0; i < value.length; i++) out += (i === 0 ? "" : ",") + (canonical(value[i]) ?? "null")
    return out + "]"
  }
  if ("toJSON" in value && typeof value.toJSON === "function") return canonical(value.toJSON())
  let out = "{"
  for (const key of sortedKeys(value)) {
    const text = canonical(Reflect.get(value, key))
    if (text === undefined) continue
    out += (out === "{" ? "" : ",") + JSON.stringify(key) + ":" + text
  }
  return out + "}"
}

/**
 * A batch's signature: its calls' names and canonical arguments, in any order.
 *
 * @since 0.1.0
 * @category utils
 */
export const batchSignature = (calls: ReadonlyArray<Message.ToolCallPart>): string =>
  calls.map((call) => `${call.name}${canonicalJson(call.params)}`).sort().join("|")

const resultsSignature = (turn: Hooks.Turn): string =>
  turn.toolResults.map((result) => `${result.toolName}:${result.isError}:${Message.textOf(result)}`).sort().join("|")

/**
 * Watches the transcript for new user messages, which reset the detectors. It
 * looks only at messages appended since its last look, and remembers how far
 * it got in the plugin's saved state, so a resumed run does not count the
 * old transcript again.
 */
class UserMessages {
  /** How many messages were looked at. */
  seen = 0
  /** Whether a user message was appended since the last call. */
  arrived(messages: ReadonlyArray<Message.Message>): boolean {
    let found = false
    for (let i = this.seen; i < messages.length; i++) if (messages[i]!.role === "user") found = true
    this.seen = messages.length
    return found
  }
}

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

/**
 * Decodes a detector's saved state, which comes from a checkpoint: it must
 * fit the Schema, and must not have looked at more messages than the
 * restored transcript has (it indexes the transcript from there).
 */
const restoreState = <S extends Schema.Decoder<{ readonly seen: number }>>(
  plugin: string,
  schema: S,
  saved: unknown,
  info: Hooks.RunInfo
): Effect.Effect<S["Type"], InvalidPluginState> =>
  Effect.flatMap(
    Effect.mapError(
      Schema.decodeUnknownEffect(schema)(saved),
      (error) => new InvalidPluginState({ plugin, reason: error.message })
    ),
    (state) =>
      state.seen <= info.messages.length ? Effect.succeed(state) : Effect.fail(
        new InvalidPluginState({
          plugin,
          reason: `it has looked at ${state.seen} messages; the transcript has ${info.messages.length}`
        })
      )
  )

const LoopState = Schema.Struct({
  signature: Schema.NullOr(Schema.String),
  results: Schema.NullOr(Schema.String),
  repeats: Count,
  warned: Schema.Boolean,
  seen: Count
})

/**
 * The default warning to a model that repeats itself.
 *
 * @since 0.1.0
 * @category utils
 */
export const loopWarning = (repeats: number): string =>
  `You have made the same tool calls with the same results ${repeats} times in a row. ` +
  "They will not give a different answer: change your approach, or deliver your result now."

/**
 * The loop detector: when the same batch (same calls, same arguments, in any
 * order) with the same results repeats consecutively more than
 * `maxRepeatedBatches` times, the first trip warns the model once and the
 * next ends the run with `LoopDetected`. A repeat whose results differ (the
 * world changed) starts a new streak; a turn without tool calls or a new user
 * message resets it.
 *
 * The warning is this project's choice: gglib's detector stops at the first
 * trip (with 2, the third identical batch ends the run). `warnFirst: false`
 * counts as gglib does (use it with the config's `maxRepeatedBatches: null`,
 * so that the default detector is not installed beside it).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Agent, Guards } from "effect-agent"
 *
 * // gglib's counting: the third identical batch in a row ends the run, with no warning before
 * const run = Effect.gen(function*() {
 *   const plugin = yield* Guards.loopDetector(2, { warnFirst: false })
 *   return Agent.run({ prompt: "go", config: { maxRepeatedBatches: null }, plugins: [plugin] })
 * })
 * console.log(Effect.isEffect(run)) // Output: true
 * ```
 *
 * @since 0.1.0
 * @category plugins
 */
export const loopDetector = (
  maxRepeatedBatches: number,
  options: {
    /** Warn the model once at the first trip and stop at the next (default); `false`: stop at the first. */
    readonly warnFirst?: boolean | undefined
  } = {}
): Effect.Effect<Hooks.Plugin> =>
  Effect.sync(() => {
    const fresh = { signature: null, results: null, repeats: 0, warned: false }
    let state: Omit<typeof LoopState.Type, "seen"> = fresh
    // The last batch's results, signed only when the next batch has the same calls (or the state is
    // saved): most batches differ from the one before, and signing the results cost more than the rest.
    let unsigned: Hooks.Turn | undefined
    const lastResults = (): string | null => {
      if (unsigned !== undefined) {
        state = { ...state, results: resultsSignature(unsigned) }
        unsigned = undefined
      }
      return state.results
    }
    const users = new UserMessages()
    return {
      name: "loopDetector",
      afterTurn: (turn, ctx) => {
        if (users.arrived(ctx.messages)) {
          state = fresh
          unsigned = undefined
        }
        const calls = Message.toolCalls(turn.message)
        if (calls.length === 0) {
          state = { signature: null, results: null, repeats: 0, warned: state.warned }
          unsigned = undefined
          return proceeding
        }
        const signature = batchSignature(calls)
        if (signature !== state.signature) {
          state = { signature, results: null, repeats: 1, warned: state.warned }
          unsigned = turn
          return proceeding
        }
        const previous = lastResults()
        const results = resultsSignature(turn)
        const repeats = results === previous ? state.repeats + 1 : 1
        state = { signature, results, repeats, warned: state.warned }
        if (repeats <= maxRepeatedBatches) return proceeding
        const figures = { repeats, limit: maxRepeatedBatches }
        if (!state.warned && options.warnFirst !== false) {
          state = { ...state, warned: true }
          const text = loopWarning(repeats)
          return Effect.as(
            ctx.emit({ _tag: "GuardTripped", guard: "loopDetector", action: "warn", detail: text, figures }),
            Hooks.inject([Message.system(text)])
          )
        }
        return Effect.as(
          ctx.emit({
            _tag: "GuardTripped",
            guard: "loopDetector",
            action: "stop",
            detail: `the same batch repeated ${repeats} times: ${signature}`,
            figures
          }),
          Hooks.stop({ _tag: "LoopDetected", repeats, signature })
        )
      },
      state: {
        save: Effect.sync(() => {
          lastResults()
          return { ...state, seen: users.seen }
        }),
        restore: (saved, info) =>
          Effect.map(restoreState("loopDetector", LoopState, saved, info), ({ seen, ...rest }) => {
            state = rest
            unsigned = undefined
            users.seen = seen
          })
      }
    }
  })

const normalise = (text: string) => text.trim().replace(/\s+/g, " ")

/** FNV-1a, 32 bits: replies are counted by hash, so the saved state stays small. */
const fnv1a = (text: string): string => {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return (hash >>> 0).toString(16)
}

const StagnationState = Schema.Struct({
  counts: Schema.Record(Schema.String, Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  seen: Count
})

/**
 * The stagnation detector: counts identical replies (whitespace-normalised)
 * on turns without tool calls, over the run; a reply seen more than
 * `maxStagnantReplies` times ends the run with `Stagnated`. A new user
 * message resets the counts.
 *
 * @since 0.1.0
 * @category plugins
 */
export const stagnationDetector = (maxStagnantReplies: number): Effect.Effect<Hooks.Plugin> =>
  Effect.sync(() => {
    const counts = new Map<string, number>()
    const users = new UserMessages()
    return {
      name: "stagnationDetector",
      afterTurn: (turn, ctx) => {
        if (users.arrived(ctx.messages)) counts.clear()
        if (Message.hasToolCalls(turn.message)) return proceeding
        const text = fnv1a(normalise(Message.textOf(turn.message)))
        const repeats = (counts.get(text) ?? 0) + 1
        counts.set(text, repeats)
        if (repeats <= maxStagnantReplies) return proceeding
        return Effect.as(
          ctx.emit({
            _tag: "GuardTripped",
            guard: "stagnationDetector",
            action: "stop",
            detail: `the same reply ${repeats} times`,
            figures: { repeats, limit: maxStagnantReplies }
          }),
          Hooks.stop({ _tag: "Stagnated", repeats })
        )
      },
      state: {
        save: Effect.sync(() => ({ counts: Object.fromEntries(counts), seen: users.seen })),
        restore: (saved, info) =>
          Effect.map(restoreState("stagnationDetector", StagnationState, saved, info), (restored) => {
            counts.clear()
            for (const [text, repeats] of Object.entries(restored.counts)) counts.set(text, repeats)
            users.seen = restored.seen
          })
      }
    }
  })

// -----------------------------------------------------------------------------
// From the config
// -----------------------------------------------------------------------------

/**
 * The guards a config asks for, in the order they run: the turn cap, the
 * budgets, the graceful turn limit, the loop and stagnation detectors, and
 * the context window transform.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromConfig = (config: AgentConfig): ReadonlyArray<Hooks.PluginInput> => {
  const guards: Array<Hooks.PluginInput> = []
  if (config.maxTurns !== null) guards.push(maxTurns(config.maxTurns))
  if (BUDGETS.some((budget) => config.budgets[budget] !== null)) {
    guards.push(budgets({ budgets: config.budgets, wrapUpAt: config.wrapUpAt }))
  }
  if (config.maxTurns !== null && config.graceTurns > 0 && config.graceTurns < config.maxTurns) {
    guards.push(gracefulTurnLimit({ maxTurns: config.maxTurns, graceTurns: config.graceTurns }))
  }
  if (config.maxRepeatedBatches !== null) guards.push(loopDetector(config.maxRepeatedBatches))
  if (config.maxStagnantReplies !== null) guards.push(stagnationDetector(config.maxStagnantReplies))
  if (config.contextBudgetTokens !== null) {
    guards.push(ContextWindow.prune({
      budgetTokens: config.contextBudgetTokens,
      keepToolResults: config.pruneKeepToolResults,
      keepTail: config.pruneKeepTail
    }))
  }
  return guards
}
