/**
 * Who else can read what the stores keep (issue 29, L3): a transcript holds
 * every prompt and tool result, so every directory and file a store creates
 * is its owner's alone (0700 and 0600), whatever the process's umask: the
 * file checkpoint store (`CheckpointStore.fileSystem`, under `Session`), the
 * agent server's store, and the command's session directories.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, FileSystem, Layer, Scope } from "effect"
import { CheckpointStore, Session } from "effect-agent/session"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { runCommand } from "../cli/inProcess.ts"
import { agentLayer, baseUrl, serverLayer } from "../server/support.ts"

/** Runs `effect` with the most permissive umask (0): nothing but the store's own modes keeps others out. */
const withOpenUmask = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => process.umask(0)),
    () => effect,
    (previous) => Effect.sync(() => void process.umask(previous))
  )

/** Every directory and file under `root` (not `root` itself), with its permission bits in octal. */
const modesUnder = (root: string): Record<string, string> => {
  const out: Record<string, string> = {}
  const walk = (dir: string) => {
    for (const name of Fs.readdirSync(dir).sort()) {
      const at = Path.join(dir, name)
      const stat = Fs.lstatSync(at)
      out[Path.relative(root, at) + (stat.isDirectory() ? "/" : "")] = (stat.mode & 0o777).toString(8)
      if (stat.isDirectory()) walk(at)
    }
  }
  walk(root)
  return out
}

/** The entries of `modes` that are not their owner's alone. */
const open = (modes: Record<string, string>) =>
  Object.entries(modes).filter(([name, mode]) => mode !== (name.endsWith("/") ? "700" : "600"))

const live = (name: string, test: () => Effect.Effect<void, unknown, FileSystem.FileSystem | Scope.Scope>) =>
  it.live(name, () => withOpenUmask(test()).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

const tempDir = Effect.flatMap(Effect.service(FileSystem.FileSystem), (fs) => fs.makeTempDirectoryScoped())

describe("world-readable checkpoint attack", () => {
  live("the file checkpoint store (under Session) creates its directories 0700 and its files 0600", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* CheckpointStore.fileSystem(Path.join(dir, "nested", "store"))
      yield* Session.run({ id: "s1", prompt: "steps 2 0" }).pipe(Effect.provideService(CheckpointStore.CheckpointStore, store), Effect.provide(agentLayer))
      const modes = modesUnder(dir)
      assert.includeMembers(Object.keys(modes), ["nested/", "nested/store/", "nested/store/s1/", "nested/store/s1/head.json"])
      assert.deepStrictEqual(open(modes), [])
    }))

  live("the agent server's store, in a directory that exists already, keeps checkpoints 0700/0600 too", () =>
    Effect.gen(function*() {
      // The store's directory exists (0755, as a user makes one): what the server creates in it is its own.
      const directory = yield* tempDir
      Fs.chmodSync(directory, 0o755)
      const server = yield* Scope.make()
      const url = yield* Effect.provideContext(
        baseUrl,
        yield* Layer.buildWithScope(serverLayer({ directory }, agentLayer), server)
      )
      const created = yield* Effect.promise(() =>
        fetch(`${url}/sessions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ task: "hello", id: "private" })
        })
      )
      assert.strictEqual(created.status, 201)
      // The run's end is the end of its events stream.
      yield* Effect.promise(() => fetch(`${url}/sessions/private/events`).then((response) => response.text()))
      yield* Scope.close(server, Exit.void)
      const modes = modesUnder(directory)
      assert.includeMembers(Object.keys(modes), [
        "checkpoints/",
        "checkpoints/private/",
        "checkpoints/private/head.json",
        "sessions/private/session.json",
        "sessions/private/trajectory.ndjson"
      ])
      assert.deepStrictEqual(open(modes), [])
    }))

  live("the command's session directory (run.json, the checkpoint, the trajectory) is 0700/0600", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const home = yield* tempDir
      yield* fs.writeFileString(`${home}/script.json`, JSON.stringify({ turns: [{ text: "Done." }] }))
      const session = `${home}/sessions/s`
      const ran = yield* runCommand(
        ["run", "--provider", "scripted", "--script", `${home}/script.json`, "--tools", "none", "--task", "go",
          "--session-dir", session],
        { cwd: home }
      )
      assert.strictEqual(ran.code, 0, ran.stderr)
      const modes = modesUnder(`${home}/sessions`)
      assert.includeMembers(Object.keys(modes), [
        "s/",
        "s/run.json",
        "s/trajectory.ndjson",
        "s/checkpoint/",
        "s/checkpoint/head.json"
      ])
      assert.deepStrictEqual(open(modes), [])
    }))
})
