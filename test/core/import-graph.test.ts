// No two files of src/ may import each other, directly or round a longer circle. A circle
// makes load order matter (one side sees the other's exports as undefined while both load)
// and welds the files together, so neither can be read, tested or moved alone. Type-only
// imports count too: they cost nothing at run time, but a type that both sides need belongs
// in a file both import, and a circle through types is where a runtime one starts.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { brokenRules, circles, crossings, importEdges, importGraph, importNames, specifiers, tsFiles, type ImportEdge, type LayerRule } from '../helpers/import-graph.js'
import { underscoreImports, underscoreImportsIn, underscoreMembers } from '../helpers/underscore-names.js'
import { folderCrossings } from '../helpers/forbidden-imports.js'

const src = join(resolve(dirname(fileURLToPath(import.meta.url)), '../..'), 'src')

/** The directions the imports of src/ may not take, each with its reason. */
const LAYERS: readonly LayerRule[] = [
  {
    from: '',
    except: ['cli.ts', 'commands/'],
    to: 'commands/',
    why: 'the commands are the top: what they share with the cluster (the CLI errors) lives below them',
  },
  { from: 'config/', to: 'fleet/', why: 'the configuration describes the fleet and the fleet reads it: the schemas live in config/' },
  { from: 'tokens/', to: 'sim/', why: "serve's tokenizers load no simulator code: the simulator imports the builtin tokenizers from tokens/" },
  { from: 'net/', to: 'config/', names: ['Config'], why: 'net/ takes the numbers it needs as parameters, not the configuration' },
]

describe('the import graph of src/', () => {
  const graph = importGraph(src)

  it('is read from every file, through static, dynamic and type-only imports', () => {
    expect(graph.get('index.ts')).toEqual(expect.arrayContaining(['core/router.ts']))
    // cli.ts loads each command with import(), and nothing else.
    expect(graph.get('cli.ts')).toEqual(expect.arrayContaining(['commands/serve.ts', 'commands/replay.ts']))
    expect(graph.size).toBeGreaterThan(200)
  })

  it('has no circles', () => {
    expect(circles(graph)).toEqual([])
  })

  it('imports in no direction the layers forbid', () => {
    expect(brokenRules(importEdges(src), LAYERS)).toEqual([])
  })

  // Two fronts over one runtime: serve's HTTP front (proxy/) and the endpoint picker's ext_proc
  // front (epp/) each own their protocol, and what both use lives below them (request/, runtime/).
  it('no front imports the other front', () => {
    expect(folderCrossings(graph, ['proxy'], ['epp'])).toEqual([])
    expect(folderCrossings(graph, ['epp'], ['proxy'])).toEqual([])
  })

  it('the runtime, and what both fronts share below it, import neither front', () => {
    expect(folderCrossings(graph, ['runtime', 'request', 'log'], ['proxy', 'epp'])).toEqual([])
  })

  // Turning a request into tokens is request/keying.ts's: the fleet knows instances and models.
  it('fleet/ imports nothing from tokens/', () => {
    expect(folderCrossings(graph, ['fleet'], ['tokens'])).toEqual([])
  })
})

describe('the layering rules', () => {
  const g = new Map([
    ['proxy/handler.ts', ['request/routes.ts', 'epp/subset.ts']],
    ['epp/exchange.ts', ['request/routes.ts', 'proxy/errors.ts']],
    ['runtime/runtime.ts', ['fleet/endpoint.ts', 'proxy/proxy.ts']],
    ['fleet/endpoint.ts', ['tokens/index.ts', 'fleet/instance.ts']],
    ['proxyish/x.ts', ['epp/y.ts']],
    ['request/routes.ts', []],
  ])

  it('find a front importing the other, in either direction', () => {
    expect(folderCrossings(g, ['proxy'], ['epp'])).toEqual(['proxy/handler.ts -> epp/subset.ts'])
    expect(folderCrossings(g, ['epp'], ['proxy'])).toEqual(['epp/exchange.ts -> proxy/errors.ts'])
  })

  it('find the runtime importing a front', () => {
    expect(folderCrossings(g, ['runtime', 'request'], ['proxy', 'epp'])).toEqual(['runtime/runtime.ts -> proxy/proxy.ts'])
  })

  it('find fleet/ importing tokens/, and name folders whole (proxyish/ is not proxy/)', () => {
    expect(folderCrossings(g, ['fleet'], ['tokens'])).toEqual(['fleet/endpoint.ts -> tokens/index.ts'])
    expect(folderCrossings(new Map([['proxyish/x.ts', ['epp/y.ts']]]), ['proxy'], ['epp'])).toEqual([])
    expect(folderCrossings(new Map([['request/a.ts', ['request/b.ts']]]), ['request'], ['proxy', 'epp'])).toEqual([])
  })
})

describe('the circle finder', () => {
  it('reads every kind of import and nothing in comments or strings', () => {
    const source = [
      "// import('./in-comment.js')",
      "import type { A } from './a.js'",
      "export * from './b.js'",
      "type C = typeof import('./c.js')",
      'const s = "from \'./in-string.js\'"',
      "const d = await import('./d.js')",
      "import './e.js'",
      "export type { F } from './f.js'",
    ].join('\n')
    expect(specifiers(source)).toEqual(['./a.js', './b.js', './c.js', './d.js', './e.js', './f.js'])
  })

  it('names each circle the shortest way round, and only circles', () => {
    const g = new Map([
      ['a.ts', ['b.ts', 'x.ts']],
      ['b.ts', ['c.ts', 'a.ts']],
      ['c.ts', ['a.ts']],
      ['d.ts', ['d.ts']],
      ['e.ts', ['f.ts']],
      ['f.ts', []],
      ['x.ts', ['f.ts']],
    ])
    expect(circles(g)).toEqual(['a.ts -> b.ts -> a.ts', 'd.ts -> d.ts'])
    expect(circles(new Map([['p.ts', ['q.ts']], ['q.ts', ['r.ts']], ['r.ts', ['p.ts']]]))).toEqual(['p.ts -> q.ts -> r.ts -> p.ts'])
    expect(circles(new Map([['p.ts', ['q.ts']], ['q.ts', []]]))).toEqual([])
  })
})

describe('the layer rules', () => {
  it('read the names each import takes', () => {
    const source = [
      "import type { Config, ConfigError as E } from './a.js'",
      "import d, { b } from './b.js'",
      "import * as c from './c.js'",
      "export { e as f } from './e.js'",
      "export * from './g.js'",
      "type H = typeof import('./h.js')",
      "const i = await import('./i.js')",
      "import './j.js'",
    ].join('\n')
    expect(importNames(source)).toEqual([
      { spec: './a.js', names: ['Config', 'ConfigError'] },
      { spec: './b.js', names: ['default', 'b'] },
      { spec: './c.js', names: ['*'] },
      { spec: './e.js', names: ['e'] },
      { spec: './g.js', names: ['*'] },
      { spec: './h.js', names: ['*'] },
      { spec: './i.js', names: ['*'] },
      { spec: './j.js', names: [] },
    ])
  })

  it('each catches an import that breaks it', () => {
    for (const rule of LAYERS) {
      const from = `${rule.from}x.ts`
      const edges = new Map([[from, [{ to: `${rule.to}y.ts`, names: [...(rule.names ?? ['y'])] }]]])
      expect(brokenRules(edges, [rule]), rule.why).toHaveLength(1)
    }
  })

  it('let through what they allow', () => {
    const edges = new Map<string, ImportEdge[]>([
      ['config/config.ts', [{ to: 'fleet/probe.ts', names: ['probe'] }, { to: 'core/options.ts', names: ['LIMITS'] }]],
      ['fleet/probe.ts', [{ to: 'config/config.ts', names: ['Config'] }]],
      ['tokens/builtin.ts', [{ to: 'sim/request.ts', names: ['*'] }]],
      ['sim/request.ts', [{ to: 'tokens/builtin-ids.ts', names: ['promptText'] }]],
      ['net/a.ts', [{ to: 'config/config.ts', names: ['Config'] }]],
      ['net/b.ts', [{ to: 'config/config.ts', names: ['*'] }]],
      ['net/c.ts', [{ to: 'config/config.ts', names: ['ConfigError'] }, { to: 'config/x.ts', names: [] }]],
      ['proxy/proxy.ts', [{ to: 'commands/serve.ts', names: ['serve'] }]],
      ['cli.ts', [{ to: 'commands/serve.ts', names: ['*'] }]],
      ['commands/serve.ts', [{ to: 'commands/flags.ts', names: ['FLAGS'] }]],
    ])
    expect(brokenRules(edges, LAYERS).map((l) => l.split(':')[0])).toEqual([
      'config/config.ts -> fleet/probe.ts (probe)',
      'net/a.ts -> config/config.ts (Config)',
      'net/b.ts -> config/config.ts (*)',
      'proxy/proxy.ts -> commands/serve.ts (serve)',
      'tokens/builtin.ts -> sim/request.ts (*)',
    ])
  })
})

// A name starting with `_` is its module's own: no other module imports it, re-exports it, or
// calls it as a member (`router.pickWith(...)`), however it got hold of the object.
describe('names starting with _', () => {
  it('are imported by no file of src/ from another module', () => {
    expect(underscoreImportsIn(src)).toEqual([])
  })

  it('are reached as members only inside the file that declares them', () => {
    expect(underscoreMembers(tsFiles(src), src)).toEqual([])
  })

  it('are found in import and export statements, and on namespace imports, and nowhere else', () => {
    const source = [
      "import { _a, b, c as _c, _d as d, type _E } from './m.js'",
      "import * as ns from './n.js'",
      "import def from './o.js'",
      "export { _f } from './p.js'",
      "export { g as _g } from './q.js'",
      "// import { _inComment } from './r.js'",
      "const s = \"import { _inString } from './s.js'\"",
      'ns._h(); ns.i(); def._notImported()',
    ].join('\n')
    // `c as _c` takes c, `_d as d` takes _d: the name the other module exports is what counts.
    expect(underscoreImports(source)).toEqual([`_a from './m.js'`, `_d from './m.js'`, `_E from './m.js'`, `_f from './p.js'`, '_h from ns.*'])
  })

  it('are found as members declared in another file, through an instance of an imported class', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pr-underscore-'))
    try {
      writeFileSync(join(dir, 'owner.ts'), 'export class Owner {\n  _inner(): number { return 1 }\n  outer(): number { return this._inner() }\n}\n')
      writeFileSync(join(dir, 'user.ts'), "import { Owner } from './owner.js'\nconst o = new Owner()\nexport const a = o.outer()\nexport const b = o._inner()\n")
      expect(underscoreMembers([join(dir, 'owner.ts'), join(dir, 'user.ts')], dir)).toEqual(['user.ts:4: o._inner (declared in owner.ts)'])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

// An endpoint's owner writes membership and health, its views pick; what lies below them in
// fleet/ (the exact view's events, the engines' load, share-load, discovery) is used by them
// and reads them, when it must, through a narrow interface defined beside itself.
const ENDPOINT = new Set(['fleet/endpoint.ts', 'fleet/local-endpoint.ts', 'fleet/owner.ts'])
/** A file in a folder of fleet/, not fleet/ itself. */
const belowFleet = (f: string) => f.startsWith('fleet/') && f.split('/').length > 2
/** A file of fleet/ itself: the endpoint's owner, its views and what they share. */
const inFleet = (f: string) => f.startsWith('fleet/') && f.split('/').length === 2

describe("the fleet's layers", () => {
  const graph = importGraph(src)

  it("the folders of fleet/ import neither the endpoint's owner nor its views (their metrics read an interface of their own)", () => {
    expect(crossings(graph, belowFleet, (t) => ENDPOINT.has(t))).toEqual([])
  })

  it("the endpoint's owner and views import nothing of discovery: a source feeds the owner through the owner's own interface", () => {
    expect(crossings(graph, inFleet, (t) => t.startsWith('fleet/discovery/'))).toEqual([])
  })

  it('the layer checker names each forbidden import, and only those', () => {
    const g = new Map([
      ['fleet/endpoint.ts', ['fleet/discovery/source.ts', 'fleet/instance.ts']],
      ['fleet/owner.ts', ['fleet/host-entry.ts']],
      ['fleet/load/metrics.ts', ['fleet/endpoint.ts', 'fleet/load/scraper.ts']],
      ['fleet/events/metrics.ts', ['fleet/events/exact-view.ts']],
      ['fleet/discovery/source.ts', ['fleet/host-entry.ts']],
    ])
    expect(crossings(g, belowFleet, (t) => ENDPOINT.has(t))).toEqual(['fleet/load/metrics.ts -> fleet/endpoint.ts'])
    expect(crossings(g, inFleet, (t) => t.startsWith('fleet/discovery/'))).toEqual(['fleet/endpoint.ts -> fleet/discovery/source.ts'])
    expect(crossings(new Map([['fleet/owner.ts', ['fleet/host-entry.ts']]]), inFleet, (t) => t.startsWith('fleet/discovery/'))).toEqual([])
  })
})
