/**
 * The body of a durable session: the loop (`Loop.start`, the same code path
 * as `Agent.run`), given services whose every non-deterministic step is an
 * activity with a stable name:
 *
 * - `start`: the run id and the start time;
 * - `steering/<n>`, `followUps/<n>`: the n-th poll of the inbox, drained past
 *   a watermark, so a replay sees the same messages; a steering take also
 *   reads a cancel (`DurableSession.cancel`), which ends the run there;
 * - `model/<turn>`: the turn's model call (the loop's own `Reply.streamReply`,
 *   through the `modelCall` seam): its assistant message;
 * - `tool/<turn>/<callId>`: one tool call; a batch's calls run as concurrent
 *   activities within the config's cap (the loop's own batch);
 * - `continue/<n>/<turn>/<callId>`: the `n`-th part of a call that stopped
 *   to wait for an approval one of its sub-agents asked (see `registryOf`);
 * - `decision/<key>`: the application's approval policy decides a call;
 * - `approval/<key>`: without a policy, announces an approval request (and
 *   looks whether a cancel waits), then the body waits on the
 *   `DurableDeferred` of that call (see {@link approvalKey});
 * - `idle/<k>`, `wake/<k>`: an idle session (its run ended, however) waiting for a follow-up;
 * - `end/<k>`: publishes the last events.
 *
 * The transcript is rebuilt from the activities' results when the body
 * replays. Events are published from inside activities only (see `Outbox`).
 * Every durable operation (an activity, a durable wait) is the body's own:
 * none is made inside an activity (an engine may give an activity a workflow
 * instance of its own, as `WorkflowEngine.layerMemory` does).
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { createHash } from "node:crypto"
import type * as LanguageModel from "effect/ai/LanguageModel"
import { ClusterSchema, Entity, Sharding } from "effect/cluster"
import { Activity, DurableClock, DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"
import * as Agent from "../../../Agent.ts"
import * as AgentConfig from "../../../AgentConfig.ts"
import type * as AgentEvent from "../../../AgentEvent.ts"
import { AgentError, ConfigError, ModelError, ToolFatalError } from "../../../AgentError.ts"
import * as AgentTool from "../../../AgentTool.ts"
import * as Approvals from "../../../Approvals.ts"
import * as Backend from "../../../Backend.ts"
import * as Message from "../../../Message.ts"
import * as Outcome from "../../../Outcome.ts"
import * as RunState from "../../../RunState.ts"
import type * as Steering from "../../../Steering.ts"
import * as CheckpointStore from "../../CheckpointStore.ts"
import * as SubAgent from "../../../SubAgent.ts"
import { outcomeUnknown, type Output as ToolRegistryOutput, ToolRegistry } from "../../../ToolRegistry.ts"
import type * as Sessions from "../../Sessions.ts"
import * as SessionId from "../sessionId.ts"
import { Commit } from "./commit.ts"
import * as Outbox from "./outbox.ts"
import * as StorageFailure from "./storageFailure.ts"
import {
  Answer as StoreAnswer,
  Decision as StoreDecision,
  type InboxEntry,
  type InboxKind,
  type MessageKind,
  PlanDecision,
  type Question,
  Store,
  TurnDecision
} from "./store.ts"

// -----------------------------------------------------------------------------
// The payload and the result
// -----------------------------------------------------------------------------

/**
 * What a session is asked to do.
 *
 * @internal
 */
export const Request = Schema.Struct({
  prompt: Schema.Union([Schema.String, Schema.Array(Message.Message)]),
  system: Schema.optionalKey(Schema.String),
  config: Schema.optionalKey(AgentConfig.AgentConfig),
  /** The name of the runner's typed output the session asks for. */
  output: Schema.optionalKey(Schema.String),
  /** The name of the runner's supervisor the session runs under (its prompt is then text). */
  supervisor: Schema.optionalKey(Schema.String)
})

/** @internal */
export type Request = typeof Request.Type

/**
 * The workflow's payload: small, with the session id as its idempotency key.
 *
 * @internal
 */
export const Payload = Schema.Struct({
  sessionId: SessionId.SessionId,
  version: Schema.Int,
  request: Request
})

/** @internal */
export type Payload = typeof Payload.Type

/**
 * The payload version this code writes. Branch on `payload.version` when the
 * activities change: in-flight sessions replay the new code.
 *
 * @internal
 */
export const version = 1

/**
 * How a session ended: its result, or the error a run fails with for good
 * (a model error suspends the session instead, see `DurableSession`).
 *
 * @internal
 */
export const Result = Schema.Union([
  Schema.TaggedStruct("Finished", { result: RunState.RunResult }),
  Schema.TaggedStruct("Failed", { error: AgentError }),
  // a supervised run ended by a defect it announced (its worker failed: `WorkerFailed`, then an `AgentEnd`)
  Schema.TaggedStruct("Died", { defect: Schema.String })
])

/** @internal */
export type Result = typeof Result.Type

// -----------------------------------------------------------------------------
// Activity results
// -----------------------------------------------------------------------------

const Started = Schema.Struct({ runId: Schema.String, startedAt: Schema.Finite })

/**
 * What a take of the inbox read: the messages of its kind past their
 * watermark, and the last one's place; `cancels`, the cancels it read past
 * theirs: the last one's place, and the first one's reason when the take
 * cancels the run with it (a steering take; an idle take drops them).
 */
const Taken = Schema.Struct({
  messages: Schema.Array(Message.Message),
  last: Schema.Finite,
  cancels: Schema.optionalKey(Schema.Struct({ last: Schema.Finite, reason: Schema.optionalKey(Schema.String) }))
})
type Taken = typeof Taken.Type

const Stop = Schema.Union([
  Schema.Struct({ _tag: Schema.Literal("Cancel"), reason: Schema.String }),
  Schema.Struct({ _tag: Schema.Literal("Deadline") }),
  // a halt (a guardrail that tripped during the call) with the outcome it ends the run with
  Schema.Struct({ _tag: Schema.Literal("Halt"), outcome: Outcome.Outcome, reason: Schema.String })
])

const ReplyResult = Schema.Struct({ message: Message.AssistantMessage, stopped: Schema.optionalKey(Stop) })

/**
 * A part of a tool call: its output, with what the sub-agents it ran
 * reported (`usage`: a replay that answers the part from this record adds it
 * to the run's usage, so the budgets still count what the sub-agents spent);
 * or, `waits`, the call stopped there to wait for an approval one of its
 * sub-agents asked: the approval's key and the sub-agent's run as it was.
 */
const Output = Schema.Struct({
  content: Schema.Array(Message.UserContent),
  isError: Schema.Boolean,
  /** The tool's defect, when the call ended in one (`ToolRegistry.Output`): a replay marks it as the run did. */
  defect: Schema.optionalKey(Schema.String),
  usage: Schema.optionalKey(Message.Usage),
  waits: Schema.optionalKey(Schema.Struct({ key: Schema.String, saved: Schema.optionalKey(SubAgent.Saved) }))
})
type Output = typeof Output.Type

/**
 * What a part of a tool call records: its {@link Output}, or the fatal
 * failure of its tool. A fatal failure is a result of the activity, not its
 * failure: the engine suspends a session whose activity fails (as for a
 * model error, which the supervisor resumes), where a fatal failure ends the
 * session for good, failed with it, and a replay fails it again.
 */
const PartResult = Schema.Union([Output, Schema.Struct({ fatal: ToolFatalError })])

/**
 * An approver's decision, as the deferred of a call carries it.
 *
 * @internal
 */
export const Decision = StoreDecision

/**
 * What names a call's approval in a session (its activities and its
 * deferred), so that no decision answers another call: a model may use a
 * call id again in a later turn (some servers number calls per response),
 * and a deferred, once completed, stays completed for the whole execution.
 *
 * A call of the session's own run: the session's turn and its approval id
 * (`<turn>/<approvalId>`); the turn's calls are its model call's stored
 * result, the same in every replay. A sub-agent's call (its approval id has
 * a `/`) is made inside its parent's call, every turn of the sub-agent in one
 * turn of the session; a sub-agent that its call's activity runs again from
 * its start (its runner died) asks its model again, which may answer
 * otherwise: its key also has the sub-agent's turn and the SHA-256 of the
 * call's tool and arguments (`<turn>/<approvalId>@<runTurn>.<sha256>`), so a
 * decision answers that very call, and a different call where it was asks
 * anew.
 *
 * @internal
 */
export const approvalKey = (
  sessionTurn: string,
  request: {
    readonly approvalId: string
    readonly turn?: number | undefined
    readonly toolName: string
    readonly params: unknown
  }
): string =>
  request.approvalId.includes("/")
    ? `${sessionTurn}/${request.approvalId}@${request.turn ?? 0}.${
      createHash("sha256").update(JSON.stringify([request.toolName, request.params]) ?? "").digest("hex")
    }`
    : `${sessionTurn}/${request.approvalId}`

/**
 * A turn as activities name it: `3`, or after the `hop`-th handoff `hop.3`
 * (each agent's run counts its turns from 1).
 *
 * @internal
 */
export const turnKey = (hop: number, turn: number): string => hop === 0 ? `${turn}` : `${hop}.${turn}`

/**
 * The deferred an approval of a call completes, by its {@link approvalKey}.
 *
 * @internal
 */
export const approvalOf = (key: string) => DurableDeferred.make(`approval/${key}`, { success: Decision })

/**
 * The deferred a supervised run's question waits on, by its key (`plan/<iteration>`, `gate/<turn>`).
 *
 * @internal
 */
export const answerOf = (key: string) => DurableDeferred.make(`question/${key}`, { success: StoreAnswer })

/**
 * The deferred that wakes a session in its `k`-th idle wait.
 *
 * @internal
 */
export const wakeOf = (k: number) => DurableDeferred.make(`wake/${k}`)

/**
 * The reason a call waiting for approval is denied with when its session's
 * run is cancelled (`DurableSession.cancel`): the run then ends `Cancelled` at
 * its next step.
 *
 * @internal
 */
export const cancelDenial = (reason: string): string => `the run was cancelled: ${reason}`

/**
 * The decision a cancel gives a call it finds waiting for approval: a call of
 * the session's run ends the run there, `Cancelled` (as in process: the call
 * is "cancelled before it started"); a sub-agent's call is denied with it.
 *
 * @internal
 */
export const cancelDenialOf = (reason: string) => ({ approved: false, reason: cancelDenial(reason), cancelled: reason }) as const

// -----------------------------------------------------------------------------
// The body
// -----------------------------------------------------------------------------

/**
 * What the body is given besides the payload.
 *
 * @internal
 */
export interface Options<R> extends Sessions.AgentOptions<R> {
  /** How long a session whose run ended waits for a follow-up (durable time); none: it finishes. */
  readonly idle?: Duration.Input | undefined
  /** The supervisors a session may run under, by name (`Sessions.StartOptions.supervisor`). */
  readonly supervisors?: Readonly<Record<string, Sessions.Supervisor<R>>> | undefined
}

type Engine = WorkflowEngine.WorkflowEngine | WorkflowEngine.WorkflowInstance

/** A session's state in this run of its body. */
interface Session {
  readonly sessionId: string
  readonly store: Store["Service"]
  readonly outbox: Outbox.Outbox
  readonly engine: Context.Context<Engine>
  /**
   * The turn whose model call came last, as activities are named by it: the
   * turn, after a handoff with the handoff's number before it (`2.1`: the
   * second handoff's first turn), since each agent's run counts from 1.
   */
  turn: string
  /** How many handoffs the session's runs made (the same in every replay). */
  hop: number
  readonly polls: { steering: number; followUp: number }
  readonly watermark: { steering: number; followUp: number; cancel: number }
  idle: number
  segment: number
  /** How many questions for the operator the session asked (see `questionsOf`). */
  questions: number
  /** Set when this run of the body is interrupted (see `stopsOnAbnormalExit`). */
  stopping: boolean
  /**
   * The last place in the inbox that this run's last steering read saw (`Store.readSteering`'s `head`), when it
   * found no cancel: a take whose engine's last write saw no later place has nothing new to read.
   */
  inboxRead: number | undefined
}

const orDie = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, never, R> => Effect.orDie(effect)

/**
 * One execution of an activity's body (an activity may execute more than
 * once): the events it emits are its own (see `Outbox.Source`).
 */
interface Execution extends Outbox.Source {
  /** What the sub-agents below it spent while it ran: the usage of their replies, from their `Nested` events. */
  spent: Message.Usage
  /** For a tool call's part: how a sub-agent's call waiting for approval stops it (see `registryOf`). */
  stop: Stop | undefined
  /** Set once the call stopped: what its runs emit as they are stopped is no news (the next part goes on). */
  stopped: boolean
}

/** How a part of a tool call stops, and the approval the part continues after, if any. */
interface Stop {
  /** Completed by the first call below that waits for approval, with its key. */
  readonly asked: Deferred.Deferred<string>
  readonly resumes: { readonly key: string; readonly decision: Approvals.Decision } | undefined
}

/** The execution of an activity this fiber runs in, if any. */
const CurrentActivity = Context.Reference<Execution | undefined>("effect-agent/DurableSession/CurrentActivity", {
  defaultValue: () => undefined
})

const currentActivity = (): Execution | undefined => Fiber.getCurrent()?.getRef(CurrentActivity)

/** The usage of a sub-agent's reply, for a `Nested` event that ends one. */
const replyUsage = (event: AgentEvent.AgentEvent): Message.Usage | undefined => {
  let inner = event
  while (inner._tag === "Nested") inner = inner.event
  return inner !== event && inner._tag === "MessageEnd" && inner.message.role === "assistant"
    ? inner.message.usage
    : undefined
}

/**
 * Whether this run of the body is being stopped: it suspends, it is
 * interrupted, or its runner gave the session up (see `abandonsOnShardLoss`).
 */
const isStopping = (session: Session): boolean => {
  if (session.stopping) return true
  const instance = Context.get(session.engine, WorkflowEngine.WorkflowInstance)
  return instance.suspended || instance.interrupted
}

/**
 * The sink the loop is given: each event goes into the outbox, with the
 * activity that emitted it, if any (its id depends on it). Once this run of
 * the body is stopping, what its loop emits as it unwinds (an `AgentEnd` for
 * a run that has not ended, calls cut short) is no news: the replay emits
 * what really happens, and an activity still running would otherwise publish
 * it. (Events emitted inside an activity still count: a model call in flight
 * when its shard is handed over streams on, and its reply is kept for the
 * replay. But not those of a call that stopped to wait for an approval, see
 * `registryOf`: its next part goes on.) An event that ends a sub-agent's
 * reply adds its usage to what the activity's sub-agents spent.
 */
const sinkOf = (session: Session) => (event: AgentEvent.AgentEvent): void => {
  const execution = currentActivity()
  if (execution === undefined ? isStopping(session) : execution.stopped) return
  if (execution !== undefined) {
    const usage = replyUsage(event)
    if (usage !== undefined) execution.spent = Message.addUsage(execution.spent, usage)
  }
  Outbox.add(session.outbox, event, execution)
}

/**
 * Runs an activity as `Activity`'s own execution does, except for an
 * activity the engine answers `Suspended` without a failure: none of the
 * body's activities waits on anything durable (its waits come between
 * activities), so that answer means the engine lost the call, and the session
 * suspends as failed, for `supervise` to resume it (the replay resets the
 * call and makes it again).
 *
 * Effect 4.1's cluster engine loses one so: a run given up while it waits for
 * an activity (`abandonsOnShardLoss`, before the engine tears the entity down)
 * leaves a durable `Interrupt` of that activity's request behind, and the
 * replay, which makes the same request, has that interrupt delivered to it.
 * The engine means to make an activity aborted so again, but in a workflow
 * annotated `SuspendOnFailure` (as this one is) the abort reaches it as a plain
 * `Suspended`, which it passes on: the run suspended as waiting, and nothing
 * ever woke it. (A replay under a pending `interrupt` is answered `Suspended`
 * too, on purpose: the engine then ends the run interrupted, whatever
 * `failed` says.)
 */
const executed = <Success extends Schema.Top, Error extends Schema.Top, R>(
  activity: Activity.Activity<Success, Error, R>
) =>
  Effect.withSpan(Effect.gen(function*() {
    const engine = yield* WorkflowEngine.WorkflowEngine
    const instance = yield* WorkflowEngine.WorkflowInstance
    const result = yield* Workflow.wrapActivityResult(
      engine.activityExecute(activity, yield* Activity.CurrentAttempt),
      (result) => result._tag === "Suspended"
    )
    if (result._tag === "Complete") return yield* result.exit
    instance.failed = true
    return yield* Workflow.suspend(instance)
  }), activity.name, { captureStackTrace: false })

/**
 * An activity whose body publishes the outbox (`live`: as its events arrive,
 * see `Outbox`); when it returns a memoized result instead, what the body
 * emitted before it on its path (`call`: the call it is about; the body's
 * own events otherwise) was published already.
 */
const activity = <S extends Schema.Top, E extends Schema.Top, R>(
  session: Session,
  name: string,
  success: S,
  error: E,
  execute: Effect.Effect<S["Type"], E["Type"], R>,
  options?: {
    readonly live?: boolean | undefined
    /** Its batches linger for what comes next (see `Outbox.publishing`): the model call's. */
    readonly linger?: boolean | undefined
    /**
     * `false`: it publishes nothing, and what waits waits for the next activity (and a replay that answers from
     * its record marks nothing published): a steering take, which emits nothing and comes right before the
     * turn's model call or the run's end, each of which publishes.
     */
    readonly publishes?: boolean | undefined
    /** Made with the recorded result when the activity answers from its record rather than running. */
    readonly replayed?: ((value: S["Type"]) => Effect.Effect<void>) | undefined
    /** The call the activity is for (its events' ids, see `Outbox`). */
    readonly call?: string | undefined
    /** The name of the first activity of the call, when this one continues it (its sub-agents' events' ids). */
    readonly partOf?: string | undefined
    /**
     * On an engine that writes the events with the result (`Commit`), what waits is not published before the
     * body runs but with what the body emits: a model call's or a tool call's, which read nothing the events
     * decide. (An approval's activity reads the cancels only once its request is published: it keeps its first
     * flush.)
     */
    readonly fold?: boolean | undefined
    /**
     * On such an engine, its result (and its events) may wait for the execution's next write: a model call's,
     * which the next step reads and nothing outside the run sees until then (what publishes its events, or
     * the intent record of a call that must not run twice, writes it first). A crash before that write loses
     * the call, and the replay makes it again.
     */
    readonly mayWait?: boolean | undefined
  }
) =>
  Effect.suspend(() => {
    if (currentActivity() !== undefined) {
      return Effect.die(`effect-agent: the durable session's activity ${name} was asked for inside another activity`)
    }
    const mark = session.outbox.emitted.length
    let ran = false
    const publish = (entries: ReadonlyArray<Outbox.Entry>) => orDie(session.store.publish(session.sessionId, entries))
    const body = Effect.flatMap(Effect.serviceOption(Commit), (offered) =>
      Effect.suspend(() => {
        ran = true
        const execution: Execution = {
          name,
          call: options?.partOf ?? name,
          counts: new Map(),
          spent: Message.emptyUsage,
          stop: undefined,
          stopped: false
        }
        const commit = committing(session, offered)
        let published: Effect.Effect<S["Type"], E["Type"], R>
        if (options?.publishes === false || options?.mayWait === true) commit?.mayWait()
        if (options?.publishes === false) {
          published = execute
        } else if (commit === undefined) {
          published = Outbox.publishing(session.outbox, publish, execute, options)
        } else {
          const fold = options?.fold === true
          published = Outbox.publishing(
            session.outbox,
            (entries) => commit.publish(session.sessionId, entries),
            execute,
            {
              live: options?.live === true || fold,
              linger: options?.linger === true || fold,
              first: !fold,
              last: (entries) => commit.withResult(session.sessionId, entries)
            }
          )
        }
        return Effect.provideService(published, CurrentActivity, execution)
      }))
    // The call itself dies when the engine cannot store the request (the database is away): the loop would
    // take that for the tool's own crash, so it is made again until the storage is back (or the run is given up).
    return Effect.tap(
      stopsOnAbnormalExit(
        session,
        StorageFailure.ridingOut(executed(Activity.make({ name, success, error, execute: body })))
      ),
      (value) =>
        Effect.suspend(() => {
          if (ran) return Effect.void
          if (options?.publishes !== false) Outbox.skipTo(session.outbox, mark, options?.call ?? "-")
          return options?.replayed?.(value) ?? Effect.void
        })
    )
  })

/**
 * The engine's `Commit`, when it writes this session's store (the same database client): the body then hands it
 * the events of the activity it executes (see `Commit`).
 */
const committing = (session: Session, offered: Option.Option<Commit["Service"]>): Commit["Service"] | undefined =>
  Option.isSome(offered) && offered.value.database !== undefined && offered.value.database === session.store.database
    ? offered.value
    : undefined

/**
 * Writes what waits for the execution's next write (a model call's result and events, see `Commit`), where the
 * engine keeps one: before an act that must find the turn's decision kept (a call that must not run twice).
 */
const settle = (session: Session): Effect.Effect<void> =>
  Effect.flatMap(Effect.serviceOption(Commit), (offered) => {
    const commit = committing(session, offered)
    return commit === undefined ? Effect.void : commit.publish(session.sessionId, [])
  })

/**
 * Notes that this run of the body is being stopped (it suspends, its runner
 * gives the session up, or an activity died: the storage went away, and the
 * session suspends): the loop then ends abnormally and drains the inbox, and
 * those polls must not become activities. One would take the name the
 * replay's poll needs; on a runner releasing its shards, it would wait for
 * the entity being stopped, which waits for it. (A typed failure is no stop:
 * a tool's fatal error ends the session for good, with its events.)
 */
const stopsOnAbnormalExit = <A, E, R>(session: Session, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.onExit(effect, (exit) =>
    Effect.sync(() => {
      if (exit._tag === "Failure" && (Cause.hasInterrupts(exit.cause) || Cause.hasDies(exit.cause))) {
        session.stopping = true
      }
    }))

/** The messages of a kind in the inbox past the session's watermark of that kind (read in an activity). */
const readInbox = (session: Session, kind: InboxKind) =>
  orDie(session.store.readInbox(session.sessionId, kind, session.watermark[kind]))

const lastOf = (entries: ReadonlyArray<InboxEntry>, after: number): number =>
  entries.reduce((last, entry) => Math.max(last, entry.seq), after)

/** The messages of a kind past its watermark, as a take's result. */
const messagesOf = (session: Session, kind: MessageKind): Effect.Effect<Taken> =>
  Effect.map(readInbox(session, kind), (entries) => ({
    messages: entries.map((entry) => entry.message),
    last: lastOf(entries, session.watermark[kind])
  }))

/**
 * A take of the inbox, as the activity `name` (`read`, its body): moves the
 * watermarks past what it read, from its record on a replay.
 */
const takeInbox = (session: Session, kind: MessageKind, name: string, read: Effect.Effect<Taken>) =>
  Effect.map(
    // On an engine that writes events with results (see `Commit`), a take's result and the events before it wait
    // for the execution's next write: it reads, and what it read is read again by a replay that lost it.
    activity(session, name, Taken, Schema.Never, read, { publishes: kind !== "steering", fold: true, mayWait: true }),
    (taken) => {
      session.watermark[kind] = taken.last
      if (taken.cancels !== undefined) session.watermark.cancel = taken.cancels.last
      return taken
    }
  )

/**
 * A steering take's body: a cancel past the cancel watermark, if any, cancels
 * the run (`cancelled`, not yet done), and the take gives no steering: what
 * waits stays in the inbox, and the run's last take (its end drains the inbox)
 * returns it undelivered in the run's state, as a cancel in this process leaves
 * it. Otherwise the steering messages past their watermark.
 */
const steeringTake = (session: Session, cancelled: Deferred.Deferred<string>): Effect.Effect<Taken> =>
  Effect.suspend(() => {
    if (Deferred.isDoneUnsafe(cancelled)) return messagesOf(session, "steering")
    const readSteering = session.store.readSteering
    if (readSteering !== undefined) {
      const after = { cancel: session.watermark.cancel, steering: session.watermark.steering }
      const read = Effect.map(orDie(readSteering(session.sessionId, after)), ({ cancels, head, steering }): Taken => {
        session.inboxRead = cancels.length === 0 ? head : undefined
        return cancels.length === 0
          ? { messages: steering.map((entry) => entry.message), last: lastOf(steering, after.steering) }
          : {
            messages: [],
            last: after.steering,
            cancels: { last: lastOf(cancels, after.cancel), reason: Message.textOf(cancels[0]!.message) }
          }
      })
      // On an engine that reads the inbox's last place with its writes (see `Commit`): when nothing came after
      // what this run read last, there is nothing to read (a take right after a turn's write, each turn).
      return Effect.flatMap(Effect.serviceOption(Commit), (offered) => {
        const head = committing(session, offered)?.inboxHead(session.sessionId)
        const seen = session.inboxRead
        return head !== undefined && seen !== undefined && head <= seen
          ? Effect.succeed({ messages: [], last: after.steering })
          : read
      })
    }
    return Effect.flatMap(readInbox(session, "cancel"), (cancels) =>
      cancels.length === 0
        ? messagesOf(session, "steering")
        : Effect.succeed({
          messages: [],
          last: session.watermark.steering,
          cancels: { last: lastOf(cancels, session.watermark.cancel), reason: Message.textOf(cancels[0]!.message) }
        }))
  })

/**
 * The `k`-th idle take's body: records the session's idle wait, then drops the
 * cancels kept before it (they came when no run was in flight to take them,
 * or too late for the run that ended: a cancel never reaches the session's
 * next run, and none is kept once the wait is recorded, see
 * `Store.appendCancel`), and reads the follow-ups. When there are some, the
 * session goes on at once: it no longer waits.
 */
const idleTake = (session: Session, k: number): Effect.Effect<Taken> =>
  Effect.gen(function*() {
    // the run ended: a question of its left unanswered answers nothing any more
    yield* orDie(session.store.closeQuestions(session.sessionId))
    yield* orDie(session.store.setWaiting(session.sessionId, k))
    const cancels = yield* readInbox(session, "cancel")
    const taken = yield* messagesOf(session, "followUp")
    if (taken.messages.length > 0) yield* orDie(session.store.setWaiting(session.sessionId, undefined))
    return cancels.length === 0 ? taken : { ...taken, cancels: { last: lastOf(cancels, session.watermark.cancel) } }
  })

/**
 * The reason of a cancel that waits in the inbox, if any: it stays there (the
 * run's next steering take reads it).
 */
const cancelWaiting = (session: Session): Effect.Effect<string | undefined> =>
  Effect.map(readInbox(session, "cancel"), (cancels) => {
    const first = cancels[0]
    return first === undefined ? undefined : Message.textOf(first.message)
  })

/**
 * The decision on a call that waits for approval (by its key): the activity
 * `approval/<key>` publishes what was emitted before it (the request), then
 * looks whether a cancel waits; if one does, the call is denied with it at
 * once. Otherwise the body waits on the call's deferred, which
 * `DurableSession.approve` completes, or `DurableSession.cancel` with a denial
 * (a cancel that came before the request was published is the one this
 * activity sees). Either way the run then ends `Cancelled` at its next
 * steering take, which reads the cancel.
 */
const awaitDecision = (session: Session, key: string, call: string) =>
  Effect.flatMap(
    activity(session, `approval/${key}`, Schema.UndefinedOr(Schema.String), Schema.Never, cancelWaiting(session), {
      call
    }),
    (cancel) =>
      cancel === undefined
        ? stopsOnAbnormalExit(session, DurableDeferred.await(approvalOf(key)))
        : Effect.succeed(cancelDenialOf(cancel))
  )

/**
 * A decision as the loop takes it: a cancel's, on a call of the session's run, ends the run there (`cancelled`
 * completed, the wait given up: the loop's stops answer the call), as the run's cancel does in process.
 */
const stopsOnCancel = (
  decision: typeof Decision.Type,
  cancelled: Deferred.Deferred<string>
): Effect.Effect<Approvals.Decision> =>
  "cancelled" in decision && decision.cancelled !== undefined
    ? endsByCancel(cancelled, decision.cancelled)
    : Effect.succeed(decision)

/**
 * Ends the run where it waits, as its cancel does: `cancelled` completed, the wait given up (the race the loop
 * or the supervisor makes with the run's cancel answers instead).
 */
const endsByCancel = (cancelled: Deferred.Deferred<string>, reason: string): Effect.Effect<never> =>
  Effect.andThen(Deferred.succeed(cancelled, reason), Effect.never)

/**
 * The inbox as the loop's `Steering` handle: each take is an activity.
 *
 * The loop moves what a take gives into its inbox in one uninterruptible step
 * (a message a handle gave up is never dropped). This take is an activity, and
 * an activity can wait for as long as its shard moves: its request goes to the
 * shard's next owner, which takes the shard only once this runner has released
 * it, and this runner releases it only once this run has ended. Uninterruptible,
 * the run never ended (the runner's abandon waited on it), the shard was never
 * released, and every session on it stalled for good. So the take is
 * interruptible: interrupting it loses nothing, as its activity is replayed
 * by its name and the inbox is read from the watermark it leaves.
 *
 * `cancelled` is the run's own (each run of the session has one): a steering
 * take that reads a cancel completes it, so the loop ends the run `Cancelled`
 * with its reason at its next step (before the next model call or tool call),
 * in every replay at the same take.
 */
const steeringOf = (session: Session, cancelled: Deferred.Deferred<string>): Steering.Service => {
  const instance = Context.get(session.engine, WorkflowEngine.WorkflowInstance)
  const poll = (kind: MessageKind) =>
    Effect.suspend(() => {
      // A run that suspends ends its loop, which drains the inbox: that is no poll (the replay makes it).
      if (session.stopping || instance.suspended || instance.interrupted) return Effect.succeed([])
      const n = session.polls[kind]++
      const take = takeInbox(
        session,
        kind,
        `${kind}/${n}`,
        kind === "steering" ? steeringTake(session, cancelled) : messagesOf(session, kind)
      )
      return Effect.interruptible(Effect.provideContext(
        Effect.flatMap(take, (taken) =>
          taken.cancels?.reason === undefined
            ? Effect.succeed(taken.messages)
            : Effect.as(Deferred.succeed(cancelled, taken.cancels.reason), taken.messages)),
        session.engine
      ))
    })
  const append = (kind: MessageKind) => (message: string | Message.Message) =>
    session.store.appendInbox(session.sessionId, kind, typeof message === "string" ? Message.user(message) : message)
      .pipe(
        Effect.asVoid,
        // a full inbox is the handle's own refusal; the store failing is the engine's (see `orDie`)
        Effect.catchTags({ DurableStoreError: Effect.die, InvalidSessionId: Effect.die })
      )
  return {
    steer: append("steering"),
    followUp: append("followUp"),
    cancel: (reason = "cancelled") => Effect.asVoid(Deferred.succeed(cancelled, reason)),
    steeringMode: "all",
    followUpMode: "all",
    takeSteering: poll("steering"),
    takeFollowUps: poll("followUp"),
    cancelled
  }
}

/** The turn's model call as the activity `model/<turn>`: its deltas are published as they arrive. */
const modelCallOf = (session: Session): Backend.ModelCall => (turn, call) => {
  session.turn = turnKey(session.hop, turn)
  const memoized = activity(
    session,
    `model/${session.turn}`,
    ReplyResult,
    ModelError,
    Effect.map(call, (reply) =>
      reply.stopped === undefined
        ? { message: reply.message }
        : { message: reply.message, stopped: reply.stopped }),
    { live: true, linger: true, fold: true, mayWait: true }
  )
  return Effect.map(
    Effect.provideContext(memoized, session.engine),
    (result): Backend.ModelReply => ({ message: result.message, stopped: result.stopped })
  )
}

const unknownOutcome = (toolName: string): ToolRegistryOutput => ({
  content: outcomeUnknown(toolName).content,
  isError: true
})

/**
 * A part of a tool call, in its activity: the call (`invoked`), which stops
 * when a sub-agent below it asks for an approval that waits (see
 * `approvalsOf`): the part then answers `waits`, with the approval's key and
 * the sub-agent's run as it is at that moment (the call's runs are
 * interrupted, and what they emit as they are is not published). The output
 * keeps what the call's sub-agents spent while it ran.
 */
const stoppable = <R>(
  toolCallId: string,
  resumes: Stop["resumes"],
  invoked: Effect.Effect<ToolRegistryOutput, ToolFatalError, R>
): Effect.Effect<Output, ToolFatalError, R> =>
  Effect.gen(function*() {
    const execution = yield* CurrentActivity
    if (execution === undefined) return yield* Effect.die("effect-agent: a tool call's part ran outside its activity")
    const asked = yield* Deferred.make<string>()
    execution.stop = { asked, resumes }
    const stopped = Effect.flatMap(Deferred.await(asked), (key) =>
      Effect.map(SubAgent.inFlight(toolCallId), (saved): Output => {
        execution.stopped = true
        return { content: [], isError: false, waits: saved === undefined ? { key } : { key, saved } }
      }))
    const output: Output = yield* Effect.raceFirst(invoked, stopped)
    const spent = execution.spent
    return spent === Message.emptyUsage ? output : { ...output, usage: spent }
  })

/**
 * The registry whose every call is the activity `tool/<turn>/<callId>`. A
 * call of a tool that is not `ReplaySafe` writes its intent record first
 * (keyed by the activity's idempotency key); an activity run again that finds
 * it answers "outcome unknown" rather than acting twice. The activity records
 * what the call's sub-agents spent; a replay answered from the record adds it
 * to the run's usage (the sub-agents do not run again), so the budgets count
 * it after a suspension as before.
 *
 * A call whose sub-agent asks for an approval that waits is made in parts:
 * the part stops there, recording the sub-agent's run as it was; the body
 * waits for the decision (a durable wait of its own, never one inside an
 * activity), then makes the next part, `continue/<n>/<turn>/<callId>`, in
 * which the call continues that sub-agent run (`SubAgent.continuing`) with
 * the decision: the sub-agent does not start over, its tools and model calls
 * done before the approval are not made again, and what it emits again on
 * its way back to the call that waited (its start, the request) keeps its
 * ids, so each event is published once.
 */
const registryOf = (session: Session, base: ToolRegistry["Service"]): ToolRegistry["Service"] => ({
  tools: base.tools,
  get: base.get,
  definitions: base.definitions,
  invoke: (name, invocation) => {
    const tool = base.get(name)
    // A handoff acts on the run: made again on every replay (a record of it would not hand off).
    if (tool !== undefined && AgentTool.settings(tool).handsOff) return base.invoke(name, invocation)
    const { toolCallId } = invocation
    const turn = session.turn
    const first = `tool/${turn}/${toolCallId}`
    const once = (call: Effect.Effect<ToolRegistryOutput, ToolFatalError>) =>
      tool === undefined || AgentTool.settings(tool).replaySafe
        ? call
        : Effect.flatMap(
          Activity.idempotencyKey(first),
          (key) =>
            Effect.flatMap(
              Effect.andThen(settle(session), orDie(session.store.claimIntent(session.sessionId, key))),
              (claimed) => claimed ? call : Effect.succeed(unknownOutcome(name))
            )
        )
    const part = (
      n: number,
      resumes: Stop["resumes"],
      saved: SubAgent.Saved | undefined
    ): Effect.Effect<Output, ToolFatalError> =>
      Effect.flatMap(
        Effect.provideContext(
          activity(
            session,
            n === 0 ? first : `continue/${n}/${turn}/${toolCallId}`,
            PartResult,
            Schema.Never,
            Effect.catchTag(
              stoppable(
                toolCallId,
                resumes,
                once(
                  saved === undefined
                    ? base.invoke(name, invocation)
                    : SubAgent.continuing(toolCallId, saved)(base.invoke(name, invocation))
                )
              ),
              "ToolFatalError",
              (fatal) => Effect.succeed({ fatal })
            ),
            {
              call: toolCallId,
              partOf: first,
              fold: true,
              replayed: (output) =>
                "fatal" in output || output.usage === undefined ? Effect.void : SubAgent.countSpent(output.usage)
            }
          ),
          session.engine
        ),
        (result) => "fatal" in result ? Effect.fail(result.fatal) : Effect.succeed(result)
      )
    const from = (n: number, output: Output): Effect.Effect<ToolRegistryOutput, ToolFatalError> => {
      const waits = output.waits
      if (waits === undefined) {
        return Effect.succeed(
          output.defect === undefined
            ? { content: output.content, isError: output.isError }
            : { content: output.content, isError: output.isError, defect: output.defect }
        )
      }
      return Effect.flatMap(
        Effect.provideContext(awaitDecision(session, waits.key, toolCallId), session.engine),
        (decision) =>
          Effect.flatMap(
            part(n + 1, { key: waits.key, decision }, waits.saved),
            (next) => from(n + 1, next)
          )
      )
    }
    return Effect.flatMap(part(0, undefined, undefined), (output) => from(0, output))
  }
})

/**
 * Whether the application's `Approvals` decide in a durable session: a
 * policy (`policy`, `allowAll`, `denyAll`, a service of the application's)
 * does. An `Approvals.interactive()` handle lives in one process: its
 * decisions could not reach a session that another runner took over, so its
 * calls wait on durable deferreds instead.
 */
const decidesDurably = (service: Approvals.Service | undefined): service is Approvals.Service =>
  service !== undefined && !Approvals.isInteractive(service)

/**
 * Approvals in a durable session. With the application's policy: its
 * decision, as the activity `decision/<key>` (a replay does not ask again).
 * Without one: a durable deferred per call ({@link approvalKey}), resolved
 * by `DurableSession.approve` from any process.
 *
 * A sub-agent's call is asked inside the activity of the session's call that
 * runs the sub-agent, where no durable operation is made: a policy decides
 * it there (the activity's record keeps what followed); without one, it
 * stops that part of the call, and the body waits (see `registryOf`); the
 * next part answers it with the decision.
 */
const approvalsOf = (
  session: Session,
  app: Approvals.Service | undefined,
  cancelled: Deferred.Deferred<string>
): Approvals.Service => ({
  ...questionsOf(session, app, cancelled),
  decide: (request) =>
    Effect.suspend(() => {
      const key = approvalKey(session.turn, request)
      const execution = currentActivity()
      if (execution !== undefined) {
        if (decidesDurably(app)) return app.decide(request)
        const stop = execution.stop
        if (stop === undefined) {
          return Effect.die(`effect-agent: a call asked for approval inside the activity ${execution.name}`)
        }
        if (stop.resumes?.key === key) return Effect.succeed(stop.resumes.decision)
        return Effect.andThen(Deferred.succeed(stop.asked, key), Effect.never)
      }
      return Effect.provideContext(
        decidesDurably(app)
          ? activity(session, `decision/${key}`, Decision, Schema.Never, app.decide(request), {
            call: request.toolCallId
          })
          : Effect.flatMap(awaitDecision(session, key, request.toolCallId), (decision) =>
            stopsOnCancel(decision, cancelled)),
        session.engine
      )
    })
})

/**
 * A supervised run's questions in a durable session (`Approvals.decidePlan`,
 * `decideTurn`). With the application's policy: its answer, as the activity
 * `answer/<n>`, and none when the policy has none (the plan is approved as
 * proposed, the feedback is not gated: as in process). Without one, the
 * question is opened before it is announced, as in process: the activity
 * `ask/<n>` records it in the store, the supervisor then emits its
 * `PlanProposed` or `TurnApprovalRequested`, which the activity
 * `announce/<n>` publishes, and the body waits on the question's durable
 * deferred, answered by `DurableSession.decidePlan` / `decideTurn` from any
 * process (which find the question by its plan iteration or turn). `n`
 * counts the session's questions: a question asked again (the gate of a run
 * resumed after it was interrupted there) is a new one.
 */
const questionsOf = (
  session: Session,
  app: Approvals.Service | undefined,
  cancelled: Deferred.Deferred<string>
): Pick<Approvals.Service, "decidePlan" | "decideTurn" | "openPlan" | "openTurn"> => {
  // A turn's feedback answered `Interrupt` ends the run as a cancel does: in process the run is interrupted (its
  // session resumed later); a workflow interrupted by its own body would end for good, its session with it.
  const cancelling = (reason: string) => endsByCancel(cancelled, reason)
  const interrupting = (decision: Approvals.TurnDecision): Effect.Effect<Approvals.TurnDecision> =>
    decision._tag === "Interrupt" ? cancelling("interrupted by the operator") : Effect.succeed(decision)
  const inEngine = <A, E>(effect: Effect.Effect<A, E, Engine>) => Effect.provideContext(effect, session.engine)
  /** Records the question; answers how to wait for its answer, once it is announced. */
  const open = (question: Question) =>
    Effect.suspend(() => {
      const key = `${session.questions++}`
      return Effect.as(
        inEngine(activity(session, `ask/${key}`, Schema.Void, Schema.Never, orDie(session.store.ask(session.sessionId, key, question)))),
        inEngine(Effect.andThen(
          activity(session, `announce/${key}`, Schema.Void, Schema.Never, Effect.void),
          stopsOnAbnormalExit(session, DurableDeferred.await(answerOf(key)))
        ))
      )
    })
  const answered = <A>(schema: Schema.Codec<A, unknown>, decide: Effect.Effect<A>) =>
    Effect.suspend(() =>
      inEngine(activity(session, `answer/${session.questions++}`, schema, Schema.Never, decide))
    )
  if (decidesDurably(app)) {
    const { decidePlan, decideTurn } = app
    return {
      decidePlan: decidePlan === undefined ? undefined : (request) => answered(PlanDecision, decidePlan(request)),
      decideTurn: decideTurn === undefined ? undefined : (request) =>
        Effect.flatMap(answered(TurnDecision, decideTurn(request)), interrupting)
    }
  }
  const planQuestion = (request: Approvals.PlanRequest): Question => {
    const { iteration, plan, runId } = request
    // its typed value, when it is JSON (what the store keeps)
    const value = request.value === undefined ? Option.none() : encodeJson(request.value)
    return { plan: { runId, plan, iteration, ...(Option.isSome(value) ? { value: request.value } : {}) } }
  }
  const openPlan = (request: Approvals.PlanRequest) =>
    Effect.map(open(planQuestion(request)), (answer) =>
      Effect.flatMap(answer, (answer): Effect.Effect<Approvals.PlanDecision> =>
        "plan" in answer
          ? Effect.succeed(answer.plan)
          : cancelling("cancelled" in answer ? answer.cancelled : "the plan was answered as a turn")))
  const openTurn = (request: Approvals.TurnRequest) =>
    Effect.map(open({ turn: { runId: request.runId, turn: request.turn, feedback: request.feedback } }), (answer) =>
      Effect.flatMap(answer, (answer) =>
        "turn" in answer
          ? interrupting(answer.turn)
          : cancelling("cancelled" in answer ? answer.cancelled : "the feedback was answered as a plan")))
  return {
    openPlan,
    openTurn,
    decidePlan: (request) => Effect.flatten(Effect.scoped(openPlan(request))),
    decideTurn: (request) => Effect.flatten(Effect.scoped(openTurn(request)))
  }
}

const encodeJson = Schema.encodeUnknownOption(Schema.fromJsonString(Schema.Unknown))


/** The supervisor the session names, among the runner's. */
const supervisorOf = <R>(options: Options<R>, name: string) =>
  options.supervisors !== undefined && Object.hasOwn(options.supervisors, name) ? options.supervisors[name] : undefined

/**
 * A supervised session's runs under `supervisor`: opened with the task, then each resumed (no task) with the
 * follow-ups it goes on with. Its checkpoints live in memory as long as this run of the body (a replay rebuilds
 * them from the activities' records, as it rebuilds the runs); its events are the supervisor's, the worker's
 * runs' among them.
 */
const supervisedRun = <R>(
  supervisor: Sessions.Supervisor<R>,
  session: Omit<Sessions.SupervisedRun<R>, "task" | "steering">
) => {
  const checkpoints = CheckpointStore.memory()
  return (task: string | undefined, followUps: ReadonlyArray<Message.Message>, steering: Steering.Service) =>
    supervisor.run({ ...session, task, steering: queued(steering, followUps) }).pipe(
      Effect.provideService(CheckpointStore.CheckpointStore, checkpoints),
      // kept in memory: a checkpoint that cannot be kept is a bug, not the session's ending
      Effect.catch((error) => isAgentError(error) ? Effect.fail(error) : Effect.die(error))
    )
}

const isAgentError = Schema.is(AgentError)

/**
 * Whether a run that died announced its ending: its last event is a top-level `AgentEnd` carrying the defect,
 * and this run of the body is not being stopped (a suspension, a storage failure: the replay goes on).
 */
const announcedDefect = (session: Session, cause: Cause.Cause<unknown>): boolean => {
  if (isStopping(session) || Cause.hasInterrupts(cause) || !Cause.hasDies(cause)) return false
  const last = session.outbox.emitted.at(-1)?.entry.event
  return last !== undefined && last._tag === "AgentEnd" && last.defect !== undefined
}

/** A supervised session's steps kept as activities (see `Sessions.SupervisedRun.record`). */
const recorderOf = (session: Session): Sessions.Recorder => {
  // a name given again (a run resumed by a follow-up counts its own steps from 0) is its own step: `name#n`
  const seen = new Map<string, number>()
  return (name, schema, step) =>
    Effect.suspend(() => {
      const n = seen.get(name) ?? 0
      seen.set(name, n + 1)
      return Effect.provideContext(
        activity(session, n === 0 ? name : `${name}#${n}`, schema, Schema.Never, step),
        session.engine
      )
    })
}

/**
 * The session's steering, with follow-ups taken already (an idle wait's, or what the last run left undelivered)
 * given first: a resumed supervised run takes them as its next round's message.
 */
const queued = (steering: Steering.Service, followUps: ReadonlyArray<Message.Message>): Steering.Service => {
  if (followUps.length === 0) return steering
  let waiting = followUps
  return {
    ...steering,
    takeFollowUps: Effect.suspend(() => {
      if (waiting.length === 0) return steering.takeFollowUps
      const taken = waiting
      waiting = []
      return Effect.succeed(taken)
    })
  }
}

/** The agent a session was handed off to, among those the runner knows. */
const agentOf = <R>(options: Options<R>, name: string | undefined) =>
  name === undefined ? undefined : options.agents?.find((agent) => agent.name === name)

/**
 * Waits for a follow-up (durably, up to `idle`): the messages, or none when the wait ran out.
 */
const awaitFollowUp = Effect.fnUntraced(function*(session: Session, idle: Duration.Duration) {
  const k = session.idle++
  const arrived = (yield* takeInbox(session, "followUp", `idle/${k}`, idleTake(session, k))).messages
  if (arrived.length > 0) return arrived
  const woke = yield* DurableDeferred.raceAll({
    name: `idle/${k}`,
    success: Schema.Boolean,
    error: Schema.Never,
    effects: [
      Effect.as(DurableDeferred.await(wakeOf(k)), true),
      Effect.as(DurableClock.sleep({ name: `idle/${k}`, duration: idle, inMemoryThreshold: Duration.zero }), false)
    ]
  })
  if (!woke) return []
  const taken = yield* takeInbox(
    session,
    "followUp",
    `wake/${k}`,
    Effect.andThen(orDie(session.store.setWaiting(session.sessionId, undefined)), messagesOf(session, "followUp"))
  )
  return taken.messages
})

/**
 * How often a running body checks that its runner still holds its shard.
 */
const shardCheckInterval = Duration.seconds(1)

/**
 * On a cluster, ends this run of the body, abandoned, once its runner no
 * longer holds the session's shard: the shard moved to another runner, or its
 * lock was lost (the database restarted: a lock lives in a database session).
 *
 * Effect 4.1 releases such a shard like any moving shard: it waits, up to
 * `entityTerminationTimeout`, for the entities on it to finish. A workflow's
 * run never finishes by itself there: its next activity goes to a shard no
 * runner holds until this one is released (and after a lost lock, the
 * replies of the activities in flight are fenced off), so every session on
 * the shard stalled for the whole timeout. An interrupt annotated
 * `ClusterSchema.Abandon` is the engine's own way to end a run that "must
 * continue under another owner": it writes no reply, closes the run's local
 * resources without running its durable finalizers, and leaves the request
 * for the shard's next owner, which replays it. (If the shard turns out to be
 * held again, the engine runs the request again here.) The activities in
 * flight are separate requests and run on: their results are stored while
 * the lock is held, so a shard handed over keeps them.
 */
const abandonsOnShardLoss = Effect.fnUntraced(function*(session: Session) {
  const sharding = yield* Effect.serviceOption(Sharding.Sharding)
  const address = yield* Effect.serviceOption(Entity.CurrentAddress)
  if (Option.isNone(sharding) || Option.isNone(address)) return
  const shardId = address.value.shardId
  const body = yield* Effect.withFiber((fiber) => Effect.succeed(fiber))
  yield* Effect.sync(() => sharding.value.hasShardId(shardId)).pipe(
    Effect.repeat({ while: (held) => held, schedule: Schedule.spaced(shardCheckInterval) }),
    Effect.andThen(Effect.suspend(() => {
      session.stopping = true
      return Fiber.interruptAs(body, body.id, ClusterSchema.Abandon.annotation)
    })),
    Effect.forkChild
  )
})

/**
 * The body of a session's workflow.
 *
 * @internal
 */
export const make = <R>(options: Options<R>) =>
  Effect.fnUntraced(function*(payload: Payload, _executionId: string) {
    const store = yield* Store
    const engine = yield* Effect.context<Engine>()
    const approvals = Option.getOrUndefined(yield* Effect.serviceOption(Approvals.Approvals))
    const session: Session = {
      sessionId: payload.sessionId,
      store,
      outbox: Outbox.make(),
      engine,
      turn: "0",
      hop: 0,
      polls: { steering: 0, followUp: 0 },
      watermark: { steering: 0, followUp: 0, cancel: 0 },
      idle: 0,
      segment: 0,
      questions: 0,
      stopping: false,
      inboxRead: undefined
    }
    yield* abandonsOnShardLoss(session)
    const started = yield* activity(
      session,
      "start",
      Started,
      Schema.Never,
      Effect.flatMap(Clock.currentTimeMillis, (startedAt) =>
        Effect.as(orDie(store.register(payload.sessionId, startedAt)), {
          runId: globalThis.crypto.randomUUID(),
          startedAt
        })),
      // (on an engine that writes events with results, it goes with the first write: nothing is out before it)
      { fold: true, mayWait: true }
    )
    const now = yield* Clock.currentTimeMillis
    const { request } = payload
    const output = request.output === undefined ? undefined : options.outputs?.[request.output]
    const runOptions: Agent.ContinueOptions<R, unknown> = {
      config: request.config,
      name: options.name,
      plugins: options.plugins,
      output,
      outputRetries: options.outputRetries,
      outputMode: options.outputMode
    }
    // Through the front door: the model calls are activities, every event goes to the outbox, and a handoff
    // numbers the turns of the agent it starts apart (their activities' names).
    const sink = sinkOf(session)
    const execution: Backend.Service = {
      modelCall: modelCallOf(session),
      // a supervised session's events are its supervisor's (the worker's runs' come through it)
      sinks: request.supervisor === undefined ? [sink] : [],
      // The wall-clock budget counts from the durable start: a replay has the time already spent. (A supervised
      // session's worker is given what is left of the supervisor's, whose clock is kept: see `Supervisor`.)
      elapsedBefore: request.supervisor === undefined ? Math.max(0, now - started.startedAt) : 0,
      handedOff: () => Effect.sync(() => void session.hop++),
      // every agent's calls are activities, an agent's own tools after a handoff too
      tools: (registry) => registryOf(session, registry)
    }
    const idle = options.idle === undefined ? undefined : Duration.fromInputUnsafe(options.idle)
    const provided = <A, E>(
      effect: Effect.Effect<A, E, R | ToolRegistry | LanguageModel.LanguageModel>,
      cancelled: Deferred.Deferred<string>
    ) =>
      effect.pipe(
        Effect.provideService(Backend.Backend, execution),
        Effect.provideService(Approvals.Approvals, approvalsOf(session, approvals, cancelled))
      )
    const finish = (result: Result) =>
      Effect.as(
        activity(
          session,
          `end/${session.segment}`,
          Schema.Void,
          Schema.Never,
          Effect.flatMap(
            Clock.currentTimeMillis,
            (at) => orDie(Effect.andThen(store.closeQuestions(payload.sessionId), store.finish(payload.sessionId, at)))
          ),
          // (on an engine that writes events with results, it and the last events go with the session's end)
          { fold: true, mayWait: true }
        ),
        result
      )
    if (request.output !== undefined && output === undefined) {
      return yield* finish({
        _tag: "Failed",
        error: new ConfigError({
          field: "output",
          rule: `names a typed output this runner does not know (${JSON.stringify(request.output)}); it knows ${
            JSON.stringify(Object.keys(options.outputs ?? {}))
          }`
        })
      })
    }
    const supervisor = request.supervisor === undefined ? undefined : supervisorOf(options, request.supervisor)
    if (request.supervisor !== undefined && supervisor === undefined) {
      return yield* finish({
        _tag: "Failed",
        error: new ConfigError({
          field: "supervisor",
          rule: `names a supervisor this runner does not know (${JSON.stringify(request.supervisor)}); it knows ${
            JSON.stringify(Object.keys(options.supervisors ?? {}))
          }`
        })
      })
    }
    const task = typeof request.prompt === "string" ? request.prompt : undefined
    if (supervisor !== undefined && task === undefined) {
      return yield* finish({
        _tag: "Failed",
        error: new ConfigError({ field: "prompt", rule: "a supervised session's task is text" })
      })
    }
    const supervised = supervisor === undefined ? undefined : supervisedRun(supervisor, {
      sessionId: payload.sessionId,
      runId: started.runId,
      system: request.system,
      config: request.config,
      name: options.name,
      output,
      outputRetries: options.outputRetries,
      outputMode: options.outputMode,
      agents: options.agents,
      plugins: options.plugins ?? [],
      onEvent: (event) => event._tag === "CheckpointSaved" ? Effect.void : Effect.sync(() => sink(event)),
      record: recorderOf(session)
    })
    const messages: Array<Message.Message> = []
    let continued: RunState.RunResult | undefined
    /** The follow-ups the last idle wait took (a supervised run resumed takes them besides its checkpoint's). */
    let arrived: ReadonlyArray<Message.Message> = []
    let pendingTried = false
    while (true) {
      // each run its own cancel: one that cancelled a run never ends the next
      const cancelled = yield* Deferred.make<string>()
      const steering = steeringOf(session, cancelled)
      const exit = yield* Effect.exit(provided(
        supervised !== undefined
          ? supervised(continued === undefined ? task : undefined, arrived, steering)
          : continued === undefined
          ? Agent.run({ ...runOptions, steering, prompt: request.prompt, system: request.system, runId: started.runId })
          : Agent.runContinue(continued.state, { ...runOptions, steering, agent: agentOf(options, continued.agent) }),
        cancelled
      ))
      if (exit._tag === "Failure") {
        const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
        // A supervised run whose worker failed announced it (`WorkerFailed`, then an `AgentEnd` that says so) and
        // died with the worker's error: the session ends there, that ending published (in this process too).
        if (error === undefined && supervised !== undefined && announcedDefect(session, exit.cause)) {
          return yield* finish({ _tag: "Died", defect: String(Cause.squash(exit.cause)) })
        }
        // A model error suspends the session (the supervisor resumes it); other errors end it.
        if (error === undefined || error.error._tag === "ModelError") return yield* Effect.failCause(exit.cause)
        return yield* finish({ _tag: "Failed", error: error.error })
      }
      const result = exit.value
      messages.push(...result.messages)
      const finished = (): Result => ({ _tag: "Finished", result: { ...result, messages } })
      // Every ending the loop decides (completed, a guardrail trip, a budget, a cancel, ...) is one a follow-up
      // continues, as `Agent.runContinue` does: with `idle`, the session waits for one. A session handed off goes
      // on in that agent: on a follow-up only when the runner knows it.
      const goesOn = result.agent === undefined || agentOf(options, result.agent) !== undefined
      if (idle === undefined || !goesOn) return yield* finish(finished())
      session.segment++
      // Follow-ups the run took but did not deliver (it ended abnormally: a guardrail, a budget) continue it at
      // once, as `Agent.runContinue` would with them; otherwise the session waits idle for one. Once: a run
      // that again leaves them undelivered (its budget is spent) waits, rather than go round for ever. Not a
      // cancelled run's: they wait in its state for the next follow-up, as in this process.
      // (A supervised run's checkpoint keeps them: the next follow-up's run takes them, as in this process.)
      if (
        supervised === undefined && result.state.followUps.length > 0 && !pendingTried &&
        !Deferred.isDoneUnsafe(cancelled)
      ) {
        pendingTried = true
        continued = result
        continue
      }
      pendingTried = false
      const followUps = yield* awaitFollowUp(session, idle)
      if (followUps.length === 0) return yield* finish(finished())
      arrived = followUps
      continued = { ...result, state: { ...result.state, followUps: [...result.state.followUps, ...followUps] } }
    }
  })

