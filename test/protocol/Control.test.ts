import { assert, describe, it } from "@effect/vitest"
import { type Cause, Deferred, Effect, Fiber, Queue, Result, Stream } from "effect"
import { Approvals, Message, Steering } from "effect-agent"
import { Control } from "effect-agent/protocol"

const encoder = new TextEncoder()

/** Bytes cut every `size` characters, so lines are split across chunks. */
const input = (text: string, size = 5) => {
  const chunks: Array<Uint8Array> = []
  for (let i = 0; i < text.length; i += size) chunks.push(encoder.encode(text.slice(i, i + size)))
  return Stream.fromIterable(chunks)
}

/** A call's request; `under`: the call that runs the sub-agent making it. */
const request = (toolCallId: string, under?: string): Approvals.Request => ({
  runId: "r",
  toolCallId,
  approvalId: under === undefined ? toolCallId : `${under}/${toolCallId}`,
  toolName: "write_file",
  params: {}
})

const setup = Effect.gen(function*() {
  const steering = yield* Steering.make()
  const interactive = yield* Approvals.interactive()
  const eof = yield* Deferred.make<void>()
  const notes: Array<string> = []
  const serve = (text: string, onEof: Control.OnEof = "ignore") =>
    Control.serve({
      lines: Control.lines(input(text)),
      target: { messages: steering, approvals: interactive },
      onEof,
      eof,
      report: (note) => Effect.sync(() => void notes.push(note))
    })
  return { steering, interactive, eof, notes, serve, approvals: Control.approvalsUntilEof(interactive, eof) }
})

describe("Control.parse", () => {
  it("reads each command", () => {
    assert.deepStrictEqual(Control.parse(`{"type":"approve","id":"c1"}`), Result.succeed({ type: "approve", id: "c1" }))
    assert.deepStrictEqual(Control.parse(`{"type":"approve"}`), Result.succeed({ type: "approve" }))
    assert.deepStrictEqual(
      Control.parse(`{"type":"deny","id":"c1","reason":"no"}`),
      Result.succeed({ type: "deny", id: "c1", reason: "no" })
    )
    assert.deepStrictEqual(Control.parse(`{"type":"steer","text":"metric"}`), Result.succeed({ type: "steer", text: "metric" }))
    assert.deepStrictEqual(
      Control.parse(`{"type":"follow_up","text":"tests"}`),
      Result.succeed({ type: "follow_up", text: "tests" })
    )
    assert.deepStrictEqual(Control.parse(`{"type":"cancel"}`), Result.succeed({ type: "cancel" }))
    assert.deepStrictEqual(Control.parse(`{"type":"interrupt"}`), Result.succeed({ type: "interrupt" }))
  })

  it("reads ynh's spelling: action for type, feedback for replace_feedback's text and reject_plan's notes", () => {
    assert.deepStrictEqual(Control.parse(`{"action":"approve_plan"}`), Result.succeed({ type: "approve_plan" }))
    assert.deepStrictEqual(Control.parse(`{"action":"interrupt"}`), Result.succeed({ type: "interrupt" }))
    assert.deepStrictEqual(Control.parse(`{"action":"approve_turn"}`), Result.succeed({ type: "approve_turn" }))
    assert.deepStrictEqual(
      Control.parse(`{"action":"replace_feedback","feedback":"run the tests first"}`),
      Result.succeed({ type: "replace_feedback", text: "run the tests first" })
    )
    assert.deepStrictEqual(
      Control.parse(`{"action":"reject_plan","feedback":"too risky"}`),
      Result.succeed({ type: "reject_plan", notes: "too risky" })
    )
    assert.deepStrictEqual(Control.parse(`{"action":"reject_plan"}`), Result.succeed({ type: "reject_plan" }))
    // ours where both are given; an unknown action as an unknown type
    assert.deepStrictEqual(Control.parse(`{"type":"cancel","action":"interrupt"}`), Result.succeed({ type: "cancel" }))
    assert.isTrue(Result.isFailure(Control.parse(`{"action":"pause"}`)))
    assert.deepStrictEqual(
      Control.parse(`{"action":"replace_feedback"}`),
      Result.fail(`replace_feedback: Missing key at ["text"]`)
    )
  })

  it("says what is wrong with a bad line", () => {
    assert.deepStrictEqual(Control.parse("garbage"), Result.fail("not a JSON object"))
    assert.deepStrictEqual(Control.parse("[1,2]"), Result.fail("not a JSON object"))
    assert.deepStrictEqual(Control.parse(`{"text":"x"}`), Result.fail(`no "type" (expected approve, deny, steer, follow_up, cancel, interrupt, approve_plan, refine_plan, reject_plan, approve_turn or replace_feedback)`))
    assert.deepStrictEqual(
      Control.parse(`{"type":"pause"}`),
      Result.fail(`unknown type "pause" (expected approve, deny, steer, follow_up, cancel, interrupt, approve_plan, refine_plan, reject_plan, approve_turn or replace_feedback)`)
    )
    assert.deepStrictEqual(Control.parse(`{"type":"steer"}`), Result.fail(`steer: Missing key at ["text"]`))
    assert.deepStrictEqual(Control.parse(`{"type":"deny","id":7}`), Result.fail(`deny: Expected string at ["id"]`))
    assert.deepStrictEqual(
      Control.parse(`{"type":"steer","text":"${"x".repeat(Control.maxLineLength)}"}`),
      Result.fail(`the line is longer than ${Control.maxLineLength} characters`)
    )
  })
})

describe("Control.serve", () => {
  it.effect("applies good lines, reports bad ones with their line numbers, and goes on", () =>
    Effect.gen(function*() {
      const { eof, notes, serve, steering } = yield* setup
      yield* serve([
        `{"type":"steer","text":"use metric units"}`,
        "garbage",
        "",
        `{"type":"pause"}`,
        `{"type":"follow_up","text":"now the tests"}`,
        `{"type":"steer"}`
      ].join("\n") + "\n")
      assert.deepStrictEqual(yield* steering.takeSteering, [Message.user("use metric units")])
      assert.deepStrictEqual(yield* steering.takeFollowUps, [Message.user("now the tests")])
      assert.deepStrictEqual(notes, [
        "stdin line 2: not a JSON object; ignored",
        "stdin line 4: unknown type \"pause\" (expected approve, deny, steer, follow_up, cancel, interrupt, approve_plan, refine_plan, reject_plan, approve_turn or replace_feedback); ignored",
        "stdin line 6: steer: Missing key at [\"text\"]; ignored"
      ])
      // the end of input is recorded, and is not a cancel
      assert.isTrue(Deferred.isDoneUnsafe(eof))
      assert.isFalse(Deferred.isDoneUnsafe(steering.cancelled))
    }))

  it.effect("a cancel line cancels the run with its reason", () =>
    Effect.gen(function*() {
      const { serve, steering } = yield* setup
      yield* serve(`{"type":"cancel","reason":"enough"}\n`)
      assert.strictEqual(yield* Deferred.await(steering.cancelled), "enough")
    }))

  it.effect("with onEof cancel, the end of input cancels the run", () =>
    Effect.gen(function*() {
      const { serve, steering } = yield* setup
      yield* serve(`{"type":"steer","text":"x"}`, "cancel")
      assert.strictEqual(yield* Deferred.await(steering.cancelled), "stdin was closed")
      // the last line, without a newline, was read too
      assert.deepStrictEqual(yield* steering.takeSteering, [Message.user("x")])
    }))

  it.effect("approve without an id answers the oldest call waiting; with none waiting, it says so", () =>
    Effect.gen(function*() {
      const { approvals, notes, serve } = yield* setup
      const first = yield* Effect.forkChild(approvals.decide(request("c1")), { startImmediately: true })
      const second = yield* Effect.forkChild(approvals.decide(request("c2")), { startImmediately: true })
      yield* serve(`{"type":"deny","reason":"not now"}\n{"type":"approve"}\n{"type":"approve"}\n`)
      assert.deepStrictEqual(yield* Fiber.join(first), Approvals.denied("not now"))
      assert.deepStrictEqual(yield* Fiber.join(second), Approvals.approved)
      assert.deepStrictEqual(notes, ["stdin line 3: approve: no call is waiting for approval; ignored"])
    }))

  it.effect("a parent's and a sub-agent's calls with the same id: each line answers the one its id names", () =>
    Effect.gen(function*() {
      const { approvals, serve } = yield* setup
      const parent = yield* Effect.forkChild(approvals.decide(request("c1")), { startImmediately: true })
      const child = yield* Effect.forkChild(approvals.decide(request("c1", "c2")), { startImmediately: true })
      yield* serve(`{"type":"deny","id":"c2/c1","reason":"not the child"}\n{"type":"approve","id":"c1"}\n`)
      assert.deepStrictEqual(yield* Fiber.join(child), Approvals.denied("not the child"))
      assert.deepStrictEqual(yield* Fiber.join(parent), Approvals.approved)
      // without an id, the oldest waiting: a sub-agent's too
      const next = yield* setup
      const again = yield* Effect.forkChild(next.approvals.decide(request("c1", "c3")), { startImmediately: true })
      yield* next.serve(`{"type":"approve"}\n`)
      assert.deepStrictEqual(yield* Fiber.join(again), Approvals.approved)
    }))

  it.effect("wrong-call attack: a decision ahead of its call is refused and not kept; after stdin ends the call is denied", () =>
    Effect.gen(function*() {
      const { approvals, notes, serve } = yield* setup
      const waiting = yield* Effect.forkChild(approvals.decide(request("c0")), { startImmediately: true })
      // c0 is answered; call_0 and c2 are not waiting: nothing is kept for a later call under those ids
      yield* serve(
        `{"type":"approve","id":"call_0"}\n{"type":"deny","id":"c2","reason":"no"}\n{"type":"approve","id":"c0"}\n` +
          `{"type":"approve","id":"${"x".repeat(5000)}"}\n`
      )
      assert.deepStrictEqual(yield* Fiber.join(waiting), Approvals.approved)
      assert.deepStrictEqual(notes, [
        "stdin line 1: approve: no call waits for approval as \"call_0\"; ignored",
        "stdin line 2: deny: no call waits for approval as \"c2\"; ignored",
        `stdin line 4: approve: no call waits for approval as "${"x".repeat(47)}…"; ignored`
      ])
      const closed = Approvals.denied("no one can approve this call: the control input (stdin) was closed")
      assert.deepStrictEqual(yield* approvals.decide(request("call_0")), closed)
      assert.deepStrictEqual(yield* approvals.decide(request("c2")), closed)
    }))

  it.effect("a decision on the ApprovalRequested line it answers finds the call waiting (opened before it is announced)", () =>
    Effect.gen(function*() {
      const { approvals, notes, serve } = yield* setup
      const decided = yield* Effect.scoped(Effect.gen(function*() {
        const wait = yield* approvals.open!(request("c1", "c7"))
        // the line comes as soon as the event is out, before the run gets to wait
        yield* serve(`{"type":"deny","id":"c7/c1","reason":"not the child"}\n`)
        return yield* wait
      }))
      assert.deepStrictEqual(decided, Approvals.denied("not the child"))
      assert.deepStrictEqual(notes, [])
    }))

  it.effect("a steering flood past the queue's bound is reported and dropped, not queued", () =>
    Effect.gen(function*() {
      const steering = yield* Steering.make({ limits: { messages: 2 } })
      const notes: Array<string> = []
      yield* Control.serve({
        lines: Control.lines(input(`{"type":"steer","text":"a"}\n{"type":"follow_up","text":"b"}\n{"type":"steer","text":"c"}\n`)),
        target: { messages: steering, approvals: undefined },
        onEof: "ignore",
        eof: yield* Deferred.make<void>(),
        report: (note) => Effect.sync(() => void notes.push(note))
      })
      assert.deepStrictEqual(yield* steering.takeSteering, [Message.user("a")])
      assert.deepStrictEqual(yield* steering.takeFollowUps, [Message.user("b")])
      assert.strictEqual(notes.length, 1)
      assert.match(notes[0]!, /^stdin line 3: steer: the run's queue is full: 2 messages \(\d+ bytes\) wait for delivery, .*; dropped$/)
    }))

  it.effect("approvals not asked on stdin: decisions are reported as not applying", () =>
    Effect.gen(function*() {
      const { steering } = yield* setup
      const notes: Array<string> = []
      yield* Control.serve({
        lines: Control.lines(input(`{"type":"approve","id":"c1"}\n`)),
        target: { messages: steering, approvals: undefined },
        onEof: "ignore",
        eof: yield* Deferred.make<void>(),
        report: (note) => Effect.sync(() => void notes.push(note))
      })
      assert.deepStrictEqual(notes, ["stdin line 1: approve: approvals are not asked on stdin (run with --approve ask)"])
    }))
})

describe("Control: plan and turn decisions", () => {
  it("parses approve_plan, refine_plan, reject_plan, approve_turn and replace_feedback", () => {
    assert.deepStrictEqual(Control.parse(`{"type":"approve_plan"}`), Result.succeed({ type: "approve_plan" }))
    assert.deepStrictEqual(
      Control.parse(`{"type":"refine_plan","notes":"add tests"}`),
      Result.succeed({ type: "refine_plan", notes: "add tests" })
    )
    assert.deepStrictEqual(Control.parse(`{"type":"reject_plan"}`), Result.succeed({ type: "reject_plan" }))
    assert.deepStrictEqual(Control.parse(`{"type":"approve_turn"}`), Result.succeed({ type: "approve_turn" }))
    assert.deepStrictEqual(
      Control.parse(`{"type":"replace_feedback","text":"look at a.ts"}`),
      Result.succeed({ type: "replace_feedback", text: "look at a.ts" })
    )
    assert.isTrue(Result.isFailure(Control.parse(`{"type":"refine_plan"}`)))
  })

  it.effect("lines decide the plan and the turn; at the end of stdin a plan waiting is rejected, a turn interrupted", () =>
    Effect.gen(function*() {
      const { approvals, notes, serve } = yield* setup
      const plan = yield* Effect.forkChild(approvals.decidePlan!({ runId: "r", plan: "p", iteration: 1 }))
      yield* Effect.yieldNow
      // the feedback line comes before any feedback waits: refused, not kept for the next one
      yield* serve(`{"type":"reject_plan","notes":"no"}\n{"type":"replace_feedback","text":"t"}\n`)
      assert.deepStrictEqual(yield* Fiber.join(plan), { _tag: "Reject", notes: "no" })
      assert.deepStrictEqual(notes, ["stdin line 2: replace_feedback: no feedback waits for a decision; ignored"])
      // stdin is closed now: no one can answer
      assert.deepStrictEqual(yield* approvals.decidePlan!({ runId: "r", plan: "p", iteration: 2 }), {
        _tag: "Reject",
        notes: "the control input (stdin) was closed"
      })
      assert.deepStrictEqual(yield* approvals.decideTurn!({ runId: "r", turn: 2, feedback: "f" }), {
        _tag: "Interrupt"
      })
    }))
})

describe("plan and turn decisions that name what they answer", () => {
  it.effect("a decision naming another plan iteration or act turn than the one waiting is refused, and the question still waits", () =>
    Effect.gen(function*() {
      const { approvals, notes, serve } = yield* setup
      const plan = yield* Effect.forkChild(approvals.decidePlan!({ runId: "r", plan: "p2", iteration: 2 }))
      yield* Effect.yieldNow
      // the sender read plan 1, revised since: its approval is refused; one naming plan 2 answers it
      yield* serve(`{"type":"approve_plan","iteration":1}\n{"type":"reject_plan","iteration":2,"notes":"no"}\n`)
      assert.deepStrictEqual(yield* Fiber.join(plan), { _tag: "Reject", notes: "no" })
      assert.deepStrictEqual(notes, [
        "stdin line 1: approve_plan: plan iteration 2 waits for a decision, not iteration 1; ignored"
      ])
    }))

  it("the rule, for each kind: nothing waiting, another one waiting, the one waiting, none named", () => {
    const waiting = { plan: { iteration: 3 }, turn: { turn: 4 } }
    assert.deepStrictEqual(
      [
        Control.decisionMismatch({ type: "approve_turn" }, { plan: undefined, turn: undefined }),
        Control.decisionMismatch({ type: "refine_plan", notes: "n", iteration: 2 }, waiting),
        Control.decisionMismatch({ type: "replace_feedback", text: "t", turn: 3 }, waiting),
        Control.decisionMismatch({ type: "approve_turn", turn: 4 }, waiting),
        Control.decisionMismatch({ type: "reject_plan" }, waiting)
      ],
      [
        "approve_turn: no feedback waits for a decision",
        "refine_plan: plan iteration 3 waits for a decision, not iteration 2",
        "replace_feedback: the feedback of turn 4 waits for a decision, not turn 3",
        undefined,
        undefined
      ]
    )
  })
})

describe("Control.lines", () => {
  it.live("L4: a line without a newline is reported once while it comes, held to maxLineLength + 1 characters", () =>
    Effect.gen(function*() {
      const { steering } = yield* setup
      const bytes = yield* Queue.unbounded<Uint8Array, Cause.Done>()
      const reported = yield* Deferred.make<string>()
      const notes: Array<string> = []
      let longest = 0
      const served = yield* Effect.forkChild(Control.serve({
        lines: Control.lines(Stream.fromQueue(bytes)).pipe(
          Stream.tap((line) => Effect.sync(() => void (longest = Math.max(longest, line.length))))
        ),
        target: { messages: steering, approvals: undefined },
        onEof: "ignore",
        eof: yield* Deferred.make<void>(),
        report: (note) => Effect.sync(() => void notes.push(note)).pipe(Effect.andThen(Deferred.succeed(reported, note)))
      }))
      // 3 MB of one line, in 64 KiB chunks (as a pipe gives them): reported before it ends
      const chunk = encoder.encode("x".repeat(65_536))
      for (let i = 0; i < 48; i++) yield* Queue.offer(bytes, chunk)
      const note = yield* Deferred.await(reported).pipe(
        Effect.timeoutOrElse({ duration: "10 seconds", orElse: () => Effect.succeed("no report while the line came") })
      )
      assert.strictEqual(note, `stdin line 1: the line is longer than ${Control.maxLineLength} characters; ignored`)
      // more of it, its end, and the next line: that one is applied, with its own number
      for (let i = 0; i < 16; i++) yield* Queue.offer(bytes, chunk)
      yield* Queue.offer(bytes, encoder.encode(`xx\r\n{"type":"steer","text":"after"}\n{"type":"bogus"}\n`))
      yield* Queue.end(bytes)
      yield* Fiber.join(served)
      assert.deepStrictEqual(yield* steering.takeSteering, [Message.user("after")])
      assert.strictEqual(notes.length, 2)
      assert.match(notes[1]!, /^stdin line 3: unknown type "bogus"/)
      assert.strictEqual(longest, Control.maxLineLength + 1)
    }))

  it.effect("lines split anywhere come out as the whole lines would, each cut at maxLineLength + 1 (seeded, 60 inputs)", () =>
    Effect.gen(function*() {
      const keep = Control.maxLineLength + 1
      const seed = Date.now() % 100_000
      let state = seed
      const random = () => {
        state = (Math.imul(state, 1103515245) + 12345) & 0x7fffffff
        return state / 0x7fffffff
      }
      const pick = <A>(choices: ReadonlyArray<A>): A => choices[Math.floor(random() * choices.length)]!
      for (let trial = 0; trial < 60; trial++) {
        const parts: Array<string> = []
        for (let i = 0, n = 1 + Math.floor(random() * 5); i < n; i++) {
          const length = pick([0, 1, 5, keep - 2, keep - 1, keep, keep + 1, keep + 7, 2 * keep + 3])
          parts.push("ab".repeat(Math.ceil(length / 2)).slice(0, length) + pick(["\n", "\r\n", "\r"]))
        }
        parts.push(pick(["", "tail", "€ tail"]))
        const text = parts.join("")
        const whole = yield* Stream.runCollect(Stream.splitLines(Stream.make(text)))
        const bytes = encoder.encode(text)
        const chunks: Array<Uint8Array> = []
        for (let at = 0; at < bytes.length;) {
          const size = pick([1, 2, 3, 100, keep - 1, keep, keep + 1, 3 * keep])
          chunks.push(bytes.subarray(at, at + size))
          at += size
        }
        const cut = yield* Stream.runCollect(Control.lines(Stream.fromIterable(chunks)))
        assert.deepStrictEqual(
          cut.map((line) => line.length),
          whole.map((line) => Math.min(line.length, keep)),
          `seed ${seed}, input ${trial}`
        )
        assert.isTrue(cut.every((line, i) => line === whole[i]!.slice(0, keep)), `seed ${seed}, input ${trial}`)
      }
    }))
})
