/**
 * The README, the front door: short; its install steps say what the package
 * needs; its quick start is `examples/quickstart.ts` and runs; its table of
 * import paths lists what each entry point exports; its tree of a run's
 * events names every event, in the order a run emits them; and it links
 * every page, as the pages link each other, to headings that exist.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import * as Core from "effect-agent"
import * as Cli from "effect-agent/cli"
import * as Protocol from "effect-agent/protocol"
import * as Providers from "effect-agent/providers"
import * as Sandbox from "effect-agent/sandbox"
import * as Server from "effect-agent/server"
import * as Session from "effect-agent/session"
import * as Supervisor from "effect-agent/supervisor"
import * as Testing from "effect-agent/testing"
import { execFileSync } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import * as Path from "node:path"
import { blocks, pages, read, root, section } from "./pages.ts"

const { Agent, AgentEvent, Approvals, Hooks, Steering, SubAgent, ToolRegistry } = Core
const { ScriptedModel } = Testing
const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"))

describe("README", () => {
  it("is a front door: under 400 lines", () => {
    assert.isBelow(read("README").split("\n").length, 400)
  })

  it("its install steps say the Node it needs (package.json's engines), ESM, and how to run the quick start", () => {
    const install = section("README", "Install")
    assert.strictEqual(pkg.engines.node, ">=22.19")
    assert.include(install, "**Node.js 22.19 or newer**")
    assert.include(install, "`\"type\": \"module\"`")
    const [steps] = blocks(install, "sh").slice(1)
    assert.include(steps, "npm pkg set type=module")
    assert.include(steps, "node quickstart.ts")
  })

  it("its quick start is examples/quickstart.ts, which the typecheck compiles, and it prints what it says", () => {
    const quickStart = section("README", "Quick start")
    assert.strictEqual(blocks(quickStart, "ts")[0], readFileSync(`${root}examples/quickstart.ts`, "utf8"))
    const out = execFileSync(process.execPath, ["--conditions=effect-agent-source", "examples/quickstart.ts"], {
      cwd: root,
      encoding: "utf8"
    })
    assert.strictEqual(out, "Completed - It is 4°C in Oslo: bring a coat.\n")
    assert.include(quickStart, `It prints \`${out.trimEnd()}\``)
  })

  it("its table of import paths lists every module of every entry point package.json exports", () => {
    const modules: Record<string, object> = {
      "effect-agent": Core,
      "effect-agent/cli": Cli,
      "effect-agent/protocol": Protocol,
      "effect-agent/providers": Providers,
      "effect-agent/sandbox": Sandbox,
      "effect-agent/server": Server,
      "effect-agent/session": Session,
      "effect-agent/supervisor": Supervisor,
      "effect-agent/testing": Testing
    }
    const entries = Object.keys(pkg.exports).map((path) => path === "." ? "effect-agent" : `effect-agent/${path.slice(2)}`)
    const rows = new Map(
      Array.from(
        section("README", "Which entry point do I use").matchAll(/^\| `(effect-agent[^`]*)` \| (.*) \|$/gm),
        (row) => [row[1]!, row[2]!] as const
      )
    )
    assert.deepStrictEqual([...rows.keys()].sort(), entries.sort())
    for (const [entry, text] of rows) {
      // the modules a row names: each `Name` that starts with a capital
      const named = Array.from(text.matchAll(/`([A-Z]\w*)`/g), (match) => match[1]!).sort()
      assert.deepStrictEqual(named, Object.keys(modules[entry]!).sort(), entry)
    }
  })
})

/** The event tags of the README's tree, in its order (a line's tags come before the two spaces of its note). */
const treeTags = (): Array<string> => {
  const [tree] = blocks(section("README", "What a run emits"), "text")
  return tree!.split("\n").flatMap((line) => {
    const named = line.replace(/^[\s│├└─]*/, "").split(/ {2,}/)[0]!
    return Array.from(named.matchAll(/\b[A-Z][A-Za-z]+\b/g), (match) => match[0])
  })
}

/**
 * A run that emits most kinds of event: steering before it starts and during its first batch, a call that
 * waits for approval beside a sub-agent's call, a second turn at the turn cap, so the wrap-up is asked for,
 * a third whose request is pruned, and a typed answer.
 */
const eventsOfARun = Effect.gen(function*() {
  const Deploy = Tool.make("deploy", {
    parameters: Schema.Struct({ env: Schema.String }),
    success: Schema.String,
    needsApproval: true
  })
  const helper = Agent.define({
    name: "helper",
    description: "Helps",
    input: Schema.Struct({ question: Schema.String }),
    model: ScriptedModel.layer([{ text: "Sure." }])
  })
  const Tools = Toolkit.make(Deploy, Agent.asTool(helper))
  const ToolsLive = ToolRegistry.layer(Tools).pipe(
    Layer.provide(Tools.toLayer({ deploy: ({ env }) => Effect.succeed(`deployed to ${env}`), helper: SubAgent.handler(helper) }))
  )
  const Model = ScriptedModel.layer([
    {
      text: "Deploying, and asking for help.",
      toolCalls: [{ name: "deploy", params: { env: "staging" } }, { name: "helper", params: { question: "Ready?" } }]
    },
    { text: "Still deploying. ".repeat(400), toolCalls: [{ name: "deploy", params: { env: "production" } }] },
    { toolCalls: [{ name: "final_answer", params: { deployed: 2 } }] }
  ])
  const steering = yield* Steering.make()
  yield* steering.steer("Deploy to staging first.")
  const events: Array<Core.AgentEvent.AgentEvent> = []
  let steered = false
  const record = Hooks.plugin({
    name: "record",
    observe: (event) => void events.push(event),
    // steering sent while the first batch runs
    onEvent: (event) => {
      if (event._tag !== "ToolExecutionStart" || steered) return Effect.void
      steered = true
      return Effect.orDie(steering.steer("And then production."))
    }
  })
  const result = yield* Agent.run({
    prompt: "Deploy.",
    steering,
    plugins: [record],
    output: Schema.Struct({ deployed: Schema.Number }),
    config: { maxTurns: 3, graceTurns: 1, contextBudgetTokens: 1_000, pruneKeepToolResults: 0 }
  }).pipe(Effect.provide(Layer.merge(ToolsLive, Model)), Effect.provideService(Approvals.Approvals, Approvals.allowAll))
  return { events, outcome: result.outcome._tag }
})

describe("README: what a run emits", () => {
  it("the tree names every event, each once", () => {
    const tags = treeTags()
    assert.deepStrictEqual([...tags].sort(), Object.keys(AgentEvent.AgentEvent.cases).sort())
  })

  it.effect("a run emits its events in the tree's order: in each turn, and for each call of its batch", () =>
    Effect.gen(function*() {
      const tree = treeTags()
      const { events, outcome } = yield* eventsOfARun
      assert.strictEqual(outcome, "WrappedUp")
      const kinds = new Set(events.map((event) => event._tag))
      for (const kind of ["SteeringDelivered", "ApprovalRequested", "Nested", "WrapUpRequested", "ContextTransformed", "OutputDelta"]) {
        assert.isTrue(kinds.has(kind as Core.AgentEvent.Tag), `the run emits ${kind}`)
      }
      // A batch's calls run at once, so their events interleave: in a turn, they stand in one place of the tree
      // (where its calls' part begins), and each call's own events follow the tree among themselves.
      const batch = tree.slice(tree.indexOf("ApprovalRequested"), tree.indexOf("ToolExecutionEnd") + 1)
      const place = (tag: string) => batch.includes(tag) ? tree.indexOf(batch[0]!) : tree.indexOf(tag)
      const callOf = (event: Core.AgentEvent.AgentEvent) =>
        event._tag === "Nested" ? event.calls?.[0] : "toolCallId" in event ? event.toolCallId : undefined
      const inOrder = (what: string, tags: ReadonlyArray<string>, position: (tag: string) => number) => {
        // each kind where it first comes, and where the tree has it
        const seen = tags.filter((tag, index) => tags.indexOf(tag) === index)
        const positions = seen.map(position)
        assert.deepStrictEqual(positions, [...positions].sort((a, b) => a - b), `${what}: ${seen.join(", ")}`)
      }
      for (const turn of new Set(events.map((event) => event.turn))) {
        const ofTurn = events.filter((event) => event.turn === turn)
        inOrder(`turn ${turn}`, ofTurn.map((event) => event._tag), place)
        for (const call of new Set(ofTurn.map(callOf).filter((id) => id !== undefined))) {
          inOrder(`call ${call}`, ofTurn.filter((event) => callOf(event) === call).map((event) => event._tag), (tag) => tree.indexOf(tag))
        }
      }
    }))
})

/** GitHub's anchor of a heading: lower case, punctuation out, spaces to hyphens. */
const slug = (heading: string): string =>
  heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\p{M} _-]/gu, "").replace(/ /g, "-")

/** The anchors of a page's headings (a repeated heading gets `-1`, `-2`, …). */
const anchors = (page: string): Set<string> => {
  const text = read(page).replace(/^```[^\n]*\n[\s\S]*?^```/gm, "")
  const found = new Set<string>()
  for (const match of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(match[1]!)
    let anchor = base
    for (let n = 1; found.has(anchor); n++) anchor = `${base}-${n}`
    found.add(anchor)
  }
  return found
}

/** The relative links of a page (outside its code), with the line each is on. */
const links = (page: string): Array<{ readonly target: string; readonly line: number }> => {
  const text = read(page).replace(/^```[^\n]*\n[\s\S]*?^```/gm, (block) => block.replace(/[^\n]/g, " "))
    .replace(/`[^`\n]*`/g, (code) => " ".repeat(code.length))
  return Array.from(text.matchAll(/\]\(([^)\s]+)\)/g), (match) => ({
    target: match[1]!,
    line: text.slice(0, match.index).split("\n").length
  })).filter(({ target }) => !/^[a-z]+:/.test(target))
}

describe("the pages' links", () => {
  it("the README links every page of docs/, and CONTRIBUTING.md, and the testing guide", () => {
    const linked = new Set(links("README").map(({ target }) => target.split("#")[0]))
    for (const page of pages().filter((page) => page !== "README.md")) assert.isTrue(linked.has(page), `README links ${page}`)
    assert.isTrue(linked.has("docs/testing.md"))
  })

  it("every link between the pages leads to a file that exists, and to a heading it has", () => {
    const broken: Array<string> = []
    for (const page of pages()) {
      for (const { target, line } of links(page)) {
        const [file, anchor] = target.split("#")
        const path = file === "" ? page : Path.normalize(Path.join(Path.dirname(page), file!))
        // the testing guide is written beside this change: its link is checked once it is here
        if (path === "docs/testing.md" && !existsSync(`${root}${path}`)) continue
        if (!existsSync(`${root}${path}`)) broken.push(`${page}:${line}: ${target} (no ${path})`)
        else if (anchor !== undefined && path.endsWith(".md") && !anchors(path).has(anchor)) {
          broken.push(`${page}:${line}: ${target} (no heading #${anchor} in ${path})`)
        }
      }
    }
    assert.deepStrictEqual(broken, [])
  })
})

describe("CONTRIBUTING.md", () => {
  it("gives the two set-up commands", () => {
    const setUp = section("CONTRIBUTING", "Set up")
    assert.include(setUp, "npm install && npm test")
    assert.include(setUp, "npm run demo")
  })
})
