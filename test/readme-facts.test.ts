// What the README says about the picker's flags and the admin port, checked against the code
// it describes: a flag or a route added or refused without the README saying so fails here.
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { EPP_FLAGS } from '../src/commands/epp-flags.js'
import { FLAGS } from '../src/commands/flags.js'
import type { ProxyServer } from '../src/proxy/proxy.js'
import { closeRouter, startRouter } from './proxy/helpers.js'

const read = (path: string) => readFileSync(fileURLToPath(new URL(path, import.meta.url)), 'utf8')
const readme = read('../README.md')
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url))

/** The text between two markers of the README (both must be there). */
function section(from: string, to: string): string {
  const start = readme.indexOf(from)
  const end = readme.indexOf(to, start)
  expect(start, from).toBeGreaterThan(-1)
  expect(end, to).toBeGreaterThan(start)
  return readme.slice(start, end)
}

describe("the README's endpoint picker flags", () => {
  it('name every serve flag epp refuses, and epp does refuse each', () => {
    const refused = FLAGS.filter((f) => !EPP_FLAGS.some((e) => e.name === f.name)).map((f) => f.name)
    expect(refused).toContain('workers')
    const text = section("Its flags are serve's", '| Flag | Variable |')
    // --tls-cert and --tls-key are written together as --tls-*.
    expect(refused.filter((name) => !text.includes(name.startsWith('tls-') ? '`--tls-*`' : `\`--${name}\``))).toEqual([])
    for (const name of refused) {
      const r = spawnSync(process.execPath, [cli, 'epp', `--${name}`, ...(FLAGS.find((f) => f.name === name)!.kind === 'boolean' ? [] : ['1'])], { encoding: 'utf8' })
      expect([r.status, r.stderr], name).toEqual([2, expect.stringContaining(`unknown option '--${name}'`)])
    }
  })
})

describe("the README's admin port", () => {
  let router: ProxyServer | undefined
  afterEach(async () => {
    await closeRouter(router)
    router = undefined
  })

  // The routes as the admin server matches them (src/runtime/admin/admin.ts).
  const routes = [...read('../src/runtime/admin/admin.ts').matchAll(/req\.method === '(\w+)' && path === '([^']+)'/g)].map((m) => ({ method: m[1]!, path: m[2]! }))

  it('lists every route the admin server answers, and says that none is authenticated', () => {
    expect(routes.length).toBeGreaterThan(4)
    const text = section('### The admin port', '## Operating it')
    expect(routes.filter((r) => !text.includes(`\`${r.method} ${r.path}\``))).toEqual([])
    expect(text).toContain('with no')
    expect(text).toContain('authentication')
    // And the reference list of routes has each one.
    const list = section('- `GET /admin/instances`', '### Headers and logs')
    expect(routes.filter((r) => r.path !== '/metrics' && !list.includes(`\`${r.method} ${r.path}`))).toEqual([])
  })

  it('every one of them answers without a credential: none asks for one', async () => {
    router = await startRouter(['http://127.0.0.1:9'])
    for (const r of routes) {
      const res = await fetch(`${router.adminUrl}${r.path}`, { method: r.method, ...(r.method === 'POST' && { body: '{}' }) })
      await res.arrayBuffer()
      expect([401, 403], `${r.method} ${r.path}`).not.toContain(res.status)
      expect(res.headers.get('www-authenticate'), `${r.method} ${r.path}`).toBeNull()
    }
  })
})
