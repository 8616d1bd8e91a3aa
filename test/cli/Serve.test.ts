/**
 * `effect-agent serve` as a real process: sessions on the scripted model and
 * the built-in tools over HTTP, the inspector page, the token it makes and
 * prints with the inspector's URL (or one from the environment, or none when
 * asked by name), a clean stop on SIGTERM; and what it refuses.
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import * as Fs from "node:fs"
import { receiver, spansOf } from "../otlpReceiver.ts"
import { readSse, tagOf } from "../server/support.ts"
import { builtCommand } from "./build.ts"
import { runCommand } from "./inProcess.ts"
import { live, scripted, spawnProgram, tempDir } from "./support.ts"

/** The built command (the bundle the package installs): a process each, started in a fraction of the sources' time. */
let main = ""
beforeAll(async () => {
  main = await builtCommand()
})

const serve = (dir: string, args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  spawnProgram(process.execPath, [main, "serve", ...args], { cwd: dir, env })

const turns = [
  { toolCalls: [{ name: "read_file", params: { path: "a.txt" } }] },
  { text: "a.txt says hello world." }
]

const started = (line: string) => line.startsWith("{\"url\"")

describe("effect-agent serve", () => {
  live("its stdout is its JSON line alone: what it logs (the sandbox it chose, a warning) goes to stderr", () =>
    Effect.gen(function*() {
      const dir = yield* scripted(turns)
      // the sandbox left to `auto`, which logs the one it chose
      const proc = yield* serve(dir, [
        "--provider",
        "scripted",
        "--script",
        `${dir}/script.json`,
        "--tools",
        "read_file",
        "--port",
        "0",
        "--without-token",
        "--store",
        `${dir}/../${dir.split("/").at(-1)}-store`
      ])
      const first = yield* proc.waitFor(() => true)
      assert.isTrue(started(first), `stdout's first line: ${first}`)
      yield* proc.signal("SIGTERM")
      const exited = yield* proc.exit
      assert.strictEqual(exited.stdout, `${first}\n`)
      assert.include(exited.stderr, "Sandbox.auto")
    }))

  live("serves sessions on the flags' model and tools, the inspector at /, and stops cleanly on SIGTERM", () =>
    Effect.gen(function*() {
      const dir = yield* scripted(turns)
      const proc = yield* serve(dir, [
        "--provider",
        "scripted",
        "--script",
        `${dir}/script.json`,
        "--sandbox",
        "local",
        "--tools",
        "read_file",
        "--port",
        "0",
        "--store",
        `${dir}/../${dir.split("/").at(-1)}-store`,
        "--max-turns",
        "5"
      ])
      const { url, store, inspector, token } = JSON.parse(yield* proc.waitFor(started))
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/)
      // no token given: it made one, and gave it once, in the inspector's URL (a fragment, never sent)
      assert.match(token, /^[A-Za-z0-9_-]{43}$/)
      assert.strictEqual(inspector, `${url}/#token=${token}`)
      const authorization = `Bearer ${token}`
      assert.strictEqual(yield* Effect.promise(() => fetch(`${url}/sessions`).then((r) => r.status)), 401)
      const created: any = yield* Effect.promise(() =>
        fetch(`${url}/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization },
          body: JSON.stringify({ task: "What is in a.txt?" })
        }).then((response) => response.json())
      )
      const read = yield* Effect.promise(async () =>
        readSse(await fetch(`${url}/sessions/${created.id}/events`, { headers: { authorization } }))
      )
      const events = read.messages.map((message) => JSON.parse(message.data))
      const tool = events.find((event) => event._tag === "ToolExecutionEnd")
      assert.strictEqual(tool.result.content[0].text, "1\thello world")
      assert.strictEqual(tagOf(read.messages.at(-1)!), "AgentEnd")
      assert.strictEqual(events.at(-1).outcome._tag, "Completed")
      const page = yield* Effect.promise(() => fetch(`${url}/`).then(async (r) => [r.status, await r.text()] as const))
      assert.strictEqual(page[0], 200)
      assert.include(page[1], "<title>effect-agent inspector</title>")
      const fs = yield* FileSystem.FileSystem
      assert.isTrue(yield* fs.exists(`${store}/sessions/${created.id}/trajectory.ndjson`))
      yield* proc.signal("SIGTERM")
      const exited = yield* proc.exit
      assert.strictEqual(exited.code, 0, exited.stderr)
      assert.include(exited.stderr, `effect-agent serve: listening on ${url} (a token is required); sessions in ${store}`)
      assert.include(exited.stderr, `open the inspector with it: ${url}/#token=${token}\n`)
      assert.strictEqual(exited.stderr.split(token).length - 1, 1, "the token is printed once on stderr")
    }))

  live("with --otlp, exports its sessions' spans as run --otlp does: invoke_agent effect-agent, chat, tools", () =>
    Effect.gen(function*() {
      const otlp = yield* receiver
      const dir = yield* scripted(turns)
      const proc = yield* serve(dir, [
        "--provider",
        "scripted",
        "--script",
        `${dir}/script.json`,
        "--sandbox",
        "local",
        "--tools",
        "read_file",
        "--port",
        "0",
        "--store",
        `${dir}-store`,
        "--otlp",
        otlp.url
      ])
      const { url, token } = JSON.parse(yield* proc.waitFor(started))
      const authorization = `Bearer ${token}`
      const created: any = yield* Effect.promise(() =>
        fetch(`${url}/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization },
          body: JSON.stringify({ task: "What is in a.txt?" })
        }).then((response) => response.json())
      )
      assert.strictEqual(created.agent, "effect-agent")
      const read = yield* Effect.promise(async () =>
        readSse(await fetch(`${url}/sessions/${created.id}/events`, { headers: { authorization } }))
      )
      assert.strictEqual(JSON.parse(read.messages.at(-1)!.data).outcome._tag, "Completed")
      // the spans left are sent when the server stops
      yield* proc.signal("SIGTERM")
      const exited = yield* proc.exit
      assert.strictEqual(exited.code, 0, exited.stderr)
      assert.isTrue(otlp.bodies.every((body) => body.path === "/v1/traces"))
      const spans = spansOf(otlp.bodies)
      const root = spans.filter((span) => span.name === "invoke_agent effect-agent")
      assert.strictEqual(root.length, 1, spans.map((span) => span.name).join(", "))
      assert.strictEqual(root[0]!.attributes["gen_ai.agent.name"], "effect-agent")
      const inRun = spans.filter((span) => span.traceId === root[0]!.traceId && span.parentSpanId === root[0]!.spanId)
      const names = inRun.map((span) => span.name).filter((name) => !name.startsWith("LanguageModel")).sort()
      assert.deepStrictEqual(names, ["chat", "chat", "execute_tool read_file"])
      assert.strictEqual(inRun.find((span) => span.name === "execute_tool read_file")!.status.code, 1)
    }))

  live("with --token-env, every request needs the token", () =>
    Effect.gen(function*() {
      const dir = yield* scripted(turns)
      const store = `${dir}-store`
      const proc = yield* serve(dir, [
        "--provider",
        "scripted",
        "--script",
        `${dir}/script.json`,
        "--sandbox",
        "none",
        "--tools",
        "none",
        "--port",
        "0",
        "--store",
        store,
        "--token-env",
        "AGENT_TOKEN"
      ], { AGENT_TOKEN: "s3cret-token" })
      const ready = JSON.parse(yield* proc.waitFor(started))
      const url = ready.url
      // the token given is not printed: the inspector's URL asks for it
      assert.strictEqual(ready.inspector, `${url}/`)
      assert.isUndefined(ready.token)
      const status = (headers: Record<string, string>) =>
        Effect.promise(() => fetch(`${url}/sessions`, { headers }).then((response) => response.status))
      assert.strictEqual(yield* status({}), 401)
      assert.strictEqual(yield* status({ authorization: "Bearer s3cret-token" }), 200)
      yield* proc.signal("SIGTERM")
      const exited = yield* proc.exit
      assert.strictEqual(exited.code, 0)
      assert.notInclude(exited.stderr + exited.stdout, "s3cret-token")
      assert.include(exited.stderr, `the inspector: ${url}/ (give it the token in AGENT_TOKEN)`)
    }))

  live("with --without-token, only when asked by name: no token, a loud warning, a web page of another origin refused", () =>
    Effect.gen(function*() {
      const dir = yield* scripted(turns)
      const proc = yield* serve(dir, [
        "--provider",
        "scripted",
        "--script",
        `${dir}/script.json`,
        "--sandbox",
        "none",
        "--tools",
        "none",
        "--port",
        "0",
        "--store",
        `${dir}-store`,
        "--without-token",
        "--allow-origin",
        "http://localhost:3000"
      ])
      const ready = JSON.parse(yield* proc.waitFor(started))
      const url = ready.url
      assert.strictEqual(ready.inspector, `${url}/`)
      assert.isUndefined(ready.token)
      const create = (headers: Record<string, string>) =>
        Effect.promise(() =>
          fetch(`${url}/sessions`, {
            method: "POST",
            headers: { "content-type": "application/json", ...headers },
            body: JSON.stringify({ task: "What is in a.txt?" })
          }).then((response) => response.status)
        )
      assert.strictEqual(yield* create({}), 201)
      assert.strictEqual(yield* create({ origin: "http://evil.example" }), 403)
      assert.strictEqual(yield* create({ origin: "http://localhost:3000" }), 201)
      assert.strictEqual(yield* create({ "content-type": "text/plain" }), 415)
      yield* proc.signal("SIGTERM")
      const exited = yield* proc.exit
      assert.strictEqual(exited.code, 0)
      assert.include(exited.stderr, "WARNING: serving WITHOUT A TOKEN (--without-token)")
    }))

  live("refuses: --without-token off the loopback or with --token-env, a bad origin, an unset token variable, a store in the workspace, bad --otlp", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      // off the loopback only with a token (one is made when none is given); without one, it refuses
      const open = yield* runCommand(
        ["serve", "--host", "0.0.0.0", "--without-token", "--tools", "none", "--sandbox", "none"],
        { cwd: dir }
      )
      assert.strictEqual(open.code, 22)
      assert.include(open.stderr, "--host 0.0.0.0 is not a loopback address")
      assert.include(open.stderr, "--without-token is for the loopback only")
      const both = yield* runCommand(
        ["serve", "--without-token", "--token-env", "AGENT_TOKEN", "--tools", "none", "--sandbox", "none"],
        { cwd: dir, env: { AGENT_TOKEN: "x" } }
      )
      assert.strictEqual(both.code, 22)
      assert.include(both.stderr, "--without-token and --token-env: give one of them")
      for (const origin of ["localhost:3000", "ftp://example.com", "http://example.com/app", "*"]) {
        const bad = yield* runCommand(
          ["serve", "--allow-origin", origin, "--tools", "none", "--sandbox", "none"],
          { cwd: dir }
        )
        assert.strictEqual(bad.code, 22, origin)
        assert.include(bad.stderr, `--allow-origin: ${JSON.stringify(origin)} is not an origin`)
      }
      const unset = yield* runCommand(["serve", "--token-env", "NOPE_TOKEN", "--tools", "none", "--sandbox", "none"], {
        cwd: dir
      })
      assert.strictEqual(unset.code, 22)
      assert.include(unset.stderr, "--token-env: NOPE_TOKEN is not set")
      const inside = yield* runCommand(
        ["serve", "--provider", "scripted", "--script", `${dir}/s.json`, "--store", `${dir}/store`, "--port", "0"],
        { cwd: dir }
      )
      assert.strictEqual(inside.code, 22)
      assert.include(inside.stderr, `--store: ${dir}/store is inside the workspace ${dir}`)
      const collector = yield* runCommand(
        ["serve", "--otlp", "http://user:secret@127.0.0.1:4318", "--tools", "none", "--sandbox", "none"],
        { cwd: dir }
      )
      assert.strictEqual(collector.code, 22)
      assert.include(collector.stderr, "--otlp: the URL may not hold credentials")
    }))
})

/** A shell word. */
const quote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`

describe("the token serve prints", () => {
  live(
    "token-in-the-log attack: serve's stdout or stderr in a file in the workspace (> serve.log 2>&1) is refused " +
      "(exit 22) before a token is printed there: the agent's read_file would have read it",
    () =>
      Effect.gen(function*() {
        if (!Fs.existsSync("/proc/self/fd")) return console.log("skipped: no /proc here to name stdout's file")
        const fs = yield* FileSystem.FileSystem
        const dir = yield* scripted([{ toolCalls: [{ name: "read_file", params: { path: "serve.log" } }] }])
        const store = `${dir}-store`
        const command = [process.execPath, main, "serve", "--provider", "scripted",
          "--script", `${dir}/script.json`, "--sandbox", "local", "--tools", "read_file", "--port", "0", "--store", store]
          .map(quote).join(" ")
        // The workspace is the current directory: the logs land in it.
        const started = (redirect: string) =>
          Effect.gen(function*() {
            const proc = yield* spawnProgram("bash", ["-c", `exec ${command} ${redirect}`], { cwd: dir })
            const exited = yield* proc.exit.pipe(Effect.timeoutOption("30 seconds"))
            if (exited._tag === "None") yield* proc.signal("SIGTERM")
            return { exited: exited._tag === "Some" ? exited.value.code : "still serving" }
          })
        const cases = [
          ["> serve.log 2>&1", "stdout", "serve.log"],
          ["2> serve.log", "stderr", "serve.log"],
          ["> out.json", "stdout", "out.json"]
        ] as const
        for (const [redirect, stream, file] of cases) {
          const { exited } = yield* started(redirect)
          const log = yield* fs.readFileString(`${dir}/${file}`)
          assert.deepStrictEqual(
            { exited, token: /#token=|"token"/.test(log) },
            { exited: 22, token: false },
            `${redirect}: ${log}`
          )
          if (redirect !== "> out.json") {
            assert.include(
              log,
              `effect-agent: ${stream} (${dir}/${file}) is inside the workspace ${dir}, where the agent can read the ` +
                "token printed there: write it outside, or give the token in a variable with --token-env NAME"
            )
          }
          yield* fs.remove(`${dir}/${file}`)
        }
      })
  )
})

describe("the flags serve and runner do not honour", () => {
  // A session finished despite `serve --check "exit 1"`: the flags of a supervised run were taken and ignored.
  const refused: ReadonlyArray<readonly [command: "serve" | "runner", args: ReadonlyArray<string>, flag: string]> = [
    ["serve", ["--check", "exit 1"], "--check"],
    ["serve", ["--verifier", "npm test"], "--verifier"],
    ["serve", ["--plan"], "--plan"],
    ["serve", ["--max-plan-iterations", "3"], "--max-plan-iterations"],
    ["serve", ["--approve-turns"], "--approve-turns"],
    ["serve", ["--tolerate-known-failures"], "--tolerate-known-failures"],
    ["serve", ["--worker-command", "agent --acp"], "--worker-command"],
    ["serve", ["--worker", "claude"], "--worker"],
    ["serve", ["--quiet"], "--quiet"],
    ["runner", ["--check", "exit 1"], "--check"],
    ["runner", ["--verifier", "npm test"], "--verifier"],
    ["runner", ["--plan"], "--plan"],
    ["runner", ["--max-plan-iterations", "3"], "--max-plan-iterations"],
    ["runner", ["--approve-turns"], "--approve-turns"],
    ["runner", ["--tolerate-known-failures"], "--tolerate-known-failures"],
    ["runner", ["--worker-command", "agent --acp"], "--worker-command"],
    ["runner", ["--worker", "codex"], "--worker"],
    ["runner", ["--quiet"], "--quiet"],
    ["runner", ["--otlp", "http://127.0.0.1:4318"], "--otlp"],
    ["runner", ["--max-turns", "3"], "--max-turns"]
  ]
  live("are refused before anything starts (exit 22), naming the flag and why, not ignored", () =>
    Effect.gen(function*() {
      const dir = yield* scripted(turns)
      const model = ["--provider", "scripted", "--script", `${dir}/script.json`, "--tools", "none", "--sandbox", "none"]
      for (const [command, args, flag] of refused) {
        const where = command === "runner"
          ? ["--pg", "postgres://127.0.0.1:1/none"]
          : ["--port", "0", "--store", `${dir}-store`]
        const ran = yield* runCommand([command, ...where, ...model, ...args], { cwd: dir }).pipe(
          // a command that took the flag would start serving instead of exiting
          Effect.timeoutOrElse({
            duration: "20 seconds",
            orElse: () => Effect.succeed({ code: -1, stdout: "", stderr: `${command} started with ${flag}` })
          })
        )
        assert.strictEqual(ran.code, 22, `${command} ${args.join(" ")}: ${ran.stderr}`)
        assert.include(ran.stderr, `Unrecognized flag: ${flag} in command effect-agent ${command}`)
        assert.include(ran.stderr, `${flag} is not taken by effect-agent ${command}: `)
        assert.strictEqual(ran.stdout, "")
      }
    }))
})
