/**
 * A supervised run's events (the run has no `Hooks.Context` of its own),
 * delivered to the command's plugins: the view, the tally, the JSON lines.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as AgentConfig from "../../AgentConfig.ts"
import type * as AgentEvent from "../../AgentEvent.ts"
import type * as Hooks from "../../Hooks.ts"
import * as Message from "../../Message.ts"
import * as RunState from "../../RunState.ts"

/**
 * Resolves the plugins once, and returns where each event goes.
 *
 * @since 0.1.0
 */
export const deliverTo = <R = never>(plugins: ReadonlyArray<Hooks.PluginInput<R>>) =>
  Effect.gen(function*() {
    const resolved: Array<Hooks.Plugin<R>> = []
    for (const plugin of plugins) resolved.push(Effect.isEffect(plugin) ? yield* plugin : plugin)
    const services = yield* Effect.context<R>()
    const config = AgentConfig.makeUnsafe({})
    // The command's plugins read the event only; the context they get says which run and turn it belongs to.
    const contextOf = (event: AgentEvent.AgentEvent): Hooks.Context => ({
      runId: event.runId,
      turn: event.turn,
      messages: [],
      usage: Message.emptyUsage,
      elapsedMs: 0,
      config,
      system: undefined,
      wrapUpRequested: false,
      emit: () => Effect.void,
      snapshot: Effect.sync(() => RunState.make({ runId: event.runId })),
      // Nothing runs here to stop: an observer's stop does nothing.
      stopper: Effect.succeed(() => Effect.void)
    })
    return (event: AgentEvent.AgentEvent): Effect.Effect<void> =>
      Effect.suspend(() => {
        const ctx = contextOf(event)
        for (const plugin of resolved) plugin.observe?.(event, ctx)
        return Effect.forEach(resolved, (plugin) => plugin.onEvent?.(event, ctx) ?? Effect.void, { discard: true })
      }).pipe(Effect.provideContext(services))
  })

