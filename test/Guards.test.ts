import { assert, describe, it } from "@effect/vitest"
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, Fiber, Layer, Redacted, Stream } from "effect"
import { LanguageModel, type Response } from "effect/ai"
import { TestClock } from "effect/testing"
import {
  Agent,
  type AgentEvent,
  Approvals,
  Guards,
  Hooks,
  Message,
  Outcome,
  RunState,
  Steering
} from "effect-agent"
import { OpenAiChat } from "effect-agent/providers"
import { ScriptedModel } from "effect-agent/testing"
import { createServer } from "node:net"
import { assertValidTranscript, makeTrace, ofTag, recorder, runOk, tags, toolsLayer } from "./support.ts"

const addCall = (i: number) => ({ toolCalls: [{ id: `c${i}`, name: "add", params: { a: i, b: 1 } }] })
const lastRole = (request: ScriptedModel.Request) => request.prompt.content.at(-1)!.role
const systemTexts = (request: ScriptedModel.Request) =>
  request.prompt.content.flatMap((m) => m.role === "system" ? [m.content] : [])

describe("graceful turn limit", () => {
  it.effect("cap 8, grace 3: wrap-up before the 6th call; five tool turns then an answer is WrappedUp", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk(
        (i) => i < 5 ? addCall(i) : { text: "Here is what I did." },
        { config: { maxTurns: 8, graceTurns: 3 } }
      )
      assert.deepStrictEqual(result.outcome, { _tag: "WrappedUp" })
      assert.strictEqual(requests.length, 6)
      const wrapUps = ofTag(events, "WrapUpRequested")
      assert.strictEqual(wrapUps.length, 1)
      assert.strictEqual(wrapUps[0]!.source, "turns")
      assert.strictEqual(wrapUps[0]!.turn, 5)
      // delivered once, as a system message, right before the 6th model call
      for (let k = 0; k < 5; k++) assert.deepStrictEqual(systemTexts(requests[k]!), [])
      assert.strictEqual(lastRole(requests[5]!), "system")
      assert.match(systemTexts(requests[5]!)[0]!, /^You have used 5 of your 8 turns\. Stop calling work tools/)
      assert.isTrue(result.state.wrapUpRequested)
      assertValidTranscript(result.state.messages)
    }))

  it.effect("cap 6, grace 2, endless tool calls: MaxTurns after exactly 6 model calls", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk(addCall, { config: { maxTurns: 6, graceTurns: 2 } })
      assert.deepStrictEqual(result.outcome, { _tag: "MaxTurns", limit: 6 })
      assert.strictEqual(requests.length, 6)
      assert.deepStrictEqual(ofTag(events, "WrapUpRequested").map((e) => e.turn), [4])
      assert.strictEqual(lastRole(requests[4]!), "system")
      assert.deepStrictEqual(systemTexts(requests[5]!).length, 1) // later polls deliver nothing new
      assertValidTranscript(result.state.messages)
    }))

  it.effect("grace 0 switches it off; a cap of 3 or less has none by default; a grace at or over the cap is a ConfigError", () =>
    Effect.gen(function*() {
      for (const config of [{ maxTurns: 4, graceTurns: 0 }, { maxTurns: 3 }, { maxTurns: 1 }]) {
        const { events, result } = yield* runOk(addCall, { config })
        assert.deepStrictEqual(result.outcome, { _tag: "MaxTurns", limit: config.maxTurns })
        assert.deepStrictEqual(ofTag(events, "WrapUpRequested"), [])
      }
      for (const graceTurns of [4, 9]) {
        const error = yield* Effect.flip(
          Agent.run({ prompt: "go", config: { maxTurns: 4, graceTurns } }).pipe(
            Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "x" }]), toolsLayer()))
          )
        )
        assert.deepStrictEqual(
          error._tag === "ConfigError" && [error.field, error.rule],
          ["graceTurns", `must be less than maxTurns (4), or 0 for no wrap-up request; got ${graceTurns}`]
        )
      }
      const uncapped = yield* runOk((i) => i < 12 ? addCall(i) : { text: "done" }, {
        config: { maxTurns: null, graceTurns: 3 }
      })
      assert.deepStrictEqual(ofTag(uncapped.events, "WrapUpRequested"), [])
      assert.strictEqual(uncapped.result.outcome._tag, "Completed")
    }))

  it.effect("the default window is a quarter of a small cap: cap 5 asks for the wrap-up after turn 4, not turn 2", () =>
    Effect.gen(function*() {
      // [cap, the turn after which the wrap-up is asked]: the run's last quarter, at most 3 turns before the cap
      for (const [maxTurns, asked] of [[4, 3], [5, 4], [7, 6], [8, 6], [10, 8], [12, 9], [50, 47]] as const) {
        const { events, requests, result } = yield* runOk(addCall, { config: { maxTurns } })
        assert.deepStrictEqual(result.outcome, { _tag: "MaxTurns", limit: maxTurns })
        assert.deepStrictEqual(ofTag(events, "WrapUpRequested").map((e) => [e.source, e.turn]), [["turns", asked]])
        assert.match(systemTexts(requests[asked]!)[0]!, new RegExp(`^You have used ${asked} of your ${maxTurns} turns\\.`))
      }
    }))

  it("constructed with (50, 5): soft limit 45; with a grace of 0 or of the whole cap, none", () => {
    assert.strictEqual(Guards.gracefulTurnLimit({ maxTurns: 50, graceTurns: 5 }).softLimit, 45)
    assert.strictEqual(Guards.gracefulTurnLimit({ maxTurns: 50, graceTurns: 49 }).softLimit, 1)
    for (const graceTurns of [0, 50, 80]) {
      assert.strictEqual(Guards.gracefulTurnLimit({ maxTurns: 50, graceTurns }).softLimit, 50)
    }
  })

  it.effect("as a plugin, a grace of 0 asks for no wrap-up, as clark's constructor installs none", () =>
    Effect.gen(function*() {
      for (const graceTurns of [0, 5, 9]) {
        const { events, result } = yield* runOk(addCall, {
          config: { maxTurns: 5, graceTurns: 0 },
          plugins: [Guards.gracefulTurnLimit({ maxTurns: 5, graceTurns })]
        })
        assert.deepStrictEqual(ofTag(events, "WrapUpRequested"), [], `graceTurns ${graceTurns}`)
        assert.deepStrictEqual(result.outcome, { _tag: "MaxTurns", limit: 5 })
      }
    }))

  it.effect("the wording and the grace window come from providers; the window is clamped to [1, cap - 1]", () =>
    Effect.gen(function*() {
      const polls: Array<number> = []
      const custom = Guards.gracefulTurnLimit({
        maxTurns: 10,
        graceTurns: 2,
        grace: (info) => (polls.push(info.turn), info.turn >= 3 ? 100 : 0),
        message: (reason) => reason._tag === "Turns" ? `wrap up now (turn ${reason.turn})` : "?"
      })
      const { events, requests, result } = yield* runOk(
        (i) => i < 20 ? addCall(i) : { text: "done" },
        { config: { maxTurns: 10, graceTurns: 0 }, plugins: [custom] }
      )
      // a window of 0 is clamped to 1 (soft limit 9); at turn 3 the window of 100 is clamped to 9 (soft limit 1)
      assert.deepStrictEqual(ofTag(events, "WrapUpRequested").map((e) => [e.turn, e.message]), [[3, "wrap up now (turn 3)"]])
      assert.deepStrictEqual(systemTexts(requests[3]!), ["wrap up now (turn 3)"])
      assert.deepStrictEqual(polls.slice(0, 4), [0, 1, 2, 3])
      assert.deepStrictEqual(result.outcome, { _tag: "MaxTurns", limit: 10 })
    }))
})

describe("budgets", () => {
  const usage = { input: 100, output: 50 }

  it.effect("a token budget ends the run with BudgetExceeded before a model call that would go past it", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk((i) => ({ ...addCall(i), usage }), {
        config: { budgets: { tokens: 400 }, wrapUpAt: null }
      })
      // 150 tokens a call: the third, estimated at the last (150), does not fit beside the 300 spent
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "tokens", limit: 400, used: 300 })
      assert.strictEqual(requests.length, 2)
      assert.deepStrictEqual(
        ofTag(events, "GuardTripped").map((e) => [e.guard, e.action, e.detail, e.figures]),
        [["budget", "stop", "the next model call does not fit the tokens budget: 300 of 400 used, and the call is estimated at 150", {
          limit: 400,
          used: 300,
          estimate: 150
        }]]
      )
      assert.deepStrictEqual(tags(events).slice(-3), ["BudgetSnapshot", "GuardTripped", "AgentEnd"])
      const snapshots = ofTag(events, "BudgetSnapshot")
      assert.strictEqual(snapshots.length, 2)
      assert.deepStrictEqual(snapshots.at(-1)!.figures.usage, result.usage)
      assert.strictEqual(snapshots.at(-1)!.figures.limits.tokens, 400)
      assertValidTranscript(result.state.messages)
    }))

  it.effect("input, output and cost budgets", () =>
    Effect.gen(function*() {
      const input = yield* runOk((i) => ({ ...addCall(i), usage }), { config: { budgets: { inputTokens: 250 } } })
      assert.deepStrictEqual(input.result.outcome, { _tag: "BudgetExceeded", budget: "inputTokens", limit: 250, used: 200 })
      // a call that fits exactly is made; the budget is then exhausted
      const output = yield* runOk((i) => ({ ...addCall(i), usage }), { config: { budgets: { outputTokens: 100 } } })
      assert.deepStrictEqual(output.result.outcome, { _tag: "BudgetExceeded", budget: "outputTokens", limit: 100, used: 100 })
      assert.strictEqual(output.requests.length, 2)
      const cost = yield* runOk((i) => ({ ...addCall(i), usage: { ...usage, cost: 0.25 } }), {
        config: { budgets: { costUsd: 0.6 } }
      })
      assert.deepStrictEqual(cost.result.outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 0.6, used: 0.5 })
      assert.strictEqual(cost.requests.length, 2)
    }))

  it.effect("a cost a model reports as NaN, infinite or negative is no cost: the budget counts the valid ones", () =>
    Effect.gen(function*() {
      const costs = [Number.NaN, 0.25, Number.POSITIVE_INFINITY, -5, 0.25, 0.25]
      const { events, result } = yield* runOk((i) => ({ ...addCall(i), usage: { ...usage, cost: costs[i]! } }), {
        config: { budgets: { costUsd: 0.6 }, wrapUpAt: null }
      })
      // the invalid costs count 0 (and so estimate the next call at 0): the sixth call, at 0.25, does not fit beside 0.5
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 0.6, used: 0.5 })
      assert.strictEqual(ofTag(events, "TurnEnd").length, 5)
      assert.isTrue(ofTag(events, "BudgetSnapshot").every((e) => Number.isFinite(e.figures.usage.cost ?? 0)))
    }))

  it.effect("a token count a model reports below 0 is none: it gives back no budget", () =>
    Effect.gen(function*() {
      const counts = [{ input: 100, output: 50 }, { input: -100_000, output: -100_000 }, { input: 100, output: 50 }]
      const { result } = yield* runOk((i) => ({ ...addCall(i), usage: counts[i] ?? usage }), {
        config: { budgets: { tokens: 400 }, wrapUpAt: null }
      })
      // 150 + 0 + 150: the fourth call, estimated at 150, does not fit
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "tokens", limit: 400, used: 300 })
      assert.deepStrictEqual([result.usage.input, result.usage.output], [200, 100])
    }))

  it.effect("a wall-clock budget, on virtual time", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(
        runOk((i) => ({ ...addCall(i), delay: "20 seconds" }), { config: { budgets: { wallClock: "1 minute" }, wrapUpAt: null } })
      )
      yield* TestClock.adjust("10 minutes")
      const { requests, result } = yield* Fiber.join(fiber)
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "wallClock", limit: 60_000, used: 60_000 })
      assert.strictEqual(requests.length, 3)
    }))

  it.effect("at wrapUpAt of a budget the one-shot wrap-up request goes in", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk(
        (i) => i < 11 ? { ...addCall(i), usage } : { text: "summary", usage },
        { config: { budgets: { tokens: 2_000 }, wrapUpAt: 0.8 } }
      )
      // 11 calls of 150: 1,650 tokens, over 80% of 2,000 (and two more calls still fit)
      assert.deepStrictEqual(ofTag(events, "WrapUpRequested").map((e) => [e.turn, e.source]), [[11, "budget:tokens"]])
      assert.match(systemTexts(requests[11]!)[0]!, /^You have used 83% of your tokens budget\./)
      assert.deepStrictEqual(result.outcome, { _tag: "WrappedUp" })
    }))

  it.effect("the wrap-up request goes in before the call likely to be the last that fits, even short of wrapUpAt", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk(
        (i) => i < 2 ? { ...addCall(i), usage } : { text: "summary", usage },
        { config: { budgets: { tokens: 500 }, wrapUpAt: 0.8 } }
      )
      // 300 of 500 used, calls of 150: the third fits, a fourth would not; the model is asked before the third
      assert.deepStrictEqual(ofTag(events, "WrapUpRequested").map((e) => [e.turn, e.source]), [[2, "budget:tokens"]])
      assert.match(systemTexts(requests[2]!)[0]!, /^You have used 60% of your tokens budget\. Stop calling work tools/)
      assert.deepStrictEqual(result.outcome, { _tag: "WrappedUp" })
      assert.strictEqual(Message.totalTokens(result.usage), 450)
    }))

  it.effect("a resumed run whose budget is already exhausted ends without calling the model", () =>
    Effect.gen(function*() {
      const state: RunState.RunState = {
        ...RunState.make({ runId: "r", messages: [Message.user("go")] }),
        turn: 7,
        usage: { input: 900, output: 200, cacheRead: 0, cacheWrite: 0, reasoning: 0 }
      }
      const result = yield* Agent.runContinue(state, { config: { budgets: { tokens: 1_000 } } }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([]), toolsLayer()))
      )
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "tokens", limit: 1000, used: 1100 })
    }))
})

/** A local TCP port nobody listens on. */
const closedPort = Effect.callback<number>((resume) => {
  const probe = createServer()
  probe.listen(0, "127.0.0.1", () => {
    const address = probe.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    probe.close(() => resume(Effect.succeed(port)))
  })
})

describe("the wall-clock budget is a deadline", () => {
  const wall = (ms: number) => ({ budgets: { wallClock: ms }, wrapUpAt: null })
  const exceeded = (used: number) => Outcome.budgetExceeded("wallClock", 2_000, used)
  // Whether the handler had started says whether the call may have taken effect (issue 29, item 12).
  const stoppedBefore = "Tool call stopped before it started: the run's wall-clock budget of 2000 ms ran out. It did not run."
  const stoppedRunning = "Tool call stopped while it ran: the run's wall-clock budget of 2000 ms ran out. It had started and " +
    "was interrupted: its outcome is unknown, it may or may not have taken effect. Check before calling it again."

  /**
   * Runs until virtual time `deadline`: the run must not have ended 1 ms
   * before, and must have ended at it. Returns what it recorded and the
   * virtual time from AgentStart to AgentEnd.
   */
  const untilDeadline = <E>(run: Effect.Effect<RunState.RunResult, E>, deadline: number, events: ReadonlyArray<AgentEvent.AgentEvent>) =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(run)
      yield* TestClock.adjust(deadline - 1)
      assert.isUndefined(fiber.pollUnsafe(), "ended before its deadline")
      yield* TestClock.adjust(1)
      const result = yield* Fiber.join(fiber)
      return { result, endedAfter: events.at(-1)!.timestamp - events[0]!.timestamp }
    })

  it.effect("a model that hangs is cut at the deadline; what it streamed is kept", () =>
    Effect.gen(function*() {
      const { events, plugin } = recorder()
      const { endedAfter, result } = yield* untilDeadline(
        Agent.run({ prompt: "think", config: wall(2_000), plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "thinking about", hang: true }]), toolsLayer()))
        ),
        2_000,
        events
      )
      assert.strictEqual(endedAfter, 2_000)
      assert.deepStrictEqual(result.outcome, exceeded(2_000))
      const reply = result.messages.at(-1)!
      assert.deepStrictEqual(reply.role === "assistant" && [Message.textOf(reply), reply.stopReason], ["thinking about", "aborted"])
      const tripped = ofTag(events, "GuardTripped")
      assert.deepStrictEqual(tripped.map((e) => [e.guard, e.action, e.figures]), [["budget", "stop", { limit: 2_000, used: 2_000 }]])
      assert.strictEqual(events.at(-1)!._tag, "AgentEnd")
    }))

  it.effect("a reply cut after a complete tool call: the call is answered, never run", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const model = yield* LanguageModel.make({
        generateText: () => Effect.die("not used"),
        streamText: () =>
          Stream.concat(
            Stream.make<Array<Response.StreamPartEncoded>>(
              { type: "text-delta", id: "t", delta: "Let me add." },
              { type: "tool-call", id: "c1", name: "add", params: { a: 1, b: 2 } }
            ),
            Stream.never
          )
      })
      const { events, plugin } = recorder()
      const { endedAfter, result } = yield* untilDeadline(
        Agent.run({ prompt: "add", config: wall(2_000), plugins: [plugin] }).pipe(
          Effect.provideService(LanguageModel.LanguageModel, model),
          Effect.provide(toolsLayer(trace))
        ),
        2_000,
        events
      )
      assert.strictEqual(endedAfter, 2_000)
      assert.deepStrictEqual(result.outcome, exceeded(2_000))
      assertValidTranscript(result.messages)
      const answer = result.messages.at(-1)!
      assert.deepStrictEqual(answer.role === "toolResult" && [answer.toolCallId, Message.textOf(answer), answer.isError], [
        "c1",
        stoppedBefore,
        true
      ])
      assert.deepStrictEqual(answer.role === "toolResult" && answer.details, {
        kind: "budgetExceeded",
        budget: "wallClock",
        started: false
      })
      assert.deepStrictEqual(trace.started, [])
    }))

  it.effect("a tool that sleeps past the deadline is interrupted (its finalizer runs) and answered", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const { events, plugin } = recorder()
      const { endedAfter, result } = yield* untilDeadline(
        Agent.run({ prompt: "sleep", config: { ...wall(2_000), toolTimeout: "1 minute" }, plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(
            ScriptedModel.layer([{ toolCalls: [{ id: "s", name: "sleep", params: { ms: 8_000, label: "s" } }] }, { text: "never" }]),
            toolsLayer(trace)
          ))
        ),
        2_000,
        events
      )
      assert.strictEqual(endedAfter, 2_000)
      assert.deepStrictEqual(result.outcome, exceeded(2_000))
      assert.deepStrictEqual([trace.started, trace.finished, trace.finalized], [["s"], [], ["s"]])
      const last = result.messages.at(-1)!
      assert.strictEqual(Message.textOf(last), stoppedRunning)
      assert.deepStrictEqual(last.role === "toolResult" && last.details, {
        kind: "budgetExceeded",
        budget: "wallClock",
        started: true,
        outcome: "unknown"
      })
      assert.deepStrictEqual(ofTag(events, "ToolExecutionEnd").map((e) => [e.toolCallId, e.durationMs]), [["s", 2_000]])
      assert.deepStrictEqual(tags(events).slice(-4), ["TurnEnd", "BudgetSnapshot", "GuardTripped", "AgentEnd"])
    }))

  it.effect("a parallel batch: finished calls keep their results, running ones are stopped, queued ones never start", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const sleep = (label: string, ms: number) => ({ id: label, name: "sleep", params: { ms, label } })
      const { events, plugin } = recorder()
      const { endedAfter, result } = yield* untilDeadline(
        Agent.run({ prompt: "sleep", config: { ...wall(2_000), maxParallelTools: 2 }, plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(
            ScriptedModel.layer([
              { toolCalls: [sleep("a", 500), sleep("b", 5_000), sleep("c", 5_000), sleep("d", 5_000)] },
              { text: "never" }
            ]),
            toolsLayer(trace)
          ))
        ),
        2_000,
        events
      )
      assert.strictEqual(endedAfter, 2_000)
      assert.deepStrictEqual(result.outcome, exceeded(2_000))
      assertValidTranscript(result.messages)
      assert.deepStrictEqual(
        result.messages.flatMap((m) => m.role === "toolResult" ? [[m.toolCallId, Message.textOf(m)]] : []),
        [["a", "slept a"], ["b", stoppedRunning], ["c", stoppedRunning], ["d", stoppedBefore]]
      )
      assert.deepStrictEqual(trace.started, ["a", "b", "c"])
      assert.deepStrictEqual(trace.finalized.slice().sort(), ["a", "b", "c"])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionStart").map((e) => e.toolCallId), ["a", "b", "c"])
      assert.deepStrictEqual(ofTag(events, "ToolExecutionEnd").map((e) => e.toolCallId).sort(), ["a", "b", "c", "d"])
    }))

  it.effect("an approval that never comes is cut at the deadline; the call never runs", () =>
    Effect.gen(function*() {
      const trace = makeTrace()
      const approvals = yield* Approvals.interactive()
      const { events, plugin } = recorder()
      const { endedAfter, result } = yield* untilDeadline(
        Agent.run({ prompt: "deploy", config: wall(2_000), plugins: [plugin] }).pipe(
          Effect.provideService(Approvals.Approvals, approvals),
          Effect.provide(Layer.merge(
            ScriptedModel.layer([{ toolCalls: [{ id: "d", name: "deploy", params: { env: "prod" } }] }, { text: "never" }]),
            toolsLayer(trace)
          ))
        ),
        2_000,
        events
      )
      assert.strictEqual(endedAfter, 2_000)
      assert.deepStrictEqual(result.outcome, exceeded(2_000))
      assert.deepStrictEqual(trace.started, [])
      const last = result.messages.at(-1)!
      assert.strictEqual(Message.textOf(last), stoppedBefore)
      assert.deepStrictEqual(last.role === "toolResult" && last.details, {
        kind: "budgetExceeded",
        budget: "wallClock",
        started: false
      })
      assert.deepStrictEqual(
        ofTag(events, "ApprovalResolved").map((e) => [e.approved, e.reason]),
        [[false, stoppedBefore]]
      )
      assert.deepStrictEqual(result.state.pendingApprovals, [])
    }))

  it.live("a provider retrying a server that is not there is cut at the deadline too (real time)", () =>
    Effect.gen(function*() {
      const port = yield* closedPort
      // without the deadline: 40 retries, up to a second apart (more than 35 s); with it, half a second, which a
      // loaded machine stretches (seen: 5.6 s beside two other suites), never to 15
      const model = OpenAiChat.layer({
        model: "gpt-4o",
        apiKey: Redacted.make("sk-test"),
        baseUrl: `http://127.0.0.1:${port}/v1`,
        retry: { maxRetries: 40, baseDelay: "200 millis", maxDelay: "1 second", maxElapsed: "1 minute" }
      }).pipe(Layer.provide(NodeHttpClient.layerUndici))
      const started = Date.now()
      const result = yield* Agent.run({ prompt: "hi", config: wall(500) }).pipe(
        Effect.provide(Layer.merge(model, toolsLayer()))
      )
      const elapsed = Date.now() - started
      assert.strictEqual(result.outcome._tag, "BudgetExceeded")
      assert.isBelow(elapsed, 15_000, "the retries ran on past the deadline")
    }))

  it.effect("a continued run counts the time used before: 1.5 s of 2 s used, it stops 0.5 s in", () =>
    Effect.gen(function*() {
      const state: RunState.RunState = { ...RunState.make({ runId: "r", messages: [Message.user("go")] }), elapsedMs: 1_500 }
      const { events, plugin } = recorder()
      const { endedAfter, result } = yield* untilDeadline(
        Agent.runContinue(state, { config: wall(2_000), plugins: [plugin] }).pipe(
          Effect.provide(Layer.merge(ScriptedModel.layer([{ text: "slow", hang: true }]), toolsLayer()))
        ),
        500,
        events
      )
      assert.strictEqual(endedAfter, 500)
      assert.deepStrictEqual(result.outcome, exceeded(2_000))
      assert.strictEqual(result.state.elapsedMs, 2_000)
    }))
})

describe("Guards.canonicalJson", () => {
  // The definition: sort every object's keys, then JSON.stringify.
  const sortKeys = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(sortKeys)
    if (typeof value !== "object" || value === null) return value
    const out: Record<string, unknown> = {}
    for (const key of Object.keys(value).sort()) out[key] = sortKeys(Reflect.get(value, key))
    return out
  }
  let seed = 7
  const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648
  const keys = ["a", "b", "zeta", "A", "é", "10", "2", "key with \"quotes\""]
  const value = (depth: number): unknown => {
    const pick = Math.floor(random() * (depth > 3 ? 5 : 8))
    switch (pick) {
      case 0:
        return null
      case 1:
        return random() < 0.5
      case 2:
        return Math.round(random() * 2000 - 1000) / 8
      case 3:
        return `s${Math.floor(random() * 100)}\n"x"`
      case 4:
        return undefined
      case 5:
        return Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1))
      default: {
        const out: Record<string, unknown> = {}
        for (let i = Math.floor(random() * 5); i > 0; i--) out[keys[Math.floor(random() * keys.length)]!] = value(depth + 1)
        return out
      }
    }
  }
  const shuffled = (input: unknown): unknown => {
    if (Array.isArray(input)) return input.map(shuffled)
    if (typeof input !== "object" || input === null) return input
    const entries = Object.entries(input).sort(() => random() - 0.5)
    return Object.fromEntries(entries.map(([key, entry]) => [key, shuffled(entry)]))
  }

  it("equals sorting the keys and stringifying, on 500 random values, and ignores key order", () => {
    for (let i = 0; i < 500; i++) {
      const input = value(0)
      const expected = JSON.stringify(sortKeys(input)) ?? "null"
      assert.strictEqual(Guards.canonicalJson(input), expected)
      assert.strictEqual(Guards.canonicalJson(shuffled(input)), expected)
    }
    assert.strictEqual(Guards.canonicalJson({ b: 1, a: [undefined, { d: undefined, c: 2 }] }), "{\"a\":[null,{\"c\":2}],\"b\":1}")
    assert.strictEqual(Guards.canonicalJson({ at: new Date(0) }), "{\"at\":\"1970-01-01T00:00:00.000Z\"}")
  })
})

describe("loop detection", () => {
  const same = { toolCalls: [{ name: "add", params: { a: 1, b: 2 } }, { name: "big", params: { chars: 3 } }] }
  const reordered = { toolCalls: [{ name: "big", params: { chars: 3 } }, { name: "add", params: { b: 2, a: 1 } }] }

  it.effect("the third identical batch warns once; the fourth ends the run with LoopDetected", () =>
    Effect.gen(function*() {
      const { events, requests, result } = yield* runOk([same, reordered, same, reordered, { text: "never" }])
      assert.strictEqual(result.outcome._tag, "LoopDetected")
      if (result.outcome._tag === "LoopDetected") {
        assert.strictEqual(result.outcome.repeats, 4)
        assert.strictEqual(result.outcome.signature, "add{\"a\":1,\"b\":2}|big{\"chars\":3}")
      }
      assert.strictEqual(requests.length, 4)
      const tripped = ofTag(events, "GuardTripped").map((e) => [e.guard, e.action, e.turn])
      assert.deepStrictEqual(tripped, [["loopDetector", "warn", 3], ["loopDetector", "stop", 4]])
      assert.match(systemTexts(requests[3]!)[0]!, /same tool calls with the same results 3 times/)
      assertValidTranscript(result.state.messages)
    }))

  it.effect("with warnFirst: false, gglib's counting: the third identical batch ends the run, with no warning", () =>
    Effect.gen(function*() {
      const plugin = yield* Guards.loopDetector(2, { warnFirst: false })
      const { events, requests, result } = yield* runOk([same, reordered, same, { text: "never" }], {
        config: { maxRepeatedBatches: null },
        plugins: [plugin]
      })
      assert.deepStrictEqual(result.outcome, {
        _tag: "LoopDetected",
        repeats: 3,
        signature: "add{\"a\":1,\"b\":2}|big{\"chars\":3}"
      })
      assert.strictEqual(requests.length, 3)
      const tripped = ofTag(events, "GuardTripped").map((e) => [e.guard, e.action, e.turn])
      assert.deepStrictEqual(tripped, [["loopDetector", "stop", 3]])
      assertValidTranscript(result.state.messages)
    }))

  it.effect("a repeat whose results differ does not count; a text turn or a user message resets the streak", () =>
    Effect.gen(function*() {
      // `sleep` answers with its label; the same call gives the same result, so vary the world with `progress`
      let n = 0
      const changing = Hooks.plugin({
        name: "world-changes",
        afterToolCall: () => Effect.sync(() => ({ content: [Message.text(`state ${n++}`)] }))
      })
      const worldChanged = yield* runOk((i) => i < 6 ? same : { text: "done" }, { plugins: [changing] })
      assert.strictEqual(worldChanged.result.outcome._tag, "Completed")

      const steering = yield* Steering.make()
      const steered = yield* runOk((i) => i < 6 ? same : { text: "done" }, {
        steering,
        plugins: [{
          name: "nudge",
          onEvent: (e) => e._tag === "TurnEnd" && e.turn === 2 ? Effect.orDie(steering.steer("try again")) : Effect.void
        }]
      })
      assert.deepStrictEqual(ofTag(steered.events, "GuardTripped").map((e) => [e.action, e.turn]), [["warn", 5], ["stop", 6]])
    }))

  it.effect("the streak is saved with the run: a continued run warns at the third identical batch", () =>
    Effect.gen(function*() {
      // the saved streak's last batch is the first of its kind: its results are signed when the state is saved
      const other = { toolCalls: [{ name: "add", params: { a: 5, b: 5 } }] }
      const first = yield* runOk([other, same], { config: { maxTurns: 2, graceTurns: 0 } })
      assert.strictEqual(first.result.outcome._tag, "MaxTurns")
      const saved = first.result.state.pluginState["loopDetector"]
      assert.deepInclude(saved, { repeats: 1, signature: "add{\"a\":1,\"b\":2}|big{\"chars\":3}", warned: false })
      assert.isString(typeof saved === "object" && saved !== null && "results" in saved ? saved.results : undefined)
      const second = yield* Agent.runContinue(first.result.state, { config: { maxTurns: 10, graceTurns: 0 } }).pipe(
        Effect.provide(Layer.merge(ScriptedModel.layer([reordered, same, { text: "done" }]), toolsLayer()))
      )
      // the warning went in before the model's next call, and the final text turn then reset the streak
      assert.deepInclude(second.state.pluginState["loopDetector"], { warned: true, repeats: 0 })
      assert.isTrue(second.messages.some((m) => m.role === "system" && /same results 3 times/.test(Message.textOf(m))))
      assert.strictEqual(second.outcome._tag, "Completed")
    }))

  it.effect("null switches it off", () =>
    Effect.gen(function*() {
      const { result } = yield* runOk((i) => i < 8 ? same : { text: "done" }, { config: { maxRepeatedBatches: null } })
      assert.strictEqual(result.outcome._tag, "Completed")
    }))
})

describe("stagnation", () => {
  // Tool-less turns repeat when the run keeps being pushed on without a new user message.
  const keepGoing = (times: number) => {
    let left = times
    return Hooks.plugin({
      name: "keep-going",
      followUp: () => Effect.sync(() => left-- > 0 ? [Message.system("Continue.")] : [])
    })
  }

  it.effect("the sixth identical reply (whitespace aside) ends the run with Stagnated", () =>
    Effect.gen(function*() {
      const replies = ["I am done.", "I am  done.", " I am done.\n", "I am done.", "I am done.", "I  am done.", "x"]
      const { events, requests, result } = yield* runOk((i) => ({ text: replies[i] ?? "x" }), {
        plugins: [keepGoing(100)]
      })
      assert.deepStrictEqual(result.outcome, { _tag: "Stagnated", repeats: 6 })
      assert.strictEqual(requests.length, 6)
      assert.deepStrictEqual(ofTag(events, "GuardTripped").map((e) => [e.guard, e.figures]), [[
        "stagnationDetector",
        { repeats: 6, limit: 5 }
      ]])
    }))

  it.effect("counts over the run, not only in a row; a new user message resets it", () =>
    Effect.gen(function*() {
      const replies = ["same", "other", "same", "same", "other", "same", "same", "same", "x"]
      const run = yield* runOk((i) => ({ text: replies[i] ?? "x" }), { plugins: [keepGoing(100)] })
      assert.deepStrictEqual(run.result.outcome, { _tag: "Stagnated", repeats: 6 })
      assert.strictEqual(run.requests.length, 8)

      const steering = yield* Steering.make()
      const reset = yield* runOk((i) => ({ text: i < 9 ? "same" : "done" }), {
        steering,
        config: { maxStagnantReplies: 3 },
        plugins: [keepGoing(9), {
          name: "user",
          onEvent: (e) => e._tag === "TurnEnd" && e.turn === 3 ? Effect.orDie(steering.followUp("new question")) : Effect.void
        }]
      })
      // 3 "same" replies, then the user's follow-up resets the count: 3 more are tolerated
      assert.deepStrictEqual(reset.result.outcome, { _tag: "Stagnated", repeats: 4 })
      assert.strictEqual(reset.requests.length, 7)
    }))
})

