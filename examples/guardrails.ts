import { Effect, Layer } from "effect"
import { Agent, Guardrail, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

// An input guardrail runs beside the first model call; if it trips, the call is interrupted.
const noSecrets = Guardrail.input(({ text }) =>
  Effect.succeed(/password/i.test(text) ? Guardrail.trip("the prompt holds a password") : Guardrail.pass), {
  name: "no-secrets"
})

// An output guardrail checks the final answer (a reply, or the typed output).
const noEmails = Guardrail.output(({ text }) =>
  Effect.succeed(/\S+@\S+/.test(text) ? Guardrail.trip("the answer holds an email address") : Guardrail.pass), {
  name: "no-emails"
})

const run = (prompt: string, reply: ScriptedModel.Turn) =>
  Agent.run({ prompt, plugins: [noSecrets, noEmails] }).pipe(
    Effect.provide(ScriptedModel.layer([reply])),
    Effect.map((result) =>
      result.outcome._tag === "GuardrailTripped"
        ? `${result.outcome.phase} guardrail ${result.outcome.guardrail}: ${result.outcome.reason}`
        : result.outcome._tag
    )
  )

const program = Effect.gen(function*() {
  // the model would take a minute to answer: the trip does not wait for it
  console.log(yield* run("My password is hunter2, log in for me.", { text: "Logged in.", delay: "1 minute" }))
  console.log(yield* run("Who do I write to?", { text: "Write to ops@example.com." }))
  console.log(yield* run("Who do I call?", { text: "Call the ops desk." }))
})

Effect.runPromise(program.pipe(Effect.provide(Layer.succeed(ToolRegistry.ToolRegistry, ToolRegistry.empty))))
