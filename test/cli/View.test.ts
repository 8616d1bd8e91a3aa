import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect } from "effect"
import { TestClock } from "effect/testing"
import { AgentError, type AgentEvent, Message, type Outcome, RunState } from "effect-agent"
import { SupervisorEvent } from "effect-agent/supervisor"
import * as View from "../../src/cli/internal/View.ts"
import { Screen } from "./screen.ts"

const usage = (input: number, output: number, cost: number): Message.Usage => ({
  ...Message.emptyUsage,
  input,
  output,
  cost
})

const reply: Message.AssistantMessage = {
  role: "assistant",
  content: [{ type: "text", text: "Hello world" }],
  stopReason: "toolUse",
  usage: usage(100, 10, 0.001)
}

const result = Message.toolResult({ toolCallId: "c1", toolName: "read_file", text: "hello\nworld", isError: false })

/** What a resumed run gives a call that is not replay-safe and had started. */
const unknownOutcome = Message.toolResult({
  toolCallId: "p1",
  toolName: "publish",
  text: "This call to publish had started when the run was interrupted, and its outcome is unknown",
  isError: true
})

const resumed = {
  sessionId: "checkpoint",
  resumedAtTurn: 2,
  restored: {
    messages: 1,
    turns: 1,
    usage: Message.emptyUsage,
    elapsedMs: 0,
    steering: 0,
    followUps: 0,
    pendingApprovals: 0
  }
}

/** An event at the test clock's time. */
const event = (input: AgentEvent.Input, turn = 1) =>
  Effect.map(Clock.currentTimeMillis, (timestamp): AgentEvent.AgentEvent => ({ ...input, runId: "run-1", turn, timestamp }))

const play = (view: View.View, input: AgentEvent.Input, turn = 1) =>
  Effect.map(event(input, turn), (e) => view.plugin.observe!(e, undefined!))

/** An AgentEnd with an outcome carries the run's result. */
const ended = (outcome: Outcome.Outcome): AgentEvent.Input => ({
  _tag: "AgentEnd",
  outcome,
  result: { messages: [], state: RunState.make({ runId: "run-1" }), outcome, usage: Message.emptyUsage }
})

const figures = (turns: number, u: Message.Usage): AgentEvent.BudgetFigures => ({
  turns,
  usage: u,
  elapsedMs: 0,
  limits: { turns: 50, tokens: null, inputTokens: null, outputTokens: null, costUsd: null, wallClock: null }
})

describe("View.live", () => {
  it.effect("streams text, shows running tools with a spinner and a status line, then each call's duration and outcome", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 60, color: true })
      assert.isFalse(screen.cursorVisible)
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("What is in a.txt?")] }, 0)
      yield* play(view, { _tag: "TurnStart" })
      yield* play(view, { _tag: "MessageUpdate", delta: { type: "text", index: 0, delta: "Hello " } })
      yield* TestClock.adjust("100 millis")
      // the line being streamed is at the bottom, above the status line
      assert.strictEqual(screen.text, "▶ What is in a.txt?\n── turn 1\nHello \nturn 1 · 0 tokens · $0.0000 · 0.1s")
      yield* play(view, { _tag: "MessageUpdate", delta: { type: "text", index: 0, delta: "world" } })
      yield* play(view, { _tag: "MessageEnd", message: reply })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "c1", toolName: "read_file", params: { path: "a.txt" } })
      yield* TestClock.adjust("1200 millis")
      const running = screen.lines.slice(-2)
      assert.match(running[0]!, /^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] read_file \{"path":"a\.txt"\} 1\.2s$/)
      // the reply's usage shows before the turn's snapshot
      assert.strictEqual(running[1], "turn 1 · 110 tokens · $0.0010 · 1.3s")
      yield* play(view, {
        _tag: "ToolExecutionEnd",
        toolCallId: "c1",
        toolName: "read_file",
        result,
        durationMs: 1234,
        terminate: false
      })
      yield* play(view, { _tag: "BudgetSnapshot", figures: figures(1, usage(100, 10, 0.001)) })
      yield* play(view, ended({ _tag: "Completed" }))
      view.close()
      assert.strictEqual(
        screen.text,
        [
          "▶ What is in a.txt?",
          "── turn 1",
          "Hello world",
          "  ✓ read_file {\"path\":\"a.txt\"} 1.2s → hello world",
          "■ Completed · 1 turn · 110 tokens · $0.0010 · 1.3s"
        ].join("\n")
      )
      assert.isTrue(screen.cursorVisible)
    }).pipe(Effect.scoped))

  it.effect("wraps long streamed lines at the terminal's width, at a space", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 30, color: false })
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      for (const word of "the quick brown fox jumps over the lazy dog and keeps running far away".split(" ")) {
        yield* play(view, { _tag: "MessageUpdate", delta: { type: "text", index: 0, delta: `${word} ` } })
      }
      yield* play(view, { _tag: "MessageEnd", message: reply })
      view.close()
      const lines = screen.lines.slice(1).filter((line) => line !== "")
      assert.deepStrictEqual(lines, ["the quick brown fox jumps", "over the lazy dog and keeps", "running far away "])
      assert.isTrue(lines.every((line) => line.length < 30))
    }).pipe(Effect.scoped))

  it.effect("a call waiting for approval says how to answer it, until it is resolved", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 120, color: false })
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: "c9", toolName: "bash", params: { command: "ls" } })
      yield* TestClock.adjust("100 millis")
      assert.include(screen.text, "  ? bash {\"command\":\"ls\"} needs approval (id c9)")
      assert.include(screen.text, "? bash waits for approval: send {\"type\":\"approve\",\"id\":\"c9\"} or {\"type\":\"deny\",\"id\":\"c9\"}")
      yield* play(view, { _tag: "ApprovalResolved", toolCallId: "c9", toolName: "bash", approved: false, reason: "no" })
      yield* TestClock.adjust("100 millis")
      assert.notInclude(screen.text, "waits for approval")
      assert.include(screen.text, "  ✗ denied bash: no")
    }).pipe(Effect.scoped))

  it.effect("a sub-agent's call waiting for approval is shown with its agent and the id that answers it", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 120, color: false })
      const nested = (inner: AgentEvent.Input) =>
        Effect.flatMap(event(inner), (e) => play(view, { _tag: "Nested", path: ["deployer"], event: e }))
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: "c1", approvalId: "c1", toolName: "bash", params: {} })
      yield* nested({ _tag: "ApprovalRequested", toolCallId: "c1", approvalId: "c2/c1", toolName: "deploy", params: {} })
      yield* TestClock.adjust("100 millis")
      assert.include(screen.text, "  ? deployer: deploy {} needs approval (id c2/c1)")
      assert.include(screen.text, "? deployer: deploy waits for approval: send {\"type\":\"approve\",\"id\":\"c2/c1\"}")
      assert.include(screen.text, "? bash waits for approval: send {\"type\":\"approve\",\"id\":\"c1\"}")
      yield* nested({ _tag: "ApprovalResolved", toolCallId: "c1", approvalId: "c2/c1", toolName: "deploy", approved: true })
      yield* TestClock.adjust("100 millis")
      assert.include(screen.text, "  ✓ deployer: approved deploy")
      assert.notInclude(screen.text, "deploy waits for approval")
      assert.include(screen.text, "? bash waits for approval")
    }).pipe(Effect.scoped))

  it.effect("a provider's retry is a line of its own, above the bottom lines; a failure's tag is said once", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 120, color: false })
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      yield* play(view, { _tag: "TurnStart" })
      view.retrying({ attempt: 2, of: 4, delayMs: 2140, after: "503", timestamp: 0 })
      yield* TestClock.adjust("100 millis")
      assert.deepStrictEqual(screen.lines.slice(0, 3), ["▶ go", "── turn 1", "  ↻ retrying in 2.1 s after 503 (2 of 4)"])
      yield* play(view, {
        _tag: "AgentEnd",
        error: new AgentError.ConfigError({ field: "x", rule: "ConfigError: ConfigError: bad\n\nreally" })
      })
      view.close()
      assert.include(screen.text, "■ failed: ")
      assert.strictEqual(screen.text.split("ConfigError: ").length, 2)
    }).pipe(Effect.scoped))

  it.effect("an approved call shows its own time and its wait for approval apart; calls the run ends without are shown cancelled", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 120, color: false })
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: "w1", toolName: "write_file", params: { path: "a" } })
      yield* TestClock.adjust("4200 millis")
      yield* play(view, { _tag: "ApprovalResolved", toolCallId: "w1", toolName: "write_file", approved: true })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "w1", toolName: "write_file", params: { path: "a" } })
      yield* TestClock.adjust("300 millis")
      yield* play(view, {
        _tag: "ToolExecutionEnd",
        toolCallId: "w1",
        toolName: "write_file",
        result: Message.toolResult({ toolCallId: "w1", toolName: "write_file", text: "Created a", isError: false }),
        durationMs: 4500,
        terminate: false
      })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "b1", toolName: "bash", params: { command: "sleep 30" } })
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: "b2", toolName: "bash", params: { command: "ls" } })
      yield* TestClock.adjust("1500 millis")
      yield* play(view, ended({ _tag: "Cancelled", reason: "interrupted" }))
      view.close()
      const lines = screen.text.split("\n")
      assert.include(lines, "  ✓ write_file {\"path\":\"a\"} 0.3s (after 4.2 s waiting for approval) → Created a")
      assert.include(lines, "  ✗ bash {\"command\":\"sleep 30\"} 1.5s → cancelled: interrupted")
      assert.include(lines, "  ✗ bash waiting for approval → cancelled: interrupted")
      assert.strictEqual(lines.at(-1), "■ Cancelled: interrupted · 0 turns · 0 tokens · $0.0000 · 6.0s")
    }).pipe(Effect.scoped))

  it.effect("a resumed run says which session it resumes, and a result whose outcome is unknown is marked ✗", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 120, color: false, session: "/home/me/sessions/release" })
      yield* play(view, { _tag: "AgentStart", messages: [] }, 2)
      yield* play(view, { _tag: "SessionResumed", ...resumed }, 2)
      yield* play(view, { _tag: "ToolExecutionEnd", toolCallId: "p1", toolName: "publish", result: unknownOutcome, durationMs: 0, terminate: false }, 2)
      view.close()
      assert.deepStrictEqual(screen.text.split("\n"), [
        "↻ resumed /home/me/sessions/release at turn 2 (1 message restored)",
        "  ✗ publish 0.0s → This call to publish had started when the run was interrupted, and its outcome is unknown"
      ])
    }).pipe(Effect.scoped))

  it.effect("with an input line: the line being typed is drawn at the bottom, with a hint when empty", () =>
    Effect.gen(function*() {
      const screen = new Screen()
      const view = yield* View.live({ write: screen.write, columns: () => 120, color: false, input: true })
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      yield* TestClock.adjust("100 millis")
      assert.strictEqual(
        screen.lines.at(-1),
        "› type a control line: {\"type\":\"steer\",\"text\":\"…\"}, {\"type\":\"follow_up\",\"text\":\"…\"} or {\"type\":\"cancel\"}"
      )
      view.typing(`{"type":"steer","text":"use metric"}`)
      assert.strictEqual(screen.lines.at(-1), `› {"type":"steer","text":"use metric"}▏`)
      // a long line shows its end
      view.typing("x".repeat(150) + "END")
      assert.strictEqual(screen.lines.at(-1), `› ${"x".repeat(113)}END▏`)
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: "c9", toolName: "bash", params: {} })
      view.typing("")
      assert.strictEqual(
        screen.lines.at(-1),
        "› type a control line: {\"type\":\"approve\"} or {\"type\":\"deny\",\"reason\":\"…\"} answers the oldest call waiting"
      )
    }).pipe(Effect.scoped))
})

/**
 * Text an agent could write to take over a terminal: set the title, clear the screen, go home, hide text (SGR 8)
 * and fake a colour, plant a link (OSC 8), ring, overwrite a line (CR), move up (C1 CSI), reverse the text (bidi).
 */
const hostile = "\x1b]0;owned title\x07\x1b[2J\x1b[Hgone \x1b[8mhidden\x1b[0m \x1b[30;47mfake\x1b[0m " +
  "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ bad\rgood\x9b1A \u202eevil\u202c \u2066iso\u2069"
/** What is left of it. */
const shownText = "gone hidden fake link badgood evil iso"
/** Escapes the agent wrote, none of which the views use. */
const agentEscapes = ["\x07", "\x1b]", "\x1b[2J", "\x1b[H", "\x1b[8m", "\x1b[30;47m", "\x9b", "\r", "\u202e", "\u2066"]

describe("what the agent wrote reaches the terminal without its escapes", () => {
  it("printable drops every escape sequence whole, control characters but newlines and tabs, bidi controls", () => {
    assert.strictEqual(View.printable(hostile), shownText)
    assert.strictEqual(View.printable("a\tb\n\x1b[31mred\x1b[0m"), "a\tb\nred")
    // an OSC without its terminator: its introducer goes, its text stays
    assert.strictEqual(View.printable("\x1b]0;no end"), "0;no end")
  })

  it("answer: the bytes as they are for a pipe, printable for a terminal", () => {
    assert.strictEqual(View.answer(hostile, false), hostile)
    assert.strictEqual(View.answer(hostile, true), shownText)
  })

  it.effect("the log, coloured: model text, a tool's name, arguments and result, approvals, a plan, the end", () =>
    Effect.gen(function*() {
      let out = ""
      const view = View.log((text) => void (out += text), { color: true })
      yield* play(view, { _tag: "AgentStart", messages: [Message.user(hostile)] }, 0)
      yield* play(view, { _tag: "MessageUpdate", delta: { type: "text", index: 0, delta: hostile } })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "c1", toolName: hostile, params: { p: hostile } })
      yield* play(view, {
        _tag: "ToolExecutionEnd",
        toolCallId: "c1",
        toolName: hostile,
        result: Message.toolResult({ toolCallId: "c1", toolName: "x", text: hostile, isError: false }),
        durationMs: 1,
        terminate: false
      })
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: hostile, toolName: hostile, params: { p: hostile } })
      yield* play(view, { _tag: "ApprovalResolved", toolCallId: hostile, toolName: hostile, approved: false, reason: hostile })
      yield* play(view, SupervisorEvent.make({ _tag: "PlanProposed", plan: hostile, iteration: 1 }))
      yield* play(view, ended({ _tag: "Cancelled", reason: hostile }))
      for (const bad of agentEscapes) assert.notInclude(out, bad)
      assert.include(out, shownText)
      // our own colours are there
      assert.include(out, "\x1b[1m")
    }))

  it.effect("the live view: nothing but its own cursor and colour codes", () =>
    Effect.gen(function*() {
      let raw = ""
      const screen = new Screen()
      const write = (text: string) => {
        raw += text
        screen.write(text)
      }
      const view = yield* View.live({ write, columns: () => 200, color: true })
      yield* play(view, { _tag: "AgentStart", messages: [Message.user(hostile)] }, 0)
      yield* play(view, { _tag: "MessageUpdate", delta: { type: "text", index: 0, delta: `${hostile}\n` } })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "c1", toolName: hostile, params: { p: hostile } })
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: hostile, toolName: hostile, params: {} })
      yield* TestClock.adjust("200 millis")
      yield* play(view, ended({ _tag: "Cancelled", reason: hostile }))
      view.close()
      // the view's own carriage returns go with its cursor moves; the agent's shows as "badgood" on the screen
      for (const bad of agentEscapes.filter((bad) => bad !== "\r")) assert.notInclude(raw, bad)
      assert.include(screen.text, shownText)
    }).pipe(Effect.scoped))
})

describe("View.log", () => {
  it.effect("one line per event, no escape codes; outcomes are described", () =>
    Effect.gen(function*() {
      let out = ""
      const view = View.log((text) => void (out += text))
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      yield* play(view, { _tag: "TurnStart" })
      yield* play(view, { _tag: "MessageUpdate", delta: { type: "text", index: 0, delta: "Looking." } })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "c1", toolName: "read_file", params: { path: "a.txt" } })
      yield* TestClock.adjust("250 millis")
      yield* play(view, {
        _tag: "ToolExecutionEnd",
        toolCallId: "c1",
        toolName: "read_file",
        result,
        durationMs: 250,
        terminate: false
      })
      view.note("stdin line 2: not a JSON object; ignored")
      yield* play(view, ended({ _tag: "BudgetExceeded", budget: "costUsd", limit: 0.01, used: 0.0125 }))
      assert.notInclude(out, "\x1b")
      assert.strictEqual(
        out,
        [
          "  0.00s ▶ run run-1: go",
          "  0.00s ── turn 1",
          "  0.00s model: Looking.",
          "  0.00s ⚙ read_file {\"path\":\"a.txt\"}",
          "  0.25s ✓ read_file 250 ms → hello world",
          "! stdin line 2: not a JSON object; ignored",
          "  0.25s ■ BudgetExceeded: the costUsd budget ran out ($0.0125 used of $0.0100)",
          ""
        ].join("\n")
      )
    }))

  it.effect("a call that ended in a defect of its tool says what the defect was, apart from the result the model read", () =>
    Effect.gen(function*() {
      let out = ""
      const view = View.log((text) => void (out += text))
      yield* play(view, { _tag: "AgentStart", messages: [] }, 0)
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "c1", toolName: "lookup", params: {} })
      yield* play(view, {
        _tag: "ToolExecutionEnd",
        toolCallId: "c1",
        toolName: "lookup",
        result: Message.toolResult({ toolCallId: "c1", toolName: "lookup", text: "Tool lookup failed", isError: true }),
        durationMs: 0,
        terminate: false,
        defect: "TypeError: cannot read properties of undefined (reading 'rows')\u001b[2J"
      })
      assert.notInclude(out, "\x1b")
      assert.include(
        out,
        "✗ lookup 0 ms → Tool lookup failed [defect: TypeError: cannot read properties of undefined (reading 'rows')"
      )
    }))

  it.effect("a resumed run's header names the session; waits for approval and cancelled calls are shown; 1 turn", () =>
    Effect.gen(function*() {
      let out = ""
      const view = View.log((text) => void (out += text), { session: "/home/me/sessions/release" })
      yield* play(view, { _tag: "AgentStart", messages: [] }, 0)
      yield* play(view, { _tag: "SessionResumed", ...resumed })
      yield* play(view, { _tag: "ToolExecutionEnd", toolCallId: "p1", toolName: "publish", result: unknownOutcome, durationMs: 0, terminate: false })
      yield* play(view, { _tag: "ApprovalRequested", toolCallId: "w1", toolName: "write_file", params: {} })
      yield* TestClock.adjust("2 seconds")
      yield* play(view, { _tag: "ApprovalResolved", toolCallId: "w1", toolName: "write_file", approved: true })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "w1", toolName: "write_file", params: {} })
      yield* TestClock.adjust("40 millis")
      yield* play(view, {
        _tag: "ToolExecutionEnd",
        toolCallId: "w1",
        toolName: "write_file",
        result: Message.toolResult({ toolCallId: "w1", toolName: "write_file", text: "ok", isError: false }),
        durationMs: 2040,
        terminate: false
      })
      yield* play(view, { _tag: "BudgetSnapshot", figures: figures(1, usage(10, 2, 0)) })
      yield* play(view, { _tag: "ToolExecutionStart", toolCallId: "b1", toolName: "bash", params: {} })
      yield* TestClock.adjust("1 second")
      yield* play(view, ended({ _tag: "Cancelled", reason: "interrupted" }))
      assert.strictEqual(
        out,
        [
          "  0.00s ▶ run run-1",
          "  0.00s ↻ resumed /home/me/sessions/release at turn 2 (1 message restored)",
          "  0.00s ✗ publish 0 ms → This call to publish had started when the run was interrupted, and ...",
          "  0.00s ? approval requested for write_file {} (id w1)",
          "  2.00s ✓ approved write_file",
          "  2.00s ⚙ write_file {}",
          "  2.04s ✓ write_file 40 ms (after 2.0 s waiting for approval) → ok",
          "  2.04s   tokens 10 in / 2 out · $0.0000 · 1 turn",
          "  2.04s ⚙ bash {}",
          "  3.04s ✗ bash 1000 ms → cancelled: interrupted",
          "  3.04s ■ Cancelled: interrupted",
          ""
        ].join("\n")
      )
      assert.strictEqual(View.describe({ _tag: "MaxTurns", limit: 1 }), "the turn cap of 1 turn was reached")
    }))

  it.effect("a sub-agent's approval is a line with its agent and the id that answers it", () =>
    Effect.gen(function*() {
      let out = ""
      const view = View.log((text) => void (out += text))
      const nested = (inner: AgentEvent.Input) =>
        Effect.flatMap(event(inner), (e) => play(view, { _tag: "Nested", path: ["ops", "deployer"], event: e }))
      yield* play(view, { _tag: "AgentStart", messages: [Message.user("go")] }, 0)
      yield* nested({ _tag: "ApprovalRequested", toolCallId: "c1", approvalId: "c2/c4/c1", toolName: "deploy", params: {} })
      yield* nested({
        _tag: "ApprovalResolved",
        toolCallId: "c1",
        approvalId: "c2/c4/c1",
        toolName: "deploy",
        approved: false,
        reason: "no"
      })
      assert.include(out, "? ops/deployer: approval requested for deploy {} (id c2/c4/c1)\n")
      assert.include(out, "✗ ops/deployer: denied deploy: no\n")
    }))

  it("describes every outcome", () => {
    assert.strictEqual(View.describe({ _tag: "WrappedUp" }), "the model was asked to wrap up (turn limit or budget) and delivered its final answer")
    assert.strictEqual(View.describe({ _tag: "MaxTurns", limit: 3 }), "the turn cap of 3 turns was reached")
    assert.strictEqual(
      View.describe({ _tag: "BudgetExceeded", budget: "wallClock", limit: 1000, used: 1500 }),
      "the wallClock budget ran out (1.5s used of 1.0s)"
    )
    assert.strictEqual(
      View.describe({ _tag: "BudgetExceeded", budget: "tokens", limit: 100, used: 150 }),
      "the tokens budget ran out (150 used of 100)"
    )
    assert.strictEqual(View.describe({ _tag: "LoopDetected", repeats: 4, signature: "x" }), "the model repeated the same tool calls 4 times")
    assert.strictEqual(View.describe({ _tag: "Cancelled", reason: "enough" }), "enough")
  })
})
