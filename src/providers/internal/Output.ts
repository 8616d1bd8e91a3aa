/**
 * The providers' side of the run's native structured output (core
 * `Output.NativeFormat`): the run provides the schema it wants the reply in
 * around a model call, under the key `effect-agent/Output/NativeFormat`, and
 * the providers' layers read it as they would `generateObject`'s schema. A
 * `Context.Reference` is found by its key, so the providers declare the same
 * reference without importing the core (they depend on `effect/ai` alone);
 * `test/providers/LoopContract.test.ts` pins that what the run provides is
 * what the providers read.
 *
 * @internal
 */
import * as Context from "effect/Context"
import type * as Schema from "effect/Schema"

/** The structured output a model call is asked for natively, if any. */
export const NativeFormat = Context.Reference<
  { readonly objectName: string; readonly schema: Schema.Top } | undefined
>("effect-agent/Output/NativeFormat", { defaultValue: () => undefined })
