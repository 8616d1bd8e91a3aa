/**
 * Shared tools and helpers for the loop tests, and a sample transcript for
 * the contract tests.
 */
import { assert } from "@effect/vitest"
import { Effect, Layer, Logger, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, type AgentEvent, AgentTool, Hooks, Message, ToolArguments, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

export const Add = Tool.make("add", {
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Finite, b: Schema.Finite }),
  success: Schema.Finite
})

const SleepParams = Schema.Struct({ ms: Schema.Finite, label: Schema.String })

/** Sleeps `ms` (virtual time under TestClock) and answers with its label. */
export const Sleep = Tool.make("sleep", { parameters: SleepParams, success: Schema.String })

export const SleepExclusive = AgentTool.annotate(
  Tool.make("sleep_exclusive", { parameters: SleepParams, success: Schema.String }),
  { execution: "exclusive" }
)

export const SleepSequential = AgentTool.annotate(
  Tool.make("sleep_sequential", { parameters: SleepParams, success: Schema.String }),
  { execution: "sequential" }
)

/** Fails into a result the model reads. */
export const Flaky = Tool.make("flaky", {
  parameters: Schema.Struct({ reason: Schema.String }),
  success: Schema.String,
  failure: Schema.Struct({ reason: Schema.String }),
  failureMode: "return"
})

/** Fails with the default failureMode ("error"): still a result the model reads. */
export const Failing = Tool.make("failing", {
  parameters: Schema.Struct({ reason: Schema.String }),
  success: Schema.String,
  failure: Schema.Struct({ reason: Schema.String })
})

/** Fails fatally: its failures are declared to end the run. */
export const Fatal = AgentTool.annotate(
  Tool.make("fatal", {
    parameters: Schema.Struct({ reason: Schema.String }),
    success: Schema.String,
    failure: Schema.Struct({ reason: Schema.String })
  }),
  { fatal: true }
)

/** Dies with a defect. */
export const Crash = Tool.make("crash", { success: Schema.String })

/** Throws synchronously, before returning an Effect. */
export const Throw = Tool.make("throw", { success: Schema.String })

/** Reports progress, then finishes. */
export const Progress = Tool.make("progress", {
  parameters: Schema.Struct({ steps: Schema.Finite }),
  success: Schema.Finite
})

/** Votes to end the run. */
export const Done = AgentTool.annotate(
  Tool.make("done", { parameters: Schema.Struct({ summary: Schema.String }), success: Schema.String }),
  { terminating: true }
)

/** Votes to end the run, but its vote does not count. */
export const Note = AgentTool.annotate(
  Tool.make("note", { parameters: Schema.Struct({ text: Schema.String }), success: Schema.String }),
  { terminating: true, countsTowardVote: false }
)

/** Needs approval (effect/ai's flag). */
export const Deploy = Tool.make("deploy", {
  parameters: Schema.Struct({ env: Schema.String }),
  success: Schema.String,
  needsApproval: true
})

/** Returns a long text. */
export const Big = Tool.make("big", {
  parameters: Schema.Struct({ chars: Schema.Finite }),
  success: Schema.String
})

export const Tools = Toolkit.make(
  Add,
  Sleep,
  SleepExclusive,
  SleepSequential,
  Flaky,
  Failing,
  Fatal,
  Crash,
  Throw,
  Progress,
  Done,
  Note,
  Deploy,
  Big
)

/** What the tools saw: which handlers started, finished, and ran their finalizers. */
export interface Trace {
  readonly started: Array<string>
  readonly finished: Array<string>
  readonly finalized: Array<string>
}

export const makeTrace = (): Trace => ({ started: [], finished: [], finalized: [] })

const sleepHandler = (trace: Trace) => ({ ms, label }: { readonly ms: number; readonly label: string }) =>
  Effect.sync(() => void trace.started.push(label)).pipe(
    Effect.andThen(Effect.sleep(`${ms} millis`)),
    Effect.andThen(Effect.sync(() => {
      trace.finished.push(label)
      return `slept ${label}`
    })),
    Effect.ensuring(Effect.sync(() => void trace.finalized.push(label)))
  )

export const toolsLayer = (trace: Trace = makeTrace()) =>
  ToolRegistry.layer(Tools).pipe(
    Layer.provide(Tools.toLayer({
      add: ({ a, b }) => Effect.sync(() => (trace.started.push("add"), a + b)),
      sleep: sleepHandler(trace),
      sleep_exclusive: sleepHandler(trace),
      sleep_sequential: sleepHandler(trace),
      flaky: ({ reason }) => Effect.fail({ reason }),
      failing: ({ reason }) => Effect.fail({ reason }),
      fatal: ({ reason }) => Effect.fail({ reason }),
      crash: () => Effect.die(new Error("boom")),
      throw: () => {
        throw new Error("thrown")
      },
      progress: ({ steps }, ctx) =>
        Effect.gen(function*() {
          for (let i = 1; i < steps; i++) yield* ctx.preliminary(i)
          return steps
        }),
      done: ({ summary }) => Effect.succeed(summary),
      note: ({ text }) => Effect.succeed(text),
      deploy: ({ env }) => Effect.sync(() => (trace.started.push(`deploy:${env}`), `deployed to ${env}`)),
      big: ({ chars }) => Effect.sync(() => (trace.started.push("big"), "x".repeat(chars)))
    }))
  )

/** A plugin that records every event. */
export const recorder = () => {
  const events: Array<AgentEvent.AgentEvent> = []
  const plugin = Hooks.plugin({ name: "recorder", onEvent: (event) => Effect.sync(() => void events.push(event)) })
  return { events, plugin }
}

export const tags = (events: ReadonlyArray<AgentEvent.AgentEvent>) => events.map((event) => event._tag)

export const ofTag = <T extends AgentEvent.Tag>(events: ReadonlyArray<AgentEvent.AgentEvent>, tag: T) =>
  events.filter((event): event is AgentEvent.Of<T> => event._tag === tag)

/** Every tool call of every assistant message has exactly one result, right after its message, in order. */
export const assertValidTranscript = (messages: ReadonlyArray<Message.Message>): void => {
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role !== "assistant") continue
    const calls = message.content.filter((part) => part.type === "tool-call")
    const results = messages.slice(i + 1, i + 1 + calls.length)
    if (results.length !== calls.length) throw new Error(`message ${i}: ${calls.length} calls, ${results.length} results`)
    calls.forEach((call, k) => {
      const result = results[k]!
      if (result.role !== "toolResult" || result.toolCallId !== call.id) {
        throw new Error(`message ${i}: call ${call.id} is not answered in order (found ${JSON.stringify(result)})`)
      }
    })
  }
  const answered = messages.filter((m) => m.role === "toolResult").map((m) => m.role === "toolResult" ? m.toolCallId : "")
  if (new Set(answered).size !== answered.length) throw new Error("a tool call has more than one result")
}

/** Runs an agent on a script with the test tools, recording events. */
export const runScript = <R = never>(
  script: ScriptedModel.Script,
  options: Partial<Agent.RunOptions<R>> & { readonly trace?: Trace } = {}
) =>
  Effect.gen(function*() {
    const { events, plugin } = recorder()
    const exit = yield* Effect.exit(Agent.run<R>({
      prompt: "go",
      ...options,
      plugins: [...(options.plugins ?? []), plugin]
    }))
    const model = yield* ScriptedModel.ScriptedModel
    const requests = yield* model.requests
    return { exit, events, requests }
  }).pipe(
    Effect.provide(Layer.merge(ScriptedModel.layer(script), toolsLayer(options.trace)))
  )

/** Runs and expects success. */
export const runOk = <R = never>(
  script: ScriptedModel.Script,
  options: Partial<Agent.RunOptions<R>> & { readonly trace?: Trace } = {}
) =>
  Effect.flatMap(runScript<R>(script, options), ({ events, exit, requests }) =>
    exit._tag === "Success"
      ? Effect.succeed({ result: exit.value, events, requests })
      : Effect.die(new Error(`run failed: ${String(exit.cause)}`)))

/** The text of the tool results in a request. */
export const toolResultTexts = (request: ScriptedModel.Request): Array<string> =>
  request.prompt.content.flatMap((message) =>
    message.role === "tool"
      ? message.content.flatMap((part) => part.type === "tool-result" ? [String(part.result)] : [])
      : []
  )

/** A plugin with state: it counts the tool calls that finished, and saves and restores the count. */
export const counting = Effect.sync(() => {
  let calls = 0
  return Hooks.plugin({
    name: "counter",
    afterToolCall: () => Effect.sync(() => void calls++),
    state: { save: Effect.sync(() => calls), restore: (saved) => Effect.sync(() => void (calls = Number(saved))) }
  })
})

/**
 * A logger that keeps what is logged, as `Level: text` lines, instead of
 * printing it: a test that expects a log line asserts it, and the output
 * between the results shows only what nobody expected.
 */
export const captureLogs = () => {
  const lines: Array<string> = []
  const text = (message: unknown): string => Array.isArray(message) ? message.map(String).join(" ") : String(message)
  const logger = Logger.make((options) => void lines.push(`${options.logLevel}: ${text(options.message)}`))
  const layer = Logger.layer([logger])
  return { lines, layer }
}

/** Encodes to JSON text and back, and checks the value survived. */
export const roundTrip = <S extends Schema.Codec<unknown, unknown>>(schema: S, value: S["Type"]) => {
  const json = Schema.toCodecJson(schema)
  const text = JSON.stringify(Schema.encodeSync(json)(value))
  const back = Schema.decodeUnknownSync(json)(JSON.parse(text))
  assert.deepStrictEqual(Schema.encodeSync(json)(back), Schema.encodeSync(json)(value))
  return back
}

const sampleReply: Message.AssistantMessage = {
  role: "assistant",
  content: [
    { type: "reasoning", text: "hmm", signature: "sig", providerData: { anthropic: { signature: "sig" } } },
    { type: "reasoning", text: "", redacted: true, providerData: { anthropic: { redactedData: "opaque" } } },
    Message.text("calling"),
    { type: "tool-call", id: "c1", name: "add", params: { a: 1, b: [2, { c: null }] } },
    { type: "tool-call", id: "c2", name: "add", params: ToolArguments.malformed("{\"a\":", "Unexpected end") }
  ],
  stopReason: "toolUse",
  usage: { input: 10, output: 5, cacheRead: 3, cacheWrite: 1, reasoning: 2, cost: 0.0125 },
  errorMessage: "none",
  model: "gpt-test"
}

/** A transcript with every kind of message and part. */
export const sampleTranscript: ReadonlyArray<Message.Message> = [
  Message.system("Be brief."),
  Message.user([
    Message.text("look"),
    { type: "image", mediaType: "image/png", source: { type: "base64", data: "iVBORw0KGgo=" } },
    { type: "image", mediaType: "image/jpeg", source: { type: "url", url: "https://example.com/a.jpg" } }
  ]),
  sampleReply,
  { role: "toolResult", toolCallId: "c1", toolName: "add", content: [Message.text("3")], isError: false },
  {
    role: "toolResult",
    toolCallId: "c2",
    toolName: "add",
    content: [Message.text("bad json")],
    isError: true,
    details: { kind: "invalidArguments" }
  },
  Message.custom("ui", { pinned: true })
]
