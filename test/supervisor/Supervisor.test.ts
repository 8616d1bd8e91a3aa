/**
 * Supervisor: ynh's pinned scenarios (SEED-SYSTEMS.md 4c) on our API, the
 * baseline, the watchdog's thresholds and the plan phase, with scripted
 * workers and checks whose verdicts the test controls.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schema } from "effect"
import { TestClock } from "effect/testing"
import { type AgentEvent, Approvals, Message } from "effect-agent"
import { ExitCode } from "effect-agent/cli"
import { Check, Supervisor, SupervisorEvent, SupervisorOutcome, Worker } from "effect-agent/supervisor"

type Verdict = Check.Verdict

/** A worker that answers each turn from a script and records what it was asked. */
const scripted = (
  replies: ReadonlyArray<string | ((request: Worker.TurnRequest) => Effect.Effect<string, Worker.WorkerError>)>,
  tokens = 10
) => {
  const requests: Array<Worker.TurnRequest> = []
  const worker = Worker.make("scripted", (request) =>
    Effect.gen(function*() {
      requests.push(request)
      const step = replies[Math.min(requests.length - 1, replies.length - 1)]!
      const text = typeof step === "string" ? step : yield* step(request)
      return { text, usage: { inputTokens: tokens, outputTokens: tokens }, resumeToken: `tok-${requests.length}` }
    }))
  return { worker, requests }
}

/** A check whose verdict after each round comes from `verdicts` (the last one repeats). */
const scriptedCheck = (name: string, verdicts: ReadonlyArray<Verdict>, options?: Check.Options) => {
  let round = 0
  const check = Check.make(name, Effect.sync(() => verdicts[Math.min(round++, verdicts.length - 1)]!), options)
  return { check, rounds: () => round }
}

const pass = (summary = "ok"): Verdict => ({ status: "pass", summary })
const fail = (summary = "1 failed", details = ""): Verdict => ({ status: "fail", summary, details })

const collect = () => {
  const events: Array<AgentEvent.AgentEvent> = []
  return { events, onEvent: (event: AgentEvent.AgentEvent) => Effect.sync(() => void events.push(event)) }
}
/** The events of a tag: the supervised run's own (`SupervisorEvent`), or the core's. */
function ofTag<T extends SupervisorEvent.Tag>(
  events: ReadonlyArray<AgentEvent.AgentEvent>,
  tag: T
): Array<SupervisorEvent.Of<T>>
function ofTag<T extends AgentEvent.Tag>(events: ReadonlyArray<AgentEvent.AgentEvent>, tag: T): Array<AgentEvent.Of<T>>
function ofTag(
  events: ReadonlyArray<AgentEvent.AgentEvent>,
  tag: string
): Array<AgentEvent.AgentEvent | SupervisorEvent.Stamped> {
  return events.flatMap((event) => {
    const own = SupervisorEvent.of(event) ?? event
    return own._tag === tag ? [own] : []
  })
}

describe("Supervisor.run: convergence", () => {
  it.effect("with no checks, the first ended turn converges; AgentStart first, AgentEnd last", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["done"])
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({ task: "write hello.txt", worker, onEvent })
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 1 })
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), 0)
      assert.deepStrictEqual(requests.map((r) => [r.message, r.phase]), [["write hello.txt", "act"]])
      assert.strictEqual(events[0]!._tag, "AgentStart")
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
      assert.deepStrictEqual(ofTag(events, "AgentEnd")[0]!.outcome, SupervisorOutcome.toOutcome(result.outcome))
      assert.deepStrictEqual(result.usage, { ...Message.emptyUsage, input: 10, output: 10 })
    }))

  it.effect("a failing then passing check converges on turn 2; the feedback names it and goes to the worker", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["tried", "fixed"])
      const tests = scriptedCheck("tests", [pass(), fail("2 failed", "FAIL a.test\nFAIL b.test"), pass()])
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({ task: "fix it", worker, checks: [tests.check], onEvent })
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.strictEqual(tests.rounds(), 3) // baseline, turn 1, turn 2
      const sent = ofTag(events, "FeedbackSent")
      assert.strictEqual(sent.length, 1)
      assert.deepStrictEqual(sent[0]!.failing, ["tests"])
      assert.strictEqual(requests[1]!.message, sent[0]!.feedback)
      assert.include(sent[0]!.feedback, "- tests [new, 0.0s]: 2 failed\n    FAIL a.test\n    FAIL b.test")
      assert.match(sent[0]!.feedback, /fix the new failures first, then reply with what you changed\.$/)
      assert.strictEqual(requests[1]!.resumeToken, "tok-1")
      const results = ofTag(events, "CheckResult").map((e) => [e.check, e.status, e.baseline, e.turn])
      assert.deepStrictEqual(results, [["tests", "pass", true, 0], ["tests", "fail", false, 1], [
        "tests",
        "pass",
        false,
        2
      ]])
    }))

  it.effect("the turn cap with a failing check ends Unverified (exit 10), never Completed", () =>
    Effect.gen(function*() {
      const { worker } = scripted(["tried"])
      const tests = scriptedCheck("tests", [fail()])
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({
        task: "fix it",
        worker,
        checks: [tests.check],
        maxTurns: 1,
        baseline: false,
        onEvent
      })
      assert.deepStrictEqual(result.outcome, {
        _tag: "Unverified",
        budget: "turns",
        limit: 1,
        used: 1,
        failing: ["tests"]
      })
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), 10)
      assert.strictEqual(ofTag(events, "FeedbackSent").length, 0)
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))

  it.effect("the token budget ends the act phase Unverified (exit 11)", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["tried"], 30)
      const tests = scriptedCheck("tests", [fail()])
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [tests.check],
        baseline: false,
        maxTokens: 100
      })
      assert.strictEqual(result.outcome._tag, "Unverified")
      assert.strictEqual(result.outcome._tag === "Unverified" && result.outcome.budget, "tokens")
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), 11)
      assert.strictEqual(requests.length, 2) // 60 tokens, then 120 >= 100
    }))

  it.effect("an advisory check never blocks; the verifier is consulted last, only once the blocking checks pass", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["a", "b", "c"])
      const tests = scriptedCheck("tests", [pass(), fail(), pass()])
      const lint = scriptedCheck("lint", [pass(), fail("style")], { role: "advisory" })
      const verifier = scriptedCheck("review", [fail("not convinced"), pass("looks right")], { role: "verifier" })
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [tests.check, lint.check, verifier.check],
        onEvent
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 3 })
      // turn 1: tests fail, the verifier is not asked; turn 2: verifier fails; turn 3: verifier passes
      assert.strictEqual(verifier.rounds(), 2)
      const [first, second] = ofTag(events, "FeedbackSent")
      assert.deepStrictEqual(first!.failing, ["tests"])
      assert.include(first!.feedback, "- lint [advisory")
      assert.deepStrictEqual(second!.failing, ["review"])
      assert.include(requests[2]!.message, "- review [new, 0.0s]: not convinced")
    }))
})

describe("Supervisor.run: options", () => {
  it.effect("two verifiers are a ConfigError, before any check or turn runs", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["x"])
      const a = scriptedCheck("a", [pass()], { role: "verifier" })
      const b = scriptedCheck("b", [pass()], { role: "verifier" })
      const error = yield* Effect.flip(Supervisor.run({ task: "t", worker, checks: [a.check, b.check] }))
      assert.strictEqual(error._tag, "ConfigError")
      assert.strictEqual(error._tag === "ConfigError" && error.field, "checks")
      assert.deepStrictEqual([requests.length, a.rounds(), b.rounds()], [0, 0, 0])
    }))
})

describe("Supervisor.run: baseline", () => {
  it.effect("a check failing before the first turn and still failing is known: reported, and it holds the run", () =>
    Effect.gen(function*() {
      const { requests, worker } = scripted(["did the task", "tried again"])
      const old = scriptedCheck("legacy", [fail("3 failed")])
      const tests = scriptedCheck("tests", [pass()])
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({ task: "t", worker, checks: [old.check, tests.check], onEvent, maxTurns: 2 })
      assert.deepStrictEqual(result.outcome, {
        _tag: "Unverified",
        budget: "turns",
        limit: 2,
        used: 2,
        failing: ["legacy"]
      })
      assert.strictEqual(requests.length, 2)
      assert.deepStrictEqual(result.baseline.map((r) => [r.check, r.status]), [["legacy", "fail"], ["tests", "pass"]])
      assert.deepStrictEqual(result.checks.map((r) => [r.check, r.status]), [["legacy", "known"], ["tests", "pass"]])
      const [sent] = ofTag(events, "FeedbackSent")
      assert.deepStrictEqual(sent!.failing, ["legacy"])
      assert.include(sent!.feedback, "- legacy [known")
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), ExitCode.codes.maxTurns)
      // one supervised snapshot per act turn; the last holds the totals the run ended with
      const snapshots = ofTag(events, "SupervisedBudget")
      assert.deepStrictEqual(snapshots.map((e) => [e.phase, e.turns, e.limits.turns, e.planIterations]), [
        ["act", 1, 2, 0],
        ["act", 2, 2, 0]
      ])
      assert.strictEqual(result.planIterations, 0) // no plan phase, no plans proposed
      assert.deepStrictEqual([snapshots.at(-1)!.turns, snapshots.at(-1)!.usage], [result.turns, result.usage])
    }))

  it.effect("tolerateKnownFailures: known failures do not hold the run, which ends Tolerated naming them", () =>
    Effect.gen(function*() {
      const { requests, worker } = scripted(["did the task"])
      const old = scriptedCheck("legacy", [fail("3 failed")])
      const tests = scriptedCheck("tests", [pass()])
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [old.check, tests.check],
        onEvent,
        tolerateKnownFailures: true
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Tolerated", turns: 1, known: ["legacy"] })
      assert.strictEqual(requests.length, 1)
      assert.strictEqual(ofTag(events, "FeedbackSent").length, 0)
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), ExitCode.codes.ok)
      const end = ofTag(events, "AgentEnd").at(-1)
      assert.deepStrictEqual(end?.outcome && SupervisorOutcome.fromOutcome(end.outcome), result.outcome)
      // a new failure still holds it
      const again = scripted(["broke it", "fixed it"])
      const fresh = scriptedCheck("tests", [pass(), fail("new failure"), pass()])
      const held = yield* Supervisor.run({
        task: "t",
        worker: again.worker,
        checks: [scriptedCheck("legacy", [fail("3 failed")]).check, fresh.check],
        tolerateKnownFailures: true
      })
      assert.deepStrictEqual(held.outcome, { _tag: "Tolerated", turns: 2, known: ["legacy"] })
      // with every check passing, a tolerant run converges
      const clean = yield* Supervisor.run({
        task: "t",
        worker: scripted(["done"]).worker,
        checks: [scriptedCheck("tests", [fail("red"), pass()]).check],
        tolerateKnownFailures: true
      })
      assert.deepStrictEqual(clean.outcome, { _tag: "Converged", turns: 1 })
    }))

  it.effect("a new failure is listed before a known one", () =>
    Effect.gen(function*() {
      const { worker } = scripted(["broke b", "fixed b"])
      const old = scriptedCheck("a-legacy", [fail("old failure")])
      const fresh = scriptedCheck("b-tests", [pass(), fail("new failure"), pass()])
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [old.check, fresh.check],
        onEvent,
        tolerateKnownFailures: true
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Tolerated", turns: 2, known: ["a-legacy"] })
      const [sent] = ofTag(events, "FeedbackSent")
      const feedback = sent!.feedback
      assert.isBelow(feedback.indexOf("- b-tests [new"), feedback.indexOf("- a-legacy [known"))
      assert.deepStrictEqual(sent!.failing, ["b-tests"])
    }))

  it.effect("baseline: false makes every failure block", () =>
    Effect.gen(function*() {
      const { worker } = scripted(["x"])
      const old = scriptedCheck("legacy", [fail()])
      const result = yield* Supervisor.run({ task: "t", worker, checks: [old.check], baseline: false, maxTurns: 2 })
      assert.strictEqual(result.outcome._tag, "Unverified")
    }))
})

describe("Supervisor.run: the no-progress watchdog", () => {
  const replies = (n: number) => Array.from({ length: n }, (_, i) => `reply ${i + 1}`)

  it.effect("identical check results: fires on the (N+1)th identical result", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(replies(10))
      const tests = scriptedCheck("tests", [fail("same")])
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [tests.check],
        baseline: false,
        stuckAfterIdenticalChecks: 2,
        stuckAfterIdenticalReplies: 0
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Stuck", reason: "checks", repeats: 2 })
      assert.strictEqual(requests.length, 3)
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), ExitCode.codes.stuck)
    }))

  it.effect("the default threshold is 5: the 6th identical result", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(replies(10))
      const tests = scriptedCheck("tests", [fail("same")])
      const result = yield* Supervisor.run({ task: "t", worker, checks: [tests.check], baseline: false })
      assert.deepStrictEqual(result.outcome, { _tag: "Stuck", reason: "checks", repeats: 5 })
      assert.strictEqual(requests.length, 6)
    }))

  it.effect("a change resets the count", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(replies(10))
      const tests = scriptedCheck("tests", [fail("A"), fail("A"), fail("B"), fail("B"), fail("B")])
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [tests.check],
        baseline: false,
        stuckAfterIdenticalChecks: 2
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Stuck", reason: "checks", repeats: 2 })
      assert.strictEqual(requests.length, 5)
    }))

  it.effect("0 disables it", () =>
    Effect.gen(function*() {
      const { worker } = scripted(["same reply"])
      const tests = scriptedCheck("tests", [fail("same")])
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [tests.check],
        baseline: false,
        maxTurns: 8,
        stuckAfterIdenticalChecks: 0,
        stuckAfterIdenticalReplies: 0
      })
      assert.strictEqual(result.outcome._tag, "Unverified")
      assert.strictEqual(result.turns, 8)
    }))

  it.effect("identical replies: the 3rd in a row is stuck (default); a different reply resets it", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["same", "same", "other", "same", "same", "same"])
      let round = 0
      const changing = Check.make("tests", Effect.sync(() => fail(`round ${++round}`)))
      const result = yield* Supervisor.run({ task: "t", worker, checks: [changing], baseline: false })
      assert.deepStrictEqual(result.outcome, { _tag: "Stuck", reason: "replies", repeats: 3 })
      assert.strictEqual(requests.length, 6)
    }))
})

describe("Supervisor.run: plan, then act", () => {
  const planWorker = () =>
    scripted([
      (r) => Effect.succeed(r.phase === "plan" ? `plan v${r.message.includes("Revise") ? 2 : 1}` : "done"),
      (r) => Effect.succeed(r.phase === "plan" ? "plan v2" : "done"),
      (r) => Effect.succeed(r.phase === "plan" ? "plan v3" : "done")
    ])

  const withDecisions = (decisions: ReadonlyArray<Approvals.PlanDecision>) => {
    let i = 0
    return Approvals.layer({
      ...Approvals.denyAll(),
      decidePlan: () => Effect.sync(() => decisions[Math.min(i++, decisions.length - 1)]!)
    })
  }

  it.effect("approved on the first iteration: one PlanProposed, no PlanRevised; act gets the plan and the task", () =>
    Effect.gen(function*() {
      const { worker, requests } = planWorker()
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({ task: "add a flag", worker, plan: true, onEvent }).pipe(
        Effect.provide(withDecisions([{ _tag: "Approve" }]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(ofTag(events, "PlanProposed").map((e) => [e.plan, e.iteration]), [["plan v1", 1]])
      assert.strictEqual(ofTag(events, "PlanRevised").length, 0)
      assert.deepStrictEqual(requests.map((r) => r.phase), ["plan", "act"])
      assert.strictEqual(requests[0]!.message, Supervisor.planRequest("add a flag"))
      assert.strictEqual(requests[1]!.message, Supervisor.actRequest("plan v1", "add a flag"))
      assert.notInclude(requests[0]!.message, "plan.md")
      assert.strictEqual(result.plan, "plan v1")
    }))

  it.effect("refine then approve: the revision request has the notes verbatim; act has the final plan and task", () =>
    Effect.gen(function*() {
      const { worker, requests } = planWorker()
      const { events, onEvent } = collect()
      const notes = "Also update the README.\nKeep it short."
      const result = yield* Supervisor.run({ task: "add a flag", worker, plan: true, onEvent }).pipe(
        Effect.provide(withDecisions([{ _tag: "Refine", notes }, { _tag: "Approve" }]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(ofTag(events, "PlanRevised").map((e) => [e.iteration, e.notes]), [[2, notes]])
      assert.deepStrictEqual(ofTag(events, "PlanProposed").map((e) => e.iteration), [1, 2])
      assert.strictEqual(requests.length, 3)
      assert.include(requests[1]!.message, notes)
      assert.strictEqual(requests[1]!.phase, "plan")
      assert.include(requests[2]!.message, "plan v2")
      assert.include(requests[2]!.message, "Original task: add a flag")
      for (const request of requests) assert.notInclude(request.message, "plan.md")
    }))

  it.effect("refined past the cap: PlanIterationCap (exit 15), AgentEnd last", () =>
    Effect.gen(function*() {
      const { worker, requests } = planWorker()
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({ task: "t", worker, plan: true, maxPlanIterations: 2, onEvent }).pipe(
        Effect.provide(withDecisions([{ _tag: "Refine", notes: "more" }]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "PlanIterationCap", limit: 2 })
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), 15)
      assert.strictEqual(requests.length, 2)
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))

  it.effect("the default cap is 5 plans", () =>
    Effect.gen(function*() {
      const { worker, requests } = planWorker()
      const result = yield* Supervisor.run({ task: "t", worker, plan: true }).pipe(
        Effect.provide(withDecisions([{ _tag: "Refine", notes: "more" }]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "PlanIterationCap", limit: 5 })
      assert.strictEqual(requests.length, 5)
    }))

  it.effect("rejected with notes: Rejected (exit 30), PlanRejected carries the notes, no act turn", () =>
    Effect.gen(function*() {
      const { worker, requests } = planWorker()
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({ task: "t", worker, plan: true, onEvent }).pipe(
        Effect.provide(withDecisions([{ _tag: "Reject", notes: "wrong approach" }]))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "Rejected", notes: "wrong approach" })
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), 30)
      assert.deepStrictEqual(ofTag(events, "PlanRejected").map((e) => e.notes), ["wrong approach"])
      assert.strictEqual(requests.length, 1)
    }))

  it.effect("tokens spent during refinement end the run Unverified by tokens (exit 11); plan turns are not turns", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["plan"], 30)
      const { events, onEvent } = collect()
      const result = yield* Supervisor.run({ task: "t", worker, plan: true, maxTokens: 100, maxTurns: 1, onEvent }).pipe(
        Effect.provide(withDecisions([{ _tag: "Refine", notes: "again" }]))
      )
      assert.strictEqual(result.outcome._tag === "Unverified" && result.outcome.budget, "tokens")
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), 11)
      assert.strictEqual(requests.length, 2)
      assert.strictEqual(result.turns, 0)
      // a supervised snapshot per plan turn: 0 act turns, the running tokens, the supervised caps
      const snapshots = ofTag(events, "SupervisedBudget")
      assert.deepStrictEqual(
        snapshots.map((e) => [e.phase, e.turns, e.planIterations, Message.totalTokens(e.usage), e.limits.tokens]),
        [["plan", 0, 1, 60, 100], ["plan", 0, 2, 120, 100]]
      )
      assert.deepStrictEqual(snapshots.at(-1)!.usage, result.usage)
      assert.deepStrictEqual(snapshots[0]!.limits, { turns: 1, tokens: 100, costUsd: null, wallClock: null })
    }))

  it.effect("wall clock spent during refinement ends the run Unverified by wall clock (exit 12)", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted([(r) => Effect.as(Effect.sleep("10 seconds"), `plan for ${r.phase}`)])
      const { events, onEvent } = collect()
      const fiber = yield* Effect.forkChild(
        Supervisor.run({ task: "t", worker, plan: true, maxWallClock: "15 seconds", onEvent }).pipe(
          Effect.provide(withDecisions([{ _tag: "Refine", notes: "again" }]))
        )
      )
      yield* TestClock.adjust("10 seconds")
      yield* TestClock.adjust("10 seconds")
      const result = yield* Fiber.join(fiber)
      assert.deepStrictEqual(result.outcome, {
        _tag: "Unverified",
        budget: "wallClock",
        limit: 15_000,
        used: 15_000,
        failing: []
      })
      assert.strictEqual(ExitCode.fromOutcome(result.outcome), 12)
      assert.strictEqual(requests.length, 2) // the second plan turn was cut at the limit
      // the cut turn has its snapshot too: the last is the run's end, at the limit
      const snapshots = ofTag(events, "SupervisedBudget")
      assert.deepStrictEqual(snapshots.map((e) => [e.phase, e.planIterations, e.elapsedMs, e.limits.wallClock]), [
        ["plan", 1, 10_000, 15_000],
        ["plan", 2, 15_000, 15_000]
      ])
      assert.deepStrictEqual(snapshots.at(-1)!.usage, result.usage)
    }))

  it.effect("a worker error during refinement fails the run with it, PlanRevised emitted, AgentEnd last", () =>
    Effect.gen(function*() {
      const { worker } = scripted([
        "plan v1",
        () => Effect.fail(new Worker.WorkerError({ worker: "scripted", reason: "exit", message: "boom", exitCode: 2 }))
      ])
      const { events, onEvent } = collect()
      const error = yield* Effect.flip(
        Supervisor.run({ task: "t", worker, plan: true, onEvent }).pipe(
          Effect.provide(withDecisions([{ _tag: "Refine", notes: "again" }]))
        )
      )
      assert.strictEqual(error._tag, "WorkerError")
      assert.strictEqual(ofTag(events, "PlanRevised").length, 1)
      const end = events.at(-1)!
      // WorkerError is the supervisor's, not an AgentError: WorkerFailed carries it, and AgentEnd says it in words
      assert.deepStrictEqual(ofTag(events, "WorkerFailed").map((e) => [e.worker, e.reason, e.message, e.exitCode]), [
        ["scripted", "exit", "boom", 2]
      ])
      assert.strictEqual(end._tag === "AgentEnd" && end.defect, "WorkerError: boom")
    }))

  it.effect("without an Approvals service the plan is approved as proposed", () =>
    Effect.gen(function*() {
      const { worker, requests } = planWorker()
      const result = yield* Supervisor.run({ task: "t", worker, plan: true })
      assert.strictEqual(result.outcome._tag, "Converged")
      assert.strictEqual(requests[1]!.message, Supervisor.actRequest("plan v1", "t"))
    }))
})

describe("Supervisor.run: per-turn approval", () => {
  it.effect("the operator replaces the feedback: the worker gets their text verbatim", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const { worker, requests } = scripted(["a", "b"])
      const tests = scriptedCheck("tests", [fail(), pass()])
      const { events, onEvent } = collect()
      // answered as the feedback is announced: it waits by then
      const operator = (event: AgentEvent.AgentEvent) =>
        Effect.andThen(
          onEvent(event),
          SupervisorEvent.tagOf(event) === "TurnApprovalRequested"
            ? Effect.asVoid(approvals.decideTurnWith({ _tag: "Replace", feedback: "Look at src/a.ts first." }))
            : Effect.void
        )
      const result = yield* Supervisor.run({
        task: "t",
        worker,
        checks: [tests.check],
        baseline: false,
        approveTurns: true,
        onEvent: operator
      }).pipe(Effect.provideService(Approvals.Approvals, approvals))
      assert.strictEqual(result.outcome._tag, "Converged")
      assert.strictEqual(requests[1]!.message, "Look at src/a.ts first.")
      const [asked] = ofTag(events, "TurnApprovalRequested")
      assert.include(asked!.feedback, "- tests [new")
      assert.deepStrictEqual(ofTag(events, "FeedbackSent").map((e) => e.feedback), ["Look at src/a.ts first."])
    }))

  it.effect("the operator approves: the synthesized feedback goes out; interrupt ends the run Cancelled", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const { worker, requests } = scripted(["a", "b", "c"])
      const tests = scriptedCheck("tests", [fail("x"), fail("y")])
      const { events, onEvent } = collect()
      const fiber = yield* Effect.forkChild(
        Supervisor.run({ task: "t", worker, checks: [tests.check], baseline: false, approveTurns: true, onEvent }).pipe(
          Effect.provideService(Approvals.Approvals, approvals)
        )
      )
      yield* Effect.yieldNow
      assert.isDefined(yield* approvals.pendingTurn)
      assert.isTrue(yield* approvals.decideTurnWith({ _tag: "Approve" }))
      yield* Effect.yieldNow
      assert.isTrue(yield* approvals.decideTurnWith({ _tag: "Interrupt" }))
      const exit = yield* Fiber.await(fiber)
      assert.strictEqual(exit._tag, "Failure")
      assert.strictEqual(requests.length, 2)
      const end = events.at(-1)!
      assert.deepStrictEqual(end._tag === "AgentEnd" && end.outcome, { _tag: "Cancelled", reason: "interrupted" })
    }))
})

describe("Supervisor.run: checks run in parallel under a cap", () => {
  it.effect("at most checkConcurrency checks at once", () =>
    Effect.gen(function*() {
      let running = 0
      let peak = 0
      const slow = (name: string) =>
        Check.make(
          name,
          Effect.acquireUseRelease(
            Effect.sync(() => peak = Math.max(peak, ++running)),
            () => Effect.as(Effect.sleep("1 second"), pass()),
            () => Effect.sync(() => running--)
          )
        )
      const { worker } = scripted(["done"])
      const fiber = yield* Effect.forkChild(Supervisor.run({
        task: "t",
        worker,
        checks: ["a", "b", "c", "d", "e"].map(slow),
        baseline: false,
        checkConcurrency: 2
      }))
      yield* TestClock.adjust("10 seconds")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(result.outcome._tag, "Converged")
      assert.strictEqual(peak, 2)
    }))
})

describe("Supervisor.run: checkpoint and resume", () => {
  const saving = () => {
    const saved: Array<Supervisor.Checkpoint> = []
    return { saved, save: (checkpoint: Supervisor.Checkpoint) => Effect.sync(() => void saved.push(checkpoint)) }
  }

  it.effect("act phase: run 1 stops at its turn cap; run 2 re-sends the pending feedback once and converges", () =>
    Effect.gen(function*() {
      const first = scripted(["a", "b"])
      const tests = scriptedCheck("tests", [pass(), fail("x1"), fail("x2")])
      const { saved, save } = saving()
      const one = yield* Supervisor.run({
        task: "t",
        worker: first.worker,
        checks: [tests.check],
        maxTurns: 2,
        checkpoint: { save }
      })
      assert.strictEqual(one.outcome._tag, "Unverified")
      const last = saved.at(-1)!
      assert.deepStrictEqual([last.phase, last.turns, last.resumeToken], ["act", 2, "tok-2"])
      assert.include(last.pendingMessage, "- tests [new, 0.0s]: x2")
      assert.deepStrictEqual(Schema.decodeUnknownSync(Supervisor.Checkpoint)(JSON.parse(JSON.stringify(last))), last)

      const second = scripted(["c"])
      const passing = scriptedCheck("tests", [pass()])
      const { events, onEvent } = collect()
      const two = yield* Supervisor.run({
        task: "ignored: the checkpoint's task wins",
        worker: second.worker,
        checks: [passing.check],
        maxTurns: 5,
        checkpoint: { resume: last, save },
        onEvent
      })
      assert.deepStrictEqual(two.outcome, { _tag: "Converged", turns: 3 })
      assert.deepStrictEqual(second.requests, [{ message: last.pendingMessage, phase: "act", resumeToken: "tok-2" }])
      assert.strictEqual(passing.rounds(), 1) // no new baseline on resume
      assert.deepStrictEqual(two.baseline, last.baseline)
      assert.deepStrictEqual(ofTag(events, "WorkerTurnStart").map((e) => e.turn), [3])
      assert.deepStrictEqual(two.usage, { ...Message.emptyUsage, input: 30, output: 30 })
    }))

  it.effect("plan phase: interrupted while revising; the resumed run asks for the revision again, then acts", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.interactive()
      const first = scripted(["plan v1", () => Effect.never])
      const { saved, save } = saving()
      // the reviewer refines the plan as it is proposed
      const reviewer = (event: AgentEvent.AgentEvent) =>
        SupervisorEvent.tagOf(event) === "PlanProposed"
          ? Effect.asVoid(approvals.decidePlanWith({ _tag: "Refine", notes: "mention the tests" }))
          : Effect.void
      const fiber = yield* Effect.forkChild(
        Supervisor.run({ task: "t", worker: first.worker, plan: true, checkpoint: { save }, onEvent: reviewer }).pipe(
          Effect.provideService(Approvals.Approvals, approvals)
        )
      )
      yield* Effect.yieldNow
      yield* Fiber.interrupt(fiber)
      const last = saved.at(-1)!
      assert.deepStrictEqual([last.phase, last.planIteration, last.turns], ["plan", 2, 0])
      assert.strictEqual(last.pendingMessage, Supervisor.revisionRequest("mention the tests"))

      const second = scripted(["plan v2", "done"])
      const result = yield* Supervisor.run({ task: "t", worker: second.worker, checkpoint: { resume: last, save } })
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 1 })
      assert.deepStrictEqual(second.requests.map((r) => [r.phase, r.message]), [
        ["plan", Supervisor.revisionRequest("mention the tests")],
        ["act", Supervisor.actRequest("plan v2", "t")]
      ])
      assert.strictEqual(result.planIterations, 2)
    }))

  it.effect("resumed in the middle of a turn: the checkpoints before it goes on say so; the worker continues it", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["done"])
      const { saved, save } = saving()
      const resume: Supervisor.Checkpoint = {
        version: 2,
        runId: "r",
        task: "t",
        phase: "act",
        planIteration: 1,
        pendingMessage: "feedback",
        turns: 1,
        usage: Message.emptyUsage,
        elapsedMs: 0,
        baseline: [],
        inTurn: true
      }
      const result = yield* Supervisor.run({ task: "t", worker, checkpoint: { resume, save } })
      assert.deepStrictEqual(result.outcome, { _tag: "Converged", turns: 2 })
      assert.deepStrictEqual(requests.map((r) => [r.message, "continue" in r && r.continue]), [["feedback", true]])
      // saved at the act phase's start, before the turn went on: still in it (a stop there must not send the
      // message a second time); the ending is saved after it
      assert.deepStrictEqual(saved.map((c) => c.inTurn), [true, undefined])
    }))

  it.effect("a checkpoint already past the turn cap ends Unverified without starting the worker", () =>
    Effect.gen(function*() {
      const { worker, requests } = scripted(["x"])
      const resume: Supervisor.Checkpoint = {
        version: 2,
        runId: "r",
        task: "t",
        phase: "act",
        planIteration: 1,
        pendingMessage: "feedback",
        turns: 5,
        usage: Message.emptyUsage,
        elapsedMs: 0,
        baseline: []
      }
      const checkpoint = { resume, save: () => Effect.void }
      const result = yield* Supervisor.run({ task: "t", worker, maxTurns: 3, checkpoint })
      assert.deepStrictEqual(result.outcome, { _tag: "Unverified", budget: "turns", limit: 3, used: 5, failing: [] })
      assert.strictEqual(requests.length, 0)
    }))
})
