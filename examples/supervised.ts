import { Effect } from "effect"
import { Check, Supervisor, SupervisorEvent, Worker } from "effect-agent/supervisor"

// The code being worked on, and a worker that edits it. Yours would be our own loop (the default)
// or a coding-agent CLI; here it is scripted: its first try is wrong, the feedback shows it why.
let code = (a: number, b: number) => a - b
const worker = Worker.make("editor", (request) =>
  Effect.sync(() => {
    const fixing = request.message.includes("add(2, 3)")
    code = fixing ? (a, b) => a + b : (a, b) => a * b
    const text = fixing ? "Used + as the check asks." : "Rewrote add."
    return { text, usage: { inputTokens: 100, outputTokens: 20 }, resumeToken: undefined }
  }))

// A check is any Effect returning pass or fail (or a shell command: Check.command("tests", "npm test")).
const add = Check.make(
  "add",
  Effect.sync((): Check.Verdict => {
    const got = code(2, 3)
    return got === 5
      ? { status: "pass", summary: "add(2, 3) is 5" }
      : { status: "fail", summary: `add(2, 3) should be 5, got ${got}` }
  })
)

const program = Supervisor.run({
  task: "Fix add.",
  worker,
  checks: [add],
  // The supervised run's own events come as `Custom` events: `SupervisorEvent.of` reads them.
  onEvent: (any) =>
    Effect.sync(() => {
      const event = SupervisorEvent.of(any)
      if (event?._tag === "CheckResult") {
        console.log(`check ${event.check}${event.baseline ? " (baseline)" : ""}: ${event.status}: ${event.summary}`)
      } else if (event?._tag === "WorkerTurnEnd") console.log(`turn ${event.turn}: ${event.text}`)
      else if (event?._tag === "FeedbackSent") console.log(`feedback:\n${event.feedback}`)
    })
})

Effect.runPromise(program).then((result) => console.log(`${result.outcome._tag} after ${result.turns} turns`))
