/**
 * The arrows of `src/` run one way (issue 30): core ← run ← wings ← protocol ←
 * apps. Each room and what it may import:
 *
 * - **core**: `src/*.ts` but the run's files, the contracts and plugins;
 * - **run**: `src/Agent.ts`, `src/Backend.ts`, `src/SubAgent.ts` (its tools
 *   run child runs and hand a run off), `src/index.ts` (the entry that
 *   re-exports core and run) and `src/internal/**`, the run's private room;
 * - **wings**: `src/session/`, `src/supervisor/`, `src/sandbox/`,
 *   `src/providers/`, `src/testing/`;
 * - **protocol**: `src/protocol/`, what the server and the command share;
 * - **apps**: `src/server/`, `src/cli/`.
 *
 * A folder named `internal` is private to the folder holding it. Type-only
 * imports count: a type is an arrow too. Rule 1 (no cycle) is
 * `ImportCycles.test.ts`. Each rule fails listing its offending
 * `file → import` pairs; the arrows other slices of issue 30 are removing
 * are listed in {@link pending}, by slice, and the list may only shrink.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Path from "node:path"
import { graphOf, packagesOf, sources, src } from "./imports.ts"

/** A path under `src/`, with `/` as separator. */
type Module = string

/** One import: `from` imports `to`, both under `src/`. */
interface Arrow {
  readonly from: Module
  readonly to: Module
}

const show = ({ from, to }: Arrow): string => `src/${from} → src/${to}`

type Room = "core" | "run" | "wing" | "protocol" | "app"

const wings = ["session", "supervisor", "sandbox", "providers", "testing"]
const apps = ["server", "cli"]
const runFiles = ["Agent.ts", "Backend.ts", "SubAgent.ts", "index.ts"]

const roomOf = (module: Module): Room => {
  const [top, ...rest] = module.split("/")
  if (rest.length === 0) return runFiles.includes(top!) ? "run" : "core"
  if (top === "internal") return "run"
  if (wings.includes(top!)) return "wing"
  if (top === "protocol") return "protocol"
  if (apps.includes(top!)) return "app"
  throw new Error(`src/${module}: a folder of src/ no rule knows; give it a room in ImportRules.test.ts`)
}

const under = (module: Module, folder: string): boolean => module.startsWith(`${folder}/`)

/**
 * The folder whose private room a module is in (`session` for
 * `session/internal/codec.ts`, `""` for `internal/loop.ts`), or undefined when
 * it is in none.
 */
const privateOwner = (module: Module): string | undefined => {
  const parts = module.split("/")
  const at = parts.indexOf("internal")
  return at === -1 || at === parts.length - 1 ? undefined : parts.slice(0, at).join("/")
}

/** Whether a module may import a module of the private room of `owner`. */
const insideOwner = (module: Module, owner: string): boolean =>
  owner === "" ? roomOf(module) === "run" : under(module, owner)

/** A rule of SPINE.md: its title, and whether an arrow breaks it. */
interface Rule {
  readonly title: string
  readonly breaks: (arrow: Arrow) => boolean
}

const rule2: Rule = {
  title:
    "rule 2: only the run (Agent.ts, Backend.ts, SubAgent.ts, internal/) imports src/internal/, and a wing's or app's internal/ is its own",
  breaks: ({ from, to }) => {
    const owner = privateOwner(to)
    return owner !== undefined && !insideOwner(from, owner)
  }
}

const rule3: Rule = {
  title: "rule 3: a core module imports core modules only (not the run, src/internal/, a wing, protocol/ or an app)",
  breaks: ({ from, to }) => roomOf(from) === "core" && roomOf(to) !== "core"
}

const rule4: Rule = {
  title: "rule 4: providers import their own files only (no core module), and of packages effect alone",
  breaks: ({ from, to }) => under(from, "providers") && !under(to, "providers")
}

const rule5: Rule = {
  title: "rule 5: sandbox, session, supervisor, providers and testing never import protocol/, server/ or cli/",
  breaks: ({ from, to }) => roomOf(from) === "wing" && (roomOf(to) === "protocol" || roomOf(to) === "app")
}

const rule6: Rule = {
  title:
    "rule 6: the server never imports cli/, protocol/ neither app, the command reaches the server through its public modules, and both use protocol/",
  breaks: ({ from, to }) =>
    (under(from, "server") && under(to, "cli")) ||
    (under(from, "protocol") && roomOf(to) === "app") ||
    (under(from, "cli") && privateOwner(to) === "server")
}

const rule7: Rule = {
  title:
    "rule 7: the supervisor imports core, the run's public modules and the wings' public modules; never an internal/ not its own",
  breaks: ({ from, to }) => {
    if (!under(from, "supervisor")) return false
    const owner = privateOwner(to)
    return owner !== undefined && owner !== "supervisor"
  }
}

/**
 * Arrows that break a rule today, each to be removed by the slice of issue 30
 * named beside it. An entry that no longer occurs fails its rule's test (take
 * it off: the list only shrinks); an arrow not on it fails as a new violation.
 */
const pending: ReadonlyMap<Rule, ReadonlyArray<readonly [arrow: string, slice: string]>> = new Map()

/** Every arrow of `src/`, read once. */
const arrows: () => ReadonlyArray<Arrow> = (() => {
  let read: ReadonlyArray<Arrow> | undefined
  const slashed = (file: string) => Path.relative(src, file).split(Path.sep).join("/")
  return () =>
    read ??= Array.from(graphOf()).flatMap(([file, imports]) =>
      imports.map((to) => ({ from: slashed(file), to: slashed(to) }))
    )
})()

/** The arrows breaking a rule, shown `src/a.ts → src/b.ts`, sorted, once each. */
const violations = (rule: Rule, all: ReadonlyArray<Arrow>): ReadonlyArray<string> =>
  Array.from(new Set(all.filter(rule.breaks).map(show))).sort()

/** Fails on an arrow breaking the rule that is not pending, and on a pending one that no longer occurs. */
const check = (rule: Rule, more: ReadonlyArray<string> = []) => {
  const found = [...violations(rule, arrows()), ...more]
  const known = (pending.get(rule) ?? []).map(([arrow]) => arrow)
  assert.deepStrictEqual(found.filter((arrow) => !known.includes(arrow)), [], `${rule.title}: new violations`)
  assert.deepStrictEqual(
    known.filter((arrow) => !found.includes(arrow)),
    [],
    `${rule.title}: pending entries that no longer occur (take them off the list)`
  )
}

describe("the arrows of src/ run one way (SPINE.md)", () => {
  it("reads every module, and knows each folder's room", () => {
    assert.isAbove(arrows().length, 300)
    // the reader sees type-only imports and re-exports
    assert.isTrue(arrows().some(({ from, to }) => from === "index.ts" && to === "Agent.ts"))
    for (const file of sources(src)) roomOf(Path.relative(src, file).split(Path.sep).join("/"))
    assert.throws(() => roomOf("plugins/Thing.ts"), /no rule knows/)
  })

  it("each rule catches the arrows it forbids, and lets the others be", () => {
    const cases: ReadonlyArray<readonly [Rule, Module, Module, boolean]> = [
      [rule2, "session/Session.ts", "internal/loop.ts", true],
      [rule2, "Guards.ts", "internal/reservations.ts", true],
      [rule2, "cli/internal/Cluster.ts", "session/internal/durable/store.ts", true],
      [rule2, "Agent.ts", "internal/loop.ts", false],
      [rule2, "internal/tools/call.ts", "internal/loop.ts", false],
      [rule2, "session/internal/durable/body.ts", "session/internal/codec.ts", false],
      [rule3, "AgentError.ts", "supervisor/Worker.ts", true],
      [rule3, "Hooks.ts", "Agent.ts", true],
      [rule3, "Hooks.ts", "protocol/Control.ts", true],
      [rule3, "Hooks.ts", "AgentConfig.ts", false],
      [rule3, "internal/loop.ts", "Hooks.ts", false],
      [rule4, "providers/Provider.ts", "Pricing.ts", true],
      [rule4, "providers/internal/SseTransport.ts", "Output.ts", true],
      [rule4, "providers/Provider.ts", "providers/internal/Settings.ts", false],
      [rule5, "sandbox/Sandbox.ts", "protocol/Control.ts", true],
      [rule5, "session/Session.ts", "server/AgentServer.ts", true],
      [rule5, "supervisor/Check.ts", "sandbox/Sandbox.ts", false],
      [rule6, "server/AgentServer.ts", "cli/Control.ts", true],
      [rule6, "protocol/Control.ts", "server/AgentServer.ts", true],
      [rule6, "cli/internal/Serve.ts", "server/internal/sessions.ts", true],
      [rule6, "cli/internal/Serve.ts", "server/AgentServer.ts", false],
      [rule6, "server/AgentServer.ts", "protocol/Control.ts", false],
      [rule7, "supervisor/internal/cliTurn.ts", "providers/internal/Redaction.ts", true],
      [rule7, "supervisor/internal/cliTurn.ts", "sandbox/internal/process.ts", true],
      [rule7, "supervisor/Supervisor.ts", "internal/loop.ts", true],
      [rule7, "supervisor/Supervisor.ts", "Agent.ts", false],
      [rule7, "supervisor/Check.ts", "sandbox/Sandbox.ts", false],
      [rule7, "supervisor/internal/cliTurn.ts", "supervisor/internal/lines.ts", false]
    ]
    for (const [rule, from, to, broken] of cases) {
      assert.strictEqual(rule.breaks({ from, to }), broken, `${rule.title}: ${from} → ${to}`)
    }
  })

  it(rule2.title, () => check(rule2))

  it(rule3.title, () => check(rule3))

  it(rule4.title, () => {
    const packages = sources(Path.join(src, "providers")).flatMap((file) =>
      packagesOf(file).filter((name) => name !== "effect" && !name.startsWith("effect/")).map((name) =>
        `src/${Path.relative(src, file).split(Path.sep).join("/")} → ${name}`
      )
    )
    check(rule4, packages)
  })

  it(rule5.title, () => check(rule5))

  it(rule6.title, () => {
    const uses = (app: string) => arrows().some(({ from, to }) => under(from, app) && under(to, "protocol"))
    check(rule6, apps.filter((app) => !uses(app)).map((app) => `src/${app}/ imports nothing of src/protocol/`))
  })

  it(rule7.title, () => check(rule7))
})
