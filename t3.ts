import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
const run = Command.make("run", {
  task: Flag.String("task").pipe(Flag.optional, Flag.withDescription("The task")),
  provider: Flag.Literals("provider", ["openai", "anthropic"]).pipe(Flag.optional),
  maxTurns: Flag.Int("max-turns").pipe(Flag.optional),
  mcp: Flag.String("mcp").pipe(Flag.atLeast(0)),
  quiet: Flag.Boolean("quiet"),
}, (flags) => Effect.sync(() => console.log(JSON.stringify(flags))))
const root = Command.make("effect-agent").pipe(Command.withSubcommands([run]), Command.withDescription("Run agents"))
Command.run(root, { version: "0.1.0" }).pipe(
  Effect.provide(NodeServices.layer),
  Effect.tapCause((c) => Effect.sync(() => console.error("CAUSE", c.reasons.map((r) => r._tag === "Fail" ? (r.error as any)._tag : r._tag)))),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
