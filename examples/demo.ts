/**
 * The offline demo: a trip-planning agent on ScriptedModel (no keys, no
 * network). It checks the weather in two cities and looks up flights in
 * parallel; while those tools run, the user steers it ("prefer trains"); the
 * steering reaches the model after the batch, and the model changes its plan.
 * Every event is printed as it happens.
 *
 * Run it with `npm run demo`.
 */
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { Agent, type AgentEvent, Hooks, Message, Steering, ToolRegistry } from "effect-agent"
import { ScriptedModel } from "effect-agent/testing"

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
// A live log of the run's events
// ---------------------------------------------------------------------------

const color = (code: number) => (text: string) => process.stdout.isTTY ? `\x1b[${code}m${text}\x1b[0m` : text
const dim = color(2)
const bold = color(1)
const cyan = color(36)
const green = color(32)
const yellow = color(33)
const red = color(31)

const compact = (value: unknown): string => {
  const text = typeof value === "string" ? value : JSON.stringify(value)
  return text.length > 70 ? `${text.slice(0, 67)}...` : text
}

/** Renders events as readable lines; `write` receives each piece of output. */
export const liveLog = (write: (text: string) => void): Hooks.Plugin => {
  let startedAt = 0
  let streaming: "text" | "reasoning" | undefined
  const clock = (event: AgentEvent.AgentEvent) => dim(`${((event.timestamp - startedAt) / 1000).toFixed(2).padStart(6)}s `)
  const endStream = () => {
    if (streaming !== undefined) write("\n")
    streaming = undefined
  }
  const line = (event: AgentEvent.AgentEvent, text: string) => {
    endStream()
    write(`${clock(event)}${text}\n`)
  }
  const render = (event: AgentEvent.AgentEvent): void => {
    switch (event._tag) {
      case "AgentStart":
        startedAt = event.timestamp
        return line(event, bold(`▶ run ${event.runId.slice(0, 8)}: ${event.messages.map(Message.textOf).join(" ")}`))
      case "TurnStart":
        return line(event, bold(cyan(`── turn ${event.turn}`)))
      case "MessageUpdate": {
        const kind = event.delta.type
        if (kind === "toolCall") return
        if (streaming !== kind) {
          endStream()
          write(`${clock(event)}${kind === "reasoning" ? dim("thinking: ") : "model: "}`)
          streaming = kind
        }
        return write(kind === "reasoning" ? dim(event.delta.delta) : event.delta.delta)
      }
      case "ToolExecutionStart":
        return line(event, `${yellow("⚙")} ${event.toolName} ${dim(compact(event.params))}`)
      case "ToolExecutionEnd": {
        const mark = event.result.isError ? red("✗") : green("✓")
        return line(event, `${mark} ${event.toolName} ${dim(`${event.durationMs} ms`)} → ${compact(Message.textOf(event.result))}`)
      }
      case "SteeringDelivered":
        return line(event, yellow(`↪ steering delivered: ${event.messages.map(Message.textOf).join(" ")}`))
      case "FollowUpDelivered":
        return line(event, yellow(`↪ follow-up delivered: ${event.messages.map(Message.textOf).join(" ")}`))
      case "ApprovalRequested":
        return line(event, yellow(`? approval requested for ${event.toolName}`))
      case "GuardTripped":
        return line(event, red(`! ${event.guard}: ${event.detail}`))
      case "BudgetSnapshot": {
        const { usage } = event.figures
        return line(
          event,
          dim(`  tokens ${usage.input} in / ${usage.output} out · $${(usage.cost ?? 0).toFixed(4)} · ${event.figures.turns} turns`)
        )
      }
      case "AgentEnd":
        return line(
          event,
          event.outcome !== undefined
            ? bold(green(`■ ${event.outcome._tag}`))
            : bold(red(`■ failed: ${event.error?.message ?? "defect"}`))
        )
      default:
        return
    }
  }
  return Hooks.plugin({ name: "live-log", onEvent: (event) => Effect.sync(() => render(event)) })
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

/** The demo as an Effect; `write` receives the log. */
export const demo = (write: (text: string) => void) =>
  Effect.gen(function*() {
    const steering = yield* Steering.make()
    // The user changes their mind while the first tools are running.
    yield* Effect.forkChild(
      Effect.andThen(Effect.sleep("600 millis"), steering.steer("Actually, I'd rather take the train than fly."))
    )
    const result = yield* Agent.run({
      system: "You plan trips. Use the tools; be concise.",
      prompt: "Plan my trip from Oslo to Bergen tomorrow.",
      steering,
      plugins: [liveLog(write)],
      config: { maxParallelTools: 4 }
    })
    write(`\n${bold("Answer:")} ${Message.textOf(result.messages.at(-1)!)}\n`)
    write(dim(
      `${result.state.turn} turns · ${result.messages.length} messages · ` +
        `${result.usage.input + result.usage.output} tokens · $${(result.usage.cost ?? 0).toFixed(4)}\n`
    ))
    return result
  }).pipe(Effect.scoped, Effect.provide(Layer.merge(TripToolsLive, ScriptedModel.layer(script))))

if (process.argv[1] !== undefined && import.meta.url === new URL(process.argv[1], "file://").href) {
  Effect.runPromise(demo((text) => process.stdout.write(text))).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
