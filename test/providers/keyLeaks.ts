/**
 * What counts as a leak of the test API key: any run of 6 or more of its
 * characters, after undoing JSON escapes and percent-encoding, or in any
 * base64 run. Shared by the tests of `Redaction` and of the providers' echoes.
 */
import { assert } from "@effect/vitest"
import * as ProviderTest from "./ProviderTest.ts"

export const key = ProviderTest.apiKey

export const jsonEscaped = (text: string) =>
  Array.from(text, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`).join("")
export const percentEncoded = (text: string) =>
  Array.from(text, (char) => `%${char.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`).join("")

const windows = (length: number) => {
  const out: Array<string> = []
  for (let i = 0; i + length <= key.length; i++) out.push(key.slice(i, i + length))
  return out
}
const keyPieces = windows(6)

const decodings = (text: string): Array<string> => {
  const fromHex = (_: string, hex: string) => String.fromCharCode(parseInt(hex, 16))
  const unescaped = text.replace(/\\u([0-9a-fA-F]{4})/g, fromHex)
  const unpercented = unescaped.replace(/%([0-9a-fA-F]{2})/g, fromHex)
  const base64 = Array.from(text.matchAll(/[A-Za-z0-9+/_-]{8,}/g), ([run]) => {
    const standard = run.replaceAll("-", "+").replaceAll("_", "/")
    return [0, 1, 2, 3].map((skip) => {
      const aligned = standard.slice(skip)
      try {
        return atob(aligned.slice(0, aligned.length - (aligned.length % 4)))
      } catch {
        return ""
      }
    }).join("\n")
  })
  return [text, unescaped, unpercented, ...base64]
}

export const assertNoKey = (label: string, text: string) => {
  for (const decoded of decodings(text)) {
    for (const piece of keyPieces) {
      assert.notInclude(decoded, piece, `${label} holds part of the key`)
    }
  }
}
