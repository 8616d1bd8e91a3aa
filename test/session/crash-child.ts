/**
 * A process running a durable session, for the crash tests:
 *
 *   node --conditions=effect-agent-source test/session/crash-child.ts run|resume DIR slow|charge|deploy|steer MS
 *
 * `run` starts session "crash" in DIR, `resume` resumes it. The model replies
 * from the transcript (see `followTranscript`), so both processes follow one
 * script. A tool handler prints `started <tool>` when it starts (after its
 * checkpoint), a pending approval `approval <id>` once it is saved; at the end
 * the process prints one JSON line: the outcome, how often the model was
 * called, and which handlers ran.
 *
 * `steer` runs a session that never ends (see `endless`) and steers it at
 * every tool call's start and end; it prints `steer <text>` for each message
 * given and `saved <messages> <turn>` for each checkpoint the store saved (each
 * in the same uninterruptible step as what it reports), until a signal stops it.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect, Layer, Path } from "effect"
import { Approvals, type Hooks, Steering } from "effect-agent"
import { CheckpointStore, Session, Trajectory } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { endless, followTranscript, threeTurns, toolsLayer, usage } from "./fixture.ts"

const [mode, dir, scenario, ms] = process.argv.slice(2)
if ((mode !== "run" && mode !== "resume") || dir === undefined || ms === undefined) {
  throw new Error("usage: crash-child.ts run|resume DIR slow|charge|deploy|steer MS")
}

const turns = scenario === "deploy"
  ? [{ toolCalls: [{ id: "d1", name: "deploy", params: { env: "prod" } }], usage }, { text: "deployed", usage }]
  : threeTurns(scenario === "charge" ? "charge" : "slow", Number(ms))

const print = (line: string) => process.stdout.write(line + "\n")
const ran: Array<string> = []

/** The store, printing what each save wrote once it is written. */
const printing = (store: CheckpointStore.Service): CheckpointStore.Service => {
  const saved = (checkpoint: CheckpointStore.Checkpoint) =>
    Effect.sync(() => print(`saved ${checkpoint.state.messages.length} ${checkpoint.state.turn}`))
  return {
    ...store,
    create: (id, checkpoint) => Effect.uninterruptible(Effect.tap(store.create(id, checkpoint), () => saved(checkpoint))),
    save: (id, checkpoint) => Effect.uninterruptible(Effect.tap(store.save(id, checkpoint), () => saved(checkpoint)))
  }
}

const steered = Effect.gen(function*() {
  const store = printing(yield* CheckpointStore.fileSystem(dir))
  const steering = yield* Steering.make()
  let given = 0
  const steer: Hooks.Plugin = {
    name: "steer",
    onEvent: (event) => {
      if (event._tag !== "ToolExecutionStart" && event._tag !== "ToolExecutionEnd") return Effect.void
      const text = `steer ${given++}`
      return Effect.uninterruptible(Effect.andThen(Effect.orDie(steering.steer(text)), Effect.sync(() => print(text))))
    }
  }
  const path = yield* Path.Path
  const plugins = [Trajectory.ndjson(path.join(dir, "trajectory.ndjson")), steer]
  yield* Session.run({
    id: "crash",
    prompt: "go",
    steering,
    plugins,
    config: { maxTurns: null, maxRepeatedBatches: null }
  }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
}).pipe(
  Effect.provide(Layer.mergeAll(ScriptedModel.layer(endless), toolsLayer([]), NodeServices.layer))
)

const program = Effect.gen(function*() {
  const store = yield* CheckpointStore.fileSystem(dir)
  const path = yield* Path.Path
  // Prints `approval <id>` once the checkpoint holding the pending approval is saved.
  let asked: string | undefined
  const announce: Hooks.Plugin = {
    name: "announce",
    onEvent: (event) =>
      Effect.sync(() => {
        if (event._tag === "ApprovalRequested") asked = event.toolCallId
        else if (event._tag === "CheckpointSaved" && asked !== undefined) print(`approval ${asked}`)
      })
  }
  // The resumed process approves the deploy when the call asks again (it waits by the time it is announced).
  const approvals = yield* Approvals.interactive()
  const approver: Hooks.Plugin = {
    name: "approver",
    onEvent: (event) =>
      mode === "resume" && event._tag === "ApprovalRequested" && event.approvalId === "d1"
        ? Effect.asVoid(approvals.approve(event.approvalId))
        : Effect.void
  }
  const plugins = [Trajectory.ndjson(path.join(dir, "trajectory.ndjson")), announce, approver]
  const result = yield* (mode === "run"
    ? Session.run({ id: "crash", prompt: "go", plugins }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))
    : Session.resume("crash", { plugins }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store))).pipe(Effect.provideService(Approvals.Approvals, approvals))
  const model = yield* ScriptedModel.ScriptedModel
  print(JSON.stringify({ outcome: result.outcome._tag, modelCalls: yield* model.calls, ran }))
}).pipe(
  Effect.provide(Layer.mergeAll(
    ScriptedModel.layer(followTranscript(turns)),
    toolsLayer(ran, (name) => print(`started ${name}`)),
    NodeServices.layer
  ))
)

NodeRuntime.runMain(scenario === "steer" ? steered : program)
