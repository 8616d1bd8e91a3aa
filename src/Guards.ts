/**
 * The guards that end a run before it runs away: each is a plugin, installed
 * from the config by {@link fromConfig}, so an application can see it, switch
 * it off (set its limit to `null`) or replace it with its own plugin.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { AgentConfig } from "./AgentConfig.ts"
import * as Hooks from "./Hooks.ts"
import * as Outcome from "./Outcome.ts"

/**
 * The turn cap: before a model call, once `limit` turns have completed, the
 * run ends with `MaxTurns` (every tool call of the last turn already has its
 * result).
 *
 * @since 0.1.0
 */
export const maxTurns = (limit: number): Hooks.Plugin => ({
  name: "maxTurns",
  beforeModelCall: (ctx) =>
    ctx.turn < limit
      ? Effect.succeed(Hooks.proceed)
      : Effect.as(
        ctx.emit({
          _tag: "GuardTripped",
          guard: "maxTurns",
          action: "stop",
          detail: `the run reached its cap of ${limit} turns`,
          figures: { turns: ctx.turn, limit }
        }),
        Hooks.stop(Outcome.maxTurns(limit))
      )
})

/**
 * The guards a config asks for, in the order they run.
 *
 * @since 0.1.0
 */
export const fromConfig = (config: AgentConfig): ReadonlyArray<Hooks.Plugin> => {
  const guards: Array<Hooks.Plugin> = []
  if (config.maxTurns !== null) guards.push(maxTurns(config.maxTurns))
  return guards
}
