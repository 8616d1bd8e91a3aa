/**
 * Keeps an API key out of the text a provider sends back. A server may echo
 * the key it was sent (a 401's message, a request id, a proxy's debug page),
 * and not always verbatim, so a redactor replaces with `<redacted>`:
 *
 * - the key itself, and the key with any of its characters JSON-escaped
 *   (`\u0073`) or percent-encoded (`%73`), as a body that was not decoded
 *   shows it;
 * - the key in base64 or base64url, at any alignment inside a longer
 *   encoded text (as in `Basic …` credentials), all but the one or two
 *   characters at each end that it shares with its neighbours;
 * - an elided key, as servers print one: at least 3 of its first characters
 *   before a mask (`…`, `..`, `**` or `•`), with any of its last characters
 *   after it, or a mask and at least 3 of its last characters (`sk-abc…xyz`,
 *   `sk-proj-****wxyz`, `sk-abc…`, `…wxyz`), in any of the encodings above.
 *   Keys shorter than 12 characters are matched whole only;
 * - any of these with up to 4 spaces, line breaks or invisible characters
 *   (soft hyphen, zero-width spaces and joiners, word joiner, BOM) between
 *   two of its characters (`s k - p r o j …`, a key wrapped across lines),
 *   which a reader still reads as the key (unless the key itself holds one
 *   of them).
 *
 * What it does not catch, on purpose: a key spelled with visible separators
 * (`s-k-…`, `s,k,…`), reversed, or in another encoding (hex, ROT13, base32).
 * Redaction keeps a key out of text that a server (or a CLI) echoes
 * carelessly; it is no defence against a party that holds the key and wants
 * it out, and that has no end of encodings. The defence there is that the
 * agent never holds a key (see the sandbox's environment).
 *
 * {@link redactReason} applies a redactor to every text of an error reason
 * (descriptions, bodies, header names and values, metadata), after the
 * provider's JSON has been decoded, so an escaped key cannot pass through
 * `JSON.parse` in clear.
 *
 * Matching is a single regular expression built once per key, run only on the
 * text of a failure (never on a streamed part), and linear in that text for
 * a given key. The providers redact their failures with it; the supervisor's
 * external workers redact what a CLI prints.
 *
 * @example
 * ```ts
 * import { Redaction } from "effect-agent/providers"
 *
 * const redact = Redaction.redactor("sk-proj-abcdefghijklmnop")
 * console.log(redact("401: invalid key sk-proj-abc…mnop"))
 * // Output: 401: invalid key <redacted>
 * ```
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import * as AiError from "effect/ai/AiError"

/**
 * What a redactor puts in place of a key.
 *
 * @category constants
 * @since 0.1.0
 */
export const placeholder = "<redacted>"

const minKeyLength = 4
const minElidedKeyLength = 12
const minVisible = 3

const escapeRegExp = (text: string): string => text.replace(/[\\^$.*+?()[\]{}|/-]/g, "\\$&")

// Hex digits in either case: `2f` matches `2f`, `2F`.
const anyCaseHex = (hex: string): string =>
  hex.replace(/[a-f]/gi, (digit) => `[${digit.toLowerCase()}${digit.toUpperCase()}]`)

const utf8 = new TextEncoder()

// One character as it may appear: itself, JSON-escaped, or percent-encoded.
const character = (char: string): string => {
  const code = char.charCodeAt(0).toString(16).padStart(4, "0")
  const percent = Array.from(utf8.encode(char), (byte) => `%${anyCaseHex(byte.toString(16).padStart(2, "0"))}`)
  return `(?:${escapeRegExp(char)}|\\\\u${anyCaseHex(code)}|${percent.join("")})`
}

// What may stand between two characters of an echoed key and still read as the key: spaces, line breaks and
// invisible characters, a few at a time (bounded, so that matching stays linear in the text).
const separatorCharacters = "\\t\\n\\r \\u00a0\\u00ad\\u200b-\\u200d\\u2060\\ufeff"
const separatorClass = new RegExp(`[${separatorCharacters}]`)
const separators = `[${separatorCharacters}]{0,4}`

/** How a key's characters are spelled out, and what may stand between two of them. */
interface Spelling {
  readonly chars: ReadonlyArray<string>
  readonly gap: string
}

const sequence = ({ chars, gap }: Spelling): string => chars.map(character).join(gap)

// At least `min` of the first characters: c0 c1 c2 (?:c3 (?:c4 …)?)?
const prefix = (key: Spelling, min: number): string => {
  const { chars, gap } = key
  let tail = ""
  for (let i = chars.length - 1; i >= min; i--) tail = `(?:${gap}${character(chars[i]!)}${tail})?`
  return sequence({ chars: chars.slice(0, min), gap }) + tail
}

// At least `min` of the last characters: (?:(?:c0)? c1)? … cn-3 cn-2 cn-1
const suffix = (key: Spelling, min: number): string => {
  const { chars, gap } = key
  let head = ""
  for (let i = 0; i < chars.length - min; i++) head = `(?:${head}${character(chars[i]!)}${gap})?`
  return head + sequence({ chars: chars.slice(chars.length - min), gap })
}

// What stands for the hidden part of an elided key: an ellipsis, two or more
// dots or stars, bullets. Server text is hostile, so the run is matched as an
// atomic group (a lookahead that captures, then a backreference: the engine
// cannot backtrack into it) and only from its first character (the
// lookbehind), which keeps matching linear in the text.
const maskCharacters = ["\u2026", ".", "*", "\u2022"].map(character)
const maskRun = (group: number): string => {
  const [ellipsis, dot, star, bullet] = maskCharacters
  const run = `(?:${ellipsis})+|(?:${dot}){2,}|(?:${star}){2,}|(?:${bullet})+`
  return `(?<!${maskCharacters.join("|")})(?=(${run}))\\${group}`
}

const base64 = (bytes: Uint8Array): string => btoa(String.fromCharCode(...bytes))

// The characters of the key's base64 that do not depend on the bytes around
// it, for each of the three alignments, in base64 and base64url.
const base64Cores = (key: string): Array<string> => {
  const bytes = utf8.encode(key)
  const cores = new Set<string>()
  for (let offset = 0; offset < 3; offset++) {
    const padded = new Uint8Array(offset + bytes.length)
    padded.set(bytes, offset)
    const encoded = base64(padded)
    const first = Math.ceil((8 * offset) / 6)
    const end = Math.floor((8 * (offset + bytes.length)) / 6)
    const core = encoded.slice(first, end)
    if (core.length >= 6) {
      cores.add(core)
      cores.add(core.replaceAll("+", "-").replaceAll("/", "_"))
    }
  }
  return Array.from(cores, escapeRegExp)
}

/**
 * A function that replaces every form of `key` listed in the module
 * description with {@link placeholder}. Keys shorter than 4 characters are
 * not looked for.
 *
 * @category redaction
 * @since 0.1.0
 */
export const redactor = (key: string | undefined): (text: string) => string => {
  if (key === undefined || key.length < minKeyLength) return (text) => text
  const chars = Array.from(key)
  // A key that holds a separator is matched without them: a gap that could also be the key's own character
  // would let the engine backtrack.
  const spelling: Spelling = { chars, gap: separatorClass.test(key) ? "" : separators }
  const forms = [sequence(spelling), ...base64Cores(key)]
  if (chars.length >= minElidedKeyLength) {
    // The only capturing groups, numbered in order.
    forms.push(
      `${prefix(spelling, minVisible)}${maskRun(1)}(?:${suffix(spelling, 1)})?`,
      `${maskRun(2)}${suffix(spelling, minVisible)}`
    )
  }
  const pattern = new RegExp(forms.join("|"), "g")
  return (text) => {
    if (text.length <= cutAbove) return text.replace(pattern, placeholder)
    // A run of millions of one mask character overflows the regular expression engine's stack (a RangeError,
    // seen at 4 MiB of dots): such a text is cut inside its long runs (see `cuts`) and the pieces are redacted
    // apart. No form of the key is cut: a piece ends, or begins, inside a run, where an elided key's visible
    // part next to it is matched with the part of the run in its piece.
    let out = ""
    let from = 0
    for (const cut of cuts(text)) {
      out += text.slice(from, cut).replace(pattern, placeholder)
      from = cut
    }
    return out + text.slice(from).replace(pattern, placeholder)
  }
}

/** A text longer than this is cut inside its long runs of one mask character (see {@link redactor}). */
const cutAbove = 1 << 16

/** How long a run of one mask character must be to cut a text in it. */
const cutRunLength = 4096

/**
 * Where to cut each run of {@link cutRunLength} or more of one mask character: 2,048 characters into it, then
 * every 64 KiB until 2,048 before its end, so that no piece holds more than 64 KiB of a run and each end of the
 * run stays with 2,048 of its characters. Scanned by hand, in one pass (a regular expression for the run,
 * `([.*…•])\1{4095,}`, overflows the same way).
 */
const cuts = (text: string): Array<number> => {
  const found: Array<number> = []
  const margin = cutRunLength / 2
  let start = 0
  for (let i = 1; i <= text.length; i++) {
    if (i < text.length && text.charCodeAt(i) === text.charCodeAt(start)) continue
    const code = text.charCodeAt(start)
    const mask = code === 0x2e || code === 0x2a || code === 0x2022 || code === 0x2026
    if (mask && i - start >= cutRunLength) {
      for (let cut = start + margin; cut <= i - margin; cut += cutAbove) found.push(cut)
    }
    start = i
  }
  return found
}

const redactJson = (value: unknown, redact: (text: string) => string): unknown => {
  if (typeof value === "string") return redact(value)
  if (Array.isArray(value)) return value.map((item) => redactJson(item, redact))
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [redact(key), redactJson(item, redact)]))
  }
  return value
}

const ReasonJson = Schema.toCodecJson(AiError.AiErrorReason)
const encodeReason = Schema.encodeSync(ReasonJson)
const decodeReason = Schema.decodeUnknownSync(ReasonJson)

/**
 * The reason with `redact` applied to every string in it, header names and
 * metadata included. Should the result no longer decode (a key that is also
 * part of a tag), the reason becomes an `UnknownError` with the redacted
 * message.
 *
 * @category redaction
 * @since 0.1.0
 */
export const redactReason = (
  reason: AiError.AiErrorReason,
  redact: (text: string) => string
): AiError.AiErrorReason => {
  try {
    return decodeReason(redactJson(encodeReason(reason), redact))
  } catch {
    return new AiError.UnknownError({ description: redact(`${reason._tag}: ${reason.message}`) })
  }
}
