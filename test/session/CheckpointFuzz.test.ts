/**
 * A corrupt-checkpoint fuzz on the file system store. A real session's
 * checkpoint is copied into a fresh session directory per case and damaged:
 * special files in place of its files (FIFO, links to /dev/zero and
 * /dev/urandom, directories, dangling links), links planted for every file
 * the store opens (and for the session directory) pointing at decoy files
 * outside the store, truncations, bit flips, overwritten bytes and bytes
 * appended to the journal. Then the checkpoint is loaded, saved to and
 * loaded again by fresh stores, each operation under a time limit.
 *
 * Every case must end in a load equal to the original or a typed
 * `CheckpointCorrupt` / `CheckpointVersionMismatch`: no defect, no hang, and
 * no byte outside the store changed (the decoys are hashed after each case).
 *
 * `CHECKPOINT_FUZZ_CASES=5000` runs 5,000 random cases instead of 300 (the
 * special files and links always run); `CHECKPOINT_FUZZ_SEED` replays a run.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Layer, Random } from "effect"
import { Message } from "effect-agent"
import { CheckpointStore, Session } from "effect-agent/session"
import { ScriptedModel } from "effect-agent/testing"
import { execFileSync } from "node:child_process"
import { createHash } from "node:crypto"
import * as NodeFs from "node:fs"
import { threeTurns, toolsLayer } from "./fixture.ts"

const randomCases = Number(process.env.CHECKPOINT_FUZZ_CASES ?? 300)
const seed = process.env.CHECKPOINT_FUZZ_SEED ?? String(Date.now())

const FILES = ["head.json", "journal-0.ndjson"] as const

type Outcome = "loaded" | "CheckpointCorrupt" | "CheckpointVersionMismatch" | "other failure" | "defect" | "hang"

interface Case {
  readonly name: string
  /** Damages the copied session in `dir` (its directory is `dir/<id>`). */
  readonly damage: (session: string, decoys: string) => void
  /** Whether the case ends with a session directory that is not the store's (no save can succeed). */
  readonly loadMayWork: boolean
}

const flip = (file: string, at: number, bit: number) => {
  const bytes = NodeFs.readFileSync(file)
  bytes[at % bytes.length] = bytes[at % bytes.length]! ^ (1 << bit)
  NodeFs.writeFileSync(file, bytes)
}

/** The cases that always run: special files, and links out of the store for every file the store opens. */
const fixedCases: ReadonlyArray<Case> = [
  ...FILES.flatMap((file) => {
    const instead = (what: string, make: (path: string, decoys: string) => void): Case => ({
      name: `${file} is ${what}`,
      damage: (session, decoys) => {
        NodeFs.rmSync(`${session}/${file}`, { recursive: true, force: true })
        make(`${session}/${file}`, decoys)
      },
      loadMayWork: false
    })
    return [
      instead("a FIFO", (p) => execFileSync("mkfifo", [p])),
      instead("a link to /dev/zero", (p) => NodeFs.symlinkSync("/dev/zero", p)),
      instead("a link to /dev/urandom", (p) => NodeFs.symlinkSync("/dev/urandom", p)),
      instead("a directory", (p) => NodeFs.mkdirSync(p)),
      instead("a dangling link", (p) => NodeFs.symlinkSync(`${p}.nowhere`, p)),
      instead("a link to a decoy outside the store", (p, decoys) => NodeFs.symlinkSync(`${decoys}/${file}`, p))
    ]
  }),
  // files the store writes anew: a link there is unlinked, never written through
  ...["head.json.tmp", "journal-1.ndjson"].map((file): Case => ({
    name: `${file} links to a decoy outside the store`,
    damage: (s, d) => NodeFs.symlinkSync(`${d}/decoy.txt`, `${s}/${file}`),
    loadMayWork: true
  })),
  { name: "head.json.tmp is a directory", damage: (s) => NodeFs.mkdirSync(`${s}/head.json.tmp`), loadMayWork: true },
  {
    name: "the session directory links to a directory of decoys outside the store",
    damage: (s, d) => {
      NodeFs.rmSync(s, { recursive: true })
      NodeFs.symlinkSync(d, s)
    },
    loadMayWork: false
  },
  {
    name: "the session directory is a file",
    damage: (s) => {
      NodeFs.rmSync(s, { recursive: true })
      NodeFs.writeFileSync(s, "not a directory")
    },
    loadMayWork: false
  }
]

const randomBytes = (most: number) =>
  Effect.flatMap(
    Random.nextIntBetween(1, most),
    (length) => Effect.forEach(Array.from({ length }), () => Random.nextIntBetween(0, 255))
  )

/** A random case: a truncation, bit flips, bytes overwritten, or bytes appended to the journal. */
const randomCase = Effect.gen(function*() {
  const file = FILES[yield* Random.nextIntBetween(0, 1)]!
  const kind = yield* Random.nextIntBetween(0, 9)
  const at = yield* Random.nextIntBetween(0, 100_000)
  if (kind === 0) {
    return {
      name: `${file} cut at byte ${at} (modulo its length)`,
      damage: (s: string) => {
        const path = `${s}/${file}`
        NodeFs.truncateSync(path, at % NodeFs.statSync(path).size)
      },
      loadMayWork: false
    } satisfies Case
  }
  if (kind === 1) {
    const noise = yield* randomBytes(64)
    return {
      name: `${file}: ${noise.length} bytes overwritten at ${at}`,
      damage: (s: string) => {
        const path = `${s}/${file}`
        const bytes = NodeFs.readFileSync(path)
        bytes.set(noise.slice(0, Math.max(0, bytes.length - (at % bytes.length))), at % bytes.length)
        NodeFs.writeFileSync(path, bytes)
      },
      loadMayWork: false
    } satisfies Case
  }
  if (kind === 2) {
    const noise = yield* randomBytes(200)
    // past the length the head records: ignored, as a line cut by a crash is
    return {
      name: `journal-0.ndjson: ${noise.length} bytes appended`,
      damage: (s: string) => NodeFs.appendFileSync(`${s}/journal-0.ndjson`, new Uint8Array(noise)),
      loadMayWork: true
    } satisfies Case
  }
  const flips = yield* Effect.forEach(
    Array.from({ length: yield* Random.nextIntBetween(1, 8) }),
    () => Effect.all([Random.nextIntBetween(0, 100_000), Random.nextIntBetween(0, 7)])
  )
  return {
    name: `${file}: ${flips.length} bit flips at ${flips.map(([a, b]) => `${a}.${b}`).join(" ")}`,
    damage: (s: string) => {
      for (const [a, b] of flips) flip(`${s}/${file}`, a, b)
    },
    // two flips of the same bit cancel out
    loadMayWork: true
  } satisfies Case
})

const sha256 = (path: string) => createHash("sha256").update(NodeFs.readFileSync(path)).digest("hex")

/** The outcome of a store operation under a time limit. */
const outcomeOf = <A, E extends { readonly _tag: string }>(effect: Effect.Effect<A, E>) =>
  effect.pipe(
    Effect.timeout("5 seconds"),
    Effect.exit,
    Effect.map((exit): { readonly outcome: Outcome; readonly value?: A; readonly detail: string } => {
      if (exit._tag === "Success") return { outcome: "loaded", value: exit.value, detail: "" }
      const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail")
      if (failure === undefined) return { outcome: "defect", detail: String(exit.cause) }
      const tag = failure.error._tag
      if (tag === "TimeoutError") return { outcome: "hang", detail: "over 5 s" }
      return tag === "CheckpointCorrupt" || tag === "CheckpointVersionMismatch"
        ? { outcome: tag, detail: "" }
        : { outcome: "other failure", detail: String(failure.error) }
    })
  )

/** Releases a read that would block on a FIFO (none should: the store opens with O_NONBLOCK). */
const releaseFifos = (session: string) => {
  for (const file of FILES) {
    try {
      if (NodeFs.lstatSync(`${session}/${file}`).isFIFO()) {
        NodeFs.closeSync(NodeFs.openSync(`${session}/${file}`, NodeFs.constants.O_WRONLY | NodeFs.constants.O_NONBLOCK))
      }
    } catch {
      // no reader waits on it, or it is not there
    }
  }
}

describe("a corrupt-checkpoint fuzz", () => {
  it.live(`loads the original or fails typed: no defect, no hang, no byte outside changed (seed ${seed})`, () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.makeTempDirectoryScoped({ prefix: "checkpoint-fuzz-" })
      const decoys = `${root}/decoys`
      NodeFs.mkdirSync(decoys)
      for (const name of ["decoy.txt", ...FILES, "journal-1.ndjson"]) {
        NodeFs.writeFileSync(`${decoys}/${name}`, `precious ${name}\n`)
      }
      const decoyNames = NodeFs.readdirSync(decoys).sort()
      const hashes = decoyNames.map((name) => sha256(`${decoys}/${name}`))

      // the original: a real session, with its guards' state, its config and its finished outcome
      const original = yield* CheckpointStore.fileSystem(`${root}/original`)
      const config = { maxTurns: 7, budgets: { costUsd: 2 } }
      yield* Session.run({ id: "original", prompt: "go", config }).pipe(
        Effect.provideService(CheckpointStore.CheckpointStore, original),
        Effect.provide(Layer.merge(ScriptedModel.layer(threeTurns("slow", 1)), toolsLayer([])))
      )
      const checkpoint = yield* original.load("original")
      assert.isDefined(checkpoint.finished)
      const originalFiles = FILES.map((file) => NodeFs.readFileSync(`${root}/original/original/${file}`))

      const cases: Array<Case> = [...fixedCases]
      for (let i = 0; i < randomCases; i++) cases.push(yield* randomCase)
      const tally = new Map<string, number>()
      const count = (key: string) => tally.set(key, (tally.get(key) ?? 0) + 1)
      const problems: Array<string> = []

      const id = "original"
      for (let i = 0; i < cases.length; i++) {
        const kase = cases[i]!
        // a store of its own for each case, holding a copy of the original session
        const store = `${root}/case-${i}`
        const session = `${store}/${id}`
        NodeFs.mkdirSync(session, { recursive: true })
        FILES.forEach((file, k) => NodeFs.writeFileSync(`${session}/${file}`, originalFiles[k]!))
        kase.damage(session, decoys)
        // bytes overwritten with what they were (a 1-byte overwrite of the last byte with the same byte, seen once)
        // are no damage: the original loads, as it should
        const unchanged = FILES.every((file, k) => {
          const path = `${session}/${file}`
          try {
            return NodeFs.lstatSync(path).isFile() && NodeFs.readFileSync(path).equals(originalFiles[k]!)
          } catch {
            // gone, or its directory replaced: damaged
            return false
          }
        })

        const loaded = yield* outcomeOf(Effect.flatMap(CheckpointStore.fileSystem(store), (s) => s.load(id)))
        releaseFifos(session)
        count(`load: ${loaded.outcome}`)
        if (loaded.outcome === "loaded") {
          if (!kase.loadMayWork && !unchanged) problems.push(`${kase.name}: loaded`)
          // the state, config and outcome of the original, for a copy under another id
          else assert.deepStrictEqual(loaded.value, checkpoint, kase.name)
        } else if (loaded.outcome !== "CheckpointCorrupt" && loaded.outcome !== "CheckpointVersionMismatch") {
          problems.push(`${kase.name}: load: ${loaded.outcome} ${loaded.detail}`)
        }

        // saving: an appended turn, then a transcript that does not extend the saved one (a new journal)
        const writer = yield* CheckpointStore.fileSystem(store)
        const turn = Message.user(`case ${i}`)
        const withMessages = (messages: ReadonlyArray<Message.Message>) => ({
          ...checkpoint,
          state: { ...checkpoint.state, messages }
        })
        const appended = yield* outcomeOf(writer.save(id, withMessages([...checkpoint.state.messages, turn])))
        const rewritten = yield* outcomeOf(writer.save(id, withMessages([turn])))
        releaseFifos(session)
        for (const [what, saved] of [["append", appended], ["rewrite", rewritten]] as const) {
          count(`${what}: ${saved.outcome}`)
          if (saved.outcome === "defect" || saved.outcome === "hang" || saved.outcome === "other failure") {
            problems.push(`${kase.name}: ${what}: ${saved.outcome} ${saved.detail}`)
          }
        }
        // what a save wrote loads back
        if (rewritten.outcome === "loaded") {
          const again = yield* outcomeOf(Effect.flatMap(CheckpointStore.fileSystem(store), (s) => s.load(id)))
          if (again.outcome !== "loaded" || again.value?.state.messages.length !== 1) {
            problems.push(`${kase.name}: a saved checkpoint does not load back: ${again.outcome} ${again.detail}`)
          }
        }
        const now = NodeFs.readdirSync(decoys).sort()
        if (JSON.stringify(now) !== JSON.stringify(decoyNames)) {
          problems.push(`${kase.name}: decoy directory changed: ${now.join(", ")}`)
        }
        decoyNames.forEach((name, k) => {
          const changed = sha256(`${decoys}/${name}`) !== hashes[k]
          if (changed) problems.push(`${kase.name}: ${name} outside the store changed`)
        })
        NodeFs.rmSync(store, { recursive: true, force: true })
      }
      if (randomCases > 300) {
        console.log(`checkpoint fuzz (seed ${seed}): ${cases.length} cases`, Object.fromEntries(tally))
      }
      assert.deepStrictEqual(problems, [], `seed ${seed}`)
    }).pipe(Effect.provide(NodeServices.layer), Random.withSeed(seed)), 240_000 + randomCases * 100)
})
