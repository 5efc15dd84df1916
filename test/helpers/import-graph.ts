// The import graph of src/, read the way TypeScript reads it (ts.preProcessFile): static
// imports and re-exports, `import type`, side-effect imports, import() and `typeof import()`,
// and nothing inside comments or ordinary strings.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import ts from 'typescript'

export function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? tsFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []))
    .sort()
}

/** Every module specifier `source` names, in order. */
export function specifiers(source: string): string[] {
  return ts.preProcessFile(source, true, true).importedFiles.map((f) => f.fileName)
}

/** The .ts file a relative specifier of `from` names (NodeNext: `./x.js` is `./x.ts`), or undefined for a package. */
export function resolveSpecifier(from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined
  const target = resolve(dirname(from), spec)
  const ts = target.replace(/\.js$/, '.ts')
  if (existsSync(ts)) return ts
  return existsSync(join(target, 'index.ts')) ? join(target, 'index.ts') : target
}

/** Each file of `dir` to the files of `dir` it imports (paths relative to `dir`, with `/`). */
export function importGraph(dir: string): Map<string, string[]> {
  const name = (f: string) => relative(dir, f).split(sep).join('/')
  const graph = new Map<string, string[]>()
  for (const f of tsFiles(dir)) {
    const to = specifiers(readFileSync(f, 'utf8'))
      .map((s) => resolveSpecifier(f, s))
      .filter((t): t is string => t !== undefined && !relative(dir, t).startsWith('..'))
      .map(name)
    graph.set(name(f), [...new Set(to)])
  }
  return graph
}

/**
 * Each import `source` makes, with the names it takes: `{ spec, names }`, names as the
 * exporting module spells them (`import { A as B }` takes A), `default` for a default import,
 * `*` for what takes the module whole (a namespace import, `export *`, import(),
 * `typeof import()`), and none for a side-effect import.
 */
export function importNames(source: string): { spec: string; names: string[] }[] {
  const file = ts.createSourceFile('x.ts', source, ts.ScriptTarget.Latest, true)
  const out: { spec: string; names: string[] }[] = []
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const c = node.importClause
      const names: string[] = []
      if (c?.name !== undefined) names.push('default')
      const b = c?.namedBindings
      if (b !== undefined && ts.isNamespaceImport(b)) names.push('*')
      if (b !== undefined && ts.isNamedImports(b)) for (const e of b.elements) names.push((e.propertyName ?? e.name).text)
      out.push({ spec: node.moduleSpecifier.text, names })
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier !== undefined && ts.isStringLiteral(node.moduleSpecifier)) {
      const c = node.exportClause
      const names = c === undefined || ts.isNamespaceExport(c) ? ['*'] : c.elements.map((e) => (e.propertyName ?? e.name).text)
      out.push({ spec: node.moduleSpecifier.text, names })
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] !== undefined && ts.isStringLiteral(node.arguments[0])) {
      out.push({ spec: node.arguments[0].text, names: ['*'] })
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      out.push({ spec: node.argument.literal.text, names: ['*'] })
    }
    ts.forEachChild(node, visit)
  }
  visit(file)
  return out
}

export interface ImportEdge {
  to: string
  names: string[]
}

/** Each file of `dir` to its imports of files of `dir`, with the names each takes (paths as importGraph's). */
export function importEdges(dir: string): Map<string, ImportEdge[]> {
  const name = (f: string) => relative(dir, f).split(sep).join('/')
  const edges = new Map<string, ImportEdge[]>()
  for (const f of tsFiles(dir)) {
    const to: ImportEdge[] = []
    for (const { spec, names } of importNames(readFileSync(f, 'utf8'))) {
      const t = resolveSpecifier(f, spec)
      if (t !== undefined && !relative(dir, t).startsWith('..')) to.push({ to: name(t), names })
    }
    edges.set(name(f), to)
  }
  return edges
}

/**
 * A direction the imports may not take: no file under `from` (a folder with its `/`, a
 * file, or '' for every file) imports a file under `to`, or with `names`, takes any of those names from one (a
 * whole-module import takes them all). Files under `except` may.
 */
export interface LayerRule {
  from: string
  to: string
  names?: readonly string[]
  except?: readonly string[]
  why: string
}

/** `place` '' is every file. */
const under = (file: string, place: string) => place === '' || (place.endsWith('/') ? file.startsWith(place) : file === place)

/** Each import that breaks a rule, as `from -> to (names): why`. */
export function brokenRules(edges: ReadonlyMap<string, readonly ImportEdge[]>, rules: readonly LayerRule[]): string[] {
  const bad: string[] = []
  for (const [from, imports] of edges) {
    for (const rule of rules) {
      if (!under(from, rule.from) || rule.except?.some((e) => under(from, e))) continue
      for (const edge of imports) {
        if (!under(edge.to, rule.to)) continue
        const names = rule.names === undefined ? edge.names : edge.names.filter((n) => n === '*' || rule.names!.includes(n))
        if (rule.names !== undefined && names.length === 0) continue
        bad.push(`${from} -> ${edge.to}${names.length > 0 ? ` (${names.join(', ')})` : ''}: ${rule.why}`)
      }
    }
  }
  return bad.sort()
}

/**
 * The circles of `graph`: one per strongly connected component of more than one file (or a
 * file importing itself), each written as the shortest way round from the component's first
 * file, e.g. `a.ts -> b.ts -> a.ts`.
 */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[] {
  // Tarjan's algorithm, iterative so that a deep graph cannot overflow the stack.
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const onStack = new Set<string>()
  const stack: string[] = []
  const components: string[][] = []
  let next = 0
  for (const start of graph.keys()) {
    if (index.has(start)) continue
    const work: { node: string; edge: number }[] = [{ node: start, edge: 0 }]
    index.set(start, next)
    low.set(start, next++)
    stack.push(start)
    onStack.add(start)
    while (work.length > 0) {
      const top = work[work.length - 1]!
      const edges = graph.get(top.node) ?? []
      if (top.edge < edges.length) {
        const to = edges[top.edge++]!
        if (!index.has(to)) {
          index.set(to, next)
          low.set(to, next++)
          stack.push(to)
          onStack.add(to)
          work.push({ node: to, edge: 0 })
        } else if (onStack.has(to)) low.set(top.node, Math.min(low.get(top.node)!, index.get(to)!))
        continue
      }
      work.pop()
      const parent = work[work.length - 1]
      if (parent !== undefined) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(top.node)!))
      if (low.get(top.node) === index.get(top.node)) {
        const component: string[] = []
        let n: string
        do {
          n = stack.pop()!
          onStack.delete(n)
          component.push(n)
        } while (n !== top.node)
        components.push(component.sort())
      }
    }
  }
  return components
    .filter((c) => c.length > 1 || (graph.get(c[0]!) ?? []).includes(c[0]!))
    .map((c) => shortestWayRound(graph, c[0]!, new Set(c)).join(' -> '))
    .sort()
}

/** The shortest path from `from` back to itself inside `within` (breadth first). */
function shortestWayRound(graph: ReadonlyMap<string, readonly string[]>, from: string, within: ReadonlySet<string>): string[] {
  const cameFrom = new Map<string, string>()
  const queue = [from]
  for (let i = 0; i < queue.length; i++) {
    const n = queue[i]!
    for (const to of graph.get(n) ?? []) {
      if (!within.has(to)) continue
      if (to === from) {
        const path = [from]
        for (let p: string | undefined = n; p !== undefined && p !== from; p = cameFrom.get(p)) path.unshift(p)
        return [from, ...path]
      }
      if (!cameFrom.has(to)) {
        cameFrom.set(to, n)
        queue.push(to)
      }
    }
  }
  return [from, from]
}

/** Every import of a file `from` accepts into a file `to` accepts, as `a.ts -> b.ts`: the edges a layering rule forbids. */
export function crossings(graph: ReadonlyMap<string, readonly string[]>, from: (file: string) => boolean, to: (file: string) => boolean): string[] {
  return [...graph].flatMap(([f, targets]) => (from(f) ? targets.filter(to).map((t) => `${f} -> ${t}`) : [])).sort()
}
