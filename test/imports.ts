/**
 * The import graph of `src/`, read with TypeScript's parser: shared by the
 * tests of its shape (`ImportCycles.test.ts`, `ImportRules.test.ts`).
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
// The parser of TypeScript 5 (the compiler is 7, whose JS API is not stable yet)
import ts from "typescript-5"

/** The absolute path of `src/`. */
export const src = fileURLToPath(new URL("../src", import.meta.url))

/** Every `.ts` file under `dir`, recursively. */
export const sources = (dir: string): ReadonlyArray<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = Path.join(dir, entry.name)
    return entry.isDirectory() ? sources(path) : entry.name.endsWith(".ts") ? [path] : []
  })

/**
 * The module specifiers a source text imports or re-exports from, as written:
 * `import`, `import type`, `export … from`, `import("…")` types and dynamic
 * imports (comments and strings aside).
 */
export const specifiersOfText = (file: string, text: string): ReadonlyArray<string> => {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
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
  return specifiers
}

/** The relative modules a source text imports or re-exports from (see `specifiersOfText`), as absolute paths. */
export const importsOfText = (file: string, text: string): ReadonlyArray<string> =>
  specifiersOfText(file, text).filter((name) => name.startsWith(".")).map((name) =>
    Path.resolve(Path.dirname(file), name)
  )

/** The modules of `src/` a file imports or re-exports from (see `importsOfText`). */
export const importsOf = (file: string): ReadonlyArray<string> => importsOfText(file, Fs.readFileSync(file, "utf8"))

/** The packages (not relative modules) a file of `src/` imports, as written: `effect/ai`, `node:fs`. */
export const packagesOf = (file: string): ReadonlyArray<string> =>
  specifiersOfText(file, Fs.readFileSync(file, "utf8")).filter((name) => !name.startsWith("."))

/** The import graph of `src/`: each file to the modules it imports. */
export const graphOf = (dir: string = src): ReadonlyMap<string, ReadonlyArray<string>> =>
  new Map(sources(dir).map((file) => [file, importsOf(file)] as const))
