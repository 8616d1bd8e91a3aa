/**
 * docs/server-and-inspector.md: its example is `examples/agent-server.ts`
 * (which the typecheck compiles), and the file, run as a user runs it, prints
 * what the page shows; so is its section on supervised sessions and typed
 * output, with `examples/agent-server-supervised.ts`; the screenshot it shows
 * is in the repository.
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync } from "node:fs"
import { checkExample, root, section } from "../pages.ts"

const page = "server-and-inspector"

describe("docs: the agent server", () => {
  it("its example is examples/agent-server.ts, which prints what the page shows", () =>
    checkExample(page, "Example: a deploy approved over HTTP", "examples/agent-server.ts"))

  it("its section on supervised sessions is examples/agent-server-supervised.ts, which prints what it shows", () =>
    checkExample(page, "Supervised sessions and typed output on the server", "examples/agent-server-supervised.ts"))

  it("shows the inspector's screenshot, which is in docs/", () => {
    const image = /!\[[^\]]+\]\(([^)]+\.png)\)/.exec(section(page, "The inspector"))
    assert.isNotNull(image)
    assert.isTrue(existsSync(`${root}docs/${image![1]}`))
  })
})
