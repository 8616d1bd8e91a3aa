/**
 * No module of `src/` imports itself back through others: the layers read one
 * way (contracts, then the loop's parts, then the loop; a public module never
 * needs a module that needs it). Type-only imports count too: they cost
 * nothing at run time, but a cycle of types is still two modules that cannot
 * be read, or moved, apart.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Path from "node:path"
import { graphOf, src } from "./imports.ts"

/** Every cycle's modules (strongly connected components of more than one module, or a module importing itself). */
const cycles = (graph: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyArray<ReadonlyArray<string>> => {
  // Tarjan's algorithm.
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const found: Array<ReadonlyArray<string>> = []
  const visit = (node: string): void => {
    index.set(node, counter)
    low.set(node, counter)
    counter++
    stack.push(node)
    onStack.add(node)
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next)
        low.set(node, Math.min(low.get(node)!, low.get(next)!))
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!))
      }
    }
    if (low.get(node) !== index.get(node)) return
    const component: Array<string> = []
    let member: string
    do {
      member = stack.pop()!
      onStack.delete(member)
      component.push(member)
    } while (member !== node)
    if (component.length > 1 || (graph.get(node) ?? []).includes(node)) found.push(component.sort())
  }
  for (const node of graph.keys()) if (!index.has(node)) visit(node)
  return found
}

describe("the modules of src/", () => {
  it("import each other without a cycle, type-only imports included", () => {
    const graph = graphOf()
    assert.isAbove(graph.size, 50)
    // the parser sees re-exports and type-only imports
    assert.isTrue(graph.get(Path.join(src, "index.ts"))!.includes(Path.join(src, "Agent.ts")))
    assert.isTrue(graph.get(Path.join(src, "Hooks.ts"))!.includes(Path.join(src, "AgentConfig.ts")))
    const named = cycles(graph).map((component) => component.map((file) => Path.relative(src, file)))
    assert.deepStrictEqual(named, [])
  })
})
