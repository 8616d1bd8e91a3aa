import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { Sandbox } from "effect-agent/sandbox"

const memory = Effect.provide(
  Effect.service(Sandbox.Sandbox),
  Sandbox.memory({ "src/a.ts": "export const a = 1\n", "README.md": "# hi\n", "bin/data": new Uint8Array([0, 1, 2]) })
)

describe("Sandbox.memory", () => {
  it.effect("reads, writes, lists, stats and removes files under /workspace", () =>
    Effect.gen(function*() {
      const sandbox = yield* memory
      assert.deepStrictEqual([sandbox.kind, sandbox.root], ["memory", "/workspace"])
      assert.strictEqual(yield* sandbox.readFile("src/a.ts"), "export const a = 1\n")
      assert.strictEqual(yield* sandbox.readFile("/workspace/src/../README.md"), "# hi\n")
      assert.deepStrictEqual([...(yield* sandbox.readFileBytes("bin/data"))], [0, 1, 2])

      yield* sandbox.writeFile("src/deep/b.ts", "b")
      assert.deepStrictEqual(yield* sandbox.list("."), [
        { name: "README.md", type: "file" },
        { name: "bin", type: "directory" },
        { name: "src", type: "directory" }
      ])
      assert.deepStrictEqual(yield* sandbox.list("src"), [
        { name: "a.ts", type: "file" },
        { name: "deep", type: "directory" }
      ])
      const info = yield* sandbox.stat("src/deep/b.ts")
      assert.deepStrictEqual([info.type, info.size], ["file", 1])
      assert.deepStrictEqual((yield* sandbox.stat("src")).type, "directory")

      const notEmpty = yield* Effect.flip(sandbox.remove("src"))
      assert.strictEqual(notEmpty.message, "remove src: directory not empty")
      yield* sandbox.remove("src/a.ts")
      yield* sandbox.remove("src", { recursive: true })
      assert.deepStrictEqual((yield* sandbox.list(".")).map((entry) => entry.name), ["README.md", "bin"])
      assert.strictEqual((yield* Effect.flip(sandbox.readFile("src/deep/b.ts")))._tag, "FileNotFoundError")
    }))

  it.effect("fails with the same typed errors as a host sandbox", () =>
    Effect.gen(function*() {
      const sandbox = yield* memory
      const attempts: Array<Effect.Effect<unknown, Sandbox.SandboxError>> = [
        sandbox.readFile("nope.txt"),
        sandbox.readFile("src"),
        sandbox.list("README.md"),
        sandbox.writeFile("src", "x"),
        sandbox.writeFile("README.md/x", "x"),
        sandbox.remove("."),
        sandbox.readFile("../etc/passwd"),
        sandbox.writeFile("/etc/passwd", "x"),
        sandbox.list(".."),
        sandbox.exec({ command: "ls" })
      ]
      const messages = yield* Effect.forEach(
        attempts,
        (effect) => Effect.map(Effect.flip(effect), (error) => `${error._tag}: ${error.message}`)
      )
      assert.deepStrictEqual(messages, [
        "FileNotFoundError: no such file or directory: nope.txt",
        "FileSystemError: read src: is a directory",
        "FileSystemError: list README.md: not a directory",
        "FileSystemError: write src: is a directory",
        "FileSystemError: write README.md/x: not a directory",
        "FileSystemError: remove .: the workspace root cannot be removed",
        "PathEscapeError: path escapes the workspace: ../etc/passwd (it resolves outside the workspace)",
        "PathEscapeError: path escapes the workspace: /etc/passwd (it resolves outside the workspace)",
        "PathEscapeError: path escapes the workspace: .. (it resolves outside the workspace)",
        "NotSupportedError: exec is not supported: the in-memory sandbox cannot run commands"
      ])
    }))

  it.effect("each layer build starts from its own files", () =>
    Effect.gen(function*() {
      const first = yield* memory
      yield* first.writeFile("new.txt", "x")
      const second = yield* memory
      assert.isTrue(Exit.isFailure(yield* Effect.exit(second.readFile("new.txt"))))
    }))
})
