// No two files of src/ may import each other, directly or round a longer circle. A circle
// makes load order matter (one side sees the other's exports as undefined while both load)
// and welds the files together, so neither can be read, tested or moved alone. Type-only
// imports count too: they cost nothing at run time, but a type that both sides need belongs
// in a file both import, and a circle through types is where a runtime one starts.
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { brokenRules, circles, importEdges, importGraph, importNames, specifiers, type ImportEdge, type LayerRule } from '../helpers/import-graph.js'

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
