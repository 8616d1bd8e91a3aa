import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Option, type Terminal } from "effect"
import { TestClock } from "effect/testing"
import { type AgentEvent, Message, type Outcome, RunState } from "effect-agent"
import { TerminalInput, View } from "effect-agent/cli"

/**
 * A terminal screen for the writes of the live view: it applies line feeds,
 * carriage returns, cursor-up, erase-below and cursor visibility, and drops
 * colours, so a test can read what a user would see.
 */
class Screen {
  lines: Array<string> = [""]
  row = 0
  col = 0
  cursorVisible = true
  write = (text: string) => {
    // eslint-disable-next-line no-control-regex
    const tokens = text.match(/\x1b\[[0-9;?]*[A-Za-z]|[\s\S]/gu) ?? []
    for (const token of tokens) {
      if (token === "\n") {
        this.row++
        this.col = 0
        if (this.lines.length <= this.row) this.lines.push("")
      } else if (token === "\r") {
        this.col = 0
      } else if (token.startsWith("\x1b[")) {
        const code = token.slice(2)
        if (code.endsWith("A")) this.row -= Number(code.slice(0, -1) || 1)
        else if (code === "J") {
          this.lines[this.row] = Array.from(this.lines[this.row]!).slice(0, this.col).join("")
          this.lines.length = this.row + 1
        } else if (code === "?25l") this.cursorVisible = false
        else if (code === "?25h") this.cursorVisible = true
      } else {
        const chars = Array.from(this.lines[this.row]!)
        while (chars.length < this.col) chars.push(" ")
        chars[this.col] = token
        this.lines[this.row] = chars.join("")
        this.col++
      }
    }
  }
  get text() {
    return this.lines.join("\n").replace(/\n+$/, "")
  }
}

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
          "■ Completed · 1 turns · 110 tokens · $0.0010 · 1.3s"
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

describe("TerminalInput.edit", () => {
  const key = (name: string, input?: string, ctrl = false): Terminal.UserInput => ({
    input: input === undefined ? Option.none() : Option.some(input),
    key: { name, ctrl, meta: false, shift: false }
  })
  it("types, erases, clears, sends the line; Ctrl-D ends an empty line; Ctrl-C interrupts", () => {
    assert.deepStrictEqual(TerminalInput.edit("ab", key("c", "c")), { _tag: "Typing", text: "abc" })
    assert.deepStrictEqual(TerminalInput.edit("abé", key("backspace")), { _tag: "Typing", text: "ab" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("u", undefined, true)), { _tag: "Typing", text: "" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("return", "\r")), { _tag: "Line", line: "ab" })
    assert.deepStrictEqual(TerminalInput.edit("", key("d", undefined, true)), { _tag: "End" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("d", undefined, true)), { _tag: "Typing", text: "ab" })
    assert.deepStrictEqual(TerminalInput.edit("ab", key("c", undefined, true)), { _tag: "Interrupt" })
    // escape sequences (arrows) are not text
    assert.deepStrictEqual(TerminalInput.edit("ab", key("up", "\x1b[A")), { _tag: "Typing", text: "ab" })
  })
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
