/**
 * `Redaction`: keeps an API key out of the text a server (or a CLI) echoes,
 * in every form the module lists, and out of every string of an `AiError`
 * reason.
 */
import { assert, describe, it } from "@effect/vitest"
import { AiError } from "effect/ai"
import { Redaction } from "effect-agent/providers"
import { assertNoKey, jsonEscaped, key, percentEncoded } from "./keyLeaks.ts"

describe("Redaction.redactor", () => {
  const redact = Redaction.redactor(key)

  it("leaves text without the key alone, and short keys unsought", () => {
    const text = "sk-proj is a prefix; ...; ** and … are masks; the end"
    assert.strictEqual(redact(text), text)
    assert.strictEqual(Redaction.redactor("abc")("abc abc"), "abc abc")
    assert.strictEqual(Redaction.redactor(undefined)(key), key)
  })

  it("replaces each form of the key", () => {
    const forms = [
      key,
      jsonEscaped(key),
      jsonEscaped(key).toUpperCase().replaceAll("\\U", "\\u"),
      percentEncoded(key),
      `${key.slice(0, 3)}${jsonEscaped(key.slice(3, 9))}${percentEncoded(key.slice(9))}`,
      `${key.slice(0, 7)}…${key.slice(-4)}`,
      `${key.slice(0, 7)}\\u2026${key.slice(-4)}`,
      `${key.slice(0, 5)}••••${key.slice(-3)}`,
      `****${key.slice(-4)}`
    ]
    for (const form of forms) assert.strictEqual(redact(`<${form}>`), `<${Redaction.placeholder}>`, form)
    for (const prefix of ["", "a", "ab", "Bearer "]) {
      assertNoKey(`base64 after ${JSON.stringify(prefix)}`, redact(btoa(prefix + key)))
    }
    assertNoKey("base64url", redact(btoa(`..${key}`).replaceAll("+", "-").replaceAll("/", "_")))
  })

  it("29/17: a key echoed with spaces, line breaks or invisible characters between its characters", () => {
    const spaced = Array.from(key).join(" ")
    const forms = [
      spaced,
      Array.from(key).join("  \n "),
      Array.from(key).join("\u200b"),
      `${key.slice(0, 10)}\n${key.slice(10)}`,
      `${Array.from(key.slice(0, 7)).join(" ")}…${Array.from(key.slice(-4)).join(" ")}`
    ]
    for (const form of forms) assert.strictEqual(redact(`<${form}>`), `<${Redaction.placeholder}>`, JSON.stringify(form))
    // more than 4 between two characters, or visible separators: left alone (documented)
    for (const form of [Array.from(key).join("     "), Array.from(key).join("-")]) {
      assert.strictEqual(redact(form), form)
    }
    // a key that holds a space is matched as it is
    const withSpace = Redaction.redactor("open sesame 1234")
    assert.strictEqual(withSpace("<open sesame 1234>"), `<${Redaction.placeholder}>`)
  })

  it("a run of millions of one mask character is no RangeError; the visible ends of a key around it are still hidden", () => {
    const key = `sk-proj-${"aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY".repeat(5)}`
    const redact = Redaction.redactor(key)
    for (const unit of [".", "*", "\u2026", "\u2022"]) {
      // 4 MiB of one of them overflowed the regular expression engine's stack
      const run = unit.repeat(4 << 20)
      const out = redact(`before ${key.slice(0, 8)}${run}${key.slice(-6)} after ${key}`)
      assert.isTrue(out.startsWith(`before ${Redaction.placeholder}${unit}`), JSON.stringify(unit))
      assert.isTrue(out.endsWith(`${unit}${Redaction.placeholder} after ${Redaction.placeholder}`), JSON.stringify(unit))
      assertNoKey(JSON.stringify(unit), out)
      assert.notInclude(out, key.slice(-6))
      // the run is kept but for what the two matches next to it took, as one: at most a piece (64 KiB) each
      assert.isAbove(out.length, run.length - 2 * (65_536 + 4096))
    }
  })

  it("takes time linear in hostile text", () => {
    const long = Redaction.redactor(`sk-proj-${"aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY".repeat(5)}`)
    const hostile = [".", "*", "…", "\\u002e", "%2E", "sk-proj-aB3d", "sk-proj-aB3d**", "s k - p r o j - a B 3 d ", "s \u200b"]
    // Linear, not fast: after a warm-up (V8 compiles a regular expression once it has run a while), the best of
    // two runs on a text of each unit long enough to take 25 ms of CPU (from 64 KiB, doubled; at most 1 MiB),
    // and on 4x that, in CPU time (what other processes take is not counted), compared with each other (4x the
    // text may take at most 10x the time; a quadratic match takes 16x), so a loaded machine cannot fail it; the
    // absolute bound only catches a match that does not end. (Sized by time, not fixed: 256 KiB and 1 MiB for
    // every unit took 6 s of the suite's CPU, and a fixed smaller size leaves the quick units under the floor. A
    // match costing a·n + b·n² fails once b·n passes a at the size measured: the slow units, measured smaller,
    // are checked less finely than at 256 KiB.)
    const best = (text: string) => {
      let least = Infinity
      for (let i = 0; i < 2; i++) {
        const start = process.cpuUsage()
        long(text)
        const used = process.cpuUsage(start)
        least = Math.min(least, (used.user + used.system) / 1000)
      }
      return least
    }
    for (const unit of hostile) {
      const text = (kib: number) => unit.repeat(Math.ceil(kib * 1024 / unit.length))
      long(text(16))
      let kib = 64
      while (kib < 1024 && best(text(kib)) < 25) kib *= 2
      const small = Math.max(best(text(kib)), 5)
      const large = best(text(kib * 4))
      assert.isBelow(large / small, 10, `${JSON.stringify(unit)} repeated: ${small.toFixed(1)} ms, then ${large.toFixed(1)} ms`)
      assert.isBelow(large, 20_000, `${JSON.stringify(unit)} repeated`)
    }
  })
})

describe("Redaction.redactReason", () => {
  it("redacts every string of a reason: its description, metadata and headers", () => {
    const reason = new AiError.AuthenticationError({
      kind: "InvalidKey",
      description: `the key ${key} is not valid`,
      metadata: { openai: { key } },
      http: { response: { status: 401, headers: { [`x-echo-${key}`]: key } }, body: `invalid key ${jsonEscaped(key)}` }
    })
    const redacted = Redaction.redactReason(reason, Redaction.redactor(key))
    assert.strictEqual(redacted._tag, "AuthenticationError")
    assertNoKey("the reason", JSON.stringify(redacted))
    assert.include(JSON.stringify(redacted), Redaction.placeholder)
  })
})
