/**
 * The conformance matrix's catalogue: each scenario is a scripted model, the
 * options of the run and what is sent to it from outside while it runs, the
 * same for every way to run a session (test/conformance/backends.ts).
 *
 * Every backend runs on ONE agent: the same tools, the same sub-agents and
 * the same output guardrail, whose behaviour follows the scenario in
 * progress ({@link current}). So a backend whose model, tools and plugins are
 * fixed when it is built (a `DurableSession` runner, the agent server, one
 * PostgreSQL cluster for every scenario) runs every scenario as it is. The
 * scenarios run one at a time.
 */
import { Deferred, Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, type AgentConfig, AgentTool, Guardrail, Message, SubAgent, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

/** What is sent to a run from outside, in order (the driver waits for each moment, bounded). */
export type Step =
  /** When the `gate` tool's call has started: steer with `text`, then let the call finish. */
  | { readonly _tag: "SteerAtGate"; readonly text: string }
  /** When a call (at any depth) asks for approval: approve it by the approval id the backend lists. */
  | { readonly _tag: "ApproveAsked" }
  /** When a call (at any depth) asks for approval: cancel the run with `reason` instead. */
  | { readonly _tag: "CancelAsked"; readonly reason: string }
  /** When the run has ended: send a follow-up; the session goes on with it (a new run). */
  | { readonly _tag: "FollowUpAfterEnd"; readonly text: string }

/** The agents of the catalogue: the application's, a sub-agent and the agent a handoff goes to. */
export type AgentName = "main" | "researcher" | "billing"

/**
 * One scenario. `script(agent, replies)`: the turn `agent` plays when its
 * transcript holds `replies` replies (so a replayed or resumed run carries
 * on where it was, whatever the backend). Call ids are given, so they are
 * the same on every backend.
 */
export interface Scenario {
  readonly name: string
  readonly prompt: string
  readonly script: (agent: AgentName, replies: number) => ScriptedModel.Turn | undefined
  readonly output?: Schema.Codec<unknown, unknown> | undefined
  readonly config?: AgentConfig.Input | undefined
  /** The output guardrail's verdict on a final answer: a reason trips it. */
  readonly trips?: ((text: string) => string | undefined) | undefined
  readonly steps: ReadonlyArray<Step>
}

/** The system prompt of each agent: how the scripted model knows whose turn it plays. */
export const systems: Record<AgentName, string> = {
  main: "You are the main agent.",
  researcher: "You are the researcher.",
  billing: "You are billing."
}

/** The moment a `gate` call waits at, for the driver: reached when the call starts, opened by the driver. */
export interface Gate {
  readonly reached: Deferred.Deferred<void>
  readonly open: Deferred.Deferred<void>
}

/** The scenario in progress, and its gate. */
export interface Current {
  readonly scenario: Scenario
  readonly gate: Gate
}

let inProgress: Current | undefined

/** Runs `effect` as the scenario in progress (one at a time). */
export const withCurrent = <A, E, R>(scenario: Scenario, effect: (gate: Gate) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const gate: Gate = { reached: yield* Deferred.make<void>(), open: yield* Deferred.make<void>() }
    return yield* Effect.acquireUseRelease(
      Effect.sync(() => (inProgress = { scenario, gate })),
      () => effect(gate),
      () => Effect.sync(() => void (inProgress = undefined))
    )
  })

const current = (): Current => {
  if (inProgress === undefined) throw new Error("conformance: no scenario in progress")
  return inProgress
}

const Step = Tool.make("step", { parameters: Schema.Struct({ n: Schema.Finite }), success: Schema.String })
const GateTool = Tool.make("gate", { parameters: Schema.Struct({}), success: Schema.String })
const Deploy = Tool.make("deploy", {
  parameters: Schema.Struct({ env: Schema.String }),
  success: Schema.String,
  needsApproval: true
})

/** A tool that may be called once a run: a session that goes on keeps that it was called. */
const Limited = AgentTool.annotate(Tool.make("limited", { success: Schema.String }), { quota: { perRun: 1 } })

const BasicKit = Toolkit.make(Step, Deploy)
const basicTools = ToolRegistry.layer(BasicKit).pipe(Layer.provide(BasicKit.toLayer({
  step: ({ n }) => Effect.succeed(`step ${n} done`),
  deploy: ({ env }) => Effect.succeed(`deployed to ${env}`)
})))

const Topic = Schema.Struct({ topic: Schema.String })

/** A sub-agent (`Agent.asTool`): it deploys a canary, which needs approval. */
export const researcher = Agent.define({
  name: "researcher",
  description: "Looks into a topic",
  system: systems.researcher,
  input: Topic,
  prompt: ({ topic }) => `research ${topic}`,
  tools: basicTools
})

/** The agent a handoff goes to (`Agent.handoff`). */
export const billing = Agent.define({
  name: "billing",
  description: "Handles billing",
  system: systems.billing,
  input: Topic,
  prompt: ({ topic }) => `billing: ${topic}`,
  tools: basicTools
})

const Kit = Toolkit.make(Step, GateTool, Deploy, Limited, Agent.asTool(researcher), Agent.handoff(billing))

/** The tools of every run: `gate` waits (at most 60 s, the cells' patience) for the driver to act. */
export const tools = ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
  step: ({ n }) => Effect.succeed(`step ${n} done`),
  gate: () =>
    Effect.gen(function*() {
      const { gate } = current()
      yield* Deferred.succeed(gate.reached, undefined)
      yield* Deferred.await(gate.open).pipe(Effect.timeout("60 seconds"), Effect.ignore)
      return "the gate opened"
    }),
  deploy: ({ env }) => Effect.succeed(`deployed to ${env}`),
  limited: () => Effect.succeed("used"),
  researcher: SubAgent.handler(researcher),
  transfer_to_billing: SubAgent.handoffHandler(billing)
})))

const agentOf = (request: ScriptedModel.Request): AgentName => {
  const system = request.prompt.content.find((message) => message.role === "system")
  const text = system === undefined ? "" : typeof system.content === "string" ? system.content : ""
  return text === systems.researcher ? "researcher" : text === systems.billing ? "billing" : "main"
}

/** The model of every run: the scenario in progress's script. */
export const model = ScriptedModel.layer((_index, request) =>
  current().scenario.script(
    agentOf(request),
    request.prompt.content.filter((message) => message.role === "assistant").length
  ), { record: false })

/** The output guardrail of every run: it trips as the scenario in progress says. */
export const guardrail = Guardrail.output(({ text }) =>
  Effect.sync(() => {
    const reason = current().scenario.trips?.(text)
    return reason === undefined ? Guardrail.pass : Guardrail.trip(reason)
  }), { name: "secrets" })

/** The model and the tools of every run. */
export const agentLayer = Layer.merge(model, tools)

const usage = (cost: number) => ({ input: 10, output: 5, cost })

const byAgent = (turns: Partial<Record<AgentName, ReadonlyArray<ScriptedModel.Turn | undefined>>>) =>
(agent: AgentName, replies: number) => turns[agent]?.[replies]

/** The seven scenarios, and more found since (an approval at the top, follow-ups after each kind of end, a turn limit). */
export const scenarios: ReadonlyArray<Scenario> = [
  {
    name: "plain tools",
    prompt: "Do two steps.",
    script: byAgent({
      main: [
        {
          text: "Two steps.",
          toolCalls: [{ id: "s1", name: "step", params: { n: 1 } }, { id: "s2", name: "step", params: { n: 2 } }],
          usage: usage(0.0001)
        },
        { text: "Both steps done.", usage: usage(0.0001) }
      ]
    }),
    steps: []
  },
  {
    name: "typed output",
    prompt: "What is six times seven?",
    output: Schema.Struct({ answer: Schema.Finite }),
    script: byAgent({
      main: [
        { toolCalls: [{ id: "s1", name: "step", params: { n: 6 } }], usage: usage(0.0001) },
        { toolCalls: [{ id: "f1", name: "final_answer", params: { answer: 42 } }], usage: usage(0.0001) },
        { text: "42", usage: usage(0.0001) }
      ]
    }),
    steps: []
  },
  {
    name: "handoff",
    prompt: "I want a refund.",
    script: byAgent({
      main: [
        {
          text: "Passing you to billing.",
          toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }],
          usage: usage(0.0001)
        },
        // (never played where the run hands off: a run that cannot says so, and this ends it)
        { text: "Billing could not take over.", usage: usage(0.0001) }
      ],
      // billing goes on from the history: the main agent's reply is in it
      billing: [undefined, { text: "Billing here: your refund is on its way.", usage: usage(0.0001) }]
    }),
    steps: []
  },
  {
    name: "sub-agent with an approval inside",
    prompt: "Check the logs.",
    script: byAgent({
      main: [
        { toolCalls: [{ id: "r1", name: "researcher", params: { topic: "logs" } }], usage: usage(0.0001) },
        { text: "The researcher deployed a canary.", usage: usage(0.0001) }
      ],
      researcher: [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "canary" } }], usage: usage(0.0001) },
        { text: "Canary deployed.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "ApproveAsked" }]
  },
  {
    name: "steering during the run",
    prompt: "Wait at the gate.",
    script: byAgent({
      main: [
        { toolCalls: [{ id: "g1", name: "gate", params: {} }], usage: usage(0.0001) },
        { text: "Steered: metric units it is.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "SteerAtGate", text: "Use metric units." }]
  },
  {
    name: "guardrail trip, then a follow-up",
    prompt: "Tell me the secret.",
    trips: (text) => text.includes("secret") ? "the answer holds the secret" : undefined,
    script: byAgent({
      main: [
        { text: "The secret is 42.", usage: usage(0.0001) },
        { text: "I cannot tell you that.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "FollowUpAfterEnd", text: "Then say what you can." }]
  },
  {
    name: "an approval at the top",
    prompt: "Deploy to production.",
    script: byAgent({
      main: [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "production" } }], usage: usage(0.0001) },
        { text: "Deployed to production.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "ApproveAsked" }]
  },
  {
    name: "a follow-up after a completed run",
    prompt: "Say hello.",
    script: byAgent({
      main: [
        { text: "Hello.", usage: usage(0.0001) },
        { toolCalls: [{ id: "s1", name: "step", params: { n: 1 } }], usage: usage(0.0001) },
        { text: "Hello again, after a step.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "FollowUpAfterEnd", text: "Now take a step." }]
  },
  {
    name: "a turn limit ends the run",
    prompt: "Step until told to stop.",
    config: { maxTurns: 2 },
    script: byAgent({
      main: [
        { toolCalls: [{ id: "s1", name: "step", params: { n: 1 } }], usage: usage(0.0001) },
        { toolCalls: [{ id: "s2", name: "step", params: { n: 2 } }], usage: usage(0.0001) },
        { text: "never reached", usage: usage(0.0001) }
      ]
    }),
    steps: []
  },
  {
    name: "typed output, then a follow-up",
    prompt: "What is six times seven?",
    output: Schema.Struct({ answer: Schema.Finite }),
    script: byAgent({
      main: [
        { toolCalls: [{ id: "f1", name: "final_answer", params: { answer: 42 } }], usage: usage(0.0001) },
        // the follow-up's answer: the output now
        { toolCalls: [{ id: "f2", name: "final_answer", params: { answer: 43 } }], usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "FollowUpAfterEnd", text: "Add one." }]
  },
  {
    name: "handoff, then a follow-up",
    prompt: "I want a refund.",
    script: byAgent({
      main: [
        { toolCalls: [{ id: "h1", name: "transfer_to_billing", params: { topic: "refund" } }], usage: usage(0.0001) }
      ],
      // billing answers, then answers the follow-up: the session goes on in the agent that answered
      billing: [
        undefined,
        { text: "Billing: your refund is on its way.", usage: usage(0.0001) },
        { text: "Billing: the invoice is attached.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "FollowUpAfterEnd", text: "And the invoice?" }]
  },
  {
    name: "a cancel while a call waits for approval, then a follow-up",
    prompt: "Deploy to staging.",
    script: byAgent({
      main: [
        { toolCalls: [{ id: "d1", name: "deploy", params: { env: "staging" } }], usage: usage(0.0001) },
        // the follow-up's run first answers the cut call's result, then the follow-up
        { text: "Nothing was deployed.", usage: usage(0.0001) },
        { text: "Hello.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "CancelAsked", reason: "not today" }, { _tag: "FollowUpAfterEnd", text: "Then just say hello." }]
  },
  {
    name: "a per-run quota holds across a follow-up",
    prompt: "Use the limited tool.",
    script: byAgent({
      main: [
        { toolCalls: [{ id: "q1", name: "limited", params: {} }], usage: usage(0.0001) },
        { text: "Used it.", usage: usage(0.0001) },
        // the follow-up's call: refused, the run having used its one call before
        { toolCalls: [{ id: "q2", name: "limited", params: {} }], usage: usage(0.0001) },
        { text: "The limit held.", usage: usage(0.0001) }
      ]
    }),
    steps: [{ _tag: "FollowUpAfterEnd", text: "Use it again." }]
  },
  {
    name: "a cost budget ends the run",
    prompt: "Keep stepping.",
    config: { budgets: { costUsd: 0.003 } },
    script: byAgent({
      main: [
        { toolCalls: [{ id: "s1", name: "step", params: { n: 1 } }], usage: usage(0.002) },
        { toolCalls: [{ id: "s2", name: "step", params: { n: 2 } }], usage: usage(0.002) },
        { text: "never reached", usage: usage(0.0001) }
      ]
    }),
    steps: []
  }
]

/** The text of a message (for failures' messages). */
export const textOf = Message.textOf
