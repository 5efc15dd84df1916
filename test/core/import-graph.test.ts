// No two files of src/ may import each other, directly or round a longer circle. A circle
// makes load order matter (one side sees the other's exports as undefined while both load)
// and welds the files together, so neither can be read, tested or moved alone. Type-only
// imports count too: they cost nothing at run time, but a type that both sides need belongs
// in a file both import, and a circle through types is where a runtime one starts.
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { circles, importGraph, specifiers } from '../helpers/import-graph.js'
import { crossings } from '../helpers/forbidden-imports.js'

const src = join(resolve(dirname(fileURLToPath(import.meta.url)), '../..'), 'src')

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

  // The commands are the top: what they share with the cluster (the CLI's errors) lives below them.
  it('only cli.ts and the commands themselves import src/commands', () => {
    const bad = [...graph].flatMap(([from, to]) =>
      from === 'cli.ts' || from.startsWith('commands/') ? [] : to.filter((t) => t.startsWith('commands/')).map((t) => `${from} -> ${t}`),
    )
    expect(bad).toEqual([])
  })

  // Two fronts over one runtime: serve's HTTP front (proxy/) and the endpoint picker's ext_proc
  // front (epp/) each own their protocol, and what both use lives below them (request/, runtime/).
  it('no front imports the other front', () => {
    expect(crossings(graph, ['proxy'], ['epp'])).toEqual([])
    expect(crossings(graph, ['epp'], ['proxy'])).toEqual([])
  })

  it('the runtime, and what both fronts share below it, import neither front', () => {
    expect(crossings(graph, ['runtime', 'request', 'log'], ['proxy', 'epp'])).toEqual([])
  })

  // Turning a request into tokens is request/keying.ts's: the fleet knows instances and models.
  it('fleet/ imports nothing from tokens/', () => {
    expect(crossings(graph, ['fleet'], ['tokens'])).toEqual([])
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
    expect(crossings(g, ['proxy'], ['epp'])).toEqual(['proxy/handler.ts -> epp/subset.ts'])
    expect(crossings(g, ['epp'], ['proxy'])).toEqual(['epp/exchange.ts -> proxy/errors.ts'])
  })

  it('find the runtime importing a front', () => {
    expect(crossings(g, ['runtime', 'request'], ['proxy', 'epp'])).toEqual(['runtime/runtime.ts -> proxy/proxy.ts'])
  })

  it('find fleet/ importing tokens/, and name folders whole (proxyish/ is not proxy/)', () => {
    expect(crossings(g, ['fleet'], ['tokens'])).toEqual(['fleet/endpoint.ts -> tokens/index.ts'])
    expect(crossings(new Map([['proxyish/x.ts', ['epp/y.ts']]]), ['proxy'], ['epp'])).toEqual([])
    expect(crossings(new Map([['request/a.ts', ['request/b.ts']]]), ['request'], ['proxy', 'epp'])).toEqual([])
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
