// Names a module keeps to itself start with `_`; another module must not reach them. Two
// readings of src/: the names import and export statements take from other modules (read
// from the statements themselves), and `x._name` member accesses whose member is declared in
// another file (resolved by the type checker, so that a call on an instance of an imported
// class counts as well as one on the class).
import { readFileSync } from 'node:fs'
import { relative, sep } from 'node:path'
import ts from 'typescript'
import { tsFiles } from './import-graph.js'

const internal = (name: string): boolean => name.startsWith('_')

/** `name from 'spec'` for each name starting with `_` that `source`'s imports and re-exports take from another module. */
export function underscoreImports(source: string): string[] {
  const file = ts.createSourceFile('x.ts', source, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS)
  const out: string[] = []
  const namespaces = new Set<string>()
  for (const st of file.statements) {
    if (ts.isImportDeclaration(st) && ts.isStringLiteral(st.moduleSpecifier)) {
      const spec = st.moduleSpecifier.text
      const clause = st.importClause
      if (clause === undefined) continue
      const bindings = clause.namedBindings
      if (bindings !== undefined && ts.isNamespaceImport(bindings)) namespaces.add(bindings.name.text)
      if (bindings !== undefined && ts.isNamedImports(bindings)) {
        for (const e of bindings.elements) {
          const imported = (e.propertyName ?? e.name).text
          if (internal(imported)) out.push(`${imported} from '${spec}'`)
        }
      }
    } else if (ts.isExportDeclaration(st) && st.moduleSpecifier !== undefined && ts.isStringLiteral(st.moduleSpecifier)) {
      const spec = st.moduleSpecifier.text
      if (st.exportClause !== undefined && ts.isNamedExports(st.exportClause)) {
        for (const e of st.exportClause.elements) {
          const imported = (e.propertyName ?? e.name).text
          if (internal(imported)) out.push(`${imported} from '${spec}'`)
        }
      }
    }
  }
  // A namespace import's members are imported names too: ns._name.
  const visit = (n: ts.Node): void => {
    if (ts.isPropertyAccessExpression(n) && ts.isIdentifier(n.expression) && namespaces.has(n.expression.text) && internal(n.name.text)) {
      out.push(`${n.name.text} from ${n.expression.text}.*`)
    }
    ts.forEachChild(n, visit)
  }
  visit(file)
  return out
}

/**
 * `file:line: x._name (declared in other.ts)` for each member access in `files` whose member
 * starts with `_` and is declared in another file. `files` are read as one program.
 */
export function underscoreMembers(files: readonly string[], root: string): string[] {
  const program = ts.createProgram(files, { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, noEmit: true, skipLibCheck: true, types: [] })
  const checker = program.getTypeChecker()
  const name = (f: string) => relative(root, f).split(sep).join('/')
  const wanted = new Set(files.map((f) => ts.sys.resolvePath(f)))
  const out: string[] = []
  for (const sf of program.getSourceFiles()) {
    if (!wanted.has(ts.sys.resolvePath(sf.fileName))) continue
    // Only files that mention such a member are checked: most mention none.
    if (!/\.\s*_[A-Za-z0-9_$]/.test(sf.text)) continue
    const visit = (n: ts.Node): void => {
      if (ts.isPropertyAccessExpression(n) && internal(n.name.text)) {
        const decls = checker.getSymbolAtLocation(n.name)?.declarations ?? []
        const elsewhere = decls.map((d) => d.getSourceFile().fileName).filter((f) => ts.sys.resolvePath(f) !== ts.sys.resolvePath(sf.fileName))
        if (decls.length > 0 && elsewhere.length === decls.length) {
          const line = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1
          out.push(`${name(sf.fileName)}:${line}: ${n.getText(sf)} (declared in ${name(elsewhere[0]!)})`)
        }
      }
      ts.forEachChild(n, visit)
    }
    visit(sf)
  }
  return out.sort()
}

/** underscoreImports over every file of `dir`, as `file: name from 'spec'`. */
export function underscoreImportsIn(dir: string): string[] {
  return tsFiles(dir).flatMap((f) => underscoreImports(readFileSync(f, 'utf8')).map((x) => `${relative(dir, f).split(sep).join('/')}: ${x}`))
}
