/**
 * The conformance matrix (issue 30): one catalogue of scenarios
 * (scenarios.ts) run through every way to run a session (backends.ts),
 * each backend's transcript, events (their tags in order, nested ones with
 * their path; without the events the backend documents as its own), the
 * outcome of each run (a scenario with follow-ups has several) and the last
 * one's typed output compared with `Agent.run`'s.
 *
 * Where a backend differs today, {@link gaps} says how, in a sentence; the
 * cells that differ must be exactly those: a gap that gets fixed fails its
 * cell until it is taken out of the table (so the table only shrinks), and a
 * new difference fails too. What a backend cannot promise by design is
 * pinned apart, in {@link documented}, as exactly what it shows instead. The
 * matrix is printed at the end.
 *
 * PostgreSQL: the `DurableSession (PostgreSQL)` column runs one runner in
 * this process on a local server; it is skipped, saying why, where
 * PostgreSQL cannot start.
 */
import { Deferred, Duration, Effect, Exit, Fiber, Schedule, Scope } from "effect"
import type { AgentEvent } from "effect-agent"
import { isDeepStrictEqual } from "node:util"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { type Backend, backends, endsOf, type Final, type Handle, patience, reference, type Start, waitForEnds } from "./backends.ts"
import { type Scenario, scenarios, withCurrent } from "./scenarios.ts"

/** What a backend showed of a scenario. */
interface Observed {
  readonly events: ReadonlyArray<string>
  /** How each run ended, as its `AgentEnd` says (an error or a defect by its tag). */
  readonly ends: ReadonlyArray<unknown>
  readonly final: Final
}

type Cell = `${string} × ${string}`

/**
 * Where a backend differs from `Agent.run` today: backend × scenario → what
 * is observed. Only remove entries (when the gap is fixed); never add one to
 * make a new difference pass.
 */
const gaps: Partial<Record<Cell, string>> = {}

/**
 * Gaps seen on some runs and not others (a race in the backend): such a cell
 * may differ or agree, and says which it did. Fix the race and move the
 * entry out; never add one to make a flaky new difference pass.
 */
const intermittent: Partial<Record<Cell, string>> = {}

/**
 * Differences a backend documents because it cannot keep the promise by
 * design (at-least-once activities, a step in flight that is not cut short):
 * backend × scenario → the documented difference (`says`), and what the
 * backend shows instead of what `Agent.run` shows (`expect`, from the
 * reference's observation). Such a cell must show exactly that: it differs
 * from `Agent.run`, as a gap does, but is pinned and counted apart.
 */
const documented: Partial<Record<Cell, { readonly says: string; readonly expect: (reference: Observed) => Observed }>> =
  {}

const cell = (backend: Backend, scenario: Scenario): Cell => `${backend.name} × ${scenario.name}`

/** An event's tag, a nested one's with the path of agents it comes from. */
const tagOf = (event: AgentEvent.AgentEvent): string =>
  event._tag === "Nested" ? `${event.path.join("/")}:${tagOf(event.event)}` : event._tag

const innerTag = (event: AgentEvent.AgentEvent): string => event._tag === "Nested" ? innerTag(event.event) : event._tag

/**
 * The tags compared: without the backend's own, and with the events of a
 * batch's concurrent calls (a run of `ToolExecution*` events) in a fixed
 * order, since the calls of a batch run concurrently and interleave as they
 * happen to (each call's own order is checked by the transcript).
 */
const normalise = (events: ReadonlyArray<AgentEvent.AgentEvent>, own: ReadonlyArray<string>) => {
  const tags = events.filter((event) => !own.includes(innerTag(event))).map(tagOf)
  const out: Array<string> = []
  let batch: Array<string> = []
  for (const tag of [...tags, ""]) {
    if (/(^|:)ToolExecution(Start|Update|End)$/.test(tag)) {
      batch.push(tag)
      continue
    }
    out.push(...batch.sort(), ...(tag === "" ? [] : [tag]))
    batch = []
  }
  return out
}

/** The first call waiting for approval among the events (at any depth): its approval id. */
const askedFor = (events: ReadonlyArray<AgentEvent.AgentEvent>): string | undefined => {
  for (const outer of events) {
    let event = outer
    while (event._tag === "Nested") event = event.event
    if (event._tag === "ApprovalRequested") return event.approvalId ?? event.toolCallId
  }
  return undefined
}

/** `CONFORMANCE_DEBUG=1`: print what each cell observed. */
const debug = process.env.CONFORMANCE_DEBUG === "1"
const show = (what: string, value: unknown) => Effect.sync(() => console.log(`${what}: ${JSON.stringify(value, null, 1)}`))

const failure = (what: string) => () => Effect.fail(new Error(what))

/** Sends the scenario's steps to a running scenario, in order, each awaited (bounded). */
const drive = (scenario: Scenario, handle: Handle, gate: { readonly reached: Deferred.Deferred<void>; readonly open: Deferred.Deferred<void> }) =>
  Effect.gen(function*() {
    let runs = 1
    for (const step of scenario.steps) {
      switch (step._tag) {
        case "SteerAtGate": {
          yield* Deferred.await(gate.reached).pipe(
            Effect.timeoutOrElse({ duration: patience, orElse: failure("the gate call never started") })
          )
          yield* handle.steer(step.text)
          yield* Deferred.succeed(gate.open, undefined)
          break
        }
        case "CancelAsked": {
          // once a call asks (at any depth), as the backend lists it
          yield* handle.events.pipe(
            Effect.repeat({ until: (events) => askedFor(events) !== undefined, schedule: Schedule.spaced("20 millis") }),
            Effect.timeoutOrElse({ duration: patience, orElse: failure("no call asked for approval") })
          )
          yield* handle.cancel(step.reason)
          break
        }
        case "ApproveAsked": {
          // Asked, then answered by the id the backend lists; a handle that has not taken the request yet is asked again.
          let asked: string | undefined
          const approved = yield* handle.events.pipe(
            Effect.map((events) => (asked = askedFor(events))),
            Effect.flatMap((id) =>
              id === undefined ? Effect.succeed(false) : handle.approve(id).pipe(
                Effect.timeoutOrElse({ duration: patience, orElse: failure(`approving ${id} did not answer`) })
              )
            ),
            Effect.repeat({ until: (done) => done, schedule: Schedule.spaced("20 millis") }),
            Effect.timeoutOrElse({
              duration: patience,
              orElse: () =>
                Effect.fail(
                  new Error(
                    asked === undefined
                      ? "no call asked for approval"
                      : `approving ${asked}, the call that asked, answered nothing`
                  )
                )
            })
          )
          assert.isTrue(approved)
          break
        }
        case "FollowUpAfterEnd": {
          yield* waitForEnds(handle.events, runs)
          yield* handle.followUp(step.text)
          runs++
          break
        }
      }
    }
    return runs
  })

/**
 * `Effect.scoped`, but a scope whose closing (stopping the backend's run)
 * takes longer than the cells' patience is left behind, and the cell fails saying so.
 */
const bounded = <A, E>(effect: Effect.Effect<A, E, Scope.Scope>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const exit = yield* Effect.exit(Scope.provide(effect, scope))
    const closed = yield* Effect.forkDetach(Scope.close(scope, Exit.void))
    const stopped = yield* Fiber.await(closed).pipe(
      Effect.as(true),
      Effect.timeoutOrElse({ duration: patience, orElse: () => Effect.succeed(false) })
    )
    if (stopped) return yield* exit
    const first = Exit.isFailure(exit) ? `${String(exit.cause).split("\n")[0]}; then ` : ""
    return yield* Effect.fail(new Error(`${first}stopping the session took more than ${Duration.format(Duration.fromInputUnsafe(patience))}`))
  })

/** Runs a scenario on a backend: what it showed, or why it showed nothing. */
const observe = (start: Start, backend: Backend, scenario: Scenario): Effect.Effect<Observed | { readonly failed: string }> =>
  withCurrent(scenario, (gate) =>
    bounded(Effect.gen(function*() {
      const handle = yield* start(scenario, gate)
      const runs = yield* drive(scenario, handle, gate).pipe(
        Effect.tapError(() => debug ? Effect.flatMap(handle.events, (events) => show("events when a step failed", events.map(tagOf))) : Effect.void)
      )
      const final = yield* (handle.final ?? ((n: number) => waitForEnds(handle.events, n)))(runs)
      // The last run's end is in the events: nothing follows it.
      const events = yield* handle.events
      const ends = endsOf(events).map((end) =>
        end.outcome === undefined ? end.error?._tag ?? "defect" : (handle.outcome ?? ((outcome) => outcome))(end.outcome)
      )
      const observed = { events: normalise(events, backend.own), ends, final }
      if (debug) yield* show(`${backend.name} × ${scenario.name}`, observed)
      return observed
    }))).pipe(
    Effect.catchCause((cause) => Effect.succeed({ failed: String(cause).split("\n")[0]! }))
  )

/** How an observation differs from the reference's, in a line; `undefined` when it does not. */
const difference = (expected: Observed, actual: Observed | { readonly failed: string }): string | undefined => {
  if ("failed" in actual) return `failed: ${actual.failed}`
  const json = (value: unknown) => JSON.parse(JSON.stringify(value ?? null))
  const { final } = actual
  if (!isDeepStrictEqual(json(final.outcome), json(expected.final.outcome))) {
    return `outcome ${JSON.stringify(final.outcome)}, Agent.run: ${JSON.stringify(expected.final.outcome)}`
  }
  if (!isDeepStrictEqual(json(actual.ends), json(expected.ends))) {
    return `runs ended ${JSON.stringify(actual.ends)}, Agent.run: ${JSON.stringify(expected.ends)}`
  }
  if (!isDeepStrictEqual(json(final.output), json(expected.final.output))) {
    return `output ${JSON.stringify(final.output)}, Agent.run: ${JSON.stringify(expected.final.output)}`
  }
  if (!isDeepStrictEqual(json(final.messages), json(expected.final.messages))) {
    const at = final.messages.findIndex((message, i) => !isDeepStrictEqual(json(message), json(expected.final.messages[i])))
    return `transcript differs at message ${at < 0 ? expected.final.messages.length : at}: ${
      JSON.stringify(final.messages[at] ?? null).slice(0, 160)
    }, Agent.run: ${JSON.stringify(expected.final.messages[at < 0 ? final.messages.length : at] ?? null).slice(0, 160)}`
  }
  if (!isDeepStrictEqual(actual.events, expected.events)) {
    const at = actual.events.findIndex((tag, i) => tag !== expected.events[i])
    const i = at < 0 ? expected.events.length : at
    return `events differ at ${i}: ${actual.events[i] ?? "(end)"}, Agent.run: ${expected.events[i] ?? "(end)"}`
  }
  return undefined
}

const scope = Effect.runSync(Scope.make())
const made = new Map<string, Start | { readonly skip: string }>()
const expected = new Map<string, Observed>()
const results = new Map<Cell, "✓" | "gap" | "✓ (intermittent)" | "gap (intermittent)" | "documented" | "differs" | "skip">()

beforeAll(async () => {
  for (const backend of backends) {
    const start = await Effect.runPromise(
      backend.make.pipe(
        Scope.provide(scope),
        Effect.catchCause((cause) => Effect.succeed({ skip: `could not start: ${String(cause).split("\n")[0]}` }))
      )
    )
    if ("skip" in start) console.log(`conformance: skipping ${backend.name}: ${start.skip}`)
    made.set(backend.name, start)
  }
}, 120_000)

afterAll(async () => {
  await Effect.runPromise(Scope.close(scope, Exit.void))
  const others = backends.filter((backend) => backend !== reference)
  const width = Math.max(...scenarios.map((scenario) => scenario.name.length))
  const rows = scenarios.map((scenario) =>
    `${scenario.name.padEnd(width)} | ${
      others.map((backend) => (results.get(cell(backend, scenario)) ?? "-").padEnd(backend.name.length)).join(" | ")
    }`
  )
  const agree = [...results.values()].filter((result) => result === "✓").length
  const ran = [...results.values()].filter((result) => result !== "skip").length
  console.log([
    `conformance matrix: ${agree} of ${ran} cells agree with Agent.run`,
    `${"".padEnd(width)} | ${others.map((backend) => backend.name).join(" | ")}`,
    ...rows
  ].join("\n"))
})

describe("the gaps table", () => {
  it("names only cells of the matrix", () => {
    const cells = new Set<string>(backends.flatMap((backend) => scenarios.map((scenario) => cell(backend, scenario))))
    for (const key of [...Object.keys(gaps), ...Object.keys(documented), ...Object.keys(intermittent)]) assert.isTrue(cells.has(key), key)
  })
})

describe("the catalogue on Agent.run (the reference)", () => {
  for (const scenario of scenarios) {
    it(scenario.name, async () => {
      const start = made.get(reference.name)
      assert(start !== undefined && !("skip" in start))
      const observed = await Effect.runPromise(observe(start, reference, scenario))
      assert.notProperty(observed, "failed", "failed" in observed ? observed.failed : "")
      assert(!("failed" in observed))
      expected.set(scenario.name, observed)
    }, 120_000)
  }
})

for (const backend of backends.filter((backend) => backend !== reference)) {
  describe(`the catalogue on ${backend.name}`, () => {
    for (const scenario of scenarios) {
      it(scenario.name, async (context) => {
        const start = made.get(backend.name)
        const key = cell(backend, scenario)
        if (start === undefined || "skip" in start) {
          results.set(key, "skip")
          return context.skip()
        }
        const reference = expected.get(scenario.name)
        assert(reference !== undefined, "the reference ran first")
        const observed = await Effect.runPromise(observe(start, backend, scenario))
        const differs = difference(reference, observed)
        const pinned = documented[key]
        if (pinned !== undefined) {
          const unlike = difference(pinned.expect(reference), observed)
          results.set(key, differs !== undefined && unlike === undefined ? "documented" : "differs")
          assert.isDefined(differs, `${key} agrees with Agent.run now: take it out of the documented table ("${pinned.says}")`)
          assert.isUndefined(unlike, `${key} is not what is documented ("${pinned.says}"): ${unlike}`)
          console.log(`${key} (documented: ${pinned.says}): ${differs}`)
          return
        }
        const gap = gaps[key]
        if (intermittent[key] !== undefined) {
          results.set(key, differs === undefined ? "✓ (intermittent)" : "gap (intermittent)")
          console.log(`${key}: ${differs ?? "agreed this time"}`)
          return
        }
        results.set(key, differs === undefined ? "✓" : gap === undefined ? "differs" : "gap")
        if (gap === undefined) {
          assert.isUndefined(differs, `${key} differs from Agent.run (a new gap?): ${differs}`)
        } else {
          assert.isDefined(differs, `${key} agrees with Agent.run now: take it out of the gaps table ("${gap}")`)
          console.log(`${key}: ${differs}`)
        }
      }, 120_000)
    }
  })
}

