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
 * - while a sub-agent runs (`Agent.asTool`): after each of its turns and
 *   around each of its tool calls, with the sub-agent's state inside the
 *   session's, under the call that runs it; a resumed session calls it
 *   again, and the sub-agent continues from that state rather than starting
 *   over;
 * - when a handoff tool (`Agent.handoff`) passes the session on: the state
 *   the agent handed off to starts from, with the agent's name and config
 *   (instead of a finished `HandedOff`); the session then runs in that agent,
 *   and a resumed session goes on in it (give its definition in `agents`);
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
 * import { CheckpointStore, Session } from "effect-agent/session"
 *
 * // the first time it starts the session; after a crash it resumes it; once it has finished, its result
 * const tidy = Session.open("task-42", { prompt: "Tidy up the repository" }).pipe(
 *   // where checkpoints are kept is a Layer: on files here, `CheckpointStore.layerMemory` in tests
 *   Effect.provide(CheckpointStore.layerFileSystem(".sessions"))
 * )
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Agent from "../Agent.ts"
import * as AgentConfig from "../AgentConfig.ts"
import type { AgentError } from "../AgentError.ts"
import type * as AgentEvent from "../AgentEvent.ts"
import * as Message from "../Message.ts"
import * as Outcome from "../Outcome.ts"
import * as RunState from "../RunState.ts"
import type * as Steering from "../Steering.ts"
import type * as SubAgent from "../SubAgent.ts"
import * as Backend from "../Backend.ts"
import * as CheckpointStore from "./CheckpointStore.ts"
import { durable } from "./internal/checkpointer.ts"

/**
 * What a session needs: a run's requirements and the store it keeps its
 * checkpoints in, a Layer (`CheckpointStore.layerFileSystem(dir)`,
 * `CheckpointStore.layerMemory`).
 *
 * @since 0.1.0
 * @category models
 */
export type Requirements = Agent.Requirements | CheckpointStore.CheckpointStore

/**
 * What starts a session: a run's options and the session id. The store is
 * the `CheckpointStore` service.
 *
 * @since 0.1.0
 * @category options
 */
export interface RunOptions<R = never, A = never> extends Agent.RunOptions<R, A> {
  /** The session id: 1 to 128 letters, digits, `.`, `_` or `-`, not starting with `.`. */
  readonly id: string
}

/**
 * What a resumed session can change. The config is the one saved with the
 * session, with the settings given here on top.
 *
 * @since 0.1.0
 * @category options
 */
export interface ResumeOptions<R = never, A = never> extends Agent.ContinueOptions<R, A> {
  /**
   * The agents the session may have been handed off to (`Agent.handoff`): a session whose checkpoint names one
   * goes on in it, with its tools, model and plugins; one this list lacks fails with `CheckpointAgentUnknown`.
   */
  readonly agents?: ReadonlyArray<SubAgent.Definition<string, SubAgent.InputSchema, unknown>> | undefined
}

/**
 * Starts a durable session: `Agent.run` with a checkpoint at the start and
 * as the run goes (see the module documentation). Fails with
 * `CheckpointExists` when the id already has a checkpoint (resume it, or
 * remove it first; {@link open} does whichever applies).
 *
 * @since 0.1.0
 * @category running
 */
export const run = <R = never, A = never>(
  options: RunOptions<R, A>
): Effect.Effect<RunState.RunResult<A>, AgentError | CheckpointStore.CheckpointError, Requirements | R> =>
  Effect.gen(function*() {
    const { id } = options
    const store = yield* CheckpointStore.CheckpointStore
    const config = yield* Agent.validate(options)
    const runId = options.runId ?? globalThis.crypto.randomUUID()
    const state = RunState.fromPrompt({ ...options, runId })
    const created = yield* store.create(id, { state, config })
    return yield* durable(id, store, { agent: undefined, config }, state, (execution) =>
      Agent.run({ ...options, runId, config }).pipe(
        Effect.provideService(Backend.Backend, {
          ...execution,
          announce: [{ _tag: "CheckpointSaved", sessionId: id, bytes: created.bytes }]
        })
      ))
  })

const resumeConfig = (
  saved: AgentConfig.AgentConfig | undefined,
  given: AgentConfig.Input | undefined
): AgentConfig.Input => {
  if (saved === undefined) return given ?? {}
  if (given === undefined) return saved
  const cap = given.maxTurns
  // A new cap takes its own default grace window, unless the saved one was chosen and fits under it.
  const graceKept = given.graceTurns !== undefined || cap === undefined || AgentConfig.graceCarriesOver(saved, cap)
  return {
    ...saved,
    ...(graceKept ? {} : { graceTurns: undefined }),
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
 * @category running
 */
export const resume = <R = never, A = never>(
  sessionId: string,
  options: ResumeOptions<R, A>
): Effect.Effect<RunState.RunResult<A>, AgentError | CheckpointStore.CheckpointError, Requirements | R> =>
  Effect.gen(function*() {
    const store = yield* CheckpointStore.CheckpointStore
    return yield* resumeFrom<R, A>(sessionId, yield* store.load(sessionId), options)
  })

const resumeFrom = <R, A>(
  sessionId: string,
  checkpoint: CheckpointStore.Checkpoint,
  options: ResumeOptions<R, A>
): Effect.Effect<RunState.RunResult<A>, AgentError | CheckpointStore.CheckpointError, Requirements | R> =>
  Effect.gen(function*() {
    const store = yield* CheckpointStore.CheckpointStore
    const config = yield* Agent.validate({ ...options, config: resumeConfig(checkpoint.config, options.config) })
    const state = checkpoint.state
    const agent = yield* agentOf(sessionId, checkpoint, options.agents)
    return yield* durable(sessionId, store, { agent: agent?.name, config }, state, (execution) =>
      Agent.runContinue(state, { ...options, config, agent }).pipe(
        Effect.provideService(Backend.Backend, { ...execution, announce: [resumed(sessionId, state)] })
      )).pipe(
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

const agentOf = (
  sessionId: string,
  checkpoint: CheckpointStore.Checkpoint,
  agents: ResumeOptions["agents"]
): Effect.Effect<SubAgent.Definition<string, SubAgent.InputSchema, unknown> | undefined, CheckpointStore.CheckpointAgentUnknown> => {
  const name = checkpoint.agent
  if (name === undefined) return Effect.succeed(undefined)
  const found = agents?.find((definition) => definition.name === name)
  return found !== undefined
    ? Effect.succeed(found)
    : Effect.fail(
      new CheckpointStore.CheckpointAgentUnknown({
        sessionId,
        agent: name,
        known: (agents ?? []).map((definition) => definition.name)
      })
    )
}

/**
 * What opens a session: what starts it when it is new (a run's options and
 * the store); when it exists, its saved config applies, with `config` on top.
 *
 * @since 0.1.0
 * @category options
 */
export interface OpenOptions<R = never, A = never> extends Agent.RunOptions<R, A> {
  /** The agents the session may have been handed off to (see {@link ResumeOptions}). */
  readonly agents?: ReadonlyArray<SubAgent.Definition<string, SubAgent.InputSchema, unknown>> | undefined
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
    const result: RunState.RunResult = { messages, state, outcome: finished.outcome, usage: state.usage }
    return checkpoint.agent === undefined ? result : { ...result, agent: checkpoint.agent }
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
 * import { CheckpointStore, Session } from "effect-agent/session"
 *
 * const research = Session.open("research", { prompt: "Research effect agents" }).pipe(
 *   Effect.provide(CheckpointStore.layerFileSystem(".sessions"))
 * )
 * ```
 *
 * @since 0.1.0
 * @category running
 */
export const open = <R = never, A = never>(
  sessionId: string,
  options: OpenOptions<R, A>
): Effect.Effect<RunState.RunResult<A>, AgentError | CheckpointStore.CheckpointError, Requirements | R> =>
  Effect.gen(function*() {
    const store = yield* CheckpointStore.CheckpointStore
    const checkpoint = yield* store.load(sessionId).pipe(
      Effect.catchTag("CheckpointMissing", () => Effect.succeed(undefined))
    )
    if (checkpoint === undefined) return yield* run<R, A>({ ...options, id: sessionId })
    const finished = finishedResult(checkpoint, options.steering)
    if (finished === undefined) return yield* resumeFrom<R, A>(sessionId, checkpoint, options)
    // A finished session's output is the one it saved, decoded with the Schema it was run with.
    return yield* Agent.typedResult(options.output, finished)
  })
