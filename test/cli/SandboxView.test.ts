/**
 * What the agent of `effect-agent run` and `serve` sees of the host under
 * bubblewrap (issue 29, attack 3): its workspace, the system's directories,
 * and the paths granted with `--allow-read` and `--allow-write`; never the
 * host's other sessions, the server's store or keys, and never the
 * command's own session directory or store, even inside a granted path.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import { needsBubblewrap } from "../bubblewrap.ts"
import { readSse } from "../server/support.ts"
import { builtCommand } from "./build.ts"
import { runCommand } from "./inProcess.ts"
import { type Services, spawnProgram } from "./support.ts"

const live = (name: string, test: () => Effect.Effect<void, unknown, Services>) =>
  needsBubblewrap(it.live)(name, () => test().pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

/** The built command (the bundle the package installs). */
let main = ""
beforeAll(async () => {
  main = await builtCommand()
})

/**
 * A host as the docs leave it, under /var/tmp (the sandbox's /tmp is private): a home directory holding the
 * workspace, another session's directory (`~/.agent-sessions/other`, as docs/command.md suggests) with a secret in its
 * prompt, a key file, and a script whose one `bash` call prints what it can read of `paths`.
 */
const host = (paths: (place: { readonly base: string; readonly home: string }) => ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const base = Fs.realpathSync(Fs.mkdtempSync("/var/tmp/effect-agent-view-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(base, { recursive: true, force: true })))
    const home = `${base}/home`
    const files: Record<string, string> = {
      [`${home}/.agent-sessions/other/trajectory.ndjson`]: "deploy with password OTHER-SESSION-SECRET\n",
      [`${home}/.config/openai/key`]: "sk-KEY-FILE-SECRET\n",
      [`${home}/work/a.txt`]: "hello\n"
    }
    for (const [file, text] of Object.entries(files)) {
      Fs.mkdirSync(file.slice(0, file.lastIndexOf("/")), { recursive: true })
      Fs.writeFileSync(file, text, { mode: 0o600 })
    }
    const command = paths({ base, home }).map((path) => `cat ${path} 2>/dev/null || echo "- ${path}"`).join("; ")
    const script = `${base}/script.json`
    Fs.writeFileSync(
      script,
      JSON.stringify({ turns: [{ toolCalls: [{ name: "bash", params: { command } }] }, { text: "Done." }] })
    )
    return { base, home, workspace: `${home}/work`, script }
  })

/** The text of the first tool result in a list of events. */
const toolResult = (events: ReadonlyArray<any>): string =>
  events.find((event) => event._tag === "ToolExecutionEnd").result.content[0].text

/** `run` on the host's script, in its workspace under bubblewrap, every call approved, its events in a file. */
const run = (
  place: { readonly base: string; readonly script: string; readonly workspace: string },
  ...more: ReadonlyArray<string>
) => runIn(place, {}, ...more)

/** `run` as {@link run}, with more variables in the command's environment. */
const runIn = (
  place: { readonly base: string; readonly script: string; readonly workspace: string },
  env: Record<string, string>,
  ...more: ReadonlyArray<string>
) =>
  Effect.gen(function*() {
    const out = yield* runCommand([
      "run",
      "--provider",
      "scripted",
      "--script",
      place.script,
      "--workspace",
      place.workspace,
      "--sandbox",
      "bubblewrap",
      "--approve",
      "all",
      "--task",
      "look around",
      "--emit-jsonl",
      `${place.base}/events.jsonl`,
      ...more
    ], { cwd: place.base, env })
    assert.strictEqual(out.code, 0, out.stderr)
    return toolResult(Fs.readFileSync(`${place.base}/events.jsonl`, "utf8").trim().split("\n").map((line) => JSON.parse(line)))
  })

describe("issue 29, attack 3: the command's agent reads no other session", () => {
  const probed = ({ home }: { readonly home: string }) => [
    `${home}/.agent-sessions/other/trajectory.ndjson`,
    `${home}/.config/openai/key`,
    `${home}/.agent-sessions/mine/run.json`,
    "a.txt"
  ]

  live("run: a bash call reads no other session, no key file and not its own session; the workspace works", () =>
    Effect.gen(function*() {
      const place = yield* host(probed)
      const mine = `${place.home}/.agent-sessions/mine`
      const result = yield* run(place, "--session-dir", mine)
      assert.isTrue(Fs.existsSync(`${mine}/run.json`))
      assert.strictEqual(
        result,
        `- ${place.home}/.agent-sessions/other/trajectory.ndjson\n- ${place.home}/.config/openai/key\n` +
          `- ${mine}/run.json\nhello\n[exit code 0]`
      )
    }))

  live("run --allow-read: what the operator grants is readable, but for the run's own session directory", () =>
    Effect.gen(function*() {
      const place = yield* host(probed)
      const mine = `${place.home}/.agent-sessions/mine`
      // The whole home granted: the other session and the key file are the operator's to give.
      const result = yield* run(place, "--session-dir", mine, "--allow-read", place.home)
      assert.isTrue(Fs.existsSync(`${mine}/run.json`))
      assert.strictEqual(
        result,
        "deploy with password OTHER-SESSION-SECRET\nsk-KEY-FILE-SECRET\n" +
          `- ${mine}/run.json\nhello\n[exit code 0]`
      )
    }))

  live("run: the command's state directory (the key that seals its sessions) is hidden, granted or not", () =>
    Effect.gen(function*() {
      // The command's state directory is its environment's XDG_STATE_HOME/effect-agent; it makes its key there.
      const key = ({ home }: { readonly home: string }) => `${home}/.local/state/effect-agent/secret`
      const probe = (place: { readonly home: string }) => [key(place), `${place.home}/.config/openai/key`]
      const state = (home: string) => ({ XDG_STATE_HOME: `${home}/.local/state` })
      // Not granted: nothing of it is there.
      const place = yield* host(probe)
      const alone = yield* runIn(place, state(place.home), "--session-dir", `${place.base}/sessions/mine`)
      assert.isTrue(Fs.existsSync(key(place)), "the command made its key")
      assert.strictEqual(alone, `- ${key(place)}\n- ${place.home}/.config/openai/key\n[exit code 0]`)
      // Inside a granted directory, read-only or writable: the key's directory is empty; the rest of the grant is
      // there.
      for (const grant of ["--allow-read", "--allow-write"]) {
        const granted = yield* host(probe)
        Fs.writeFileSync(
          `${granted.base}/script.json`,
          JSON.stringify({
            turns: [{
              toolCalls: [{
                name: "bash",
                params: {
                  command: `cat ${key(granted)} 2>/dev/null || echo "- key"; cat ${granted.home}/.config/openai/key; ` +
                    `ls -A ${granted.home}/.local/state/effect-agent`
                }
              }]
            }, { text: "Done." }]
          })
        )
        const result = yield* runIn(
          granted,
          state(granted.home),
          "--session-dir",
          `${granted.base}/sessions/mine`,
          grant,
          granted.home
        )
        assert.isTrue(Fs.existsSync(key(granted)), "the command made its key")
        assert.strictEqual(result, "- key\nsk-KEY-FILE-SECRET\n[exit code 0]", grant)
      }
    }))

  live("serve --store DIR: a session's bash call does not read the store, even inside a granted path", () =>
    Effect.gen(function*() {
      const { base, home, script, workspace } = yield* host(({ base }) => [`${base}/store/sessions/*/trajectory.ndjson`])
      const store = `${base}/store`
      const proc = yield* spawnProgram(process.execPath, [
        main,
        "serve",
        "--provider",
        "scripted",
        "--script",
        script,
        "--workspace",
        workspace,
        "--sandbox",
        "bubblewrap",
        "--approve",
        "all",
        "--allow-read",
        base,
        "--store",
        store,
        "--token-env",
        "AGENT_TOKEN",
        "--port",
        "0"
      ], { cwd: home, env: { AGENT_TOKEN: "view-test-token" } })
      const { url } = JSON.parse(yield* proc.waitFor((line) => line.startsWith("{\"url\"")))
      const headers = { "content-type": "application/json", authorization: "Bearer view-test-token" }
      const created: any = yield* Effect.promise(() =>
        fetch(`${url}/sessions`, { method: "POST", headers, body: JSON.stringify({ task: "look" }) }).then((r) => r.json())
      )
      const read = yield* Effect.promise(async () =>
        readSse(await fetch(`${url}/sessions/${created.id}/events`, { headers }))
      )
      const events = read.messages.map((message) => JSON.parse(message.data))
      // The session's own trajectory is in the store by now (the server wrote the call's start there).
      assert.isTrue(Fs.existsSync(`${store}/sessions/${created.id}/trajectory.ndjson`))
      assert.strictEqual(toolResult(events), `- ${store}/sessions/*/trajectory.ndjson\n[exit code 0]`)
      yield* proc.signal("SIGTERM")
      assert.strictEqual((yield* proc.exit).code, 0)
    }))
})
