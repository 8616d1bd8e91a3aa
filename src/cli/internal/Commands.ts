/**
 * The subcommands of `effect-agent`, on `effect/cli` (the tree is `Cli.root`):
 *
 * - `effect-agent run`: run an agent (see `Runner`; with `--pg`, `Cluster`).
 * - `effect-agent runner`: a runner of a cluster's durable sessions (see `Cluster`).
 * - `effect-agent serve`: the agent server (see `Serve`).
 * - `effect-agent demo`: the offline demo (see `Demo`).
 * - `effect-agent version [--json]`: the version, and with `--json` the
 *   capabilities a script can check and the exit codes.
 *
 * The tree loads `effect/cli` and the flags (`Flags`) only, and of
 * `effect` the modules it uses (not `from "effect"`, which loads them all);
 * each handler loads its module when its subcommand runs.
 *
 * @since 0.1.0
 */
import { CliOutput, Command, Flag } from "effect/cli"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Schema from "effect/Schema"
import { codes, ExitWith } from "./exitCodes.ts"
import type { Failure } from "./Failure.ts"
import * as Flags from "./Flags.ts"
import * as Io from "./Io.ts"

/**
 * A subcommand's handler, in a module loaded when the subcommand runs: the
 * tree (names, flags, help) loads only `effect/cli` and the flags, so that
 * `--help`, `--version` and `version` answer without loading what a run
 * needs (the providers, the sandbox, the server, the cluster).
 */
const loaded = <M, A, E, R>(
  load: () => Promise<M>,
  handler: (module: M) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => Effect.flatMap(Effect.promise(load), handler)

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
  (flags) =>
    Option.match(flags.pg, {
      onNone: () => loaded(() => import("./Runner.ts"), (Runner) => Runner.run(flags)),
      onSome: (url) => loaded(() => import("./Cluster.ts"), (Cluster) => reported(Cluster.submit(flags, url)))
    })
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
export const runner = Command.make(
  "runner",
  Flags.runnerFlags,
  (flags) => loaded(() => import("./Cluster.ts"), (Cluster) => reported(Cluster.runner(flags)))
).pipe(
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
export const serve = Command.make("serve", Flags.serveFlags, (flags) =>
  loaded(() => import("./Serve.ts"), (Serve) =>
    Serve.serve(flags).pipe(
      Effect.catch((error) =>
        Effect.andThen(
          Effect.flatMap(Io.Io, (io) => Effect.sync(() => io.stderr.write(`effect-agent: ${error.message}\n`))),
          Effect.fail(new ExitWith({ code: error.code }))
        )
      )
    ))).pipe(
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
}, ({ supervised }) => loaded(() => import("./Demo.ts"), (Demo) => Demo.command({ supervised }))).pipe(
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
  "jsonl-format-ynh",
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
  "worker-codex",
  "worker-cursor",
  "worker-acp"
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
  // This module is two levels below the package's root in the command's bundle (dist/bin/), and three in
  // src/cli/internal/ and dist/cli/internal/ (whose parents src/ and dist/ hold no package.json).
  const near = yield* path.fromFileUrl(new URL("../../package.json", import.meta.url))
  const file = (yield* fs.exists(near)) ? near : yield* path.fromFileUrl(new URL("../../../package.json", import.meta.url))
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
    "--tolerate-known-failures": supervisedOnly,
    "--worker-command": supervisedOnly,
    "--worker": supervisedOnly,
    "--quiet": "it shows no progress",
    "--task": "a session's task comes in POST /sessions",
    "--resume": "it resumes its sessions itself, from --store",
    "--session-dir": "its sessions are kept in --store",
    "--emit-jsonl": "each session's events are served as SSE (GET /sessions/:id/events) and kept in --store",
    "--jsonl-format": "each session's events are served as SSE (GET /sessions/:id/events) and kept in --store",
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
    "--tolerate-known-failures": supervisedOnly,
    "--worker-command": supervisedOnly,
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
    "--jsonl-format": oneRun,
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
