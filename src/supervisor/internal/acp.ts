/**
 * One turn of an agent that speaks the Agent Client Protocol over stdio
 * (agentclientprotocol.com, protocol v1), driven with the official SDK,
 * `@agentclientprotocol/sdk`, loaded only when a turn starts (an optional
 * peer dependency: nothing else loads it).
 *
 * Each turn is one process, as for the other external workers: spawned in
 * the workspace with the allowlisted environment, in its own process group,
 * killed with it when the turn ends. The turn: `initialize` (the client
 * advertises no `fs` and no `terminal` capability: the agent works in the
 * workspace with its own tools, and the SDK answers any `fs/*` or
 * `terminal/*` request it still sends with "method not found"), then
 * `session/load` of the resume token when there is one and the agent
 * advertises `loadSession` (its replay of the history is not the turn's
 * reply), else `session/new` with the workspace as `cwd`, then one
 * `session/prompt` with the message. The reply is the text of the
 * `agent_message_chunk` updates that arrive while the prompt runs; the usage
 * is the prompt response's `usage` (an unstable field of the protocol) when
 * the agent reports one; the cost is the growth of the session's cumulative
 * USD cost (`usage_update`) over the turn.
 *
 * Permission requests are answered by the worker's policy, nobody being
 * there to ask: in plan turns, and in act turns unless the worker was told to
 * approve all, a reject option is chosen (or, when the agent offers none, the
 * request is answered `cancelled`); an allow option is chosen only in act
 * turns of a worker that approves all. The agent is an adversary: its output
 * is framed here under the same caps as a CLI's, a line that is not a
 * JSON-RPC message ends the turn with a `decode` error (the SDK alone would
 * answer it and carry on), and the responses it sends are decoded with
 * Schemas. An interruption of the turn (a cancel of the run) sends
 * `session/cancel`, waits a moment for the prompt to end, and kills the
 * process group.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as ChildProcess from "effect/process/ChildProcess"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import { redactor } from "../../providers/Redaction.ts"
import * as HostProcess from "../../sandbox/HostProcess.ts"
import { type TurnReply, type TurnRequest, WorkerError } from "../Worker.ts"
import type { Settings } from "./cliTurn.ts"
import { type Exceeded, LineSplitter } from "./lines.ts"
import { add, Count } from "./protocol.ts"

/** An ACP worker's settings: the CLI's, its arguments, and whether act turns approve what the agent asks. */
export interface AcpSettings extends Settings {
  readonly args: ReadonlyArray<string>
  readonly approve: "all" | "none"
}

/** How long the process group gets after SIGTERM before SIGKILL. */
const killGrace = Duration.seconds(2)
/** How long a cancelled prompt gets to end before the process is killed. */
const cancelGrace = Duration.seconds(2)
/** How long the exit code of an agent whose output ended is waited for. */
const exitGrace = Duration.seconds(2)
/** Bytes of stderr kept for error messages (its start and end). */
const stderrCap = 4096

/** A session id as it is kept in the checkpoint and sent back: printable, bounded. */
const SessionId = Schema.String.check(Schema.isPattern(/^[^\0-\x1f\x7f]{1,256}$/))
const isSessionId = Schema.is(SessionId)

/** A JSON-RPC 2.0 message: a request, a notification or a response (ACP sends no batches). */
const JsonRpcId = Schema.Union([Schema.String, Schema.Finite, Schema.Null])
const Message = Schema.fromJsonString(Schema.Union([
  Schema.Struct({
    jsonrpc: Schema.Literal("2.0"),
    id: JsonRpcId,
    method: Schema.String,
    params: Schema.optionalKey(Schema.Unknown)
  }),
  Schema.Struct({ jsonrpc: Schema.Literal("2.0"), method: Schema.String, params: Schema.optionalKey(Schema.Unknown) }),
  Schema.Struct({ jsonrpc: Schema.Literal("2.0"), id: JsonRpcId, result: Schema.Unknown }),
  Schema.Struct({
    jsonrpc: Schema.Literal("2.0"),
    id: JsonRpcId,
    error: Schema.Struct({ code: Schema.Finite, message: Schema.String, data: Schema.optionalKey(Schema.Unknown) })
  })
]))
type Message = typeof Message.Type
const decodeMessage = Schema.decodeUnknownExit(Message)

const InitializeResponse = Schema.Struct({
  protocolVersion: Schema.Number,
  agentCapabilities: Schema.optionalKey(
    Schema.NullOr(Schema.Struct({ loadSession: Schema.optionalKey(Schema.NullOr(Schema.Boolean)) }))
  )
})
const NewSessionResponse = Schema.Struct({ sessionId: SessionId })
const PromptResponse = Schema.Struct({
  stopReason: Schema.Literals(["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]),
  usage: Schema.optionalKey(Schema.NullOr(Schema.Struct({
    inputTokens: Count,
    outputTokens: Count,
    cachedReadTokens: Schema.optionalKey(Schema.NullOr(Count)),
    cachedWriteTokens: Schema.optionalKey(Schema.NullOr(Count))
  })))
})
const Cost = Schema.Struct({ amount: Schema.Finite.check(Schema.isGreaterThanOrEqualTo(0)), currency: Schema.String })
const isCost = Schema.is(Cost)

/** Why the conversation did not complete, from inside it. */
class Stop extends Error {
  readonly reason: "decode" | "exit"
  constructor(reason: "decode" | "exit", message: string) {
    super(message)
    this.reason = reason
  }
}

const decodeOr = <A>(schema: Schema.Decoder<A>, what: string) => {
  const decode = Schema.decodeUnknownExit(schema)
  return (value: unknown): A => {
    const decoded = decode(value)
    if (Exit.isSuccess(decoded)) return decoded.value
    throw new Stop("decode", `a ${what} response that does not have its documented shape`)
  }
}
const decodeInitialize = decodeOr(InitializeResponse, "initialize")
const decodeNewSession = decodeOr(NewSessionResponse, "session/new")
const decodePrompt = decodeOr(PromptResponse, "session/prompt")

/** What the conversation leaves behind for the cancel: the session being prompted, and how to cancel it. */
interface Live {
  cancel: (() => Promise<void>) | undefined
  prompting: Promise<unknown> | undefined
}

const encoder = new TextEncoder()

/** Runs one turn of the ACP agent of `settings` for `request`. */
export const run = (
  settings: AcpSettings,
  request: TurnRequest
): Effect.Effect<TurnReply, WorkerError, ChildProcessSpawner.ChildProcessSpawner> =>
  Effect.gen(function*() {
    const fail = (reason: WorkerError["reason"], message: string, exitCode?: number) =>
      Effect.fail(new WorkerError({ worker: settings.worker, reason, message, exitCode }))
    const resumed = request.resumeToken
    if (resumed !== undefined && !isSessionId(resumed)) return yield* fail("spawn", "the resume token is not an ACP session id")
    const sdk = yield* Effect.tryPromise({
      try: () => import("@agentclientprotocol/sdk"),
      catch: () =>
        new WorkerError({
          worker: settings.worker,
          reason: "spawn",
          message: "the ACP worker needs the package @agentclientprotocol/sdk: npm install @agentclientprotocol/sdk"
        })
    })
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    return yield* Effect.scoped(attempt(spawner, sdk, settings, request)).pipe(
      Effect.timeoutOrElse({
        duration: settings.timeout,
        orElse: () => fail("timeout", `no reply within ${Duration.format(settings.timeout)}: the process was killed`)
      })
    )
  })

type Sdk = typeof import("@agentclientprotocol/sdk")
type AnyMessage = import("@agentclientprotocol/sdk").AnyMessage

const attempt = (
  spawner: ChildProcessSpawner.ChildProcessSpawner["Service"],
  sdk: Sdk,
  settings: AcpSettings,
  request: TurnRequest
) =>
  Effect.gen(function*() {
    const worker = settings.worker
    const env = HostProcess.environment(settings.env)
    const redact = secretRedactor(env, settings.secrets)
    const stderr = new HostProcess.CappedOutput(stderrCap)
    const error = (reason: WorkerError["reason"], message: string, exitCode?: number) => {
      const text = stderr.text().trim()
      return new WorkerError({
        worker,
        reason,
        message: redact(text === "" ? message : `${message}; stderr: ${text}`),
        exitCode
      })
    }
    if (!HostProcess.programExists(settings.executable, env, settings.cwd)) {
      return yield* Effect.fail(error("spawn", `program not found: ${settings.executable}`))
    }
    // What goes to the agent's stdin: the SDK's messages, one JSON line each. Each answers a request of the
    // agent or is one of the turn's few requests, so the agent's capped output bounds it.
    const input = yield* Queue.unbounded<Uint8Array, Cause.Done>()
    const [shell, ...shellArgs] = HostProcess.closingInherited([settings.executable, ...settings.args], env)
    const handle = yield* spawner.spawn(ChildProcess.make(shell, shellArgs, {
      cwd: settings.cwd,
      env,
      extendEnv: false,
      detached: true,
      forceKillAfter: killGrace,
      stdin: Stream.fromQueue(input)
    })).pipe(Effect.mapError((cause) =>
      error(
        "spawn",
        cause.reason.module === "FileSystem"
          ? `the workspace cannot be entered: ${settings.cwd} (${HostProcess.describeFailure(cause)})`
          : HostProcess.describeFailure(cause)
      )
    ))
    yield* Effect.forkScoped(
      Stream.runForEach(handle.stderr, (chunk) => Effect.sync(() => stderr.push(chunk))).pipe(Effect.ignore)
    )

    // The agent's messages, framed and checked here, then handed to the SDK.
    let deliver: ReadableStreamDefaultController<Message> | undefined
    const readable = new ReadableStream<Message>({ start: (controller) => void (deliver = controller) })
    // The ids of our requests still unanswered: an answer to any other id is refused here, before the SDK
    // (which would print the agent's id, raw, on our stderr) sees it.
    const asked = new Set<string>()
    const writable = new WritableStream<AnyMessage>({
      write: (message) => {
        if ("method" in message && "id" in message) asked.add(JSON.stringify(message.id))
        Queue.offerUnsafe(input, encoder.encode(`${JSON.stringify(message)}\n`))
      }
    })
    const accept = (message: Message): string | undefined => {
      if ("method" in message) {
        return printableMethod.test(message.method)
          ? undefined
          : `a message whose method is not a method name: ${preview(JSON.stringify(message.method))}`
      }
      const id = JSON.stringify(message.id)
      if (!asked.delete(id)) return `an answer to no request this worker sent (id ${preview(id)})`
      return undefined
    }
    const splitter = new LineSplitter(settings.maxLineBytes, settings.maxTurnBytes)
    const broken = yield* Deferred.make<never, WorkerError>()
    const read = Stream.runForEach(handle.stdout, (chunk) => {
      const problem = readChunk(splitter, chunk, accept, (message) => deliver?.enqueue(message))
      return problem === undefined ? Effect.void : Effect.fail(error("decode", problem))
    }).pipe(
      Effect.catchTag("PlatformError", (cause) =>
        Effect.fail(error("eof", `its output could not be read: ${HostProcess.describeFailure(cause)}`))),
      Effect.andThen(Effect.suspend(() => {
        const last = splitter.end()
        const problem = last === undefined ? undefined : readLine(last, accept, (message) => deliver?.enqueue(message))
        return problem === undefined ? Effect.void : Effect.fail(error("decode", problem))
      })),
      // A protocol error is recorded before the output is closed, so the conversation's failure finds it.
      Effect.catch((cause) => Deferred.fail(broken, cause)),
      // The output ended: the SDK's connection closes, and a request still waiting fails.
      Effect.ensuring(Effect.sync(() => {
        try {
          deliver?.close()
        } catch {
          // already closed
        }
      }))
    )
    yield* Effect.forkScoped(read)

    const live: Live = { cancel: undefined, prompting: undefined }
    const conversation = Effect.tryPromise({
      try: () => converse(sdk, { readable, writable }, settings, request, live),
      catch: (cause) => cause
    })
    const exitCode = handle.exitCode.pipe(
      Effect.map((code): number | undefined => code),
      Effect.orElseSucceed(() => undefined)
    )
    // A protocol error the reader sees ends the turn at once, whatever the conversation waits for.
    const outcome = yield* Effect.raceFirst(Effect.exit(conversation), Deferred.await(broken)).pipe(
      Effect.onInterrupt(() =>
        // A cancel of the run: the agent is told, and its prompt gets a moment to end before the group is killed.
        live.cancel === undefined ? Effect.void : Effect.promise(() =>
          Promise.allSettled([live.cancel?.(), live.prompting]).then(() => undefined)
        ).pipe(Effect.timeoutOption(cancelGrace), Effect.asVoid)
      )
    )
    if (Exit.isSuccess(outcome)) {
      const reply = outcome.value
      return { ...reply, text: redact(reply.text) }
    }
    const cause = Cause.squash(outcome.cause)
    if (cause instanceof Stop) return yield* Effect.fail(error(cause.reason, cause.message))
    // The connection failed: a protocol error the reader saw first, or the agent's output ended (it exited).
    if (yield* Deferred.isDone(broken)) return yield* Deferred.await(broken)
    if (cause instanceof sdk.RequestError) {
      return yield* Effect.fail(error("exit", `the agent answered with an error: ${cause.message} (${cause.code})`))
    }
    const code = yield* exitCode.pipe(Effect.timeoutOption(exitGrace))
    if (code._tag === "Some" && code.value !== 0) {
      const status = code.value === undefined ? "it was killed by a signal" : `it exited with code ${code.value}`
      return yield* Effect.fail(error("exit", `${status} before the turn ended`, code.value))
    }
    const message = cause instanceof Error ? cause.message : String(cause)
    return yield* Effect.fail(
      error("eof", `its output ended before the turn did: ${message}`, code._tag === "Some" ? code.value : undefined)
    )
  })

/** The ACP conversation of one turn, over the framed stream. */
const converse = async (
  sdk: Sdk,
  stream: { readonly readable: ReadableStream<Message>; readonly writable: WritableStream<AnyMessage> },
  settings: AcpSettings,
  request: TurnRequest,
  live: Live
): Promise<TurnReply> => {
  const { methods } = sdk
  const allow = request.phase === "act" && settings.approve === "all"
  let sessionId: string | undefined
  let prompting = false
  let text = ""
  // The session's cumulative USD cost: before the prompt, and the latest seen while it runs.
  let costBefore: number | undefined
  let costAfter: number | undefined
  const app = sdk.client({ name: "effect-agent" })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      // Allowed once at most: an `allow_always` would widen what the run allowed beyond this call.
      const kinds = allow ? ["allow_once"] : ["reject_once", "reject_always"]
      const option = kinds.map((kind) => params.options.find((option) => option.kind === kind)).find((o) => o !== undefined)
      return option === undefined
        ? { outcome: { outcome: "cancelled" } }
        : { outcome: { outcome: "selected", optionId: option.optionId } }
    })
    .onNotification(methods.client.session.update, ({ params }) => {
      if (params.sessionId !== sessionId) return
      const update = params.update
      if (update.sessionUpdate === "usage_update") {
        const cost = update.cost
        if (isCost(cost) && cost.currency === "USD") {
          if (prompting) costAfter = cost.amount
          else costBefore = cost.amount
        }
        return
      }
      if (prompting && update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
        text += update.content.text
      }
    })
  return app.connectWith(stream, async (agent) => {
    const init = decodeInitialize(
      await agent.request(methods.agent.initialize, {
        protocolVersion: sdk.PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
        clientInfo: { name: "effect-agent", version: "0.1.0" }
      })
    )
    if (init.protocolVersion !== sdk.PROTOCOL_VERSION) {
      throw new Stop("decode", `the agent speaks ACP version ${init.protocolVersion}, this worker ${sdk.PROTOCOL_VERSION}`)
    }
    const resumed = request.resumeToken
    // A session the agent can no longer load (another machine, a cleanup) is started anew, as with an agent that
    // loads none: the resume token would otherwise fail every resume the same way.
    if (resumed !== undefined && init.agentCapabilities?.loadSession === true) {
      // its replayed history is not this turn's text (nothing is taken before the prompt), its cost so far is
      sessionId = resumed
      const loaded = await agent.request(methods.agent.session.load, {
        sessionId: resumed,
        cwd: settings.cwd,
        mcpServers: []
      }).then(() => true, () => false)
      if (!loaded) {
        sessionId = undefined
        costBefore = undefined
      }
    }
    if (sessionId === undefined) {
      // A new session: nothing before it cost anything.
      costBefore = 0
      sessionId = decodeNewSession(await agent.request(methods.agent.session.new, { cwd: settings.cwd, mcpServers: [] }))
        .sessionId
    }
    const id = sessionId
    prompting = true
    const prompt = agent.request(methods.agent.session.prompt, {
      sessionId: id,
      prompt: [{ type: "text", text: request.message }]
    })
    live.cancel = () => agent.notify(methods.agent.session.cancel, { sessionId: id })
    live.prompting = prompt
    const response = decodePrompt(await prompt)
    if (response.stopReason === "refusal") throw new Stop("exit", "the agent refused the prompt (stopReason refusal)")
    if (response.stopReason === "cancelled") throw new Stop("exit", "the agent cancelled the turn")
    const usage = response.usage ?? undefined
    const cost = costAfter === undefined ? undefined : costAfter - (costBefore ?? 0)
    return {
      text,
      usage: usage === undefined ? { inputTokens: 0, outputTokens: 0 } : {
        inputTokens: add(add(usage.inputTokens, usage.cachedReadTokens ?? 0), usage.cachedWriteTokens ?? 0),
        outputTokens: usage.outputTokens
      },
      resumeToken: id,
      ...(cost === undefined ? {} : { costUsd: Math.max(cost, 0) })
    }
  })
}

/** The lines of `chunk` handed on; a message when the output broke the caps or the protocol. */
const readChunk = (
  splitter: LineSplitter,
  chunk: Uint8Array,
  accept: (message: Message) => string | undefined,
  deliver: (message: Message) => void
): string | undefined => {
  const lines = splitter.push(chunk)
  if (isExceeded(lines)) return lines.message
  for (const line of lines) {
    const problem = readLine(line, accept, deliver)
    if (problem !== undefined) return problem
  }
  return undefined
}

/** One line: a JSON-RPC message handed on, or why it is not one. */
const readLine = (
  line: string,
  accept: (message: Message) => string | undefined,
  deliver: (message: Message) => void
): string | undefined => {
  if (line.trim() === "") return undefined
  const message = decodeMessage(line)
  if (Exit.isFailure(message)) return `a line that is not a JSON-RPC message: ${preview(line)}`
  const refused = accept(message.value)
  if (refused !== undefined) return refused
  deliver(message.value)
  return undefined
}

/** A method name as ACP's are (`session/update`, `_vendor/x`): printable ASCII, bounded. */
const printableMethod = /^[\x21-\x7e]{1,128}$/

const isExceeded = (lines: ReadonlyArray<string> | Exceeded): lines is Exceeded => "_tag" in lines

const preview = (line: string): string => line.length <= 120 ? line : `${line.slice(0, 120)}…`

/** Keeps the values of the named variables out of a text (an agent may echo its key). */
const secretRedactor = (env: Readonly<Record<string, string>>, secrets: ReadonlyArray<string>) => {
  const redactors = secrets.flatMap((name) => {
    const value = env[name]
    return value === undefined || value.length < 4 ? [] : [redactor(value)]
  })
  return (text: string): string => redactors.reduce((current, redact) => redact(current), text)
}
