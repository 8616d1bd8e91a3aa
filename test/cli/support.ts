/**
 * For the tests that run the built command as a real process: its stdout
 * read line by line as it comes, its stdin written line by line, signals
 * sent, its exit awaited. The process is killed when the test's scope
 * closes, whatever happened. And the scripted runs' files.
 */
import { NodeServices } from "@effect/platform-node"
import { it } from "@effect/vitest"
import { Cause, Effect, Fiber, FileSystem, type Path, Queue, Ref, Schedule, type Scope, Stream } from "effect"
import { AgentEvent } from "effect-agent"
import { SupervisorEvent } from "effect-agent/supervisor"
import { Sandbox } from "effect-agent/sandbox"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import * as TestServer from "../providers/TestServer.ts"

export interface Exited {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

export interface Options {
  readonly cwd: string
  /** Set over the test process's environment (`undefined` removes a variable). */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
  /** Text written to stdin before it is closed; without it stdin stays open for `send`. */
  readonly stdin?: string | undefined
}

export interface Proc {
  /** Writes a line to stdin. */
  readonly send: (line: string) => Effect.Effect<void>
  /** Closes stdin. */
  readonly closeStdin: Effect.Effect<void>
  /** Waits (up to 30 seconds) for a stdout line that matches (given the lines before it), and returns it. */
  readonly waitFor: (matches: (line: string, index: number, lines: ReadonlyArray<string>) => boolean) => Effect.Effect<string>
  readonly signal: (signal: "SIGINT" | "SIGTERM" | "SIGKILL") => Effect.Effect<void>
  /** Waits (up to 60 seconds) for the process to exit. */
  readonly exit: Effect.Effect<Exited>
}

/**
/**
 * Where the commands the tests run keep their state (the key that seals session files), so the tests never
 * write into the user's home.
 */
export const stateHome = (() => {
  const dir = NodePath.join(fileURLToPath(new URL("../../node_modules/.cache", import.meta.url)), "effect-agent-state")
  Fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  return dir
})()

/**
 * The environment: the test's, without provider keys or anything that looks
 * like a secret (the command's `--sandbox auto` refuses to run commands
 * without isolation beside one), with the test's state directory and the
 * given variables on top.
 */
export const environment = (env: Options["env"]): Record<string, string | undefined> => {
  const base: Record<string, string | undefined> = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (!Sandbox.isSecretName(name)) base[name] = value
  }
  base.XDG_STATE_HOME = stateHome
  delete base.OPENAI_API_KEY
  delete base.ANTHROPIC_API_KEY
  return { ...base, ...env }
}

const encoder = new TextEncoder()

/** `Proc.waitFor` over the stdout lines `current` reads: polled every 20 ms, 30 s at most. */
export const waitForLine = (
  current: Effect.Effect<ReadonlyArray<string>>,
  matches: (line: string, index: number, lines: ReadonlyArray<string>) => boolean
): Effect.Effect<string> =>
  current.pipe(
    Effect.map((all) => all.find(matches)),
    Effect.repeat({ until: (line) => line !== undefined, schedule: Schedule.spaced("20 millis") }),
    Effect.map((line) => line!),
    Effect.timeoutOrElse({
      duration: "30 seconds",
      orElse: () =>
        Effect.flatMap(current, (all) => Effect.die(new Error(`no such line in 30 s; stdout:\n${all.join("\n")}`)))
    })
  )

/** Starts `node <command> <args>`. */
export const spawn = (command: string, args: ReadonlyArray<string>, options: Options) =>
  spawnProgram(process.execPath, [command, ...args], options)

/** Starts `<program> <args>`. */
export const spawnProgram = (
  program: string,
  args: ReadonlyArray<string>,
  options: Options
): Effect.Effect<Proc, never, Scope.Scope | ChildProcessSpawner.ChildProcessSpawner> =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const scope = yield* Effect.scope
    const input = yield* Queue.unbounded<Uint8Array, Cause.Done>()
    if (options.stdin !== undefined) {
      yield* Queue.offer(input, encoder.encode(options.stdin))
      yield* Queue.end(input)
    }
    const handle = yield* spawner.spawn(ChildProcess.make(program, args, {
      cwd: options.cwd,
      env: environment(options.env),
      extendEnv: false,
      stdin: Stream.fromQueue(input),
      forceKillAfter: "2 seconds"
    })).pipe(Effect.orDie)
    const lines = yield* Ref.make<ReadonlyArray<string>>([])
    const stdout = yield* Effect.forkScoped(
      handle.stdout.pipe(
        Stream.decodeText(),
        Stream.splitLines,
        Stream.runForEach((line) => Ref.update(lines, (all) => [...all, line])),
        Effect.orDie
      )
    )
    const stderr = yield* Effect.forkScoped(Effect.orDie(Stream.mkString(Stream.decodeText(handle.stderr))))
    const exit = Effect.gen(function*() {
      // A process killed by a signal has no exit code: it is 128 + the signal's number, as a shell reports it.
      const code = yield* handle.exitCode.pipe(
        Effect.catch((error) => {
          const signal = /receipt of signal: '(SIG[A-Z]+)'/.exec(String(error.reason.cause))?.[1]
          const number = signal === undefined ? undefined : Os.constants.signals[signal as keyof typeof Os.constants.signals]
          return number === undefined ? Effect.die(error) : Effect.succeed(128 + number)
        })
      )
      yield* Fiber.join(stdout)
      return { code: Number(code), stdout: (yield* Ref.get(lines)).map((line) => `${line}\n`).join(""), stderr: yield* Fiber.join(stderr) }
    }).pipe(
      Effect.timeoutOrElse({ duration: "60 seconds", orElse: () => Effect.die(new Error(`${args.join(" ")}: no exit in 60 s`)) })
    )
    return {
      send: (line) => Effect.asVoid(Queue.offer(input, encoder.encode(`${line}\n`))),
      closeStdin: Effect.asVoid(Queue.end(input)),
      waitFor: (matches) => waitForLine(Ref.get(lines), matches),
      // The kill waits for the exit: it runs beside the test, which awaits `exit`.
      signal: (signal) =>
        Effect.asVoid(Effect.forkIn(Effect.orDie(handle.kill({ killSignal: signal, forceKillAfter: "20 seconds" })), scope)),
      exit
    }
  })

/** Runs `node <command> <args>` to its end. */
export const run = (command: string, args: ReadonlyArray<string>, options: Options) =>
  runProgram(process.execPath, [command, ...args], options)

/** Runs `<program> <args>` to its end. */
export const runProgram = (program: string, args: ReadonlyArray<string>, options: Options) =>
  Effect.scoped(Effect.flatMap(spawnProgram(program, args, { ...options, stdin: options.stdin ?? "" }), (proc) => proc.exit))

/** The events of a trajectory file (or of `--emit-jsonl -` output). */
export const events = (text: string) =>
  Effect.forEach(text.split("\n").filter((line) => line !== ""), (line) => AgentEvent.decodeJson(JSON.parse(line)))

export const readEvents = (path: string) =>
  Effect.flatMap(Effect.service(FileSystem.FileSystem), (fs) => Effect.flatMap(fs.readFileString(path), events))

/** Whether a JSON line is an event with this tag. */
export const isEvent = (tag: AgentEvent.Tag | SupervisorEvent.Tag) => (line: string) => {
  if (line.startsWith(`{"_tag":"${tag}"`)) return true
  // A supervised run's own events are `Custom` events (see `SupervisorEvent`).
  if (!line.startsWith(`{"_tag":"Custom"`)) return false
  try {
    return SupervisorEvent.tagOf(JSON.parse(line)) === tag
  } catch {
    return false
  }
}

/** What the process tests need. */
export type Services = FileSystem.FileSystem | Path.Path | Scope.Scope | ChildProcessSpawner.ChildProcessSpawner

/** A live test (real clock, real processes) with a minute to run. */
export const live = (name: string, test: () => Effect.Effect<void, unknown, Services>) =>
  it.live(name, () => test().pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

export const tempDir = Effect.flatMap(
  Effect.service(FileSystem.FileSystem),
  (fs) => fs.makeTempDirectoryScoped({ prefix: "effect-agent-cli-" })
)

/** A temp directory holding `script.json` for `--provider scripted`, and `a.txt`. */
export const scripted = (turns: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const dir = yield* tempDir
    yield* fs.writeFileString(`${dir}/script.json`, JSON.stringify({ turns }))
    yield* fs.writeFileString(`${dir}/a.txt`, "hello world\n")
    return dir
  })

/** `run` on the scripted model of `dir`, in the local sandbox, with a task. */
export const scriptedArgs = (dir: string, ...more: ReadonlyArray<string>) =>
  scriptedTask(dir, "What is in a.txt?", ...more)

/** `scriptedArgs` with a task of its own. */
export const scriptedTask = (dir: string, task: string, ...more: ReadonlyArray<string>) => [
  "run",
  "--provider",
  "scripted",
  "--script",
  `${dir}/script.json`,
  "--sandbox",
  "local",
  "--task",
  task,
  ...more
]

export const noEscapes = (text: string) => {
  if (text.includes("\x1b")) throw new Error(`escape codes in: ${JSON.stringify(text)}`)
}

/** A local server replaying two recorded provider streams (test/fixtures/providers): the first request gets the first. */
export const replaying = (first: string, second: string) =>
  TestServer.start((_request, index) => Effect.succeed(TestServer.sse(TestServer.fixture(index === 0 ? first : second))))

/** OpenAI's recorded Chat Completions streams: a tool call, then an answer. */
export const chatToolCall = "openai-chat/openai-python_single-tool-call_gpt-4o.sse"
export const chatAnswer = "openai-chat/openai-python_text-with-usage_gpt-4o.sse"
