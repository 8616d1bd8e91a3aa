/**
 * What the server tests share: a scripted model whose replies depend on the
 * session's task (so that one server runs many kinds of session, and a new
 * process carries on where a checkpoint left off), the tools, a server on an
 * ephemeral loopback port, and a reader of its SSE streams.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Effect, type Latch, Layer, Logger, Schema } from "effect"
import * as NodeFs from "node:fs"
import { HttpServer } from "effect/http"
import { AiError, type Prompt, Toolkit } from "effect/ai"
import { Agent, SubAgent, ToolRegistry } from "effect-agent"
import { AgentServer } from "effect-agent/server"
import { Check, Supervisor } from "effect-agent/supervisor"
import { ScriptedModel } from "effect-agent/testing"
import { createServer } from "node:http"
import { Kit, toolsLayer } from "../session/fixture.ts"

/** The text of the first user message: the task. */
const taskOf = (prompt: Prompt.Prompt): string => {
  for (const message of prompt.content) {
    if (message.role !== "user") continue
    return message.content.map((part) => part.type === "text" ? part.text : "").join("")
  }
  return ""
}

/**
 * The turns for a task:
 *
 * - `steps N D`: N turns each calling `step` after D ms, then `All N steps done.`;
 * - `deploy`: a call to `deploy` (it needs approval), then a reply;
 * - `slow D`: a call to `slow` that takes D ms, then a reply, then answers to follow-ups;
 * - `inspect D`: a deploy (it needs approval), a slow call of D ms, a reply (the inspector's test);
 * - `hang`: a reply that never finishes;
 * - `big N K D`: a reply streamed as N deltas of K characters, after D ms;
 * - `delegate T`: a call to the `researcher` sub-agent on topic T, then a reply with its answer;
 * - `research T` (the researcher's task): a canary deploy (it needs approval), then a reply with markup in it;
 * - `answer N`: a typed final answer, `{ answer: N }` (see {@link Answer});
 * - `numbered`: as a provider that numbers calls per response: the researcher is called as `call_0`, its canary
 *   deploy is `call_0` too (`research numbered`), then the session's own production deploy is `call_0` again;
 * - anything else: one reply.
 */
export const turnsFor = (task: string): ReadonlyArray<ScriptedModel.Turn> => {
  const [kind, a, b, c] = task.split(" ")
  switch (kind) {
    case "steps": {
      const n = Number(a)
      const delay = Number(b)
      return [
        ...Array.from({ length: n }, (_, i): ScriptedModel.Turn => ({
          text: `Step ${i + 1}.`,
          toolCalls: [{ name: "step", params: { n: i + 1 } }],
          usage: { input: 10 * (i + 1), output: 5, cost: 0.0001 },
          delay
        })),
        { text: `All ${n} steps done.`, usage: { input: 10 * (n + 1), output: 5, cost: 0.0001 }, delay }
      ]
    }
    case "deploy":
      return [
        { reasoning: "The user wants a deploy.", toolCalls: [{ name: "deploy", params: { env: "staging" } }] },
        { text: "The deploy step is over." }
      ]
    case "slow":
      return [
        { toolCalls: [{ name: "slow", params: { ms: Number(a) } }] },
        { text: "Slow work done." },
        { text: "Follow-up answered." },
        { text: "Another follow-up answered." }
      ]
    case "inspect":
      return [
        {
          reasoning: "The user wants it deployed; deploys need approval.",
          text: "I will deploy to staging first.",
          toolCalls: [{ name: "deploy", params: { env: "staging" } }],
          usage: { input: 120, output: 30, cost: 0.0012 },
          delay: 100
        },
        {
          text: "Deployed. Now the slow checks.",
          toolCalls: [{ name: "slow", params: { ms: Number(a ?? 600) } }],
          usage: { input: 180, output: 20, cost: 0.0015 },
          delay: 100
        },
        { text: "All checks passed; staging is live.", usage: { input: 240, output: 15, cost: 0.0018 }, delay: 100 }
      ]
    case "hang":
      return [{ text: "Thinking", hang: true }]
    case "answer":
      return [{ toolCalls: [{ name: "final_answer", params: { answer: Number(a) } }] }, { text: "Answered." }]
    case "big":
      return [{
        text: Array.from({ length: Number(a) }, (_, i) => `${i}`.padEnd(Number(b), ".")),
        delay: Number(c ?? 0)
      }]
    case "delegate":
      return [
        { text: "I will ask the researcher.", toolCalls: [{ name: "researcher", params: { topic: a ?? "logs" } }] },
        { text: "The researcher says the logs are clean." }
      ]
    case "numbered":
      return [
        { toolCalls: [{ id: "call_0", name: "researcher", params: { topic: "numbered" } }] },
        { toolCalls: [{ id: "call_0", name: "deploy", params: { env: "production" } }] },
        { text: "The production deploy step is over." }
      ]
    case "research":
      if (a === "numbered") {
        return [
          { toolCalls: [{ id: "call_0", name: "deploy", params: { env: "canary" } }] },
          { text: "The canary step is over." }
        ]
      }
      return [
        {
          reasoning: "A canary shows the logs first.",
          text: `Deploying a canary to read the ${a} first.`,
          toolCalls: [{ name: "deploy", params: { env: "canary" } }],
          usage: { input: 40, output: 10, cost: 0.0004 }
        },
        { text: `The ${a} are clean <img src=x onerror=alert(1)><b>today</b>.`, usage: { input: 60, output: 12 } }
      ]
    default:
      return [{ text: `You said: ${task}` }, { text: "Follow-up answered." }]
  }
}

/** The typed output of the `answer N` tasks. */
export const Answer = Schema.Struct({ answer: Schema.Finite })

const textOf = (message: Prompt.Message): string =>
  typeof message.content === "string"
    ? message.content
    : message.content.map((part) => part.type === "text" ? part.text : "").join("")

/** Whether a supervisor's message asks the worker for a plan (a first one, or a revision). */
const asksForPlan = (text: string) =>
  text === Supervisor.planRequest(text.slice(text.lastIndexOf("Task: ") + 6)) || text.startsWith("Revise your plan")

/**
 * The worker of a supervised `fix` task (whose run's transcript follows it, so a resumed session carries on):
 * asked for a plan (or a revision), it replies `Plan N: …`; in an act turn it calls `step` with the next number,
 * then replies `Attempt N done.` (a steer delivered between the two changes nothing).
 */
export const fixTurn = (request: ScriptedModel.Request): ScriptedModel.Turn => {
  const messages = request.prompt.content
  const last = messages.at(-1)
  const users = messages.filter((message) => message.role === "user").map(textOf)
  if (last?.role === "user" && asksForPlan(textOf(last))) {
    return { text: `Plan ${users.filter(asksForPlan).length}: call step until the check passes.` }
  }
  const replies = messages.filter((message) => message.role === "assistant")
  const steps = replies.flatMap((message) =>
    typeof message.content === "string"
      ? []
      : message.content.filter((part) => part.type === "tool-call" && part.name === "step")
  ).length
  const called = replies.at(-1)?.content
  const calledStep = typeof called !== "string" && called?.some((part) => part.type === "tool-call") === true
  return calledStep
    ? { text: `Attempt ${steps} done.`, usage: { input: 10, output: 5, cost: 0.0001 } }
    : { toolCalls: [{ name: "step", params: { n: steps + 1 } }], usage: { input: 10, output: 5, cost: 0.0001 } }
}

/** Whether a task is a supervised `fix` task (as such, or inside the supervisor's plan request). */
const isFix = (task: string) => task.startsWith("fix") || task.includes("\n\nTask: fix")

/** The reply to a request: by the task, and the replies the transcript holds. */
export const script = (_index: number, request: ScriptedModel.Request): ScriptedModel.Turn | undefined => {
  const task = taskOf(request.prompt)
  if (isFix(task)) return fixTurn(request)
  // `flaky`: the provider fails until a user message after the task says how to go on; then it answers that
  if (task === "flaky") {
    const users = request.prompt.content.filter((message) => message.role === "user")
    const last = users.length > 1 ? users.at(-1) : undefined
    if (last === undefined) return { fail: new AiError.InternalProviderError({ description: "down" }) }
    const text = typeof last.content === "string"
      ? last.content
      : last.content.flatMap((part) => part.type === "text" ? [part.text] : []).join("")
    return { text: `Answered after: ${text}.`, usage: { input: 10, output: 5 } }
  }
  return turnsFor(task)[request.prompt.content.filter((message) => message.role === "assistant").length]
}

/**
 * Where a supervised `fix` task works: the `step` calls its worker made (the numbers they were given), kept in
 * memory or in a file (one number a line: a server in another process, and the next one, see the same).
 */
export interface Workspace {
  readonly step: (n: number) => Effect.Effect<void>
  readonly steps: Effect.Effect<ReadonlyArray<number>>
}

export const memoryWorkspace = (): Workspace => {
  const done: Array<number> = []
  return { step: (n) => Effect.sync(() => void done.push(n)), steps: Effect.sync(() => done.slice()) }
}

export const fileWorkspace = (file: string): Workspace => ({
  step: (n) => Effect.sync(() => NodeFs.appendFileSync(file, `${n}\n`)),
  steps: Effect.sync(() =>
    NodeFs.existsSync(file)
      ? NodeFs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map(Number)
      : []
  )
})

/**
 * The check of a `fix` task: it passes once the worker's step `target` is done, and otherwise says which steps
 * are (so that a failure after a step is a new one, not the baseline's).
 */
export const fixedCheck = (workspace: Workspace, target = 2) =>
  Check.make(
    "fixed",
    Effect.map(workspace.steps, (steps) =>
      steps.includes(target)
        ? { status: "pass" as const, summary: `step ${target} is done` }
        : { status: "fail" as const, summary: `steps done: ${steps.length === 0 ? "none" : steps.join(", ")}` })
  )

/** The model and tools, the `step` calls recorded in `workspace` (and `slow` held until `gate` opens, if given). */
export const workingAgent = (workspace: Workspace, model: ScriptedModel.Script = script, gate?: Latch.Latch) =>
  Layer.merge(
    ScriptedModel.layer(model, { record: false }),
    ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
      step: ({ n }) => Effect.as(workspace.step(n), `step ${n} done`),
      slow: ({ ms }) => Effect.as(gate === undefined ? Effect.sleep(`${ms} millis`) : gate.await, `slept ${ms} ms`),
      charge: ({ cents }) => Effect.succeed(`charged ${cents} cents`),
      deploy: ({ env }) => Effect.succeed(`deployed to ${env}`)
    })))
  )

/** The model and the tools every test server runs sessions with. */
export const agentLayer = Layer.merge(ScriptedModel.layer(script, { record: false }), toolsLayer([]))

/**
 * The model and tools, but the `slow` call runs until `gate` opens (its
 * result names the `ms` it was given): a test acts while the call runs,
 * however slow the machine.
 */
export const gatedAgent = (gate: Latch.Latch) =>
  Layer.merge(
    ScriptedModel.layer(script, { record: false }),
    ToolRegistry.layer(Kit).pipe(Layer.provide(Kit.toLayer({
      step: ({ n }) => Effect.succeed(`step ${n} done`),
      slow: ({ ms }) => Effect.as(gate.await, `slept ${ms} ms`),
      charge: ({ cents }) => Effect.succeed(`charged ${cents} cents`),
      deploy: ({ env }) => Effect.succeed(`deployed to ${env}`)
    })))
  )

/**
 * The model, but once a session's transcript holds `replies` of its
 * replies, it never answers: a run held mid-way until its server stops (a
 * server that resumes it with {@link script} carries on).
 */
export const hangingScript = (replies: number): ScriptedModel.Script => (index, request) =>
  request.prompt.content.filter((message) => message.role === "assistant").length >= replies
    ? { reasoning: "Weighing the next step.", text: "Thinking it over", hang: true }
    : script(index, request)

/** The model and tools of {@link hangingScript}. */
export const hangingFrom = (replies: number) =>
  Layer.merge(ScriptedModel.layer(hangingScript(replies), { record: false }), toolsLayer([]))

/** A sub-agent of the server's sessions: it reads `research <topic>`, with the test tools and the server's model. */
export const researcher = Agent.define({
  name: "researcher",
  description: "Looks into a topic",
  input: Schema.Struct({ topic: Schema.String }),
  prompt: ({ topic }) => `research ${topic}`,
  tools: toolsLayer([])
})

const Delegation = Toolkit.make(Agent.asTool(researcher))

/** The model and tools, with the `researcher` sub-agent among the tools. */
export const delegatingAgent = Layer.merge(
  ScriptedModel.layer(script, { record: false }),
  ToolRegistry.layer(Kit, Delegation).pipe(
    Layer.provide(Kit.toLayer({
      step: ({ n }) => Effect.succeed(`step ${n} done`),
      slow: ({ ms }) => Effect.as(Effect.sleep(`${ms} millis`), `slept ${ms} ms`),
      charge: ({ cents }) => Effect.succeed(`charged ${cents} cents`),
      deploy: ({ env }) => Effect.succeed(`deployed to ${env}`)
    })),
    Layer.provide(Delegation.toLayer({ researcher: SubAgent.handler(researcher) }))
  )
)

/** Whether a log line is the warning of a server without a token (which the test servers are, unless told). */
const isTokenlessWarning = (message: unknown) =>
  (Array.isArray(message) ? message : [message]).some((part) => String(part).includes("WITHOUT A TOKEN"))

/** The default logger, without the warning every tokenless test server logs (its own test asserts it). */
const quietTokenless = Logger.layer([
  Logger.make((options) => isTokenlessWarning(options.message) ? undefined : Logger.defaultLogger.log(options))
])

/**
 * A server on 127.0.0.1 at an ephemeral port, with the scripted model and
 * tools (or `agent`); without a token unless `options` gives one (the
 * access tests check tokens; these test what the sessions do).
 */
export const serverLayer = (options: AgentServer.Options = {}, agent: typeof agentLayer = agentLayer) =>
  AgentServer.layer({ token: "none", ...options }).pipe(
    Layer.provide(agent),
    Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" })),
    Layer.provide(quietTokenless)
  )

/** The server's base URL. */
/** A request to the server: its status, headers and JSON body (none when empty). */
/**
 * `fetch`, sending a GET again (twice at most) when its connection was reset before any response: a pooled
 * connection the server closed as idle (its keep-alive timeout) just as the client reused it, which a machine
 * loaded enough to delay the client's own expiry of it sees (seen at load 32: `fetch failed`, `ECONNRESET`). The
 * request never reached the server, and a GET may be sent again, as an HTTP client may do.
 */
export const fetchIdempotent = async (url: string, init: RequestInit = {}): Promise<Response> => {
  for (let attempt = 0;; attempt++) {
    try {
      return await fetch(url, init)
    } catch (error) {
      const method = (init.method ?? "GET").toUpperCase()
      const cause = error instanceof TypeError ? error.cause : undefined
      const code = typeof cause === "object" && cause !== null && "code" in cause ? cause.code : undefined
      const reset = code === "ECONNRESET" || code === "UND_ERR_SOCKET"
      if (attempt >= 2 || !reset || (method !== "GET" && method !== "HEAD")) throw error
    }
  }
}

export const call = (url: string, init: RequestInit = {}) =>
  Effect.promise(async () => {
    const response = await fetchIdempotent(url, init)
    const text = await response.text()
    return { status: response.status, headers: response.headers, body: text === "" ? undefined : JSON.parse(text) }
  })

/** A JSON POST (`content-type: application/json`, and `headers`). */
export const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  call(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) })

export const baseUrl = HttpServer.addressFormattedWith((address) => Effect.succeed(address))

/** One SSE message as sent: its id and its data (an event's JSON). */
export interface SseMessage {
  readonly id: string | undefined
  readonly data: string
}

/**
 * Reads an SSE response until `stop` says so or the stream ends: the
 * messages, and whether the stream ended by itself. Comments are kept apart.
 */
export const readSse = async (
  response: Response,
  stop: (message: SseMessage, count: number) => boolean = () => false
): Promise<{ readonly messages: Array<SseMessage>; readonly comments: Array<string>; readonly ended: boolean }> => {
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  const messages: Array<SseMessage> = []
  const comments: Array<string> = []
  let buffer = ""
  let id: string | undefined
  let data: Array<string> = []
  for (;;) {
    const { done, value } = await reader.read()
    if (done) return { messages, comments, ended: true }
    buffer += decoder.decode(value, { stream: true })
    let newline: number
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline)
      buffer = buffer.slice(newline + 1)
      if (line === "") {
        if (data.length > 0) {
          const message = { id, data: data.join("\n") }
          messages.push(message)
          data = []
          id = undefined
          if (stop(message, messages.length)) {
            await reader.cancel()
            return { messages, comments, ended: false }
          }
        }
      } else if (line.startsWith(":")) comments.push(line.slice(1).trim())
      else if (line.startsWith("id: ")) id = line.slice(4)
      else if (line.startsWith("data: ")) data.push(line.slice(6))
    }
  }
}

/** The `_tag` of an SSE message's event. */
export const tagOf = (message: SseMessage): string => JSON.parse(message.data)._tag
