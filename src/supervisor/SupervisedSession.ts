/**
 * Supervised runs as durable sessions: a supervised run (`Supervisor.run`)
 * whose checkpoints go to a `CheckpointStore`, under a session id, the way a
 * plain `Session` keeps its own, so that a process stopped at any moment
 * (even killed outright) is resumed with {@link resume}: it continues in the
 * phase it was in (baseline, plan or act), with the plan iteration, the
 * approved plan, the baseline and the pending message it had, and redoes at
 * most one worker turn.
 *
 * The store's state is the worker's transcript: the agent worker's own
 * `RunState` (its journal grows by the messages of each turn, never
 * rewritten), or, for an external worker, the messages sent and the replies.
 * The supervisor's checkpoint (`Supervisor.Checkpoint`: phase, plan
 * iteration, approved plan, baseline, pending message, the external CLI's
 * resume token) rides with it, in the state's plugin state under
 * {@link key}. Loading checks both: a checkpoint that is not a supervised
 * run's (a plain session's, another program's) or whose supervisor state does
 * not decode is `CheckpointCorrupt`; nothing here overwrites or deletes a
 * checkpoint it could not read.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CheckpointStore } from "effect-agent/session"
 * import { Check, SupervisedSession } from "effect-agent/supervisor"
 *
 * const program = SupervisedSession.run({
 *   id: "fix-42",
 *   task: "Make the tests pass",
 *   checks: [Check.command("tests", "npm test")]
 * }).pipe(Effect.provide(CheckpointStore.layerFileSystem(".sessions")))
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import * as Struct from "effect/Struct"
import type * as Agent from "../Agent.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as AgentTool from "../AgentTool.ts"
import * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import * as RunState from "../RunState.ts"
import * as CheckpointStore from "../session/CheckpointStore.ts"
import type * as Sessions from "../session/Sessions.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import type * as AgentWorker from "./AgentWorker.ts"
import * as Supervisor from "./Supervisor.ts"
import * as SupervisorEvent from "./SupervisorEvent.ts"
import type * as Worker from "./Worker.ts"

/**
 * The key of the supervisor's checkpoint in the stored state's plugin state.
 *
 * @since 0.1.0
 * @category constants
 */
export const key = "effect-agent/supervisor"

/**
 * The supervisor's part of a stored checkpoint: `Supervisor.Checkpoint`
 * without the agent's state (the store's state is it), and whether the
 * store's state is the agent worker's transcript (`agent`) or the messages
 * and replies of an external worker (`external`).
 *
 * @since 0.1.0
 * @category models
 */
export const Stored = Schema.Struct({
  ...Struct.omit(Supervisor.Checkpoint.fields, ["agentState"]),
  state: Schema.Literals(["agent", "external"])
})
/**
 * @since 0.1.0
 * @category models
 */
export type Stored = typeof Stored.Type

const StoredJson = Schema.toCodecJson(Stored)
const encodeStored = Schema.encodeSync(StoredJson)
const decodeStored = Schema.decodeUnknownEffect(StoredJson, { onExcessProperty: "error" })

/** The supervisor's part as version 1 stored it: read, and migrated (`Supervisor.fromV1`). */
const StoredV1Json = Schema.toCodecJson(Schema.Struct({
  ...Struct.omit(Supervisor.CheckpointV1.fields, ["agentState"]),
  state: Schema.Literals(["agent", "external"])
}))
const decodeStoredV1 = Schema.decodeUnknownEffect(StoredV1Json, { onExcessProperty: "error" })

/** The supervisor's part of a stored checkpoint, of this version or of version 1 (migrated). */
const decodeAnyStored = (saved: unknown) =>
  decodeStored(saved).pipe(
    Effect.catch((error) =>
      typeof saved === "object" && saved !== null && "version" in saved && saved.version === 1
        ? Effect.mapError(
          Effect.map(decodeStoredV1(saved), ({ state, ...rest }): Stored => ({ ...Supervisor.fromV1(rest), state })),
          () => error
        )
        : Effect.fail(error)
    )
  )

/**
 * A supervisor's checkpoint as the store keeps it: the agent's state (or the
 * run's messages and replies) with the supervisor's part in its plugin state.
 *
 * @since 0.1.0
 * @category conversions
 */
export const toStore = (
  checkpoint: Supervisor.Checkpoint,
  transcript: ReadonlyArray<Message.Message>
): CheckpointStore.Checkpoint => {
  const { agentState, ...rest } = checkpoint
  const stored: Stored = { ...rest, state: agentState === undefined ? "external" : "agent" }
  const base = agentState ?? RunState.make({ runId: checkpoint.runId, messages: transcript })
  return { state: { ...base, pluginState: { ...base.pluginState, [key]: encodeStored(stored) } } }
}

/**
 * The supervisor's checkpoint of a stored one: `CheckpointCorrupt` when it
 * holds no supervised run, or one that does not decode.
 *
 * @since 0.1.0
 * @category conversions
 */
export const fromStore = (
  sessionId: string,
  file: string,
  checkpoint: CheckpointStore.Checkpoint
): Effect.Effect<Supervisor.Checkpoint, CheckpointStore.CheckpointCorrupt> =>
  Effect.gen(function*() {
    const { [key]: saved, ...pluginState } = checkpoint.state.pluginState
    if (saved === undefined) {
      return yield* new CheckpointStore.CheckpointCorrupt({
        sessionId,
        file,
        problem: "it holds no supervised run (a plain session's checkpoint?): it is not resumed as one"
      })
    }
    const { state, ...rest } = yield* decodeAnyStored(saved).pipe(
      Effect.mapError((error) =>
        new CheckpointStore.CheckpointCorrupt({
          sessionId,
          file,
          problem: `its supervised run does not decode: ${error.message.replace(/\n\s*/g, " ")}`
        })
      )
    )
    // The agent's state is the supervised run's, or, after a handoff, the run of the agent handed off to.
    const runId = rest.handedOff?.runId ?? rest.runId
    if (runId !== checkpoint.state.runId) {
      return yield* new CheckpointStore.CheckpointCorrupt({
        sessionId,
        file,
        problem: rest.handedOff === undefined
          ? `its supervised run ${JSON.stringify(rest.runId)} is not the run its state is for`
          : `the run ${JSON.stringify(runId)} its supervised run was handed off to is not the run its state is for`
      })
    }
    return state === "agent" ? { ...rest, agentState: { ...checkpoint.state, pluginState } } : rest
  })

/**
 * Where a supervised session's checkpoints go: `save` creates the session
 * on its first call (failing with `CheckpointExists` when the id is taken)
 * and saves over it on the others, keeping the worker's transcript (the
 * messages sent and the replies, for an external worker).
 */
const saver = (id: string, store: CheckpointStore.Service, created: boolean) => {
  let exists = created
  const transcript: Array<Message.Message> = []
  // The supervisor's saves and the agent's mid-turn saves, one at a time, each over the last.
  const lock = Semaphore.makeUnsafe(1)
  /** The supervisor's last checkpoint (between turns): what a mid-turn save goes with. */
  let last: Supervisor.Checkpoint | undefined
  /** The agent the last handoff in a turn passed the run to (its run's `AgentEnd` names it). */
  let handedTo: string | undefined
  const save = (checkpoint: Supervisor.Checkpoint): Effect.Effect<void, CheckpointStore.CheckpointError> =>
    lock.withPermit(Effect.suspend((): Effect.Effect<void, CheckpointStore.CheckpointError> => {
      const stored = toStore(checkpoint, transcript.length === 0 ? [Message.user(checkpoint.task)] : transcript)
      const done = Effect.sync(() => void (last = checkpoint))
      if (exists) return Effect.andThen(store.save(id, stored), done)
      return Effect.andThen(store.create(id, stored), Effect.andThen(done, Effect.sync(() => void (exists = true))))
    }))
  /**
   * Our loop's state in the middle of a worker turn, saved with the supervisor's last checkpoint (marked
   * `inTurn`): when the transcript grew, after each model call, and around each call that is not
   * replay-safe, as a plain `Session` saves. A save that fails is left to the supervisor's next one, which
   * fails the run with the store's error.
   */
  const midTurn: Hooks.PluginInput<ToolRegistry.ToolRegistry> = Effect.map(ToolRegistry.ToolRegistry, (registry) => {
    let saved = 0
    const unsafe = new Set<string>()
    const replaySafe = (name: string) => {
      const tool = registry.get(name)
      return tool === undefined || AgentTool.settings(tool).replaySafe
    }
    const checkpoint = (ctx: Hooks.Context) =>
      lock.withPermit(Effect.gen(function*() {
        const checkpoint = last
        if (checkpoint === undefined) return
        const state = yield* ctx.snapshot
        // Handed off in this turn: the state is the run of the agent handed off to, and the checkpoint says so.
        const handedOff = state.runId === (checkpoint.handedOff?.runId ?? checkpoint.runId) || handedTo === undefined
          ? checkpoint.handedOff
          : { agent: handedTo, runId: state.runId }
        // The supervisor's usage with the part of the turn done (a resumed turn counts only the rest).
        const base = checkpoint.agentState?.usage ?? Message.emptyUsage
        const usage = Message.addUsage(checkpoint.usage, {
          input: state.usage.input - base.input,
          output: state.usage.output - base.output,
          cacheRead: state.usage.cacheRead - base.cacheRead,
          cacheWrite: state.usage.cacheWrite - base.cacheWrite,
          reasoning: state.usage.reasoning - base.reasoning,
          ...(state.usage.cost === undefined ? {} : { cost: state.usage.cost - (base.cost ?? 0) })
        })
        const { handedOff: _, ...rest } = checkpoint
        const mid = { ...rest, usage, inTurn: true, agentState: state, ...(handedOff === undefined ? {} : { handedOff }) }
        yield* store.save(id, toStore(mid, transcript))
        saved = state.messages.length
      })).pipe(Effect.catch((error) => Effect.logWarning(`a mid-turn checkpoint was not saved: ${error.message}`)))
    const plugin: Hooks.Plugin = {
      name: "supervisedSession",
      afterTurn: (_turn, ctx) => Effect.as(checkpoint(ctx), Hooks.proceed),
      onEvent: (event, ctx) => {
        switch (event._tag) {
          case "AgentEnd":
            if (event.outcome?._tag === "HandedOff") handedTo = event.outcome.to
            return Effect.void
          case "TurnStart":
            return ctx.messages.length === saved ? Effect.void : checkpoint(ctx)
          case "ApprovalRequested":
            return checkpoint(ctx)
          case "ToolExecutionStart":
            if (replaySafe(event.toolName)) return Effect.void
            unsafe.add(event.toolCallId)
            return checkpoint(ctx)
          case "ToolExecutionEnd":
            return unsafe.delete(event.toolCallId) ? checkpoint(ctx) : Effect.void
          default:
            return Effect.void
        }
      }
    }
    return plugin
  })
  const onEvent = (event: AgentEvent.AgentEvent) =>
    Effect.sync(() => {
      const own = SupervisorEvent.of(event)
      if (own?._tag === "WorkerTurnStart") transcript.push(Message.user(own.message))
      else if (own?._tag === "WorkerTurnEnd") {
        transcript.push({ role: "assistant", content: [Message.text(own.text)], stopReason: "stop", usage: own.usage })
      }
    })
  return { save, onEvent, transcript, midTurn }
}

/**
 * What a supervised session with our own agent worker needs: a run's
 * requirements and the `CheckpointStore` its checkpoints go to.
 *
 * @since 0.1.0
 * @category models
 */
export type Requirements = Agent.Requirements | CheckpointStore.CheckpointStore

/**
 * What a supervised session is given: the options of `Supervisor.run` and a
 * session id. The store is the `CheckpointStore` service.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<R = never, P = never, A = never> extends Omit<Supervisor.Options<R, P, A>, "checkpoint"> {
  /** The session's id in the store (letters, digits, `.`, `_`, `-`). */
  readonly id: string
}

const withEvents = (
  options: { readonly onEvent?: Supervisor.Options<never>["onEvent"] },
  mine: (event: AgentEvent.AgentEvent) => Effect.Effect<void>,
  afterStart?: (start: AgentEvent.AgentEvent) => AgentEvent.AgentEvent
) => {
  const theirs = options.onEvent
  return (event: AgentEvent.AgentEvent): Effect.Effect<void> =>
    Effect.andThen(mine(event), () => {
      if (theirs === undefined) return Effect.void
      if (event._tag !== "AgentStart" || afterStart === undefined) return theirs(event)
      return Effect.andThen(theirs(event), theirs(afterStart(event)))
    })
}

/** Our loop's options with the mid-turn saves among its plugins (a worker given by the caller has none). */
const withMidTurn = <R>(
  agent: AgentWorker.Options<R> | undefined,
  midTurn: Hooks.PluginInput<ToolRegistry.ToolRegistry>
): AgentWorker.Options<R | ToolRegistry.ToolRegistry> => ({ ...agent, plugins: [...(agent?.plugins ?? []), midTurn] })

/**
 * Runs a new supervised session: `Supervisor.run` saving its checkpoints
 * under `id` (from its start, before the baseline). Fails with
 * `CheckpointExists` when the id is taken.
 *
 * @since 0.1.0
 * @category running
 */
export const run: {
  <R = never, P = never, A = never>(
    options: Options<R, P, A> & { readonly worker: Worker.Worker<R> }
  ): Effect.Effect<Supervisor.Result<P, A>, Supervisor.RunError, CheckpointStore.CheckpointStore | R>
  <R = never, P = never, A = never>(
    options: Options<R, P, A>
  ): Effect.Effect<Supervisor.Result<P, A>, Supervisor.RunError, Requirements | R>
} = <R, P, A>(
  options: Options<R, P, A>
): Effect.Effect<Supervisor.Result<P, A>, Supervisor.RunError, Requirements | R> =>
  Effect.gen(function*() {
    const { id, ...rest } = options
    const store = yield* CheckpointStore.CheckpointStore
    const saving = saver(id, store, false)
    return yield* Supervisor.run<R | ToolRegistry.ToolRegistry, P, A>({
      ...rest,
      agent: withMidTurn(rest.agent, saving.midTurn),
      onEvent: withEvents(options, saving.onEvent),
      checkpoint: { save: saving.save }
    })
  })

/**
 * Resumes a supervised session from its last checkpoint: the same options
 * as the run that started it (the checks, the worker, the limits: they are
 * not in the checkpoint; the task is), and the run opens with
 * `SessionResumed` after its `AgentStart`. Fails with the store's errors
 * (`CheckpointMissing`, `CheckpointCorrupt`, `CheckpointVersionMismatch`)
 * when there is nothing to resume, and with `CheckpointCorrupt` when the
 * checkpoint holds no supervised run.
 *
 * A finished session (one that ended after an act turn; not a rejected
 * plan) given a follow-up on its `steering` goes on with it, as a plain
 * `Session` does: a new act round whose message is the follow-up, the checks
 * after it, within the limits given now; its outcome is that round's ending.
 * With nothing queued it ends as it ended (`Converged`) or goes on from
 * where it was (see `Supervisor.Checkpoint`'s `outcome`).
 *
 * A session whose worker's run was handed off (`Agent.handoff`) goes on in
 * the agent handed off to: give its definition in `agent.agents` (a turn
 * without it fails with `ConfigError`; a session that ends without a turn
 * needs none).
 *
 * @since 0.1.0
 * @category running
 */
export const resume: {
  <R = never, P = never, A = never>(
    options: Omit<Options<R, P, A>, "task"> & { readonly worker: Worker.Worker<R> }
  ): Effect.Effect<Supervisor.Result<P, A>, Supervisor.RunError, CheckpointStore.CheckpointStore | R>
  <R = never, P = never, A = never>(
    options: Omit<Options<R, P, A>, "task">
  ): Effect.Effect<Supervisor.Result<P, A>, Supervisor.RunError, Requirements | R>
} = <R, P, A>(
  options: Omit<Options<R, P, A>, "task">
): Effect.Effect<Supervisor.Result<P, A>, Supervisor.RunError, Requirements | R> =>
  Effect.gen(function*() {
    const { id, ...rest } = options
    const store = yield* CheckpointStore.CheckpointStore
    const loaded = yield* load(id)
    const saving = saver(id, store, true)
    if (loaded.agentState === undefined) saving.transcript.push(...(yield* store.load(id)).state.messages)
    const resumed = (start: AgentEvent.AgentEvent): AgentEvent.AgentEvent => ({
      _tag: "SessionResumed",
      runId: start.runId,
      turn: start.turn,
      timestamp: start.timestamp,
      sessionId: id,
      resumedAtTurn: loaded.turns + 1,
      restored: {
        messages: loaded.agentState?.messages.length ?? saving.transcript.length,
        turns: loaded.turns,
        usage: loaded.usage,
        elapsedMs: loaded.elapsedMs,
        steering: 0,
        followUps: loaded.pendingFollowUps?.length ?? 0,
        pendingApprovals: 0
      }
    })
    return yield* Supervisor.run<R | ToolRegistry.ToolRegistry, P, A>({
      ...rest,
      agent: withMidTurn(rest.agent, saving.midTurn),
      task: loaded.task,
      onEvent: withEvents(options, saving.onEvent, resumed),
      checkpoint: { resume: loaded, save: saving.save }
    })
  })

/**
 * The supervisor's checkpoint of a session: the store's errors, and
 * `CheckpointCorrupt` when it holds no supervised run.
 *
 * @since 0.1.0
 * @category running
 */
export const load = (
  id: string
): Effect.Effect<Supervisor.Checkpoint, CheckpointStore.LoadError, CheckpointStore.CheckpointStore> =>
  Effect.gen(function*() {
    const store = yield* CheckpointStore.CheckpointStore
    return yield* fromStore(id, store.headFile(id), yield* store.load(id))
  })

/**
 * What a `Sessions` layer's supervisor is made of: `Supervisor.Options`
 * without what the layer gives each session (the task, the worker's
 * settings, the typed output, events, steering, checkpoints), and the tools
 * the plan phase may use besides the built-in readers.
 *
 * @since 0.1.0
 * @category sessions
 */
export interface Supervision<R = never> extends
  Omit<
    Supervisor.Options<R, unknown, unknown>,
    "task" | "agent" | "runId" | "output" | "onEvent" | "steering" | "checkpoint"
  >
{
  /** The tools (besides the built-in readers) the worker may use in the plan phase. */
  readonly readOnlyTools?: ReadonlyArray<string> | undefined
}

/**
 * A supervisor for a `Sessions` layer (`Sessions.layer({ supervisors })`): a
 * session started under its name runs as a supervised session, its
 * checkpoints in the layer's `CheckpointStore`. The worker (our own loop
 * unless `worker` says otherwise) runs with the layer's plugins, name and
 * agents, and the session's system prompt, config and typed output; the
 * checks, the worker and the limits are the supervisor's. A worker's failure
 * ends the run with `WorkerFailed` and an `AgentEnd` that says so.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { CheckpointStore, Sessions } from "effect-agent/session"
 * import { Check, SupervisedSession } from "effect-agent/supervisor"
 *
 * const tests = SupervisedSession.supervisor({
 *   checks: [Check.make("tests", Effect.succeed({ status: "pass" as const, summary: "ok" }))],
 *   maxTurns: 5
 * })
 * // sessions.start({ sessionId: "fix-1", prompt: "Make the tests pass", supervisor: "tests" })
 * const sessions = Sessions.layer({ supervisors: { tests } }).pipe(Layer.provide(CheckpointStore.layerMemory))
 * ```
 *
 * @since 0.1.0
 * @category sessions
 */
export const supervisor = <R = never>(supervision: Supervision<R>): Sessions.Supervisor<R> => ({
  owns: (checkpoint) => Object.hasOwn(checkpoint.state.pluginState, key),
  run: (session) =>
    Effect.gen(function*() {
      const { readOnlyTools, ...limits } = supervision
      const given = {
        ...limits,
        id: session.sessionId,
        agent: {
          system: session.system,
          config: session.config,
          plugins: session.plugins,
          name: session.name,
          outputRetries: session.outputRetries,
          outputMode: session.outputMode,
          agents: session.agents,
          readOnlyTools
        },
        output: session.output,
        steering: session.steering,
        onEvent: session.onEvent,
        runId: session.runId,
        record: session.record
      }
      const { task } = session
      const store = yield* CheckpointStore.CheckpointStore
      const stored = yield* store.load(session.sessionId).pipe(
        Effect.as(true),
        Effect.catchTag("CheckpointMissing", () => Effect.succeed(false))
      )
      const fresh = task !== undefined && !stored
      const result = fresh ? yield* run<R, unknown, unknown>({ ...given, task }) : yield* resume<R, unknown, unknown>(given)
      return Supervisor.runResult(result)
    }).pipe(
      // announced already (`WorkerFailed`, then an `AgentEnd` that says so): its ending is the published one
      Effect.catchTag("WorkerError", (error) => Effect.die(error))
    )
})
