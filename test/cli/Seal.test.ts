/**
 * The key that seals session files: made once, owner-only, shared by
 * commands that start at once, and refused when it is not safe.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path } from "effect"
import * as Fs from "node:fs"
import * as Seal from "../../src/cli/internal/Seal.ts"

const withState = <A, E>(test: (state: string) => Effect.Effect<A, E, FileSystem.FileSystem | Path.Path>) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    return yield* test(yield* fs.makeTempDirectoryScoped({ prefix: "effect-agent-seal-" }))
  }).pipe(Effect.scoped, Effect.provide(NodeServices.layer))

describe("Seal", () => {
  it.live("the key is made once, owner-only, and every command (at once too) gets the same", () =>
    withState((state) =>
      Effect.gen(function*() {
        const env = { XDG_STATE_HOME: state, HOME: "/nowhere" }
        const keys = yield* Effect.all([Seal.key(env), Seal.key(env), Seal.key(env)], { concurrency: 3 })
        const file = `${state}/effect-agent/secret`
        assert.strictEqual(Fs.statSync(file).mode & 0o777, 0o600)
        assert.strictEqual(Fs.statSync(`${state}/effect-agent`).mode & 0o777, 0o700)
        assert.deepStrictEqual(Fs.readdirSync(`${state}/effect-agent`), ["secret"])
        assert.strictEqual(keys[0]!.length, 32)
        assert.isTrue(keys.every((key) => Buffer.from(key).equals(Buffer.from(keys[0]!))))
        assert.isTrue(Buffer.from(yield* Seal.key(env)).equals(Buffer.from(keys[0]!)))
        const path = yield* Path.Path
        // a relative XDG_STATE_HOME is ignored, as the XDG spec asks
        assert.strictEqual(
          Seal.keyPath(path, { XDG_STATE_HOME: "state", HOME: "/home/me" }),
          "/home/me/.local/state/effect-agent/secret"
        )
        assert.strictEqual(Seal.keyPath(path, {}), undefined)
      })))

  it.live("a key that is a link, readable by others, or not a key is refused, not used", () =>
    withState((state) =>
      Effect.gen(function*() {
        const env = { XDG_STATE_HOME: state }
        const dir = `${state}/effect-agent`
        Fs.mkdirSync(dir, { mode: 0o700 })
        Fs.writeFileSync(`${state}/elsewhere`, `${"a".repeat(64)}\n`, { mode: 0o600 })
        Fs.symlinkSync(`${state}/elsewhere`, `${dir}/secret`)
        assert.match((yield* Effect.flip(Seal.key(env))).message, /^cannot use the key in .*secret: /)
        Fs.rmSync(`${dir}/secret`)
        Fs.writeFileSync(`${dir}/secret`, `${"a".repeat(64)}\n`, { mode: 0o644 })
        Fs.chmodSync(`${dir}/secret`, 0o644)
        assert.strictEqual(
          (yield* Effect.flip(Seal.key(env))).message,
          `${dir}/secret can be read or written by other users (mode 644)`
        )
        Fs.chmodSync(`${dir}/secret`, 0o600)
        Fs.writeFileSync(`${dir}/secret`, "short\n")
        assert.strictEqual((yield* Effect.flip(Seal.key(env))).message, `${dir}/secret does not hold a key`)
      })))

  it("a seal matches its text under its key only", () => {
    const key = new Uint8Array(32).fill(7)
    const seal = Seal.sign(key, "{\"version\":1}")
    assert.isTrue(Seal.verify(key, "{\"version\":1}", seal))
    assert.isFalse(Seal.verify(key, "{\"version\":2}", seal))
    assert.isFalse(Seal.verify(new Uint8Array(32).fill(8), "{\"version\":1}", seal))
    assert.isFalse(Seal.verify(key, "{\"version\":1}", "not hex"))
  })
})
