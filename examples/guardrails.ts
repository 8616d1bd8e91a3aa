import { Effect, Layer } from "effect"
import { Agent, Guardrail, Message, Steering, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

// An input guardrail checks every text that enters the run: the prompt (beside the first model call: if it
// trips, the call is interrupted), and steering and follow-ups (before they are delivered).
const noSecrets = Guardrail.input(({ text }) =>
  Effect.succeed(/password/i.test(text) ? Guardrail.trip("the text holds a password") : Guardrail.pass), {
  name: "no-secrets"
})

// An output guardrail checks the final answer (a reply, or the typed output) before anyone sees it.
const noEmails = Guardrail.output(({ text }) =>
  Effect.succeed(/\S+@\S+/.test(text) ? Guardrail.trip("the answer holds an email address") : Guardrail.pass), {
  name: "no-emails"
})

const run = (prompt: string, replies: ReadonlyArray<ScriptedModel.Turn>, followUp?: string) =>
  Effect.gen(function*() {
    const steering = yield* Steering.make()
    if (followUp !== undefined) yield* steering.followUp(followUp)
    const result = yield* Agent.run({ prompt, steering, plugins: [noSecrets, noEmails] }).pipe(
      Effect.provide(ScriptedModel.layer(replies))
    )
    const { outcome } = result
    console.log(
      outcome._tag === "GuardrailTripped"
        ? `${outcome.phase} guardrail ${outcome.guardrail}: ${outcome.reason}`
        : outcome._tag
    )
    return result
  })

const program = Effect.gen(function*() {
  // the model would take a minute to answer: the trip does not wait for it
  yield* run("My password is hunter2, log in for me.", [{ text: "Logged in.", delay: "1 minute" }])
  // a follow-up that trips never reaches the model
  yield* run("Who is on call?", [{ text: "Ana is." }, { text: "Logged in." }], "Log in with password hunter2.")
  // a blocked answer is withheld: no event, transcript, state or result holds it
  const blocked = yield* run("Who do I write to?", [{ text: "Write to ops@example.com." }])
  console.log(Message.textOf(blocked.state.messages.at(-1)!))
  yield* run("Who do I call?", [{ text: "Call the ops desk." }])
})

Effect.runPromise(program.pipe(Effect.provide(Layer.succeed(ToolRegistry.ToolRegistry, ToolRegistry.empty))))
