import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Exit, Fiber, Layer, Predicate, Stream } from "effect"
import { Tool } from "effect/ai"
import { Agent, type AgentEvent, AgentTool, Hooks, Message, ToolRegistry } from "effect-agent"
import { BuiltinTools, Sandbox } from "effect-agent/sandbox"
import { ScriptedModel } from "effect-agent/testing"
import { readdirSync, readFileSync } from "node:fs"
import { eventually, localLayer, makeWorkspace, type Workspace } from "./fixtures.ts"

type Tools = typeof BuiltinTools.toolkit.tools

/** Calls a built-in tool as the loop would and returns what the model reads. */
const call = <Name extends keyof Tools>(name: Name, params: Tool.ParametersEncoded<Tools[Name]>) =>
  Effect.gen(function*() {
    const toolkit = yield* BuiltinTools.toolkit
    const results = yield* Stream.runCollect(yield* toolkit.handle(name, params))
    const last = results.at(-1)!
    // Arguments that fail the parameter Schema are answered by effect/ai with an AiError.
    const result: unknown = last.result
    const text = typeof result === "string"
      ? result
      : `${last.failureOrigin}: ${Predicate.hasProperty(result, "message") ? String(result.message) : String(result)}`
    return { isFailure: last.isFailure, text }
  })

const ok = (text: string) => ({ isFailure: false, text })
const failed = (text: string) => ({ isFailure: true, text })

const files = {
  "src/a.ts": "export const a = 1\nexport const b = 2\n",
  "src/lib/b.ts": "import { a } from \"../a.ts\"\nconsole.log(a)\n",
  "notes.md": "Alpha\nbeta\nALPHA again\n",
  "empty.txt": "",
  "image.png": new Uint8Array([137, 80, 78, 71, 0, 0, 1]),
  "node_modules/dep/index.js": "export const a = 1\n",
  ".git/config": "export const a = 1\n",
  ".github/workflow.yml": "on: push\n"
}

const onMemory = <A, E>(effect: Effect.Effect<A, E, Tool.HandlersFor<Tools>>) =>
  effect.pipe(Effect.provide(BuiltinTools.layer.pipe(Layer.provide(Sandbox.memory(files)))))

describe("BuiltinTools definitions", () => {
  it("annotates reading tools parallel, bash and writing tools sequential", () => {
    const modes = Object.values(BuiltinTools.toolkit.tools).map((tool) =>
      `${tool.name}:${AgentTool.settings(tool).execution}:${AgentTool.settings(tool).replaySafe}`
    )
    assert.deepStrictEqual(modes, [
      "bash:sequential:false",
      "read_file:parallel:true",
      "write_file:sequential:true",
      "edit_file:sequential:false",
      "list_files:parallel:true",
      "grep:parallel:true"
    ])
  })

  it("one option makes bash, write_file and edit_file need approval", () => {
    const approvals = (toolkit: typeof BuiltinTools.toolkit) =>
      Object.values(toolkit.tools).filter((tool) => tool.needsApproval === true).map((tool) => tool.name)
    assert.deepStrictEqual(approvals(BuiltinTools.toolkit), [])
    assert.deepStrictEqual(
      approvals(BuiltinTools.make({ requireApproval: true })),
      ["bash", "write_file", "edit_file"]
    )
    // The approval variant keeps the loop annotations.
    const approved = BuiltinTools.make({ requireApproval: true }).tools.bash
    assert.strictEqual(AgentTool.settings(approved).execution, "sequential")
  })

  it("gives the model strict JSON Schemas (integers, optional keys without null)", () => {
    const max = Number.MAX_SAFE_INTEGER
    assert.deepStrictEqual(Tool.getJsonSchema(BuiltinTools.ReadFile), {
      type: "object",
      properties: {
        path: { type: "string", description: "Path relative to the workspace root" },
        offset: { type: "integer", minimum: 1, maximum: max, description: "First line to read (1-based)" },
        limit: { type: "integer", minimum: 1, maximum: max, description: "Number of lines to read" }
      },
      required: ["path"],
      additionalProperties: true
    })
  })
})

describe("BuiltinTools on Sandbox.memory", () => {
  it.effect("read_file numbers lines, pages with offset and limit", () =>
    onMemory(Effect.gen(function*() {
      assert.deepStrictEqual(yield* call("read_file", { path: "notes.md" }), ok("1\tAlpha\n2\tbeta\n3\tALPHA again"))
      assert.deepStrictEqual(
        yield* call("read_file", { path: "notes.md", offset: 2, limit: 1 }),
        ok("2\tbeta\n[lines 2-2 of 3; continue with offset=3]")
      )
      assert.deepStrictEqual(yield* call("read_file", { path: "notes.md", offset: 3 }), ok("3\tALPHA again"))
      assert.deepStrictEqual(
        yield* call("read_file", { path: "notes.md", offset: 4 }),
        failed("offset 4 is past the end of notes.md (3 lines)")
      )
      assert.deepStrictEqual(yield* call("read_file", { path: "empty.txt" }), ok("(empty.txt is empty)"))
    })))

  it.effect("read_file fails clearly on directories, missing, binary and outside files", () =>
    onMemory(Effect.gen(function*() {
      const results = yield* Effect.forEach(
        ["src", "missing.txt", "image.png", "../etc/passwd"],
        (path) => call("read_file", { path })
      )
      assert.deepStrictEqual(results, [
        failed("src is a directory; use list_files to see its files"),
        failed("no such file or directory: missing.txt"),
        failed("image.png looks like a binary file (7 bytes)"),
        failed("path escapes the workspace: ../etc/passwd (it resolves outside the workspace)")
      ])
      const invalid = yield* call("read_file", { path: "notes.md", offset: 0 })
      assert.isTrue(invalid.isFailure)
      assert.match(invalid.text, /^parameters: .*offset/s)
    })))

  it.effect("write_file creates and overwrites, with directories", () =>
    onMemory(Effect.gen(function*() {
      assert.deepStrictEqual(
        yield* call("write_file", { path: "new/dir/c.ts", content: "one\ntwo\n" }),
        ok("Created new/dir/c.ts (2 lines, 8 bytes)")
      )
      assert.deepStrictEqual(
        yield* call("write_file", { path: "new/dir/c.ts", content: "é" }),
        ok("Overwrote new/dir/c.ts (1 line, 2 bytes)")
      )
      assert.deepStrictEqual(yield* call("read_file", { path: "new/dir/c.ts" }), ok("1\té"))
      assert.deepStrictEqual(
        yield* call("write_file", { path: "src", content: "x" }),
        failed("write src: is a directory")
      )
    })))

  it.effect("edit_file replaces exact text once, or every time when asked", () =>
    onMemory(Effect.gen(function*() {
      assert.deepStrictEqual(
        yield* call("edit_file", { path: "src/a.ts", old_text: "const b = 2", new_text: "const b = \"$&$1\"" }),
        ok("Edited src/a.ts: replaced 1 occurrence (line 2)")
      )
      assert.deepStrictEqual(
        yield* call("read_file", { path: "src/a.ts" }),
        ok("1\texport const a = 1\n2\texport const b = \"$&$1\"")
      )
      assert.deepStrictEqual(
        yield* call("edit_file", { path: "src/a.ts", old_text: "export", new_text: "declare" }),
        failed(
          "old_text matches 2 times in src/a.ts (lines 1, 2); include more surrounding text to make it unique, " +
            "or set replace_all to replace every occurrence."
        )
      )
      assert.deepStrictEqual(
        yield* call("edit_file", { path: "src/a.ts", old_text: "export ", new_text: "export\n", replace_all: true }),
        ok("Edited src/a.ts: replaced 2 occurrences (lines 1, 3)")
      )
      assert.deepStrictEqual(
        yield* call("read_file", { path: "src/a.ts" }),
        ok("1\texport\n2\tconst a = 1\n3\texport\n4\tconst b = \"$&$1\"")
      )
    })))

  it.effect("edit_file fails clearly and changes nothing", () =>
    onMemory(Effect.gen(function*() {
      const attempts = [
        { path: "src/a.ts", old_text: "const c", new_text: "x" },
        { path: "src/a.ts", old_text: "", new_text: "x" },
        { path: "src/a.ts", old_text: "a", new_text: "a" },
        { path: "nope.ts", old_text: "a", new_text: "b" }
      ]
      assert.deepStrictEqual(yield* Effect.forEach(attempts, (params) => call("edit_file", params)), [
        failed(
          "old_text was not found in src/a.ts. It must match exactly, whitespace and indentation included; " +
            "read the file again and copy the text."
        ),
        failed("old_text is empty; to create or replace a whole file, use write_file"),
        failed("old_text and new_text are the same; nothing to change"),
        failed("no such file or directory: nope.ts")
      ])
      assert.deepStrictEqual(
        yield* call("read_file", { path: "src/a.ts" }),
        ok("1\texport const a = 1\n2\texport const b = 2")
      )
    })))

  it.effect("list_files matches globs, relative to the searched directory, skipping .git and node_modules", () =>
    onMemory(Effect.gen(function*() {
      assert.deepStrictEqual(
        yield* call("list_files", {}),
        ok([".github/workflow.yml", "empty.txt", "image.png", "notes.md", "src/a.ts", "src/lib/b.ts"].join("\n"))
      )
      assert.deepStrictEqual(yield* call("list_files", { pattern: "**/*.ts" }), ok("src/a.ts\nsrc/lib/b.ts"))
      assert.deepStrictEqual(yield* call("list_files", { pattern: "*.ts", path: "src" }), ok("src/a.ts"))
      assert.deepStrictEqual(yield* call("list_files", { pattern: "**", path: "./src/lib/" }), ok("src/lib/b.ts"))
      assert.deepStrictEqual(yield* call("list_files", { pattern: "*.rs" }), ok("No files match *.rs in ."))
      assert.deepStrictEqual(
        yield* call("list_files", { path: "../" }),
        failed("path escapes the workspace: .. (it resolves outside the workspace)")
      )
    })))

  it.effect("grep finds lines as path:line:text", () =>
    onMemory(Effect.gen(function*() {
      assert.deepStrictEqual(
        yield* call("grep", { pattern: "const a" }),
        ok("src/a.ts:1:export const a = 1")
      )
      assert.deepStrictEqual(
        yield* call("grep", { pattern: "^alpha", ignore_case: true }),
        ok("notes.md:1:Alpha\nnotes.md:3:ALPHA again")
      )
      assert.deepStrictEqual(yield* call("grep", { pattern: "a", glob: "lib/*.ts", path: "src" }), ok(
        "src/lib/b.ts:1:import { a } from \"../a.ts\"\nsrc/lib/b.ts:2:console.log(a)"
      ))
      assert.deepStrictEqual(yield* call("grep", { pattern: "beta", path: "notes.md" }), ok("notes.md:2:beta"))
      assert.deepStrictEqual(yield* call("grep", { pattern: "PNG" }), ok("No matches for /PNG/ in ."))
      assert.deepStrictEqual(
        yield* call("grep", { pattern: "(" }),
        failed("Invalid regular expression: /(/: Unterminated group")
      )
    })))

  it.effect("grep caps its matches across files, clips long lines, drops a line's CR, skips binary files", () => {
    const { grepLineChars, grepMatches } = BuiltinTools.limits
    const long = `${"x".repeat(grepLineChars)}needle tail`
    const many = {
      // 90 matches per file; a directory's files come before its subdirectories: b.txt, c.txt, then a/
      "a/one.txt": Array.from({ length: 90 }, (_, i) => `needle ${i}`).join("\n"),
      "b.txt": Array.from({ length: 90 }, (_, i) => `needle ${i}\r\nhay`).join("\n") + "\n",
      "c.txt": Array.from({ length: 90 }, (_, i) => `needle ${i}`).join("\n") + "\n",
      "bin.dat": new Uint8Array([110, 101, 101, 100, 108, 101, 0]),
      "long.txt": `${long}\n`,
      "exact.txt": Array.from({ length: grepMatches }, () => "pin").join("\n")
    }
    return Effect.gen(function*() {
      const all = yield* call("grep", { pattern: "^needle \\d+$" })
      const lines = all.text.split("\n")
      assert.strictEqual(lines.length, grepMatches + 1)
      assert.deepStrictEqual(lines.slice(0, 2), ["b.txt:1:needle 0", "b.txt:3:needle 1"])
      assert.deepStrictEqual(lines.slice(90, 92), ["c.txt:1:needle 0", "c.txt:2:needle 1"])
      assert.deepStrictEqual(lines.slice(grepMatches - 1), [
        `a/one.txt:${grepMatches - 180}:needle ${grepMatches - 181}`,
        `[first ${grepMatches} matches shown; narrow the pattern or the path]`
      ])
      assert.deepStrictEqual(
        yield* call("grep", { pattern: "needle tail", path: "long.txt" }),
        ok(`long.txt:1:${"x".repeat(grepLineChars)}… [11 more characters]`)
      )
      // exactly the cap: no "more" marker
      const exact = yield* call("grep", { pattern: "pin", path: "exact.txt" })
      assert.strictEqual(exact.text.split("\n").length, grepMatches)
      assert.strictEqual(exact.text.split("\n").at(-1), `exact.txt:${grepMatches}:pin`)
      assert.deepStrictEqual(
        yield* call("grep", { pattern: "needl", glob: "*.dat" }),
        ok("No matches for /needl/ in .")
      )
    }).pipe(Effect.provide(BuiltinTools.layer.pipe(Layer.provide(Sandbox.memory(many)))))
  })

  it.effect("bash says the in-memory sandbox cannot run commands", () =>
    onMemory(Effect.gen(function*() {
      assert.deepStrictEqual(
        yield* call("bash", { command: "ls" }),
        failed("exec is not supported: the in-memory sandbox cannot run commands")
      )
    })))
})

describe("BuiltinTools on Sandbox.local", () => {
  const onLocal = <A, E>(body: (workspace: Workspace) => Effect.Effect<A, E, Tool.HandlersFor<Tools>>) =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      return yield* body(workspace).pipe(
        Effect.provide(BuiltinTools.layer.pipe(Layer.provide(localLayer(workspace.root))))
      )
    }).pipe(Effect.provide(NodeServices.layer))

  it.live("bash reports output, stderr, exit code and timeouts", () =>
    onLocal(() => Effect.gen(function*() {
      assert.deepStrictEqual(yield* call("bash", { command: "echo hello" }), ok("hello\n[exit code 0]"))
      assert.deepStrictEqual(yield* call("bash", { command: "true" }), ok("(no output)\n[exit code 0]"))
      assert.deepStrictEqual(
        yield* call("bash", { command: "echo out; echo oops >&2; exit 2" }),
        failed("out\n[stderr]\noops\n[exit code 2]")
      )
      assert.deepStrictEqual(
        yield* call("bash", { command: "echo started; sleep 30", timeout: 0.2 }),
        failed("started\n[timed out after 1s; the command and its processes were killed]")
      )
      // bash, not sh: arrays and [[ ]] work.
      assert.deepStrictEqual(
        yield* call("bash", { command: "a=(x y); [[ ${#a[@]} == 2 ]] && echo two" }),
        ok("two\n[exit code 0]")
      )
    })))

  it.live("bash caps long output around a marker", () =>
    onLocal(() => Effect.gen(function*() {
      const result = yield* call("bash", { command: "seq 1 20000" })
      assert.isFalse(result.isFailure)
      assert.isTrue(result.text.startsWith("1\n2\n3\n"))
      assert.isTrue(result.text.endsWith("19999\n20000\n[exit code 0]"))
      assert.match(result.text, /\n\[\.\.\. \d+ bytes truncated \.\.\.\]\n/)
      assert.isBelow(result.text.length, BuiltinTools.limits.commandOutputBytes + 100)
    })))

  it.live("the tools see what bash wrote and never what lies outside", () =>
    onLocal((workspace) => Effect.gen(function*() {
      yield* call("bash", { command: "mkdir -p gen && printf 'made by bash\\n' > gen/out.txt" })
      assert.deepStrictEqual(yield* call("read_file", { path: "gen/out.txt" }), ok("1\tmade by bash"))
      assert.deepStrictEqual(
        yield* call("read_file", { path: "link-out" }),
        failed(
          `path escapes the workspace: link-out (it leads to ${workspace.outside}/secret.txt through a symbolic link)`
        )
      )
      // Links are listed, never followed; grep skips what leads outside.
      assert.deepStrictEqual(
        yield* call("list_files", {}),
        ok(["dangling-out", "dir-out", "gen/out.txt", "inside.txt", "link-in", "link-out"].join("\n"))
      )
      assert.deepStrictEqual(yield* call("grep", { pattern: "secret" }), ok("No matches for /secret/ in ."))
      assert.deepStrictEqual(yield* call("grep", { pattern: "inside" }), ok("inside.txt:1:inside\nlink-in:1:inside"))
    })))
})

/** The ids of this process's worker threads (Node names them `WorkerThread`). */
const workerThreads = (): Array<string> =>
  readdirSync("/proc/self/task").filter((task) => {
    try {
      return readFileSync(`/proc/self/task/${task}/comm`, "utf8").trim() === "WorkerThread"
    } catch {
      return false // the thread ended while we looked
    }
  })

describe("grep and a pattern that backtracks exponentially", () => {
  // `(a+)+$` on 30 a's and a final "!": about forty seconds of backtracking here (each a more doubles it), far
  // past the tool's timeout on a fast machine too.
  const evil = { "evil.txt": `${"a".repeat(30)}!\n` }

  it.live("the call ends at the tool's timeout, other fibers keep running, and the next grep works", () =>
    Effect.gen(function*() {
      const ends: Array<AgentEvent.Of<"ToolExecutionEnd">> = []
      const plugin = Hooks.plugin({
        name: "ends",
        onEvent: (event) => Effect.sync(() => void (event._tag === "ToolExecutionEnd" && ends.push(event)))
      })
      // A 100 ms timer, again and again while the run goes: how late each fires.
      const lateness: Array<number> = []
      const ticker = yield* Effect.forkChild(Effect.gen(function*() {
        for (let i = 0; i < 100; i++) {
          const before = yield* Clock.currentTimeMillis
          yield* Effect.sleep("100 millis")
          lateness.push((yield* Clock.currentTimeMillis) - before - 100)
        }
      }))
      // One set of tools for both runs: the evil search's, cut at its 3 s, then a plain one with no timeout of its
      // own to meet (in a fresh worker thread, which a machine loaded by two other suites took past 3 s to start).
      const tools = yield* Layer.build(
        ToolRegistry.layer(BuiltinTools.toolkit).pipe(Layer.provide(BuiltinTools.layer), Layer.provide(Sandbox.memory(evil)))
      )
      const runOn = (call: { readonly id: string; readonly pattern: string }, cut: boolean) =>
        Agent.run({ prompt: "go", plugins: [plugin], config: cut ? { toolTimeout: "3 seconds" } : {} }).pipe(
          Effect.provide(Layer.merge(
            ScriptedModel.layer([
              { toolCalls: [{ id: call.id, name: "grep", params: { pattern: call.pattern } }] },
              { text: "done" }
            ]),
            Layer.succeedContext(tools)
          ))
        )
      const first = yield* runOn({ id: "evil", pattern: "(a+)+$" }, true)
      const second = yield* runOn({ id: "plain", pattern: "a!" }, false)
      yield* Fiber.interrupt(ticker)
      assert.deepStrictEqual([first.outcome._tag, second.outcome._tag], ["Completed", "Completed"])
      const [timedOut, plain] = ends
      assert.deepStrictEqual(
        [timedOut!.toolCallId, timedOut!.result.isError, Message.textOf(timedOut!.result)],
        ["evil", true, "Tool grep timed out after 3000 ms."]
      )
      // Bounds a loaded machine keeps (it fires timers late: 3.2 s seen beside two other suites at load 24–37), far
      // below what a search on the event loop would take (its forty seconds of backtracking on an idle machine,
      // more on a loaded one, blocking the timeout and the ticker alike).
      assert.isAtLeast(timedOut!.durationMs, 3000)
      assert.isBelow(timedOut!.durationMs, 15_000, "the call outlived its timeout")
      assert.deepStrictEqual(
        [plain!.toolCallId, plain!.result.isError, Message.textOf(plain!.result)],
        ["plain", false, `evil.txt:1:${"a".repeat(30)}!`]
      )
      assert.isAtLeast(lateness.length, 5)
      assert.isBelow(Math.max(...lateness), 10_000, `timers fired late: ${lateness.join(", ")} ms`)
    }))

  it.live("interrupted, the search stops burning CPU: its worker thread is terminated", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(call("grep", { pattern: "(a+)+$" }))
      assert.isTrue(yield* eventually(() => workerThreads().length === 1), "no worker thread started")
      const [searching] = workerThreads()
      yield* Effect.sleep("200 millis")
      yield* Fiber.interrupt(fiber)
      // still running at 200 ms (on the event loop it would have blocked this fiber until it finished)
      assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(fiber)))
      // (the pool may start a fresh worker in its place)
      assert.isTrue(
        yield* eventually(() => !workerThreads().includes(searching!), 2000),
        "the worker thread still runs the pattern"
      )
    }).pipe(Effect.provide(BuiltinTools.layer.pipe(Layer.provide(Sandbox.memory(evil))))))
})
