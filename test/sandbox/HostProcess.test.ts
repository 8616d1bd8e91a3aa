/**
 * HostProcess: a host program started with the sandbox's hygiene (what the
 * supervisor's external CLI workers use): only the allowlisted environment,
 * no descriptor but 0, 1 and 2, output capped, failures in a few words.
 */
import { assert, describe, it } from "@effect/vitest"
import { PlatformError } from "effect"
import { HostProcess } from "effect-agent/sandbox"
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

describe("HostProcess", () => {
  it("environment: the allowlisted variables that are set, with the extra ones over them, and nothing else", () => {
    const before = { ...process.env }
    try {
      process.env.HOST_PROCESS_KEPT = "kept"
      process.env.HOST_PROCESS_SECRET = "secret"
      delete process.env.HOST_PROCESS_UNSET
      assert.deepStrictEqual(
        HostProcess.environment(["HOST_PROCESS_KEPT", "HOST_PROCESS_UNSET"], { LANG: "C" }),
        { HOST_PROCESS_KEPT: "kept", LANG: "C" }
      )
      assert.deepStrictEqual(HostProcess.environment(["HOST_PROCESS_KEPT"], { HOST_PROCESS_KEPT: "over" }), {
        HOST_PROCESS_KEPT: "over"
      })
    } finally {
      process.env = before
    }
  })

  it("closingInherited: the program runs with its arguments and without the descriptors it inherited", () => {
    const env = HostProcess.environment(["PATH"])
    const script = "for fd in 3 4 5; do [ -e /proc/$$/fd/$fd ] && echo \"open $fd\"; done; echo \"$1\""
    const [program, ...args] = HostProcess.closingInherited(["sh", "-c", script, "sh", "it ran"], env)
    // fd 3 and 4 inherited, as a shell's `3</path/to/key` or a job runner's pipe would be
    const direct = spawnSync("sh", ["-c", script, "sh", "it ran"], { env, stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"] })
    assert.strictEqual(direct.stdout.toString(), "open 3\nopen 4\nit ran\n")
    const closed = spawnSync(program, args, { env, stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"] })
    assert.strictEqual(closed.stdout.toString(), "it ran\n", closed.stderr.toString())
  })

  it("programExists: a name on PATH, a path from the working directory, and a missing program", () => {
    const env = HostProcess.environment(["PATH"])
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "effect-agent-host-process-"))
    try {
      Fs.writeFileSync(Path.join(dir, "tool"), "#!/bin/sh\n", { mode: 0o755 })
      assert.isTrue(HostProcess.programExists("sh", env, dir))
      assert.isTrue(HostProcess.programExists("./tool", env, dir))
      assert.isFalse(HostProcess.programExists("./missing", env, dir))
      assert.isFalse(HostProcess.programExists("effect-agent-no-such-program", env, dir))
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("CappedOutput keeps the start and the end up to its cap, and says how much it dropped", () => {
    const output = new HostProcess.CappedOutput(8)
    output.push(new TextEncoder().encode("abcd"))
    assert.strictEqual(output.text(), "abcd")
    output.push(new TextEncoder().encode("efghijklmnop"))
    assert.strictEqual(output.dropped, 8)
    assert.strictEqual(output.text(), "abcd\n[... 8 bytes truncated ...]\nmnop")
  })

  it("describeFailure: the errno code's meaning, else the reason's tag", () => {
    const failure = (cause: unknown) =>
      PlatformError.systemError({ _tag: "PermissionDenied", module: "FileSystem", method: "open", cause })
    assert.strictEqual(HostProcess.describeFailure(failure({ code: "EACCES" })), "permission denied")
    assert.strictEqual(HostProcess.describeFailure(failure(undefined)), "PermissionDenied")
  })
})
