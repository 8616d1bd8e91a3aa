/**
 * The answer check of a run with `beforeAnswer` hooks (an output guardrail):
 * a reply is held while it streams (`Reply.streamReply` emits none of its
 * deltas), and when it ends:
 *
 * - a reply that cannot be the final answer (it calls tools, none of them a
 *   valid `final_answer`) is released at once: its deltas, one per content
 *   part, then its `MessageEnd`;
 * - one that may be (see `Hooks.Answer`) is checked by every `beforeAnswer`
 *   hook, racing the run's stops, before it is released;
 * - a `Stop` withholds it: a reply that says so, with the same usage,
 *   replaces it (its `MessageEnd`, and the reply the turn appends), and the
 *   turn ends the run with the hook's outcome. A reply cut short by a stop,
 *   or whose check a stop cut short, is withheld unchecked.
 *
 * All of it runs inside the turn's model call, so a durable session's
 * activity memoizes the reply as released or withheld (a replay neither
 * checks it again nor sees the blocked text), and a traced call records
 * that reply. A run without `beforeAnswer` hooks never comes here.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as AgentEvent from "../AgentEvent.ts"
import type * as Hooks from "../Hooks.ts"
import * as Message from "../Message.ts"
import type * as Outcome from "../Outcome.ts"
import * as ToolArguments from "../ToolArguments.ts"
import * as Events from "./events.ts"
import type * as LiveRun from "./liveRun.ts"
import type * as OutputPart from "./output.ts"
import * as Stops from "./stops.ts"

/**
 * How the deltas of a reply are announced (`Events.messageUpdates`, or the
 * typed output's, which add `OutputDelta`s).
 *
 * @internal
 */
export type Updates<R> = (
  sink: Events.EventSink<R>,
  deltas: ReadonlyArray<AgentEvent.Delta>
) => Effect.Effect<void, never, R>

/**
 * A reply as the answer check leaves it: released as it was, or withheld
 * (`stopped` is then the stop that ends the run).
 *
 * @internal
 */
export interface Checked {
  readonly message: Message.AssistantMessage
  readonly stopped: Stops.Stop | undefined
}

/**
 * What the model reads, in a continued run, in place of a reply a hook withheld.
 *
 * @internal
 */
export const withheldText = (plugin: string, outcome: Outcome.Outcome): string =>
  outcome._tag === "GuardrailTripped"
    ? `[This answer was withheld: the ${outcome.phase} guardrail ${outcome.guardrail} tripped (${outcome.reason}).]`
    : `[This answer was withheld by ${plugin}.]`

/**
 * What the model reads in place of a reply withheld unchecked.
 *
 * @internal
 */
export const cutShortText = "[This answer was withheld: the run stopped before its output checks had passed it.]"

/**
 * Releases, or checks and then releases or withholds, a reply that has ended
 * (`stopped`: the stop that cut it, if one did). A plain generator: the
 * reply's stream delegates to it with `yield*`.
 *
 * @internal
 */
export function* release<R>(
  run: LiveRun.Uses<R, "env" | "events" | "stops" | "output" | "context">,
  message: Message.AssistantMessage,
  stopped: Stops.Stop | undefined,
  updates: Updates<R>
) {
  const answers = answersOf(run.output, message)
  if (answers.length === 0) {
    yield* announce(run.events, message, updates)
    const released: Checked = { message, stopped }
    return released
  }
  if (stopped !== undefined) {
    // Cut short before it said anything: nothing to withhold.
    if (message.content.length > 0) return yield* withhold(run.events, message, cutShortText, stopped)
    yield* Events.messageEnded(run.events, message)
    const empty: Checked = { message, stopped }
    return empty
  }
  const verdict = yield* Stops.race(run.stops, check(run, answers), (stop): Verdict => ({ _tag: "Stopped", stop }))
  if (verdict === undefined) {
    yield* announce(run.events, message, updates)
    const released: Checked = { message, stopped: undefined }
    return released
  }
  if (verdict._tag === "Stopped") return yield* withhold(run.events, message, cutShortText, verdict.stop)
  const text = withheldText(verdict.plugin, verdict.outcome)
  return yield* withhold(run.events, message, text, { _tag: "Halt", outcome: verdict.outcome, reason: text })
}

/** What the checks decided: all proceeded (`undefined`), a hook stopped, or a stop of the run cut them short. */
type Verdict =
  | undefined
  | { readonly _tag: "Blocked"; readonly plugin: string; readonly outcome: Outcome.Outcome }
  | { readonly _tag: "Stopped"; readonly stop: Stops.Stop }

/** Every `beforeAnswer` hook on every answer of the reply, in order, until one stops. */
const check = <R>(
  run: LiveRun.Uses<R, "env" | "context">,
  answers: ReadonlyArray<Hooks.Answer>
): Effect.Effect<Verdict, never, R> =>
  Effect.gen(function*() {
    for (const answer of answers) {
      for (const plugin of run.env.hooks.beforeAnswer) {
        const decision = yield* plugin.beforeAnswer!(answer, run.context)
        if (decision._tag === "Stop") return { _tag: "Blocked", plugin: plugin.name, outcome: decision.outcome }
      }
    }
    return undefined
  })

/**
 * The answers a reply may give: itself, when it calls no tool; else, in a
 * run with a typed output through its tool, each `final_answer` call whose
 * arguments its Schema decodes (the ones the run may accept).
 */
const answersOf = (
  output: OutputPart.LiveOutput | undefined,
  message: Message.AssistantMessage
): ReadonlyArray<Hooks.Answer> => {
  const calls = Message.toolCalls(message)
  const answers: Array<Hooks.Answer> = []
  if (calls.length === 0) {
    answers.push({ message, text: Message.textOf(message) })
    return answers
  }
  if (output === undefined || output.native !== undefined) return answers
  const tool = output.answer.tool
  for (const call of calls) {
    if (call.name !== tool.name || ToolArguments.isMalformed(call.params)) continue
    if (Exit.isFailure(output.decodeAnswer(call.params))) continue
    answers.push({ message, text: ToolArguments.toJsonText(call.params), output: call.params })
  }
  return answers
}

/** Announces a released reply: one delta per content part (streaming is per reply), then its end. */
function* announce<R>(events: Events.EventSink<R>, message: Message.AssistantMessage, updates: Updates<R>) {
  if (events.observed) {
    const deltas = deltasOf(message)
    if (deltas.length > 0) yield* updates(events, deltas)
  }
  yield* Events.messageEnded(events, message)
}

const deltasOf = (message: Message.AssistantMessage): Array<AgentEvent.Delta> => {
  const deltas: Array<AgentEvent.Delta> = []
  message.content.forEach((part, index) => {
    switch (part.type) {
      case "text":
      case "reasoning":
        if (part.text !== "") deltas.push({ type: part.type, index, delta: part.text })
        break
      case "tool-call":
        deltas.push({ type: "toolCall", id: part.id, name: part.name, delta: ToolArguments.toJsonText(part.params) })
        break
    }
  })
  return deltas
}

/**
 * Withholds a reply: nothing of it is announced, a reply that says it was
 * withheld (the usage kept, for the budgets) ends the message instead, and
 * the turn appends that one.
 */
function* withhold<R>(
  events: Events.EventSink<R>,
  message: Message.AssistantMessage,
  text: string,
  stopped: Stops.Stop
) {
  const withheld: Message.AssistantMessage = {
    role: "assistant",
    content: [Message.text(text)],
    stopReason: message.stopReason === "toolUse" ? "stop" : message.stopReason,
    usage: message.usage,
    ...(message.model === undefined ? {} : { model: message.model })
  }
  yield* Events.messageEnded(events, withheld)
  const checked: Checked = { message: withheld, stopped }
  return checked
}
