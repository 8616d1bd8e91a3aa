/**
 * `effect-agent` run inside the test process (see `inProcess.ts`): the
 * checks made before a run starts, what the command shows of retries and
 * failures, and what it draws on a terminal.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import * as TestServer from "../providers/TestServer.ts"
import { runCommand } from "./inProcess.ts"

const live = (name: string, test: () => Effect.Effect<void, unknown, FileSystem.FileSystem | import("effect").Scope.Scope>) =>
  it.live(name, () => test().pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 30_000)

const tempDir = Effect.flatMap(
  Effect.service(FileSystem.FileSystem),
  (fs) => fs.makeTempDirectoryScoped({ prefix: "effect-agent-cmd-" })
)

const noTools = ["--sandbox", "none", "--tools", "none"]

describe("before the run", () => {
  live("a missing key: exit 22 and a sentence, for every provider, and no request goes out", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const server = yield* TestServer.start(() => Effect.die("no request was expected"))
      for (
        const [args, message] of [
          [[], "OPENAI_API_KEY is not set; pass --api-key-env NAME, or --base-url for a server that needs no key"],
          [
            ["--provider", "openai-responses"],
            "OPENAI_API_KEY is not set; pass --api-key-env NAME, or --base-url for a server that needs no key"
          ],
          [
            ["--provider", "anthropic", "--base-url", server.baseUrl],
            "ANTHROPIC_API_KEY is not set; pass --api-key-env NAME to read the key from another variable"
          ],
          [
            ["--api-key-env", "MY_KEY", "--base-url", server.baseUrl],
            "MY_KEY is not set; set it, or pass --api-key-env NAME to read the key from another variable"
          ]
        ] as const
      ) {
        const out = yield* runCommand(["run", ...noTools, ...args, "--json", "--task", "hi"], { cwd: dir })
        assert.strictEqual(out.code, 22, out.stderr)
        assert.strictEqual(out.stderr, `effect-agent: ${message}\n`)
        assert.deepStrictEqual(JSON.parse(out.stdout).error, { _tag: "CliFailure", message })
      }
      assert.strictEqual(server.requests.length, 0)
    }))
})
