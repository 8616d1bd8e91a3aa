/**
 * The records a pipeline keeps (issue 29, item 6), on the built command: the
 * `--emit-jsonl` file and `--json`'s stdout are what CI reads back to know
 * how a run ended, so the agent must not be able to replace them. The README's
 * CI recipe once wrote both into the current directory, the agent's
 * workspace, where one approved `bash` call deleted them and wrote its own
 * while the command went on writing to the unlinked files. An output inside
 * the workspace of an agent that can write there (given as is, through a
 * link, or in a directory not made yet) is refused with exit 22 before
 * anything runs; outside it (the recipe's `$RUNNER_TEMP`), under bubblewrap,
 * the agent cannot reach it.
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { bubblewrap, hostDirectory } from "../bubblewrap.ts"
import { builtCommand, root } from "./build.ts"
import { events, live, runProgram, tempDir } from "./support.ts"

let cli = ""
beforeAll(async () => {
  cli = await builtCommand()
}, 240_000)

/** The agent's one move: it deletes the records and writes its own, then says it is done. */
const forging = (also: ReadonlyArray<string> = []) => [
  {
    toolCalls: [{
      name: "bash",
      params: {
        command: [
          "touch ran",
          // without -f: rm says why it cannot (the records are read-only in the sandbox, or not in its view at all)
          ...also.map((file) => `rm ${file}`),
          "rm -f trajectory.jsonl result.json",
          `echo '{"_tag":"AgentEnd","forged":true}' > trajectory.jsonl`,
          `echo '{"exitCode":0,"summary":"all good","forged":true}' > result.json`
        ].join("; ")
      }
    }]
  },
  { text: "Done." }
]

/** A workspace, and a script for the scripted model outside it. */
const setUp = (turns: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const home = yield* tempDir
    const workspace = `${home}/ws`
    yield* fs.makeDirectory(workspace)
    yield* fs.writeFileString(`${home}/script.json`, JSON.stringify({ turns }))
    return { home, workspace, script: `${home}/script.json` }
  })

const quote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`

/** `effect-agent run` on the scripted model as bash runs it in `cwd`, with `redirect` (e.g. `> result.json`). */
const bash = (cwd: string, script: string, flags: ReadonlyArray<string>, redirect = "") =>
  runProgram("bash", [
    "-c",
    [process.execPath, cli, "run", "--provider", "scripted", "--script", script, "--approve", "all", ...flags]
      .map(quote).join(" ") + ` --task go ${redirect}`
  ], { cwd })

const refusal = (workspace: string) =>
  `is inside the workspace ${workspace}, where the agent can delete it and write its own: write it outside ` +
  "(in CI, e.g. under $RUNNER_TEMP)"

describe("the records a pipeline keeps are out of the agent's reach", () => {
  live("attack: the old CI recipe (--emit-jsonl and --json > into the workspace) is refused with exit 22; nothing runs", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { workspace, script } = yield* setUp(forging())
      const out = yield* bash(
        workspace,
        script,
        ["--sandbox", "local", "--quiet", "--json", "--emit-jsonl", "trajectory.jsonl"],
        "> result.json"
      )
      assert.strictEqual(out.code, 22, out.stderr)
      assert.include(out.stderr, `--emit-jsonl: ${workspace}/trajectory.jsonl ${refusal(workspace)}`)
      // the agent never ran; the command wrote no events (the shell made result.json: it holds the refusal)
      assert.isFalse(yield* fs.exists(`${workspace}/ran`))
      assert.isFalse(yield* fs.exists(`${workspace}/trajectory.jsonl`))
      assert.strictEqual(JSON.parse(yield* fs.readFileString(`${workspace}/result.json`)).exitCode, 22)
    }))

  live("attack: --json or --emit-jsonl - redirected to a file in the workspace is refused (where /proc names it)", () =>
    Effect.gen(function*() {
      if (!Fs.existsSync("/proc/self/fd")) return console.log("skipped: no /proc here to name stdout's file")
      const { home, workspace, script } = yield* setUp(forging())
      const json = yield* bash(
        workspace,
        script,
        ["--sandbox", "local", "--quiet", "--json", "--emit-jsonl", `${home}/trajectory.jsonl`],
        "> result.json"
      )
      assert.strictEqual(json.code, 22, json.stderr)
      assert.include(json.stderr, `--json: stdout (${workspace}/result.json) ${refusal(workspace)}`)
      const events = yield* bash(workspace, script, ["--sandbox", "local", "--quiet", "--emit-jsonl", "-"], "> events.jsonl")
      assert.strictEqual(events.code, 22, events.stderr)
      assert.include(events.stderr, `--emit-jsonl -: stdout (${workspace}/events.jsonl) ${refusal(workspace)}`)
      assert.isFalse(Fs.existsSync(`${workspace}/ran`))
    }))

  live("attack: a path into the workspace through a link, or in a directory not made yet, and an external worker's workspace", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { home, workspace, script } = yield* setUp(forging())
      yield* fs.symlink(workspace, `${home}/records`)
      const linked = yield* bash(home, script, ["--workspace", workspace, "--sandbox", "local", "--emit-jsonl", "records/t.jsonl"])
      assert.strictEqual(linked.code, 22, linked.stderr)
      assert.include(linked.stderr, `--emit-jsonl: ${home}/records/t.jsonl ${refusal(workspace)}`)
      const deep = yield* bash(home, script, ["--workspace", workspace, "--sandbox", "local", "--emit-jsonl", "ws/a/b/t.jsonl"])
      assert.strictEqual(deep.code, 22, deep.stderr)
      assert.include(deep.stderr, `--emit-jsonl: ${workspace}/a/b/t.jsonl ${refusal(workspace)}`)
      // no tools, but a CLI worker that writes in the workspace: its records, and its session, go elsewhere too
      const worker = ["--workspace", workspace, "--sandbox", "local", "--tools", "none", "--worker", "claude"]
      const external = yield* bash(home, script, [...worker, "--emit-jsonl", "ws/t.jsonl"])
      assert.strictEqual(external.code, 22, external.stderr)
      assert.include(external.stderr, `--emit-jsonl: ${workspace}/t.jsonl ${refusal(workspace)}`)
      const session = yield* bash(home, script, [...worker, "--session-dir", "ws/.session"])
      assert.strictEqual(session.code, 22, session.stderr)
      assert.include(session.stderr, `--session-dir: ${workspace}/.session is inside the workspace ${workspace}`)
      assert.isFalse(yield* fs.exists(`${workspace}/ran`))
      // an agent that cannot write anything may keep its records beside its files
      const toolless = yield* bash(home, script, ["--workspace", workspace, "--tools", "none", "--emit-jsonl", "ws/t.jsonl"])
      assert.strictEqual(toolless.code, 0, toolless.stderr)
    }))

  live("the new CI recipe: records under $RUNNER_TEMP; the agent's forgeries stay in its workspace, the records are whole", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      // Under bubblewrap the records are on the host, which the sandbox sees read-only (its own /tmp is not it).
      const temp = Fs.mkdtempSync(Path.join(hostDirectory(Path.join(root, "node_modules/.cache")), "runner-temp-"))
      const records = [`${temp}/trajectory.jsonl`, `${temp}/result.json`]
      // Under bubblewrap the agent also tries the records by their paths; on the local sandbox it could reach them.
      const { workspace, script } = yield* setUp(forging(bubblewrap.works ? records : []))
      const sandbox = bubblewrap.works ? "bubblewrap" : "local"
      const out = yield* bash(
        workspace,
        script,
        ["--sandbox", sandbox, "--quiet", "--json", "--emit-jsonl", records[0]!],
        `> ${quote(records[1]!)}`
      )
      try {
        assert.strictEqual(out.code, 0, out.stderr)
        const result = JSON.parse(yield* fs.readFileString(records[1]!))
        assert.deepStrictEqual([result.exitCode, result.outcome, result.answer], [0, { _tag: "Completed" }, "Done."])
        const trajectory = yield* events(yield* fs.readFileString(records[0]!))
        assert.strictEqual(trajectory.at(-1)?._tag, "AgentEnd")
        const call = trajectory.find((event) => event._tag === "ToolExecutionEnd")
        assert.strictEqual(call?._tag === "ToolExecutionEnd" && call.toolName, "bash")
        if (bubblewrap.works) assert.match(JSON.stringify(call), /Read-only file system|No such file or directory/)
        // what the agent wrote is in its workspace, not in the records
        assert.include(yield* fs.readFileString(`${workspace}/result.json`), "forged")
        assert.isTrue(yield* fs.exists(`${workspace}/ran`))
      } finally {
        Fs.rmSync(temp, { recursive: true, force: true })
      }
    }))
})
