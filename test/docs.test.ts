/**
 * The API docs, as effect writes them: every export of a public module has a
 * JSDoc with `@since` and `@category`, and every `ts` example in those JSDocs
 * typechecks against the library and runs, printing what its `// Output:`
 * comments say, in order.
 */
import { assert, describe, it } from "@effect/vitest"
import { beforeAll } from "vitest"
import { execFile } from "node:child_process"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
// The parser of TypeScript 5 (the compiler is 7, whose JS API is not stable yet)
import ts from "typescript-5"

const root = fileURLToPath(new URL("..", import.meta.url))

/** The public modules: every `.ts` file under `src/` outside an `internal/` folder. */
const publicModules = (dir: string): Array<string> =>
  readdirSync(Path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`
    if (entry.isDirectory()) return entry.name === "internal" ? [] : publicModules(path)
    return entry.name.endsWith(".ts") ? [path] : []
  })

const modules = publicModules("src").map((path) => ({ path, text: readFileSync(Path.join(root, path), "utf8") }))

/** The JSDoc right before a statement (the last `/** … *\/` comment among its leading comments). */
const jsDocOf = (text: string, node: ts.Node): string => {
  const ranges = ts.getLeadingCommentRanges(text, node.pos) ?? []
  const docs = ranges.map((range) => text.slice(range.pos, range.end)).filter((c) => c.startsWith("/**"))
  return docs.at(-1) ?? ""
}

const isExported = (statement: ts.Statement): boolean =>
  ts.isExportDeclaration(statement) ||
  (ts.canHaveModifiers(statement) &&
    (ts.getModifiers(statement) ?? []).some((modifier) => modifier.kind === ts.SyntaxKind.ExportKeyword))

const exportName = (statement: ts.Statement): string => {
  if (ts.isExportDeclaration(statement)) {
    return statement.exportClause !== undefined && ts.isNamespaceExport(statement.exportClause)
      ? statement.exportClause.name.text
      : "*"
  }
  if (ts.isVariableStatement(statement)) {
    return statement.declarationList.declarations.map((d) => d.name.getText()).join(", ")
  }
  const named = statement as ts.Statement & { readonly name?: ts.Node }
  return named.name?.getText() ?? "(anonymous)"
}

const parse = (path: string, text: string) => ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true)

/** The names and module of an `export { … } from "…"`, or undefined for any other statement. */
const namedReexports = (statement: ts.Statement) =>
  ts.isExportDeclaration(statement) && statement.exportClause !== undefined &&
    ts.isNamedExports(statement.exportClause) && statement.moduleSpecifier !== undefined &&
    ts.isStringLiteral(statement.moduleSpecifier)
    ? {
      from: statement.moduleSpecifier.text,
      names: statement.exportClause.elements.map((element) => (element.propertyName ?? element.name).text)
    }
    : undefined

interface Example {
  readonly module: string
  readonly index: number
  readonly code: string
  readonly expected: string
}

/** The ```ts blocks of a module's JSDocs, with the ` * ` prefixes taken off. */
const examplesOf = (module: { readonly path: string; readonly text: string }): Array<Example> =>
  Array.from(module.text.matchAll(/^[ \t]*\* ```ts\n([\s\S]*?)^[ \t]*\* ```/gm), (match, index) => {
    const code = match[1]!.replace(/^[ \t]*\*(?: |$)/gm, "")
    const expected = Array.from(code.matchAll(/\/\/ Output: (.*)$/gm), (line) => `${line[1]}\n`).join("")
    return { module: module.path, index, code, expected }
  })

const examples = modules.flatMap(examplesOf)
const fileOf = (example: Example) =>
  Path.join(root, ".doc-examples", `${example.module.replace(/\//g, "_").replace(/\.ts$/, "")}.${example.index}.ts`)

describe("API docs", () => {
  it("every export of a public module has a JSDoc with @since and @category", () => {
    const missing: Array<string> = []
    const check = (path: string, text: string, statement: ts.Statement, name: string) => {
      const doc = jsDocOf(text, statement)
      const lacks = ["@since", "@category"].filter((tag) => !doc.includes(tag))
      if (lacks.length > 0) missing.push(`${path}: ${name} lacks ${lacks.join(" and ")}`)
    }
    for (const module of modules) {
      for (const statement of parse(module.path, module.text).statements) {
        if (!isExported(statement)) continue
        const reexported = namedReexports(statement)
        if (reexported === undefined) {
          check(module.path, module.text, statement, exportName(statement))
          continue
        }
        // `export { A, type B } from "./internal/x.ts"`: the docs are on the declarations there.
        const path = Path.join(Path.dirname(module.path), reexported.from)
        const text = readFileSync(Path.join(root, path), "utf8")
        const declarations = parse(path, text).statements.filter(isExported)
        for (const name of reexported.names) {
          const declaration = declarations.find((d) => exportName(d).split(", ").includes(name))
          if (declaration === undefined) missing.push(`${module.path}: ${name} not found in ${path}`)
          else check(path, text, declaration, name)
        }
      }
    }
    assert.deepStrictEqual(missing, [])
  })

  it("finds the examples (a module without any is fine; none at all means the extraction broke)", () => {
    assert.isAtLeast(examples.length, 30)
    assert.isTrue(examples.some((example) => example.expected !== ""))
  })

  describe("every example", () => {
    // Written beside the sources (a folder git ignores), so that `effect-agent` resolves to this package.
    beforeAll(() => {
      rmSync(Path.join(root, ".doc-examples"), { recursive: true, force: true })
      mkdirSync(Path.join(root, ".doc-examples"))
      for (const example of examples) writeFileSync(fileOf(example), example.code)
    })

    it("typechecks against the library", async () => {
      // With the repository's compiler and settings (an example shows a value it does not use: unused locals are
      // its point, not a mistake). tsc names each file, which names its module and example.
      const dir = Path.join(root, ".doc-examples")
      writeFileSync(
        Path.join(dir, "tsconfig.json"),
        JSON.stringify({
          extends: "../tsconfig.json",
          compilerOptions: { noUnusedLocals: false },
          files: examples.map((example) => Path.basename(fileOf(example))),
          // not the base's `include` (every test, checked by the typecheck already): the examples alone
          include: []
        })
      )
      const tsc = Path.join(root, "node_modules/typescript/bin/tsc")
      const output = await promisify(execFile)(process.execPath, [tsc, "-p", dir, "--pretty", "false", "--singleThreaded"], {
        cwd: root,
        timeout: 240_000
      }).then(({ stdout }) => stdout, (error: { readonly stdout?: string; readonly message: string }) =>
        error.stdout || error.message)
      assert.strictEqual(output, "")
    }, 300_000)

    it("runs, printing what its // Output: comments say", async () => {
      const cwd = mkdtempSync(Path.join(tmpdir(), "effect-agent-docs-"))
      try {
        // All in one process, one after another (test/run-examples.ts): a process each loaded Node, effect and
        // the library 87 times over.
        const resultFile = Path.join(cwd, "results.json")
        await promisify(execFile)(
          process.execPath,
          ["--conditions=effect-agent-source", Path.join(root, "test/run-examples.ts"), resultFile, ...examples.map(fileOf)],
          { cwd, env: { ...process.env, OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" }, timeout: 240_000 }
        )
        const results: ReadonlyArray<{ readonly file: string; readonly stdout: string; readonly error: string }> = JSON
          .parse(readFileSync(resultFile, "utf8"))
        assert.deepStrictEqual(results.map((result) => result.file), examples.map(fileOf))
        const wrong = results.flatMap(({ error, stdout }, i) => {
          const example = examples[i]!
          return error !== "" || stdout !== example.expected
            ? [`${example.module} example ${example.index}: ${error || `printed ${JSON.stringify(stdout)}`}`]
            : []
        })
        assert.deepStrictEqual(wrong, [])
      } finally {
        rmSync(cwd, { recursive: true, force: true })
      }
    }, 300_000)
  })
})
