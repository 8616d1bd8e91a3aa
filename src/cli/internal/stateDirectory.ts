/**
 * Where the command keeps its per-user state, such as the key that seals its
 * sessions and the server's default store: `$XDG_STATE_HOME/effect-agent`
 * when `XDG_STATE_HOME` is an absolute path (as the XDG spec asks), else
 * `$HOME/.local/state/effect-agent`. The command's sandboxes hide it from the
 * agent (`Runner.ts`).
 *
 * @internal
 */
import type * as Path from "effect/Path"

/** The state directory, from the environment; `undefined` when neither variable is an absolute path. */
export const stateDirectory = (
  path: Path.Path,
  env: Readonly<Record<string, string | undefined>>
): string | undefined => {
  const state = env.XDG_STATE_HOME
  if (state !== undefined && path.isAbsolute(state)) return path.join(state, "effect-agent")
  const home = env.HOME
  return home === undefined || !path.isAbsolute(home) ? undefined : path.join(home, ".local", "state", "effect-agent")
}
