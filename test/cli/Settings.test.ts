import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Option, Redacted, Result } from "effect"
import { AgentConfig } from "effect-agent"
import * as Flags from "../../src/cli/internal/Flags.ts"
import * as SessionFiles from "../../src/cli/internal/SessionFiles.ts"
import * as Settings from "../../src/cli/internal/Settings.ts"
import { stateHome } from "./support.ts"

const none = Option.none()

const flags = (given: Partial<Flags.Flags> = {}): Flags.Flags => ({
  task: Option.some("do it"),
  pg: none,
  sessionId: none,
  system: none,
  provider: none,
  model: none,
  baseUrl: none,
  apiKeyEnv: none,
  script: none,
  workspace: none,
  sandbox: none,
  allowRead: [],
  allowWrite: [],
  tools: none,
  mcp: [],
  maxTurns: none,
  maxTokens: none,
  maxCost: none,
  maxWall: none,
  approve: none,
  sessionDir: none,
  resume: none,
  emitJsonl: none,
  jsonlFormat: "events",
  otlp: none,
  quiet: false,
  json: false,
  check: [],
  verifier: none,
  plan: false,
  maxPlanIterations: none,
  approveTurns: false,
  tolerateKnownFailures: false,
  worker: none,
  workerCommand: none,
  stdinEof: "ignore",
  ...given
})

const keys = { OPENAI_API_KEY: "sk-openai", ANTHROPIC_API_KEY: "sk-ant", WORK_KEY: "sk-work", XDG_STATE_HOME: stateHome }

const resolve = (given: Partial<Flags.Flags>, stdinIsTerminal = false, env: Record<string, string> = keys) =>
  Settings.resolve(flags(given), { cwd: "/work/here", env, stdinIsTerminal }).pipe(Effect.provide(NodeServices.layer))

const problem = (given: Partial<Flags.Flags>, stdinIsTerminal = false, env: Record<string, string> = keys) =>
  Effect.map(Effect.flip(resolve(given, stdinIsTerminal, env)), (failure) => [failure.code, failure.message] as const)

const some = Option.some

describe("Settings.resolve", () => {
  it.effect("defaults: OpenAI's gpt-4o, the built-in tools on the auto sandbox here, approvals denied, the default config", () =>
    Effect.gen(function*() {
      const settings = yield* resolve({})
      assert.deepStrictEqual(settings.target, {
        provider: "openai",
        model: "gpt-4o",
        workspace: "/work/here",
        sandbox: "auto",
        tools: ["bash", "read_file", "write_file", "edit_file", "list_files", "grep"],
        mcp: [],
        approve: "none"
      })
      assert.deepStrictEqual(settings.config, AgentConfig.defaults)
      assert.strictEqual(settings.session, undefined)
      assert.deepStrictEqual(settings.warnings, [])
    }))

  it.effect("the limits go through UntrustedConfig.decode: extreme ones clamped into range, with a warning each", () =>
    Effect.gen(function*() {
      const settings = yield* resolve({
        maxTurns: some(1000),
        maxTokens: some(5000),
        maxCost: some(0.00001),
        maxWall: some("90s")
      })
      assert.deepStrictEqual(settings.config, {
        ...AgentConfig.defaults,
        maxTurns: 200,
        budgets: { ...AgentConfig.defaults.budgets, tokens: 5000, costUsd: 0.0001, wallClock: 90_000 }
      })
      assert.deepStrictEqual(settings.warnings, [
        "--max-turns 1000 is outside its safe range; using 200",
        "--max-cost 0.00001 is outside its safe range; using 0.0001"
      ])
      assert.deepStrictEqual((yield* resolve({ maxWall: some("200ms") })).warnings, [
        "--max-wall 0.2s is outside its safe range; using 1s"
      ])
      assert.deepStrictEqual(
        yield* problem({ maxTurns: some(2.5) }),
        [22, "--max-turns: must be an integer from 1 to 200; got 2.5"]
      )
      // impossible limits are refused, naming the flag and the range
      const impossible: ReadonlyArray<readonly [Partial<Flags.Flags>, string]> = [
        [{ maxTurns: some(-1) }, "--max-turns: -1 is not a limit a run can have; give 1 to 200"],
        [{ maxTurns: some(0) }, "--max-turns: 0 is not a limit a run can have; give 1 to 200"],
        [{ maxCost: some(-3) }, "--max-cost: -3 is not a limit a run can have; give 0.0001 to 1,000 (US dollars)"],
        [{ maxTokens: some(0) }, "--max-tokens: 0 is not a limit a run can have; give 1 to 100,000,000"],
        [{ maxWall: some("0s") }, "--max-wall: 0s is not a limit a run can have; give 1s to 24h"]
      ]
      for (const [given, message] of impossible) assert.deepStrictEqual(yield* problem(given), [22, message])
      assert.deepStrictEqual(
        yield* problem({ maxWall: some("soon") }),
        [22, "--max-wall: \"soon\" is not a duration (e.g. 90, 90s, 5m, 2h)"]
      )
    }))

  it.effect("the API root: --base-url, else the provider's variable (OPENAI_BASE_URL, ANTHROPIC_BASE_URL)", () =>
    Effect.gen(function*() {
      const env = { ...keys, OPENAI_BASE_URL: "http://proxy:8080/v1", ANTHROPIC_BASE_URL: "http://claude-proxy" }
      assert.strictEqual((yield* resolve({}, false, env)).target.baseUrl, "http://proxy:8080/v1")
      assert.strictEqual((yield* resolve({ provider: some("anthropic") }, false, env)).target.baseUrl, "http://claude-proxy")
      assert.strictEqual((yield* resolve({ baseUrl: some("http://localhost:11434/v1") }, false, env)).target.baseUrl, "http://localhost:11434/v1")
      assert.strictEqual((yield* resolve({})).target.baseUrl, undefined)
    }))

  it.effect("a missing key is a config error that says what to do, before any request; a server behind --base-url may need none", () =>
    Effect.gen(function*() {
      const openAi = "OPENAI_API_KEY is not set; pass --api-key-env NAME, or --base-url for a server that needs no key"
      assert.deepStrictEqual(yield* problem({}, false, {}), [22, openAi])
      assert.deepStrictEqual(yield* problem({ provider: some("openai-responses") }, false, {}), [22, openAi])
      // an empty variable is not set; OpenAI's own host needs the key whoever names it
      assert.deepStrictEqual(yield* problem({}, false, { OPENAI_API_KEY: "" }), [22, openAi])
      assert.deepStrictEqual(yield* problem({ baseUrl: some("https://api.openai.com/v1") }, false, {}), [22, openAi])
      assert.deepStrictEqual(
        yield* problem({ provider: some("anthropic") }, false, { OPENAI_API_KEY: "sk-openai" }),
        [22, "ANTHROPIC_API_KEY is not set; pass --api-key-env NAME to read the key from another variable"]
      )
      assert.deepStrictEqual(
        yield* problem({ provider: some("anthropic"), baseUrl: some("http://claude-proxy") }, false, {}),
        [22, "ANTHROPIC_API_KEY is not set; pass --api-key-env NAME to read the key from another variable"]
      )
      assert.deepStrictEqual(
        yield* problem({ apiKeyEnv: some("MY_KEY"), baseUrl: some("http://localhost:11434/v1") }, false, {}),
        [22, "MY_KEY is not set; set it, or pass --api-key-env NAME to read the key from another variable"]
      )
      // a local server: no key needed, none sent
      const local = yield* resolve({ baseUrl: some("http://localhost:11434/v1") }, false, {})
      assert.strictEqual(local.apiKey, undefined)
      const viaEnv = yield* resolve({}, false, { OPENAI_BASE_URL: "http://localhost:8000/v1" })
      assert.strictEqual(viaEnv.apiKey, undefined)
      // the key read from the variable named, as a Redacted
      const named = yield* resolve({ provider: some("anthropic"), apiKeyEnv: some("MY_KEY") }, false, { MY_KEY: "sk-mine" })
      assert.strictEqual(named.apiKey === undefined ? undefined : Redacted.value(named.apiKey), "sk-mine")
      assert.notInclude(JSON.stringify(named), "sk-mine")
      // the scripted model needs none
      assert.strictEqual((yield* resolve({ provider: some("scripted"), script: some("s.json") }, false, {})).apiKey, undefined)
      // nor an external worker: it runs its own model, so our provider's key is neither required nor read
      const external = yield* resolve({ worker: some("claude"), check: ["true"] }, false, {})
      assert.strictEqual(external.apiKey, undefined)
      assert.strictEqual(external.supervision?.worker, "claude")
    }))

  it("durations: seconds by default, or ms, s, m, h", () => {
    assert.deepStrictEqual(
      ["90", "1500ms", "90s", "2.5m", "2h", "5 m", "-1", "1d", ""].map(Flags.parseDuration),
      [90_000, 1500, 90_000, 150_000, 7_200_000, 300_000, undefined, undefined, undefined]
    )
  })

  it("--mcp command lines are split into words as a shell would", () => {
    assert.deepStrictEqual(
      Flags.mcpArgv(`npx -y "@scope/server x" 'a b' c\\ d`),
      Result.succeed(["npx", "-y", "@scope/server x", "a b", "c d"] as const)
    )
    assert.deepStrictEqual(Flags.mcpArgv("  "), Result.fail("the command is empty"))
  })

  it.effect("--tools: builtin, none, or names", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual((yield* resolve({ tools: some("read_file, grep") })).target.tools, ["read_file", "grep"])
      assert.deepStrictEqual((yield* resolve({ tools: some("none") })).target.tools, [])
      assert.deepStrictEqual((yield* resolve({ sandbox: some("none") })).target.tools, [])
      assert.deepStrictEqual(
        yield* problem({ tools: some("read_file,rm") }),
        [22, "--tools: unknown tool \"rm\" (expected builtin, none, or some of bash, read_file, write_file, edit_file, list_files, grep)"]
      )
    }))

  it.effect("--otlp: a collector's base gets /v1/traces, a traces URL is kept", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* resolve({})).otlp, undefined)
      assert.strictEqual((yield* resolve({ otlp: some("http://127.0.0.1:4318") })).otlp, "http://127.0.0.1:4318/v1/traces")
      assert.strictEqual((yield* resolve({ otlp: some("https://otel.example/base/") })).otlp, "https://otel.example/base/v1/traces")
      assert.strictEqual((yield* resolve({ otlp: some("http://c:4318/v1/traces") })).otlp, "http://c:4318/v1/traces")
    }))

  it.effect("flags that do not go together, or say nothing, are config errors that name the flag", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [Partial<Flags.Flags>, string]> = [
        [{ sandbox: some("none"), tools: some("bash") }, "--sandbox none leaves no sandbox for the built-in tools: add --tools none, or choose a sandbox"],
        [{ sandbox: some("local"), allowRead: ["/data"] }, "--allow-read grants a host path to bubblewrap's commands: under --sandbox local commands reach all their user can, granted or not; choose --sandbox bubblewrap or auto"],
        [{ sessionDir: some("/data/s"), allowWrite: ["/srv", "/data"] }, "--session-dir: /data/s is inside --allow-write /data, where the agent can write: keep sessions outside it (e.g. ~/.local/state/effect-agent/sessions/NAME)"],
        [{ sessionDir: some("/data"), allowWrite: ["/data/cache"] }, "--session-dir: /data holds --allow-write /data/cache, where the agent can write: keep sessions outside it (e.g. ~/.local/state/effect-agent/sessions/NAME)"],
        [{ sandbox: some("none"), tools: some("none"), allowWrite: ["/data"] }, "--allow-write grants a host path to bubblewrap's commands: under --sandbox none there are no commands; choose --sandbox bubblewrap or auto"],
        [{ provider: some("scripted") }, "--provider scripted needs --script FILE (the replies, as JSON)"],
        [{ script: some("s.json") }, "--script is for --provider scripted"],
        [{ json: true, emitJsonl: some("-") }, "--emit-jsonl - and --json both want stdout: give --emit-jsonl a file"],
        [{ baseUrl: some("localhost:11434") }, "--base-url: \"localhost:11434\" is not an http(s) URL"],
        [{ otlp: some("localhost:4318") }, "--otlp: \"localhost:4318\" is not an http(s) URL"],
        [{ otlp: some("ftp://collector/") }, "--otlp: \"ftp://collector/\" is not an http(s) URL"],
        [{ otlp: some("http://user:secret@collector:4318") }, "--otlp: the URL may not hold credentials"],
        [{ apiKeyEnv: some("MY-KEY") }, "--api-key-env: \"MY-KEY\" is not an environment variable name"],
        [{ mcp: ["node \"server.js"] }, "--mcp \"node \\\"server.js\": The quote is not closed in template part 0"],
        [{ sessionDir: some("a"), resume: some("a") }, "--resume DIR continues the session in DIR: leave out --session-dir"],
        [{ task: some("  ") }, "--task is empty"],
        [{ task: none, approve: some("ask") }, "--approve ask reads decisions on stdin: give the task with --task"],
        [{ task: none, stdinEof: "cancel" }, "--stdin-eof cancel watches the control input on stdin: give the task with --task"]
      ]
      for (const [given, message] of cases) assert.deepStrictEqual(yield* problem(given), [22, message])
      assert.deepStrictEqual(
        yield* problem({ task: none }, true),
        [22, "no task: give --task TEXT, or pipe the task on stdin"]
      )
    }))

  it.effect("--allow-read and --allow-write: absolute paths in the target; a resumed run takes them only from its flags", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const first = yield* resolve({
        sessionDir: some(`${dir}/s`),
        allowRead: ["docs", "/opt/tools"],
        allowWrite: ["/var/cache/build"]
      })
      assert.deepStrictEqual(
        [first.target.allowRead, first.target.allowWrite],
        [["/work/here/docs", "/opt/tools"], ["/var/cache/build"]]
      )
      assert.isUndefined((yield* resolve({})).target.allowRead)
      yield* SessionFiles.writeSessionFile(`${dir}/s`, first.target, keys)
      assert.deepStrictEqual(yield* problem({ task: none, resume: some(`${dir}/s`) }), [
        22,
        "--resume: the session was started with --allow-read /work/here/docs --allow-read /opt/tools " +
        "--allow-write /var/cache/build; a resumed run takes what widens the agent's " +
        "reach only from its own flags, never from the session directory: pass them again (or others) to go on"
      ])
      const resumed = yield* resolve({
        task: none,
        resume: some(`${dir}/s`),
        allowRead: ["/opt/tools"],
        allowWrite: ["/var/cache/build"]
      })
      assert.deepStrictEqual([resumed.target.allowRead, resumed.target.allowWrite], [["/opt/tools"], ["/var/cache/build"]])
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("a session directory: run.json keeps the target; --resume runs on it with the flags given on top", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const first = yield* resolve({
        sessionDir: some(`${dir}/s`),
        provider: some("anthropic"),
        apiKeyEnv: some("WORK_KEY"),
        tools: some("read_file"),
        maxTurns: some(10)
      })
      yield* SessionFiles.writeSessionFile(`${dir}/s`, first.target, keys)
      const again = yield* Effect.flip(SessionFiles.writeSessionFile(`${dir}/s`, first.target, keys))
      assert.deepStrictEqual(
        [again.code, again.message],
        [22, `--session-dir: ${dir}/s already holds a session: resume it with --resume ${dir}/s, or choose another directory`]
      )
      // the key's variable widens what the run may send: it is given again
      assert.deepStrictEqual(yield* problem({ task: none, resume: some(`${dir}/s`) }), [
        22,
        "--resume: the session was started with --api-key-env WORK_KEY; a resumed run takes what widens the agent's " +
        "reach only from its own flags, never from the session directory: pass them again (or others) to go on"
      ])
      const resumed = yield* resolve({ task: none, resume: some(`${dir}/s`), maxTokens: some(500), apiKeyEnv: some("WORK_KEY") })
      assert.deepStrictEqual(resumed.target, { ...first.target })
      assert.strictEqual(resumed.target.model, "claude-sonnet-4-5")
      // only the limits given change the saved config
      assert.deepStrictEqual(resumed.config, { budgets: { tokens: 500 } })
      assert.deepStrictEqual(resumed.session, { dir: `${dir}/s`, resume: true })
      const other = yield* resolve({
        task: none,
        resume: some(`${dir}/s`),
        provider: some("openai"),
        apiKeyEnv: some("WORK_KEY")
      })
      assert.deepStrictEqual([other.target.provider, other.target.model], ["openai", "gpt-4o"])
      assert.deepStrictEqual(
        yield* problem({ task: none, resume: some(`${dir}/none`) }),
        [21, `${dir}/none holds no session to resume (no run.json)`]
      )
      yield* fs.writeFileString(`${dir}/s/run.json`, JSON.stringify({ version: 2, target: first.target }))
      const [code, message] = yield* problem({ task: none, resume: some(`${dir}/s`) })
      assert.strictEqual(code, 21)
      assert.strictEqual(
        message,
        `${dir}/s/run.json was written by another version of effect-agent (session format 2; this one reads 1)`
      )
      yield* fs.writeFileString(`${dir}/s/run.json`, JSON.stringify({ version: 1, target: { provider: "gemini" } }))
      const [, corrupt] = yield* problem({ task: none, resume: some(`${dir}/s`) })
      assert.strictEqual(
        corrupt,
        `${dir}/s/run.json is not a session file: Expected "openai" | "openai-responses" | "anthropic" | "scripted" at ["target"]["provider"]`
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
