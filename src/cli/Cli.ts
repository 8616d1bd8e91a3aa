/**
 * The `effect-agent` command: its tree of subcommands on `effect/cli`, to
 * mount in another `effect/cli` program, and the command as a program, run
 * as the process's main fiber (the package's `bin`).
 *
 * - `effect-agent run`: run an agent on a task, with live progress,
 *   approvals and steering on stdin (see `Control`), sessions that resume,
 *   and an exit code that says how the run ended (see `ExitCode`).
 * - `effect-agent serve`: the agent server (sessions over HTTP, the
 *   inspector page), with the model and tools of `run`'s flags.
 * - `effect-agent demo`: the offline demo.
 * - `effect-agent version [--json]`: the version, and with `--json` the
 *   capabilities a script can check and the exit codes.
 *
 * @example
 * ```ts
 * import { Command } from "effect/cli"
 * import { Cli } from "effect-agent/cli"
 *
 * // `my-tool agent run --task "…"` runs `effect-agent run --task "…"`.
 * const tool = Command.make("my-tool").pipe(
 *   Command.withSubcommands([Command.make("agent").pipe(Command.withSubcommands([Cli.root]))])
 * )
 * ```
 *
 * @since 0.1.0
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as NodeTerminal from "@effect/platform-node/NodeTerminal"
// effect's modules one by one, not `from "effect"` (which loads all of them): the command's start loads what
// the command tree and the platform use, and each subcommand the rest (see internal/Commands.ts).
import type * as FileSystem from "effect/FileSystem"
import type * as Path from "effect/Path"
import type * as Runtime from "effect/Runtime"
import type * as Stdio from "effect/Stdio"
import { CliConfig, CliOutput, Command, GlobalFlag } from "effect/cli"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpClient from "effect/http/HttpClient"
import type * as HttpClientError from "effect/http/HttpClientError"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import type * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as Terminal from "effect/Terminal"
import * as Commands from "./internal/Commands.ts"
import { codes, type ExitCode, type ExitWith, fromExit, OnInterrupt } from "./internal/exitCodes.ts"
import * as Io from "./internal/Io.ts"

/**
 * What the command needs from the platform: its arguments and stdin
 * (`Stdio`), the terminal, files, paths, child processes (the sandbox and MCP
 * servers) and an HTTP client (the providers). On Node, `NodeServices.layer`
 * and `NodeHttpClient.layerUndici` provide them, with `NodeTerminal`.
 *
 * @since 0.1.0
 * @category models
 */
export type Requirements =
  | Stdio.Stdio
  | FileSystem.FileSystem
  | Path.Path
  | ChildProcessSpawner.ChildProcessSpawner
  | HttpClient.HttpClient
  | Terminal.Terminal

/**
 * `effect-agent` and its subcommands `run`, `demo` and `version`. They write
 * to the process's stdout and stderr and read its environment and working
 * directory; `run` reads control lines from `Stdio`'s stdin and keys from the
 * `Terminal`. A subcommand that ends otherwise than well fails with
 * `ExitCode.ExitWith`, whose code the command exits with (see
 * `ExitCode.fromExit`), having said why on stderr.
 *
 * @since 0.1.0
 * @category commands
 */
export const root: Command.Command<"effect-agent", {}, {}, ExitWith, Requirements> = Command.make("effect-agent").pipe(
  Command.withDescription("A typed agent runtime: run agents from the shell, in CI and from other programs"),
  Command.withSubcommands([Commands.run, Commands.runner, Commands.serve, Commands.demo, Commands.version])
)

/**
 * The command, reading its arguments from `Stdio`: what {@link program}
 * runs on the process, with `effect/cli`'s help and errors written to the
 * command's own streams.
 *
 * @since 0.1.0
 * @category running
 */
export const command = Effect.gen(function*() {
  const { version } = yield* Commands.packageInfo
  yield* Command.run(root, { version })
}).pipe(
  Effect.provide(
    Layer.unwrap(Effect.map(Effect.service(Io.Io), (io) => CliOutput.layerPresenter(Commands.presenter(io))))
  ),
  // No wizard: the command is driven by scripts as much as by people.
  Effect.provide(CliConfig.layer({ builtIns: GlobalFlag.BuiltIns.filter((flag) => flag !== GlobalFlag.Wizard) }))
)

/**
 * Node's HTTP client (`NodeHttpClient.layerUndici`), loaded and built at the
 * first request: a command that sends none (`--help`, `version`, `demo`)
 * does not load undici. It is built as the layer would have been, in the
 * layer's scope (its connections are closed with it) and context (not the
 * first request's).
 */
const layerHttpClient: Layer.Layer<HttpClient.HttpClient> = Layer.effect(
  HttpClient.HttpClient,
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const context = yield* Effect.context<never>()
    const client = yield* Effect.cached(
      Effect.promise(() => import("@effect/platform-node/NodeHttpClient")).pipe(
        Effect.flatMap((NodeHttpClient) => Layer.buildWithScope(NodeHttpClient.layerUndici, scope)),
        Effect.map(Context.get(HttpClient.HttpClient)),
        Effect.provideContext(context)
      )
    )
    // The request as undici's client takes it: its `execute` is `postprocess` after `Effect.succeed`.
    return HttpClient.makeWith<HttpClientError.HttpClientError, never, HttpClientError.HttpClientError, never>(
      (request) => Effect.flatMap(client, (client) => client.postprocess(request)),
      Effect.succeed
    )
  })
)

/**
 * The command on the process: its arguments, streams, terminal and
 * environment.
 *
 * @since 0.1.0
 * @category running
 */
export const program = command.pipe(
  // Keys typed on the terminal are the run's to read (Ctrl-C, Ctrl-D and Escape included): see TerminalInput.
  Effect.provide(Layer.effect(Terminal.Terminal, NodeTerminal.make(() => false))),
  Effect.provide(Layer.mergeAll(Io.layerProcess, NodeServices.layer, layerHttpClient))
)

/**
 * Runs the command as the process's main fiber: SIGINT and SIGTERM
 * interrupt it, and the process exits with the command's exit code. A
 * command that bounds its stop (`OnInterrupt`'s `forced`: `effect-agent
 * runner`) is exited at once by a second signal, or when its stop outlasts
 * the bound.
 *
 * @since 0.1.0
 * @category running
 */
export const runMain = (): void => {
  const onInterrupt: Context.Service.Shape<typeof OnInterrupt> = { code: codes.cancelled }
  let signals = 0
  const force = (why: string) => {
    const forced = onInterrupt.forced
    if (forced === undefined) return
    process.stderr.write(`effect-agent: ${why}: exiting at once; ${forced.note}\n`)
    process.exit(forced.code)
  }
  // Beside NodeRuntime.runMain's own listeners, which interrupt the command (once: it ignores a second signal).
  const onSignal = () => {
    signals += 1
    const forced = onInterrupt.forced
    if (forced === undefined) return
    if (signals > 1) return force("a second signal")
    setTimeout(() => force(`not stopped ${forced.within / 1000} s after the signal`), forced.within).unref()
  }
  process.on("SIGINT", onSignal)
  process.on("SIGTERM", onSignal)
  // stdout is the command's data (an answer, `--json`, `serve`'s and `runner`'s first line): what is logged goes to
  // stderr, whichever command logs it (the sandbox's choice, a warning)
  const main = program.pipe(Effect.provideService(OnInterrupt, onInterrupt), Effect.provideService(Logger.LogToStderr, true))
  NodeRuntime.runMain(main, {
    disableErrorReporting: true,
    teardown: teardown(onInterrupt)
  })
}

// The `NodeRuntime.runMain` teardown: maps how the program ended to its exit code, and exits (stdin may still
// hold the event loop open). Unexpected failures are printed, since they were not reported.
const teardown = (onInterrupt: { readonly code: ExitCode }): Runtime.Teardown => (exit, onExit) => {
  const code = fromExit(exit, onInterrupt, (text) => process.stderr.write(text))
  onExit(code)
  process.exit(code)
}
