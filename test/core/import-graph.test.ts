// No two files of src/ may import each other, directly or round a longer circle. A circle
// makes load order matter (one side sees the other's exports as undefined while both load)
// and welds the files together, so neither can be read, tested or moved alone. Type-only
// imports count too: they cost nothing at run time, but a type that both sides need belongs
// in a file both import, and a circle through types is where a runtime one starts.
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { circles, crossings, importGraph, specifiers } from '../helpers/import-graph.js'

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
