/**
 * A budget bounds a whole tree of sub-agents (issue 29, item 4). The attack:
 * a top run with a cost budget whose model calls 8 sub-agents in parallel,
 * each of which calls 8 more, each call costing the same. Every call used to
 * check only what was spent, so the calls in flight in concurrent children
 * were not counted: the tree spent 7.3 times its budget. A call now reserves
 * its estimate against the budgets of its run and of every run above it, and
 * starts only when it fits beside what is spent and reserved.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Latch, Layer, Schedule, Schema } from "effect"
import { AiError, Toolkit } from "effect/ai"
import { WorkflowEngine } from "effect/workflow"
import { Agent, type AgentConfig, Message, SubAgent, ToolRegistry } from "effect-agent"
import { CheckpointStore, DurableSession, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { ofTag, recorder, toolsLayer } from "./support.ts"

const Topic = Schema.Struct({ topic: Schema.String })

type Counted = "tokens" | "inputTokens" | "outputTokens" | "costUsd"
const counted: ReadonlyArray<Counted> = ["tokens", "inputTokens", "outputTokens", "costUsd"]

const amountOf = (budget: Counted, usage: Message.Usage): number =>
  budget === "tokens"
    ? usage.input + usage.output
    : budget === "inputTokens"
    ? usage.input
    : budget === "outputTokens"
    ? usage.output
    : usage.cost ?? 0

const usageOf = (turn: { readonly input: number; readonly output: number; readonly cost: number }): Message.Usage => ({
  input: turn.input,
  output: turn.output,
  cacheRead: 0,
  cacheWrite: 0,
  reasoning: 0,
  cost: turn.cost
})

/** An agent's path: its task, the first user message of its requests. */
const pathOf = (request: ScriptedModel.Request): string => {
  const first = request.prompt.content.find((message) => message.role === "user")
  return first?.role === "user" ? first.content.flatMap((part) => part.type === "text" ? [part.text] : []).join("") : "?"
}

/** Which of its agent's calls a request is: how many replies it holds (a resumed agent carries on). */
const callIndex = (request: ScriptedModel.Request): number =>
  request.prompt.content.filter((message) => message.role === "assistant").length

/** A sub-agent tool's registry: `definition` as the only tool. */
const registryOf = <const Name extends string>(definition: SubAgent.Definition<Name, typeof Topic>) => {
  const toolkit = Toolkit.make(Agent.asTool(definition))
  return ToolRegistry.layer(toolkit).pipe(
    Layer.provide(toolkit.toLayer(Object.fromEntries([[definition.name, SubAgent.handler(definition)]]) as never))
  )
}

/** What a tree of agents is: who calls how many, how many turns each takes, what each call costs. */
interface Shape {
  /** How deep the tree goes: the top run is at 0, its sub-agents at 1, … */
  readonly depth: number
  /** How many sub-agents the agent at `path` calls in parallel, in its first turn. */
  readonly fanOut: (path: string) => number
  /** How many model calls the agent at `path` makes (the last one answers). */
  readonly turns: (path: string) => number
  /** The usage of the agent's `k`-th call. */
  readonly usage: (path: string, k: number) => { readonly input: number; readonly output: number; readonly cost: number }
  /** How long the call takes to stream, in ms (the calls of concurrent agents overlap). */
  readonly delay: (path: string, k: number) => number
  /** The config of the sub-agents at a depth (their own budgets). */
  readonly config?: ((depth: number) => AgentConfig.Input | undefined) | undefined
}

/** The model calls of every agent, by path, in order: what each reported. */
type Calls = Map<string, Array<Message.Usage>>

/**
 * The tree: the top run's model and tools. An agent's path is its task (the
 * top run's is "root", its k-th sub-agent's "root.k"); its k-th call is the
 * one whose request holds k replies, so a resumed agent carries on.
 */
const makeTree = (shape: Shape, calls: Calls, onCall: (path: string, k: number) => void = () => {}) => {
  const script = (depth: number): ScriptedModel.Script => (_index, request) => {
    const path = pathOf(request)
    const k = callIndex(request)
    const usage = shape.usage(path, k)
    const made = calls.get(path) ?? []
    made.push(usageOf(usage))
    calls.set(path, made)
    onCall(path, k)
    const delay = `${shape.delay(path, k)} millis` as const
    if (k >= shape.turns(path) - 1) return { text: `${path} done`, usage, delay }
    if (k === 0 && depth < shape.depth && shape.fanOut(path) > 0) {
      const toolCalls = Array.from({ length: shape.fanOut(path) }, (_, i) => ({
        id: `c${i}`,
        name: `agent${depth + 1}`,
        params: { topic: `${path}.${i}` }
      }))
      return { toolCalls, usage, delay }
    }
    return { toolCalls: [{ id: `a${k}`, name: "add", params: { a: k, b: 1 } }], usage, delay }
  }
  const level = (depth: number): Layer.Layer<ToolRegistry.ToolRegistry> =>
    depth > shape.depth ? toolsLayer() : registryOf(Agent.define({
      name: `agent${depth}`,
      description: `an agent at depth ${depth}`,
      input: Topic,
      prompt: ({ topic }) => topic,
      tools: level(depth + 1),
      model: ScriptedModel.layer(script(depth)),
      config: { maxRepeatedBatches: null, ...shape.config?.(depth) }
    }))
  return Layer.merge(level(1), ScriptedModel.layer(script(0)))
}

/** What the agents at and below `path` reported, for a budget. */
const spentBelow = (calls: Calls, path: string, budget: Counted): number => {
  let total = 0
  for (const [at, made] of calls) {
    if (at !== path && !at.startsWith(`${path}.`)) continue
    for (const usage of made) total += amountOf(budget, usage)
  }
  return total
}

// -----------------------------------------------------------------------------
// The attack: 8 × 8 in parallel
// -----------------------------------------------------------------------------

/** 8 sub-agents of 2 calls each, each calling 8 of 1 call: 81 calls of 0.125 USD and 100 tokens (50 in, 50 out). */
const fanOut8x8: Shape = {
  depth: 2,
  fanOut: () => 8,
  turns: (path) => path.split(".").length === 3 ? 1 : 2,
  usage: () => ({ input: 50, output: 50, cost: 0.125 }),
  delay: () => 20
}

/** The limits of 10 such calls. */
const tenCalls: { readonly [K in Counted]: number } = { tokens: 1_000, inputTokens: 500, outputTokens: 500, costUsd: 1.25 }

describe("a budget bounds a tree of sub-agents", () => {
  for (const budget of counted) {
    it.live(`attack: 8 sub-agents calling 8 each in parallel spend no more than the top run's ${budget} budget`, () =>
      Effect.gen(function*() {
        const calls: Calls = new Map()
        const limit = tenCalls[budget]
        const { events, plugin } = recorder()
        const result = yield* Agent.run({ prompt: "root", plugins: [plugin], config: { budgets: { [budget]: limit } } })
          .pipe(Effect.provide(makeTree(fanOut8x8, calls)))
        // exactly the ten calls that fit were made (before: 73), and every one is counted
        const spent = spentBelow(calls, "root", budget)
        assert.strictEqual(spent, limit)
        assert.strictEqual(amountOf(budget, result.usage), limit)
        assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget, limit, used: limit })
        // the calls that did not fit waited for room, then were refused: the tree's agents report why
        const trips = ofTag(events, "Nested").flatMap(({ event }) => event._tag === "GuardTripped" ? [event.detail] : [])
        assert.isTrue(trips.some((detail) => detail === `the top run's ${budget} budget is exhausted: ${limit} of ${limit}`))
      }))
  }

  it.live("the top run's budget and a sub-agent's own budget, each kept by the calls below it", () =>
    Effect.gen(function*() {
      const calls: Calls = new Map()
      // each first-level agent may spend 3 calls' worth (its own call, then 2 of its 8 sub-agents'); the top 20
      const shape: Shape = { ...fanOut8x8, config: (depth) => depth === 1 ? { budgets: { costUsd: 0.375 } } : undefined }
      const result = yield* Agent.run({ prompt: "root", config: { budgets: { costUsd: 2.5 } } }).pipe(
        Effect.provide(makeTree(shape, calls))
      )
      for (let i = 0; i < 8; i++) assert.isAtMost(spentBelow(calls, `root.${i}`, "costUsd"), 0.375)
      assert.isAtMost(spentBelow(calls, "root", "costUsd"), 2.5)
      assert.strictEqual(result.usage.cost, spentBelow(calls, "root", "costUsd"))
    }))
})

// -----------------------------------------------------------------------------
// Random trees
// -----------------------------------------------------------------------------

/** mulberry32: a small seeded generator. */
const random = (seed: number) => {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6D2B79F5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))
  return { next, int }
}

/**
 * The bound docs/concepts.md states (Guards: Budgets), for the run at `path`: its limit, plus, for
 * each agent at or below it, the most any of its calls cost beyond its
 * estimate. A call is estimated at its agent's last call; an agent's first
 * call at the largest first call of the tree so far, which is at least the
 * top run's first call; the top run's first call at nothing.
 */
const bound = (calls: Calls, path: string, budget: Counted, limit: number): number => {
  const topFirst = amountOf(budget, calls.get("root")![0]!)
  let errors = 0
  for (const [at, made] of calls) {
    if (at !== path && !at.startsWith(`${path}.`)) continue
    let worst = 0
    made.forEach((usage, k) => {
      const estimate = k > 0 ? amountOf(budget, made[k - 1]!) : at === "root" ? 0 : topFirst
      worst = Math.max(worst, amountOf(budget, usage) - estimate)
    })
    errors += worst
  }
  return limit + errors
}

describe("random trees of sub-agents (seeded)", () => {
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    it.live(`seed ${seed}: no run's spend, nor its sub-agents', goes past its budget by more than the stated bound`, () =>
      Effect.gen(function*() {
        const rng = random(seed)
        const depth = rng.int(1, 3)
        const fanOuts = new Map<string, number>()
        const turns = new Map<string, number>()
        const usages = new Map<string, { input: number; output: number; cost: number }>()
        const delays = new Map<string, number>()
        const memo = <A>(map: Map<string, A>, key: string, make: () => A): A => {
          if (!map.has(key)) map.set(key, make())
          return map.get(key)!
        }
        // prices of 1/16,384 USD: the sums are exact
        const price = (input: number, output: number) => (input + 4 * output) / 16_384
        const shape: Shape = {
          depth,
          fanOut: (path) => memo(fanOuts, path, () => rng.int(1, 8)),
          // an agent that can call sub-agents does, in its first turn, then answers
          turns: (path) => memo(turns, path, () => path.split(".").length - 1 < depth ? rng.int(2, 3) : rng.int(1, 3)),
          usage: (path, k) =>
            memo(usages, `${path}#${k}`, () => {
              const input = rng.int(10, 200)
              const output = rng.int(5, 100)
              return { input, output, cost: price(input, output) }
            }),
          delay: (path, k) => memo(delays, `${path}#${k}`, () => rng.int(0, 8)),
          // some levels have budgets of their own
          config: (level) =>
            level === 1 && seed % 2 === 0
              ? { budgets: { tokens: 1_500 } }
              : level === 2 && seed % 3 === 0
              ? { budgets: { costUsd: 0.02 } }
              : undefined
        }
        const top = { costUsd: 0.05 * rng.int(4, 24), outputTokens: 300 * rng.int(4, 40) }
        const calls: Calls = new Map()
        const result = yield* Agent.run({ prompt: "root", config: { budgets: top } }).pipe(
          Effect.provide(makeTree(shape, calls))
        )
        assert.isAbove(calls.size, 1)
        // what the top run counted is what the tree's calls reported
        for (const budget of counted) assert.strictEqual(amountOf(budget, result.usage), spentBelow(calls, "root", budget))
        for (const budget of ["costUsd", "outputTokens"] as const) {
          assert.isAtMost(spentBelow(calls, "root", budget), bound(calls, "root", budget, top[budget]) + 1e-12)
        }
        for (const path of calls.keys()) {
          const level = path.split(".").length - 1
          const own = level === 0 ? undefined : shape.config?.(level)?.budgets
          for (const budget of counted) {
            const limit = own?.[budget]
            if (typeof limit !== "number") continue
            const spent = spentBelow(calls, path, budget)
            assert.isAtMost(spent, bound(calls, path, budget, limit) + 1e-12, `${path} ${budget}`)
          }
        }
      }), 60_000)
  }
})

// -----------------------------------------------------------------------------
// Every backend, interruptions and resumes
// -----------------------------------------------------------------------------

describe("the same bound on every backend", () => {
  it.live("attack on Session.run: 8 × 8 in parallel spend no more than the top run's cost budget", () =>
    Effect.gen(function*() {
      const calls: Calls = new Map()
      const result = yield* Session.run({
        id: "s",
        prompt: "root",
        config: { budgets: { costUsd: 1.25 } }
      }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, CheckpointStore.memory()), Effect.provide(makeTree(fanOut8x8, calls)))
      assert.strictEqual(spentBelow(calls, "root", "costUsd"), 1.25)
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 1.25, used: 1.25 })
    }))

  it.live("attack on DurableSession.run: 8 × 8 in parallel spend no more than the top run's cost budget", () =>
    Effect.gen(function*() {
      const calls: Calls = new Map()
      const result = yield* DurableSession.run({ sessionId: "d", prompt: "root", config: { budgets: { costUsd: 1.25 } } })
        .pipe(
          Effect.provide(DurableSession.layer().pipe(
            Layer.provideMerge(Layer.merge(makeTree(fanOut8x8, calls), DurableSession.layerMemoryStore)),
            Layer.provideMerge(WorkflowEngine.layerMemory)
          ))
        )
      assert.strictEqual(spentBelow(calls, "root", "costUsd"), 1.25)
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 1.25, used: 1.25 })
    }))

  it.live("attack on DurableSession: a session resumed after a suspension still counts what its sub-agents spent", () =>
    Effect.gen(function*() {
      // The top run calls 2 sub-agents (3 calls each), then its next call fails: the session suspends. Resumed,
      // it replays from the activities' records: the sub-agents do not run again, but what they spent counts.
      const usage = { input: 10, output: 10, cost: 0.125 }
      let spent = 0
      let failed = false
      const replies = (k: number) => k === 0 ? "x" : "y"
      const tools = registryOf(Agent.define({
        name: "worker",
        description: "a worker",
        input: Topic,
        tools: toolsLayer(),
        model: ScriptedModel.layer((_, request) => {
          spent += usage.cost
          const k = callIndex(request)
          return k < 2 ? { toolCalls: [{ id: `a${k}`, name: "add", params: { a: k, b: 1 } }], usage } : { text: "ok", usage }
        })
      }))
      const model = ScriptedModel.layer((_, request) => {
        const k = callIndex(request)
        if (k === 1 && !failed) {
          failed = true
          return { fail: new AiError.InternalProviderError({ description: "down" }) }
        }
        spent += usage.cost
        if (k === 2) return { text: "done", usage }
        const calls = [0, 1].map((i) => ({ id: `c${k}${i}`, name: "worker", params: { topic: `${replies(k)}${i}` } }))
        return { toolCalls: calls, usage }
      })
      const layer = DurableSession.layer().pipe(
        Layer.provideMerge(Layer.mergeAll(model, tools, DurableSession.layerMemoryStore)),
        Layer.provideMerge(WorkflowEngine.layerMemory)
      )
      const poll = (done: (status: DurableSession.Status) => boolean) =>
        Effect.repeat(DurableSession.poll("r"), { until: done, schedule: Schedule.spaced("20 millis"), times: 3000 })
      const finished = yield* Effect.gen(function*() {
        yield* DurableSession.start({ sessionId: "r", prompt: "go", config: { budgets: { costUsd: 1.25 } } })
        assert.strictEqual((yield* poll((status) => status._tag === "Suspended"))._tag, "Suspended")
        assert.deepStrictEqual(yield* DurableSession.resumeSuspended, ["r"])
        return yield* poll((status) => status._tag === "Finished")
      }).pipe(Effect.provide(layer))
      assert(finished._tag === "Finished")
      // before the suspension: 7 calls (0.875); after: the top run's call, then the sub-agents' calls that fit
      assert.isTrue(failed)
      assert.strictEqual(spent, 1.25)
      const outcome = finished.result.outcome
      assert.deepStrictEqual(outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 1.25, used: 1.25 })
    }))

  it.live("a call interrupted in flight (its sub-agent timed out) releases its reservation: a call waiting goes on", () =>
    Effect.gen(function*() {
      // budget: 3 calls of 0.125. The top run's first call spends one; "root.0" reserves one and hangs;
      // "root.1" spends one, then its second call fits beside what is spent but not beside the hung call's
      // reservation: it waits, until the hung call is interrupted by the top run's tool timeout.
      const usage = { input: 50, output: 50, cost: 0.125 }
      const model = ScriptedModel.layer((_, request): ScriptedModel.Turn => {
        const [path, k] = [pathOf(request), callIndex(request)]
        if (path === "root.0") return { hang: true }
        if (path === "root.1") {
          return k === 0
            ? { toolCalls: [{ id: "a", name: "add", params: { a: 1, b: 1 } }], usage, delay: "20 millis" }
            : { text: "root.1 done", usage }
        }
        if (k > 0) return { text: "done", usage }
        return { toolCalls: [0, 1].map((i) => ({ id: `c${i}`, name: "agent1", params: { topic: `root.${i}` } })), usage }
      })
      const tools = registryOf(Agent.define({
        name: "agent1",
        description: "a worker",
        input: Topic,
        prompt: ({ topic }) => topic,
        tools: toolsLayer(),
        model
      }))
      const { events, plugin } = recorder()
      const result = yield* Agent.run({
        prompt: "root",
        plugins: [plugin],
        // the wall clock ends a wait that nothing would end (a reservation never released)
        config: { budgets: { costUsd: 0.375, wallClock: 10_000 }, toolTimeout: 300 }
      }).pipe(Effect.provide(tools), Effect.provide(model))
      const answers = result.messages.flatMap((m) =>
        m.role === "toolResult" ? [[m.toolCallId, Message.textOf(m), m.isError]] : []
      )
      assert.deepStrictEqual(answers, [["c0", "Tool agent1 timed out after 300 ms.", true], ["c1", "root.1 done", false]])
      // root.1's second call started once the hung call was interrupted, not before
      const startedAt = ofTag(events, "AgentStart")[0]!.timestamp
      const second = ofTag(events, "Nested").find((e) =>
        e.calls?.[0] === "c1" && e.event._tag === "TurnStart" && e.event.turn === 2
      )
      assert.isAtLeast(second!.event.timestamp - startedAt, 290)
      assert.strictEqual(result.usage.cost, 0.375)
      assert.deepStrictEqual(result.outcome, { _tag: "BudgetExceeded", budget: "costUsd", limit: 0.375, used: 0.375 })
      assert.deepStrictEqual(ofTag(events, "GuardTripped").map((e) => e.detail), [
        "the costUsd budget is exhausted: 0.375 of 0.375"
      ])
    }))

  it.live("a resumed session has nothing reserved, and its tree keeps the budget too", () =>
    Effect.gen(function*() {
      const store = CheckpointStore.memory()
      const config = { budgets: { costUsd: 2.5 } }
      // a tree of 8 × 8 whose sub-agents take 2 calls each: stopped once 5 of the second level's calls started
      const shape: Shape = { ...fanOut8x8, turns: () => 2 }
      const before: Calls = new Map()
      const started = Latch.makeUnsafe()
      let leaves = 0
      const fiber = yield* Effect.forkChild(
        Session.run({ id: "s", prompt: "root", config }).pipe(
          Effect.provideService(CheckpointStore.CheckpointStore, store),
          Effect.provide(makeTree(shape, before, (path) => {
            if (path.split(".").length === 3 && ++leaves === 5) started.openUnsafe()
          }))
        )
      )
      yield* started.await
      yield* Fiber.interrupt(fiber)
      const after: Calls = new Map()
      const { events, plugin } = recorder()
      const result = yield* Session.resume("s", { plugins: [plugin] }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(makeTree(shape, after)))
      // the resumed tree made calls, and what the run counted (before and after) stays within the budget
      assert.isAbove(after.size, 0)
      assert.isAtMost(result.usage.cost ?? 0, 2.5)
      assert.strictEqual(result.outcome._tag, "BudgetExceeded")
      assert.isAbove(ofTag(events, "Nested").length, 0)
    }))
})
