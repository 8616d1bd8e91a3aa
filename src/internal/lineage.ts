/**
 * Where a run sits in a tree of agents: a run started by a sub-agent tool
 * (`Agent.asTool`) has a parent, a depth and a path of agent names; a run
 * knows the sub-agent runs in flight below it (a snapshot of the run holds
 * their states, so a resumed session continues them) and the handoff a tool
 * asked for; the runs of a tree share one ledger of reservations against
 * their budgets. The loop makes one per run and provides it to everything the
 * run calls (tool handlers read it through {@link Current}).
 *
 * @internal
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as AgentConfig from "../AgentConfig.ts"
import { InvalidPluginState } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Hooks from "../Hooks.ts"
import type * as Message from "../Message.ts"
import * as RunState from "../RunState.ts"
import type * as Progress from "./progress.ts"
import * as Reservations from "./reservations.ts"
import type * as Stops from "./stops.ts"

/**
 * A run's place in the tree.
 *
 * @internal
 */
export interface Lineage {
  readonly runId: string
  /** The agent's name (`undefined` for a run started by the application). */
  readonly agent: string | undefined
  /** The agents' names from the top run (excluded) down to this one. */
  readonly path: ReadonlyArray<string>
  /** 0 for a run started by the application, its parent's + 1 for a sub-agent's run. */
  readonly depth: number
  /** The deepest a sub-agent below this run may be. */
  readonly maxDepth: number
  readonly parent: Lineage | undefined
  /** The parent's call that runs this one. */
  readonly toolCallId: string | undefined
  /** The parts of the run the runs below it use; set once the run is made. */
  run: Attached | undefined
  /** Sub-agent runs in flight, by the id of the call that runs each. */
  readonly children: Map<string, Lineage>
  /** Sub-agent runs saved with the state this run continues from, by call id: taken by the call that resumes each. */
  readonly restored: Map<string, Saved>
  /** Where a handoff tool leaves its target (only a run that can hand off has one). */
  readonly handoffs: Handoffs | undefined
  /** What the runs of the tree share of their budgets' reservations (the top run's, for every run below). */
  readonly ledger: Reservations.Ledger
}

/**
 * What the runs below a run use of it.
 *
 * @internal
 */
export interface Attached {
  readonly progress: Progress.Progress
  readonly config: AgentConfig.AgentConfig
  readonly stops: Stops.Stops
  /** Whether anything receives the run's events (else its children do not forward theirs). */
  readonly observed: boolean
  readonly emit: (input: AgentEvent.Input) => Effect.Effect<void>
  readonly snapshot: Effect.Effect<RunState.RunState>
}

/**
 * A sub-agent's run saved in its parent's state.
 *
 * @internal
 */
export interface Saved {
  readonly agent: string
  readonly state: RunState.RunState
}

/**
 * The handoff a tool asked for, once the run ends `HandedOff`: who takes the
 * run over and how (the target, type-erased: `SubAgent` reads it back).
 *
 * @internal
 */
export interface Handoffs {
  pending: { readonly to: string; readonly target: unknown } | undefined
}

/**
 * The lineage of the run in progress, if any.
 *
 * @internal
 */
export const Current = Context.Reference<Lineage | undefined>("effect-agent/internal/Lineage", {
  defaultValue: () => undefined
})

/**
 * What makes a run a sub-agent's: its parent, its name, the call that runs it.
 *
 * @internal
 */
export interface Link {
  readonly parent: Lineage | undefined
  readonly agent: string
  readonly toolCallId: string | undefined
  readonly maxDepth: number
}

/**
 * The lineage of a new run.
 *
 * @internal
 */
export const make = (runId: string, link: Link | undefined, handoffs: Handoffs | undefined): Lineage => {
  const parent = link?.parent
  return {
    runId,
    agent: link?.agent,
    path: link === undefined ? [] : [...parent?.path ?? [], link.agent],
    depth: link === undefined ? 0 : (parent?.depth ?? 0) + 1,
    maxDepth: link === undefined ? Infinity : Math.min(link.maxDepth, parent?.maxDepth ?? Infinity),
    parent,
    toolCallId: link?.toolCallId,
    run: undefined,
    children: new Map(),
    restored: new Map(),
    handoffs,
    ledger: parent?.ledger ?? Reservations.ledger()
  }
}

/**
 * The id a call of the run waits for approval under, unique across the run tree: the ids of the calls that run
 * each sub-agent from the top run down to this one, then the call's own, each URI-encoded and joined by `/`. A
 * call of the top run whose id needs no encoding keeps its id (`call_1`); a sub-agent's is `call_7/call_1`.
 *
 * @internal
 */
export const approvalId = (lineage: Lineage | undefined, toolCallId: string): string => {
  let id = encodeURIComponent(toolCallId)
  for (let run = lineage; run?.toolCallId !== undefined; run = run.parent) {
    id = `${encodeURIComponent(run.toolCallId)}/${id}`
  }
  return id
}

/**
 * Sets the run's parts, and enters the run among its parent's children.
 *
 * @internal
 */
export const attach = (lineage: Lineage, run: Attached): void => {
  lineage.run = run
  if (lineage.parent !== undefined && lineage.toolCallId !== undefined) {
    lineage.parent.children.set(lineage.toolCallId, lineage)
  }
}

/**
 * The meter of an attached run: the accounts of its budgets and of those of
 * every run above it; `undefined` when none has a token or cost budget.
 * `messages`: the transcript the run starts from (its last call is the first
 * estimate of a continued run).
 *
 * @internal
 */
export const meter = (lineage: Lineage, messages: ReadonlyArray<Message.Message>): Reservations.Meter | undefined => {
  const accounts: Array<Reservations.Account> = []
  for (let at: Lineage | undefined = lineage; at !== undefined; at = at.parent) {
    if (at.run === undefined) continue
    const whose = at === lineage ? "the" : at.agent === undefined ? "the top run's" : `${at.agent}'s`
    const account = Reservations.account(at.run.progress, at.run.config.budgets, whose)
    if (account !== undefined) accounts.push(account)
  }
  return Reservations.meter(lineage.ledger, accounts, messages)
}

const SavedChildren = Schema.Record(
  Schema.String,
  Schema.Struct({ agent: Schema.String, state: RunState.RunStateJson })
)
const encodeSaved = Schema.encodeEffect(SavedChildren)
const decodeSaved = Schema.decodeUnknownEffect(SavedChildren)

/**
 * The plugin that saves the sub-agent runs in flight with the run's state
 * (their own snapshots, in their JSON form: with theirs, recursively), and
 * restores them for the calls that resume them. It saves nothing when none
 * is in flight.
 *
 * @internal
 */
export const plugin = (lineage: Lineage): Hooks.Plugin => ({
  name: "subAgents",
  state: {
    save: Effect.suspend(() => {
      if (lineage.children.size === 0) return Effect.succeed(undefined)
      return Effect.forEach(lineage.children, ([id, child]) =>
        child.run === undefined
          ? Effect.succeed(undefined)
          : Effect.map(child.run.snapshot, (state) => [id, { agent: child.agent ?? "", state }] as const)).pipe(
          Effect.flatMap((entries) =>
            encodeSaved(Object.fromEntries(entries.filter((entry) => entry !== undefined)))
          ),
          // A state the run made always encodes.
          Effect.orDie
        )
    }),
    restore: (saved) =>
      decodeSaved(saved).pipe(
        Effect.mapError((issue) => new InvalidPluginState({ plugin: "subAgents", reason: issue.message })),
        Effect.map((children) => {
          for (const [id, child] of Object.entries(children)) lineage.restored.set(id, child)
        })
      )
  }
})
