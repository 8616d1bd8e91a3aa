/**
 * The `effect-agent` command as a program: the command tree with the
 * platform's layers, run as the process's main fiber.
 *
 * @since 0.1.0
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as NodeTerminal from "@effect/platform-node/NodeTerminal"
import { Effect, Layer, Terminal } from "effect"
import { CliConfig, CliOutput, Command, GlobalFlag } from "effect/cli"
import * as Commands from "./Commands.ts"
import { codes, type ExitCode, OnInterrupt, teardown } from "./ExitCode.ts"
import * as Io from "./Io.ts"

/**
 * The command, reading its arguments from `Stdio` and writing through `Io`:
 * what {@link program} runs on the process's streams, and what a test or an
 * embedding program runs on its own.
 *
 * @since 0.1.0
 */
export const command = Effect.gen(function*() {
  const { version } = yield* Commands.packageInfo
  yield* Command.run(Commands.root, { version })
}).pipe(
  Effect.provide(Layer.unwrap(Effect.map(Effect.service(Io.Io), (io) => CliOutput.layerPresenter(Commands.presenter(io))))),
  // No wizard: the command is driven by scripts as much as by people.
  Effect.provide(CliConfig.layer({ builtIns: GlobalFlag.BuiltIns.filter((flag) => flag !== GlobalFlag.Wizard) }))
)

/**
 * The command on the process: its arguments, streams, terminal and
 * environment.
 *
 * @since 0.1.0
 */
export const program = command.pipe(
  // Keys typed on the terminal are the run's to read (Ctrl-C, Ctrl-D and Escape included): see TerminalInput.
  Effect.provide(Layer.effect(Terminal.Terminal, NodeTerminal.make(() => false))),
  Effect.provide(Layer.mergeAll(Io.layerProcess, NodeServices.layer, NodeHttpClient.layerUndici))
)

/**
 * Runs the command as the process's main fiber: SIGINT and SIGTERM
 * interrupt it, and the process exits with the command's exit code.
 *
 * @since 0.1.0
 */
export const runMain = (): void => {
  const onInterrupt: { code: ExitCode } = { code: codes.cancelled }
  NodeRuntime.runMain(Effect.provideService(program, OnInterrupt, onInterrupt), {
    disableErrorReporting: true,
    teardown: teardown(onInterrupt)
  })
}
