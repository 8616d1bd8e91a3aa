import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import { Sandbox } from "effect-agent/sandbox"
import * as Fs from "node:fs"
import * as Net from "node:net"
import { bubblewrapLayer, localLayer, makeWorkspace, outsideState, type Workspace } from "./fixtures.ts"
import { needsBubblewrap, sandboxNode } from "../bubblewrap.ts"

/** Every way out of the workspace we know of, files and directories alike. */
const escapes = (workspace: Workspace): Array<string> => [
  "..",
  "../outside/secret.txt",
  "sub/../../outside/secret.txt",
  `${workspace.outside}/secret.txt`,
  workspace.outside,
  "/etc/passwd",
  "link-out", // symlink to a file outside
  "dir-out", // symlink to a directory outside
  "dir-out/secret.txt", // existing file under a symlinked parent
  "dir-out/new.txt", // file that does not exist yet under a symlinked parent
  "dir-out/deeper/new.txt", // missing directories under a symlinked parent
  "dangling-out" // dangling symlink whose target is outside
]

type Operation = (sandbox: Sandbox.Sandbox["Service"], path: string) => Effect.Effect<unknown, Sandbox.SandboxError>

const operations: Record<string, Operation> = {
  readFile: (sandbox, path) => sandbox.readFile(path),
  readFileBytes: (sandbox, path) => sandbox.readFileBytes(path),
  writeFile: (sandbox, path) => sandbox.writeFile(path, "pwned"),
  list: (sandbox, path) => sandbox.list(path),
  stat: (sandbox, path) => sandbox.stat(path),
  remove: (sandbox, path) => sandbox.remove(path, { recursive: true }),
  "exec cwd": (sandbox, path) => sandbox.exec({ command: "echo pwned > pwned.txt", cwd: path })
}

/** Runs every operation on every escape path and returns what did not fail with a PathEscapeError naming the path. */
const attemptEscapes = (workspace: Workspace) =>
  Effect.gen(function*() {
    const sandbox = yield* Sandbox.Sandbox
    const leaks: Array<string> = []
    for (const [name, operation] of Object.entries(operations)) {
      for (const path of escapes(workspace)) {
        const exit = yield* Effect.exit(operation(sandbox, path))
        const error = Exit.isFailure(exit) ? exit.cause.reasons[0] : undefined
        const ok = error?._tag === "Fail" && error.error._tag === "PathEscapeError" && error.error.path === path
        if (!ok) leaks.push(`${name}(${path}): ${Exit.isSuccess(exit) ? "succeeded" : String(exit.cause)}`)
      }
    }
    return leaks
  })

const securitySuite = (
  kind: "local" | "bubblewrap",
  layer: (root: string) => Layer.Layer<Sandbox.Sandbox, Sandbox.SandboxError>
) =>
  Effect.gen(function*() {
    const workspace = yield* makeWorkspace()
    const leaks = yield* attemptEscapes(workspace).pipe(Effect.provide(layer(workspace.root)))
    assert.deepStrictEqual(leaks, [], `${kind}: escapes not refused`)
    assert.deepStrictEqual(yield* outsideState(workspace), { entries: ["secret.txt"], secret: "secret" })
  })

describe("Sandbox.local security", () => {
  it.live("refuses every escape (.., absolute, symlink, symlinked parent, dangling link) for every operation", () =>
    securitySuite("local", localLayer).pipe(Effect.provide(NodeServices.layer)))

  it.live("names the path and says how it escapes", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      const sandbox = yield* Effect.provide(Effect.service(Sandbox.Sandbox), localLayer(workspace.root))
      const lexical = yield* Effect.flip(sandbox.readFile("../outside/secret.txt"))
      assert.deepStrictEqual(
        [lexical._tag, lexical.path, lexical.message],
        [
          "PathEscapeError",
          "../outside/secret.txt",
          "path escapes the workspace: ../outside/secret.txt (it resolves outside the workspace)"
        ]
      )
      const link = yield* Effect.flip(sandbox.readFile("link-out"))
      assert.strictEqual(
        link.message,
        `path escapes the workspace: link-out (it leads to ${workspace.outside}/secret.txt through a symbolic link)`
      )
      const parent = yield* Effect.flip(sandbox.writeFile("dir-out/new.txt", "x"))
      assert.strictEqual(
        parent.message,
        `path escapes the workspace: dir-out/new.txt (it leads to ${workspace.outside} through a symbolic link)`
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("allows what stays inside: absolute paths under the root, links inside, .. that comes back", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      const sandbox = yield* Effect.provide(Effect.service(Sandbox.Sandbox), localLayer(workspace.root))
      assert.strictEqual(sandbox.kind, "local")
      assert.strictEqual(sandbox.root, workspace.root)
      assert.strictEqual(yield* sandbox.readFile(`${workspace.root}/inside.txt`), "inside")
      assert.strictEqual(yield* sandbox.readFile("link-in"), "inside")
      assert.strictEqual(yield* sandbox.readFile("sub/../inside.txt"), "inside")
      yield* sandbox.writeFile("new/deep/file.txt", "made")
      assert.strictEqual(yield* sandbox.readFile("new/deep/file.txt"), "made")
      const result = yield* sandbox.exec({ command: "pwd", cwd: "new/deep" })
      assert.strictEqual(result.stdout, `${workspace.root}/new/deep\n`)
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("Sandbox.bubblewrap security", () => {
  needsBubblewrap(it.live)("refuses every escape for every operation", () =>
    securitySuite("bubblewrap", bubblewrapLayer).pipe(Effect.provide(NodeServices.layer)))

  needsBubblewrap(it.live)("commands cannot write outside the workspace; /tmp is private", () =>
    Effect.gen(function*() {
      // Under /var/tmp, not /tmp: the sandbox's private /tmp would hide the outside directory. It is granted
      // read-only, so that commands see it (else nothing outside the workspace is there to write to).
      const workspace = yield* makeWorkspace("/var/tmp")
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace.root, { allowRead: [workspace.outside] })
      )
      assert.strictEqual(sandbox.kind, "bubblewrap")
      const marker = `effect-agent-private-${process.pid}-${Date.now()}`
      const attempt = (label: string, target: string) =>
        `echo pwned > ${target} && echo "${label}=written" || echo "${label}=refused"`
      const result = yield* sandbox.exec({
        command: [
          attempt("outside", `${workspace.outside}/new.txt`),
          attempt("overwrite", `${workspace.outside}/secret.txt`),
          attempt("through-link", "dir-out/through-link.txt"),
          attempt("tmp", `/tmp/${marker}`),
          attempt("inside", "kept.txt")
        ].join("\n")
      })
      assert.strictEqual(
        result.stdout,
        "outside=refused\noverwrite=refused\nthrough-link=refused\ntmp=written\ninside=written\n"
      )
      assert.match(result.stderr, /Read-only file system/)
      assert.deepStrictEqual(yield* outsideState(workspace), { entries: ["secret.txt"], secret: "secret" })
      assert.strictEqual(yield* sandbox.readFile("kept.txt"), "pwned\n")
      const fs = yield* Effect.promise(() => import("node:fs"))
      assert.isFalse(fs.existsSync(`/tmp/${marker}`), "a write to /tmp inside the sandbox reached the host's /tmp")
    }).pipe(Effect.provide(NodeServices.layer)))

  needsBubblewrap(it.live)("no network from inside unless asked", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace()
      const net = yield* Effect.promise(() => import("node:net"))
      const server = net.createServer((socket) => socket.end("hello from the host\n"))
      yield* Effect.acquireRelease(
        Effect.callback<void>((resume) => {
          server.listen(0, "127.0.0.1", () => resume(Effect.void))
        }),
        () => Effect.sync(() => server.close())
      )
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      // bash's /dev/tcp: connect to the host's server and print what it says.
      const connect = `bash -c 'exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3'`
      const isolated = yield* Effect.provide(Effect.service(Sandbox.Sandbox), bubblewrapLayer(workspace.root))
      const refused = yield* isolated.exec({ command: connect, timeout: "10 seconds" })
      assert.deepStrictEqual([refused.exitCode, refused.stdout], [1, ""])
      assert.match(refused.stderr, /Connection refused/)
      // /proc/net shows the command's own network namespace: only loopback.
      const interfaces = yield* isolated.exec({ command: "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '" })
      assert.strictEqual(interfaces.stdout, "lo\n")
      const networked = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace.root, { network: true })
      )
      const reached = yield* networked.exec({ command: connect, timeout: "10 seconds" })
      assert.deepStrictEqual([reached.exitCode, reached.stdout], [0, "hello from the host\n"])
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("Sandbox.bubblewrap and the host's Unix sockets", () => {
  /** A Unix socket server that greets whoever connects; closed with the scope. */
  const serve = (name: string, address: string) =>
    Effect.acquireRelease(
      Effect.callback<Net.Server>((resume) => {
        const server = Net.createServer((socket) => socket.end(`hello from ${name}\n`))
        server.once("error", (error) => resume(Effect.die(error)))
        server.listen(address, () => resume(Effect.succeed(server)))
      }),
      (server) => Effect.callback<void>((resume) => void server.close(() => resume(Effect.void)))
    ).pipe(Effect.as({ name, address }))

  /** A command that connects to each address and prints `name=connected` or `name=refused`. */
  const probe = (servers: ReadonlyArray<{ readonly name: string; readonly address: string }>) =>
    [sandboxNode.program, "-e", `
      const net = require("node:net")
      const servers = ${JSON.stringify(servers)}
      const attempt = ({ name, address }) => new Promise((resolve) => {
        const socket = net.connect(address)
        socket.setTimeout(3000, () => { socket.destroy(); resolve(name + "=refused") })
        socket.once("data", () => { socket.destroy(); resolve(name + "=connected") })
        socket.once("error", () => resolve(name + "=refused"))
      })
      Promise.all(servers.map(attempt)).then((lines) => console.log(lines.join("\\n")))
    `] as const

  /** A writable directory for a socket under /run (or /var/run), where host services keep theirs. */
  const runDirectory = ["/run", "/var/run"].find((dir) => {
    try {
      Fs.accessSync(dir, Fs.constants.W_OK)
      return true
    } catch {
      return false
    }
  })
  if (runDirectory === undefined) console.warn("no writable /run or /var/run: the socket there is not tried")

  needsBubblewrap(it.live)("with the network off, no host socket is reachable: /run, /tmp, elsewhere, abstract", () =>
    Effect.gen(function*() {
      // Under /var/tmp, not /tmp: a socket in the workspace is then visible inside the sandbox but for the fix.
      const workspace = yield* makeWorkspace("/var/tmp")
      const tag = `${process.pid}-${Date.now()}`
      const tmp = Fs.mkdtempSync("/tmp/effect-agent-sock-")
      const run = runDirectory === undefined ? undefined : Fs.mkdtempSync(`${runDirectory}/effect-agent-sock-`)
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => [tmp, run].forEach((dir) => dir && Fs.rmSync(dir, { recursive: true, force: true })))
      )
      const servers = [
        yield* serve("tmp", `${tmp}/s.sock`),
        ...(run === undefined ? [] : [yield* serve("run", `${run}/s.sock`)]),
        // like ~/.ssh's ControlMaster sockets or ~/.docker/run/docker.sock: anywhere on the host
        yield* serve("elsewhere", `${workspace.outside}/s.sock`),
        yield* serve("workspace", `${workspace.root}/dev.sock`),
        yield* serve("abstract", `\0effect-agent-${tag}`)
      ]
      const connected = servers.map(({ name }) => `${name}=connected`).join("\n") + "\n"
      // The same command outside the sandbox reaches every one of them.
      const local = yield* Effect.provide(Effect.service(Sandbox.Sandbox), localLayer(workspace.root))
      assert.strictEqual((yield* local.exec({ command: probe(servers) })).stdout, connected)
      // The directories of the sockets are granted (and /tmp's too, which the private /tmp hides anyway): the
      // sockets are in the view, and only the hiding keeps them out of reach.
      const allowRead = [...sandboxNode.allowRead, workspace.outside, tmp, ...(run === undefined ? [] : [run])]
      const isolated = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace.root, { allowRead })
      )
      const result = yield* isolated.exec({ command: probe(servers), timeout: "20 seconds" })
      assert.strictEqual(result.stdout, servers.map(({ name }) => `${name}=refused`).join("\n") + "\n", result.stderr)
      // The workspace's other files are still there, and the socket's name too.
      const named = yield* isolated.exec({ command: "cat inside.txt; test -e dev.sock && echo named" })
      assert.strictEqual(named.stdout, "insidenamed\n")
      // With the network on, commands share the host's network namespace, and the sockets their view shows.
      const networked = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace.root, { network: true, allowRead })
      )
      const shared = yield* networked.exec({ command: probe(servers), timeout: "20 seconds" })
      assert.strictEqual(shared.stdout, connected)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})

// The command's state directory (its seal key) is the command's to hide: test/cli/SandboxView.test.ts.
describe("Sandbox.bubblewrap hides host paths", () => {
  needsBubblewrap(it.live)("hide: files and directories, inside the workspace too (file operations refuse them)", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace("/var/tmp")
      Fs.mkdirSync(`${workspace.root}/private`)
      Fs.writeFileSync(`${workspace.root}/private/k.txt`, "private")
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace.root, {
          allowRead: [workspace.outside],
          hide: [`${workspace.outside}/secret.txt`, `${workspace.root}/private`, `${workspace.outside}/missing`]
        })
      )
      const result = yield* sandbox.exec({
        command: `cat ${workspace.outside}/secret.txt; ls -A private; cat private/k.txt; cat inside.txt`
      })
      assert.strictEqual(result.stdout, "inside")
      const refused = yield* Effect.flip(sandbox.readFile("private/k.txt"))
      assert.deepStrictEqual(
        [refused._tag, refused.message],
        ["FileSystemError", "resolve private/k.txt: the path is hidden from the sandbox"]
      )
      assert.strictEqual((yield* Effect.flip(sandbox.writeFile("private/new.txt", "x")))._tag, "FileSystemError")
      assert.strictEqual((yield* Effect.flip(sandbox.list("private")))._tag, "FileSystemError")
      assert.isFalse(Fs.existsSync(`${workspace.root}/private/new.txt`))
      assert.strictEqual(Fs.readFileSync(`${workspace.outside}/secret.txt`, "utf8"), "secret")
    }).pipe(Effect.provide(NodeServices.layer)))

  needsBubblewrap(it.live)("a hidden directory that holds the workspace hides all but the workspace, granted too", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace("/var/tmp")
      const base = workspace.root.slice(0, workspace.root.lastIndexOf("/"))
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace.root, { allowRead: [base], hide: [base] })
      )
      const result = yield* sandbox.exec({
        command: `cat inside.txt; echo; ls -A ${base}; cat ${workspace.outside}/secret.txt`
      })
      assert.strictEqual(result.stdout, "inside\nworkspace\n")
      assert.strictEqual(yield* sandbox.readFile("inside.txt"), "inside")
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("issue 29, attack 3: an agent sees its workspace, the system and what is granted, not the host's sessions", () => {
  /** Sets environment variables for the scope. */
  const withEnv = (vars: Record<string, string>) =>
    Effect.acquireRelease(
      Effect.sync(() => {
        const before = Object.fromEntries(Object.keys(vars).map((name) => [name, process.env[name]]))
        Object.assign(process.env, vars)
        return before
      }),
      (before) =>
        Effect.sync(() => {
          for (const [name, value] of Object.entries(before)) {
            if (value === undefined) delete process.env[name]
            else process.env[name] = value
          }
        })
    )

  /**
   * A host as the docs leave it: a home directory with the command's sessions (`~/.agent-sessions`, as the
   * command's page suggests), a key file, and the workspace; a server's store beside it, and a directory to grant.
   * Under /var/tmp, not /tmp: the sandbox's private /tmp would hide it all before the fix too.
   */
  const host = Effect.gen(function*() {
    const base = Fs.realpathSync(Fs.mkdtempSync("/var/tmp/effect-agent-host-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(base, { recursive: true, force: true })))
    const home = `${base}/home/alice`
    const files: Record<string, string> = {
      [`${home}/.agent-sessions/fix/trajectory.ndjson`]: "prompt: deploy with password OTHER-SESSION-SECRET\n",
      [`${home}/.agent-sessions/fix/run.json`]: "{}\n",
      [`${home}/.config/openai/key`]: "sk-KEY-FILE-SECRET\n",
      [`${home}/.local/state/effect-agent/key`]: "SEAL-KEY-SECRET\n",
      [`${base}/srv/store/sessions/s-1/trajectory.ndjson`]: "prompt: the token is STORE-SECRET\n",
      [`${base}/shared/notes.txt`]: "granted notes\n",
      [`${home}/projects/app/README.md`]: "the app\n"
    }
    for (const [file, text] of Object.entries(files)) {
      Fs.mkdirSync(file.slice(0, file.lastIndexOf("/")), { recursive: true })
      Fs.writeFileSync(file, text, { mode: 0o600 })
    }
    yield* withEnv({ HOME: home, XDG_STATE_HOME: `${home}/.local/state` })
    return { base, home, workspace: `${home}/projects/app`, store: `${base}/srv/store` }
  })

  /** Prints each file's content or `-`, so that the output says which could be read. */
  const readEach = (files: ReadonlyArray<string>) => files.map((file) => `cat ${file} 2>/dev/null || echo -`).join("; ")

  needsBubblewrap(it.live)("a bash call reads no other session, server store or key file; the workspace works", () =>
    Effect.gen(function*() {
      const { base, home, store, workspace } = yield* host
      const sandbox = yield* Effect.provide(Effect.service(Sandbox.Sandbox), bubblewrapLayer(workspace))
      const secrets = [
        `${home}/.agent-sessions/fix/trajectory.ndjson`,
        `${store}/sessions/s-1/trajectory.ndjson`,
        `${home}/.config/openai/key`,
        `${home}/.local/state/effect-agent/key`
      ]
      const probe = yield* sandbox.exec({
        command: ["bash", "-c", `${readEach(secrets)}; ls -A ~ ${base} 2>&1 | sed 's/^ls: //'`]
      })
      assert.strictEqual(
        probe.stdout,
        "-\n-\n-\n-\n" +
          // HOME is an empty directory of the sandbox's own; of the host's directories, only the way to the workspace
          `${base}:\nhome\n\n${home}:\nprojects\n`
      )
      // The workspace works, with the usual tools.
      const work = yield* sandbox.exec({
        command: [
          "bash",
          "-c",
          "cat README.md; echo fixed > fix.txt; grep -c fixed fix.txt; sed s/the/an/ README.md; " +
            "awk 'END { print NR }' README.md; ls | sort | tr '\\n' ' '; echo; echo x > ~/.cache-probe && echo home-writable"
        ]
      })
      assert.strictEqual(work.stdout, "the app\n1\nan app\n1\nREADME.md fix.txt \nhome-writable\n", work.stderr)
      assert.strictEqual(Fs.readFileSync(`${workspace}/fix.txt`, "utf8"), "fixed\n")
      // What the sandbox wrote in its home went nowhere on the host.
      assert.isFalse(Fs.existsSync(`${home}/.cache-probe`))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  needsBubblewrap(it.live)("a granted path is readable (read-only, or writable when asked); the command's own session and store stay hidden inside it", () =>
    Effect.gen(function*() {
      const { base, home, store, workspace } = yield* host
      const mine = `${home}/.agent-sessions/fix`
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        // The whole home and the store's parent granted; the command hides its own session, store and state
        // directory (its seal key).
        bubblewrapLayer(workspace, {
          allowRead: [home, `${base}/srv`],
          allowWrite: [`${base}/shared`],
          hide: [mine, store, `${home}/.local/state/effect-agent`]
        })
      )
      const result = yield* sandbox.exec({
        command: [
          "bash",
          "-c",
          `${readEach([`${base}/shared/notes.txt`, `${home}/.config/openai/key`, `${mine}/trajectory.ndjson`,
            `${store}/sessions/s-1/trajectory.ndjson`, `${home}/.local/state/effect-agent/key`])}; ` +
            `ls -A ${mine} ${store}; echo more >> ${base}/shared/notes.txt && echo shared-written; ` +
            `echo x > ${home}/planted 2>/dev/null || echo home-refused`
        ]
      })
      assert.strictEqual(
        result.stdout,
        // granted: the notes and the key file (the operator granted all of the home); hidden: the session, the
        // store and the seal key, each an empty directory
        "granted notes\nsk-KEY-FILE-SECRET\n-\n-\n-\n" + `${mine}:\n\n${store}:\nshared-written\nhome-refused\n`,
        result.stderr
      )
      assert.strictEqual(Fs.readFileSync(`${base}/shared/notes.txt`, "utf8"), "granted notes\nmore\n")
      assert.isFalse(Fs.existsSync(`${home}/planted`))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  needsBubblewrap(it.live)("a grant of / shows the host as it is, but for /dev, /proc, the hidden paths and /etc's secrets", () =>
    Effect.gen(function*() {
      const { home, workspace } = yield* host
      const mine = `${home}/.agent-sessions/fix`
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace, { allowRead: ["/"], hide: [mine] })
      )
      const exec = sandbox.exec({
        command: [
          "bash",
          "-c",
          `${readEach([`${home}/.config/openai/key`, `${mine}/trajectory.ndjson`, "/etc/shadow"])}; ` +
            // the sandbox's own processes only: bash, the pipeline, bubblewrap's init
            `ls /proc | grep -c '^[0-9]' | awk '{ print ($1 < 10) ? "own /proc" : "host /proc" }'; ` +
            `echo x > ${home}/planted 2>/dev/null || echo read-only`
        ]
      })
      // With all of / shown, every host socket is covered; one that another process (a browser test beside this
      // one) removes between the lookup and bwrap's start fails bwrap's setup before the command runs: the
      // narrow window bubblewrap.ts documents. Such a start is made again (at most twice); nothing else is.
      const result = yield* exec.pipe(Effect.repeat({
        while: (result) => result.stdout === "" && /^bwrap: Can't (create file|mkdir parents)/.test(result.stderr),
        times: 2
      }))
      assert.strictEqual(result.stdout, "sk-KEY-FILE-SECRET\n-\n-\nown /proc\nread-only\n", result.stderr)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  needsBubblewrap(it.live)("the secrets of /etc stay hidden, from an agent run as root too", () =>
    Effect.gen(function*() {
      const workspace = yield* makeWorkspace("/var/tmp")
      const sandbox = yield* Effect.provide(Effect.service(Sandbox.Sandbox), bubblewrapLayer(workspace.root))
      const result = yield* sandbox.exec({
        command: ["bash", "-c", `grep -c '^root:' /etc/passwd; ${readEach(["/etc/shadow", "/etc/gshadow"])}`]
      })
      assert.strictEqual(result.stdout, "1\n-\n-\n")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  needsBubblewrap(it.live)("a command run as root can neither unmount a cover nor remount the view writable", () =>
    Effect.gen(function*() {
      const { base, home, workspace } = yield* host
      const mine = `${home}/.agent-sessions/fix`
      const sandbox = yield* Effect.provide(
        Effect.service(Sandbox.Sandbox),
        bubblewrapLayer(workspace, { allowRead: [home], hide: [mine] })
      )
      const result = yield* sandbox.exec({
        command: [
          "bash",
          "-c",
          `umount ${mine} 2>/dev/null; ${readEach([`${mine}/trajectory.ndjson`])}; ` +
            `mount -o remount,rw,bind ${home} 2>/dev/null; mount -o remount,rw,bind / 2>/dev/null; ` +
            `echo x > ${home}/planted 2>/dev/null || echo refused`
        ]
      })
      assert.strictEqual(result.stdout, "-\nrefused\n")
      assert.isFalse(Fs.existsSync(`${home}/planted`))
      assert.isTrue(Fs.existsSync(base))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
