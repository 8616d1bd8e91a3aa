/**
 * Durable sessions: a run that saves a checkpoint as it goes, so that after a
 * crash, a deploy or Ctrl-C it resumes where it stopped, redoing at most the
 * turn that was in flight.
 *
 * A session is `Agent.run` / `Agent.runContinue` with a checkpointing plugin.
 * {@link open} starts it, resumes it or returns its stored result, whichever
 * applies; {@link run} and {@link resume} do one each. It saves a checkpoint:
 *
 * - when it starts (the session id must be new);
 * - after every completed turn (the assistant message and all its results);
 * - when steering or follow-ups are delivered, and before a model call when
 *   plugins added messages since the last checkpoint;
 * - in the middle of a tool batch, before the handler of a tool that is not
 *   `ReplaySafe` starts, and when it ends, so that a resumed run never runs
 *   such a call again blindly: a call whose outcome is unknown is answered
 *   with a result that says so;
 * - when a call asks for approval, so a pending approval survives a restart
 *   and is asked again (`ApprovalRequested`) when the session resumes;
 * - when the run ends; a run the loop ended (not an interruption or a
 *   failure) saves its outcome too, and the session is finished. An
 *   interrupted or failed run keeps its last
 *   checkpoint's transcript (the turn in flight is redone on resume) and adds
 *   the steering and follow-ups that were still undelivered, and, back at the
 *   front of their queues, those delivered after that checkpoint. A save and
 *   the session's record of it are one uninterruptible step, so this last
 *   save never writes a state older than one saved before it.
 *
 * Each save but the last emits `CheckpointSaved` with the bytes it wrote
 * (nothing follows `AgentEnd`). When a
 * checkpoint cannot be written the run is stopped at once and the session
 * fails with the store's error: a durable run does not go on undurably.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CheckpointStore, Session } from "effect-agent"
 *
 * // the first time it starts the session; after a crash it resumes it; once it has finished, its result
 * const tidy = Effect.gen(function*() {
 *   const store = yield* CheckpointStore.fileSystem(".sessions")
 *   return yield* Session.open("task-42", { store, prompt: "Tidy up the repository" })
 * })
 * ```
 *
 * @since 0.1.0
 */
import { Deferred, Effect, Semaphore } from "effect"
import * as Agent from "../Agent.ts"
import * as AgentConfig from "../AgentConfig.ts"
import type { AgentError } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as AgentTool from "../AgentTool.ts"
import * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as RunState from "../RunState.ts"
import type * as Steering from "../Steering.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import * as CheckpointStore from "./CheckpointStore.ts"
import * as Loop from "../internal/loop.ts"

/**
 * What starts a session: a run's options, the session id and the store.
 *
 * @since 0.1.0
 */
export interface RunOptions<R = never> extends Agent.RunOptions<R> {
  /** The session id: 1 to 128 letters, digits, `.`, `_` or `-`, not starting with `.`. */
  readonly id: string
  readonly store: CheckpointStore.Service
}

/**
 * What a resumed session can change. The config is the one saved with the
 * session, with the settings given here on top.
 *
 * @since 0.1.0
 */
export interface ResumeOptions<R = never> extends Agent.ContinueOptions<R> {
  readonly store: CheckpointStore.Service
}

const promptMessages = (prompt: Agent.RunOptions["prompt"]): ReadonlyArray<Message.Message> =>
  typeof prompt === "string" ? [Message.user(prompt)] : "role" in prompt ? [prompt] : prompt

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
  readonly plugin: Hooks.Plugin
  /** Fails with the store's error when a checkpoint could not be written. */
  readonly failed: Deferred.Deferred<never, CheckpointStore.CheckpointError>
}

const checkpointer = (
  sessionId: string,
  store: CheckpointStore.Service,
  config: AgentConfig.AgentConfig,
  saved: RunState.RunState,
  registry: ToolRegistry.Service
): Effect.Effect<Checkpointer> =>
  Effect.map(Deferred.make<never, CheckpointStore.CheckpointError>(), (failed) => {
    // Snapshot and save under one lock: concurrent calls of a batch save in order, each a superset of the last.
    const lock = Semaphore.makeUnsafe(1)
    /** The last state saved: the store's save and this record are one uninterruptible step. */
    let last = saved
    /** Steering and follow-ups delivered past `last`'s transcript (by their index in it), not saved yet. */
    let delivered: Array<Delivered> = []
    const unsafeStarted = new Set<string>()
    const replaySafe = (toolName: string): boolean => {
      const tool = registry.get(toolName)
      return tool === undefined || AgentTool.settings(tool).replaySafe
    }
    // An interruption between the save and `last = state` would leave `last` behind what the store holds,
    // and the last save of the interrupted run would then write that older state over the newer one.
    const write = (state: RunState.RunState, finished?: CheckpointStore.Finished) =>
      Effect.uninterruptible(Effect.tap(store.save(sessionId, { state, config, finished }), () =>
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
        if (!endedAbnormally(event) && result !== undefined) {
          const firstMessage = result.state.messages.length - result.messages.length
          return yield* write(result.state, { outcome: result.outcome, firstMessage })
        }
        return yield* write(abnormalEnd(result?.state ?? (yield* ctx.snapshot)))
      })).pipe(Effect.catch((error) => Effect.asVoid(Deferred.fail(failed, error))))
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
            if (replaySafe(event.toolName)) return Effect.void
            unsafeStarted.add(event.toolCallId)
            return checkpoint(ctx)
          case "ToolExecutionEnd":
            return unsafeStarted.delete(event.toolCallId) ? checkpoint(ctx) : Effect.void
          case "AgentEnd":
            return checkpointEnd(event, ctx)
          default:
            return Effect.void
        }
      }
    }
    return { plugin, failed }
  })

/** Runs a session's run, stopping it as soon as a checkpoint cannot be written. */
const durable = <R>(
  sessionId: string,
  store: CheckpointStore.Service,
  config: AgentConfig.AgentConfig,
  saved: RunState.RunState,
  start: (plugin: Hooks.Plugin) => Effect.Effect<RunState.RunResult, AgentError, Agent.Requirements | R>
): Effect.Effect<RunState.RunResult, AgentError | CheckpointStore.CheckpointError, Agent.Requirements | R> =>
  Effect.gen(function*() {
    const registry = yield* ToolRegistry.ToolRegistry
    const { failed, plugin } = yield* checkpointer(sessionId, store, config, saved, registry)
    const result = yield* Effect.raceFirst(start(plugin), Deferred.await(failed))
    // The last save (at `AgentEnd`) may have failed after the run had succeeded.
    if (Deferred.isDoneUnsafe(failed)) yield* Deferred.await(failed)
    return result
  })

/**
 * Starts a durable session: `Agent.run` with a checkpoint at the start and
 * as the run goes (see the module documentation). Fails with
 * `CheckpointExists` when the id already has a checkpoint (resume it, or
 * remove it first; {@link open} does whichever applies).
 *
 * @since 0.1.0
 */
export const run = <R = never>(
  options: RunOptions<R>
): Effect.Effect<RunState.RunResult, AgentError | CheckpointStore.CheckpointError, Agent.Requirements | R> =>
  Effect.gen(function*() {
    const { id, store, ...runOptions } = options
    const config = yield* AgentConfig.make(options.config)
    const runId = options.runId ?? globalThis.crypto.randomUUID()
    const prompt = promptMessages(options.prompt)
    const state = RunState.make({ runId, system: options.system, messages: prompt })
    const created = yield* store.create(id, { state, config })
    return yield* durable<R>(id, store, config, state, (plugin) =>
      Loop.start<R>(state, {
        ...runOptions,
        config,
        plugins: [...(options.plugins ?? []), plugin],
        announce: [{ _tag: "CheckpointSaved", sessionId: id, bytes: created.bytes }]
      }))
  })

/**
 * The saved config with the given settings on top. A new turn cap without a
 * grace window keeps the saved window only if it still fits under the cap
 * (else `AgentConfig.make` picks the default for the cap).
 */
const resumeConfig = (saved: AgentConfig.AgentConfig | undefined, given: AgentConfig.Input | undefined): AgentConfig.Input => {
  if (saved === undefined) return given ?? {}
  if (given === undefined) return saved
  const cap = given.maxTurns
  const graceFits = given.graceTurns !== undefined || cap === undefined || cap === null || saved.graceTurns < cap
  return {
    ...saved,
    ...(graceFits ? {} : { graceTurns: undefined }),
    ...given,
    budgets: { ...saved.budgets, ...given.budgets }
  }
}

/** The `SessionResumed` event of a resumed session: where it resumes and what was restored. */
const resumed = (sessionId: string, state: RunState.RunState): AgentEvent.Input => ({
  _tag: "SessionResumed",
  sessionId,
  resumedAtTurn: state.turn + 1,
  restored: {
    messages: state.messages.length,
    turns: state.turn,
    usage: state.usage,
    elapsedMs: state.elapsedMs,
    steering: state.steering.length,
    followUps: state.followUps.length,
    pendingApprovals: state.pendingApprovals.length
  }
})

/**
 * Resumes a session from its last checkpoint: the transcript, turn counter,
 * usage, cost and wall time used, plugin state, undelivered steering and
 * follow-ups, and pending approvals (asked again with `ApprovalRequested`)
 * are restored, and the run opens with `SessionResumed`. Calls that were in
 * flight belong to the turn being redone; a call to a tool that is not
 * `ReplaySafe` that had started is answered "outcome unknown" instead of
 * being run again.
 *
 * Fails with the store's `CheckpointMissing`, `CheckpointCorrupt` or
 * `CheckpointVersionMismatch` when there is nothing to resume (also
 * `CheckpointCorrupt` when a plugin refuses its saved state), and with
 * `InvalidContinuation` when the session had finished (give it a follow-up
 * through `steering` to go on; {@link open} returns a finished session's
 * result instead).
 *
 * @since 0.1.0
 */
export const resume = <R = never>(
  sessionId: string,
  options: ResumeOptions<R>
): Effect.Effect<RunState.RunResult, AgentError | CheckpointStore.CheckpointError, Agent.Requirements | R> =>
  Effect.flatMap(options.store.load(sessionId), (checkpoint) => resumeFrom<R>(sessionId, checkpoint, options))

const resumeFrom = <R>(
  sessionId: string,
  checkpoint: CheckpointStore.Checkpoint,
  options: ResumeOptions<R>
): Effect.Effect<RunState.RunResult, AgentError | CheckpointStore.CheckpointError, Agent.Requirements | R> =>
  Effect.gen(function*() {
    const { store, ...continueOptions } = options
    const config = yield* AgentConfig.make(resumeConfig(checkpoint.config, options.config))
    const state = checkpoint.state
    return yield* durable<R>(sessionId, store, config, state, (plugin) =>
      Loop.resume<R>(state, {
        ...continueOptions,
        config,
        plugins: [...(options.plugins ?? []), plugin],
        announce: [resumed(sessionId, state)]
      })).pipe(
        // A plugin refused its saved state before the run started: the checkpoint holds what it cannot use.
        Effect.catchTag("InvalidPluginState", (error) =>
          Effect.fail(
            new CheckpointStore.CheckpointCorrupt({
              sessionId,
              file: store.headFile(sessionId),
              problem: `state.pluginState.${error.plugin}: ${error.reason}`
            })
          ))
      )
  })

/**
 * What opens a session: what starts it when it is new (a run's options and
 * the store); when it exists, its saved config applies, with `config` on top.
 *
 * @since 0.1.0
 */
export interface OpenOptions<R = never> extends Agent.RunOptions<R> {
  readonly store: CheckpointStore.Service
}

/**
 * The result a finished session's checkpoint holds, if it has finished: saved
 * with it at its end, or, for a checkpoint that does not say (written by an
 * older version), a transcript that ends with a reply and nothing queued.
 */
const finishedResult = (
  checkpoint: CheckpointStore.Checkpoint,
  steering: Steering.Service | undefined
): RunState.RunResult | undefined => {
  const { finished, state } = checkpoint
  if (finished !== undefined) {
    const messages = state.messages.slice(finished.firstMessage)
    return { messages, state, outcome: finished.outcome, usage: state.usage }
  }
  const last = state.messages.at(-1)
  const idle = last !== undefined && last.role === "assistant" && !Message.hasToolCalls(last) &&
    state.steering.length === 0 && state.followUps.length === 0 && steering === undefined
  return idle ? { messages: [], state, outcome: naturalEnd(state), usage: state.usage } : undefined
}

const naturalEnd = (state: RunState.RunState): Outcome.Outcome =>
  state.wrapUpRequested ? Outcome.wrappedUp : Outcome.completed

/**
 * Opens a durable session, whatever state it is in: starts it when the id
 * has no checkpoint (as {@link run}), resumes it when it has not finished (as
 * {@link resume}), and returns its stored result when it has finished (no
 * run, no events: the result is the one its last run returned, its outcome,
 * messages, state and usage). So a program that opens a session is safe to
 * run again, after a crash or after the session finished.
 *
 * To go on with a finished session, give it a follow-up: {@link resume} with
 * a `steering` handle that has one queued.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CheckpointStore, Session } from "effect-agent"
 *
 * const research = Effect.gen(function*() {
 *   const store = yield* CheckpointStore.fileSystem(".sessions")
 *   return yield* Session.open("research", { store, prompt: "Research effect agents" })
 * })
 * ```
 *
 * @since 0.1.0
 */
export const open = <R = never>(
  sessionId: string,
  options: OpenOptions<R>
): Effect.Effect<RunState.RunResult, AgentError | CheckpointStore.CheckpointError, Agent.Requirements | R> =>
  Effect.gen(function*() {
    const checkpoint = yield* options.store.load(sessionId).pipe(
      Effect.catchTag("CheckpointMissing", () => Effect.succeed(undefined))
    )
    if (checkpoint === undefined) return yield* run<R>({ ...options, id: sessionId })
    return finishedResult(checkpoint, options.steering) ?? (yield* resumeFrom<R>(sessionId, checkpoint, options))
  })
