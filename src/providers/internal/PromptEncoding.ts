/**
 * Helpers the providers share to encode an `effect/ai` request for their wire
 * formats: the JSON Schema of a tool's parameters (computed once per tool),
 * the text of a tool result, where a file's bytes are, and a per-message memo
 * so that a transcript's messages, which the loop keeps as the same `Prompt`
 * objects from turn to turn, are encoded once rather than on every request.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import type * as JsonSchema from "effect/JsonSchema"
import * as AiError from "effect/ai/AiError"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as OpenAiStructuredOutput from "effect/ai/OpenAiStructuredOutput"
import * as Prompt from "effect/ai/Prompt"
import * as Tool from "effect/ai/Tool"
import * as Base64 from "effect/encoding/Base64"

const schemas = new WeakMap<Tool.Any, JsonSchema.JsonSchema>()

/**
 * The JSON Schema of a tool's parameters, computed once per tool.
 *
 * @since 0.1.0
 * @category tools
 */
export const parametersSchema = (tool: Tool.Any): JsonSchema.JsonSchema => {
  let schema = schemas.get(tool)
  if (schema === undefined) {
    schema = Tool.getJsonSchema(tool)
    schemas.set(tool, schema)
  }
  return schema
}

/**
 * The tools a provider declares: user-defined and dynamic tools (tools
 * defined by another provider are left out).
 *
 * @since 0.1.0
 * @category tools
 */
export const functionTools = (tools: ReadonlyArray<Tool.Any>): ReadonlyArray<Tool.Any> =>
  tools.filter((tool) => !Tool.isProviderDefined(tool))

/**
 * The text the model reads for a tool result: the text of its model output
 * when it has one, else the result itself (JSON for a non-string result).
 *
 * @since 0.1.0
 * @category tool results
 */
export const resultText = (part: Prompt.ToolResultPart): string => {
  if (part.modelOutput !== undefined) {
    let text = ""
    for (const item of part.modelOutput) {
      if (item.type === "text") text += text === "" ? item.text : `\n${item.text}`
    }
    return text
  }
  return typeof part.result === "string" ? part.result : JSON.stringify(part.result ?? null)
}

/**
 * The files (images, documents) of a tool result's model output.
 *
 * @since 0.1.0
 * @category tool results
 */
export const resultFiles = (part: Prompt.ToolResultPart): ReadonlyArray<Prompt.FilePart> =>
  part.modelOutput === undefined ? [] : part.modelOutput.filter((item) => item.type === "file")

/**
 * Where a file's bytes are: inline base64 data, or a URL the provider fetches.
 *
 * @since 0.1.0
 * @category files
 */
export type FileSource =
  | { readonly type: "base64"; readonly mediaType: string; readonly data: string }
  | { readonly type: "url"; readonly url: string }

const dataUrl = /^data:([^;,]*)(?:;[^,]*)?;base64,(.*)$/s

/**
 * The source of a file part: base64 strings and bytes are inline data, `data:`
 * URLs are decoded to inline data, other URLs stay URLs.
 *
 * @since 0.1.0
 * @category files
 */
export const fileSource = (part: Prompt.FilePart): FileSource => {
  const data = part.data
  if (data instanceof Uint8Array) return { type: "base64", mediaType: part.mediaType, data: Base64.encode(data) }
  const text = typeof data === "string" ? data : data.href
  const inline = dataUrl.exec(text)
  if (inline !== null) return { type: "base64", mediaType: inline[1] || part.mediaType, data: inline[2] ?? "" }
  return typeof data === "string" ? { type: "base64", mediaType: part.mediaType, data } : { type: "url", url: text }
}

/**
 * A file source as a URL: the URL itself, or a `data:` URL for inline data.
 *
 * @since 0.1.0
 * @category files
 */
export const fileUrl = (source: FileSource): string =>
  source.type === "url" ? source.url : `data:${source.mediaType};base64,${source.data}`

/**
 * Thrown by an encoder for content its provider cannot take, and turned into
 * an `InvalidUserInputError` by {@link encodeRequest}.
 *
 * @since 0.1.0
 * @category errors
 */
export class UnsupportedContent {
  readonly description: string
  constructor(description: string) {
    this.description = description
  }
}

/**
 * Runs a request encoder: content the provider cannot take becomes a typed
 * `InvalidUserInputError` naming it; anything else thrown is a defect.
 *
 * @since 0.1.0
 * @category encoding
 */
export const encodeRequest = <A>(provider: string, encode: () => A): Effect.Effect<A, AiError.AiError> =>
  Effect.suspend(() => {
    try {
      return Effect.succeed(encode())
    } catch (error) {
      if (!(error instanceof UnsupportedContent)) throw error
      return Effect.fail(AiError.make({
        module: provider,
        method: "streamText",
        reason: new AiError.InvalidUserInputError({ description: error.description })
      }))
    }
  })

/**
 * Memoizes an encoder by the identity of its input (a `Prompt` message), for
 * the life of the input.
 *
 * @since 0.1.0
 * @category caching
 */
export const memo = <K extends object, V>(f: (key: K) => V): (key: K) => V => {
  const cache = new WeakMap<K, V>()
  return (key) => {
    let value = cache.get(key)
    if (value === undefined) {
      value = f(key)
      cache.set(key, value)
    }
    return value
  }
}

/**
 * The JSON text of an object whose fields are given as JSON text, in their
 * order; a field that is `undefined` is left out. A request body is assembled
 * this way from the JSON of the parts it keeps from call to call (each
 * message's, the tools'), each serialized once, instead of serializing the
 * whole transcript again on every call.
 *
 * @since 0.1.0
 * @category encoding
 */
export const jsonObject = (fields: { readonly [key: string]: string | undefined }): string => {
  let text = ""
  for (const key in fields) {
    const value = fields[key]
    if (value === undefined) continue
    text += `${text === "" ? "{" : ","}${JSON.stringify(key)}:${value}`
  }
  return text === "" ? "{}" : `${text}}`
}

/**
 * The fields of a body as JSON text, with a user's extra fields merged in as
 * `{ ...body, ...extra }` would: a field of the same name replaced in its
 * place, the others added at the end.
 *
 * @since 0.1.0
 * @category encoding
 */
export const withExtraFields = (
  fields: Record<string, string | undefined>,
  extra: Readonly<Record<string, unknown>> | undefined
): Record<string, string | undefined> => {
  if (extra === undefined) return fields
  for (const key in extra) fields[key] = JSON.stringify(extra[key])
  return fields
}

/**
 * The provider options of a part under a provider's key, when they are an
 * object.
 *
 * @since 0.1.0
 * @category options
 */
export const providerOptions = (
  options: Prompt.ProviderOptions,
  key: string
): { readonly [key: string]: unknown } | undefined => {
  const value = options[key]
  return isObject(value) ? value : undefined
}

const isObject = (value: unknown): value is { readonly [key: string]: unknown } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * A string field of an options object.
 *
 * @since 0.1.0
 * @category options
 */
export const optionString = (options: { readonly [key: string]: unknown } | undefined, key: string) => {
  const value = options?.[key]
  return typeof value === "string" ? value : undefined
}

/**
 * OpenAI's strict JSON Schema output format for a structured-output request
 * (`generateObject`), with the schema made strict-compatible.
 *
 * @since 0.1.0
 * @category tools
 */
export const openAiJsonSchema = (
  format: Extract<LanguageModel.ProviderOptions["responseFormat"], { readonly type: "json" }>
) => ({
  name: format.objectName,
  schema: OpenAiStructuredOutput.toCodecOpenAI(format.schema).jsonSchema,
  strict: true
})
