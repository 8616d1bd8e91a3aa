/**
 * `effect-agent serve`: the agent server (`AgentServer`) on Node's HTTP
 * server, its sessions run with the model and tools the flags choose (the
 * flags of `run`), kept in a store directory, resumed when it starts again.
 *
 * It listens on 127.0.0.1:8080 by default. Every request needs a token: the
 * one in `--token-env NAME`'s variable, or else a random one it makes and
 * prints once, with the inspector's URL that carries it (`http://…/#token=…`:
 * open it and the page works, nothing to type). It prints that token on
 * stderr and stdout, so it refuses (exit 22) to start when either goes to a
 * file in the workspace of an agent with tools (`> serve.log 2>&1` run
 * there), which the agent could read; its sandbox hides the files its output
 * goes to elsewhere too. `--without-token` serves
 * without one, on a loopback address only, and warns loudly. Requests from
 * web pages of other origins are refused but for those `--allow-origin`
 * lists. With `--otlp URL` the sessions' spans are exported as `run --otlp`
 * exports a run's (the agent is named `effect-agent`).
 *
 * It takes `run`'s flags that choose the model, the tools and the limits,
 * not those of one run or of a supervised run (`--check`, `--verifier`,
 * `--plan`, `--max-plan-iterations`, `--approve-turns`, `--tolerate-known-failures`, `--worker`): the
 * server does not run supervised sessions, and refuses them (exit 22) rather
 * than ignore them; nor `--quiet` (it shows no progress).
 *
 * @since 0.1.0
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as HttpServer from "effect/http/HttpServer"
import { createServer } from "node:http"
import * as Approvals from "../../Approvals.ts"
import { stateDirectory } from "./stateDirectory.ts"
import * as Provider from "../../providers/Provider.ts"
import * as AgentServer from "../../server/AgentServer.ts"
import * as ToolRegistry from "../../ToolRegistry.ts"
import { codes, OnInterrupt } from "../ExitCode.ts"
import { configError } from "./Failure.ts"
import * as Flags from "./Flags.ts"
import { Io } from "./Io.ts"
import * as Runner from "./Runner.ts"
import { checkPlacement, checkUnreadable } from "./SessionFiles.ts"
import * as Settings from "./Settings.ts"


/**
 * Whether an address is a loopback address (reachable from this machine only).
 *
 * @since 0.1.0
 */
export const isLoopback = (host: string): boolean => {
  const name = host.replace(/^\[|\]$/g, "").toLowerCase()
  return name === "localhost" || name === "::1" || /^127(\.\d{1,3}){3}$/.test(name)
}

/** The server's token: from `--token-env`'s variable, none with `--without-token`, or a random one (`generated`). */
const tokenOf = (flags: Flags.ServeFlags, env: Readonly<Record<string, string | undefined>>) =>
  Effect.gen(function*() {
    const name = Option.getOrUndefined(flags.tokenEnv)
    if (flags.withoutToken) {
      if (name !== undefined) return yield* configError("--without-token and --token-env: give one of them")
      if (!isLoopback(flags.host)) {
        return yield* configError(
          `--host ${flags.host} is not a loopback address: anyone who reaches it could run agents; ` +
            "--without-token is for the loopback only (leave it out: a token is made and printed)"
        )
      }
      return { token: undefined, generated: false }
    }
    if (name === undefined) return { token: AgentServer.randomToken(), generated: true }
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      return yield* configError(`--token-env: ${JSON.stringify(name)} is not an environment variable name`)
    }
    const value = env[name]
    if (value === undefined || value.trim() === "") return yield* configError(`--token-env: ${name} is not set`)
    return { token: Redacted.make(value), generated: false }
  })

/** The `--allow-origin` values as origins (`scheme://host[:port]`), or the first that is not one. */
const originsOf = (values: ReadonlyArray<string>) =>
  Effect.forEach(values, (value) => {
    try {
      const url = new URL(value)
      if ((url.protocol === "http:" || url.protocol === "https:") && (url.pathname === "/" && url.search === "")) {
        return Effect.succeed(url.origin)
      }
    } catch {
      // not a URL
    }
    return Effect.fail(
      configError(`--allow-origin: ${JSON.stringify(value)} is not an origin (http(s)://host[:port], e.g. http://localhost:3000)`)
    )
  })

/**
 * Runs `effect-agent serve` until it is interrupted (SIGINT, SIGTERM): the
 * runs stop and keep their checkpoints, to resume when it starts again.
 *
 * @since 0.1.0
 */
export const serve = (flags: Flags.ServeFlags) =>
  Effect.gen(function*() {
    const io = yield* Io
    const path = yield* Path.Path
    // SIGINT and SIGTERM are how a server stops: a clean exit, with the runs saved to resume.
    ;(yield* OnInterrupt).code = codes.ok
    const note = (text: string) => io.stderr.write(`effect-agent serve: ${text}\n`)
    const place = { cwd: io.cwd, env: io.env }
    const { token, generated } = yield* tokenOf(flags, io.env)
    const allowedOrigins = yield* originsOf(flags.allowOrigin)
    for (const [flag, value] of [["--max-running", flags.maxRunning], ["--max-streams", flags.maxStreams]] as const) {
      if (value < 1) return yield* configError(`${flag}: ${value} is not a number of at least 1`)
    }
    const otlp = Settings.tracesUrl(Option.getOrUndefined(flags.otlp))
    if (Result.isFailure(otlp)) return yield* configError(otlp.failure)
    const approve = Option.orElse(flags.approve, () => Option.some("ask" as const))
    const target = yield* Settings.target({ ...flags, approve }, undefined, place, path)
    const key = Settings.apiKey(target, io.env)
    if (Result.isFailure(key)) return yield* configError(key.failure)
    const { config, warnings } = yield* Settings.limits(flags, false)
    warnings.forEach(note)
    const storeFlag = Option.getOrUndefined(flags.store)
    const stateDir = stateDirectory(path, io.env)
    if (storeFlag === undefined && stateDir === undefined) {
      return yield* configError("no --store, and no HOME or XDG_STATE_HOME to keep sessions under: give --store DIR")
    }
    const store = storeFlag === undefined ? path.join(stateDir!, "server") : path.resolve(io.cwd, storeFlag)
    yield* checkPlacement("--store", store, target)
    // The files its output goes to (`> serve.log 2>&1`), where /proc names them. A token it made is printed there
    // (stderr: the inspector's URL; stdout: its JSON line): never where the agent can read it.
    const outputs = [["stdout", io.stdout.file], ["stderr", io.stderr.file]] as const
    const files = outputs.flatMap(([, file]) => file === undefined ? [] : [file])
    if (generated) {
      for (const [name, file] of outputs) {
        if (file === undefined) continue
        yield* checkUnreadable(
          `${name} (${file})`,
          file,
          target,
          "write it outside, or give the token in a variable with --token-env NAME (it is not printed then)"
        )
      }
    }

    const languageModel = yield* Layer.build(
      Runner.providerLayer(target, key.success, { maxRetries: Provider.defaultRetryPolicy.maxRetries })
    ).pipe(
      Effect.map((context) => Context.get(context, LanguageModel.LanguageModel)),
      Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnvRecord({ ...io.env })),
      Effect.mapError((error) =>
        configError(
          error._tag === "ScriptFileError"
            ? error.message
            : `cannot set up the ${target.provider} provider: ${error.message}`
        )
      )
    )
    // The sandbox hides the store, whose sessions hold every client's prompts, even inside a path granted to it,
    // and the files its output goes to.
    const registry = yield* Runner.tools(target, note, [store, ...files])
    const services = Context.make(LanguageModel.LanguageModel, languageModel).pipe(
      Context.add(ToolRegistry.ToolRegistry, registry)
    )
    const server = AgentServer.layer({
      directory: store,
      token: token ?? "none",
      allowedOrigins,
      name: Runner.agentName,
      system: Option.getOrUndefined(flags.system),
      config,
      maxRunning: flags.maxRunning,
      maxStreams: flags.maxStreams,
      maxStreamsPerSession: Math.min(flags.maxStreams, AgentServer.defaults.maxStreamsPerSession),
      approvals: target.approve === "all"
        ? Approvals.allowAll
        : target.approve === "none"
        ? Approvals.denyAll("this call needs approval, and the server was started with --approve none")
        : undefined
    }).pipe(
      Layer.provide(Layer.succeedContext(services)),
      Layer.provideMerge(NodeHttpServer.layer(createServer, { port: flags.port, host: flags.host })),
      // The sessions' spans go to the collector; the ones left are sent when the server stops.
      Layer.provide(otlp.success === undefined ? Layer.empty : Runner.tracing(otlp.success))
    )
    yield* Effect.gen(function*() {
      const url = yield* HttpServer.addressFormattedWith(Effect.succeed)
      note(`listening on ${url}${token === undefined ? "" : " (a token is required)"}; sessions in ${store}`)
      const inspector = AgentServer.inspectorUrl(url, generated ? token : undefined)
      if (token === undefined) {
        note(
          "WARNING: serving WITHOUT A TOKEN (--without-token): any program on this machine can start sessions " +
            "and approve their calls"
        )
        note(`the inspector: ${inspector}`)
      } else if (generated) {
        note(`the token was made for this run; open the inspector with it: ${inspector}`)
      } else {
        note(`the inspector: ${inspector} (give it the token in ${Option.getOrElse(flags.tokenEnv, () => "")})`)
      }
      io.stdout.write(
        JSON.stringify({ url, store, inspector, ...(generated && token !== undefined ? { token: Redacted.value(token) } : {}) }) +
          "\n"
      )
      return yield* Effect.never
    }).pipe(
      Effect.provide(server),
      Effect.mapError((error) =>
        error._tag === "StorageError"
          ? configError(`--store ${store}: ${error.message}`)
          : configError(`cannot listen on ${flags.host}:${flags.port}: ${String(error.cause)}`)
      )
    )
  }).pipe(Effect.scoped)
