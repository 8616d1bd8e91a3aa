/**
 * Sandbox: commands on the local, bubblewrap and auto sandboxes (exit codes,
 * output caps, environment, killing the whole process tree) and the names
 * that hold secrets. The file operations' security is in
 * SandboxSecurity.test.ts, the in-memory sandbox in SandboxMemory.test.ts.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FileSystem, Layer, Path } from "effect"
import { readFileSync } from "node:fs"
import { Sandbox } from "effect-agent/sandbox"
import {
  bubblewrapLayer,
  eventually,
  isAlive,
  localLayer,
  makeWorkspace,
  processesRunning
} from "./fixtures.ts"
import { bubblewrap, needsBubblewrap } from "../bubblewrap.ts"
import { captureLogs } from "../support.ts"

const withSandbox = <A, E>(
  layer: (root: string) => Layer.Layer<Sandbox.Sandbox, Sandbox.SandboxError>,
  body: (sandbox: Sandbox.Sandbox["Service"], root: string) => Effect.Effect<A, E, FileSystem.FileSystem | Path.Path>
) =>
  Effect.gen(function*() {
    const workspace = yield* makeWorkspace()
    const sandbox = yield* Effect.provide(Effect.service(Sandbox.Sandbox), layer(workspace.root))
    return yield* body(sandbox, workspace.root)
  }).pipe(Effect.provide(NodeServices.layer))

/** Reads a pid a command wrote to a file in the workspace, waiting for it to appear. */
const pidFrom = (root: string, name: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = `${root}/${name}`
    yield* eventually(() => {
      try {
        return /^\d+\n$/.test(readFileSync(file, "utf8"))
      } catch {
        return false
      }
    })
    return Number((yield* fs.readFileString(file)).trim())
  })

describe("Sandbox.local commands", () => {
  it.live("runs a shell string and an argv, with exit code, stdout, stderr and duration", () =>
    withSandbox(localLayer, (sandbox) =>
      Effect.gen(function*() {
        const shell = yield* sandbox.exec({ command: "echo out; echo err >&2; exit 3" })
        assert.deepStrictEqual(
          { ...shell, durationMs: 0 },
          { exitCode: 3, stdout: "out\n", stderr: "err\n", durationMs: 0, timedOut: false, truncated: false }
        )
        assert.isTrue(shell.durationMs >= 0 && shell.durationMs < 5000)
        // argv: no shell, so `$HOME` and `;` are literal.
        const argv = yield* sandbox.exec({ command: ["printf", "%s|", "$HOME", "a;b"] })
        assert.deepStrictEqual([argv.exitCode, argv.stdout], [0, "$HOME|a;b|"])
      })))

  it.live("feeds stdin; without it stdin is empty", () =>
    withSandbox(localLayer, (sandbox) =>
      Effect.gen(function*() {
        const fed = yield* sandbox.exec({ command: ["wc", "-l"], stdin: "a\nb\nc\n" })
        assert.strictEqual(fed.stdout.trim(), "3")
        const empty = yield* sandbox.exec({ command: "cat; echo done" })
        assert.strictEqual(empty.stdout, "done\n")
      })))

  it.live("passes only allowlisted environment variables, plus the ones set", () =>
    Effect.gen(function*() {
      process.env.EFFECT_AGENT_TEST_SECRET = "hunter2"
      yield* Effect.addFinalizer(() => Effect.sync(() => delete process.env.EFFECT_AGENT_TEST_SECRET))
      const workspace = yield* makeWorkspace()
      const show = "echo secret=${EFFECT_AGENT_TEST_SECRET:-unset} extra=${EXTRA:-unset} call=${CALL:-unset}; " +
        "test -n \"$PATH\" && echo path=set"
      const defaults = yield* Effect.provide(Effect.service(Sandbox.Sandbox), localLayer(workspace.root))
      assert.strictEqual(
        (yield* defaults.exec({ command: show })).stdout,
        "secret=unset extra=unset call=unset\npath=set\n"
      )
      const custom = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        localLayer(workspace.root, {
          envAllowlist: ["PATH", "EFFECT_AGENT_TEST_SECRET"],
          env: { EXTRA: "x" }
        })
      )
      assert.strictEqual(
        (yield* custom.exec({ command: show, env: { CALL: "y" } })).stdout,
        "secret=hunter2 extra=x call=y\npath=set\n"
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("caps output, keeping its start and end around a marker", () =>
    withSandbox(localLayer, (sandbox) =>
      Effect.gen(function*() {
        const result = yield* sandbox.exec({
          command: "printf 'start'; head -c 100000 /dev/zero | tr '\\0' x; printf 'end'",
          maxOutputBytes: 1000
        })
        assert.strictEqual(
          result.stdout,
          `start${"x".repeat(495)}\n[... 99008 bytes truncated ...]\n${"x".repeat(497)}end`
        )
        assert.deepStrictEqual([result.truncated, result.exitCode, result.stderr], [true, 0, ""])
      })))

  it.live("does not split a UTF-8 character at the cut", () =>
    withSandbox(localLayer, (sandbox) =>
      Effect.gen(function*() {
        // 300 three-byte characters: the cuts at 5 and 895 fall inside characters; 6 bytes are shown.
        const result = yield* sandbox.exec({ command: `printf '${"€".repeat(300)}'`, maxOutputBytes: 10 })
        assert.strictEqual(result.stdout, "€\n[... 894 bytes truncated ...]\n€")
      })))

  it.live("fails with a typed error when the program does not exist or the cwd is not a directory", () =>
    withSandbox(localLayer, (sandbox) =>
      Effect.gen(function*() {
        const missing = yield* Effect.flip(sandbox.exec({ command: ["no-such-program-xyz"] }))
        assert.deepStrictEqual(
          [missing._tag, missing.message],
          ["CommandError", "cannot run no-such-program-xyz: program not found: no-such-program-xyz"]
        )
        const notDir = yield* Effect.flip(sandbox.exec({ command: "true", cwd: "inside.txt" }))
        assert.deepStrictEqual([notDir._tag, notDir.message], [
          "FileSystemError",
          "exec inside.txt: the working directory is not a directory"
        ])
        const gone = yield* Effect.flip(sandbox.exec({ command: "true", cwd: "nope" }))
        assert.deepStrictEqual([gone._tag, gone.message], ["FileNotFoundError", "no such file or directory: nope"])
      })))
})

describe("Sandbox.local kills the whole process tree", () => {
  it.live("on timeout: the command and its grandchild are gone", () =>
    withSandbox(localLayer, (sandbox, root) =>
      Effect.gen(function*() {
        const result = yield* sandbox.exec({
          command: "sleep 60 & echo $! > sleeper.pid; echo started; wait",
          timeout: "500 millis"
        })
        assert.deepStrictEqual([result.timedOut, result.exitCode, result.stdout], [true, null, "started\n"])
        const sleeper = yield* pidFrom(root, "sleeper.pid")
        assert.isFalse(isAlive(sleeper), `grandchild ${sleeper} survived the timeout`)
      })))

  it.live("on interruption of the fiber", () =>
    withSandbox(localLayer, (sandbox, root) =>
      Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(
          sandbox.exec({ command: "sh -c 'sleep 60 & echo $! > sleeper.pid; wait'" })
        )
        const sleeper = yield* pidFrom(root, "sleeper.pid")
        assert.isTrue(isAlive(sleeper))
        yield* Fiber.interrupt(fiber)
        assert.isFalse(isAlive(sleeper), `grandchild ${sleeper} survived the interruption`)
      })))

  it.live("escalates to SIGKILL when the tree ignores SIGTERM", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        localLayer(workspace.root, { killGracePeriod: "200 millis" })
      )
      const started = Date.now()
      const result = yield* sandbox.exec({
        command: "trap '' TERM; sleep 60 & echo $! > sleeper.pid; wait; wait",
        timeout: "300 millis"
      })
      assert.isTrue(result.timedOut)
      const sleeper = yield* pidFrom(workspace.root, "sleeper.pid")
      assert.isFalse(isAlive(sleeper), `grandchild ${sleeper} ignored SIGTERM and survived`)
      // not the sleep's 60 s: half a second, which a loaded machine stretches, never to 30
      assert.isBelow(Date.now() - started, 30_000)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("kills what a finished command left running in the background", () =>
    withSandbox(localLayer, (sandbox, root) =>
      Effect.gen(function*() {
        const result = yield* sandbox.exec({ command: "sleep 60 & echo $! > sleeper.pid; echo bye" })
        assert.deepStrictEqual([result.exitCode, result.timedOut, result.stdout], [0, false, "bye\n"])
        const sleeper = yield* pidFrom(root, "sleeper.pid")
        assert.isTrue(yield* eventually(() => !isAlive(sleeper)), `background ${sleeper} survived`)
      })))
})

describe("Sandbox.bubblewrap commands", () => {
  needsBubblewrap(it.live)("runs in the workspace, with the same results as local", () =>
    withSandbox(bubblewrapLayer, (sandbox, root) =>
      Effect.gen(function*() {
        const result = yield* sandbox.exec({ command: "pwd; echo err >&2; exit 4", cwd: "sub" })
        assert.deepStrictEqual([result.exitCode, result.stdout, result.stderr], [4, `${root}/sub\n`, "err\n"])
        const fed = yield* sandbox.exec({ command: ["cat"], stdin: "piped" })
        assert.strictEqual(fed.stdout, "piped")
      })))

  needsBubblewrap(it.live)("on timeout and on interruption, no process of the sandbox survives", () =>
    withSandbox(bubblewrapLayer, (sandbox) =>
      Effect.gen(function*() {
        // A marker in the command line finds the sandbox's processes from the host, whatever their PID namespace.
        const marker = `${(process.pid % 1000) + 1}.${Date.now() % 100000}`
        // (the timeout leaves the sleepers time to start on a loaded machine: bubblewrap takes a while to set up)
        const fiber1 = yield* Effect.forkChild(
          sandbox.exec({ command: `sleep ${marker} & sleep ${marker}; wait`, timeout: "5 seconds" })
        )
        const running = (seconds: string) => processesRunning(["sleep", seconds]).length
        assert.isTrue(yield* eventually(() => running(marker) === 2), "the sleepers did not start")
        assert.isTrue((yield* Fiber.join(fiber1)).timedOut)
        assert.isTrue(yield* eventually(() => running(marker) === 0), "a sleeper survived the timeout")

        const marker2 = `${marker}1`
        const fiber = yield* Effect.forkChild(sandbox.exec({ command: `sleep ${marker2} & sleep ${marker2}; wait` }))
        assert.isTrue(yield* eventually(() => running(marker2) === 2), "the sleepers did not start")
        yield* Fiber.interrupt(fiber)
        assert.isTrue(
          yield* eventually(() => running(marker2) === 0),
          "a sleeper survived the interruption"
        )
      })))
})

/**
 * Issue 29, attack 13: 126 of 127 processes that called `setsid` survived a timeout of `Sandbox.local` (a process
 * group kill misses a process that started a session of its own). Each command below starts `children` sleepers,
 * each in a session of its own; the sleepers are found on the host by their command line (a duration no other
 * process has), whatever their PID namespace, and once `exec` has returned none of them may be alive.
 */
const setsidSurvivors = (layer: (root: string) => Layer.Layer<Sandbox.Sandbox, Sandbox.SandboxError>) => {
  const children = 20
  let serial = 0
  /** A fresh sleep duration, unique to this process and call, that finds the sleepers on the host. */
  const duration = () => `${(process.pid % 1000) + 100}.${Date.now() % 100000}${serial++}`
  /** Starts the sleepers, each under `setsid`, and waits until all have said they started (then `after`). */
  const command = (seconds: string, after: string) =>
    `for i in $(seq ${children}); do setsid sh -c 'echo up >> started; exec sleep ${seconds}' & done; ` +
    `while [ "$(wc -l < started 2>/dev/null || echo 0)" -lt ${children} ]; do :; done; ${after}`
  const running = (seconds: string) => processesRunning(["sleep", seconds])
  /** Waits until every sleeper runs, and returns their (host) pids. */
  const sleepers = (seconds: string) =>
    Effect.gen(function*() {
      assert.isTrue(yield* eventually(() => running(seconds).length === children, 10_000), "the sleepers did not start")
      return running(seconds)
    })
  const alive = (pids: ReadonlyArray<number>) => pids.filter(isAlive)

  return {
    timeout: () =>
      withSandbox(layer, (sandbox) =>
        Effect.gen(function*() {
          const seconds = duration()
          const fiber = yield* Effect.forkChild(sandbox.exec({ command: command(seconds, "wait"), timeout: "3 seconds" }))
          const pids = yield* sleepers(seconds)
          const result = yield* Fiber.join(fiber)
          assert.isTrue(result.timedOut)
          assert.deepStrictEqual(alive(pids), [], "setsid children survived the timeout")
          assert.deepStrictEqual(running(seconds), [])
        })),
    interruption: () =>
      withSandbox(layer, (sandbox) =>
        Effect.gen(function*() {
          const seconds = duration()
          const fiber = yield* Effect.forkChild(sandbox.exec({ command: command(seconds, "wait") }))
          const pids = yield* sleepers(seconds)
          yield* Fiber.interrupt(fiber)
          assert.deepStrictEqual(alive(pids), [], "setsid children survived the interruption")
          assert.deepStrictEqual(running(seconds), [])
        })),
    exit: () =>
      withSandbox(layer, (sandbox) =>
        Effect.gen(function*() {
          const seconds = duration()
          // The command ends by itself, its sleepers running: exec returns once they are gone.
          const result = yield* sandbox.exec({ command: command(seconds, "echo done"), timeout: "30 seconds" })
          assert.deepStrictEqual([result.exitCode, result.stdout], [0, "done\n"])
          assert.deepStrictEqual(running(seconds), [], "setsid children outlived the command")
        }))
  }
}

describe("issue 29, attack 13: no process of a command outlives it, setsid children included", () => {
  const local = setsidSurvivors(localLayer)
  it.live("Sandbox.local: a timeout kills 20 setsid children", local.timeout)
  it.live("Sandbox.local: an interruption kills 20 setsid children", local.interruption)
  it.live("Sandbox.local: the end of the command kills 20 setsid children it left", local.exit)
  it.live("Sandbox.local: a setsid child that clears its environment and ignores SIGTERM is found by its parent", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        localLayer(workspace.root, { killGracePeriod: "300 millis" })
      )
      const seconds = `${(process.pid % 1000) + 100}.${Date.now() % 100000}9`
      const fiber = yield* Effect.forkChild(sandbox.exec({
        // No marker in its environment: only its parent, the shell, ties it to the command.
        command: `env -i setsid sh -c 'trap "" TERM; sleep ${seconds}; :' & wait`,
        timeout: "2 seconds"
      }))
      assert.isTrue(yield* eventually(() => processesRunning(["sleep", seconds]).length === 1, 10_000))
      const [sleeper] = processesRunning(["sleep", seconds])
      const environ = readFileSync(`/proc/${sleeper}/environ`, "latin1")
      assert.notInclude(environ, "EFFECT_AGENT_COMMAND")
      assert.isTrue((yield* Fiber.join(fiber)).timedOut)
      assert.isFalse(isAlive(sleeper!), `the sleeper ${sleeper} survived`)
      assert.deepStrictEqual(processesRunning(["sleep", seconds]), [])
    }).pipe(Effect.provide(NodeServices.layer)))
  const isolated = setsidSurvivors(bubblewrapLayer)
  needsBubblewrap(it.live)("Sandbox.bubblewrap: a timeout kills 20 setsid children", isolated.timeout)
  needsBubblewrap(it.live)("Sandbox.bubblewrap: an interruption kills 20 setsid children", isolated.interruption)
  needsBubblewrap(it.live)("Sandbox.bubblewrap: the end of the command kills 20 setsid children it left", isolated.exit)
})

describe("Sandbox.auto", () => {
  it.live("uses bubblewrap where it works, else local, and says which", () => {
    const logs = captureLogs()
    return Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      const auto = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        Sandbox.auto(workspace.root).pipe(Layer.provide(NodeServices.layer))
      )
      assert.strictEqual(auto.kind, bubblewrap.works ? "bubblewrap" : "local")
      const fallback = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        Sandbox.auto(workspace.root, { bwrap: "/nonexistent/bwrap" }).pipe(Layer.provide(NodeServices.layer))
      )
      assert.strictEqual(fallback.kind, "local")
      const refused = yield* Effect.flip(Effect.provide(
        Effect.service(Sandbox.Sandbox),
        Sandbox.bubblewrap(workspace.root, { bwrap: "/nonexistent/bwrap" }).pipe(Layer.provide(NodeServices.layer))
      ))
      assert.deepStrictEqual(
        [refused._tag, refused.message],
        [
          "NotSupportedError",
          "bubblewrap is not supported: cannot run true: program not found: /nonexistent/bwrap"
        ]
      )
      const root = auto.root
      assert.deepStrictEqual(logs.lines, [
        bubblewrap.works
          ? `Info: Sandbox.auto: using bubblewrap for ${root}`
          : `Warn: Sandbox.auto: using local (no isolation) for ${root}: ${bubblewrap.reason}`,
        `Warn: Sandbox.auto: using local (no isolation) for ${root}: ` +
        "cannot run true: program not found: /nonexistent/bwrap"
      ])
    }).pipe(Effect.provide([NodeServices.layer, logs.layer]))
  })

  it.live("does not fall back to local while a secret variable is set: commands could read it through /proc", () => {
    const logs = captureLogs()
    return Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      const name = "EFFECT_AGENT_TEST_SECRET"
      yield* Effect.acquireRelease(
        Effect.sync(() => void (process.env[name] = "s-1")),
        () => Effect.sync(() => void delete process.env[name])
      )
      const auto = (secretVariables: ReadonlyArray<string>) =>
        Effect.provide(
          Effect.service(Sandbox.Sandbox),
          Sandbox.auto(workspace.root, { bwrap: "/nonexistent/bwrap", secretVariables }).pipe(
            Layer.provide(NodeServices.layer)
          )
        )
      const refused = yield* Effect.flip(auto([name, "EFFECT_AGENT_TEST_UNSET", name]))
      assert.deepStrictEqual(
        [refused._tag, refused._tag === "IsolationUnavailableError" && refused.variables, refused.message],
        [
          "IsolationUnavailableError",
          [name],
          "bubblewrap is not usable here (cannot run true: program not found: /nonexistent/bwrap) and " +
          `${name} is in the environment, which commands without isolation could read`
        ]
      )
      // Set but empty, or not named: it falls back.
      process.env[name] = ""
      assert.strictEqual((yield* auto([name])).kind, "local")
      process.env[name] = "s-1"
      assert.strictEqual((yield* auto(["EFFECT_AGENT_TEST_UNSET"])).kind, "local")
      // Where bubblewrap works, the secrets do not matter.
      if (bubblewrap.works) {
        const isolated = yield* Effect.provide(
          Effect.service(Sandbox.Sandbox),
          Sandbox.auto(workspace.root, { secretVariables: [name] }).pipe(Layer.provide(NodeServices.layer))
        )
        assert.strictEqual(isolated.kind, "bubblewrap")
      }
      // the two fallbacks say so; the refusal is the error, not a log line
      const local = `Warn: Sandbox.auto: using local (no isolation) for ${workspace.root}: ` +
        "cannot run true: program not found: /nonexistent/bwrap"
      assert.deepStrictEqual(logs.lines.filter((line) => line.startsWith("Warn")), [local, local])
    }).pipe(Effect.scoped, Effect.provide([NodeServices.layer, logs.layer]))
  })

  it("names that hold secrets, as Sandbox.isSecretName sees them", () => {
    const secret = [
      "OPENAI_API_KEY",
      "ANTHROPIC_API_KEY",
      "MY_APIKEY",
      "GITHUB_TOKEN",
      "NPM_TOKEN",
      "token",
      "AWS_SECRET_ACCESS_KEY",
      "AWS_ACCESS_KEY_ID",
      "AWS_SESSION_TOKEN",
      "CLIENT_SECRET",
      "PGPASSWORD",
      "DB_PASSWD",
      "SSH_PRIVATE_KEY",
      "GOOGLE_APPLICATION_CREDENTIALS"
    ]
    const plain = ["PATH", "HOME", "TOKENIZERS_PARALLELISM", "KEYBOARD", "SSH_AUTH_SOCK", "OPENAI_BASE_URL", "LANG"]
    assert.deepStrictEqual(secret.filter((name) => !Sandbox.isSecretName(name)), [])
    assert.deepStrictEqual(plain.filter(Sandbox.isSecretName), [])
  })
})
