// The core (router, options, hashes, native binding, errors, routing keys) is what gateways
// embed: it must load without the proxy, the simulator, replay, the CLI or fleet management,
// so a stray import from there would drag a server into every embedding.
import { readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
// Static imports and re-exports (also `import type`), side-effect imports and dynamic import().
import { specifiers, tsFiles } from '../helpers/import-graph.js'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..')
const core = join(root, 'src/core')
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }

/** Why `spec`, imported by `file`, leaves the core; undefined when it stays inside. */
function violation(file: string, spec: string): string | undefined {
  if (spec.startsWith('.')) {
    const target = resolve(dirname(file), spec)
    return target === core || target.startsWith(core + sep) ? undefined : `reaches ${relative(root, target)}`
  }
  if (spec.startsWith('node:') || builtinModules.includes(spec)) return undefined
  const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!
  return name in pkg.dependencies ? undefined : `imports ${spec}, not a runtime dependency`
}

describe('src/core layering', () => {
  const files = tsFiles(core)

  it('finds the core modules', () => {
    const names = files.map((f) => relative(core, f))
    expect(names).toEqual(expect.arrayContaining(['router.ts', 'options.ts', 'hash.ts', 'native.ts', 'errors.ts', join('key', 'index.ts'), join('key', 'openai-key.ts')]))
  })

  it('imports only from src/core, node: builtins and npm dependencies', () => {
    const bad: string[] = []
    for (const f of files) {
      for (const spec of specifiers(readFileSync(f, 'utf8'))) {
        const why = violation(f, spec)
        if (why !== undefined) bad.push(`${relative(root, f)}: '${spec}' ${why}`)
      }
    }
    expect(bad).toEqual([])
  })

  it('catches an import that leaves the core', () => {
    const f = join(core, 'key', 'x.ts')
    const found = specifiers(`import { a } from '../../proxy/errors.js'\nexport * from "./ok.js"\nconst m = await import('../../sim/index.js')\nimport 'left-pad'\n`)
    expect(found).toEqual(['../../proxy/errors.js', './ok.js', '../../sim/index.js', 'left-pad'])
    expect(found.map((s) => violation(f, s) !== undefined)).toEqual([true, false, true, true])
    expect(violation(f, 'node:fs')).toBeUndefined()
    expect(violation(f, 'zod')).toBeUndefined()
  })
})

// The fleet's endpoint refuses requests with RequestError (as the routing keys in src/core/key
// do); the proxy alone turns that into HTTP, so the endpoint must not reach for its errors.
describe('the fleet endpoint does not import the proxy', () => {
  it('src/fleet/endpoint.ts imports nothing from src/proxy', () => {
    const f = join(root, 'src/fleet/endpoint.ts')
    const proxy = join(root, 'src/proxy')
    const bad = specifiers(readFileSync(f, 'utf8')).filter((s) => s.startsWith('.') && resolve(dirname(f), s).startsWith(proxy + sep))
    expect(bad).toEqual([])
  })
})
