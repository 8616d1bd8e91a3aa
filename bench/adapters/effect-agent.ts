/**
 * effect-agent: `Agent.run` over a `LanguageModel` playing the script. The
 * tools are `effect/ai` `Tool`s in a `Toolkit`, handlers from
 * `toolkit.toLayer`, given to the loop through `ToolRegistry.layer`; the
 * events reach the consumer through a plugin's `observe` (or `onEvent`). The
 * config is the default one, except the turn cap (T + 1 turns, with no
 * wrap-up request, which the script does not expect) and, for the batch, the
 * per-turn call limit.
 *
 * Three models:
 * - provider-shaped (the main row): each turn is the Chat Completions SSE
 *   body a server would send for it (a role chunk, the text deltas, the tool
 *   call's id and name then its arguments in two pieces, the finish chunk, a
 *   usage chunk, `[DONE]`), in memory, one read per turn, decoded by the
 *   `OpenAiChat` provider's own code: its SSE body reader, its decoder and its
 *   wire Schema, into the parts the loop takes. Only the HTTP request is
 *   left out (the full-stack benchmark has it).
 * - `ScriptedModel` (the test double, request recording off), which builds
 *   the decoded parts itself.
 * - over fetch: the real `OpenAiChat.layer` on `FetchHttpClient.layer`, built
 *   once per process as a server would, its requests answered by an in-memory
 *   server (`MemoryServer`, bench/memory-fetch.ts) streaming the same SSE
 *   bodies: request encoding, the `fetch` call and the `Response` body read
 *   are paid too, as pi-agent-core's row over pi-ai's provider pays them
 *   (adapters/pi-provider.ts). The session's `fetch` is given the documented
 *   way: `FetchHttpClient.layer` reads the `FetchHttpClient.Fetch` reference
 *   from the requesting fiber at each request, so each run is given its own
 *   server's `fetch` in its context, beside the process-wide model.
 */
import { Cause, Channel, Context, Effect, Layer, Redacted, Schema, Scope, Stream, Tracer } from "effect"
import { type AiError, LanguageModel, Prompt, Tool, Toolkit } from "effect/ai"
import { FetchHttpClient } from "effect/http"
import { Agent, type Hooks, Message, ToolRegistry } from "../../src/index.ts"
import { OpenAiChat } from "../../src/providers/index.ts"
import * as Compat from "../../src/providers/internal/compat.ts"
import * as OpenAiChatStream from "../../src/providers/internal/OpenAiChatStream.ts"
import * as ResponseParts from "../../src/providers/internal/ResponseParts.ts"
import * as Settings from "../../src/providers/internal/Settings.ts"
import * as SseFramer from "../../src/providers/internal/SseFramer.ts"
import * as SseTransport from "../../src/providers/internal/SseTransport.ts"
import { ScriptedModel } from "../../src/testing/index.ts"
import { MemoryServer } from "../memory-fetch.ts"
import { bodyOf } from "../sse.ts"
import {
  type Adapter,
  type BatchSpec,
  Concurrency,
  NOOP,
  type Script,
  type Turn,
  WAIT,
  batchScript,
  noopResult,
  sessionScript
} from "../workload.ts"

/** A workload turn as a scripted turn: the same deltas, the call's arguments as the JSON text a provider sends. */
const scripted = (turn: Turn): ScriptedModel.Turn => ({
  text: turn.deltas,
  toolCalls: turn.calls.map((call) => ({ id: call.id, name: call.name, rawParams: call.json }))
})

/** Checks the request ended with the previous turn's tool result. */
const checkRequest = (script: Script, prompt: Prompt.Prompt): void => {
  const last = prompt.content[prompt.content.length - 1]
  if (last?.role !== "tool") return script.check(undefined, undefined)
  const result = last.content[last.content.length - 1]
  if (result?.type !== "tool-result") return script.check(undefined, undefined)
  script.check(result.id, typeof result.result === "string" ? result.result : JSON.stringify(result.result))
}

/** effect-agent's `ScriptedModel` playing the workload, recording nothing. */
const scriptedModel = (script: Script) =>
  ScriptedModel.layer((_index, request) => {
    checkRequest(script, request.prompt)
    return scripted(script.next())
  }, { record: false })

const settings = Effect.runSync(Settings.resolve({ model: "bench-model", apiKey: Redacted.make("sk-bench") }, {
  provider: "OpenAiChat",
  baseUrl: "http://localhost/v1",
  envVar: "OPENAI_API_KEY",
  keyRequired: () => false
}))

const decoding = <P>(make: ResponseParts.Maker<P>): SseTransport.Decoding<P> => ({
  provider: "OpenAiChat",
  idleTimeout: settings.idleTimeout,
  responseTimeout: settings.responseTimeout,
  maxResponseBytes: settings.maxResponseBytes,
  redact: settings.redact,
  decoder: () => OpenAiChatStream.decoder(settings, make)
})
const decoded = decoding(Compat.decodedParts)

/** The session's script, which the model reads from the run's context: the model itself is built once. */
class SessionScript extends Context.Service<SessionScript, Script>()("bench/SessionScript") {}

/**
 * A model built once per process that streams the loop's calls only: each
 * call checks its request against the session's script (read from the run's
 * context) and streams what `turnStream` makes of the script's next turn.
 */
const loopModel = (
  turnStream: (turn: Turn) => Stream.Stream<ResponseParts.Decoded, AiError.AiError>
): Context.Context<LanguageModel.LanguageModel> =>
  Effect.runSync(Effect.map(
    LanguageModel.make({
      generateText: () => Effect.die("the benchmark only streams"),
      streamText: () => Stream.die("the benchmark streams the loop's calls only")
    }),
    (base) => {
      const streamText = (
        options: LanguageModel.GenerateTextOptions<{}>
      ): Stream.Stream<ResponseParts.Decoded, AiError.AiError, SessionScript> => {
        if (!Compat.isLoopCall(options)) return Stream.die("the benchmark streams the loop's calls only")
        return Stream.unwrap(Effect.map(Effect.service(SessionScript), (script) => {
          checkRequest(script, Prompt.make(options.prompt))
          return turnStream(script.next())
        }))
      }
      return Context.make(LanguageModel.LanguageModel, {
        ...base,
        streamText: streamText as LanguageModel.LanguageModel["streamText"]
      })
    }
  ))

/**
 * The provider-shaped model: each call's body decoded by `OpenAiChat`'s own
 * code into decoded parts (the loop's calls, the only ones the benchmark
 * makes). Built once per process, as a server builds its provider layer once.
 */
const providerShapedModel = loopModel((turn) => SseTransport.decodeBody(Stream.succeed(bodyOf(turn)), decoded))

/** A part as the decoder asked for it: making it again runs the decoder's own maker. */
type Recipe = () => ResponseParts.Decoded

/** Records the decoder's calls to `Compat.decodedParts`, to replay them for fresh parts on each call. */
const recording: ResponseParts.Maker<Recipe> = {
  metadata: (id, modelId, createdMillis) => () => Compat.decodedParts.metadata(id, modelId, createdMillis),
  start: (type, id) => () => Compat.decodedParts.start(type, id),
  delta: (type, id, delta) => () => Compat.decodedParts.delta(type, id, delta),
  end: (type, id, metadata) => () => Compat.decodedParts.end(type, id, metadata),
  paramsStart: (id, name) => () => Compat.decodedParts.paramsStart(id, name),
  paramsDelta: (id, delta) => () => Compat.decodedParts.paramsDelta(id, delta),
  paramsEnd: (id) => () => Compat.decodedParts.paramsEnd(id),
  toolCall: (id, name, params, metadata) => () => Compat.decodedParts.toolCall(id, name, params, metadata),
  finish: (finish) => () => Compat.decodedParts.finish(finish)
}

/**
 * How `OpenAiChat`'s decoder makes the parts of a turn's SSE body, decoded
 * once per process: replaying it makes the parts a provider's decoder
 * produces, fresh, without the wire (the tool call's parsed arguments are
 * shared between calls; the loop only reads them).
 */
const recipes = new WeakMap<Turn, readonly [Recipe, ...Array<Recipe>]>()
const recipeOf = (turn: Turn) => {
  let recipe = recipes.get(turn)
  if (recipe === undefined) {
    const out: Array<Recipe> = []
    const decoder = OpenAiChatStream.decoder(settings, recording)
    const framer = new SseFramer.SseFramer((event) => {
      const fault = decoder.push(event, out)
      if (fault !== undefined) throw new Error(`the bench's own SSE body did not decode: ${fault.message}`)
    })
    framer.feed(new TextDecoder().decode(bodyOf(turn)))
    const [first, ...rest] = out
    if (first === undefined || !decoder.finished) throw new Error("the bench's own SSE body did not finish")
    recipe = [first, ...rest]
    recipes.set(turn, recipe)
  }
  return recipe
}

/**
 * The provider-shaped model without the wire: each call hands the loop the
 * parts `OpenAiChat`'s decoder makes from the turn's body, made fresh, in one
 * chunk, as the provider's direct path hands over the parts of one read. No
 * SSE framing and no `JSON.parse`, as pi-agent-core's fake model has none:
 * issue 19's provider-shaped model (the parts a provider's decoder produces).
 */
const partsModel = loopModel((turn) =>
  Stream.fromChannel(Channel.fromTransform(() => {
    const [first, ...rest] = recipeOf(turn)
    const fresh: readonly [ResponseParts.Decoded, ...Array<ResponseParts.Decoded>] = [
      first(),
      ...rest.map((make) => make())
    ]
    let pulled = false
    return Effect.succeed(Effect.suspend(() => {
      if (pulled) return Cause.done()
      pulled = true
      return Effect.succeed(fresh)
    }))
  }))
)

const Params = Schema.Struct({ i: Schema.Finite })
const Noop = Tool.make(NOOP, { description: "Does nothing.", parameters: Params, success: Schema.String })
const Wait = Tool.make(WAIT, { description: "Waits.", parameters: Params, success: Schema.String })
const NoopKit = Toolkit.make(Noop)
const WaitKit = Toolkit.make(Wait)

const finalText = (messages: ReadonlyArray<Message.Message>): string => {
  const last = messages[messages.length - 1]
  return last === undefined ? "" : Message.textOf(last)
}

/** How the consumer is given the events: a synchronous `observe`, or an `onEvent` Effect per event. */
type Consumer = "observe" | "onEvent"

const counter = (consumer: Consumer, count: () => void): Hooks.Plugin =>
  consumer === "observe"
    ? { name: "count", observe: count }
    : { name: "count", onEvent: () => Effect.sync(count) }

/**
 * `OpenAiChat.layer` on `FetchHttpClient.layer`, built on first use (the other
 * rows' processes never build it) and then kept for the process, in a scope
 * never closed, as a server keeps its provider layer.
 */
let fetchModel: Context.Context<LanguageModel.LanguageModel> | undefined
const fetchModelContext = (): Context.Context<LanguageModel.LanguageModel> =>
  fetchModel ??= Effect.runSync(Layer.buildWithScope(
    OpenAiChat.layer({ model: "bench-model", baseUrl: "http://bench.invalid/v1", apiKey: Redacted.make("sk-bench") })
      .pipe(Layer.provide(FetchHttpClient.layer)),
    Scope.makeUnsafe()
  ))

/** Which model plays the script. */
type Model = "provider-shaped" | "parts" | "scripted" | "fetch"

/** One session's model: its layer, and the in-memory server whose failures the session rethrows. */
interface SessionModel {
  readonly layer: Layer.Layer<LanguageModel.LanguageModel>
  readonly server: MemoryServer | undefined
}

/**
 * The model for one session: the provider-shaped model (built once) with the
 * session's script, the test double, or `OpenAiChat` over fetch (built once)
 * with the session's in-memory server as `FetchHttpClient.Fetch`.
 */
const modelFor = (model: Model, script: Script): SessionModel => {
  if (model === "provider-shaped") {
    return { layer: Layer.succeedContext(Context.add(providerShapedModel, SessionScript, script)), server: undefined }
  }
  if (model === "parts") return { layer: Layer.succeedContext(Context.add(partsModel, SessionScript, script)), server: undefined }
  if (model === "scripted") return { layer: scriptedModel(script), server: undefined }
  const server = new MemoryServer(script)
  return { layer: Layer.succeedContext(Context.add(fetchModelContext(), FetchHttpClient.Fetch, server.fetch)), server }
}

/** Runs a session's Effect; a failure the in-memory server answered is rethrown first, as the cause. */
const runWith = async <A, E>(session: SessionModel, run: Effect.Effect<A, E>): Promise<A> => {
  const server = session.server
  if (server === undefined) return Effect.runPromise(run)
  const result = await Effect.runPromise(run).catch((error: unknown) => {
    server.rethrow()
    throw error
  })
  server.rethrow()
  return result
}

/**
 * With `traced`, a tracer is installed (Effect's native one: spans are made
 * and kept in memory, nothing is exported), so the run makes its spans and
 * updates its metrics (see `Telemetry`).
 */
const make = (name: string, consumer: Consumer, model: Model, traced = false): Adapter => ({
  name,
  cap: "maxParallelTools: 8",
  async session(toolTurns, onTurn) {
    const script = sessionScript("effect-agent", toolTurns)
    let toolRuns = 0
    let events = 0
    const tools = ToolRegistry.layer(NoopKit).pipe(Layer.provide(NoopKit.toLayer({
      [NOOP]: ({ i }) =>
        Effect.sync(() => {
          toolRuns++
          onTurn?.()
          return noopResult(i)
        })
    })))
    const session = modelFor(model, script)
    const result = await runWith(
      session,
      Agent.run({
        prompt: "go",
        config: { maxTurns: toolTurns + 1, graceTurns: 0 },
        plugins: [counter(consumer, () => {
          events++
        })]
      }).pipe(
        Effect.provide(Layer.mergeAll(session.layer, tools)),
        (run) => traced ? Effect.withTracer(run, Tracer.nativeTracer) : run
      )
    )
    if (result.outcome._tag !== "Completed") throw new Error(`effect-agent: the run ended with ${result.outcome._tag}`)
    return { events, toolRuns, text: finalText(result.messages), modelCalls: script.calls, keep: result }
  },
  async batch(spec: BatchSpec) {
    const script = batchScript("effect-agent", spec)
    const observed = new Concurrency()
    const tools = ToolRegistry.layer(WaitKit).pipe(Layer.provide(WaitKit.toLayer({
      [WAIT]: ({ i }) => Effect.promise(() => observed.wait(i, spec.ms))
    })))
    const session = modelFor(model, script)
    const result = await runWith(
      session,
      Agent.run({
        prompt: "go",
        config: { maxTurns: 3, maxParallelTools: spec.maxParallel, maxToolCallsPerTurn: spec.calls }
      }).pipe(
        Effect.provide(Layer.mergeAll(session.layer, tools)),
        (run) => traced ? Effect.withTracer(run, Tracer.nativeTracer) : run
      )
    )
    if (result.outcome._tag !== "Completed") throw new Error(`effect-agent: the batch ended with ${result.outcome._tag}`)
    return { text: finalText(result.messages), toolRuns: observed.runs, maxInFlight: observed.max, modelCalls: script.calls }
  }
})

/** effect-agent over the provider-shaped model, events counted by a plugin's `observe`. */
export const adapter: Adapter = make("effect-agent", "observe", "provider-shaped")

/** The same, events counted by a plugin's `onEvent`, an `Effect.sync` per event. */
export const onEventAdapter: Adapter = make("effect-agent (onEvent)", "onEvent", "provider-shaped")

/** effect-agent over the parts `OpenAiChat`'s decoder made from each turn's body, without the wire. */
export const partsAdapter: Adapter = make("effect-agent (OpenAiChat's parts, no wire)", "observe", "parts")

/** effect-agent over `ScriptedModel`, the test double that builds decoded parts itself. */
export const scriptedAdapter: Adapter = make("effect-agent (ScriptedModel, test double)", "observe", "scripted")

/** The main row with a tracer installed: spans and metrics on (kept in memory, not exported). */
export const tracedAdapter: Adapter = make("effect-agent (traced)", "observe", "provider-shaped", true)

/** effect-agent over `OpenAiChat.layer` on `FetchHttpClient.layer`, `fetch` answered in memory. */
export const fetchAdapter: Adapter = make("effect-agent (OpenAiChat over fetch, in memory)", "observe", "fetch")
