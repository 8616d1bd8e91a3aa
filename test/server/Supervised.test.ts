/**
 * Supervised sessions and typed output on the agent server (issue 30), over
 * real HTTP on the loopback: the server's owner lists supervisors and typed
 * outputs by name, a client names one; plan and feedback decisions go through
 * the control route and answer only the question waiting; a stopped server's
 * supervised and typed sessions are resumed by the next one on its directory;
 * and a client can never give a check or a command of its own.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, FileSystem, Layer, Scope } from "effect"
import { Check } from "effect-agent/supervisor"
import {
  Answer,
  baseUrl,
  call,
  fixedCheck,
  hangingScript,
  memoryWorkspace,
  post,
  readSse,
  serverLayer,
  type SseMessage,
  workingAgent,
  type Workspace
} from "./support.ts"
import { patience } from "../patience.ts"


const eventOf = (message: SseMessage) => JSON.parse(message.data)

/** A supervisor's own event's payload (`SupervisorEvent`, carried as `Custom`), else undefined. */
const own = (event: any) => event._tag === "Custom" && event.kind === "effect-agent/supervisor" ? event.payload : undefined

/** Reads a session's events from the start until `stop` says so (given each event and how many were read), or to the end. */
const readUntil = (url: string, id: string, stop: (event: any) => boolean = () => false) =>
  Effect.promise(async () => {
    const read = await readSse(await fetch(`${url}/sessions/${id}/events`), (message) => stop(eventOf(message)))
    return read.messages.map(eventOf)
  })

/** Stops at the `n`th event that `is` says is one. */
const nth = (n: number, is: (event: any) => boolean) => {
  let seen = 0
  return (event: any) => is(event) && ++seen === n
}

const ownTag = (tag: string) => (event: any) => own(event)?._tag === tag

/** The supervisor's own events of a run, as `tag` or `tag:status` for check results (the baseline's marked). */
const story = (events: ReadonlyArray<any>) =>
  events.flatMap((event) => {
    const payload = own(event)
    if (payload === undefined) return []
    if (payload._tag === "CheckResult") return [`CheckResult:${payload.baseline ? "baseline:" : ""}${payload.status}`]
    if (payload._tag === "CheckStarted") return []
    return [payload._tag]
  })

const userTexts = (end: any): Array<string> =>
  end.result.state.messages.filter((message: any) => message.role === "user").map((message: any) =>
    message.content.map((part: any) => part.text ?? "").join("")
  )

/** A server whose `fix` supervisor checks that step 2 is done, in a fresh workspace. */
const fixServer = (workspace: Workspace, supervisor: object = {}) =>
  serverLayer(
    { supervisors: { fix: { checks: [fixedCheck(workspace)], ...supervisor } }, outputs: { answer: Answer } },
    workingAgent(workspace)
  )

/** Builds a server in the scope; its base URL. */
const serve = (server: ReturnType<typeof fixServer>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(server)
    return yield* Effect.provideContext(baseUrl, context)
  })

describe("supervised sessions on the server", () => {
  it.live("a check that fails, then passes: the session converges, its description says it is supervised and how it ended; a follow-up goes on with a new act round", () =>
    Effect.gen(function*() {
      const workspace = memoryWorkspace()
      const url = yield* serve(fixServer(workspace))
      const created = yield* post(`${url}/sessions`, { task: "fix the build", id: "fix-1", supervisor: "fix" })
      assert.strictEqual(created.status, 201, JSON.stringify(created.body))
      assert.strictEqual(created.body.supervisor, "fix")
      const events = yield* readUntil(url, "fix-1")
      const end = events.at(-1)
      const info = (yield* call(`${url}/sessions/fix-1`)).body
      const listed = (yield* call(`${url}/sessions`)).body
      assert.deepStrictEqual(
        {
          story: story(events),
          end: [end._tag, end.outcome],
          info: [info.status, info.supervisor, info.supervisorOutcome, info.outcome, info.turns],
          listed: listed.map((session: any) => [session.id, session.supervisor, session.supervisorOutcome?._tag]),
          steps: Effect.runSync(workspace.steps)
        },
        {
          story: [
            "CheckResult:baseline:fail",
            "WorkerTurnStart",
            "WorkerTurnEnd",
            "SupervisedBudget",
            "CheckResult:fail",
            "FeedbackSent",
            "WorkerTurnStart",
            "WorkerTurnEnd",
            "SupervisedBudget",
            "CheckResult:pass"
          ],
          end: ["AgentEnd", {
            _tag: "Custom",
            kind: "effect-agent/supervisor",
            payload: { _tag: "Converged", turns: 2 }
          }],
          info: ["finished", "fix", { _tag: "Converged", turns: 2 }, {
            _tag: "Custom",
            kind: "effect-agent/supervisor",
            payload: { _tag: "Converged", turns: 2 }
          }, 2],
          listed: [["fix-1", "fix", "Converged"]],
          steps: [1, 2]
        }
      )
      // The worker read the failing check in its feedback.
      assert.include(userTexts(end)[1], "fixed [new")
      assert.include(userTexts(end)[1], "steps done: 1")
      // A follow-up to the converged session goes on with it: a new act round, its message the follow-up.
      const late = yield* post(`${url}/sessions/fix-1/control`, { type: "follow_up", text: "And step 3." })
      assert.deepStrictEqual([late.status, late.body.status], [202, "restarted"])
      const again = yield* readUntil(url, "fix-1", nth(2, (event) => event._tag === "AgentEnd"))
      const second = again.at(-1)
      const after = (yield* call(`${url}/sessions/fix-1`)).body
      assert.deepStrictEqual(
        {
          end: [second._tag, second.outcome.kind, second.outcome.payload._tag],
          info: [after.status, after.supervisorOutcome],
          lastUserText: userTexts(second).at(-1)
        },
        {
          end: ["AgentEnd", "effect-agent/supervisor", "Converged"],
          info: ["finished", { _tag: "Converged", turns: 3 }],
          lastUserText: "And step 3."
        }
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("the plan waits for a decision through the control route: refined, then approved", () =>
    Effect.gen(function*() {
      const workspace = memoryWorkspace()
      const url = yield* serve(fixServer(workspace, { plan: true }))
      yield* post(`${url}/sessions`, { task: "fix the build", id: "planned", supervisor: "fix" })
      yield* readUntil(url, "planned", ownTag("PlanProposed"))
      const first = (yield* call(`${url}/sessions/planned`)).body
      const refined = yield* post(`${url}/sessions/planned/control`, { type: "refine_plan", notes: "Smaller steps.", iteration: 1 })
      yield* readUntil(url, "planned", nth(2, ownTag("PlanProposed")))
      const second = (yield* call(`${url}/sessions/planned`)).body
      const approved = yield* post(`${url}/sessions/planned/control`, { type: "approve_plan", iteration: 2 })
      const events = yield* readUntil(url, "planned")
      const info = (yield* call(`${url}/sessions/planned`)).body
      assert.deepStrictEqual(
        {
          first: [first.status, first.pendingPlan],
          refined: [refined.status, refined.body],
          second: [second.status, second.pendingPlan],
          approved: [approved.status, approved.body],
          story: story(events).filter((tag) => tag.startsWith("Plan")),
          revisionNotes: events.map(own).find((payload) => payload?._tag === "PlanRevised")?.notes,
          info: [info.status, info.pendingPlan, info.supervisorOutcome]
        },
        {
          first: ["waiting", { iteration: 1, plan: "Plan 1: call step until the check passes." }],
          refined: [202, { sessionId: "planned", type: "refine_plan", status: "applied", iteration: 1 }],
          second: ["waiting", { iteration: 2, plan: "Plan 2: call step until the check passes." }],
          approved: [202, { sessionId: "planned", type: "approve_plan", status: "applied", iteration: 2 }],
          story: ["PlanProposed", "PlanRevised", "PlanProposed", "PlanApproved"],
          revisionNotes: "Smaller steps.",
          info: ["finished", undefined, { _tag: "Converged", turns: 2 }]
        }
      )
      // The worker read the notes verbatim, then the plan approved.
      const users = userTexts(events.at(-1))
      assert.include(users[1], "Smaller steps.")
      assert.isTrue(users[2]!.startsWith("Plan approved:\n\nPlan 2:"))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("a decision answers only the question of its kind waiting now: otherwise a 409, and nothing is kept", () =>
    Effect.gen(function*() {
      const workspace = memoryWorkspace()
      // The baseline round waits here until the test lets it go: no plan has been asked for yet.
      const baselineRuns = yield* Deferred.make<void>()
      const goOn = yield* Deferred.make<void>()
      const check = fixedCheck(workspace)
      let rounds = 0
      const held = Check.make(
        "fixed",
        Effect.gen(function*() {
          if (++rounds === 1) {
            yield* Deferred.succeed(baselineRuns, undefined)
            yield* Deferred.await(goOn)
          }
          return yield* check.run
        })
      )
      const url = yield* serve(
        serverLayer({ supervisors: { gated: { checks: [held], plan: true, approveTurns: true } } }, workingAgent(workspace))
      )
      const reject = (response: { status: number; body: any }) => [response.status, response.body.detail]
      yield* post(`${url}/sessions`, { task: "fix the build", id: "gated", supervisor: "gated" })
      yield* Deferred.await(baselineRuns).pipe(Effect.timeout(patience))
      const unnamed = yield* post(`${url}/sessions/gated/control`, { type: "approve_plan" })
      const early = yield* post(`${url}/sessions/gated/control`, { type: "approve_plan", iteration: 1 })
      yield* Deferred.succeed(goOn, undefined)
      yield* readUntil(url, "gated", ownTag("PlanProposed"))
      const planWaits = (yield* call(`${url}/sessions/gated`)).body
      const turnForPlan = yield* post(`${url}/sessions/gated/control`, { type: "approve_turn", turn: 1 })
      // a sender that read another iteration than the one waiting: refused, the plan still waits
      const stale = yield* post(`${url}/sessions/gated/control`, { type: "approve_plan", iteration: 2 })
      const planApproved = yield* post(`${url}/sessions/gated/control`, { type: "approve_plan", iteration: 1 })
      yield* readUntil(url, "gated", ownTag("TurnApprovalRequested"))
      const turnWaits = (yield* call(`${url}/sessions/gated`)).body
      const planAgain = yield* post(`${url}/sessions/gated/control`, { type: "reject_plan", notes: "late", iteration: 1 })
      const unnamedTurn = yield* post(`${url}/sessions/gated/control`, { type: "approve_turn" })
      const replaced = yield* post(`${url}/sessions/gated/control`, { type: "replace_feedback", text: "Now do step 2.", turn: 1 })
      const events = yield* readUntil(url, "gated")
      const after = yield* post(`${url}/sessions/gated/control`, { type: "approve_turn", turn: 1 })
      yield* post(`${url}/sessions`, { task: "hello", id: "plain" })
      yield* readUntil(url, "plain")
      const notSupervised = yield* post(`${url}/sessions/plain/control`, { type: "approve_plan", iteration: 1 })
      assert.deepStrictEqual(
        {
          unnamed: reject(unnamed),
          early: reject(early),
          stale: reject(stale),
          unnamedTurn: reject(unnamedTurn),
          planWaits: [planWaits.status, planWaits.pendingPlan?.iteration, planWaits.pendingTurn],
          turnForPlan: reject(turnForPlan),
          planApproved: [planApproved.status, planApproved.body.iteration],
          turnWaits: [turnWaits.status, turnWaits.pendingPlan, turnWaits.pendingTurn?.turn],
          planAgain: reject(planAgain),
          replaced: [replaced.status, replaced.body],
          sent: events.map(own).filter((payload) => payload?._tag === "FeedbackSent").map((payload) => payload.feedback),
          outcome: events.at(-1).outcome.payload,
          after: reject(after),
          notSupervised: reject(notSupervised)
        },
        {
          unnamed: [
            400,
            'approve_plan names the plan iteration it answers: give the "iteration" the session\'s description lists (pendingPlan)'
          ],
          early: [409, "approve_plan: no plan waits for a decision"],
          stale: [409, "approve_plan: plan iteration 1 waits for a decision, not iteration 2"],
          unnamedTurn: [
            400,
            'approve_turn names the act turn it answers: give the "turn" the session\'s description lists (pendingTurn)'
          ],
          planWaits: ["waiting", 1, undefined],
          turnForPlan: [409, "approve_turn: no feedback waits for a decision"],
          planApproved: [202, 1],
          turnWaits: ["waiting", undefined, 1],
          planAgain: [409, "reject_plan: no plan waits for a decision"],
          replaced: [202, { sessionId: "gated", type: "replace_feedback", status: "applied", turn: 1 }],
          sent: ["Now do step 2."],
          outcome: { _tag: "Converged", turns: 2 },
          after: [409, "approve_turn: no feedback waits for a decision"],
          notSupervised: [409, "approve_plan: the session is not supervised"]
        }
      )
      assert.strictEqual(turnWaits.pendingTurn.feedback.split("\n")[0], "The checks after turn 1 did not pass:")
      assert.include(userTexts(events.at(-1)), "Now do step 2.")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("steering and a follow-up reach the worker: queued while the checks run, delivered in its next turn", () =>
    Effect.gen(function*() {
      const workspace = memoryWorkspace()
      // The checks after the first act turn wait here until the test lets them go.
      const checking = yield* Deferred.make<void>()
      const goOn = yield* Deferred.make<void>()
      const check = fixedCheck(workspace)
      const held = Check.make(
        "fixed",
        Effect.gen(function*() {
          if ((yield* workspace.steps).length === 1) {
            yield* Deferred.succeed(checking, undefined)
            yield* Deferred.await(goOn)
          }
          return yield* check.run
        })
      )
      const url = yield* serve(serverLayer({ supervisors: { fix: { checks: [held] } } }, workingAgent(workspace)))
      yield* post(`${url}/sessions`, { task: "fix the build", id: "steered", supervisor: "fix" })
      yield* Deferred.await(checking).pipe(Effect.timeout(patience))
      const steered = yield* post(`${url}/sessions/steered/control`, { type: "steer", text: "Use step 2." })
      const followed = yield* post(`${url}/sessions/steered/control`, { type: "follow_up", text: "Then step 3." })
      yield* Deferred.succeed(goOn, undefined)
      const events = yield* readUntil(url, "steered")
      const end = events.at(-1)
      const users = userTexts(end)
      assert.deepStrictEqual(
        {
          statuses: [steered.status, steered.body.status, followed.status, followed.body.status],
          users: [users[0], users[1]!.split("\n")[0], users[2], users[3]],
          steps: Effect.runSync(workspace.steps),
          outcome: end.outcome.payload
        },
        {
          statuses: [202, "queued", 202, "queued"],
          users: ["fix the build", "The checks after turn 1 did not pass:", "Use step 2.", "Then step 3."],
          steps: [1, 2, 3],
          outcome: { _tag: "Converged", turns: 2 }
        }
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("a client cannot give a check or a command: only a supervisor's name, and an unknown one is a 400", () =>
    Effect.gen(function*() {
      const workspace = memoryWorkspace()
      const url = yield* serve(fixServer(workspace))
      const problem = (response: { status: number; body: any }) => [
        response.status,
        response.body.errors?.[0]?.path ?? response.body.detail
      ]
      const command = { name: "pwned", command: "touch /tmp/effect-agent-pwned" }
      const attempts = [
        { task: "fix", supervisor: "fix", checks: [command] },
        { task: "fix", supervisor: { checks: [command] } },
        { task: "fix", supervisor: "touch /tmp/effect-agent-pwned" },
        { task: "fix", supervisor: "constructor" },
        { task: "fix", config: { checks: [command] } },
        { task: "fix", command: command.command }
      ]
      const answers = []
      for (const body of attempts) answers.push(problem(yield* post(`${url}/sessions`, body)))
      const unknown = yield* post(`${url}/sessions`, { task: "fix", supervisor: "tests" })
      const sessions = (yield* call(`${url}/sessions`)).body
      assert.deepStrictEqual(answers, [
        [400, ["payload", "checks"]],
        [400, ["payload", "supervisor"]],
        [400, ["payload", "supervisor"]],
        [400, ["payload", "supervisor"]],
        [400, ["payload", "config", "checks"]],
        [400, ["payload", "command"]]
      ])
      assert.strictEqual(unknown.body.detail, `no supervisor is named "tests": this server has "fix"`)
      assert.deepStrictEqual(sessions, [])
      // A server without supervisors says so.
      const bare = yield* serve(serverLayer({}, workingAgent(memoryWorkspace())))
      const none = yield* post(`${bare}/sessions`, { task: "fix", supervisor: "fix" })
      assert.deepStrictEqual([none.status, none.body.detail], [400, `this server has no supervisors: "fix" is not one`])
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("a server stopped mid-run, and a new one on its directory, resume the supervised session", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped()
      const workspace = memoryWorkspace()
      const supervisors = { fix: { checks: [fixedCheck(workspace)] } }
      // The first server's model never gives a third reply: the session stops mid-run, in its second act turn.
      const first = yield* Scope.make()
      const a = yield* serve(
        serverLayer({ directory, supervisors }, workingAgent(workspace, hangingScript(2)))
      ).pipe(Scope.provide(first))
      yield* post(`${a}/sessions`, { task: "fix the build", id: "survivor", supervisor: "fix" })
      const before = yield* readUntil(a, "survivor", nth(2, ownTag("WorkerTurnStart")))
      yield* Scope.close(first, Exit.void)
      const b = yield* serve(serverLayer({ directory, supervisors }, workingAgent(workspace)))
      const events = yield* readUntil(b, "survivor")
      const info = (yield* call(`${b}/sessions/survivor`)).body
      const resumed = events.slice(before.length)
      assert.deepStrictEqual(
        {
          resumed: resumed.map((event) => own(event)?._tag ?? event._tag).filter((tag) =>
            ["AgentStart", "SessionResumed", "WorkerTurnEnd", "CheckResult", "AgentEnd"].includes(tag)
          ),
          info: [info.status, info.supervisor, info.supervisorOutcome],
          steps: Effect.runSync(workspace.steps)
        },
        {
          // The stopped run ended its lines (Cancelled, interrupted); the resumed run goes on in its second turn.
          resumed: ["AgentEnd", "AgentStart", "SessionResumed", "WorkerTurnEnd", "CheckResult", "AgentEnd"],
          info: ["finished", "fix", { _tag: "Converged", turns: 2 }],
          steps: [1, 2]
        }
      )
      assert.deepStrictEqual(resumed[0].outcome, { _tag: "Cancelled", reason: "interrupted" })
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})

describe("typed output on the server", () => {
  it.live("a client names one of the server's outputs: the session's description holds the answer", () =>
    Effect.gen(function*() {
      const url = yield* serve(fixServer(memoryWorkspace()))
      const created = yield* post(`${url}/sessions`, { task: "answer 42", id: "typed", output: "answer" })
      const events = yield* readUntil(url, "typed")
      const info = (yield* call(`${url}/sessions/typed`)).body
      const unknown = yield* post(`${url}/sessions`, { task: "answer 1", output: "Answer" })
      assert.deepStrictEqual(
        {
          created: [created.status, created.body.output.name],
          end: [events.at(-1).outcome, events.at(-1).result.state.output.value],
          info: [info.status, info.output],
          unknown: [unknown.status, unknown.body.errors[0].path, unknown.body.detail]
        },
        {
          created: [201, "answer"],
          end: [{ _tag: "Completed" }, { answer: 42 }],
          info: ["finished", { name: "answer", value: { answer: 42 } }],
          unknown: [400, ["payload", "output"], `no typed output is named "Answer": this server has "answer"`]
        }
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("a typed session stopped mid-run is resumed by the next server with its output", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const directory = yield* fs.makeTempDirectoryScoped()
      const outputs = { answer: Answer }
      const first = yield* Scope.make()
      const a = yield* serve(
        serverLayer({ directory, outputs }, workingAgent(memoryWorkspace(), hangingScript(0)))
      ).pipe(Scope.provide(first))
      yield* post(`${a}/sessions`, { task: "answer 7", id: "typed", output: "answer" })
      yield* readUntil(a, "typed", (event) => event._tag === "TurnStart")
      yield* Scope.close(first, Exit.void)
      const b = yield* serve(serverLayer({ directory, outputs }, workingAgent(memoryWorkspace())))
      const events = yield* readUntil(b, "typed")
      const info = (yield* call(`${b}/sessions/typed`)).body
      assert.deepStrictEqual(
        [events.map((event) => event._tag).includes("SessionResumed"), info.status, info.output],
        [true, "finished", { name: "answer", value: { answer: 7 } }]
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
