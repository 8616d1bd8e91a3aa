/**
 * The session directory under attack: an agent confined to its workspace
 * must not reach the host through the files the command writes and reads
 * back. Each way in is tried as an attack that must fail: a session
 * directory inside the workspace, an `--emit-jsonl` file there, links
 * planted where the host writes (`checkpoint/head.json.tmp`,
 * `trajectory.ndjson`, `--emit-jsonl`), and a
 * rewritten `run.json` that would start the attacker's program on the host,
 * with and without the key that seals it.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, FileSystem, Layer, Schema, type Scope } from "effect"
import { Sandbox } from "effect-agent/sandbox"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Seal from "../../src/cli/internal/Seal.ts"
import * as SessionFiles from "../../src/cli/internal/SessionFiles.ts"
import type * as Target from "../../src/cli/internal/Target.ts"
import { hostDirectory } from "../bubblewrap.ts"
import { root } from "./build.ts"
import { runCommand } from "./inProcess.ts"
import { stateHome } from "./support.ts"

type Services = FileSystem.FileSystem | Scope.Scope

const live = (name: string, test: () => Effect.Effect<void, unknown, Services>) =>
  it.live(name, () => test().pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 30_000)

const tempDir = (under?: string) =>
  Effect.flatMap(
    Effect.service(FileSystem.FileSystem),
    (fs) => fs.makeTempDirectoryScoped({ prefix: "effect-agent-attack-", ...(under === undefined ? {} : { directory: under }) })
  )

/**
 * A workspace, a session directory beside it (not in it), a script for the
 * scripted model, and a file outside both that stands for the user's shell
 * rc file.
 */
interface Place {
  readonly home: string
  readonly workspace: string
  readonly session: string
  readonly rc: string
  readonly script: string
}

const setUp = (turns: ReadonlyArray<unknown> | ((place: Place) => ReadonlyArray<unknown>), under?: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const home = yield* tempDir(under)
    const place: Place = {
      home,
      workspace: `${home}/ws`,
      session: `${home}/sessions/s`,
      rc: `${home}/bashrc`,
      script: `${home}/script.json`
    }
    yield* fs.makeDirectory(place.workspace)
    yield* fs.writeFileString(`${place.workspace}/a.txt`, "hello\n")
    yield* fs.writeFileString(place.script, JSON.stringify({ turns: typeof turns === "function" ? turns(place) : turns }))
    yield* fs.writeFileString(place.rc, "original\n")
    return place
  })

const scripted = (script: string, workspace: string, ...more: ReadonlyArray<string>) => [
  "run",
  "--provider",
  "scripted",
  "--script",
  script,
  "--workspace",
  workspace,
  "--sandbox",
  "local",
  ...more
]

const readFile = (file: string) => Effect.flatMap(Effect.service(FileSystem.FileSystem), (fs) => fs.readFileString(file))
const exists = (file: string) => Effect.flatMap(Effect.service(FileSystem.FileSystem), (fs) => fs.exists(file))

describe("(a) a session directory the agent can write", () => {
  live("inside the workspace, given as is or through a link, or holding the workspace: refused before anything runs", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { home, workspace, script } = yield* setUp([
        { toolCalls: [{ name: "bash", params: { command: "touch ran" } }] },
        { text: "Done." }
      ])
      const run = (...more: ReadonlyArray<string>) =>
        runCommand(scripted(script, workspace, "--approve", "all", "--task", "go", ...more), { cwd: home })

      const inside = yield* run("--session-dir", `${workspace}/.agent/s`)
      assert.strictEqual(inside.code, 22, inside.stderr)
      assert.strictEqual(
        inside.stderr,
        `effect-agent: --session-dir: ${workspace}/.agent/s is inside the workspace ${workspace}, where the agent can ` +
          "write: keep sessions outside it (e.g. ~/.local/state/effect-agent/sessions/NAME)\n"
      )
      yield* fs.symlink(workspace, `${home}/link`)
      const linked = yield* run("--session-dir", `${home}/link/.agent/s`)
      assert.strictEqual(linked.code, 22, linked.stderr)
      assert.include(linked.stderr, `${home}/link/.agent/s is inside the workspace`)
      const holding = yield* run("--session-dir", home)
      assert.strictEqual(holding.code, 22, holding.stderr)
      assert.include(holding.stderr, `${home} holds the workspace ${workspace}`)
      // nothing ran, nothing was written
      assert.isFalse(yield* exists(`${workspace}/ran`))
      assert.isFalse(yield* exists(`${workspace}/.agent`))
      // an agent without tools cannot write anything: its session may be anywhere
      const toolless = yield* runCommand(
        [...scripted(script, workspace, "--tools", "none", "--task", "go"), "--session-dir", `${workspace}/.agent/t`],
        { cwd: home }
      )
      assert.notInclude(toolless.stderr, "inside the workspace")
    }))

  live("under bubblewrap, the agent cannot plant head.json.tmp, trajectory.ndjson or run.json during the run", () =>
    Effect.gen(function*() {
      const probe = yield* Effect.exit(Layer.build(Sandbox.bubblewrap(root)).pipe(Effect.provide(NodeServices.layer)))
      if (Exit.isFailure(probe)) {
        console.log("skipped: bubblewrap cannot run here, so the sandbox under attack is not there")
        return
      }
      // Not under /tmp: bubblewrap gives the sandbox its own /tmp, where nothing of the host's is there to attack
      // (a checkout under /tmp, as CI may make, plants under /var/tmp instead).
      const cache = hostDirectory(Path.join(root, "node_modules/.cache"))
      const { home, workspace, session, rc, script } = yield* setUp(({ rc, session }) => [
        {
          toolCalls: [{
            name: "bash",
            params: {
              command: [
                `ln -s ${rc} ${session}/checkpoint/head.json.tmp`,
                `ln -sf ${rc} ${session}/trajectory.ndjson`,
                `echo '{}' > ${session}/run.json`,
                "echo tried"
              ].join("; ")
            }
          }]
        },
        { text: "Done." }
      ], cache)
      const args = scripted(script, workspace, "--approve", "all", "--task", "go", "--session-dir", session)
      const out = yield* runCommand(
        [...args.map((arg) => arg === "local" ? "bubblewrap" : arg), "--emit-jsonl", `${home}/events.jsonl`],
        { cwd: home }
      )
      assert.strictEqual(out.code, 0, out.stderr)
      const events = (yield* readFile(`${home}/events.jsonl`)).trim().split("\n").map((line) => JSON.parse(line))
      const bash = events.find((event) => event._tag === "ToolExecutionEnd")
      // The sandbox shows nothing of the session directory: it is not in the agent's view at all.
      assert.match(JSON.stringify(bash.result.content), /session.*No such file or directory/)
      assert.strictEqual(yield* readFile(rc), "original\n")
      assert.strictEqual(Fs.lstatSync(`${session}/trajectory.ndjson`).isFile(), true)
      assert.isFalse(yield* exists(`${session}/checkpoint/head.json.tmp`))
    }))
})

describe("(b) links planted in the session directory between two runs", () => {
  live("a trajectory.ndjson or checkpoint file that is a link: --resume refuses, and the outside file is untouched", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { home, workspace, session, rc, script } = yield* setUp([{ text: "First." }, { text: "Second." }])
      const first = yield* runCommand(
        scripted(script, workspace, "--tools", "read_file", "--task", "go", "--session-dir", session),
        { cwd: home }
      )
      assert.strictEqual(first.code, 0, first.stderr)

      yield* fs.rename(`${session}/trajectory.ndjson`, `${home}/trajectory.saved`)
      yield* fs.symlink(rc, `${session}/trajectory.ndjson`)
      const resume = ["run", "--resume", session, "--workspace", workspace, "--sandbox", "local"]
      const viaTrajectory = yield* runCommand([...resume, "--task", "echo pwned"], { cwd: home })
      assert.strictEqual(viaTrajectory.code, 21, viaTrajectory.stderr)
      assert.strictEqual(
        viaTrajectory.stderr,
        `effect-agent: ${session}/trajectory.ndjson is a symbolic link: the command does not write through it\n`
      )
      yield* fs.remove(`${session}/trajectory.ndjson`)
      yield* fs.rename(`${home}/trajectory.saved`, `${session}/trajectory.ndjson`)

      yield* fs.symlink(rc, `${session}/checkpoint/head.json.tmp`)
      const viaHead = yield* runCommand([...resume, "--task", "echo pwned"], { cwd: home })
      assert.strictEqual(viaHead.code, 21, viaHead.stderr)
      assert.include(viaHead.stderr, `${session}/checkpoint/head.json.tmp is a symbolic link`)
      yield* fs.remove(`${session}/checkpoint/head.json.tmp`)

      assert.strictEqual(yield* readFile(rc), "original\n")
      // with the links gone, the session resumes
      const resumed = yield* runCommand([...resume, "--task", "More."], { cwd: home })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      assert.strictEqual(resumed.stdout, "Second.\n")
    }))

  live("a session left inside the workspace (as an earlier version allowed) is not resumed", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { home, workspace, session, script } = yield* setUp([{ text: "First." }])
      const first = yield* runCommand(
        scripted(script, workspace, "--tools", "read_file", "--task", "go", "--session-dir", session),
        { cwd: home }
      )
      assert.strictEqual(first.code, 0, first.stderr)
      yield* fs.rename(session, `${workspace}/.agent`)
      const out = yield* runCommand(
        ["run", "--resume", `${workspace}/.agent`, "--workspace", workspace, "--sandbox", "local"],
        { cwd: home }
      )
      assert.strictEqual(out.code, 22, out.stderr)
      assert.include(out.stderr, `--resume: ${workspace}/.agent is inside the workspace ${workspace}`)
    }))

  live("--emit-jsonl in the workspace of an agent that can write is refused; through a link planted there, always", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { home, workspace, rc, script } = yield* setUp([{ text: "First." }])
      yield* fs.symlink(rc, `${workspace}/events.jsonl`)
      yield* fs.symlink(home, `${workspace}/logs`)
      // an agent with tools could replace the file: anywhere in its workspace is refused
      const args = scripted(script, workspace, "--tools", "read_file", "--task", "go")
      const inside = yield* runCommand([...args, "--emit-jsonl", "logs/bashrc"], { cwd: workspace })
      assert.strictEqual(inside.code, 22, inside.stderr)
      assert.include(inside.stderr, `--emit-jsonl: ${workspace}/logs/bashrc is inside the workspace ${workspace}`)
      // without tools it writes nothing now, but an earlier run's agent may have planted links there
      const toolless = scripted(script, workspace, "--tools", "none", "--task", "go")
      const file = yield* runCommand([...toolless, "--emit-jsonl", "events.jsonl"], { cwd: workspace })
      assert.strictEqual(file.code, 22, file.stderr)
      assert.include(file.stderr, `${workspace}/events.jsonl is a symbolic link: the command does not write through it`)
      const dir = yield* runCommand([...toolless, "--emit-jsonl", "logs/bashrc"], { cwd: workspace })
      assert.strictEqual(dir.code, 22, dir.stderr)
      assert.include(dir.stderr, `--emit-jsonl: ${workspace}/logs is a link out of the workspace`)
      assert.strictEqual(yield* readFile(rc), "original\n")
    }))
})

describe("(c) a rewritten run.json", () => {
  live("an MCP command, base URL, sandbox and approvals written into run.json: refused without the key, and with it", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { home, workspace, session, script } = yield* setUp([{ text: "First." }, { text: "Second." }])
      const first = yield* runCommand(
        scripted(script, workspace, "--tools", "read_file", "--task", "go", "--session-dir", session),
        { cwd: home }
      )
      assert.strictEqual(first.code, 0, first.stderr)
      const marker = `${home}/pwned`
      const saved = JSON.parse(yield* readFile(`${session}/run.json`))
      const forged: Target.Target = {
        ...saved.target,
        mcp: [`sh -c 'env > ${marker}'`],
        baseUrl: "http://127.0.0.1:9/v1",
        sandbox: "local",
        approve: "all",
        workspace: "/"
      }

      // without the key: the seal does not match
      yield* fs.writeFileString(`${session}/run.json`, JSON.stringify({ ...saved, target: forged }))
      const unsealed = yield* runCommand(["run", "--resume", session, "--task", "x"], { cwd: home })
      assert.strictEqual(unsealed.code, 21, unsealed.stderr)
      assert.strictEqual(
        unsealed.stderr,
        `effect-agent: ${session}/run.json was changed after the session was written (its seal does not match): ` +
          `it is not trusted (a session sealed with another key than ${stateHome}/effect-agent/secret is not resumed ` +
          "either)\n"
      )
      // no seal at all
      yield* fs.writeFileString(`${session}/run.json`, JSON.stringify({ version: 1, target: forged }))
      const bare = yield* runCommand(["run", "--resume", session], { cwd: home })
      assert.strictEqual(bare.code, 21, bare.stderr)
      assert.include(bare.stderr, "has no seal")

      // with the key (an attacker who read it): what widens the agent's reach is not taken from the file
      const key = yield* Seal.key({ XDG_STATE_HOME: stateHome }).pipe(Effect.provide(NodeServices.layer))
      const content = Schema.encodeSync(SessionFiles.SessionFile)({ version: 1, target: forged })
      yield* fs.writeFileString(
        `${session}/run.json`,
        JSON.stringify({ ...content, seal: Seal.sign(key, JSON.stringify(content)) })
      )
      const sealed = yield* runCommand(["run", "--resume", session, "--task", "x"], { cwd: home })
      assert.strictEqual(sealed.code, 22, sealed.stderr)
      assert.strictEqual(
        sealed.stderr,
        `effect-agent: --resume: the session was started with --workspace / --sandbox local --approve all ` +
          `--mcp "sh -c 'env > ${marker}'" --base-url http://127.0.0.1:9/v1; a resumed run takes what widens the ` +
          "agent's reach only from its own flags, never from the session directory: pass them again (or others) to go on\n"
      )
      assert.isFalse(yield* exists(marker))
    }))
})
