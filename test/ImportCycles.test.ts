/**
 * No module of `src/` imports itself back through others: the layers read one
 * way (contracts, then the loop's parts, then the loop; a public module never
 * needs a module that needs it). Type-only imports count too: they cost
 * nothing at run time, but a cycle of types is still two modules that cannot
 * be read, or moved, apart.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"

const src = fileURLToPath(new URL("../src", import.meta.url))

const sources = (dir: string): ReadonlyArray<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = Path.join(dir, entry.name)
    return entry.isDirectory() ? sources(path) : entry.name.endsWith(".ts") ? [path] : []
  })

/**
 * The modules of `src/` a file imports or re-exports from: `import`, `import
 * type`, `export … from`, `import("…")` types and dynamic imports (comments
 * and strings aside).
 */
const importsOf = (file: string): ReadonlyArray<string> => {
  const source = ts.createSourceFile(file, Fs.readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true)
  const specifiers: Array<string> = []
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined) {
      if (ts.isStringLiteral(node.moduleSpecifier)) specifiers.push(node.moduleSpecifier.text)
    } else if (ts.isImportTypeNode(node)) {
      const argument = node.argument
      if (ts.isLiteralTypeNode(argument) && ts.isStringLiteral(argument.literal)) specifiers.push(argument.literal.text)
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [first] = node.arguments
      if (first !== undefined && ts.isStringLiteral(first)) specifiers.push(first.text)
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return specifiers.filter((name) => name.startsWith(".")).map((name) => Path.resolve(Path.dirname(file), name))
}

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
    const files = sources(src)
    const graph = new Map(files.map((file) => [file, importsOf(file)] as const))
    assert.isAbove(graph.size, 50)
    // the parser sees re-exports and type-only imports
    assert.isTrue(graph.get(Path.join(src, "index.ts"))!.includes(Path.join(src, "Agent.ts")))
    assert.isTrue(graph.get(Path.join(src, "Hooks.ts"))!.includes(Path.join(src, "AgentConfig.ts")))
    const named = cycles(graph).map((component) => component.map((file) => Path.relative(src, file)))
    assert.deepStrictEqual(named, [])
  })
})
