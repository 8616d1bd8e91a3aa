/**
 * The subcommands of `effect-agent`, on `effect/cli` (the tree is `Cli.root`):
 *
 * - `effect-agent run`: run an agent (see `Runner`).
 * - `effect-agent demo`: the offline demo.
 * - `effect-agent version [--json]`: the version, and with `--json` the
 *   capabilities a script can check and the exit codes.
 *
 * @since 0.1.0
 */
import { Effect, FileSystem, Option, Path, Schema } from "effect"
import { CliOutput, Command, Flag } from "effect/cli"
import * as Message from "../../Message.ts"
import { codes, ExitWith, fromOutcome } from "../ExitCode.ts"
import * as Cluster from "./Cluster.ts"
import * as Demo from "./Demo.ts"
import type { Failure } from "./Failure.ts"
import * as Flags from "./Flags.ts"
import * as Io from "./Io.ts"
import * as Runner from "./Runner.ts"
import * as Serve from "./Serve.ts"
import * as SupervisedDemo from "./SupervisedDemo.ts"
import * as View from "./View.ts"

// -----------------------------------------------------------------------------
// run
// -----------------------------------------------------------------------------

/**
 * `effect-agent run`.
 *
 * @since 0.1.0
 */
export const run = Command.make(
  "run",
  Flags.flags,
  (flags) => Option.isSome(flags.pg) ? reported(Cluster.submit(flags, flags.pg.value)) : Runner.run(flags)
).pipe(
  Command.withDescription("Run an agent on a task, with live progress, approvals and steering on stdin, and resume"),
  Command.withExamples([
    { command: "effect-agent run --task \"Fix the failing test\"", description: "OpenAI (OPENAI_API_KEY)" },
    {
      command: "effect-agent run --base-url http://localhost:11434/v1 --model qwen3:8b --task \"…\"",
      description: "A local OpenAI-compatible server"
    },
    {
      command: "effect-agent run --session-dir ~/.agent-sessions/fix --task \"…\"",
      description: "Resumable: effect-agent run --resume ~/.agent-sessions/fix"
    },
    {
      command: "effect-agent run --pg postgres://db/agents --task \"…\"",
      description: "On the runners of a cluster (effect-agent runner --pg …)"
    },
    {
      command: "effect-agent run --provider scripted --script replies.json --tools read_file --task \"…\"",
      description: "Offline, the model's replies from a file (CI, tests): " +
        "{\"turns\": [{\"text\": \"Let me look.\", \"toolCalls\": [{\"name\": \"read_file\", " +
        "\"params\": {\"path\": \"a.txt\"}}]}, {\"text\": \"Done.\", \"delay\": 200}]}"
    }
  ])
)

/** A failure the command reports itself: its message on stderr, then its exit code. */
const reported = <A, R>(
  effect: Effect.Effect<A, Failure | ExitWith, R>
): Effect.Effect<A, ExitWith, R> =>
  Effect.catch(effect, (error) =>
    error._tag === "ExitWith" ? Effect.fail(error) : Effect.andThen(
      Effect.flatMap(Io.Io, (io) => Effect.sync(() => io.stderr.write(`effect-agent: ${error.message}\n`))),
      Effect.fail(new ExitWith({ code: error.code }))
    ))

// -----------------------------------------------------------------------------
// runner
// -----------------------------------------------------------------------------

/**
 * `effect-agent runner`: a runner of durable sessions on a cluster on PostgreSQL.
 *
 * @since 0.1.0
 */
export const runner = Command.make("runner", Cluster.runnerFlags, (flags) => reported(Cluster.runner(flags))).pipe(
  Command.withDescription(
    "Run durable sessions on a cluster on PostgreSQL, with the model and tools the flags choose (see run --pg)"
  ),
  Command.withExamples([
    {
      command: "effect-agent runner --pg postgres://db/agents --port 34431 --tools read_file,grep",
      description: "One runner; start more on other ports or machines"
    }
  ])
)

// -----------------------------------------------------------------------------
// serve
// -----------------------------------------------------------------------------

/**
 * `effect-agent serve`.
 *
 * @since 0.1.0
 */
export const serve = Command.make("serve", Serve.flags, (flags) =>
  Serve.serve(flags).pipe(
    Effect.catch((error) =>
      Effect.andThen(
        Effect.flatMap(Io.Io, (io) => Effect.sync(() => io.stderr.write(`effect-agent: ${error.message}\n`))),
        Effect.fail(new ExitWith({ code: error.code }))
      )
    )
  )).pipe(
    Command.withDescription(
      "Serve agents over HTTP: sessions, their events as SSE, approvals and steering, and the inspector page"
    ),
    Command.withExamples([
      {
        command: "effect-agent serve --tools read_file,grep",
        description: "On http://127.0.0.1:8080, with a token it makes: it prints the inspector's URL that carries it"
      },
      {
        command: "AGENT_TOKEN=… effect-agent serve --host 0.0.0.0 --token-env AGENT_TOKEN",
        description: "Off the loopback, with a token"
      }
    ])
  )

// -----------------------------------------------------------------------------
// demo
// -----------------------------------------------------------------------------

/**
 * `effect-agent demo`: the offline demo, with the rule of `run`: the
 * progress on stderr (the live view on a terminal, the event log
 * elsewhere), the answer on stdout (unless the live view already showed it
 * on the same terminal).
 *
 * @since 0.1.0
 */
export const demo = Command.make("demo", {
  supervised: Flag.withDescription(
    Flag.withDefault(Flag.Boolean("supervised"), false),
    "The supervised demo: a worker fixes a failing check in a temporary workspace (red, feedback, green)"
  )
}, ({ supervised }) =>
  Effect.gen(function*() {
    const io = yield* Io.Io
    const view = io.stderr.isTerminal
      ? yield* View.live({ write: io.stderr.write, columns: io.stderr.columns, color: io.color })
      : View.log(io.stderr.write)
    const failed = (error: { readonly message: string }) =>
      Effect.andThen(
        Effect.sync(() => io.stderr.write(`effect-agent: ${View.errorText(error.message)}\n`)),
        Effect.fail(new ExitWith({ code: codes.unexpected }))
      )
    const answer = supervised
      ? yield* SupervisedDemo.run({ view }).pipe(
        Effect.flatMap((result) =>
          result.outcome._tag === "Converged"
            ? Effect.succeed(result.reply)
            : Effect.fail(new ExitWith({ code: fromOutcome(result.outcome) }))
        ),
        Effect.catch((error) => error._tag === "ExitWith" ? Effect.fail(error) : failed(error))
      )
      : yield* Demo.run({ view }).pipe(
        Effect.map((result) => {
          const last = result.messages.at(-1)
          return last === undefined ? "" : Message.textOf(last)
        }),
        Effect.catch(failed)
      )
    if (answer !== "" && !(io.stderr.isTerminal && io.stdout.isTerminal)) {
      io.stdout.write(`${View.answer(answer, io.stdout.isTerminal)}\n`)
    }
  }).pipe(Effect.scoped)).pipe(
    Command.withDescription(
      "Run the offline demo: a trip-planning agent on a scripted model (no keys, no network); " +
        "--supervised: checks between turns"
    )
  )

// -----------------------------------------------------------------------------
// version
// -----------------------------------------------------------------------------

/**
 * What this build of the command can do, for scripts to check.
 *
 * @since 0.1.0
 */
export const capabilities: ReadonlyArray<string> = [
  "run",
  "resume",
  "serve",
  "control-protocol",
  "approvals",
  "steering",
  "json-result",
  "emit-jsonl",
  "mcp",
  "sandbox-local",
  "sandbox-bubblewrap",
  "provider-openai",
  "provider-openai-responses",
  "provider-anthropic",
  "provider-scripted",
  "demo",
  "demo-supervised",
  "supervised",
  "supervised-session",
  "checks",
  "verifier",
  "plan-approval",
  "turn-approval",
  "worker-agent",
  "worker-claude",
  "worker-codex"
]

const PackageJson = Schema.fromJsonString(Schema.Struct({ name: Schema.String, version: Schema.String }))

/**
 * The package's name and version, from its `package.json`.
 *
 * @since 0.1.0
 */
export const packageInfo = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  // src/cli/internal/ and dist/cli/internal/ are both three levels below the package root.
  const file = yield* path.fromFileUrl(new URL("../../../package.json", import.meta.url))
  return yield* Schema.decodeUnknownEffect(PackageJson)(yield* fs.readFileString(file))
}).pipe(Effect.orDie)

/**
 * `effect-agent version [--json]`.
 *
 * @since 0.1.0
 */
export const version = Command.make("version", {
  json: Flag.withDescription(
    Flag.withDefault(Flag.Boolean("json"), false),
    "Print the version, capabilities and exit codes as JSON"
  )
}, ({ json }) =>
  Effect.gen(function*() {
    const io = yield* Io.Io
    const info = yield* packageInfo
    io.stdout.write(
      json
        ? JSON.stringify({ name: info.name, version: info.version, node: process.version, capabilities, exitCodes: codes }) +
          "\n"
        : `${info.name} ${info.version}\n`
    )
  })).pipe(Command.withDescription("Print the version (--json: with the capabilities and exit codes)"))

// -----------------------------------------------------------------------------
// Output
// -----------------------------------------------------------------------------

const supervisedOnly = "it runs no supervised sessions yet (effect-agent run does)"
const oneRun = "it is about one run: effect-agent run's"

/**
 * Why `serve` and `runner` do not take some of `run`'s flags (given, they
 * would be ignored, so they are refused: exit 22), by command and flag.
 */
const notTaken: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  serve: {
    "--check": supervisedOnly,
    "--verifier": supervisedOnly,
    "--plan": supervisedOnly,
    "--max-plan-iterations": supervisedOnly,
    "--approve-turns": supervisedOnly,
    "--worker": supervisedOnly,
    "--quiet": "it shows no progress",
    "--task": "a session's task comes in POST /sessions",
    "--resume": "it resumes its sessions itself, from --store",
    "--session-dir": "its sessions are kept in --store",
    "--emit-jsonl": "each session's events are served as SSE (GET /sessions/:id/events) and kept in --store",
    "--json": oneRun,
    "--stdin-eof": oneRun,
    "--session-id": oneRun,
    "--pg": "a cluster's sessions run on effect-agent runner --pg"
  },
  runner: {
    "--check": supervisedOnly,
    "--verifier": supervisedOnly,
    "--plan": supervisedOnly,
    "--max-plan-iterations": supervisedOnly,
    "--approve-turns": supervisedOnly,
    "--worker": supervisedOnly,
    "--quiet": "it shows no progress",
    "--otlp": "a runner exports no traces",
    "--task": "a session's task is its client's: effect-agent run --pg URL --task …",
    "--system": "a session's prompt is its client's: effect-agent run --pg URL --system …",
    "--max-turns": "a session's limits are its client's: effect-agent run --pg URL --max-turns …",
    "--max-tokens": "a session's limits are its client's: effect-agent run --pg URL --max-tokens …",
    "--max-cost": "a session's limits are its client's: effect-agent run --pg URL --max-cost …",
    "--max-wall": "a session's limits are its client's: effect-agent run --pg URL --max-wall …",
    "--resume": oneRun,
    "--session-dir": oneRun,
    "--emit-jsonl": oneRun,
    "--json": oneRun,
    "--stdin-eof": oneRun,
    "--session-id": oneRun
  }
}

/** For each flag of `run` that the command does not take, why. */
const whyNotTaken = (event: CliOutput.Presenter.InvalidInvocation): ReadonlyArray<string> => {
  const reasons = notTaken[event.commandPath.at(-1) ?? ""]
  if (reasons === undefined) return []
  return event.errors.flatMap((error) => {
    if (error._tag !== "UnrecognizedOption") return []
    const why = reasons[error.option]
    return why === undefined ? [] : [`  ${error.option} is not taken by ${event.commandPath.join(" ")}: ${why}`]
  })
}

/**
 * Where effect/cli's output goes: help on stdout; invalid flags on stderr,
 * as the errors and a pointer to the help (not the whole help, which would
 * bury them), and why when the flag is one of `run`'s that the command does
 * not take.
 *
 * @since 0.1.0
 */
export const presenter = (io: Io.Service): CliOutput.Presenter => {
  const formatter = CliOutput.defaultFormatter({ colors: io.stdout.isTerminal && io.color })
  return {
    present: (event) =>
      Effect.sync(() => {
        switch (event._tag) {
          case "Help":
            return io.stdout.write(formatter.formatHelpDoc(event.helpDoc) + "\n")
          case "Version":
            return io.stdout.write(formatter.formatVersion(event.name, event.version) + "\n")
          case "InvalidInvocation": {
            const why = whyNotTaken(event).map((line) => `${line}\n`).join("")
            return io.stderr.write(
              `${formatter.formatErrors(event.errors).trimStart()}\n${why === "" ? "" : `\n${why}`}\n` +
                `See: ${event.commandPath.join(" ")} --help\n`
            )
          }
        }
      })
  }
}
