/**
 * Reservations: what keeps a token or cost budget when model calls of one
 * tree of runs are in flight at once (sub-agents called in parallel, and
 * theirs).
 *
 * Before a model call, its estimate is reserved against every budget it
 * counts against: its own run's and those of every run above it. The call
 * starts only if, for each, what is spent plus what the calls in flight have
 * reserved plus its estimate fits the limit. When it would fit beside what
 * is spent but not beside what is reserved, it waits until a call in flight
 * settles (one that cost less than its estimate frees room) and asks again;
 * when it would not fit beside what is spent, nothing can make room, and its
 * run ends `BudgetExceeded`. The check and the reservation are one
 * synchronous step, so two calls never take the same room.
 *
 * When the call ends, its reservation is released. Its usage is already
 * counted by then in the runs above it (the sub-agent roll-up adds it when
 * the reply ends, `MessageEnd`); its own run adds it after the reply, and no
 * other call reads that run's budgets meanwhile (a run's children run during
 * its tool calls, never during its model call). A call that fails or is
 * interrupted releases its reservation with nothing added: it reported no
 * usage.
 *
 * The estimate of a call is its run's last call (what that reply reported,
 * per budget: an agent's next request is its last one and what came back,
 * and a pruned context shrinks it), or, before its first, the largest first
 * call of any run of the tree; before the tree's first call, the largest
 * last call the continued runs of the tree started from (a resumed tree);
 * before any, nothing. It is made of
 * usage the provider reported, not of a price: the loop knows neither the
 * model's price nor its output cap (the provider layer does), and what a
 * provider reports is what the budgets count. It costs a few comparisons per
 * call, whatever the history.
 *
 * The bound: whatever the calls do, a budget is exceeded by at most what the
 * calls in flight when the last call was admitted cost beyond their
 * estimates; each agent has at most one call in flight. When every call
 * costs at most its estimate, the budget is never exceeded.
 *
 * Reservations live in memory only (`Progress.reserved`): a resumed run has
 * none.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as AgentConfig from "../AgentConfig.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as Progress from "./progress.ts"
import * as Stops from "./stops.ts"

/**
 * The budgets a model call counts against (the wall clock is a deadline, see `Stops`).
 *
 * @internal
 */
export type Counted = "tokens" | "inputTokens" | "outputTokens" | "costUsd"

const counted: ReadonlyArray<Counted> = ["tokens", "inputTokens", "outputTokens", "costUsd"]

const amountsOf = (usage: Message.Usage): Progress.Amounts => ({
  tokens: Message.totalTokens(usage),
  inputTokens: usage.input,
  outputTokens: usage.output,
  costUsd: usage.cost ?? 0
})

const larger = (a: Progress.Amounts, b: Progress.Amounts): Progress.Amounts => ({
  tokens: Math.max(a.tokens, b.tokens),
  inputTokens: Math.max(a.inputTokens, b.inputTokens),
  outputTokens: Math.max(a.outputTokens, b.outputTokens),
  costUsd: Math.max(a.costUsd, b.costUsd)
})

const isNothing = (amounts: Progress.Amounts): boolean =>
  amounts.tokens === 0 && amounts.inputTokens === 0 && amounts.outputTokens === 0 && amounts.costUsd === 0

const nothing: Progress.Amounts = Object.freeze(Progress.noAmounts())

// -----------------------------------------------------------------------------
// The tree's ledger, the runs' accounts, a run's meter
// -----------------------------------------------------------------------------

/**
 * What the runs of one tree share.
 *
 * @internal
 */
export interface Ledger {
  /** The largest first call of a run of the tree, per budget; none before the tree's first call. */
  firstCall: Progress.Amounts | undefined
  /** The largest last call the continued runs of the tree started from (their transcripts'). */
  continued: Progress.Amounts | undefined
  /** Completed, and dropped, when a reservation is released: the calls waiting for room ask again. */
  released: Deferred.Deferred<void> | undefined
}

/**
 * A new tree's ledger.
 *
 * @internal
 */
export const ledger = (): Ledger => ({ firstCall: undefined, continued: undefined, released: undefined })

/**
 * A run with token or cost budgets: its progress (what it spent, what is reserved) and its limits.
 *
 * @internal
 */
export interface Account {
  readonly progress: Progress.Progress
  readonly limits: ReadonlyArray<readonly [Counted, number]>
  /** Whose budgets they are, as a `GuardTripped` detail says it: "the", "the top run's", "researcher's". */
  readonly whose: string
}

/**
 * A run's account; `undefined` when it has no token or cost budget.
 *
 * @internal
 */
export const account = (
  progress: Progress.Progress,
  budgets: AgentConfig.Budgets,
  whose: string
): Account | undefined => {
  let limits: Array<readonly [Counted, number]> | undefined
  for (const budget of counted) {
    const limit = budgets[budget]
    if (limit !== null) (limits ??= []).push([budget, limit])
  }
  return limits === undefined ? undefined : { progress, limits, whose }
}

/**
 * What a run's model calls count against, and how large its calls are.
 *
 * @internal
 */
export interface Meter {
  readonly ledger: Ledger
  /** The run's own account (when it has budgets), then those of the runs above it that have budgets. */
  readonly accounts: ReadonlyArray<Account>
  /** The run's last call that reported usage (a continued run: the last one its transcript holds). */
  last: Progress.Amounts | undefined
}

/**
 * A run's meter; `undefined` when no budget counts its calls (then nothing is reserved).
 *
 * @internal
 */
export const meter = (
  ledger: Ledger,
  accounts: ReadonlyArray<Account>,
  messages: ReadonlyArray<Message.Message>
): Meter | undefined => {
  if (accounts.length === 0) return undefined
  const last = lastCall(messages)
  if (last !== undefined) ledger.continued = ledger.continued === undefined ? last : larger(ledger.continued, last)
  return { ledger, accounts, last }
}

const lastCall = (messages: ReadonlyArray<Message.Message>): Progress.Amounts | undefined => {
  // The last call's usage, if it reported one (read backwards: only the messages after it are passed over).
  const usage = Message.lastCallUsage(messages)
  const amounts = usage === undefined ? undefined : amountsOf(usage)
  return amounts === undefined || isNothing(amounts) ? undefined : amounts
}

/**
 * What the run's next call is estimated to spend.
 *
 * @internal
 */
export const estimate = (meter: Meter): Progress.Amounts =>
  meter.last ?? meter.ledger.firstCall ?? meter.ledger.continued ?? nothing

// -----------------------------------------------------------------------------
// Admission
// -----------------------------------------------------------------------------

/**
 * A call that may not start: its run ends with `outcome`, after `event`.
 *
 * @internal
 */
export interface Refused {
  readonly _tag: "Refused"
  readonly outcome: Outcome.Outcome
  readonly event: AgentEvent.Input
}

/**
 * A call stopped while it waited for room.
 *
 * @internal
 */
export interface Stopped {
  readonly _tag: "Stopped"
  readonly stop: Stops.Stop
}

/**
 * A call that was made, with its reply.
 *
 * @internal
 */
export interface Spent<A> {
  readonly _tag: "Spent"
  readonly reply: A
}

const refused = (account: Account, budget: Counted, limit: number, used: number, estimate: number): Refused => {
  const detail = used >= limit
    ? `${account.whose} ${budget} budget is exhausted: ${used} of ${limit}`
    : `the next model call does not fit ${account.whose} ${budget} budget: ${used} of ${limit} used, ` +
      `and the call is estimated at ${estimate}`
  return {
    _tag: "Refused",
    outcome: Outcome.budgetExceeded(budget, limit, used),
    event: { _tag: "GuardTripped", guard: "budget", action: "stop", detail, figures: { limit, used, estimate } }
  }
}

const wait = "wait" as const

/** Whether a call of `estimate` fits now (`undefined`), must wait for room, or may not start. */
const check = (accounts: ReadonlyArray<Account>, estimate: Progress.Amounts): Refused | typeof wait | undefined => {
  let waits = false
  for (const account of accounts) {
    const { progress } = account
    for (const [budget, limit] of account.limits) {
      const used = Message.counted(budget, progress.usage)
      const cost = estimate[budget]
      if (used >= limit || used + cost > limit) return refused(account, budget, limit, used, cost)
      if (used + progress.reserved[budget] + cost > limit) waits = true
    }
  }
  return waits ? wait : undefined
}

const reserve = (accounts: ReadonlyArray<Account>, estimate: Progress.Amounts): void => {
  for (const { progress } of accounts) {
    const { reserved } = progress
    progress.inFlight++
    reserved.tokens += estimate.tokens
    reserved.inputTokens += estimate.inputTokens
    reserved.outputTokens += estimate.outputTokens
    reserved.costUsd += estimate.costUsd
  }
}

/** Releases a reservation, learns from the call's usage (when it reported one) and wakes the waiting calls. */
const release = (meter: Meter, estimate: Progress.Amounts, usage: Message.Usage | undefined): void => {
  for (const { progress } of meter.accounts) {
    const { reserved } = progress
    // With no call in flight, nothing is reserved: exactly 0, whatever the rounding of the sums.
    const none = --progress.inFlight === 0
    reserved.tokens = none ? 0 : reserved.tokens - estimate.tokens
    reserved.inputTokens = none ? 0 : reserved.inputTokens - estimate.inputTokens
    reserved.outputTokens = none ? 0 : reserved.outputTokens - estimate.outputTokens
    reserved.costUsd = none ? 0 : reserved.costUsd - estimate.costUsd
  }
  const spent = usage === undefined ? undefined : amountsOf(usage)
  if (spent !== undefined && !isNothing(spent)) {
    const { ledger } = meter
    if (meter.last === undefined) {
      ledger.firstCall = ledger.firstCall === undefined ? spent : larger(ledger.firstCall, spent)
    }
    meter.last = spent
  }
  const released = meter.ledger.released
  if (released !== undefined) {
    meter.ledger.released = undefined
    Deferred.doneUnsafe(released, Exit.void)
  }
}

/** Waits until a reservation of the tree is released, or the run stops. */
const awaitRelease = (ledger: Ledger, stops: Stops.Stops): Effect.Effect<Stops.Stop | undefined> => {
  const released = ledger.released ??= Deferred.makeUnsafe<void>()
  return Stops.race(stops, Effect.as(Deferred.await(released), undefined), (stop): Stops.Stop | undefined => stop)
}

/**
 * Makes a model call under the run's budgets and those above it: reserves
 * its estimate (waiting for room when calls in flight hold it), makes the
 * call, and releases the reservation however the call ends (succeeds,
 * fails, is interrupted). `Refused` when the call may not start, `Stopped`
 * when the run was stopped while the call waited.
 *
 * @internal
 */
export const spend = <A extends { readonly message: Message.AssistantMessage }, E, R>(
  meter: Meter,
  stops: Stops.Stops,
  call: Effect.Effect<A, E, R>
): Effect.Effect<Spent<A> | Refused | Stopped, E, R> =>
  Effect.uninterruptibleMask((restore) => {
    const attempt: Effect.Effect<Spent<A> | Refused | Stopped, E, R> = Effect.suspend(() => {
      const amounts = estimate(meter)
      const verdict = check(meter.accounts, amounts)
      if (verdict === undefined) {
        // Checked and reserved in one synchronous step; released by the finalizer, whatever happens next.
        reserve(meter.accounts, amounts)
        return Effect.onExit(
          Effect.map(restore(call), (reply): Spent<A> => ({ _tag: "Spent", reply })),
          (exit) =>
            Effect.sync(() =>
              release(meter, amounts, exit._tag === "Success" ? exit.value.reply.message.usage : undefined)
            )
        )
      }
      if (verdict !== wait) return Effect.succeed(verdict)
      return Effect.flatMap(
        restore(awaitRelease(meter.ledger, stops)),
        (stop): Effect.Effect<Spent<A> | Refused | Stopped, E, R> =>
          stop === undefined ? attempt : Effect.succeed({ _tag: "Stopped", stop })
      )
    })
    return attempt
  })
