/**
 * The smallest reproduction of what left DurableSessionCluster's sessions `Suspended` for good (effect 4.1):
 * in a workflow annotated `Workflow.SuspendOnFailure`, an activity whose request is sent an `Interrupt` (what
 * the entity client sends for the activity a run was waiting on when that run is interrupted) answers
 * `Suspended` without `failed`, and `ClusterWorkflowEngine` passes that on: the run suspends as if it waited
 * on something, and nothing wakes it. The engine's own remedy for an aborted activity (reset it and make it
 * again) keys on the abort's `ClientAbort` annotation, which `Workflow.intoResult` has already turned into a
 * `Suspended` there. Without `SuspendOnFailure` the same interrupt is remade and the workflow completes.
 *
 * `node --conditions=effect-agent-source test/session/lost-activity-repro.ts` prints, for each annotation,
 * what `poll` says once the interrupt is in.
 */
import { Deferred, Effect, Layer, Option, Schema } from "effect"
import {
  ClusterWorkflowEngine,
  EntityAddress,
  EntityId,
  EntityType,
  Message,
  MessageStorage,
  Sharding,
  TestRunner
} from "effect/cluster"
import { Activity, Workflow } from "effect/workflow"

const attempt = (suspendOnFailure: boolean) =>
  Effect.gen(function*() {
    const started = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    let runs = 0
    const Flow = Workflow.make(`repro-${suspendOnFailure}`, {
      payload: { id: Schema.String },
      idempotencyKey: ({ id }) => id
    }).annotate(Workflow.SuspendOnFailure, suspendOnFailure)
    const layer = Flow.toLayer(() =>
      Activity.make({
        name: "work",
        execute: Effect.gen(function*() {
          runs++
          yield* Deferred.succeed(started, undefined)
          yield* Deferred.await(release)
        })
      })
    )
    return yield* Effect.gen(function*() {
      const executionId = yield* Flow.execute({ id: "one" }, { discard: true })
      yield* Deferred.await(started)
      // The interrupt a run's client sends for the activity it was waiting on, when the run is interrupted.
      const sharding = yield* Sharding.Sharding
      const storage = yield* MessageStorage.MessageStorage
      const entityId = EntityId.make(executionId)
      const address = EntityAddress.make({
        entityType: EntityType.make(`Workflow/${Flow._tag}`),
        entityId,
        shardId: sharding.getShardId(entityId, "default")
      })
      const requestId = yield* storage.requestIdForPrimaryKey({ address, tag: "activity", id: "work/1" })
      const id = yield* sharding.getSnowflake
      yield* sharding.sendOutgoing(
        Message.OutgoingEnvelope.interrupt({ address, id, requestId: Option.getOrThrow(requestId) }),
        false
      )
      yield* Deferred.succeed(release, undefined)
      yield* Effect.sleep("2 seconds")
      const result = yield* Flow.poll(executionId)
      const status = Option.map(result, (r) => r._tag === "Suspended" ? `Suspended(failed: ${r.failed === true})` : r._tag)
      // SuspendOnFailure: 1 run, Some(Suspended(failed: false)), for good. Without: 2 runs, Some(Complete).
      return { suspendOnFailure, runs, status }
    }).pipe(
      Effect.provide(layer.pipe(Layer.provideMerge(ClusterWorkflowEngine.layer), Layer.provideMerge(TestRunner.layer)))
    )
  })

Effect.runPromise(Effect.forEach([true, false], attempt)).then((results) => console.log(JSON.stringify(results)))
