/**
 * The session's checkpointer: a plugin that saves the run's state as it goes
 * (see `Session` for when), and a durable run, stopped as soon as a
 * checkpoint cannot be written.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Semaphore from "effect/Semaphore"
import type * as Agent from "../../Agent.ts"
import * as AgentConfig from "../../AgentConfig.ts"
import type { AgentError } from "../../AgentError.ts"
import type * as AgentEvent from "../../AgentEvent.ts"
import type * as Backend from "../../Backend.ts"
import * as AgentTool from "../../AgentTool.ts"
import * as Hooks from "../../Hooks.ts"
import type * as Message from "../../Message.ts"
import type * as RunState from "../../RunState.ts"
import * as ToolRegistry from "../../ToolRegistry.ts"
import type * as CheckpointStore from "../CheckpointStore.ts"

/** The events of a sub-agent's run after which the session saves (the parent's state holds the child's). */
const nestedCheckpoints: ReadonlySet<AgentEvent.Tag> = new Set([
  "TurnEnd",
  "ToolExecutionStart",
  "ToolExecutionEnd",
  "ApprovalRequested",
  "SteeringDelivered",
  "FollowUpDelivered"
])

/** Whether a run ended the way a crash would: interrupted, or failed. */
const endedAbnormally = (event: AgentEvent.Of<"AgentEnd">): boolean => {
  const outcome = event.result?.outcome
  return outcome === undefined || (outcome._tag === "Cancelled" && outcome.reason === "interrupted")
}

/** A steering message or follow-up the run delivered: appended to the transcript at `index`. */
interface Delivered {
  readonly kind: "steering" | "followUp"
  readonly message: Message.Message
  readonly index: number
}

interface Checkpointer {
  /** How the session's runs are carried out: its plugin, and what it saves when a run hands off. */
  readonly execution: Backend.Service
  /** Fails with the store's error when a checkpoint could not be written. */
  readonly failed: Deferred.Deferred<never, CheckpointStore.CheckpointError>
}

/**
 * Who the session runs as: the agent a handoff passed it on to (`undefined` for the application's), and its config.
 * A handoff changes both; every save records them.
 */
interface RunsAs {
  agent: string | undefined
  config: AgentConfig.AgentConfig
}

const checkpointer = (
  sessionId: string,
  store: CheckpointStore.Service,
  runner: RunsAs,
  saved: RunState.RunState
): Effect.Effect<Checkpointer> =>
  Effect.map(Deferred.make<never, CheckpointStore.CheckpointError>(), (failed) => {
    // Snapshot and save under one lock: concurrent calls of a batch save in order, each a superset of the last.
    const lock = Semaphore.makeUnsafe(1)
    /** The last state saved: the store's save and this record are one uninterruptible step. */
    let last = saved
    /** Steering and follow-ups delivered past `last`'s transcript (by their index in it), not saved yet. */
    let delivered: Array<Delivered> = []
    const unsafeStarted = new Set<string>()
    // The run's own tools: after a handoff, the registry is the agent's, which the run's hooks see.
    const replaySafe = (toolName: string): Effect.Effect<boolean> =>
      Effect.map(Effect.serviceOption(ToolRegistry.ToolRegistry), (registry) => {
        const tool = Option.isSome(registry) ? registry.value.get(toolName) : undefined
        return tool === undefined || AgentTool.settings(tool).replaySafe
      })
    // An interruption between the save and `last = state` would leave `last` behind what the store holds,
    // and the last save of the interrupted run would then write that older state over the newer one.
    const write = (state: RunState.RunState, finished?: CheckpointStore.Finished) =>
      Effect.uninterruptible(Effect.tap(store.save(sessionId, { ...runner, state, finished }), () =>
        Effect.sync(() => {
          last = state
          if (delivered.length > 0) delivered = delivered.filter((entry) => entry.index >= state.messages.length)
        })))
    /** Saves the run's state now; on failure, stops the run before it goes any further. */
    const checkpoint = (ctx: Hooks.Context): Effect.Effect<void> =>
      lock.withPermit(Effect.flatMap(ctx.snapshot, write)).pipe(
        Effect.matchEffect({
          onSuccess: ({ bytes }) => ctx.emit({ _tag: "CheckpointSaved", sessionId, bytes }),
          onFailure: (error) => Effect.andThen(Deferred.fail(failed, error), Effect.never)
        })
      )
    /**
     * The last save of a run that ended abnormally: the last checkpoint's transcript (the turn in flight
     * is redone), the queues as they are now, and, back at the front of their queues, the steering and
     * follow-ups delivered after that checkpoint (they are not in its transcript).
     */
    const abnormalEnd = (final: RunState.RunState): RunState.RunState => {
      const undelivered = (kind: Delivered["kind"]) =>
        delivered.flatMap((entry) => entry.kind === kind ? [entry.message] : [])
      return {
        ...last,
        steering: [...undelivered("steering"), ...final.steering],
        followUps: [...undelivered("followUp"), ...final.followUps],
        elapsedMs: final.elapsedMs
      }
    }
    /** The last save, when the run ends: no event may follow `AgentEnd`, and the run must not wait here. */
    const checkpointEnd = (event: AgentEvent.Of<"AgentEnd">, ctx: Hooks.Context): Effect.Effect<void> =>
      lock.withPermit(Effect.gen(function*() {
        const result = event.result
        // Not finished: the session goes on in the agent handed off to, saved before it starts (`handedOff`).
        if (result?.outcome._tag === "HandedOff") return yield* write(result.state)
        if (!endedAbnormally(event) && result !== undefined) {
          const firstMessage = result.state.messages.length - result.messages.length
          return yield* write(result.state, { outcome: result.outcome, firstMessage })
        }
        return yield* write(abnormalEnd(result?.state ?? (yield* ctx.snapshot)))
      })).pipe(Effect.catch((error) => Effect.asVoid(Deferred.fail(failed, error))))
    /**
     * A handoff, before the agent handed off to starts: the session goes on in that agent, from the state
     * its run starts with. (A crash before this save resumes the run that handed off, after its handoff call.)
     */
    const handedOff = (next: Backend.Handoff): Effect.Effect<void> =>
      lock.withPermit(Effect.gen(function*() {
        runner.agent = next.agent
        // An invalid config fails the next run (`ConfigError`) before it saves; the last config is kept.
        const made = yield* Effect.option(AgentConfig.make(next.config))
        runner.config = Option.getOrUndefined(made) ?? runner.config
        return yield* write(next.state)
      })).pipe(Effect.catch((error) => Effect.andThen(Deferred.fail(failed, error), Effect.never)))
    /** Records delivered messages where they are appended (synchronously: no interruption can come between). */
    const observeDelivery = (event: AgentEvent.AgentEvent, ctx: Hooks.Context): void => {
      if (event._tag !== "SteeringDelivered" && event._tag !== "FollowUpDelivered") return
      const kind = event._tag === "SteeringDelivered" ? "steering" : "followUp"
      const start = ctx.messages.length - event.messages.length
      event.messages.forEach((message, i) => delivered.push({ kind, message, index: start + i }))
    }
    const plugin: Hooks.Plugin = {
      name: "session",
      observe: observeDelivery,
      afterTurn: (_turn, ctx) => Effect.as(checkpoint(ctx), Hooks.proceed),
      onEvent: (event, ctx) => {
        switch (event._tag) {
          case "TurnStart":
            return ctx.messages.length === last.messages.length ? Effect.void : checkpoint(ctx)
          case "SteeringDelivered":
          case "FollowUpDelivered":
          case "ApprovalRequested":
            return checkpoint(ctx)
          case "ToolExecutionStart":
            return Effect.flatMap(replaySafe(event.toolName), (safe) => {
              if (safe) return Effect.void
              unsafeStarted.add(event.toolCallId)
              return checkpoint(ctx)
            })
          case "ToolExecutionEnd":
            return unsafeStarted.delete(event.toolCallId) ? checkpoint(ctx) : Effect.void
          case "AgentEnd":
            return checkpointEnd(event, ctx)
          case "Nested":
            // A sub-agent's run is saved inside this one's (its state goes with the call that runs it):
            // at its turns' ends and around its tool calls, as a run of its own would be.
            return nestedCheckpoints.has(event.event._tag) ? checkpoint(ctx) : Effect.void
          default:
            return Effect.void
        }
      }
    }
    return { execution: { plugins: [plugin], handedOff }, failed }
  })

/** Runs a session's run, stopping it as soon as a checkpoint cannot be written. */
export const durable = <A, R>(
  sessionId: string,
  store: CheckpointStore.Service,
  runAs: { readonly agent: string | undefined; readonly config: AgentConfig.AgentConfig },
  saved: RunState.RunState,
  start: (execution: Backend.Service) => Effect.Effect<RunState.RunResult<A>, AgentError, Agent.Requirements | R>
): Effect.Effect<RunState.RunResult<A>, AgentError | CheckpointStore.CheckpointError, Agent.Requirements | R> =>
  Effect.gen(function*() {
    const { execution, failed } = yield* checkpointer(sessionId, store, { ...runAs }, saved)
    const result = yield* Effect.raceFirst(start(execution), Deferred.await(failed))
    // The last save (at `AgentEnd`) may have failed after the run had succeeded.
    if (Deferred.isDoneUnsafe(failed)) yield* Deferred.await(failed)
    return result
  })
