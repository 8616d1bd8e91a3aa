import { NodeServices } from "@effect/platform-node"
import { assert, it } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import type { AgentEvent } from "effect-agent"
import { runCodingAgent, writeProject } from "../../examples/coding-agent.ts"
import { bubblewrap } from "../bubblewrap.ts"
import { captureLogs } from "../support.ts"

it.live("examples/coding-agent.ts: the agent finds the bug, fixes it and the test passes", () => {
  const logs = captureLogs()
  return Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const root = yield* fs.makeTempDirectoryScoped({ prefix: "coding-agent-test-" })
    yield* writeProject(root)
    const ended: Array<AgentEvent.Of<"ToolExecutionEnd">> = []
    const result = yield* runCodingAgent(root, (event) =>
      Effect.sync(() => {
        if (event._tag === "ToolExecutionEnd") ended.push(event)
      }))

    assert.strictEqual(result.outcome._tag, "Completed")
    assert.strictEqual(
      yield* fs.readFileString(`${root}/calc.sh`),
      "#!/bin/sh\n# Usage: calc.sh add A B\ncase \"$1\" in\n  add) echo $(($2 + $3)) ;;\n" +
        "  *) echo \"unknown operation: $1\" >&2; exit 2 ;;\nesac\n"
    )
    const text = (event: AgentEvent.Of<"ToolExecutionEnd">) =>
      event.result.content.map((part) => (part.type === "text" ? part.text : "")).join("")
    assert.deepStrictEqual(ended.map((event) => [event.toolName, event.result.isError, text(event)]), [
      ["list_files", false, "calc.sh\ntest.sh"],
      [
        "read_file",
        false,
        "1\t#!/bin/sh\n2\t# Usage: calc.sh add A B\n3\tcase \"$1\" in\n4\t  add) echo $(($2 - $3)) ;;\n" +
        "5\t  *) echo \"unknown operation: $1\" >&2; exit 2 ;;\n6\tesac"
      ],
      ["bash", true, "FAIL: add 2 3 gave -1, expected 5\n[exit code 1]"],
      ["edit_file", false, "Edited calc.sh: replaced 1 occurrence (line 4)"],
      ["bash", false, "ok: add 2 3 = 5\n[exit code 0]"]
    ])
    const last = result.messages.at(-1)
    assert.deepStrictEqual(
      last?.role === "assistant" ? last.content : undefined,
      [{ type: "text", text: "Fixed: `calc.sh add` subtracted its operands; it adds them now and test.sh passes." }]
    )
    // the sandbox it chose, said once
    assert.deepStrictEqual(logs.lines, [
      bubblewrap.works
        ? `Info: Sandbox.auto: using bubblewrap for ${root}`
        : `Warn: Sandbox.auto: using local (no isolation) for ${root}: ${bubblewrap.reason}`
    ])
  }).pipe(Effect.provide([NodeServices.layer, logs.layer]))
})
