/**
 * The offline demo (`effect-agent demo`, `npm run demo`): a trip-planning
 * agent on `ScriptedModel`, no keys, no network. It checks the weather in two
 * cities and looks up flights in parallel; while those tools run, the user
 * steers it ("prefer trains"); the steering reaches the model after the
 * batch, and the model changes its plan. Every event is shown as it happens.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import * as Agent from "../../Agent.ts"
import * as Message from "../../Message.ts"
import * as Steering from "../../Steering.ts"
import * as ToolRegistry from "../../ToolRegistry.ts"
import * as ScriptedModel from "../../testing/ScriptedModel.ts"
import { codes, ExitWith, fromOutcome } from "../ExitCode.ts"
import { Io } from "./Io.ts"
import * as SupervisedDemo from "./SupervisedDemo.ts"
import * as View from "./View.ts"

// ---------------------------------------------------------------------------
// Tools: ordinary effect/ai tools with handlers
// ---------------------------------------------------------------------------

const Weather = Tool.make("weather", {
  description: "Today's weather in a city",
  parameters: Schema.Struct({ city: Schema.String }),
  success: Schema.Struct({ city: Schema.String, celsius: Schema.Finite, sky: Schema.String })
})

const Flights = Tool.make("flights", {
  description: "Flights between two cities",
  parameters: Schema.Struct({ from: Schema.String, to: Schema.String }),
  success: Schema.Array(Schema.String)
})

const Trains = Tool.make("trains", {
  description: "Trains between two cities",
  parameters: Schema.Struct({ from: Schema.String, to: Schema.String }),
  success: Schema.Array(Schema.String)
})

const TripTools = Toolkit.make(Weather, Flights, Trains)

const forecasts: Record<string, { readonly celsius: number; readonly sky: string }> = {
  Oslo: { celsius: 4, sky: "clear" },
  Bergen: { celsius: 7, sky: "rain" }
}

const TripToolsLive = ToolRegistry.layer(TripTools).pipe(
  Layer.provide(TripTools.toLayer({
    weather: ({ city }) =>
      Effect.as(Effect.sleep("300 millis"), { city, ...(forecasts[city] ?? { celsius: 10, sky: "unknown" }) }),
    flights: ({ from, to }) => Effect.as(Effect.sleep("500 millis"), [`${from}→${to} 07:10`, `${from}→${to} 18:45`]),
    trains: ({ from, to }) => Effect.as(Effect.sleep("200 millis"), [`${from}→${to} 08:25 (Bergensbanen, 6h 50m)`])
  }))
)

// ---------------------------------------------------------------------------
// The model: a script that reads the request, so it reacts to the steering
// ---------------------------------------------------------------------------

const lastUserText = (request: ScriptedModel.Request): string => {
  const user = request.prompt.content.filter((message) => message.role === "user").at(-1)
  return user?.role === "user" ? user.content.map((part) => part.type === "text" ? part.text : "").join("") : ""
}

const script: ScriptedModel.Script = (index, request) => {
  switch (index) {
    case 0:
      return {
        delay: "400 millis",
        reasoning: "I need the weather at both ends and the travel options.",
        text: "Let me check the weather and the flights.",
        toolCalls: [
          { name: "weather", params: { city: "Oslo" } },
          { name: "weather", params: { city: "Bergen" } },
          { name: "flights", params: { from: "Oslo", to: "Bergen" } }
        ],
        usage: { input: 412, output: 58, cost: 0.0016 }
      }
    case 1:
      return lastUserText(request).includes("train")
        ? {
          delay: "400 millis",
          text: "Noted, trains it is. Looking up the railway.",
          toolCalls: [{ name: "trains", params: { from: "Oslo", to: "Bergen" } }],
          usage: { input: 690, output: 41, cost: 0.0024 }
        }
        : { delay: "400 millis", text: "Take the 07:10 flight.", usage: { input: 690, output: 12, cost: 0.0021 } }
    case 2:
      return {
        delay: "400 millis",
        text: "Take the 08:25 Bergensbanen from Oslo: a 6h 50m ride through the mountains. " +
          "Pack a rain jacket: Bergen is 7°C and wet, Oslo 4°C and clear.",
        usage: { input: 805, output: 47, cost: 0.0029 }
      }
    default:
      return undefined
  }
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

/**
 * Runs the demo, showing it in `view`; `write`, when given, receives the
 * answer and the totals, styled with colours when `color` is set. The result
 * holds them too.
 *
 * @since 0.1.0
 */
export const run = (options: {
  readonly view: View.View
  readonly write?: ((text: string) => void) | undefined
  readonly color?: boolean | undefined
}) =>
  Effect.gen(function*() {
    const s = View.style(options.color === true)
    const steering = yield* Steering.make()
    // The user changes their mind while the first tools are running.
    yield* Effect.forkChild(
      Effect.andThen(Effect.sleep("600 millis"), steering.steer("Actually, I'd rather take the train than fly."))
    )
    const result = yield* Agent.run({
      system: "You plan trips. Use the tools; be concise.",
      prompt: "Plan my trip from Oslo to Bergen tomorrow.",
      steering,
      plugins: [options.view.plugin],
      config: { maxParallelTools: 4 }
    })
    options.view.close()
    const write = options.write
    if (write !== undefined) {
      write(`\n${s.bold("Answer:")} ${Message.textOf(result.messages.at(-1)!)}\n`)
      write(s.dim(
        `${View.count(result.state.turn, "turn")} · ${View.count(result.messages.length, "message")} · ` +
          `${result.usage.input + result.usage.output} tokens · $${(result.usage.cost ?? 0).toFixed(4)}\n`
      ))
    }
    return result
  }).pipe(Effect.scoped, Effect.provide(Layer.merge(TripToolsLive, ScriptedModel.layer(script))))

// ---------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------

/**
 * `effect-agent demo [--supervised]`, with the rule of `run`: the progress on
 * stderr (the live view on a terminal, the event log elsewhere), the answer
 * on stdout (unless the live view already showed it on the same terminal).
 *
 * @since 0.1.0
 */
export const command = ({ supervised }: { readonly supervised: boolean }) =>
  Effect.gen(function*() {
    const io = yield* Io
    const view = io.stderr.isTerminal
      ? yield* View.live({ write: io.stderr.write, columns: io.stderr.columns, color: io.color })
      : View.log(io.stderr.write)
    const failed = (error: { readonly message: string }) =>
      Effect.andThen(
        Effect.sync(() => io.stderr.write(`effect-agent: ${View.errorText(error.message)}\n`)),
        Effect.fail(new ExitWith({ code: codes.unexpected }))
      )
    const answer = supervised
      ? yield* SupervisedDemo.run({ view }).pipe(
        Effect.flatMap((result) =>
          result.outcome._tag === "Converged"
            ? Effect.succeed(result.reply)
            : Effect.fail(new ExitWith({ code: fromOutcome(result.outcome) }))
        ),
        Effect.catch((error) => error._tag === "ExitWith" ? Effect.fail(error) : failed(error))
      )
      : yield* run({ view }).pipe(
        Effect.map((result) => {
          const last = result.messages.at(-1)
          return last === undefined ? "" : Message.textOf(last)
        }),
        Effect.catch(failed)
      )
    if (answer !== "" && !(io.stderr.isTerminal && io.stdout.isTerminal)) {
      io.stdout.write(`${View.answer(answer, io.stdout.isTerminal)}\n`)
    }
  }).pipe(Effect.scoped)
