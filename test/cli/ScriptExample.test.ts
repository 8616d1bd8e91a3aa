/**
 * The script file of `--provider scripted`, where a user finds it: `run
 * --help` shows its format (the example it gives is a valid script), and
 * `examples/scripted-run.json`, the example the repository ships, runs.
 */
import { assert, describe } from "@effect/vitest"
import { Effect, FileSystem, Schema } from "effect"
import { fileURLToPath } from "node:url"
import * as ScriptFile from "../../src/cli/internal/ScriptFile.ts"
import { runCommand } from "./inProcess.ts"
import { live, readEvents, tempDir } from "./support.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))
const example = `${root}examples/scripted-run.json`

describe.concurrent("the script file of --provider scripted", () => {
  live("run --help says what a script file holds, and its example is a valid script", () =>
    Effect.gen(function*() {
      const help = yield* runCommand(["run", "--help"], { cwd: yield* tempDir })
      assert.strictEqual(help.code, 0, help.stderr)
      const flag = help.stdout.split("\n").find((line) => line.trimStart().startsWith("--script"))
      assert.isDefined(flag)
      for (const field of ["{\"turns\": [turn, …]}", "text", "reasoning", "toolCalls [{name, params, id}]", "usage", "delay", "fail", "hang"]) {
        assert.include(flag, field)
      }
      assert.include(flag, "examples/scripted-run.json")
      const lines = help.stdout.split("\n")
      const at = lines.findIndex((line) => line.includes("effect-agent run --provider scripted --script"))
      assert.isAbove(at, 0, help.stdout)
      const shown = lines[at - 1]!.slice(lines[at - 1]!.indexOf("{"))
      const decoded = Schema.decodeUnknownSync(Schema.fromJsonString(ScriptFile.ScriptFile))(shown)
      assert.deepStrictEqual(decoded.turns.map((turn) => turn.toolCalls?.map((call) => call.name) ?? []), [["read_file"], []])
    }))

  live("examples/scripted-run.json runs offline: its tool call reads the file, and the run answers as scripted", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const events = `${yield* tempDir}/events.jsonl`
      const out = yield* runCommand([
        "run",
        "--provider",
        "scripted",
        "--script",
        example,
        "--sandbox",
        "local",
        "--tools",
        "read_file",
        "--json",
        "--emit-jsonl",
        events,
        "--task",
        "What does package.json name?"
      ], { cwd: root })
      assert.strictEqual(out.code, 0, out.stderr)
      const result = JSON.parse(out.stdout)
      assert.deepStrictEqual([result.outcome._tag, result.answer, result.turns], [
        "Completed",
        "package.json names the package effect-agent.",
        2
      ])
      assert.deepStrictEqual([result.usage.input, result.usage.output, result.usage.cacheRead], [600, 25, 120])
      assert.closeTo(result.usage.cost, 0.0016, 1e-12)
      const ends = (yield* readEvents(events)).filter((event) => event._tag === "ToolExecutionEnd")
      assert.deepStrictEqual(ends.map((event) => [event.toolName, event.result.isError]), [["read_file", false]])
      const manifest = JSON.parse(yield* fs.readFileString(`${root}package.json`))
      assert.include(JSON.stringify(ends[0]), `\\"name\\": \\"${manifest.name}\\"`)
    }))
})
